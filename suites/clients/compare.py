#!/usr/bin/python3
"""Compare client-scenario results: compare.py OUT LIB... (reads OUT/<lib>-direct.json
and OUT/<lib>-rproxy.json). Prints one line per scenario and library, writes
OUT/summary.md, and prints "same=N differ=M broken=K" last (broken: the scenario
raised or a library did not run against Redis itself)."""
import json
import os
import sys

out_dir, libs = sys.argv[1], sys.argv[2:]


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
    """First differing paths between a and b."""
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


same = differ = broken = 0
lines = ["| library | scenario | result | direct | rproxy |", "|---|---|---|---|---|"]
for lib in libs:
    d = load(os.path.join(out_dir, lib + "-direct.json"))
    p = load(os.path.join(out_dir, lib + "-rproxy.json"))
    for name in sorted(set(d) | set(p)):
        dv, pv = d.get(name, "<missing>"), p.get(name, "<missing>")
        if name == "__load_error__" or (isinstance(dv, dict) and "exception" in dv):
            broken += 1
            print("BROKEN %-8s %-32s direct: %s" % (lib, name, short(dv)))
            lines.append("| %s | %s | broken direct | `%s` | |" % (lib, name, short(dv, 200)))
            continue
        if dv == pv:
            same += 1
            print("same   %-8s %s" % (lib, name))
            lines.append("| %s | %s | same | | |" % (lib, name))
            continue
        differ += 1
        for path, a, b in diff(dv, pv)[:4]:
            print("DIFFER %-8s %-32s %s: direct %s, rproxy %s" % (lib, name, path, short(a, 160), short(b, 160)))
            lines.append("| %s | %s | differs at `%s` | `%s` | `%s` |" % (
                lib, name, path, short(a, 160).replace("|", "\\|"), short(b, 160).replace("|", "\\|")))
with open(os.path.join(out_dir, "summary.md"), "w") as f:
    f.write("\n".join(lines) + "\n\nsame=%d differ=%d broken=%d\n" % (same, differ, broken))
print("same=%d differ=%d broken=%d" % (same, differ, broken))
