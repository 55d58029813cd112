# Sourced by the run_*_check.sh scripts with the log's file name: the common start of a real-GPU
# check. Sets `out` and `python`, tees everything after it to $out/$1, stops (exit 2) where
# PyTorch has no CUDA device, lists the GPUs and builds into build-gpu the shims (a compiler,
# CMake and Ninja are all they need), tesserad and the CLI. Changes no GPU setting.
#
# tesserad and the CLI need yaml-cpp, nlohmann-json, cpp-httplib and CLI11. A GPU machine has no
# Debian -dev packages, so they come as .deb files that docs/validation/fetch_packages.sh
# downloaded on a Debian 12 machine into docs/validation/debs (or $TESSERA_DEBS); they are
# unpacked here into build-gpu/deps (dpkg-deb -x, or ar + tar where dpkg is missing: nothing is
# installed, no root needed) and the build finds them there first. tesserad keeps their directory
# in its RPATH (DT_RPATH, which also serves libcpp-httplib's own OpenSSL and brotli), so it runs
# without LD_LIBRARY_PATH; PyTorch's processes never see them. The .debs are Debian 12's: the
# machine needs glibc 2.36 or later. Without the folder, the machine's own packages are used.
out=${OUT:-docs/validation/out}
mkdir -p "$out"
exec > >(tee "$out/$1") 2>&1
python=${PYTHON:-python3}
"$python" -c 'import torch; assert torch.cuda.is_available(); print("torch", torch.__version__)' || {
  echo "no PyTorch with CUDA here: cannot run the check"; exit 2; }
nvidia-smi -L
debs=${TESSERA_DEBS:-docs/validation/debs}
deps=$PWD/build-gpu/deps
cmake_args=(-DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF)
if compgen -G "$debs/*.deb" >/dev/null; then
  rm -rf "$deps"
  mkdir -p "$deps"
  for deb in "$debs"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$deps"
    else
      deb=$(realpath "$deb")
      (cd "$deps" && ar p "$deb" "$(ar t "$deb" | grep '^data\.tar')" | tar -xJ)
    fi
  done
  # The .pc files say prefix=/usr; here it is the unpacked tree.
  sed -i "s|^prefix=/usr\$|prefix=$deps/usr|" "$deps"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc \
    "$deps"/usr/share/pkgconfig/*.pc 2>/dev/null || true
  export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig
  # The unpacked pkgconf with its own library (CMake would otherwise find it in the prefix and
  # run it without), whether or not the machine has a pkg-config.
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$deps/usr/lib/x86_64-linux-gnu" \
    "$deps/usr/bin/pkgconf" >"$deps/pkg-config"
  chmod +x "$deps/pkg-config"
  cmake_args+=(-DPKG_CONFIG_EXECUTABLE="$deps/pkg-config" -DCMAKE_PREFIX_PATH="$deps/usr"
               -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags)
fi
cmake -S . -B build-gpu -G Ninja "${cmake_args[@]}" | grep -E '^-- tessera:' || true
cmake --build build-gpu --target tessera tesserad tessera_cuda_shim tessera_nvml_shim
