#!/usr/bin/python3
"""Client scenarios as redis-py sends them (Debian's python3-redis).

Usage: scenarios.py HOST:PORT > result.json

Each scenario uses its own keys (cs:py:<scenario>:...), deletes them first,
and returns a JSON value that does not depend on the address it ran against:
scripts/client-suite.sh runs this once against Redis and once through rproxy
and compares the two outputs scenario by scenario. A scenario that raises
returns {"exception": "<type>: <message>"}.
"""
import json
import sys
import threading
import time

import redis

HOST, PORT = sys.argv[1].rsplit(":", 1)
PORT = int(PORT)


def client(**kw):
    kw.setdefault("socket_timeout", 10)
    return redis.Redis(host=HOST, port=PORT, **kw)


def k(scen, name):
    return "cs:py:%s:%s" % (scen, name)


def j(v):
    """Replies as JSON: bytes as text, errors as their message."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [j(x) for x in v]
    if isinstance(v, dict):
        return {str(j(a)): j(b) for a, b in v.items()}
    if isinstance(v, Exception):
        return {"error": str(v)}
    return v


def wait_blocked(r, n=1, timeout=5.0):
    """Wait until Redis reports at least n blocked clients (INFO clients)."""
    end = time.time() + timeout
    while time.time() < end:
        if r.info("clients").get("blocked_clients", 0) >= n:
            return True
        time.sleep(0.005)
    return False


SCENARIOS = []


def scenario(f):
    SCENARIOS.append(f)
    return f


@scenario
def tx_pipeline():
    """MULTI; DEL; GET; INCR; EXEC in one write (redis-py pipeline, transaction=True)."""
    r = client()
    a, b, n = k("tx", "a"), k("tx", "b"), k("tx", "n")
    r.delete(a, b, n)
    r.set(a, "x")
    r.set(b, "vb")
    p = r.pipeline(transaction=True)
    p.delete(a).get(b).incr(n).set(a, "y", ex=100).ttl(a)
    return j(p.execute())


@scenario
def tx_queue_error():
    """A command rejected at queue time (wrong arity) aborts the whole transaction."""
    r = client()
    s1, s2 = k("txerr", "s1"), k("txerr", "s2")
    r.delete(s1, s2)
    p = r.pipeline(transaction=True)
    p.set(s1, "x")
    p.execute_command("GET")  # wrong number of arguments: -ERR at queue time
    p.set(s2, "y")
    try:
        res = j(p.execute())
    except redis.RedisError as e:
        res = {"error_type": type(e).__name__, "error": str(e)}
    return {"exec": res, "s1": r.exists(s1), "s2": r.exists(s2)}


@scenario
def tx_exec_error():
    """A command failing at EXEC time (INCR of a non-integer) fails alone."""
    r = client()
    s, c = k("txexec", "s"), k("txexec", "c")
    r.delete(s, c)
    r.set(s, "notanumber")
    p = r.pipeline(transaction=True)
    p.incr(s).incr(c).get(s)
    return j(p.execute(raise_on_error=False))


@scenario
def watch_retry():
    """WATCH/MULTI/EXEC: a concurrent write aborts the first try, the retry commits."""
    r = client()
    other = client()
    key = k("watch", "counter")
    r.delete(key)
    r.set(key, 10)
    attempts = []
    with r.pipeline() as p:
        while True:
            try:
                p.watch(key)
                v = int(p.get(key))
                if not attempts:
                    other.incr(key)  # another client changes the watched key
                p.multi()
                p.set(key, v * 2)
                res = p.execute()
                attempts.append(["committed", v, j(res)])
                break
            except redis.WatchError:
                attempts.append(["aborted", v])
                continue
    return {"attempts": attempts, "final": j(r.get(key))}


@scenario
def lua_scripts():
    """EVAL, and a registered script (EVALSHA, SCRIPT LOAD on NOSCRIPT)."""
    r = client()
    key = k("lua", "k")
    r.delete(key)
    r.script_flush()
    out = {}
    out["eval"] = j(r.eval("redis.call('SET', KEYS[1], ARGV[1]); "
                           "return {redis.call('GET', KEYS[1]), 42, {ARGV[2], 'nested'}, "
                           "redis.status_reply('FINE')}", 1, key, "v1", "x"))
    out["eval_error"] = j(_err(lambda: r.eval("return redis.call('INCR', KEYS[1])", 1, key)))
    out["eval_pcall"] = j(r.eval("local ok = redis.pcall('INCR', KEYS[1]); return ok['err']", 1, key))
    incr_by = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    k2 = k("lua", "n")
    r.delete(k2)
    out["evalsha_1"] = incr_by(keys=[k2], args=[5])  # NOSCRIPT, then SCRIPT LOAD + EVALSHA
    out["evalsha_2"] = incr_by(keys=[k2], args=[5])
    out["script_exists"] = r.script_exists(incr_by.sha)
    p = r.pipeline(transaction=True)
    incr_by(keys=[k2], args=[1], client=p)
    p.get(k2)
    out["evalsha_in_multi"] = j(p.execute())
    return out


@scenario
def read_own_writes():
    """The guides' patterns, each write read back at once, three times (on a
    cluster with salted copies, reads spread over the copies): a value a
    script rewrites, a lock with a token released by a script, a counter
    written by a transaction sent whole and by one typed command by command."""
    r = client()
    v, lock, ctr = k("own", "v"), k("own", "lock"), k("own", "ctr")
    r.delete(v, lock, ctr)
    reads = lambda key: [j(r.get(key)) for _ in range(3)]
    out = {}
    r.set(v, "v1")
    out["set"] = reads(v)
    out["eval"] = j(r.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, v, "v2"))
    out["after_eval"] = reads(v)
    out["lock"] = j(r.set(lock, "tok1", nx=True, px=10000))
    out["locked"] = reads(lock)
    release = r.register_script(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end")
    out["release"] = release(keys=[lock], args=["tok1"])
    out["after_release"] = reads(lock)
    p = r.pipeline(transaction=True)
    p.incr(ctr)
    p.expire(ctr, 60)
    out["tx"] = j(p.execute())
    out["after_tx"] = reads(ctr)
    t = client(single_connection_client=True)
    out["typed_tx"] = [j(t.execute_command("MULTI")), j(t.execute_command("INCR", ctr)),
                       j(t.execute_command("EXEC"))]
    t.close()
    out["after_typed_tx"] = reads(ctr)
    return out


def _err(f):
    try:
        return f()
    except redis.RedisError as e:
        return {"error": str(e)}


@scenario
def pubsub_subscribe_then_publish():
    """SUBSCRIBE, then PUBLISH at once after the confirmation: every message arrives."""
    r = client()
    ch = k("ps", "ch")
    pat = k("ps", "*")
    ps = client().pubsub()
    ps.subscribe(ch)
    first = ps.get_message(timeout=5)
    ps.psubscribe(pat)
    second = ps.get_message(timeout=5)
    receivers = [r.publish(ch, "m%d" % i) for i in range(20)]
    got = []
    end = time.time() + 5
    while len(got) < 40 and time.time() < end:
        m = ps.get_message(timeout=1)
        if m:
            got.append([m["type"], j(m["data"])])
    ps.unsubscribe(ch)
    ps.punsubscribe(pat)
    unsub = [ps.get_message(timeout=5) for _ in range(2)]
    ps.close()
    return {
        "subscribe": [first["type"], first["data"]],
        "psubscribe": [second["type"], second["data"]],
        "publish_receivers": receivers,
        "messages": sorted(got),
        "unsubscribe": [[m["type"], m["data"]] if m else None for m in unsub],
    }


@scenario
def tracking_redirect():
    """Client-side caching as RESP2 clients do it: one connection subscribes
    to __redis__:invalidate, another turns tracking on with REDIRECT to it
    and reads; a third client's writes invalidate what the second read."""
    w = client()
    key = k("track", "k")
    ps = client().pubsub()
    ps.execute_command("CLIENT", "ID")  # on the connection that subscribes
    target = ps.parse_response(block=True, timeout=5)
    ps.subscribe("__redis__:invalidate")
    confirm = ps.get_message(timeout=5)
    tr = client(single_connection_client=True)
    tracking = _err(lambda: tr.execute_command("CLIENT", "TRACKING", "ON", "REDIRECT", target))
    w.delete(key)
    w.set(key, "v1")

    def invalidated():
        m = ps.get_message(timeout=5)
        return [m["type"], j(m["channel"]), j(m["data"])] if m else None

    first = tr.get(key)
    redir = tr.execute_command("CLIENT", "GETREDIR")
    w.set(key, "v2")
    after_set = invalidated()
    second = tr.get(key)
    w.delete(key)
    after_del = invalidated()
    ps.close()
    tr.close()
    return {
        "subscribe": [confirm["type"], j(confirm["channel"]), confirm["data"]] if confirm else None,
        "tracking": j(tracking),
        "getredir_is_target": redir == target,
        "get": [j(first), j(second)],
        "after_set": after_set,
        "after_del": after_del,
    }


