// Client scenarios as ioredis sends them (pipelines and MULTI in one write,
// WATCH, defineCommand scripts, pub/sub, blocking reads).
// Usage: node ioredis.js HOST:PORT > result.json (see scripts/client-suite.sh).
'use strict';
const Redis = require('ioredis');
const { j, settle, waitBlocked, run } = require('./common');

const [host, port] = process.argv[2].split(':');
const made = [];
function client(opts = {}) {
  const c = new Redis({ host, port: Number(port), maxRetriesPerRequest: 0, enableOfflineQueue: true, ...opts });
  c.on('error', () => {});
  made.push(c);
  return c;
}
const k = (s, n) => `cs:ioredis:${s}:${n}`;
// exec results of ioredis: [[err, value], ...]
const pairs = (res) => (res === null ? null : res.map(([e, v]) => (e ? { error: e.message } : j(v))));

run({
  async tx_pipeline() {
    const r = client();
    const [a, b, n] = [k('tx', 'a'), k('tx', 'b'), k('tx', 'n')];
    await r.del(a, b, n);
    await r.set(a, 'x');
    await r.set(b, 'vb');
    return pairs(await r.multi().del(a).get(b).incr(n).set(a, 'y', 'EX', 100).ttl(a).exec());
  },
  async tx_queue_error() {
    const r = client();
    const [s1, s2] = [k('txerr', 's1'), k('txerr', 's2')];
    await r.del(s1, s2);
    const res = await settle(r.multi().set(s1, 'x').call('GET').set(s2, 'y').exec());
    return { exec: res, s1: await r.exists(s1), s2: await r.exists(s2) };
  },
  async tx_exec_error() {
    const r = client();
    const [s, c] = [k('txexec', 's'), k('txexec', 'c')];
    await r.del(s, c);
    await r.set(s, 'notanumber');
    return pairs(await r.multi().incr(s).incr(c).get(s).exec());
  },
  async watch_retry() {
    const r = client();
    const other = client();
    const key = k('watch', 'counter');
    await r.del(key);
    await r.set(key, 10);
    const attempts = [];
    for (let i = 0; i < 3; i++) {
      await r.watch(key);
      const v = Number(await r.get(key));
      if (i === 0) await other.incr(key);
      const res = await r.multi().set(key, v * 2).exec();
      attempts.push([res === null ? 'aborted' : 'committed', v, res === null ? null : pairs(res)]);
      if (res !== null) break;
    }
    return { attempts, final: await r.get(key) };
  },
  async lua_scripts() {
    const r = client();
    const [key, n] = [k('lua', 'k'), k('lua', 'n')];
    await r.del(key, n);
    await r.script('FLUSH');
    const out = {};
    out.eval = await settle(r.eval("redis.call('SET', KEYS[1], ARGV[1]); return {redis.call('GET', KEYS[1]), 42, {ARGV[2], 'nested'}, redis.status_reply('FINE')}", 1, key, 'v1', 'x'));
    out.eval_error = await settle(r.eval("return redis.call('INCR', KEYS[1])", 1, key));
    r.defineCommand('incrByScript', { numberOfKeys: 1, lua: "return redis.call('INCRBY', KEYS[1], ARGV[1])" });
    out.evalsha_1 = await settle(r.incrByScript(n, 5)); // EVALSHA, NOSCRIPT, EVAL
    out.evalsha_2 = await settle(r.incrByScript(n, 5));
    out.evalsha_in_multi = pairs(await r.multi().incrByScript(n, 1).get(n).exec());
    return out;
  },
  async read_own_writes() {
    // The guides' patterns, each write read back at once, three times (on a
    // cluster with salted copies, reads spread over the copies): a value a
    // script rewrites, a lock with a token released by a script, a counter
    // written by a transaction.
    const r = client();
    const [v, lock, ctr] = [k('own', 'v'), k('own', 'lock'), k('own', 'ctr')];
    await r.del(v, lock, ctr);
    const reads = async (key) => [await settle(r.get(key)), await settle(r.get(key)), await settle(r.get(key))];
    const out = {};
    await r.set(v, 'v1');
    out.set = await reads(v);
    out.eval = await settle(r.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, v, 'v2'));
    out.after_eval = await reads(v);
    out.lock = await settle(r.set(lock, 'tok1', 'PX', 10000, 'NX'));
    out.locked = await reads(lock);
    r.defineCommand('releaseLock', { numberOfKeys: 1, lua: "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end" });
    out.release = await settle(r.releaseLock(lock, 'tok1'));
    out.after_release = await reads(lock);
    out.tx = pairs(await r.multi().incr(ctr).expire(ctr, 60).exec());
    out.after_tx = await reads(ctr);
    return out;
  },
  async pubsub_subscribe_then_publish() {
    const r = client();
    const sub = client();
    const [ch, pat] = [k('ps', 'ch'), k('ps', '*')];
    const got = [];
    sub.on('message', (c, m) => got.push(`message ${m}`));
    sub.on('pmessage', (p, c, m) => got.push(`pmessage ${m}`));
    const subscribed = await sub.subscribe(ch);
    const psubscribed = await sub.psubscribe(pat);
    const receivers = [];
    for (let i = 0; i < 20; i++) receivers.push(await r.publish(ch, `m${i}`));
    const end = Date.now() + 5000;
    while (got.length < 40 && Date.now() < end) await new Promise((res) => setTimeout(res, 10));
    await sub.unsubscribe(ch);
    await sub.punsubscribe(pat);
    return { subscribe: subscribed, psubscribe: psubscribed, publish_receivers: receivers, messages: got.sort() };
  },
  async spubsub_many_channels() {
    // Shard channels of many slots on one connection (on a cluster through
    // rproxy: of every master), subscribed one by one.
    const r = client();
    const sub = client();
    const chans = ['a', 'b', 'c', 'd', 'e', 'f'].map((s) => k('sps', s));
    const got = [];
    sub.on('smessage', (c, m) => got.push(`${c} ${m}`));
    const counts = [];
    for (const ch of chans) counts.push(await sub.ssubscribe(ch));
    const receivers = [];
    for (const ch of chans) receivers.push(await r.spublish(ch, 'm1'));
    const end = Date.now() + 5000;
    while (got.length < chans.length && Date.now() < end) await new Promise((res) => setTimeout(res, 10));
    counts.push(await sub.sunsubscribe(chans[0], chans[0]));
    counts.push(await sub.sunsubscribe(chans[2]));
    for (const ch of chans) receivers.push(await r.spublish(ch, 'm2'));
    while (got.length < 2 * chans.length - 2 && Date.now() < end) await new Promise((res) => setTimeout(res, 10));
    counts.push(await settle(sub.sunsubscribe()));
    return { counts, spublish_receivers: receivers, messages: got.sort() };
  },
  async stream_group_block() {
    const r = client();
    const c = client();
    const s = k('stream', 's');
    await r.del(s);
    await r.xgroup('CREATE', s, 'g', '$', 'MKSTREAM');
    const reading = settle(c.xreadgroup('GROUP', 'g', 'c1', 'COUNT', 10, 'BLOCK', 5000, 'STREAMS', s, '>'));
    const blocked = await waitBlocked(() => r.info('clients'));
    await r.xadd(s, '1-1', 'f', 'v');
    await r.xadd(s, '2-1', 'f', 'w');
    const read = await reading;
    const pending = await r.xpending(s, 'g');
    return {
      blocked_seen: blocked, read, pending: pending[0],
      ack: await r.xack(s, 'g', '1-1', '2-1'),
      empty: await settle(r.xreadgroup('GROUP', 'g', 'c1', 'COUNT', 10, 'BLOCK', 100, 'STREAMS', s, '>')),
    };
  },
  async blpop_blocking() {
    const r = client();
    const c = client();
    const l = k('blpop', 'l');
    await r.del(l);
    const popping = settle(c.blpop(l, 5));
    const blocked = await waitBlocked(() => r.info('clients'));
    const pushed = await r.rpush(l, 'v1', 'v2');
    return {
      blocked_seen: blocked, rpush: pushed, pop: await popping,
      left: await r.lrange(l, 0, -1), timeout: await settle(c.blpop(k('blpop', 'empty'), 0.2)),
    };
  },
  async select_db() {
    const r9 = client({ db: 9 });
    const r0 = client();
    const [key, n] = [k('select', 'k'), k('select', 'n')];
    await r9.del(key, n);
    await r0.del(key);
    await r9.set(key, 'in9');
    const tx = pairs(await r9.multi().incr(n).get(key).exec());
    await r9.del(n);
    return { db9: await r9.get(key), db0: await r0.get(key), tx_db9: tx };
  },
  async client_name_id() {
    const r = client({ connectionName: 'cs-ioredis-name' });
    const id = await r.client('ID');
    const list = String(await r.client('LIST')).trim().split('\n').filter((l) => l.includes(' name=cs-ioredis-name '));
    const info = String(await settle(r.client('INFO')));
    return {
      getname: await r.client('GETNAME'),
      list_has_name_once: list.length === 1,
      list_id_matches: list.length === 1 && list[0].startsWith(`id=${id} `),
      info_name: info.includes(' name=cs-ioredis-name '),
      info_id_matches: info.startsWith(`id=${id} `),
    };
  },
  async client_unblock() {
    const r = client();
    const c = client();
    const l = k('unblock', 'l');
    await r.del(l);
    const id = await c.client('ID');
    const t0 = Date.now();
    const popping = settle(c.blpop(l, 5));
    const blocked = await waitBlocked(() => r.info('clients'));
    const unblocked = await r.client('UNBLOCK', id);
    const pop = await popping;
    return { blocked_seen: blocked, unblock: unblocked, pop, returned_early: Date.now() - t0 < 4000 };
  },
  async pipeline_mixed() {
    const r = client();
    const [key, s] = [k('pipe', 'n'), k('pipe', 's')];
    await r.del(key, s);
    await r.set(s, 'text');
    const p = r.pipeline();
    for (let i = 0; i < 100; i++) {
      p.incr(key);
      if (i === 50) p.incr(s);
      p.get(key);
    }
    const out = pairs(await p.exec());
    return { len: out.length, first: out.slice(0, 4), around_error: out.slice(100, 105), last: out.slice(-2) };
  },
  async expiry_exact() {
    const r = client();
    const [a, b] = [k('ttl', 'a'), k('ttl', 'b')];
    await r.del(a, b);
    await r.set(a, 'v', 'EX', 1000);
    await r.set(b, 'v');
    await r.expire(b, 2000);
    const out = { ttl_a: await r.ttl(a), ttl_b: await r.ttl(b) };
    await r.pexpire(a, 500000);
    out.pttl_a_s = Math.round((await r.pttl(a)) / 1000);
    await r.getex(b, 'EX', 3000);
    out.ttl_b_getex = await r.ttl(b);
    return out;
  },
  // An ACL user (ACL SETUSER): a client logged in as it (the username and
  // password options: AUTH at connect) gets what its rules allow and
  // NOPERM for the rest; a wrong password and a deleted user are refused.
  async acl_user() {
    const admin = client();
    const [user, pw] = ['cs-ioredis-acl', 'cs-ioredis-acl-pw'];
    const [mine, other] = [k('acl', 'k'), k('acl_other', 'k')];
    await admin.call('ACL', 'DELUSER', user);
    await admin.del(mine, other);
    await admin.call('ACL', 'SETUSER', user, 'reset', 'on', `>${pw}`, `~${k('acl', '*')}`,
      '+@connection', '+get', '+set', '+del', '+acl|whoami');
    const u = client({ username: user, password: pw, enableReadyCheck: false }); // INFO is not allowed
    const out = {
      whoami: await settle(u.call('ACL', 'WHOAMI')),
      set: await settle(u.set(mine, 'v')),
      get: await settle(u.get(mine)),
      get_other_key: await settle(u.get(other)),
      incr_not_allowed: await settle(u.incr(mine)),
      pipeline: pairs(await u.pipeline().set(mine, 'w').incr(mine).get(mine).exec()),
    };
    u.disconnect();
    // A refused login: ioredis emits Redis's error and closes, no retry.
    const login = async (password) => {
      const c = client({ username: user, password, lazyConnect: true, retryStrategy: () => null, enableReadyCheck: false });
      let refused = null;
      c.on('error', (e) => { refused = refused || e.message; });
      try {
        await c.connect();
        return await settle(c.ping());
      } catch (e) {
        return { error: refused || e.message };
      } finally {
        c.disconnect();
      }
    };
    out.wrong_password = await login('nope');
    await admin.call('ACL', 'DELUSER', user);
    out.deleted_user = await login(pw);
    await admin.del(mine);
    return out;
  },
});
