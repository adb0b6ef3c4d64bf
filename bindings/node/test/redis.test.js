// The Redis store through the addon: libsluice's own client on Node's
// loop, against a real redis-server.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const sluice = require('..');
const fs = require('node:fs');
const { BUILD, Redis, startSluice, request, sleep, track } = require('./helpers');

let redis;
test.before(async () => { redis = await Redis.start(); });
test.after(async () => { await redis.stop(); });

test('decisions on Redis, stored as sluice stores them', async () => {
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 1000, keyPrefix: 'nt:' } } });
  const pol = sluice.policy([{ capacity: 3, rate: '1/min' }], { name: 'api' });
  const got = [];
  for (let i = 0; i < 4; i++) got.push(await limiter.take('alice', pol));
  assert.deepEqual(got.map((d) => d.allowed), [true, true, true, false]);
  assert.deepEqual(got.map((d) => d.remaining), [2, 1, 0, 0]);
  assert.ok(got[3].retryAfterMs > 50000 && got[3].retryAfterMs <= 60000, `retry ${got[3].retryAfterMs}`);
  assert.equal(got[3].policy, 'api');
  // One key per limit under the prefix, expiring when the bucket is full.
  const keys = redis.cli('--scan', '--pattern', 'nt:*').trim().split('\n').filter(Boolean);
  assert.equal(keys.length, 1, keys.join(','));
  const ttl = Number(redis.cli('PTTL', keys[0]).trim());
  assert.ok(ttl > 170000 && ttl <= 180000, `PTTL ${ttl}: the time until the bucket is full`);
  // A peek charges nothing.
  assert.equal((await limiter.take('alice', pol, { cost: 0 })).remaining, 0);
  await limiter.close();
});

test('answers read together are delivered together: every callback of a batch runs before their promise jobs', async () => {
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 5000, keyPrefix: 'batch:' } } });
  const pol = sluice.policy([{ capacity: 10, rate: '1/s' }], { name: 'b' });
  await limiter.take('warm', pol);
  // Count the addon's callbacks; each take's continuation notes how many
  // had run.  One microtask checkpoint per answer would let continuation
  // i see exactly i + 1 of them.
  let calls = 0;
  const decide = limiter._decide;
  limiter._decide = function (key, p, cost, done, peek) {
    decide.call(this, key, p, cost, (...a) => { calls++; done(...a); }, peek);
  };
  const seen = [];
  await Promise.all(Array.from({ length: 200 }, (_, i) => limiter.take(`k${i}`, pol).then(() => { seen.push(calls); })));
  assert.equal(seen.length, 200);
  const ahead = seen.filter((n, i) => n > i + 1).length;
  assert.ok(ahead > 0, `no continuation ran after a later answer's callback: ${seen.slice(0, 20).join(',')}...`);
  await limiter.close();
});

test('600 calls in flight (more than one table of answers): each answered once with its own decision; a callback that throws is reported as uncaught and the others still run', async () => {
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 5000, keyPrefix: 'many:' } } });
  const pol = sluice.policy([{ capacity: 1000, rate: '1/h' }], { name: 'm' });
  await limiter.take('warm', pol);
  const uncaught = [];
  const listeners = process.listeners('uncaughtException');
  process.removeAllListeners('uncaughtException');
  const onUncaught = (e) => uncaught.push(e.message);
  process.on('uncaughtException', onUncaught);
  try {
    // Key i is charged i % 7 + 1 times, so each answer's remaining says
    // whose it is.
    const answers = new Map();
    let pending = 0;
    await new Promise((resolve) => {
      for (let i = 0; i < 600; i++) {
        const key = `k${i}`;
        const cost = (i % 7) + 1;
        pending++;
        limiter._decide(key, pol, cost, (status, allowed, limit, remaining) => {
          assert.ok(!answers.has(key), `${key} answered twice`);
          answers.set(key, { status, allowed, limit, remaining, cost });
          if (--pending === 0) setImmediate(resolve);
          if (i % 100 === 5) throw new Error(`thrown by ${key}`);
        });
      }
    });
    assert.equal(answers.size, 600);
    for (const [key, a] of answers) {
      assert.deepEqual([a.status, a.allowed, a.limit, a.remaining], [0, true, 1000, 1000 - a.cost], key);
    }
    assert.deepEqual(uncaught.sort(), [5, 105, 205, 305, 405, 505].map((i) => `thrown by k${i}`).sort());
    // The slots are all free again, and a promise call still works.
    assert.equal((await limiter.take('k0', pol)).remaining, 998);
  } finally {
    process.removeListener('uncaughtException', onUncaught);
    for (const l of listeners) process.on('uncaughtException', l);
    await limiter.close();
  }
});

