# The device plugin's real-cluster check, inside a pod (run by run_kubernetes_check.sh): what the
# pod's GPU looks like through the shim, where allocation stops, and its matmul rate over a common
# window (for the 30/70 split). Prints one JSON line. Needs PyTorch with CUDA.
import json, os, sys, time

import torch

out = {"pod": os.environ.get("POD_NAME", "?")}
free, total = torch.cuda.mem_get_info()
out["mem_get_info_total"] = total
chunks, err = [], None
try:
    while True:
        chunks.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError as e:  # the shim's CUDA_ERROR_OUT_OF_MEMORY
    err = type(e).__name__
out["allocated_before_oom"] = len(chunks) * (64 << 20)
out["oom"] = err
del chunks
torch.cuda.empty_cache()
start = float(sys.argv[1]) if len(sys.argv) > 1 else time.time()
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
a = torch.randn(4096, 4096, device="cuda")
while time.time() < start:
    time.sleep(0.01)
n = 0
while time.time() < start + seconds:
    a @ a
    n += 1
    if n % 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
out["matmuls_per_s"] = n / seconds
print(json.dumps(out), flush=True)
