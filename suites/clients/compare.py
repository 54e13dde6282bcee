#!/usr/bin/python3
"""Compare client-scenario results: compare.py OUT MODES LIB...

MODES is a comma-separated list of rproxy modes (rproxy: the suite config;
default: rproxy's default config; cluster: the suite config in front of a
3-master cluster; salted: the same with every scenario key salted and the
local tier off; sentinel: the suite config, the server found through a
Sentinel). Reads OUT/<lib>-direct.json and
OUT/<lib>-<mode>.json, prints one line per library, mode and scenario, writes
OUT/summary.md, and prints "same=N differ=M intended=I broken=K" last.
broken: the scenario raised against Redis itself. intended: a difference that
a documented stage of the default config makes on purpose, or that a cluster
upstream cannot avoid (INTENDED below).
"""
import json
import os
import sys

out_dir, modes, libs = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]

# (mode, scenario): why the difference is intended, or (modes "cluster" and
# "salted") inherent to a cluster upstream.
TX_SPANS_MASTERS = ("the transaction's keys are on several masters, which no master can run as one: "
                    "EXEC gets CROSSSLOT (docs/cluster.md)")
INTENDED = {
    ("cluster", "select_db"): "a cluster has database 0 only: SELECT gets the cluster's own error (docs/cluster.md)",
    ("cluster", "tx_pipeline"): TX_SPANS_MASTERS,
    ("cluster", "tx_exec_error"): TX_SPANS_MASTERS,
    ("cluster", "tx_queue_error"): TX_SPANS_MASTERS,
    ("salted", "select_db"): "a cluster has database 0 only: SELECT gets the cluster's own error (docs/cluster.md)",
    ("salted", "tx_pipeline"): TX_SPANS_MASTERS,
    ("salted", "tx_exec_error"): TX_SPANS_MASTERS,
    ("salted", "tx_queue_error"): TX_SPANS_MASTERS,
    ("default", "expiry_exact"): "TTL jitter spreads SET EX TTLs over the 10% below the one asked for (docs/policy.md)",
    ("default", "lua_scripts"): "the default policy refuses the scenario's SCRIPT FLUSH, which affects every client (docs/policy.md)",
    ("default", "acl_user"): "auth.mode none (the default) answers AUTH as a Redis without passwords: another user than default gets WRONGPASS (docs/commands.md)",
}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"__load_error__": str(e)}


def short(v, n=300):
    s = json.dumps(v, sort_keys=True)
    return s if len(s) <= n else s[:n] + "..."


def diff(a, b, path=""):
    """The differing paths between a and b."""
    if type(a) is not type(b):
        return [(path or ".", a, b)]
    if isinstance(a, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if a.get(key, "<absent>") != b.get(key, "<absent>"):
                out += diff(a.get(key, "<absent>"), b.get(key, "<absent>"), path + "." + key)
        return out
    if isinstance(a, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                out += diff(x, y, "%s[%d]" % (path, i))
        return out
    return [] if a == b else [(path or ".", a, b)]


def cell(v):
    return short(v, 160).replace("|", "\\|")


same = differ = broken = intended = 0
lines = ["| library | rproxy config | scenario | result | direct | rproxy |", "|---|---|---|---|---|---|"]
for lib in libs:
    d = load(os.path.join(out_dir, lib + "-direct.json"))
    for mode in modes:
        p = load(os.path.join(out_dir, "%s-%s.json" % (lib, mode)))
        for name in sorted(set(d) | set(p)):
            dv, pv = d.get(name, "<missing>"), p.get(name, "<missing>")
            tag = "%-9s %-8s %-30s" % (lib, mode, name)
            if name == "__load_error__" or (isinstance(dv, dict) and "exception" in dv):
                broken += 1
                print("BROKEN %s direct: %s" % (tag, short(dv)))
                lines.append("| %s | %s | %s | broken direct | `%s` | |" % (lib, mode, name, cell(dv)))
                continue
            if dv == pv:
                same += 1
                print("same   %s" % tag)
                lines.append("| %s | %s | %s | same | | |" % (lib, mode, name))
                continue
            why = INTENDED.get((mode, name))
            if why:
                intended += 1
                print("INTEND %s %s" % (tag, why))
                lines.append("| %s | %s | %s | differs on purpose: %s | | |" % (lib, mode, name, why))
                continue
            differ += 1
            for path, a, b in diff(dv, pv)[:6]:
                print("DIFFER %s %s: direct %s, rproxy %s" % (tag, path, short(a, 160), short(b, 160)))
                lines.append("| %s | %s | %s | differs at `%s` | `%s` | `%s` |" % (lib, mode, name, path, cell(a), cell(b)))

total = "same=%d differ=%d intended=%d broken=%d" % (same, differ, intended, broken)
with open(os.path.join(out_dir, "summary.md"), "w") as f:
    f.write("\n".join(lines) + "\n\n" + total + "\n")
print(total)
