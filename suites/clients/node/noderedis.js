// Client scenarios as node-redis (the "redis" package) sends them: its
// multi()/exec(), watch(), scripts, pub/sub on a duplicate() connection.
// Usage: node noderedis.js HOST:PORT > result.json (see scripts/client-suite.sh).
'use strict';
const { createClient } = require('redis');
const { j, settle, waitBlocked, run } = require('./common');

const [host, port] = process.argv[2].split(':');
async function client(opts = {}) {
  const c = createClient({ socket: { host, port: Number(port), reconnectStrategy: false }, ...opts });
  c.on('error', () => {});
  await c.connect();
  return c;
}
const k = (s, n) => `cs:noderedis:${s}:${n}`;

run({
  async tx_pipeline() {
    const r = await client();
    const [a, b, n] = [k('tx', 'a'), k('tx', 'b'), k('tx', 'n')];
    await r.del([a, b, n]);
    await r.set(a, 'x');
    await r.set(b, 'vb');
    return settle(r.multi().del(a).get(b).incr(n).set(a, 'y', { EX: 100 }).ttl(a).exec());
  },
  async tx_queue_error() {
    const r = await client();
    const [s1, s2] = [k('txerr', 's1'), k('txerr', 's2')];
    await r.del([s1, s2]);
    const res = await settle(r.multi().set(s1, 'x').addCommand(['GET']).set(s2, 'y').exec());
    return { exec: res, s1: await r.exists(s1), s2: await r.exists(s2) };
  },
  async tx_exec_error() {
    const r = await client();
    const [s, c] = [k('txexec', 's'), k('txexec', 'c')];
    await r.del([s, c]);
    await r.set(s, 'notanumber');
    // node-redis rejects the whole exec() when one reply is an error; the
    // error carries every reply.
    try {
      return j(await r.multi().incr(s).incr(c).get(s).exec());
    } catch (e) {
      return { error_name: e.constructor.name, replies: j(e.replies || null) };
    }
  },
  async watch_retry() {
    const r = await client();
    const other = await client();
    const key = k('watch', 'counter');
    await r.del(key);
    await r.set(key, '10');
    const attempts = [];
    for (let i = 0; i < 3; i++) {
      await r.watch(key);
      const v = Number(await r.get(key));
      if (i === 0) await other.incr(key);
      try {
        const res = await r.multi().set(key, String(v * 2)).exec();
        attempts.push(['committed', v, j(res)]);
        break;
      } catch (e) {
        attempts.push(['aborted', v, e.constructor.name]);
      }
    }
    return { attempts, final: await r.get(key) };
  },
  async lua_scripts() {
    const r = await client();
    const [key, n] = [k('lua', 'k'), k('lua', 'n')];
    await r.del([key, n]);
    await r.scriptFlush();
    const out = {};
    out.eval = await settle(r.eval("redis.call('SET', KEYS[1], ARGV[1]); return {redis.call('GET', KEYS[1]), 42, {ARGV[2], 'nested'}, redis.status_reply('FINE')}", { keys: [key], arguments: ['v1', 'x'] }));
    out.eval_error = await settle(r.eval("return redis.call('INCR', KEYS[1])", { keys: [key] }));
    const sha = await r.scriptLoad("return redis.call('INCRBY', KEYS[1], ARGV[1])");
    out.evalsha_1 = await settle(r.evalSha(sha, { keys: [n], arguments: ['5'] }));
    out.evalsha_2 = await settle(r.evalSha(sha, { keys: [n], arguments: ['5'] }));
    out.evalsha_in_multi = await settle(r.multi().evalSha(sha, { keys: [n], arguments: ['1'] }).get(n).exec());
    return out;
  },
  async read_own_writes() {
    // The guides' patterns, each write read back at once, three times (on a
    // cluster with salted copies, reads spread over the copies): a value a
    // script rewrites, a lock with a token released by a script, a counter
    // written by a transaction sent whole and by one typed command by command.
    const r = await client();
    const [v, lock, ctr] = [k('own', 'v'), k('own', 'lock'), k('own', 'ctr')];
    await r.del([v, lock, ctr]);
    const reads = async (key) => [await settle(r.get(key)), await settle(r.get(key)), await settle(r.get(key))];
    const out = {};
    await r.set(v, 'v1');
    out.set = await reads(v);
    out.eval = await settle(r.eval("return redis.call('SET', KEYS[1], ARGV[1])", { keys: [v], arguments: ['v2'] }));
    out.after_eval = await reads(v);
    out.lock = await settle(r.set(lock, 'tok1', { PX: 10000, NX: true }));
    out.locked = await reads(lock);
    const release = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
    out.release = await settle(r.eval(release, { keys: [lock], arguments: ['tok1'] }));
    out.after_release = await reads(lock);
    out.tx = await settle(r.multi().incr(ctr).expire(ctr, 60).exec());
    out.after_tx = await reads(ctr);
    const t = r.duplicate();
    t.on('error', () => {});
    await t.connect();
    out.typed_tx = [await settle(t.sendCommand(['MULTI'])), await settle(t.sendCommand(['INCR', ctr])), await settle(t.sendCommand(['EXEC']))];
    await t.quit();
    out.after_typed_tx = await reads(ctr);
    return out;
  },
  async pubsub_subscribe_then_publish() {
    const r = await client();
    const sub = r.duplicate();
    sub.on('error', () => {});
    await sub.connect();
    const [ch, pat] = [k('ps', 'ch'), k('ps', '*')];
    const got = [];
    await sub.subscribe(ch, (m) => got.push(`message ${m}`));
    await sub.pSubscribe(pat, (m) => got.push(`pmessage ${m}`));
    const receivers = [];
    for (let i = 0; i < 20; i++) receivers.push(await r.publish(ch, `m${i}`));
    const end = Date.now() + 5000;
    while (got.length < 40 && Date.now() < end) await new Promise((res) => setTimeout(res, 10));
    await sub.unsubscribe(ch);
    await sub.pUnsubscribe(pat);
    return { publish_receivers: receivers, messages: got.sort() };
  },
  async spubsub_many_channels() {
    // Shard channels of many slots on one connection (on a cluster through
    // rproxy: of every master), subscribed one by one.
    const r = await client();
    const sub = r.duplicate();
    sub.on('error', () => {});
    await sub.connect();
    const chans = ['a', 'b', 'c', 'd', 'e', 'f'].map((s) => k('sps', s));
    const got = [];
    for (const ch of chans) await sub.sSubscribe(ch, (m, c) => got.push(`${c} ${m}`));
    const receivers = [];
    for (const ch of chans) receivers.push(await r.sPublish(ch, 'm1'));
    const end = Date.now() + 5000;
    while (got.length < chans.length && Date.now() < end) await new Promise((res) => setTimeout(res, 10));
    await sub.sUnsubscribe(chans.slice(0, 1));
    await sub.sUnsubscribe(chans.slice(2, 3));
    for (const ch of chans) receivers.push(await r.sPublish(ch, 'm2'));
    while (got.length < 2 * chans.length - 2 && Date.now() < end) await new Promise((res) => setTimeout(res, 10));
    const ping = await settle(sub.ping());
    await sub.sUnsubscribe();
    return { spublish_receivers: receivers, messages: got.sort(), ping };
  },
  async stream_group_block() {
    const r = await client();
    const c = await client();
    const s = k('stream', 's');
    await r.del(s);
    await r.xGroupCreate(s, 'g', '$', { MKSTREAM: true });
    const reading = settle(c.xReadGroup('g', 'c1', { key: s, id: '>' }, { COUNT: 10, BLOCK: 5000 }));
    const blocked = await waitBlocked(() => r.info('clients'));
    await r.xAdd(s, '1-1', { f: 'v' });
    await r.xAdd(s, '2-1', { f: 'w' });
    const read = await reading;
    const pending = await r.xPending(s, 'g');
    return {
      blocked_seen: blocked, read, pending: j(pending.pending),
      ack: await r.xAck(s, 'g', ['1-1', '2-1']),
      empty: await settle(c.xReadGroup('g', 'c1', { key: s, id: '>' }, { COUNT: 10, BLOCK: 100 })),
    };
  },
  async blpop_blocking() {
    const r = await client();
    const c = await client();
    const l = k('blpop', 'l');
    await r.del(l);
    const popping = settle(c.blPop(l, 5));
    const blocked = await waitBlocked(() => r.info('clients'));
    const pushed = await r.rPush(l, ['v1', 'v2']);
    return {
      blocked_seen: blocked, rpush: pushed, pop: await popping,
      left: await r.lRange(l, 0, -1), timeout: await settle(c.blPop(k('blpop', 'empty'), 0.2)),
    };
  },
  async select_db() {
    const r9 = await client({ database: 9 });
    const r0 = await client();
    const [key, n] = [k('select', 'k'), k('select', 'n')];
    await r9.del([key, n]);
    await r0.del(key);
    await r9.set(key, 'in9');
    const tx = await settle(r9.multi().incr(n).get(key).exec());
    await r9.del(n);
    return { db9: await r9.get(key), db0: await r0.get(key), tx_db9: tx };
  },
  async client_name_id() {
    const r = await client({ name: 'cs-noderedis-name' });
    const id = await r.sendCommand(['CLIENT', 'ID']);
    const list = String(await r.sendCommand(['CLIENT', 'LIST'])).trim().split('\n').filter((l) => l.includes(' name=cs-noderedis-name '));
    const info = String(await settle(r.sendCommand(['CLIENT', 'INFO'])));
    return {
      getname: await r.sendCommand(['CLIENT', 'GETNAME']),
      list_has_name_once: list.length === 1,
      list_id_matches: list.length === 1 && list[0].startsWith(`id=${id} `),
      info_name: info.includes(' name=cs-noderedis-name '),
      info_id_matches: info.startsWith(`id=${id} `),
    };
  },
  async client_unblock() {
    const r = await client();
    const c = await client();
    const l = k('unblock', 'l');
    await r.del(l);
    const id = await c.sendCommand(['CLIENT', 'ID']);
    const t0 = Date.now();
    const popping = settle(c.blPop(l, 5));
    const blocked = await waitBlocked(() => r.info('clients'));
    const unblocked = await r.sendCommand(['CLIENT', 'UNBLOCK', String(id)]);
    const pop = await popping;
    return { blocked_seen: blocked, unblock: unblocked, pop, returned_early: Date.now() - t0 < 4000 };
  },
  async pipeline_mixed() {
    const r = await client();
    const [key, s] = [k('pipe', 'n'), k('pipe', 's')];
    await r.del([key, s]);
    await r.set(s, 'text');
    // Commands issued in the same tick leave in one write (node-redis's
    // auto-pipelining).
    const ps = [];
    for (let i = 0; i < 100; i++) {
      ps.push(settle(r.incr(key)));
      if (i === 50) ps.push(settle(r.incr(s)));
      ps.push(settle(r.get(key)));
    }
    const out = await Promise.all(ps);
    return { len: out.length, first: out.slice(0, 4), around_error: out.slice(100, 105), last: out.slice(-2) };
  },
  async expiry_exact() {
    const r = await client();
    const [a, b] = [k('ttl', 'a'), k('ttl', 'b')];
    await r.del([a, b]);
    await r.set(a, 'v', { EX: 1000 });
    await r.set(b, 'v');
    await r.expire(b, 2000);
    const out = { ttl_a: await r.ttl(a), ttl_b: await r.ttl(b) };
    await r.pExpire(a, 500000);
    out.pttl_a_s = Math.round((await r.pTTL(a)) / 1000);
    await r.getEx(b, { EX: 3000 });
    out.ttl_b_getex = await r.ttl(b);
    return out;
  },
  // An ACL user (ACL SETUSER): a client logged in as it (the username and
  // password options: AUTH at connect) gets what its rules allow and
  // NOPERM for the rest; a wrong password and a deleted user are refused
  // (connect() rejects with Redis's error).
  async acl_user() {
    const admin = await client();
    const [user, pw] = ['cs-noderedis-acl', 'cs-noderedis-acl-pw'];
    const [mine, other] = [k('acl', 'k'), k('acl_other', 'k')];
    await admin.sendCommand(['ACL', 'DELUSER', user]);
    await admin.del([mine, other]);
    await admin.sendCommand(['ACL', 'SETUSER', user, 'reset', 'on', `>${pw}`, `~${k('acl', '*')}`,
      '+@connection', '+get', '+set', '+del', '+acl|whoami']);
    const u = await client({ username: user, password: pw });
    const out = {
      whoami: await settle(u.sendCommand(['ACL', 'WHOAMI'])),
      set: await settle(u.set(mine, 'v')),
      get: await settle(u.get(mine)),
      get_other_key: await settle(u.get(other)),
      incr_not_allowed: await settle(u.incr(mine)),
    };
    // Issued in one tick: one write (auto-pipelining).
    out.pipeline = await Promise.all([settle(u.set(mine, 'w')), settle(u.incr(mine)), settle(u.get(mine))]);
    await u.quit();
    const login = async (password) => {
      let c;
      try {
        c = await client({ username: user, password });
      } catch (e) {
        return { error: e.message };
      }
      const r = await settle(c.ping());
      await c.disconnect();
      return r;
    };
    out.wrong_password = await login('nope');
    await admin.sendCommand(['ACL', 'DELUSER', user]);
    out.deleted_user = await login(pw);
    await admin.del(mine);
    return out;
  },
});
