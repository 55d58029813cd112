#!/usr/bin/env bash
# Regenerates data/cuda_driver_symbols.txt, the cu* functions libcuda.so.1 exports.
#
# The list is the union of two parts:
#   1. the cu* functions a CUDA driver stub exports (default: the CUDA toolkit's
#      lib64/stubs/libcuda.so; pass another stub or a real libcuda.so.1 as STUB), and
#   2. data/cuda_driver_symbols_12x.txt: names that 12.x drivers export and the 13.0 stub does not
#      (see data/README.md for where they come from).
# Names are sorted in byte order (LC_ALL=C), one per line. Only function symbols whose name
# matches ^cu[A-Z] are taken: the driver's debugger variables (cudbg*) and anything else are left
# out on purpose.
#
# Usage: tools/gen_cuda_symbols.sh [STUB]            print the list on stdout
#        tools/gen_cuda_symbols.sh --check [STUB]    exit 1 and show a diff if the checked-in
#                                                    list differs from the regenerated one
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="$repo/data"
check=0
if [[ "${1:-}" == "--check" ]]; then
  check=1
  shift
fi
stub="${1:-${CUDA_HOME:-/usr/local/cuda}/lib64/stubs/libcuda.so}"

if [[ ! -f "$stub" ]]; then
  echo "gen_cuda_symbols: STUB=$stub: no such file; pass the path of a libcuda.so stub or driver" >&2
  exit 2
fi
command -v nm >/dev/null || { echo "gen_cuda_symbols: nm not found (apt-get install binutils)" >&2; exit 2; }

generate() {
  {
    # Defined dynamic symbols of type T (text): functions only.
    nm -D --defined-only "$stub" | awk '$2 == "T" || $2 == "W" || $2 == "i" { print $3 }' |
      sed 's/@.*//' | grep -E '^cu[A-Z][A-Za-z0-9_]*$'
    grep -E '^cu[A-Z][A-Za-z0-9_]*$' "$data/cuda_driver_symbols_12x.txt"
  } | LC_ALL=C sort -u
}

if [[ "$check" == 1 ]]; then
  if ! diff -u "$data/cuda_driver_symbols.txt" <(generate); then
    echo "gen_cuda_symbols: data/cuda_driver_symbols.txt is out of date; regenerate with" >&2
    echo "  tools/gen_cuda_symbols.sh $stub > data/cuda_driver_symbols.txt" >&2
    exit 1
  fi
  echo "gen_cuda_symbols: data/cuda_driver_symbols.txt matches $stub + 12.x additions"
else
  generate
fi