test('calls of every size in waves (the addon reuses their memory): keys of 1 to 220 bytes, policies of 1, 5 and 16 limits, each answered with its own decision', async () => {
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 5000, keyPrefix: 'sizes:' } } });
  const one = sluice.policy([{ capacity: 1000, rate: '1/h' }], { name: 'one' });
  const limits = (n) => Array.from({ length: n }, (_, j) => ({ capacity: 1000 + j, rate: `${j + 1}/h` }));
  const pols = [one, sluice.policy(limits(5), { name: 'five' }), sluice.policy(limits(16), { name: 'many' })];
  try {
    for (let wave = 1; wave <= 3; wave++) {
      const got = await Promise.all(Array.from({ length: 400 }, (_, i) => {
        // Key i: its own length and cost, so that an answer says whose it is.
        const key = `${i}:`.padEnd(1 + (i * 37) % 220, 'x');
        return limiter.take(key, pols[i % 3], { cost: (i % 5) + 1 }).then((d) => [i, d]);
      }));
      for (const [i, d] of got) {
        const charged = wave * ((i % 5) + 1);
        assert.deepEqual([d.allowed, d.limit, d.remaining], [true, 1000, 1000 - charged], `wave ${wave} call ${i}`);
      }
    }
  } finally {
    await limiter.close();
  }
});

test('three Node processes, 200 concurrent callers on one key: the limit holds exactly', async () => {
  const capacity = 100, perSecond = 5, durationMs = 10000;
  const goAt = Date.now() + 3000;
  const procs = [67, 67, 66].map((n) => track(spawn(process.execPath,
    [path.join(__dirname, 'fixtures', 'hammer.js'), redis.url, `shared-${goAt}`, String(durationMs), String(n),
      String(capacity), `${perSecond}/s`], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, GO_AT: String(goAt) } }), 'hammer'));
  const outs = await Promise.all(procs.map((p) => new Promise((resolve, reject) => {
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(p.log()))));
  })));
  const allowed = outs.reduce((a, o) => a + o.allowed, 0);
  const total = outs.reduce((a, o) => a + o.total, 0);
  const errors = outs.reduce((a, o) => a + o.errors, 0);
  const first = Math.min(...outs.map((o) => o.first));
  const last = Math.max(...outs.map((o) => o.last));
  const firstDone = Math.min(...outs.map((o) => o.firstDone));
  const lastSent = Math.max(...outs.map((o) => o.lastSent));
  // Redis decided the first and the last allowed take at most last - first
  // apart (sent no earlier, answered no later) and at least lastSent -
  // firstDone apart: the tokens refilled in between lie within these
  // bounds, however late a busy machine ran the callers (a caller resumed
  // late only widens them).  On a quiet machine they are milliseconds
  // apart, and the limit holds to within the slack.
  const most = capacity + (perSecond * (last - first)) / 1000;
  const least = capacity + (perSecond * Math.max(0, lastSent - firstDone)) / 1000;
  const slack = 2 + perSecond * 0.2;
  assert.equal(errors, 0);
  assert.ok(total > allowed * 3, `the key was hammered: ${total} takes, ${allowed} allowed`);
  assert.ok(allowed <= most + slack && allowed >= least - slack,
    `allowed ${allowed}, expected ${least.toFixed(1)} to ${most.toFixed(1)} (capacity + rate x ` +
    `${(lastSent - firstDone) / 1000} to ${(last - first) / 1000} s)`);
});

