#!/usr/bin/env bash
# Every real-GPU check in one run, sized for a short lease (about 5 minutes on an H100): run from
# the repository root on a machine with an NVIDIA GPU, its driver and a Python with PyTorch.
#
#   [PHASES="memory overhead"] docs/validation/run_gpu_checks.sh [all|PHASE]
#
# Uses the binaries of docs/validation/bundle (made here by bundle.sh) or builds them with
# setup.sh. Each phase runs under its own time limit with its own tesserad and never changes a
# GPU setting (no MIG, compute-mode, clock or persistence change; the MPS check runs the GPU as it
# is). Phases:
#   memory   PyTorch under a 4 GiB cap with the native allocator, expandable_segments and
#            cudaMallocAsync (memory_isolation_check.py); nvidia-smi under the NVML shim in one of
#            two containers (the cap, only that container's processes); a SIGKILLed tenant's
#            memory back in tesserad's ledger (ms, polled every 10 ms)
#   compute  matmul loops: alone native, alone under the shim (policy 1), two at once native,
#            policy 3 at --core 30/70, policy 2 at --weight 1:2
#   latency  a small-MLP inference service beside two saturating matmul loops: alone, natively
#            (the GPU's own time slicing) and under Tessera with --high-prio (policy 1)
#   overhead a training step and a CUDA-graph inference replay, native and under the shim,
#            alternated twice; shim_real_bench (the shim against the real libcuda per call)
#   mps      tesserad --mps: one matmul client alone and two at --core 30/70
# Writes to $OUT (or docs/validation/out): gpu_checks.log (everything), results.jsonl (one JSON
# object per measurement), tesserad.log, details.tar.gz; prints a summary table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
here=docs/validation
out=${OUT:-$here/out}
mkdir -p "$out"
py=${PYTHON:-python3}
secs=${SECONDS_PER_RUN:-6}
work=${GPU_CHECK_WORK:-/tmp/tessera-gpu-checks}
bundle=$here/bundle
results=$out/results.jsonl
tenant=$here/gpu_tenant.py

if [ "${1:-all}" = all ] || [ "${1:-}" = "--all" ]; then
  exec > >(tee "$out/gpu_checks.log") 2>&1
  rm -rf "$work"
  mkdir -p "$work"
  : >"$results"
  : >"$out/tesserad.log"
  if [ ! -x "$bundle/bin/tesserad.bin" ]; then
    # shellcheck source=docs/validation/setup.sh
    (source $here/setup.sh build.txt) || { echo "the build failed"; exit 1; }
  fi
  for phase in ${PHASES:-info memory compute latency overhead mps}; do
    case $phase in info) limit=40 ;; latency) limit=80 ;; mps) limit=90 ;; *) limit=110 ;; esac
    echo "===== $phase (at most ${limit}s) ====="
    start=$(date +%s%N)
    timeout -k 5 "$limit" "$0" "$phase"
    rc=$?
    echo "===== $phase: exit $rc, $((($(date +%s%N) - start) / 1000000)) ms"
    pkill -f "$tenant" 2>/dev/null
    pkill -f tesserad.bin 2>/dev/null
    sleep 0.5
  done
  tar -czf "$out/details.tar.gz" -C "$work" . 2>/dev/null
  echo "===== summary ====="
  "$py" $here/summarize_gpu_checks.py "$results"
  exit 0
fi

# ---- one phase (a child of the run above, or run alone) --------------------------------------
if [ -x "$bundle/bin/tesserad.bin" ]; then bin=$bundle/bin; lib=$bundle/lib; else
  bin=build-gpu/bin; lib=build-gpu/lib; fi
