#!/usr/bin/env bash
# Real-GPU validation of memory isolation (issue 3). Run from the repository root on a machine with
# an NVIDIA GPU, its driver, cmake, ninja and a Python with PyTorch (and the Debian packages that
# fetch_packages.sh downloaded; see setup.sh). Builds the shims, tesserad and the CLI, then:
#   1. the PyTorch check under a 4 GiB cap, for the native allocator, expandable_segments and
#      cudaMallocAsync;
#   2. nvidia-smi under the NVML shim inside the container (shows the 4 GiB limit);
#   3. the training loop's step time with and without the shim (overhead, target < 1 %).
# Writes everything to ${OUT:-docs/validation/out}/memory_check.txt. Changes no GPU setting.
set -euo pipefail
# shellcheck source=docs/validation/setup.sh
source docs/validation/setup.sh memory_check.txt
sock=/tmp/tessera-validation.sock
build-gpu/bin/tesserad --socket "$sock" --ephemeral &
daemon=$!
trap 'kill $daemon 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
export TESSERA_SOCKET=$sock
status=0
for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
  echo "== allocator: ${conf:-native} =="
  PYTORCH_CUDA_ALLOC_CONF=$conf build-gpu/bin/tessera run --mem 4GiB --container validation -- \
    "$python" docs/validation/memory_isolation_check.py || status=1
done
echo "== nvidia-smi inside the container =="
LD_PRELOAD=$PWD/build-gpu/lib/tessera/libnvidia-ml.so.1 TESSERA_CONTAINER=validation \
  nvidia-smi --query-gpu=memory.total,memory.used --format=csv || status=1
echo "== training step without the shim (baseline) =="
"$python" - <<'PY'
import torch, time
m = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
o = torch.optim.SGD(m.parameters(), lr=1e-3); x = torch.randn(256, 4096, device="cuda")
for _ in range(20): o.zero_grad(); m(x).square().mean().backward(); o.step()
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(200): o.zero_grad(); m(x).square().mean().backward(); o.step()
torch.cuda.synchronize(); print({"baseline_train_step_ms": (time.perf_counter() - t) / 200 * 1000})
PY
exit $status