@scenario
def stream_group_block():
    """XREADGROUP BLOCK in one client, XADD from another, then XACK."""
    r = client()
    s = k("stream", "s")
    r.delete(s)
    r.xgroup_create(s, "g", id="$", mkstream=True)
    res = {}

    def reader():
        c = client()
        res["read"] = j(c.xreadgroup("g", "c1", {s: ">"}, count=10, block=5000))

    t = threading.Thread(target=reader)
    t.start()
    blocked = wait_blocked(r)
    r.xadd(s, {"f": "v"}, id="1-1")
    r.xadd(s, {"f": "w"}, id="2-1")
    t.join(10)
    pending = r.xpending(s, "g")
    return {
        "blocked_seen": blocked,
        "read": res.get("read"),
        "pending": j(pending["pending"]),
        "ack": r.xack(s, "g", "1-1", "2-1"),
        "empty": j(r.xreadgroup("g", "c1", {s: ">"}, count=10, block=100)),
    }


@scenario
def blpop_blocking():
    """BLPOP waits for an RPUSH from another client; a timed-out BLPOP returns nil."""
    r = client()
    lst = k("blpop", "l")
    r.delete(lst)
    res = {}

    def popper():
        c = client()
        res["pop"] = j(c.blpop([lst], timeout=5))

    t = threading.Thread(target=popper)
    t.start()
    blocked = wait_blocked(r)
    pushed = r.rpush(lst, "v1", "v2")
    t.join(10)
    return {
        "blocked_seen": blocked,
        "rpush": pushed,
        "pop": res.get("pop"),
        "left": j(r.lrange(lst, 0, -1)),
        "timeout": j(client().blpop([k("blpop", "empty")], timeout=0.2)),
    }


