#!/usr/bin/env bash
# Compares data/nvml_symbols.txt with the nvml* functions a real libnvidia-ml.so.1 exports.
#
# data/nvml_symbols.txt was assembled from public headers and bindings (see data/README.md),
# because no NVML library ships with the CUDA toolkit's stubs. On a machine with an NVIDIA driver,
# this script lists what that driver's NVML really exports, so the list can be checked and extended.
#
# Usage: tools/gen_nvml_symbols.sh [LIB]             print LIB's nvml* functions, byte-sorted
#        tools/gen_nvml_symbols.sh --missing [LIB]   print names LIB exports that the checked-in
#                                                    list lacks; exit 1 if there are any
# LIB defaults to the libnvidia-ml.so.1 that ldconfig knows about.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
missing=0
if [[ "${1:-}" == "--missing" ]]; then
  missing=1
  shift
fi
lib="${1:-$(ldconfig -p 2>/dev/null | awk '$1 == "libnvidia-ml.so.1" { print $NF; exit }')}"
if [[ -z "$lib" || ! -f "$lib" ]]; then
  echo "gen_nvml_symbols: LIB='${lib}': no libnvidia-ml.so.1 found; pass its path" >&2
  exit 2
fi

exports() {
  nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" || $2 == "i" { print $3 }' |
    sed 's/@.*//' | grep -E '^nvml[A-Z][A-Za-z0-9_]*$' | LC_ALL=C sort -u
}

if [[ "$missing" == 1 ]]; then
  absent="$(LC_ALL=C comm -23 <(exports) "$repo/data/nvml_symbols.txt")"
  if [[ -n "$absent" ]]; then
    echo "$absent"
    echo "gen_nvml_symbols: $(wc -l <<<"$absent") name(s) exported by $lib are not in data/nvml_symbols.txt" >&2
    exit 1
  fi
  echo "gen_nvml_symbols: every nvml* function of $lib is in data/nvml_symbols.txt" >&2
else
  exports
fi
