#!/usr/bin/env bash
# Reproduces the placement tables of docs/placement.md: the GPU allocation ratio at 100 % arrived
# workload, mean over seeds 42-51, of each policy on the default openb trace and on the resampled
# variants (tools/openb_variants.py), as a Markdown table. With two or more policies, the last
# column is the smallest per-seed margin of the first policy over the second (positive: the first
# allocates more on every seed).
#
# usage: tools/placement_eval.sh [--policies P1,P2..] [--seeds A-B] [--variants "v1 v2 .."]
#   defaults: --policies tessera,fgd  --seeds 42-51  --variants: all of openb_variants.py
# Needs build/bin/tessera (scripts/dev demo, or any build); the trace is data/openb
# ($TESSERA_OPENB_DIR for another copy). The variants are written to build/openb-variants.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tessera=${TESSERA:-$repo/build/bin/tessera}
data=${TESSERA_OPENB_DIR:-$repo/data/openb}
out=${OUT:-$repo/build/openb-variants}
policies=tessera,fgd
seeds=42-51
variants=""
while [ $# -gt 0 ]; do
  case "$1" in
    --policies) policies=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    *) echo "placement_eval: unknown argument \"$1\"; see the header of $0" >&2; exit 2 ;;
  esac
done
[ -x "$tessera" ] || { echo "placement_eval: $tessera is missing; build first" >&2; exit 1; }
[ -n "$variants" ] || variants=$(python3 "$repo/tools/openb_variants.py" --list | tr '\n' ' ')
# shellcheck disable=SC2086
python3 "$repo/tools/openb_variants.py" --data "$data" --out "$out" $variants >/dev/null

row_of() {  # JSON Lines on stdin -> " mean | mean | ... | smallest margin |"
  python3 -c '
import json, sys
runs = {}
for line in sys.stdin:
    r = json.loads(line)
    runs.setdefault(r["policy"], {})[r["seed"]] = r["allocation_ratio"]["100"]
policies = list(runs)
cells = ["%.2f" % (sum(v.values()) / len(v)) for v in runs.values()]
if len(policies) >= 2:
    a, b = runs[policies[0]], runs[policies[1]]
    cells.append("%+.2f" % min(a[s] - b[s] for s in a))
print(" " + " | ".join(cells) + " |")
'
}

header="| trace |"
rule="|---|"
for p in ${policies//,/ }; do header="$header $p |"; rule="$rule---:|"; done
if [[ "$policies" == *,* ]]; then
  header="$header ${policies%%,*} − $(echo "$policies" | cut -d, -f2), smallest per seed |"
  rule="$rule---:|"
fi
echo "$header"
echo "$rule"
for v in default $variants; do
  pods=$data/openb_pod_list_default.csv
  [ "$v" = default ] || pods=$out/openb_pod_list_$v.csv
  echo "| $v |$("$tessera" sim --nodes "$data/openb_node_list_gpu_node.csv" --pods "$pods" \
      --policy "$policies" --seeds "$seeds" --json | row_of)"
done
