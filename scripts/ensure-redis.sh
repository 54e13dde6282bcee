#!/usr/bin/env bash
# Ensure redis-server and redis-benchmark (packages redis-server and
# redis-tools) and twemproxy (package nutcracker, the benchmark's reference
# proxy) are installed; the tests and benchmarks start their own processes on
# free ports.
#
# Installs with apt-get as root, or through `sudo -n` when that works without
# a password. It never starts, stops or relies on the system redis service:
# if the package starts one on 6379, it is left alone.
set -euo pipefail

PKGS=(redis-server redis-tools nutcracker)
HINT="redis-server is missing: run  sudo apt-get install -y ${PKGS[*]}"

have() { command -v "$1" >/dev/null 2>&1; }

have_all() { have redis-server && have redis-benchmark && { have nutcracker || [ -x /usr/sbin/nutcracker ]; }; }

if have_all; then
	exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
	SUDO=()
elif have sudo && sudo -n true 2>/dev/null; then
	SUDO=(sudo -n)
else
	echo "$HINT" >&2
	exit 1
fi

if ! have apt-get; then
	echo "$HINT" >&2
	exit 1
fi

echo "ensure-redis: installing ${PKGS[*]} with apt-get" >&2
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null

if ! have_all; then
	echo "ensure-redis: apt-get finished but redis-server, redis-benchmark or nutcracker is still not on PATH ($PATH)" >&2
	echo "$HINT" >&2
	exit 1
fi
echo "ensure-redis: $(redis-server --version)" >&2
