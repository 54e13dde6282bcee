// Shared helpers for the node scenario runners (ioredis.js, noderedis.js).
'use strict';

// j turns replies into JSON-able values: Buffers as text, errors as {error}.
function j(v) {
  if (v === undefined) return null;
  if (Buffer.isBuffer(v)) return v.toString();
  if (v instanceof Error) return { error: v.message };
  if (Array.isArray(v)) return v.map(j);
  if (v instanceof Map) return Object.fromEntries([...v].map(([a, b]) => [String(j(a)), j(b)]));
  if (v && typeof v === 'object') {
    const o = {};
    for (const k of Object.keys(v)) o[k] = j(v[k]);
    return o;
  }
  return v;
}

async function settle(p) {
  try { return j(await p); } catch (e) { return { error: e.message }; }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// waitBlocked polls INFO clients until Redis reports a blocked client.
async function waitBlocked(info) {
  const end = Date.now() + 5000;
  while (Date.now() < end) {
    const m = /blocked_clients:(\d+)/.exec(String(await info()));
    if (m && Number(m[1]) > 0) return true;
    await sleep(5);
  }
  return false;
}

// run executes every scenario, each bounded to 30 s, and prints the JSON.
async function run(scenarios) {
  const out = {};
  for (const [name, f] of Object.entries(scenarios)) {
    try {
      out[name] = await Promise.race([
        f(),
        sleep(30000).then(() => { throw new Error('scenario took over 30s'); }),
      ]);
    } catch (e) {
      out[name] = { exception: String(e && e.message ? e.message : e) };
    }
  }
  const sorted = Object.fromEntries(Object.keys(out).sort().map((k) => [k, out[k]]));
  process.stdout.write(JSON.stringify(sorted, null, 1) + '\n');
  process.exit(0);
}

module.exports = { j, settle, sleep, waitBlocked, run };
