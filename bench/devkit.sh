#!/usr/bin/env bash
# bench/devkit.sh pack — gathers what the scaling run needs on a
# machine that has neither Go nor Redis installed (the many-core machine
# some sessions are lent, which reaches nothing outside it): rproxy and the
# suite built here (static), and redis-server, redis-benchmark, redis-cli,
# nutcracker and taskset with the shared libraries they need beyond glibc,
# into $DEVKIT (default .devkit, which .gitignore lists; carry it).
#
# bench/devkit.sh run OUT [ROUNDS] — on that machine, from the
# repository root: the scaling scenarios (procs 1, 2, 4, 8) with
# redis-server on CPU 0, nutcracker and every rproxy on CPUs 1-8 and the
# load generator on the rest, as the client-path issue describes; the
# report goes to OUT (under the repository root's bench/results or $OUT).
set -euo pipefail
usage='usage: [DEVKIT=dir] bench/devkit.sh pack | run OUT [ROUNDS]'
cmd=${1:?$usage}
shift
dir=${DEVKIT:-.devkit}
case "$cmd" in
pack)
	rm -rf "$dir"
	mkdir -p "$dir/bin" "$dir/lib"
	CGO_ENABLED=0 go build -o "$dir/bin/rproxy" ./cmd/rproxy
	CGO_ENABLED=0 go build -o "$dir/bin/suite" ./bench/cmd/suite
	nut=$(command -v nutcracker || echo /usr/sbin/nutcracker)
	for b in redis-server redis-benchmark redis-cli "$nut" taskset; do
		p=$(command -v "$b")
		cp -L "$p" "$dir/bin/"
		# glibc and the loader stay the machine's own: a copied libc under
		# the machine's loader is a mismatch waiting to happen.
		ldd "$p" | awk '/=> \// {print $3}' | while read -r lib; do
			case "$(basename "$lib")" in
			libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
			*) cp -L "$lib" "$dir/lib/" ;;
			esac
		done
	done
	du -sh "$dir"
	;;
run)
	out=${1:?$usage}
	rounds=${2:-3}
	dir=$(cd "$dir" && pwd)
	export PATH="$dir/bin:$PATH" LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	n=$(grep -c ^processor /proc/cpuinfo)
	if [ "$n" -lt 12 ]; then
		echo "devkit: $n CPUs: the layout (Redis 0, proxies 1-8, load 9-) needs at least 12" >&2
		exit 2
	fi
	ulimit -n "$(ulimit -Hn)" || true
	taskset -c "9-$((n - 1))" "$dir/bin/suite" -scenarios scaling -procs 1,2,4,8 -rounds "$rounds" \
		-rproxy "$dir/bin/rproxy" -pin-redis 0 -pin-proxies 1-8 -out "$out"
	;;
*)
	echo "$usage" >&2
	exit 2
	;;
esac