@scenario
def select_db():
    """A client on db 9 (SELECT at connect) and one on db 0 see separate keys."""
    r9 = client(db=9)
    r0 = client(db=0)
    key = k("select", "k")
    r9.delete(key)
    r0.delete(key)
    r9.set(key, "in9")
    p = r9.pipeline(transaction=True)
    p.incr(k("select", "n")).get(key)
    tx = j(p.execute())
    r9.delete(k("select", "n"))
    return {"db9": j(r9.get(key)), "db0": j(r0.get(key)), "tx_db9": tx,
            "dbsize_delta_db0": r0.exists(key)}


@scenario
def client_name_id():
    """CLIENT SETNAME/GETNAME, and CLIENT ID as CLIENT LIST / CLIENT INFO show it."""
    r = client(single_connection_client=True)
    r.client_setname("cs-py-name")
    cid = r.client_id()
    lst = r.client_list()
    mine = [c for c in lst if c.get("name") == "cs-py-name"]
    info = r.client_info()
    return {
        "getname": j(r.client_getname()),
        "id_is_int": isinstance(cid, int) and cid > 0,
        "list_has_name_once": len(mine) == 1,
        "list_id_matches": bool(mine) and int(mine[0]["id"]) == cid,
        "info_name": j(info.get("name")),
        "info_id_matches": int(info.get("id", -1)) == cid,
    }


