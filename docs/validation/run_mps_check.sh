#!/usr/bin/env bash
# Real-GPU validation of MPS mode (issue 19). Run from the repository root on a machine with an
# NVIDIA GPU (Volta or newer, not in MIG mode), its driver with nvidia-cuda-mps-control, cmake,
# ninja and a Python with PyTorch. Builds only what needs no Debian -dev package, then on GPU 0:
#   1. a PyTorch matmul loop (docs/validation/mps_client_check.py, SECONDS_PER_RUN seconds, default
#      20) alone without MPS, and alone as an MPS client under `tesserad --mps` and `tessera run`;
#   2. two MPS clients at once with --core 30 and --core 70
#      (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) and --mem 8GiB each: throughput of each, and the sum
#      against alone (MPS runs them side by side; time slicing could not exceed 1.0);
#   3. fault behaviour, two clients at once each time: (a) one is SIGKILLed halfway, (b) one raises
#      a device-side assert halfway; what the other printed (its throughput per second, or the
#      error it got) is the record, next to tesserad's log (the supervisor's restarts).
# tesserad starts one nvidia-cuda-mps-control -d for GPU 0 with its own pipe and log directories
# under $MPS_DIR (default /tmp/tessera-mps-validation) and quits it at the end. Writes everything
# to ${OUT:-docs/validation/out}/mps_check.txt. Changes no GPU setting: not the MIG mode, not the
# compute mode (NVIDIA advises EXCLUSIVE_PROCESS for MPS; this check runs without it).
set -euo pipefail
# shellcheck source=docs/validation/setup.sh
source docs/validation/setup.sh mps_check.txt
seconds=${SECONDS_PER_RUN:-20}
half=$(( seconds / 2 ))
check=docs/validation/mps_client_check.py
control=${MPS_CONTROL:-$(command -v nvidia-cuda-mps-control || true)}
[ -x "$control" ] || { echo "no nvidia-cuda-mps-control on this machine (set MPS_CONTROL)"; exit 2; }
mps_dir=${MPS_DIR:-/tmp/tessera-mps-validation}
sock=/tmp/tessera-mps-validation.sock
export TESSERA_SOCKET=$sock
nvidia-smi --query-gpu=index,name,mig.mode.current,compute_mode --format=csv
echo "== the MIG planner for this GPU (nothing is applied: the MIG mode is left alone) =="
gpu_name=$(nvidia-smi -i 0 --query-gpu=name --format=csv,noheader)
case "$gpu_name" in
  *A30*) model=A30 ;; *A100*80GB*) model=A100-80GB ;; *A100*) model=A100-40GB ;;
  *GH200*|*H20) model=H100-96GB ;; *H200*) model=H200-141GB ;;
  *H100*NVL*|*H100*94GB*) model=H100-94GB ;; *H100*) model=H100-80GB ;; *B200*) model=B200 ;;
  *) model= ;;
esac
if [ -n "$model" ]; then
  build-gpu/bin/tessera mig profiles --gpu "$model"
  # Every profile asked for once: the layout of one GPU that serves the most of them.
  build-gpu/bin/tessera mig plan --gpu "$model" --fit \
    $(build-gpu/bin/tessera mig profiles --gpu "$model" | awk 'NR > 2 { print $1 "=1" }')
else
  echo "$gpu_name is no MIG-capable model the planner knows"
fi
daemon=
stop_daemon() {
  if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
  daemon=
}
start_daemon() {
  stop_daemon
  rm -f "$sock"
  build-gpu/bin/tesserad --socket "$sock" --ephemeral --mps --mps-control "$control" \
    --mps-dir "$mps_dir" 2>"$out/tesserad_mps.log" &
  daemon=$!
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
  echo "tesserad --mps did not start:"; cat "$out/tesserad_mps.log"; exit 1
}
trap stop_daemon EXIT
results="$out/mps_results.jsonl"
: >"$results"
start_at() { "$python" -c 'import time; print(time.time() + 20)'; }
client() {  # NAME CORE [extra check args...]: an MPS client of GPU 0 under tessera run
  local name=$1 core=$2
  shift 2
  build-gpu/bin/tessera run --devices 0 --core "$core" --mem 8GiB --container "$name" -- \
    "$python" "$check" --name "$name" --seconds "$seconds" "$@"
}

echo "== alone, without MPS and without the shim =="
"$python" "$check" --name alone-native --seconds "$seconds" | tee -a "$results"
start_daemon
echo "== alone, as an MPS client (--core 100) =="
client alone-mps 100 | tee -a "$results"

echo "== two MPS clients at once: --core 30 and --core 70 =="
at=$(start_at)
client mps-30 30 --start-at "$at" >"$out/mps-30.jsonl" &
a=$!
client mps-70 70 --start-at "$at" >"$out/mps-70.jsonl" &
b=$!
wait "$a" "$b" || true
cat "$out/mps-30.jsonl" "$out/mps-70.jsonl" | tee -a "$results"
build-gpu/bin/tessera smi || true

echo "== fault (a): the 30% client is SIGKILLed after ${half}s; what the 70% client sees =="
at=$(start_at)
client kill-victim 30 --start-at "$at" >"$out/kill-victim.jsonl" &
a=$!
client kill-witness 70 --start-at "$at" >"$out/kill-witness.jsonl" &
b=$!
sleep $(( 20 + half ))
# The client printed its own pid first (it runs under tessera run, not as our child).
victim=$("$python" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["pid"])' \
  "$out/kill-victim.jsonl" || true)
echo "killing client pid ${victim:-(not found)}"
if [ -n "$victim" ]; then kill -9 "$victim"; fi
wait "$a" || true
wait "$b" || true
cat "$out/kill-victim.jsonl" "$out/kill-witness.jsonl" | tee -a "$results"

echo "== fault (b): the 30% client raises a device-side assert after ${half}s =="
start_daemon  # a fresh MPS server: after a fault it refuses clients until every one has exited
at=$(start_at)
client fault-victim 30 --start-at "$at" --fault-after "$half" >"$out/fault-victim.jsonl" &
a=$!
client fault-witness 70 --start-at "$at" >"$out/fault-witness.jsonl" &
b=$!
wait "$a" || true
wait "$b" || true
cat "$out/fault-victim.jsonl" "$out/fault-witness.jsonl" | tee -a "$results"
echo "== a new client right after the fault =="
client after-fault 100 --seconds 5 | tee -a "$results" || true
stop_daemon
echo "== tesserad's log (MPS supervisor) =="
cat "$out/tesserad_mps.log"
echo "== MPS control log =="
cat "$mps_dir"/*/log/control.log 2>/dev/null || true

echo "== summary =="
"$python" - "$results" <<'PY'
import json, sys
last, errors = {}, {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    if "matmuls" in d:
        last[d["name"]] = d["matmuls_per_s"]
    if "error" in d:
        errors[d["name"]] = {"t": d.get("t"), "error": d["error"]}
alone = last.get("alone-native")
summary = {"alone_matmuls_per_s": alone, "errors": errors}
if alone:
    for name in ("alone-mps", "mps-30", "mps-70", "kill-witness", "fault-witness", "after-fault"):
        if name in last:
            summary[name + "_relative_to_alone"] = round(last[name] / alone, 3)
    if "mps-30" in last and "mps-70" in last:
        summary["mps_30_70_sum_relative_to_alone"] = round((last["mps-30"] + last["mps-70"]) / alone, 3)
        summary["mps_30_to_70_ratio"] = round(last["mps-30"] / last["mps-70"], 3)
print(json.dumps(summary, indent=2))
PY
