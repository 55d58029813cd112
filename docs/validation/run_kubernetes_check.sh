#!/usr/bin/env bash
# Real-cluster validation of the device plugin (issue 14): the same check as
# k8s_device_plugin_test on a Kubernetes node with an NVIDIA GPU, Tessera's DaemonSet
# (deploy/kubernetes/) and kubectl pointed at the cluster.
#   NODE=gpu-node-1 IMAGE=pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime docs/validation/run_kubernetes_check.sh
# It places two pods on NODE as the extender would (tessera.io/assignment written from the node's
# tessera.io/gpu-inventory, then spec.nodeName), one with tessera.io/gpu-mem: 2 and
# tessera.io/gpu-core: 30, one with 2 and 70, on the node's first GPU; each reports what
# torch.cuda.mem_get_info shows, where allocation stops, nvidia-smi's view and its matmul rate over
# a common 10 s window. Checks: 2 GiB seen, OOM at 2 GiB (± one 64 MiB step), nvidia-smi 2048 MiB,
# shares 30/70 ± 2 points. Then deletes one pod and checks that tesserad forgets its container
# within 5 s (kubectl exec into the DaemonSet pod). Writes ${OUT:-docs/validation/out}/kubernetes_check.txt.
set -euo pipefail
NODE=${NODE:?set NODE to a GPU node labelled tessera.io/gpu.schedule=core_mem}
IMAGE=${IMAGE:-pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime}
NS=${NS:-tessera-validation}
OUT=${OUT:-docs/validation/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/kubernetes_check.txt") 2>&1
echo "== $(date -u +%FT%TZ) node $NODE, image $IMAGE =="
inventory=$(kubectl get node "$NODE" -o jsonpath='{.metadata.annotations.tessera\.io/gpu-inventory}')
[ -n "$inventory" ] || { echo "node $NODE has no tessera.io/gpu-inventory: is tessera-node running there?"; exit 1; }
uuid=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["gpus"][0]["uuid"])' "$inventory")
echo "GPU: $uuid"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$NS" create configmap check --from-file=docs/validation/kubernetes_check.py \
  --dry-run=client -o yaml | kubectl apply -f -
start=$(( $(date +%s) + 90 ))
pod() {  # pod NAME CORE
  local assignment
  assignment=$(printf '{"version":1,"node":"%s","seq":%s,"containers":[{"name":"check","gpus":[{"uuid":"%s","mem_bytes":2147483648,"core_percent":%s}]}]}' \
    "$NODE" "$RANDOM" "$uuid" "$2")
  kubectl -n "$NS" apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations:
    tessera.io/assignment: '$assignment'
    tessera.io/phase: assumed
spec:
  nodeName: $NODE
  restartPolicy: Never
  containers:
  - name: check
    image: $IMAGE
    command: [sh, -c, "python /check/kubernetes_check.py $start 10; nvidia-smi --query-gpu=memory.total --format=csv,noheader; sleep 600"]
    env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    resources: {limits: {tessera.io/gpu-mem: 2, tessera.io/gpu-core: $2}}
    volumeMounts: [{name: check, mountPath: /check}]
  volumes: [{name: check, configMap: {name: check}}]
YAML
}
pod thirty 30
pod seventy 70
for p in thirty seventy; do
  kubectl -n "$NS" wait --for=condition=Ready "pod/$p" --timeout=120s || { kubectl -n "$NS" describe pod "$p"; exit 1; }
done
sleep $(( start + 15 - $(date +%s) ))
status=0
python3 - "$NS" <<'PY' || status=1
import json, subprocess, sys
ns = sys.argv[1]
res = {}
for p in ("thirty", "seventy"):
    log = subprocess.run(["kubectl", "-n", ns, "logs", p], capture_output=True, text=True).stdout.splitlines()
    res[p] = json.loads(next(l for l in log if l.startswith("{")))
    res[p]["nvidia_smi_total"] = next((l for l in log if "MiB" in l), "?")
    print(p, res[p])
ok = True
for p, r in res.items():
    ok &= r["mem_get_info_total"] == 2 << 30
    ok &= abs(r["allocated_before_oom"] - (2 << 30)) <= 64 << 20 and r["oom"] == "OutOfMemoryError"
    ok &= r["nvidia_smi_total"].strip() == "2048 MiB"
total = res["thirty"]["matmuls_per_s"] + res["seventy"]["matmuls_per_s"]
share = 100 * res["thirty"]["matmuls_per_s"] / total
print(f"shares: thirty {share:.1f} %, seventy {100 - share:.1f} %")
ok &= abs(share - 30) <= 2
sys.exit(0 if ok else 1)
PY
kubectl -n "$NS" get pod thirty -o jsonpath='{.metadata.annotations.tessera\.io/phase}{"\n"}'
plugin=$(kubectl -n kube-system get pod -l app=tessera-node --field-selector spec.nodeName="$NODE" -o name | head -1)
before=$(date +%s.%N)
kubectl -n "$NS" delete pod thirty --wait=false
for _ in $(seq 50); do
  if ! kubectl -n kube-system exec "$plugin" -c tesserad -- /opt/tessera/bin/tessera smi --json 2>/dev/null | grep -q '"k8s.thirty'; then
    echo "released after $(python3 -c "import time; print(round(time.time() - $before, 2))") s"; break
  fi
  sleep 0.1
done
kubectl delete namespace "$NS" --wait=false
exit $status
