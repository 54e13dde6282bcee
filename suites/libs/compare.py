#!/usr/bin/python3
"""Compare the direct and rproxy runs of suites/libs/run.sh.

Usage: compare.py OUT_DIR

Reads OUT_DIR/goredis-{direct,rproxy}/{ginkgo.json,plain.out} and
OUT_DIR/redispy-{direct,rproxy}/junit.xml, OUT_DIR/redigo-{direct,rproxy}/test.out
and OUT_DIR/rueidis-{direct,rproxy}/{root.out,lock.out,compat.json,compat.out},
prints Markdown: per suite the
passed/failed/skipped counts of each run, then every test that failed (or
did not finish) through rproxy but passed direct, with its error text.
"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

MAX_ERR = 600


def clip(text):
    text = re.sub(r"\x1b\[[0-9;]*m", "", text or "").strip()
    lines = [l.rstrip() for l in text.splitlines() if l.strip()]
    # Drop consecutive duplicate lines (Gomega prints a RedisError twice).
    out = []
    for l in lines:
        if not out or out[-1].strip() != l.strip():
            out.append(l)
    text = "\n".join(out)
    return text if len(text) <= MAX_ERR else text[:MAX_ERR] + " [...]"


def ginkgo(path):
    """name -> (state, error) from a Ginkgo JSON report."""
    res = {}
    if not os.path.exists(path):
        return None
    for suite in json.load(open(path)):
        for s in suite.get("SpecReports") or []:
            if s.get("LeafNodeType") != "It":
                if s.get("State") not in ("passed", "skipped"):
                    name = "[%s] %s" % (s.get("LeafNodeType"), s.get("LeafNodeText", ""))
                    res[name] = ("failed", clip((s.get("Failure") or {}).get("Message", "")))
                continue
            name = " ".join(s.get("ContainerHierarchyTexts") or [])
            name = (name + " " + s.get("LeafNodeText", "")).strip()
            base, n = name, 2
            while name in res:
                name = "%s #%d" % (base, n)
                n += 1
            st = s.get("State")
            err = ""
            if st not in ("passed", "skipped", "pending"):
                f = s.get("Failure") or {}
                loc = f.get("Location") or {}
                err = clip(f.get("Message", ""))
                if loc.get("FileName"):
                    err += "\n(at %s:%s)" % (os.path.basename(loc["FileName"]), loc.get("LineNumber"))
                st = "failed" if st == "failed" else "failed (%s)" % st
            res[name] = (st, err)
    return res


RESULT = re.compile(r"^(\s*)--- (PASS|FAIL|SKIP): (\S+) \(")


def gotest(path):
    """name -> (state, error) from `go test -v` output; None if missing.
    A test's error text is what it logged between its "=== RUN" line and its
    result line (or after it, for subtests). Tests started but never
    reported count as "did not finish"."""
    if not os.path.exists(path):
        return None
    res, started, logs, cur = {}, [], {}, None
    lines = open(path, errors="replace").read().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^=== (?:RUN|CONT|PAUSE|NAME)\s+(\S+)", line)
        if m:
            cur = m.group(1)
            if line.startswith("=== RUN"):
                started.append(cur)
            continue
        m = RESULT.match(line)
        if m:
            ind, st, name = m.groups()
            if st == "FAIL":
                body = list(logs.get(name, []))
                for l in lines[i + 1:]:
                    if RESULT.match(l) or l.startswith("=== ") or not l.startswith(ind + "    "):
                        break
                    body.append(l.strip())
                res[name] = ("failed", clip("\n".join(body)))
            else:
                res[name] = ({"PASS": "passed", "SKIP": "skipped"}[st], "")
            cur = None
            continue
        if cur and line.startswith("    "):
            logs.setdefault(cur, []).append(line.strip())
    panic = next((l for l in lines if l.startswith("panic: ")), "")
    for name in started:
        if name not in res:
            res[name] = ("failed (did not finish)", clip(panic or "no result line (run killed or timed out)"))
    return res


def junit(path):
    if not os.path.exists(path):
        return None
    res = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = "%s::%s" % (tc.get("classname", ""), tc.get("name", ""))
        st, err = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error"):
                st = "failed"
                err = clip((child.get("message") or "") + "\n" + (child.text or "")[-MAX_ERR:])
                break
            if child.tag == "skipped":
                st = "skipped"
        res[name] = (st, err)
    return res


def counts(res):
    c = {"passed": 0, "failed": 0, "skipped": 0}
    for st, _ in res.values():
        if st.startswith("failed"):
            c["failed"] += 1
        elif st in c:
            c[st] += 1
    return c


def tail_status(path):
    if not os.path.exists(path):
        return ""
    lines = open(path, errors="replace").read().splitlines()
    ex = [l for l in lines if l.startswith("exit ")]
    return ex[-1] if ex else ""


def main():
    out = sys.argv[1]
    print("# rproxy: client libraries' own suites, direct vs through rproxy\n")
    info = os.path.join(out, "info.txt")
    if os.path.exists(info):
        print("```\n" + open(info).read().strip() + "\n```\n")
    suites = [
        ("go-redis Ginkgo suite", ginkgo, "goredis-%s/ginkgo.json", "goredis-%s/ginkgo.out"),
        ("go-redis plain Go tests", gotest, "goredis-%s/plain.out", "goredis-%s/plain.out"),
        ("redis-py", junit, "redispy-%s/junit.xml", "redispy-%s/pytest.out"),
        ("redigo", gotest, "redigo-%s/test.out", "redigo-%s/test.out"),
        ("rueidis root package", gotest, "rueidis-%s/root.out", "rueidis-%s/root.out"),
        ("rueidislock", gotest, "rueidis-%s/lock.out", "rueidis-%s/lock.out"),
        ("rueidiscompat Ginkgo suite", ginkgo, "rueidis-%s/compat.json", "rueidis-%s/compat.out"),
        ("rueidiscompat plain Go tests", gotest, "rueidis-%s/compat.out", "rueidis-%s/compat.out"),
    ]
    total = 0
    for title, parse, pat, logpat in suites:
        d = parse(os.path.join(out, pat % "direct"))
        r = parse(os.path.join(out, pat % "rproxy"))
        if d is None and r is None:
            continue
        print("## %s\n" % title)
        print("| run | passed | failed | skipped | exit |\n|---|---|---|---|---|")
        for mode, res in (("direct", d), ("rproxy", r)):
            if res is None:
                print("| %s | (no report) | | | %s |" % (mode, tail_status(os.path.join(out, logpat % mode))))
                continue
            c = counts(res)
            print("| %s | %d | %d | %d | %s |" % (mode, c["passed"], c["failed"], c["skipped"],
                                                 tail_status(os.path.join(out, logpat % mode))))
        d, r = d or {}, r or {}
        only = [(n, r[n]) for n in r if r[n][0].startswith("failed") and d.get(n, ("",))[0] == "passed"]
        missing = [n for n in d if d[n][0] == "passed" and n not in r]
        both = [n for n in r if r[n][0].startswith("failed") and d.get(n, ("",))[0].startswith("failed")]
        print("\nFailing only through rproxy: %d. Failing both ways: %d. Passed direct but no result "
              "through rproxy: %d.\n" % (len(only), len(both), len(missing)))
        total += len(only)
        for n, (st, err) in only:
            print("- `%s` (%s)\n\n```\n%s\n```\n" % (n, st, err or "(no error text)"))
        skipped = [n for n in r if r[n][0] == "skipped" and d.get(n, ("",))[0] == "passed"]
        if skipped:
            print("Passed direct, skipped through rproxy (a test's own Skip; not counted as failures):\n")
            for n in skipped:
                print("- `%s`" % n)
            print()
        if missing:
            print("Passed direct, no result through rproxy (run cut short?):\n")
            for n in missing[:50]:
                print("- `%s`" % n)
            if len(missing) > 50:
                print("- ... and %d more" % (len(missing) - 50))
            print()
    print("Total failing only through rproxy: %d" % total)


if __name__ == "__main__":
    main()