mkdir -p "$work"
find_lib() {  # NAME: the machine's real library, never a shim
  ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }' | grep . ||
    find /usr/local/nvidia /usr/lib /usr/lib64 -name "$1" 2>/dev/null | head -1
}
TESSERA_REAL_LIBCUDA=${TESSERA_REAL_LIBCUDA:-$(find_lib libcuda.so.1)}
TESSERA_REAL_NVML=${TESSERA_REAL_NVML:-$(find_lib libnvidia-ml.so.1)}
export TESSERA_REAL_LIBCUDA TESSERA_REAL_NVML
sock=$work/$1.sock
export TESSERA_SOCKET=$sock
daemon=
stop_daemon() {
  if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; fi
  daemon=
}
start_daemon() {  # ARGS...: a fresh tesserad on $sock
  stop_daemon
  rm -f "$sock"
  echo "--- tesserad $*" >>"$out/tesserad.log"
  "$bin/tesserad" --socket "$sock" --ephemeral --reconcile-interval 200ms "$@" \
    2>>"$out/tesserad.log" &
  daemon=$!
  for _ in $(seq 200); do [ -S "$sock" ] && return 0; sleep 0.05; done
  echo "tesserad $* did not start:"; tail -5 "$out/tesserad.log"; return 1
}
cleanup() { pkill -f "$tenant" 2>/dev/null; stop_daemon; }
trap cleanup EXIT
trap 'exit 124' TERM
export TESSERA_GATE_STATS=1  # shimmed processes say at exit how their launches waited
record() { tee -a "$results"; }  # each JSON line a tenant prints is a result
run() { "$bin/tessera" run "$@"; }  # tessera run under $TESSERA_SOCKET's daemon
# NAME...: tenants started together; each argument is "NAME|tessera run flags (or native)|mode
# [tenant flags]"; waits for all, records their results, returns 1 if one failed.
together() {
  local barrier=$work/barrier-$RANDOM$RANDOM pids=() files=() n=$#
  for spec in "$@"; do
    IFS='|' read -r name flags mode <<<"$spec"
    local f=$work/$name.out
    files+=("$f")
    if [ "$flags" = native ]; then
      # shellcheck disable=SC2086
      "$py" "$tenant" $mode --name "$name" --seconds "$secs" --barrier "$barrier" --peers "$n" \
        >"$f" 2>"$f.err" &
    else
      # shellcheck disable=SC2086
      run $flags -- "$py" "$tenant" $mode --name "$name" --seconds "$secs" --barrier "$barrier" \
        --peers "$n" >"$f" 2>"$f.err" &
    fi
    pids+=($!)
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  for f in "${files[@]}"; do
    tail -1 "$f" | grep '^{' | record || { echo "no result in $f"; status=1; }
    if [ $status != 0 ] || grep -q '"error"' "$f"; then tail -5 "$f.err"; fi
    grep -h 'gate stats' "$f.err"
  done
  return $status
}

case $1 in
info)
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode,mig.mode.current \
    --format=csv
  nvidia-smi | head -4
  "$py" -c 'import torch, json; p = torch.cuda.get_device_properties(0); print(json.dumps({
    "torch": torch.__version__, "cuda": torch.version.cuda, "gpu": p.name,
    "sms": p.multi_processor_count, "memory_bytes": p.total_memory}))' |
    sed 's/^{/{"name": "info", /' | record
  echo "real libcuda: $TESSERA_REAL_LIBCUDA; real NVML: $TESSERA_REAL_NVML"
  grep -E '^(PRETTY_NAME)' /etc/os-release; ldd --version | head -1; nproc
  ldd "$bin/tesserad.bin" 2>/dev/null | grep 'not found' && echo "tesserad misses libraries"
  LD_LIBRARY_PATH=$bundle/deps "$bin/tesserad.bin" --version
  command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin 2>/dev/null
  if command -v nm >/dev/null; then  # entry points of the real libraries the shims do not export
    for pair in "$TESSERA_REAL_NVML:data/nvml_symbols.txt" \
                "$TESSERA_REAL_LIBCUDA:data/cuda_driver_symbols.txt"; do
      nm -D --defined-only "${pair%%:*}" | awk '{ print $3 }' | sed 's/@.*//' | sort -u \
        >"$work/real.txt"
      missing=$(comm -23 "$work/real.txt" <(sort -u "${pair#*:}"))
      echo "${pair%%:*}: $(wc -l <"$work/real.txt") symbols, $(echo "$missing" | grep -c .)" \
        "not in ${pair#*:}:" $missing
    done
  fi
  ;;

