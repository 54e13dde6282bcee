#!/usr/bin/env bash
# scripts/make-test-certs.sh DIR — test certificates for the TLS runs
# (scripts/redis-suite.sh's TLS modes, bench/tls-idle.sh), made with openssl
# into DIR: ca.crt/ca.key, server.crt/server.key for 127.0.0.1 and
# localhost (a subjectAltName: Go's verification ignores the common name)
# and client.crt/client.key, valid 30 days. Redis's utils/gen-test-certs.sh
# gives only common names, which Go refuses. With them, two settings files
# for TLS on both sides, client certificates required: redis-tls.conf for
# redis-server (--include it, with --port 0 --tls-port P) and
# rproxy-tls.yaml for rproxy (its tls and upstream.tls sections, to use as
# it is or to append to another config without those sections).
set -euo pipefail
d=${1:?usage: make-test-certs.sh DIR}
mkdir -p "$d"
printf '[server]\nsubjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = serverAuth, clientAuth\n[client]\nextendedKeyUsage = clientAuth\n' >"$d/ext.cnf"
openssl req -x509 -new -nodes -sha256 -newkey rsa:2048 -days 30 -subj '/O=rproxy test/CN=CA' \
	-keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
for n in server client; do
	openssl req -new -nodes -newkey rsa:2048 -subj "/O=rproxy test/CN=$n" \
		-keyout "$d/$n.key" -out "$d/$n.csr" 2>/dev/null
	openssl x509 -req -sha256 -days 30 -in "$d/$n.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" \
		-CAcreateserial -extfile "$d/ext.cnf" -extensions "$n" -out "$d/$n.crt" 2>/dev/null
done
d=$(cd "$d" && pwd)
cat >"$d/redis-tls.conf" <<EOF
tls-cert-file $d/server.crt
tls-key-file $d/server.key
tls-ca-cert-file $d/ca.crt
tls-auth-clients yes
EOF
cat >"$d/rproxy-tls.yaml" <<EOF

tls:
  cert_file: $d/server.crt
  key_file: $d/server.key
  client_ca_file: $d/ca.crt

upstream:
  tls:
    enabled: true
    ca_file: $d/ca.crt
    cert_file: $d/client.crt
    key_file: $d/client.key
EOF
