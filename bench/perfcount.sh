#!/bin/bash
# bench/perfcount.sh RPROXY_BIN [PIPELINE] [RPROXY ARGS...]
# Counts per GET that reached Redis, for one rproxy under redis-benchmark
# (-c 50 -r 100000 -t get, PIPELINE default 1) over 3 s: CPU µs (utime+stime
# from /proc), system calls, reads (read or recvmsg) that failed (EAGAIN:
# found nothing), context switches and migrations (perf stat).
# Starts its own redis-server on a free-ish port and stops everything it
# started. Needs redis-server, redis-benchmark, redis-cli, perf, bc.
set -u
BIN=$1; P=${2:-1}; shift; [ $# -gt 0 ] && shift
D=$(mktemp -d); RP=$((30000+RANDOM%5000)); PP=$((RP+1))
redis-server --port "$RP" --save "" --appendonly no >"$D/redis.log" 2>&1 & RPID=$!
sleep 0.3; kill -0 $RPID 2>/dev/null || { echo "redis-server exited:"; cat "$D/redis.log"; exit 1; }
"$BIN" -listen 127.0.0.1:$PP -upstream 127.0.0.1:$RP "$@" >"$D/rproxy.log" 2>&1 & XPID=$!
BPID=; trap 'kill $BPID $XPID $RPID 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
sleep 0.7; kill -0 $XPID 2>/dev/null || { echo "rproxy exited:"; cat "$D/rproxy.log"; exit 1; }
redis-benchmark -p $PP -c 50 -n 50000000 -r 100000 -P "$P" -t get -q >/dev/null 2>&1 & BPID=$!
sleep 1
redis-cli -p $RP config resetstat >/dev/null
t0=$(awk '{print $14+$15}' /proc/$XPID/stat)
perf stat -e context-switches,cpu-migrations,raw_syscalls:sys_enter \
  -e syscalls:sys_exit_read --filter 'ret < 0' -e syscalls:sys_exit_recvmsg --filter 'ret < 0' \
  -p $XPID -o "$D/perf" -- sleep 3 2>/dev/null
t1=$(awk '{print $14+$15}' /proc/$XPID/stat)
g=$(redis-cli -p $RP info commandstats | grep cmdstat_get | sed "s/^cmdstat_get:calls=\([0-9]*\),.*/\1/")
echo "-P $P: $g GETs in 3 s; CPU µs/GET $(echo "($t1-$t0)*1000000/$(getconf CLK_TCK)/$g" | bc -l | cut -c1-6)"
grep -E "context|migr|sys_enter|sys_exit_re" "$D/perf" | sed 's/syscalls:sys_exit_\(re[a-z]*\)/failed_\1(EAGAIN)/' |
  awk -v g="$g" '{gsub(",","",$1); printf "  %-28s %12s  per GET %.4f\n", $2, $1, $1/g}'