memory)
  start_daemon --policy 1 || exit 1
  grep -o 'context overhead [0-9]* bytes' "$out/tesserad.log" | tail -1
  i=0
  for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
    i=$((i + 1))
    echo "== allocator ${conf:-native}: mem_get_info, 3 GiB, 5 GiB under --mem 4GiB =="
    PYTORCH_CUDA_ALLOC_CONF=$conf run --mem 4GiB --container mem-$i -- \
      "$py" $here/memory_isolation_check.py 2>"$work/mem-$i.err" |
      sed 's/^{/{"name": "memory", /' | record
    tail -2 "$work/mem-$i.err"
  done
  echo "== two containers: smi-a (4 GiB cap, holds 2 GiB), smi-b (6 GiB cap, holds 1 GiB) =="
  run --mem 4GiB --container smi-a -- "$py" "$tenant" hold --name hold-a --gib 2 --seconds 120 \
    >"$work/hold-a.out" 2>"$work/hold-a.err" &
  run --mem 6GiB --container smi-b -- "$py" "$tenant" hold --name hold-b --gib 1 --seconds 120 \
    >"$work/hold-b.out" 2>"$work/hold-b.err" &
  for _ in $(seq 600); do
    grep -q pid "$work/hold-a.out" && grep -q pid "$work/hold-b.out" && break
    sleep 0.1
  done
  pid_a=$("$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["pid"])' \
    "$work/hold-a.out")
  pid_b=$("$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["pid"])' \
    "$work/hold-b.out")
  echo "holders: smi-a pid $pid_a, smi-b pid $pid_b"
  echo "-- nvidia-smi on the host (no shim)"
  nvidia-smi --query-gpu=memory.total,memory.used --format=csv
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  echo "-- nvidia-smi in container smi-a (the NVML shim)"
  shim_smi() {
    LD_PRELOAD=$PWD/$lib/tessera/libnvidia-ml.so.1 TESSERA_CONTAINER=smi-a nvidia-smi "$@"
  }
  shim_smi | tee "$work/smi-a.txt"
  shim_smi --query-gpu=memory.total,memory.used --format=csv,noheader,nounits |
    tee "$work/smi-a-gpu.csv"
  shim_smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    tee "$work/smi-a-apps.csv"
  "$py" - "$work/smi-a-gpu.csv" "$work/smi-a-apps.csv" "$pid_a" "$pid_b" <<'PY' | record
import json, sys
gpu = open(sys.argv[1]).read().split(",")
apps = [l.split(",")[0].strip() for l in open(sys.argv[2]) if l.strip()]
total = int(gpu[0]) if gpu and gpu[0].strip().isdigit() else None
print(json.dumps({"name": "nvidia-smi-in-container", "memory_total_mib": total,
                  "memory_used_mib": int(gpu[1]) if len(gpu) > 1 and gpu[1].strip().isdigit() else None,
                  "apps": apps, "cap_shown": total == 4096,
                  "only_own_processes": apps == [sys.argv[3]]}))
PY
  "$bin/tessera" smi
  echo "== SIGKILL smi-a's process: how soon is its memory free in tesserad's ledger =="
  "$py" - "$bin/tessera" "$pid_a" <<'PY' | record
import json, os, signal, subprocess, sys, time
cli, pid = sys.argv[1], int(sys.argv[2])
def used():
    s = json.loads(subprocess.run([cli, "smi", "--json"], capture_output=True, text=True).stdout)
    return next(sum(c["used_bytes"]) for c in s["containers"] if c["id"] == "smi-a")
before = used()
t0 = time.perf_counter()
os.kill(pid, signal.SIGKILL)
after, waited = before, 0.0
while after != 0 and waited < 5:
    time.sleep(0.01)
    after, waited = used(), time.perf_counter() - t0
print(json.dumps({"name": "sigkill-release", "used_before_bytes": before, "used_after_bytes": after,
                  "released_ms": round(waited * 1000, 1), "within_1s": after == 0 and waited <= 1}))
PY
  "$bin/tessera" smi
  ;;

compute)
  together "alone-native|native|matmul"
  start_daemon --policy 1 || exit 1
  together "alone-shim|--container solo|matmul"
  stop_daemon
  together "pair-native-a|native|matmul" "pair-native-b|native|matmul"
  start_daemon --policy 3 || exit 1
  (sleep $((secs / 2 + 8)); echo "-- tessera smi during the policy-3 pair"; "$bin/tessera" smi) &
  smi=$!
  together "p3-30|--core 30 --container p3-30|matmul" "p3-70|--core 70 --container p3-70|matmul"
  wait $smi
  start_daemon --policy 2 || exit 1
  together "p2-w1|--weight 1 --container p2-w1|matmul" "p2-w2|--weight 2 --container p2-w2|matmul"
  ;;

latency)
  together "lat-alone|native|latency"
  together "lat-native|native|latency" "sat-native-a|native|matmul" "sat-native-b|native|matmul"
  start_daemon --policy 1 || exit 1
  together "lat-tessera|--high-prio --container svc|latency" \
    "sat-tessera-a|--container train-a|matmul" "sat-tessera-b|--container train-b|matmul"
  ;;

