#!/usr/bin/env bash
# Real-GPU validation of compute isolation (issue 4). Run from the repository root on a machine with
# an NVIDIA GPU, its driver, cmake, ninja and a Python with PyTorch (and the Debian packages that
# fetch_packages.sh downloaded; see setup.sh). Builds the shims, tesserad and the CLI, then runs a
# PyTorch matmul loop
# (docs/validation/compute_isolation_check.py, SECONDS_PER_RUN seconds each, default 20):
#   1. alone without the shim, and alone under `tessera run` (the single-tenant overhead);
#   2. two at once under policy 3 with --core 30 and --core 70;
#   3. two at once under policy 2 with --weight 1 and --weight 2;
# and reports each tenant's throughput relative to running alone and the achieved split.
# Every phase has a private tesserad. Writes everything to ${OUT:-docs/validation/out}/
# compute_check.txt. Changes no GPU setting.
set -euo pipefail
# shellcheck source=docs/validation/setup.sh
source docs/validation/setup.sh compute_check.txt
seconds=${SECONDS_PER_RUN:-20}
check=docs/validation/compute_isolation_check.py
sock=/tmp/tessera-compute-validation.sock
export TESSERA_SOCKET=$sock
daemon=
stop_daemon() {
  if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
  daemon=
}
start_daemon() {  # POLICY
  stop_daemon
  rm -f "$sock"
  build-gpu/bin/tesserad --socket "$sock" --ephemeral --policy "$1" &
  daemon=$!
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
  echo "tesserad did not start"; exit 1
}
trap stop_daemon EXIT
results="$out/compute_results.jsonl"
: >"$results"
start_at() { "$python" -c 'import time; print(time.time() + 20)'; }

echo "== alone, without the shim =="
"$python" "$check" --name alone-native --seconds "$seconds" | tee -a "$results"
echo "== alone, under tessera run (policy 3, no core limit) =="
start_daemon 3
build-gpu/bin/tessera run --container solo -- \
  "$python" "$check" --name alone-shim --seconds "$seconds" | tee -a "$results"

echo "== policy 3 (fixed percentage): --core 30 and --core 70 at once =="
start_daemon 3
at=$(start_at)
build-gpu/bin/tessera run --core 30 --container p3-30 -- \
  "$python" "$check" --name p3-30 --seconds "$seconds" --start-at "$at" >"$out/p3-30.json" &
a=$!
build-gpu/bin/tessera run --core 70 --container p3-70 -- \
  "$python" "$check" --name p3-70 --seconds "$seconds" --start-at "$at" >"$out/p3-70.json" &
b=$!
wait "$a" "$b"
cat "$out/p3-30.json" "$out/p3-70.json" | tee -a "$results"
build-gpu/bin/tessera smi || true

echo "== policy 2 (weighted preemptive): --weight 1 and --weight 2 at once =="
start_daemon 2
at=$(start_at)
build-gpu/bin/tessera run --weight 1 --container p2-w1 -- \
  "$python" "$check" --name p2-w1 --seconds "$seconds" --start-at "$at" >"$out/p2-w1.json" &
a=$!
build-gpu/bin/tessera run --weight 2 --container p2-w2 -- \
  "$python" "$check" --name p2-w2 --seconds "$seconds" --start-at "$at" >"$out/p2-w2.json" &
b=$!
wait "$a" "$b"
cat "$out/p2-w1.json" "$out/p2-w2.json" | tee -a "$results"
stop_daemon

echo "== summary =="
"$python" - "$results" <<'PY'
import json, sys
r = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        d = json.loads(line)
        r[d["name"]] = d["matmuls_per_s"]
alone = r["alone-native"]
summary = {
    "alone_matmuls_per_s": alone,
    "single_tenant_overhead_pct": round(100 * (1 - r["alone-shim"] / alone), 2),
}
for a, b, target in (("p3-30", "p3-70", 30 / 70), ("p2-w1", "p2-w2", 1 / 2)):
    summary[a + "_relative_to_alone"] = round(r[a] / alone, 3)
    summary[b + "_relative_to_alone"] = round(r[b] / alone, 3)
    summary[a + "_to_" + b + "_ratio"] = round(r[a] / r[b], 3)
    summary[a + "_to_" + b + "_target"] = round(target, 3)
    summary[a + "_to_" + b + "_ratio_error_pct"] = round(100 * abs(r[a] / r[b] / target - 1), 1)
    summary[a + "_" + b + "_busy_pct"] = round(100 * (r[a] + r[b]) / alone, 1)
print(json.dumps(summary, indent=2))
PY
