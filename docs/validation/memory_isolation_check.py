"""Real-GPU check of Tessera's memory isolation with PyTorch (issue 3).

Run by docs/validation/run_gpu_checks.sh (memory) under `tessera run --mem 4GiB`, once per allocator
configuration (native, expandable_segments, cudaMallocAsync). Prints one JSON object with what it
saw; exits 0 only when every check held:
  - torch.cuda.mem_get_info() reports a 4 GiB total;
  - allocating 5 GiB raises torch.OutOfMemoryError (and 3 GiB succeeds);
  - a small training loop runs (its step time is reported for the < 1 % overhead comparison).
"""
import json
import os
import sys
import time

import torch

GIB = 1 << 30


def main() -> int:
    result = {"allocator": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "native")}
    free, total = torch.cuda.mem_get_info()
    result["mem_get_info_total"] = total
    result["total_is_4gib"] = total == 4 * GIB

    ok_small = torch.empty(3 * GIB, dtype=torch.uint8, device="cuda")
    del ok_small
    torch.cuda.empty_cache()
    try:
        torch.empty(5 * GIB, dtype=torch.uint8, device="cuda")
        result["oom_at_5gib"] = False
    except torch.OutOfMemoryError:
        result["oom_at_5gib"] = True
    torch.cuda.empty_cache()

    model = torch.nn.Sequential(
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 4096, device="cuda")
    for _ in range(20):  # warm-up
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    steps = 200
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    result["train_step_ms"] = (time.perf_counter() - start) / steps * 1000
    print(json.dumps(result))
    return 0 if result["total_is_4gib"] and result["oom_at_5gib"] else 1


if __name__ == "__main__":
    sys.exit(main())