test('a Node app and sluice serve on the same Redis share one bucket', async () => {
  const serve = await startSluice(`store: {redis: {url: "${redis.url}", timeout_ms: 1000}}
rules:
  - name: shared
    key: ["header:x-user-id"]
    limits: [{capacity: 10, rate: 1/h}]
`);
  try {
    const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 1000 } } });
    const pol = sluice.policy([{ capacity: 10, rate: '1/h' }], { name: 'shared' });
    for (let i = 0; i < 6; i++) assert.equal((await limiter.take('carol', pol)).allowed, true);
    const r = await request(serve.port, '/v1/check', { 'x-user-id': 'carol' });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.headers['x-ratelimit-remaining'], '3', 'serve sees the six tokens Node took');
    for (let i = 0; i < 3; i++) assert.equal((await request(serve.port, '/v1/check', { 'x-user-id': 'carol' })).status, 200);
    const d = await limiter.take('carol', pol);
    assert.equal(d.allowed, false, 'Node sees the tokens serve took');
    assert.equal((await request(serve.port, '/v1/check', { 'x-user-id': 'carol' })).status, 429);
    await limiter.close();
  } finally {
    await serve.stop();
  }
});

test('close() with 1,000 calls in flight settles every one and lets the process exit', async () => {
  const script = `
    const sluice = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    const l = new sluice.Limiter({ store: { redis: { url: ${JSON.stringify(redis.url)}, timeoutMs: 5000 } } });
    const p = sluice.policy([{ capacity: 5, rate: '1/s' }]);
    (async () => {
      await l.take('warm', p, { cost: 0 }).catch(() => {});
      const calls = [];
      for (let i = 0; i < 1000; i++) calls.push(l.take('k' + (i % 7), p).then(() => 'ok', (e) => e.code));
      const closing = l.close();
      const out = await Promise.all(calls);
      await closing;
      const counts = {};
      for (const o of out) counts[o] = (counts[o] || 0) + 1;
      const late = await l.take('x', p).then(() => 'ok', (e) => e.code);
      console.log(JSON.stringify({ counts, late, healthy: l.healthy() }));
    })();`;
  const child = track(spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] }), 'close');
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  const code = await new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), 60000);
    child.on('exit', (c, sig) => { clearTimeout(t); resolve(sig || c); });
  });
  assert.equal(code, 0, `the process exits by itself: ${child.log()}`);
  const r = JSON.parse(out);
  const settled = Object.values(r.counts).reduce((a, b) => a + b, 0);
  assert.equal(settled, 1000);
  for (const k of Object.keys(r.counts)) assert.ok(k === 'ok' || k === 'ERR_SLUICE_CLOSED', k);
  assert.equal(r.late, 'ERR_SLUICE_CLOSED');
  assert.equal(r.healthy, false);
});

test('worker threads and process.exit() with open limiters and calls in flight end cleanly', async () => {
  for (let run = 0; run < 3; run++) {
    const child = track(spawn(process.execPath, [path.join(__dirname, 'fixtures', 'workers.js'), redis.url],
      { stdio: ['ignore', 'pipe', 'pipe'] }), 'workers');
    const code = await new Promise((resolve) => {
      const t = setTimeout(() => child.kill('SIGKILL'), 60000);
      child.on('exit', (c, sig) => { clearTimeout(t); resolve(sig || c); });
    });
    assert.equal(code, 0, child.log());
  }
});