overhead)
  start_daemon --policy 1 || exit 1
  for round in 1 2; do
    together "ovh-native-$round|native|overhead"
    together "ovh-shim-$round|--container ovh|overhead"
  done
  bench() {  # NAME [shim_real_bench flags]: the shim against the real libcuda per call
    local name=$1
    shift
    echo "== $name: the shim against $TESSERA_REAL_LIBCUDA per call ($*) =="
    run --mem 64GiB --container "$name" -- "$bin/shim_real_bench" --real "$TESSERA_REAL_LIBCUDA" \
      --shim "$PWD/$lib/tessera/libcuda.so.1" --json "$work/$name.json" "$@" \
      >"$work/$name.out" 2>"$work/$name.err"
    cat "$work/$name.err"
    "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["name"]=sys.argv[2];
print(json.dumps(d))' "$work/$name.json" "$name" | record
  }
  bench shim_real_bench --rounds 5
  bench shim_real_bench_spin20us --rounds 5 --spin-ns 20000
  start_daemon --policy 5 || exit 1
  bench shim_real_bench_policy5 --rounds 5
  ;;

mps)
  control=$(command -v nvidia-cuda-mps-control || find /usr/local/nvidia /usr/bin -name \
    nvidia-cuda-mps-control 2>/dev/null | head -1)
  if [ -z "$control" ]; then
    echo '{"name": "mps", "error": "no nvidia-cuda-mps-control on this machine"}' | record
    exit 0
  fi
  start_daemon --mps --mps-control "$control" --mps-dir "$work/mps" || exit 1
  together "mps-alone|--devices 0 --core 100 --mem 8GiB --container mps-alone|matmul"
  together "mps-30|--devices 0 --core 30 --mem 8GiB --container mps-30|matmul" \
    "mps-70|--devices 0 --core 70 --mem 8GiB --container mps-70|matmul"
  "$bin/tessera" smi
  stop_daemon
  cat "$work"/mps/*/log/control.log 2>/dev/null | tail -20
  ;;

*)
  echo "unknown phase $1 (all|info|memory|compute|latency|overhead|mps)"
  exit 2
  ;;
esac
