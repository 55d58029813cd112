#!/usr/bin/env bash
# Reproduces the placement numbers of docs/placement.md: the GPU allocation ratio at 100 %
# arrived workload, mean over seeds 42-51, of each policy on the default openb trace and on the
# resampled variants (tools/openb_variants.py), as a Markdown table.
#
# usage: tools/placement_eval.sh [--policies P1,P2..] [--seeds A-B] [--variants "v1 v2 .."]
#   defaults: --policies tessera,fgd,bestfit  --seeds 42-51  --variants: all of openb_variants.py
# Needs build/bin/tessera (scripts/dev demo, or any build); the trace is data/openb.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tessera=${TESSERA:-$repo/build/bin/tessera}
data=${TESSERA_OPENB_DIR:-$repo/data/openb}
out=${OUT:-$repo/build/openb-variants}
policies=tessera,fgd,bestfit
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

mean_at_100() {  # JSON Lines on stdin -> "policy mean" per policy, in input order
  python3 -c '
import json, sys
runs = {}
for line in sys.stdin:
    r = json.loads(line)
    runs.setdefault(r["policy"], []).append(r["allocation_ratio"]["100"])
for p, v in runs.items():
    print(p, "%.2f" % (sum(v) / len(v)))
'
}

header="| trace |"
rule="|---|"
for p in ${policies//,/ }; do header="$header $p |"; rule="$rule---:|"; done
echo "$header"
echo "$rule"
for v in default $variants; do
  pods=$data/openb_pod_list_default.csv
  [ "$v" = default ] || pods=$out/openb_pod_list_$v.csv
  row="| $v |"
  while read -r _ mean; do row="$row $mean |"; done < <(
    "$tessera" sim --nodes "$data/openb_node_list_gpu_node.csv" --pods "$pods" \
      --policy "$policies" --seeds "$seeds" --json | mean_at_100)
  echo "$row"
done