test('bad Redis options throw at once with the reason', () => {
  assert.throws(() => new sluice.Limiter({ store: { redis: { url: 'http://x' } } }), /redis/i);
  assert.throws(() => new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 0 } } }), RangeError);
  assert.throws(() => new sluice.Limiter({ store: { redis: { url: redis.url, cluster: ['a:1'] } } }), TypeError);
  assert.throws(() => new sluice.Limiter({ store: { redis: { cluster: [] } } }), TypeError);
  assert.throws(() => new sluice.Limiter({ store: { redis: { url: redis.url } }, clock: () => 0 }), TypeError);
});

test('a bad Redis URL\'s message never shows its password, in any of its forms', () => {
  for (const [url, shown] of [
    ['redis://app:S3CRETpw@h:99999', 'redis://app:***@h:99999'],
    ['rediss://:S3CRETpw@h:99999/1', 'rediss://:***@h:99999/1'],
    ['redis://h:99999/0?password=S3CRETpw', 'redis://h:99999/0?password=***'],
    ['redis://h/0?password=S3CRETpw&timeout=1', 'redis://h/0?password=***&timeout=1'],
  ]) {
    assert.throws(() => new sluice.Limiter({ store: { redis: { url } } }), (e) => {
      assert.ok(e.message.includes(shown), e.message);
      assert.ok(!e.message.includes('S3CRET'), e.message);
      return true;
    });
  }
});

test('a Redis that is down: takes reject within the timeout, and succeed once it is back', async () => {
  const r2 = await Redis.start();
  // Long enough that a live Redis answers in time on a machine
  // oversubscribed several times over (the first take, decided, says so);
  // a dead one refuses the connection, and the take fails well within it.
  const timeoutMs = 2000;
  const limiter = new sluice.Limiter({ store: { redis: { url: r2.url, timeoutMs } }, onStoreError: 'reject' });
  const pol = sluice.policy([{ capacity: 100, rate: '1/s' }]);
  assert.equal((await limiter.take('a', pol)).allowed, true);
  assert.equal(limiter.healthy(), true);
  await r2.kill();
  const t0 = Date.now();
  const e = await limiter.take('a', pol).then(() => null, (err) => err);
  assert.ok(e && /ERR_SLUICE_(STORE|TIMEOUT)/.test(e.code), String(e && e.code));
  assert.ok(Date.now() - t0 < timeoutMs + 2000, `answered in ${Date.now() - t0} ms`);
  await r2.start();
  let ok = false;
  for (let i = 0; i < 200 && !ok; i++) {
    ok = await limiter.take('a', pol).then((d) => d.allowed, () => false);
    if (!ok) await sleep(50);
  }
  assert.ok(ok, 'decisions resume after Redis returns');
  await limiter.close();
  await r2.stop();
});

test('with the sluice Redis module loaded, the client uses SLUICE.TAKE, on the same state as the script', async () => {
  const module = path.join(BUILD, 'sluice-redis.so');
  assert.ok(fs.existsSync(module), `${module} is built with sluice`);
  const r2 = await Redis.start(['--loadmodule', module]);
  const viaModule = new sluice.Limiter({ store: { redis: { url: r2.url, timeoutMs: 1000 } } });
  const viaScript = new sluice.Limiter({ store: { redis: { url: r2.url, timeoutMs: 1000, scriptOnly: true } } });
  try {
    const pol = sluice.policy([{ capacity: 4, rate: '1/h' }], { name: 'mod' });
    const got = [];
    for (let i = 0; i < 5; i++) got.push(await (i % 2 ? viaScript : viaModule).take('frank', pol));
    assert.deepEqual(got.map((d) => d.allowed), [true, true, true, true, false]);
    assert.deepEqual(got.map((d) => d.remaining), [3, 2, 1, 0, 0]);
    const stats = r2.cli('INFO', 'commandstats');
    assert.match(stats, /cmdstat_sluice\.take[^:]*:calls=[1-9]/i, stats);
    assert.match(stats, /cmdstat_evalsha:calls=[1-9]/, stats);
  } finally {
    await viaModule.close();
    await viaScript.close();
    await r2.stop();
  }
});
