#!/usr/bin/env bash
# Makes the certificates with which kube-scheduler and tessera-extender trust each other, and
# only each other (docs/kubernetes.md, "TLS between kube-scheduler and the extender"):
#   ca.crt, ca.key          a CA for this pair alone: every client certificate it signs may drive
#                           the extender, so use it for nothing else and keep ca.key out of the
#                           cluster
#   tls.crt, tls.key        the extender's server certificate (DNS tessera-extender, IP 127.0.0.1)
#   client.crt, client.key  kube-scheduler's client certificate (CN tessera-scheduler)
# Keys are ECDSA P-256, files are created mode 0600.
#
# Usage: deploy/kubernetes/extender-certs.sh OUT_DIR [DAYS]     (DAYS: validity, default 365)
# Then put all but ca.key into the Secret that deploy/kubernetes/scheduler.yaml mounts:
#   kubectl -n tessera-system create secret generic tessera-extender-tls \
#     --from-file=OUT_DIR/ca.crt --from-file=OUT_DIR/tls.crt --from-file=OUT_DIR/tls.key \
#     --from-file=OUT_DIR/client.crt --from-file=OUT_DIR/client.key
set -euo pipefail
out=${1:?usage: extender-certs.sh OUT_DIR [DAYS]}
days=${2:-365}
case $days in '' | *[!0-9]*) echo "extender-certs.sh: DAYS=\"$days\": expected a number of days" >&2; exit 2 ;; esac
mkdir -p "$out"
umask 077
cd "$out"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

# leaf NAME SUBJECT EXTENSIONS: NAME.key and NAME.crt, signed by the CA.
leaf() {
  key "$1.key"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
    -days "$days" -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

key ca.key
openssl req -x509 -new -key ca.key -sha256 -days "$days" -subj "/CN=tessera-extender-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.crt
leaf tls "/CN=tessera-extender" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:tessera-extender,DNS:tessera-extender.tessera-system.svc,IP:127.0.0.1"
leaf client "/CN=tessera-scheduler" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
rm -f ca.srl
echo "extender-certs.sh: wrote ca.crt ca.key tls.crt tls.key client.crt client.key in $PWD"