@scenario
def client_unblock():
    """CLIENT UNBLOCK with the blocked connection's CLIENT ID ends its BLPOP."""
    r = client()
    lst = k("unblock", "l")
    r.delete(lst)
    res = {}
    c = client(single_connection_client=True)
    cid = c.client_id()

    def popper():
        res["pop"] = j(_err(lambda: c.blpop([lst], timeout=5)))

    t = threading.Thread(target=popper)
    t0 = time.time()
    t.start()
    blocked = wait_blocked(r)
    unblocked = r.client_unblock(cid)
    t.join(10)
    return {"blocked_seen": blocked, "unblock": unblocked, "pop": res.get("pop"),
            "returned_early": time.time() - t0 < 4}


@scenario
def pipeline_mixed():
    """A non-transactional pipeline of 200 commands with an error in the middle."""
    r = client()
    key, s = k("pipe", "n"), k("pipe", "s")
    r.delete(key, s)
    r.set(s, "text")
    p = r.pipeline(transaction=False)
    for i in range(100):
        p.incr(key)
        if i == 50:
            p.incr(s)
        p.get(key)
    out = j(p.execute(raise_on_error=False))
    return {"len": len(out), "first": out[:4], "around_error": out[100:105], "last": out[-2:]}


@scenario
def expiry_exact():
    """TTLs are what the client set (SET EX, EXPIRE, PEXPIRE, GETEX)."""
    r = client()
    a, b = k("ttl", "a"), k("ttl", "b")
    r.delete(a, b)
    r.set(a, "v", ex=1000)
    r.set(b, "v")
    r.expire(b, 2000)
    out = {"ttl_a": r.ttl(a), "ttl_b": r.ttl(b)}
    r.pexpire(a, 500000)
    out["pttl_a_s"] = round(r.pttl(a) / 1000)
    r.getex(b, ex=3000)
    out["ttl_b_getex"] = r.ttl(b)
    return out


@scenario
def acl_user():
    """An ACL user (ACL SETUSER): a client logged in as it (the library's
    username/password options) gets what its rules allow and NOPERM for the
    rest; a wrong password and a deleted user are refused at connect."""
    admin = client()
    user, pw = "cs-py-acl", "cs-py-acl-pw"
    mine, other = k("acl", "k"), k("acl_other", "k")
    admin.execute_command("ACL", "DELUSER", user)
    admin.delete(mine, other)
    admin.execute_command("ACL", "SETUSER", user, "reset", "on", ">" + pw, "~" + k("acl", "*"),
                          "+@connection", "+get", "+set", "+del", "+acl|whoami")
    u = client(username=user, password=pw, single_connection_client=True)
    out = {
        "whoami": j(u.execute_command("ACL", "WHOAMI")),
        "set": j(u.set(mine, "v")),
        "get": j(u.get(mine)),
        "get_other_key": j(_err(lambda: u.get(other))),
        "incr_not_allowed": j(_err(lambda: u.incr(mine))),
        "pipeline": j(u.pipeline(transaction=False).set(mine, "w").incr(mine).get(mine)
                      .execute(raise_on_error=False)),
    }
    u.close()
    out["wrong_password"] = j(_err(lambda: client(username=user, password="nope").ping()))
    admin.execute_command("ACL", "DELUSER", user)
    out["deleted_user"] = j(_err(lambda: client(username=user, password=pw).ping()))
    admin.delete(mine)
    return out


def main():
    res = {}
    for f in SCENARIOS:
        try:
            res[f.__name__] = f()
        except Exception as e:  # noqa: BLE001
            res[f.__name__] = {"exception": "%s: %s" % (type(e).__name__, e)}
    json.dump(res, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
