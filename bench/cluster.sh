#!/usr/bin/env bash
# Salted fan-out benchmark: one hot key on a 3-master Redis Cluster, read
# through rproxy in cluster mode with salting off and with
# hotkeys.salt.copies 3; the local tier is off in both, coalescing on (the
# default). Interleaved rounds (the order alternates), medians.
# Load: 200 clients, pipeline 1, every GET on key:0 (load -dist hot).
# For each run: client ops/s and latency; GETs reaching each master (INFO
# commandstats) and each master's share of them (target with 3 copies: no
# master above 40%); Redis CPU per client request per master and in total;
# rproxy CPU per request. Then the throughput ceiling the busiest master
# sets with a core per master, off and on.
# Usage: bench/cluster.sh [rounds] [seconds per run]   (default 3, 8)
# Needs redis-server and redis-cli 7.x, go, python3, curl; Linux (/proc).
set -euo pipefail
rounds=${1:-3}
secs=${2:-8}
clients=200
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A cluster node also listens on its port + 10000 (the cluster bus): pick a
# port with both free, the bus port below the ephemeral range (32768 up,
# where an outgoing connection may hold it), not one taken by an earlier node.
nodeport() {
	python3 - "$@" <<'EOF'
import random, socket, sys
taken = {int(a) for a in sys.argv[1:]}
while True:
    p = random.randint(14000, 18999)
    if p in taken or p + 10000 in taken or p - 10000 in taken:
        continue
    ss = [socket.socket(), socket.socket()]
    try:
        ss[0].bind(("127.0.0.1", p)); ss[1].bind(("127.0.0.1", p + 10000))
        print(p); break
    except OSError:
        pass
    finally:
        for s in ss: s.close()
EOF
}
waitping() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.05; done; echo "no PONG on $1" >&2; exit 1; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; } # utime+stime, clock ticks
hz=$(getconf CLK_TCK)

go build -o "$tmp/rproxy" ./cmd/rproxy
go build -o "$tmp/load" ./bench/cmd/load

# The cluster: three masters, no replicas, each in its own directory.
mports=() mpids=()
for i in 0 1 2; do
	p=$(nodeport "${mports[@]}")
	mkdir -p "$tmp/n$i"
	redis-server --port "$p" --bind 127.0.0.1 --dir "$tmp/n$i" --cluster-enabled yes \
		--cluster-config-file "$tmp/n$i/nodes.conf" --cluster-node-timeout 2000 \
		--save "" --appendonly no >"$tmp/n$i/redis.log" 2>&1 &
	mpids+=($!); pids+=($!); mports+=("$p")
done
for p in "${mports[@]}"; do waitping "$p"; done
redis-cli --cluster create "${mports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"$tmp/create.log" 2>&1 ||
	{ cat "$tmp/create.log" >&2; exit 1; }
for p in "${mports[@]}"; do
	for _ in $(seq 200); do redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' && break; sleep 0.05; done
	redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' || { echo "cluster_state not ok on $p" >&2; exit 1; }
done

# rproxy in cluster mode, the local tier off: salting off, and 3 copies.
printf 'upstream:\n  address: 127.0.0.1:%s\n  mode: cluster\nhotkeys:\n  tier: false\n' "${mports[0]}" >"$tmp/off.yaml"
printf 'upstream:\n  address: 127.0.0.1:%s\n  mode: cluster\nhotkeys:\n  tier: false\n  salt:\n    copies: 3\n' "${mports[0]}" >"$tmp/on.yaml"
# The same two with coalescing off: each GET reaches Redis, as the sum of a
# fleet of per-node rproxies does (each coalesces only its own clients).
for c in off on; do
	cat "$tmp/$c.yaml" >"$tmp/${c}nc.yaml"
	printf 'coalesce:\n  commands: []\n' >>"$tmp/${c}nc.yaml"
done
declare -A port admin ppid
for c in off on offnc onnc; do
	port[$c]=$(freeport); admin[$c]=$(freeport)
	"$tmp/rproxy" -listen 127.0.0.1:${port[$c]} -admin 127.0.0.1:${admin[$c]} -config "$tmp/$c.yaml" 2>"$tmp/$c.log" &
	ppid[$c]=$!; pids+=($!)
done
for c in off on offnc onnc; do waitping "${port[$c]}"; done

