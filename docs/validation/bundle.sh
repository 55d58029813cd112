#!/usr/bin/env bash
# Run HERE (the Debian 12 development machine, x86-64), before going to a GPU machine: builds
# tesserad, the CLI, both shims and shim_real_bench in build/ and copies them with the shared
# libraries tesserad needs beyond glibc and libstdc++ into docs/validation/bundle/ (ignored by
# git), laid out as the CLI expects (bin/, lib/tessera/). tesserad is started through a wrapper
# that puts bundle/deps on its library path only; the CLI and the shims need nothing but glibc,
# so the tenants' processes never see the Debian libraries. The GPU machine needs glibc 2.36 or
# later. run_gpu_checks.sh uses the bundle when it is there and builds with setup.sh otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --build build -j"$(nproc)" --target tesserad tessera tessera_cuda_shim tessera_nvml_shim \
  shim_real_bench
bundle=docs/validation/bundle
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib/tessera" "$bundle/deps"
strip -o "$bundle/bin/tesserad.bin" build/bin/tesserad
strip -o "$bundle/bin/tessera" build/bin/tessera
strip -o "$bundle/bin/shim_real_bench" build/bench/shim_real_bench
for so in libcuda.so.1 libnvidia-ml.so.1; do
  strip -o "$bundle/lib/tessera/$so" "build/lib/tessera/$so"
done
# Everything tesserad links but glibc's own libraries and libstdc++/libgcc (a newer GPU machine
# has newer ones, which serve older programs).
ldd build/bin/tesserad | awk '$3 ~ /^\// { print $3 }' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|ld-linux*) ;;
    *) cp -L "$lib" "$bundle/deps/" ;;
  esac
done
cat >"$bundle/bin/tesserad" <<'SH'
#!/bin/sh
# tesserad with the Debian libraries it was linked against (bundle/deps) on its library path.
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/tesserad.bin" "$@"
SH
chmod +x "$bundle/bin/tesserad"
du -sh "$bundle"
ls -R "$bundle"
