#!/usr/bin/env bash
# Regenerates src/simgpu/proc_table.inc from a CUDA toolkit's cudaTypedefs.h (facts of the ABI:
# which variant of each base name exists from which CUDA version). Run by hand when simgpu grows a
# new entry point; the build never needs the toolkit.
#   tools/gen_sim_proc_table.sh /usr/local/cuda/include/cudaTypedefs.h > src/simgpu/proc_table.inc
set -euo pipefail
typedefs=${1:-/usr/local/cuda/include/cudaTypedefs.h}
root=$(cd "$(dirname "$0")/.." && pwd)
exports=$(grep -oE '^CUresult (cu[A-Za-z0-9_]+)\(' "$root/src/driver/cuda_api.h" | sed 's/CUresult //; s/(//' | sort -u)
bases=$(echo "$exports" | sed -E 's/_(ptsz|ptds)$//; s/_v[0-9]+$//' | sort -u)
echo "// Generated once from the public cudaTypedefs.h (CUDA 13.0) by tools/gen_sim_proc_table.sh: for each"
echo "// base name simgpu implements, the CUDA version at which each exported variant was introduced."
echo "// Rows are {base name, version, exported symbol}; a row whose symbol simgpu does not export resolves"
echo "// to no function. Facts of the public ABI, not code."
for b in $bases; do
  i=0
  for v in $(grep -oE "PFN_${b}_v[0-9]+\)" "$typedefs" | sed -E "s/PFN_${b}_v//; s/\)//" | sort -un); do
    i=$((i + 1))
    if [ $i = 1 ]; then s=$b; else s=${b}_v$i; fi
    printf '{"%s", %s, "%s"},\n' "$b" "$v" "$s"
  done
done
# cuda.h 12.0+ maps cuGraphInstantiate to cuGraphInstantiateWithFlags.
echo '{"cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags"},'
