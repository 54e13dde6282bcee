#!/usr/bin/env bash
# Coalescing benchmark: rproxy with GET coalescing on (window unsent, the
# default), on with window inflight, and off; interleaved rounds. The local
# tier is off in all three, so every read that is not coalesced reaches Redis.
#  1. hot key: redis-benchmark -c 200 GET on one key; Redis's INFO commandstats
#     counts the GETs that reached it (target: <= 1 per 10 client GETs, with
#     throughput not below coalescing off).
#  2. overhead on a uniform keyspace: -c 50 -r 100000 GET at -P 1 and -P 16
#     (target: within 3% of coalescing off).
# Besides ops/s it reports each rproxy's CPU time per client request (utime +
# stime from /proc over the run): on this shared 2-core box, where the load
# generator competes with rproxy for the cores, it is the steadier measure.
# Usage: bench/coalesce.sh [rounds]   (default 5; needs redis-server, redis-benchmark, go)
set -euo pipefail
rounds=${1:-5}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
	for p in $(seq 20000 20999); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return; }; done; }
waitping() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.05; done; echo "no PONG on $1" >&2; exit 1; }

go build -o "$tmp/rproxy" ./cmd/rproxy
rport=$(freeport); redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$tmp/redis.log" 2>&1 &
pids+=($!); waitping "$rport"
printf "coalesce:\n  commands: []\nhotkeys:\n  tier: false\n" >"$tmp/off.yaml"
printf 'coalesce:\n  window: inflight\nhotkeys:\n  tier: false\n' >"$tmp/inflight.yaml"
printf 'hotkeys:\n  tier: false\n' >"$tmp/on.yaml"
declare -A pid
on=$(freeport); "$tmp/rproxy" -listen 127.0.0.1:$on -upstream 127.0.0.1:$rport -config "$tmp/on.yaml" 2>"$tmp/on.log" & pids+=($!); pid[on]=$!
off=$(freeport); "$tmp/rproxy" -listen 127.0.0.1:$off -upstream 127.0.0.1:$rport -config "$tmp/off.yaml" 2>"$tmp/off.log" & pids+=($!); pid[off]=$!
infl=$(freeport); "$tmp/rproxy" -listen 127.0.0.1:$infl -upstream 127.0.0.1:$rport -config "$tmp/inflight.yaml" 2>"$tmp/inflight.log" & pids+=($!); pid[inflight]=$!
waitping "$on"; waitping "$off"; waitping "$infl"
redis-cli -p "$rport" set key:__rand_int__ value >/dev/null # the key redis-benchmark GETs without -r

rps() { redis-benchmark -p "$1" "${@:2}" -t get --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"'; }
gets() { redis-cli -p "$rport" info commandstats | sed -n 's/^cmdstat_get:calls=\([0-9]*\),.*/\1/p'; }
# ticks: user + system CPU clock ticks of a process so far (fields 14 and 15).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# usper: microseconds of CPU per request from a tick difference.
usper() { awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", t / hz * 1e6 / n}'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A r
n=200000
for round in $(seq "$rounds"); do
	order=(on inflight off); [ $((round % 2)) -eq 0 ] && order=(off inflight on)
	for mode in "${order[@]}"; do
		case $mode in on) port=$on ;; off) port=$off ;; inflight) port=$infl ;; esac
		redis-cli -p "$rport" config resetstat >/dev/null
		t0=$(ticks "${pid[$mode]}")
		r[hot_rps_$mode]+="$(rps "$port" -c 200 -n $n) "
		r[hot_cpu_$mode]+="$(usper $(($(ticks "${pid[$mode]}") - t0)) $n) "
		r[hot_up_$mode]+="$(gets) "
		for P in 1 16; do
			k=$((n * (P == 1 ? 1 : 4)))
			t0=$(ticks "${pid[$mode]}")
			r[uni${P}_$mode]+="$(rps "$port" -c 50 -r 100000 -P $P -n $k) "
			r[uni${P}_cpu_$mode]+="$(usper $(($(ticks "${pid[$mode]}") - t0)) $k) "
		done
	done
done

m() { echo ${r[$1]} | tr ' ' '\n' | median; }
echo "## coalescing: $(date -u +%F), $(nproc) cores, $rounds interleaved rounds, medians"
echo
echo "| scenario | on (window unsent) | on (window inflight) | off | unsent/off | inflight/off |"
echo "|---|---:|---:|---:|---:|---:|"
for k in hot_rps uni1 uni16; do
	a=$(m ${k}_on); i=$(m ${k}_inflight); b=$(m ${k}_off)
	case $k in hot_rps) name="200 clients GET one key (rps)";; uni1) name="uniform keyspace GET -P 1 (rps)";; uni16) name="uniform keyspace GET -P 16 (rps)";; esac
	echo "| $name | $a | $i | $b | $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", a/b}') | $(awk -v a="$i" -v b="$b" 'BEGIN{printf "%.3f", a/b}') |"
done
for k in hot_cpu uni1_cpu uni16_cpu; do
	a=$(m ${k}_on); i=$(m ${k}_inflight); b=$(m ${k}_off)
	case $k in hot_cpu) name="200 clients GET one key: rproxy CPU us/request";; uni1_cpu) name="uniform GET -P 1: rproxy CPU us/request";; uni16_cpu) name="uniform GET -P 16: rproxy CPU us/request";; esac
	echo "| $name | $a | $i | $b | $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", a/b}') | $(awk -v a="$i" -v b="$b" 'BEGIN{printf "%.3f", a/b}') |"
done
a=$(m hot_up_on); i=$(m hot_up_inflight); b=$(m hot_up_off)
echo "| 200 clients GET one key: GETs reaching Redis per $n client GETs | $a (1 per $(awk -v a="$a" -v n=$n 'BEGIN{printf "%.1f", n/a}')) | $i (1 per $(awk -v a="$i" -v n=$n 'BEGIN{printf "%.1f", n/a}')) | $b | | |"