# The hot key, 32 bytes, written through rproxy; which master owns it.
value=$(printf 'v%.0s' $(seq 32))
[ "$(redis-cli -p "${port[off]}" set key:0 "$value")" = OK ] || { echo "SET key:0 through rproxy failed" >&2; exit 1; }
origin=-1
for i in 0 1 2; do
	[ "$(redis-cli -p "${mports[$i]}" exists key:0)" = 1 ] && origin=$i
done
[ "$origin" -ge 0 ] || { echo "key:0 not found on any master" >&2; exit 1; }

gets() { local n; n=$(redis-cli -p "$1" info commandstats | sed -n 's/^cmdstat_get:calls=\([0-9]*\),.*/\1/p'); echo "${n:-0}"; }
# salt reads by outcome, fills and coalescing counters, as "name value" lines
metrics() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^rproxy_(hotkey_salt_(reads|copy_fills)_total|coalesce)/{sub(/^rproxy_(hotkey_)?/, ""); sub(/\{outcome=/, "_"); gsub(/[{}"]/, ""); print $1, $2}'; }

# The masters' background CPU (cron, cluster bus, rproxy's slot-map refresh)
# with no load, for scale.
echo "idle baseline (${secs}s)..." >&2
i0=(); for p in "${mpids[@]}"; do i0+=("$(ticks "$p")"); done
sleep "$secs"
idle=""; for i in 0 1 2; do idle+="$(($(ticks "${mpids[$i]}") - i0[i])) "; done

results="$tmp/results.tsv"
: >"$results"
for round in $(seq "$rounds"); do
	order=(off on offnc onnc)
	case $((round % 4)) in 2) order=(on offnc onnc off) ;; 3) order=(offnc onnc off on) ;; 0) order=(onnc off on offnc) ;; esac
	for c in "${order[@]}"; do
		echo "round $round: salting $c" >&2
		# Warm up: the key turns hot, its copies are filled, then measure.
		"$tmp/load" -addr 127.0.0.1:${port[$c]} -clients $clients -pipeline 1 -dist hot -duration 2s >/dev/null
		for p in "${mports[@]}"; do redis-cli -p "$p" config resetstat >/dev/null; done
		metrics "${admin[$c]}" >"$tmp/m0"
		t0=(); for p in "${mpids[@]}"; do t0+=("$(ticks "$p")"); done
		x0=$(ticks "${ppid[$c]}")
		"$tmp/load" -addr 127.0.0.1:${port[$c]} -clients $clients -pipeline 1 -dist hot -duration "${secs}s" -json >"$tmp/out.json"
		x1=$(ticks "${ppid[$c]}")
		t1=(); for p in "${mpids[@]}"; do t1+=("$(ticks "$p")"); done
		g=(); for p in "${mports[@]}"; do g+=("$(gets "$p")"); done
		metrics "${admin[$c]}" >"$tmp/m1"
		# round, cfg, out.json, origin, GETs and CPU ticks per master, rproxy ticks, metric deltas, ports
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$c" "$(tr -d '\n\t' <"$tmp/out.json")" "$origin" \
			"${g[0]}" "${g[1]}" "${g[2]}" $((t1[0] - t0[0])) $((t1[1] - t0[1])) $((t1[2] - t0[2])) $((x1 - x0)) \
			"$(awk 'NR==FNR{a[$1]=$2; next} {printf "%s%s=%.0f", s, $1, $2-a[$1]; s=","}' "$tmp/m0" "$tmp/m1")" "${mports[*]}" >>"$results"
	done
done

# Redis's own CPU per GET at saturation: redis-benchmark straight at the
# origin master, 50 clients pipelining 32 GETs of the key (Redis batches
# commands per event-loop wakeup, so this is what a saturated master pays).
echo "saturating the origin master..." >&2
satn=2000000
s0=$(ticks "${mpids[$origin]}")
redis-benchmark -p "${mports[$origin]}" -c 50 -P 32 -n $satn -q GET key:0 >"$tmp/sat.txt" 2>&1
s1=$(ticks "${mpids[$origin]}")
sat="$((s1 - s0)) $satn $(tr '\r' '\n' <"$tmp/sat.txt" | awk -F': ' '/requests per second/{split($2, a, " "); r=a[1]} END{print r}')"

python3 - "$results" "$rounds" "$secs" "$clients" "$hz" "$idle" "$sat" <<'EOF'
import sys, json, statistics as st, datetime, os
path, rounds, secs, clients, hz = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
runs = []
for line in open(path):
    f = line.rstrip("\n").split("\t")
    r = json.loads(f[2])
    origin = int(f[3])
    gets = [int(x) for x in f[4:7]]
    mt = [int(x) for x in f[7:10]]
    ops = r["ops"]
    # masters ordered: the key's own master (the origin) first, then the others
    idx = [origin] + [i for i in range(3) if i != origin]
    total = sum(gets)
    cpu = [mt[i] / hz * 1e6 / ops for i in idx]
    runs.append(dict(
        round=int(f[0]), cfg=f[1], ops_s=r["ops_per_sec"], ops=ops,
        p50=r["latency_us"]["p50"], p99=r["latency_us"]["p99"],
        errors=r["errors"], conn_errors=r["conn_errors"], nulls=r["nulls"],
        up=total / ops * 100,
        share=[gets[i] / total * 100 for i in idx],
        rcpu=sum(cpu), busiest=max(cpu),
        pcpu=int(f[10]) / hz * 1e6 / ops,
        m={k: float(v) for k, v in (kv.rsplit("=", 1) for kv in f[11].split(",") if kv)},
        ports=f[12].split(), idx=idx))
idle = [int(x) / hz * 1e3 / float(secs) for x in sys.argv[6].split()]  # ms of CPU per second
med = lambda cfg, fn: st.median(fn(r) for r in runs if r["cfg"] == cfg)
ratio = {}
for r in runs:
    ratio.setdefault(r["round"], {})[r["cfg"]] = r["ops_s"]
onoff = st.median(v["on"] / v["off"] for v in ratio.values() if "on" in v and "off" in v)
onoffnc = st.median(v["onnc"] / v["offnc"] for v in ratio.values() if "onnc" in v and "offnc" in v)
ports = runs[0]["ports"]
idx = runs[0]["idx"]

print(f"## salted fan-out on a Redis Cluster: {datetime.date.today()}, {os.cpu_count()} cores, "
      f"{rounds} interleaved rounds of {secs}s, {clients} clients, pipeline 1, one hot key, medians")
print()
print(f"3 masters (redis-server 7.0, no replicas), rproxy in cluster mode with the local tier off, "
      f"coalescing on or off as the table says; `key:0` (32 bytes) lives on the origin master (:{ports[idx[0]]}), the others are "
      f":{ports[idx[1]]} and :{ports[idx[2]]}. Shares are of the GETs that reached Redis.")
print()
print("| salting | coalescing | ops/s | on/off | p50 µs | p99 µs | GETs reaching Redis per 100 client GETs | GETs reaching the busiest master per 100 client GETs "
      "| max master share "
      "| origin share | other 1 share | other 2 share | Redis CPU µs per client request (all masters) "
      "| busiest master CPU µs per client request | rproxy CPU µs/req |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
names = {"off": "off | on", "on": "**3 copies** | on", "offnc": "off | off", "onnc": "**3 copies** | off"}
rat = {"off": 1.0, "on": onoff, "offnc": 1.0, "onnc": onoffnc}
for cfg in ("off", "on", "offnc", "onnc"):
    shares = [med(cfg, lambda r, j=j: r["share"][j]) for j in range(3)]
    print(f"| {names[cfg]} | {med(cfg, lambda r: r['ops_s']):.0f} | {rat[cfg]:.2f} "
          f"| {med(cfg, lambda r: r['p50']):.0f} | {med(cfg, lambda r: r['p99']):.0f} "
          f"| {med(cfg, lambda r: r['up']):.2f} | {med(cfg, lambda r: r['up'] * max(r['share']) / 100):.2f} "
          f"| {med(cfg, lambda r: max(r['share'])):.1f}% | "
          + " | ".join(f"{s:.1f}%" for s in shares) +
          f" | {med(cfg, lambda r: r['rcpu']):.2f} | {med(cfg, lambda r: r['busiest']):.2f} "
          f"| {med(cfg, lambda r: r['pcpu']):.2f} |")
print()
errs = sum(r["errors"] for r in runs); cerrs = sum(r["conn_errors"] for r in runs); nulls = sum(r["nulls"] for r in runs)
print(f"Load generator over all {len(runs)} runs: {errs} error replies, {cerrs} broken connections, {nulls} null GETs.")
on = [r for r in runs if r["cfg"] == "on"]
if on:
    def mm(k):
        return st.median(r["m"].get(k, 0) for r in on)
    keys = [k for k in ("salt_reads_total_copy_hit", "salt_reads_total_copy_miss",
                        "salt_reads_total_copy_joined", "salt_reads_total_origin", "salt_copy_fills_total")]
    print("rproxy's counters with 3 copies, median per measured run: "
          + ", ".join(f"{k.replace('salt_reads_total_', 'salt reads ').replace('salt_copy_fills_total', 'copy fills')} {mm(k):.0f}" for k in keys)
          + f" (client GETs per run: {st.median(r['ops'] for r in on):.0f}).")
coal = sorted({k for r in runs for k in r["m"] if k.startswith("coalesce")})
if coal:
    print("Coalescing counters, median per measured run (off / 3 copies): "
          + ", ".join(f"{k} {med('off', lambda r, k=k: r['m'].get(k, 0)):.0f} / {med('on', lambda r, k=k: r['m'].get(k, 0)):.0f}" for k in coal) + ".")
print()
boff = med("off", lambda r: r["busiest"]); bon = med("on", lambda r: r["busiest"])
coff, con = 1e6 / boff, 1e6 / bon
bnoff = med("offnc", lambda r: r["busiest"]); bnon = med("onnc", lambda r: r["busiest"])
print(f"**Scaling.** On this {os.cpu_count()}-core machine the load generator and rproxy, not Redis, bound the "
      f"measured ops/s: all of them and the three masters share the cores, and rproxy alone spends "
      f"{med('on', lambda r: r['pcpu']):.1f} µs of CPU per request against the busiest master's "
      f"{bon:.2f} µs (3 copies), so the ops/s above say nothing about Redis's limit. With a core per master, "
      f"the hot key's throughput is bounded by its busiest master: ceiling ≈ 1e6 / (busiest master CPU µs per "
      f"client request) client GETs/s. Salting off: 1e6 / {boff:.2f} ≈ {coff:,.0f} client GETs/s; 3 copies: "
      f"1e6 / {bon:.2f} ≈ {con:,.0f} client GETs/s; **{con / coff:.2f}×**. This is how the Redis-side ceiling "
      f"would scale on a machine with a core per master, given enough rproxy and client capacity in front and "
      f"the same share of GETs that coalescing lets through (which depends on concurrency and latency). "
      f"With no load each master used {max(idle):.1f} ms of CPU per second or less (cron, cluster bus, "
      f"rproxy's slot-map refresh; /proc counts 10 ms ticks), which is in these per-request figures too. "
      f"Without coalescing (every client GET reaches Redis, as the sum over a fleet of per-node rproxies "
      f"does), the busiest master's CPU per client request goes from {bnoff:.2f} µs to {bnon:.2f} µs with 3 "
      f"copies: ceiling 1e6 / {bnoff:.2f} ≈ {1e6 / bnoff:,.0f} vs 1e6 / {bnon:.2f} ≈ {1e6 / bnon:,.0f} client "
      f"GETs/s, **{bnoff / bnon:.2f}×**.")
print()
st_ticks, st_n, st_rps = sys.argv[7].split()
per_get = int(st_ticks) / hz * 1e6 / int(st_n)
cap = 1e6 / per_get
def ceil(cfg):
    # client GETs/s at which the busiest master saturates
    return cap / (med(cfg, lambda r: r["up"] * max(r["share"]) / 100) / 100)
print(f"**At saturation.** Those per-request figures come from masters far from busy, where each GET "
      f"pays a whole event-loop wakeup. Saturated, Redis batches: redis-benchmark straight at the origin "
      f"master (50 clients, pipeline 32, GET of the key) ran {float(st_rps):,.0f} GETs/s at "
      f"{per_get:.2f} µs of Redis CPU per GET, so one master core serves about {cap:,.0f} GETs/s of the "
      f"key. The busiest master then caps the hot key at that rate divided by the share of client GETs "
      f"that reach it: coalescing on, {ceil('off'):,.0f} client GETs/s salting off vs {ceil('on'):,.0f} "
      f"with 3 copies (**{ceil('on') / ceil('off'):.2f}×**); coalescing off (each client GET reaches "
      f"Redis, as summed over a fleet of per-node rproxies), {ceil('offnc'):,.0f} vs {ceil('onnc'):,.0f} "
      f"(**{ceil('onnc') / ceil('offnc'):.2f}×**). That is how the hot key's Redis-side throughput would "
      f"scale with a core per master, given enough rproxy and client capacity in front.")
EOF
