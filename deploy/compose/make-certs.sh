#!/bin/sh
# Throwaway certificates for the secured demo stack (compose.secure.yaml): a CA that signs one
# server certificate for the `specmon` service (also valid for localhost and 127.0.0.1), then
# is deleted. Needs the openssl command. Writes ./tls/ beside this script, or the directory
# given as the first argument:
#
#   ./make-certs.sh && docker compose -f compose.yaml -f compose.secure.yaml up --build
#
# For a real deployment use your own CA or cert-manager (docs/security.md). The key is made
# world-readable because the container runs as UID 10920 and Compose bind-mounts it as is:
# acceptable for a demo on your own machine, not for a shared host.
set -eu
out="${1:-$(dirname "$0")/tls}"
mkdir -p "$out"
cd "$out"
trap 'rm -f ca.key specmon.csr ext.cnf ca.srl' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -subj "/CN=specmon demo CA" -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=specmon" -keyout specmon.key -out specmon.csr 2>/dev/null
printf '%s\n' 'basicConstraints=critical,CA:FALSE' 'extendedKeyUsage=serverAuth' \
    'subjectAltName=DNS:specmon,DNS:localhost,IP:127.0.0.1' > ext.cnf
openssl x509 -req -in specmon.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile ext.cnf -out specmon.crt 2>/dev/null
chmod 0644 ca.crt specmon.crt specmon.key
echo "wrote $out/ca.crt, $out/specmon.crt and $out/specmon.key (valid 30 days)"
