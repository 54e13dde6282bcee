#!/usr/bin/env bash
# Coalescing benchmark: rproxy with GET coalescing on (window unsent, the
# default), on with window inflight, and off; interleaved rounds. The local
# tier is off in all three, so every read that is not coalesced reaches Redis.
#  1. hot key: redis-benchmark -c 200 GET on one key; Redis's INFO commandstats
#     counts the GETs that reached it (target: <= 1 per 10 client GETs, with
#     throughput not below coalescing off).
#  2. overhead on a uniform keyspace: -c 50 -r 100000 GET at -P 1 (200k GETs)
#     and -P 16 (2M GETs)
#     (target: within 3% of coalescing off).
# Besides ops/s it reports each rproxy's CPU time per client request (utime +
# stime from /proc over the run): on this shared 2-core box, where the load
# generator competes with rproxy for the cores, it is the steadier measure.
# Usage: bench/coalesce.sh [rounds]   (default 6, about 3 minutes; needs redis-server,
# redis-benchmark, go)
set -euo pipefail
rounds=${1:-6}
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

# ratio A B: the median over rounds of A's value divided by B's in the same
# round (each round runs every mode back to back, so a round's ratio cancels
# most of what this shared machine was doing then).
ratio() { paste <(tr ' ' '\n' <<<"${r[$1]}") <(tr ' ' '\n' <<<"${r[$2]}") | awk 'NF == 2 && $2 > 0 {printf "%.4f\n", $1 / $2}' | median | awk '{printf "%.3f", $1}'; }

declare -A r
n=200000
# Every order of the three modes in turn, so none always runs first or last.
perms=("on inflight off" "inflight off on" "off on inflight" "off inflight on" "on off inflight" "inflight on off")
for round in $(seq "$rounds"); do
	read -ra order <<<"${perms[$(((round - 1) % 6))]}"
	for sc in hot uni1 uni16; do
		for mode in "${order[@]}"; do
			case $mode in on) port=$on ;; off) port=$off ;; inflight) port=$infl ;; esac
			case $sc in
			hot) k=$n args=(-c 200) ;;
			uni1) k=$n args=(-c 50 -r 100000 -P 1) ;;
			uni16) k=$((n * 10)) args=(-c 50 -r 100000 -P 16) ;;
			esac
			redis-cli -p "$rport" config resetstat >/dev/null
			t0=$(ticks "${pid[$mode]}")
			r[${sc}_rps_$mode]+="$(rps "$port" "${args[@]}" -n $k) "
			r[${sc}_cpu_$mode]+="$(usper $(($(ticks "${pid[$mode]}") - t0)) $k) "
			[ $sc = hot ] && r[hot_up_$mode]+="$(gets) "
		done
	done
done

m() { echo ${r[$1]} | tr ' ' '\n' | median; }
echo "## coalescing: $(date -u +%F), $(nproc) cores, $rounds interleaved rounds; values are medians, ratios are medians of per-round ratios"
echo
echo "| scenario | on (window unsent) | on (window inflight) | off | unsent/off | inflight/off |"
echo "|---|---:|---:|---:|---:|---:|"
for sc in hot uni1 uni16; do
	case $sc in hot) what="200 clients GET one key" ;; uni1) what="uniform keyspace GET -P 1" ;; uni16) what="uniform keyspace GET -P 16" ;; esac
	echo "| $what: ops/s | $(m ${sc}_rps_on) | $(m ${sc}_rps_inflight) | $(m ${sc}_rps_off) | $(ratio ${sc}_rps_on ${sc}_rps_off) | $(ratio ${sc}_rps_inflight ${sc}_rps_off) |"
	echo "| $what: rproxy CPU µs/request | $(m ${sc}_cpu_on) | $(m ${sc}_cpu_inflight) | $(m ${sc}_cpu_off) | $(ratio ${sc}_cpu_on ${sc}_cpu_off) | $(ratio ${sc}_cpu_inflight ${sc}_cpu_off) |"
done
per() { echo ${r[$1]} | tr ' ' '\n' | awk -v n=$n 'NF {printf "%.1f\n", n / $1}' | median; }
echo "| 200 clients GET one key: client GETs per GET reaching Redis | $(per hot_up_on) | $(per hot_up_inflight) | 1 | | |"
echo
echo "Per round, client GETs per GET reaching Redis (unsent): $(echo ${r[hot_up_on]} | tr ' ' '\n' | awk -v n=$n 'NF {printf "%.1f ", n / $1}')"
echo "Per round (inflight): $(echo ${r[hot_up_inflight]} | tr ' ' '\n' | awk -v n=$n 'NF {printf "%.1f ", n / $1}')"
