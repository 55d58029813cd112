# Sourced by the run_*_check.sh scripts with the log's file name: the common start of a real-GPU
# check. Sets `out` and `python`, tees everything after it to $out/$1, stops (exit 2) where
# PyTorch has no CUDA device, lists the GPUs and builds into build-gpu only what needs no Debian
# -dev package (the shims, tesserad, the CLI). Changes no GPU setting.
out=${OUT:-docs/validation/out}
mkdir -p "$out"
exec > >(tee "$out/$1") 2>&1
python=${PYTHON:-python3}
"$python" -c 'import torch; assert torch.cuda.is_available(); print("torch", torch.__version__)' || {
  echo "no PyTorch with CUDA here: cannot run the check"; exit 2; }
nvidia-smi -L
cmake -S . -B build-gpu -G Ninja -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF >/dev/null
cmake --build build-gpu --target tessera tesserad tessera_cuda_shim tessera_nvml_shim
