// Waiting for a turn: wait(), schedule(), set() and the middleware's
// delay option, on the memory store (with a clock of the test's own, so
// every number is exact) and on a real Redis shared by three processes.
// Nothing here is timed: turns are read from the answers (turnAtUs, on
// the store's clock), never from when a promise happened to resolve.
'use strict';
const { test, BUILD, Redis, storeReady, track } = require('./helpers');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const express = require('express');
const sluice = require('..');

// A memory limiter whose clock stands where the test puts it.
function clocked() {
  const clock = { us: 1_700_000_000_000_000 };
  const limiter = new sluice.Limiter({ clock: () => clock.us });
  return { limiter, clock };
}

test('wait(): turns one refill apart from a drained bucket, on the store clock', async () => {
  const { limiter, clock } = clocked();
  const p = sluice.policy([{ capacity: 2, rate: '10/s' }], { name: 'w' });
  const got = [];
  // Two at once (the burst), then one every 100 ms: promises resolve at
  // their turns, so wait for none of them here but the answers.
  const turns = [];
  for (let i = 0; i < 5; i++) {
    const w = limiter.wait('k', p, { maxWaitMs: 1000 });
    got.push(w);
  }
  for (const w of got) turns.push(await w);
  assert.deepEqual(turns.map((t) => t.turnAtUs - clock.us), [0, 0, 100000, 200000, 300000]);
  assert.deepEqual(turns.map((t) => t.waitMs), [0, 0, 100, 200, 300]);
  assert.ok(turns.every((t) => t.policy === 'w' && t.limit === 2));
  await limiter.close();
});

test('wait(): refused at once past maxWaitMs, charging nothing; a cost beyond the capacity never', async () => {
  const { limiter } = clocked();
  const p = sluice.policy([{ capacity: 1, rate: '1/s' }], { name: 'r' });
  assert.equal((await limiter.wait('k', p, { maxWaitMs: 0 })).waitMs, 0);
  await assert.rejects(limiter.wait('k', p, { maxWaitMs: 999 }), (e) => e.code === 'ERR_SLUICE_WAIT' && e.waitMs === 1000 && e.retryAfterMs === 1);
  // Nothing was charged: the next turn is still one second away.
  const w = limiter.wait('k', p, { maxWaitMs: 1000 });
  assert.equal((await w).waitMs, 1000);
  await assert.rejects(limiter.wait('k', p, { cost: 2, maxWaitMs: 1e9 }), (e) => e.code === 'ERR_SLUICE_WAIT' && e.waitMs === Infinity);
  await limiter.close();
});

test('wait(): an aborted wait gives its token back; an aborted signal charges nothing', async () => {
  const { limiter, clock } = clocked();
  const p = sluice.policy([{ capacity: 1, rate: '1/s' }], { name: 'a' });
  await limiter.wait('k', p, { maxWaitMs: 0 });
  const ac = new AbortController();
  const w = limiter.wait('k', p, { maxWaitMs: 5000, signal: ac.signal });
  ac.abort();
  await assert.rejects(w, (e) => e.name === 'AbortError');
  // The aborted turn (1 s) is the next one's again, not 2 s.
  const next = limiter.wait('k', p, { maxWaitMs: 5000 });
  const t = await next;
  assert.equal(t.turnAtUs - clock.us, 1_000_000);
  const gone = new AbortController();
  gone.abort();
  await assert.rejects(limiter.wait('k', p, { signal: gone.signal }), (e) => e.name === 'AbortError');
  // Still the 2 s turn next: the pre-aborted call reserved nothing.
  await assert.rejects(limiter.wait('k', p, { maxWaitMs: 1999 }), (e) => e.waitMs === 2000);
  await limiter.close();
});

// The 'aborted' event of the next aborted wait().
function nextAborted(limiter) {
  return new Promise((resolve) => limiter.once('aborted', resolve));
}

// How a client gets around a limit with waits: it aborts one after a
// later turn was given.  An unconditional refund would open a gap one
// refill before that later turn, and one request more than the limit
// would take it.  The same scenario runs on every store below.
async function abortAfterLaterTurn(limiter, p, storeMs) {
  // A bucket of 1 at 1/min: A now, B in one minute, C in two.
  assert.equal((await limiter.wait('k', p, { maxWaitMs: 0 })).waitMs, 0);
  const ac = new AbortController();
  const b = limiter.wait('k', p, { maxWaitMs: 90000, signal: ac.signal });
  b.catch(() => {});
  // C's turn is given (its promise pends until then: only its answer
  // matters here, which the rejection of a too-short wait shows).
  const cAc = new AbortController();
  const c = limiter.wait('k', p, { maxWaitMs: 150000, signal: cAc.signal });
  c.catch(() => {});
  // B is answered (its turn given) before C: one store, in order.
  await assert.rejects(limiter.wait('k', p, { maxWaitMs: 1000 }), (e) => e.code === 'ERR_SLUICE_WAIT' && e.waitMs > 170000 - storeMs);
  const told = nextAborted(limiter);
  ac.abort();
  await assert.rejects(b, (e) => e.name === 'AbortError');
  const ev = await told;
  assert.deepEqual([ev.key, ev.policy, ev.cost, ev.refunded], ['k', p.name, 1, false]);
  // The limit holds: of ten more waiters willing to wait up to two
  // minutes, none gets a turn (A, B's unused one and C fill them); an
  // unconditional refund would have let one in at C's turn.
  let passed = 0;
  for (let i = 0; i < 10; i++) {
    try {
      await limiter.wait('k', p, { maxWaitMs: 120000 + storeMs });
      passed++;
    } catch (e) {
      assert.equal(e.code, 'ERR_SLUICE_WAIT');
    }
  }
  assert.equal(passed, 0);
  // C, last in line, aborts: given back whole, its turn the next one's.
  const toldC = nextAborted(limiter);
  cAc.abort();
  await assert.rejects(c, (e) => e.name === 'AbortError');
  assert.equal((await toldC).refunded, true);
  const d = limiter.wait('k', p, { maxWaitMs: 130000 + storeMs });
  d.catch(() => {});
  await assert.rejects(limiter.wait('k', p, { maxWaitMs: 1000 }), (e) => e.code === 'ERR_SLUICE_WAIT' && e.waitMs > 170000 - storeMs);
}

test('wait(): an abort with no later turn is refunded; after a later turn was given, not, and the limit holds (memory)', async () => {
  const { limiter } = clocked();
  const p = sluice.policy([{ capacity: 1, rate: '1/min' }], { name: 'ab' });
  // No later turn: the 'aborted' event says refunded, and the turn is
  // the next one's.
  await limiter.wait('n', p, { maxWaitMs: 0 });
  const ac = new AbortController();
  const w = limiter.wait('n', p, { maxWaitMs: 90000, signal: ac.signal });
  const told = nextAborted(limiter);
  ac.abort();
  await assert.rejects(w, (e) => e.name === 'AbortError');
  assert.deepEqual(await told, { key: 'n', policy: 'ab', cost: 1, refunded: true });
  await assert.rejects(limiter.wait('n', p, { maxWaitMs: 1000 }), (e) => e.waitMs === 60000);
  await abortAfterLaterTurn(limiter, p, 0);
  await limiter.close();
});

test('wait(): the same on the shared-memory store', async () => {
  const file = `/dev/shm/sluice-wait-test-${process.pid}`;
  const limiter = new sluice.Limiter({ store: { shared: { path: file, maxKeys: 1000 } } });
  try {
    await abortAfterLaterTurn(limiter, sluice.policy([{ capacity: 1, rate: '1/min' }], { name: 'abs' }), 5000);
  } finally {
    await limiter.close();
    fs.rmSync(file, { force: true });
  }
});

for (const withModule of [false, true]) {
  test(`wait() on Redis${withModule ? ' with the sluice module' : ''}: an abort after a later turn was given is not refunded, and the limit holds`, async () => {
    const module = path.join(BUILD, 'sluice-redis.so');
    if (withModule) assert.ok(fs.existsSync(module), `${module} is built with sluice`);
    const redis = await Redis.start(withModule ? ['--loadmodule', module] : []);
    const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 5000 } } });
    try {
      // Two limits, so the script path answers several states too.
      const p = sluice.policy([{ capacity: 1, rate: '1/min' }, { capacity: 10, rate: '10/min' }], { name: 'abr' });
      await storeReady(limiter, p);
      await abortAfterLaterTurn(limiter, p, 5000);
      const one = sluice.policy([{ capacity: 1, rate: '1/min' }], { name: 'abr1' });
      await abortAfterLaterTurn(limiter, one, 5000);
    } finally {
      await limiter.close();
      await redis.stop();
    }
  });
}

test('schedule() runs fn at its turn; set() leaves a number of tokens', async () => {
  const { limiter } = clocked();
  const p = sluice.policy([{ capacity: 5, rate: '1/h' }], { name: 's' });
  assert.equal(await limiter.schedule('k', p, () => 'ran'), 'ran');
  let ran = false;
  await assert.rejects(limiter.schedule('k', p, () => { ran = true; }, { cost: 9 }), { code: 'ERR_SLUICE_WAIT' });
  assert.equal(ran, false);
  await limiter.set('k', p, 2);
  assert.deepEqual([(await limiter.take('k', p)).remaining, (await limiter.take('k', p)).allowed, (await limiter.take('k', p)).allowed], [1, true, false]);
  await limiter.set('k', p, 99);
  assert.equal((await limiter.take('k', p)).remaining, 4);
  assert.throws(() => limiter.wait('k', p, { maxWait: 5 }), /maxWaitMs/);
  assert.throws(() => limiter.wait('k', p, { signal: 'x' }), /AbortSignal/);
  await limiter.close();
});

function get(server) {
  return new Promise((resolve, reject) => {
    http.get({ port: server.address().port, path: '/' }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    }).on('error', reject);
  });
}

test("the middleware's delay: { maxWaitMs } delays a request instead of refusing it", async () => {
  const limiter = new sluice.Limiter();
  const p = sluice.policy([{ capacity: 1, rate: '20/s' }], { name: 'd' });
  const app = express();
  app.get('/', sluice.express({ limiter, policy: p, key: () => 'one', delay: { maxWaitMs: 5000 } }), (req, res) => res.send('ok'));
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  try {
    // Four at once on a bucket of one: all served, none refused.
    assert.deepEqual(await Promise.all([0, 1, 2, 3].map(() => get(server))), [200, 200, 200, 200]);
  } finally {
    server.close();
    await limiter.close();
  }
  assert.throws(() => sluice.express({ limiter, policy: p, delay: { maxWaitMs: 0 } }), /delay.maxWaitMs/);
  assert.throws(() => sluice.express({ limiter, policy: p, delay: { wait: 1 } }), /no option "wait"/);
});

// Waits (bounded) until the key 'one' is refused with retryAfterMs `ms`
// on the test's still clock (the refunds of answers that finished have
// landed), then checks it stays so.
async function settlesAt(limiter, p, ms) {
  const now = async () => { const d = await limiter.get('one', p); return d.allowed ? 0 : d.retryAfterMs; };
  for (let i = 0; i < 2000 && (await now()) !== ms; i++) await new Promise((r) => setTimeout(r, 5));
  assert.equal(await now(), ms);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(await now(), ms);
}

test("the middleware's delay with skipSuccessfulRequests: a request is given back only when nobody was queued after it", async () => {
  const { limiter } = clocked();
  const p = sluice.policy([{ capacity: 1, rate: '20/s' }], { name: 'ds' });
  const hold = new Map();
  const app = express();
  app.get('/', sluice.express({ limiter, policy: p, key: () => 'one', delay: { maxWaitMs: 5000 }, skipSuccessfulRequests: true }), (req, res) => {
    // Each request waits for the test to let it answer.
    hold.set(req.query.n, () => res.send('ok'));
  });
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  const getN = (n) => new Promise((resolve, reject) => {
    http.get({ port: server.address().port, path: `/?n=${n}` }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    }).on('error', reject);
  });
  const until = async (cond) => {
    for (let i = 0; i < 6000 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
    assert.ok(cond());
  };
  try {
    // Alone: answered, given back (nobody after it): the bucket is full.
    const a = getN('a');
    await until(() => hold.has('a'));
    hold.get('a')();
    assert.equal(await a, 200);
    assert.equal((await limiter.get('one', p)).allowed, true);
    // b at once, c queued behind it (its turn 50 ms later on the store
    // clock): b's success is not given back, c's is (the last).
    const b = getN('b');
    await until(() => hold.has('b'));
    const c = getN('c');
    await until(() => hold.has('c'));
    hold.get('b')();
    assert.equal(await b, 200);
    hold.get('c')();
    assert.equal(await c, 200);
    // c given back (its refund lands once its answer finished: until
    // then b and c are charged, 100 ms to wait); b's charge stays: 50 ms
    // (a refund of both would have filled the bucket, and one more
    // request would fit in c's interval).
    await settlesAt(limiter, p, 50);
  } finally {
    server.close();
    await limiter.close();
  }
});

test("Fastify's delay with skipSuccessfulRequests: the same conditional refund", async () => {
  const Fastify = require('fastify');
  const { limiter } = clocked();
  const p = sluice.policy([{ capacity: 1, rate: '20/s' }], { name: 'fs' });
  const hold = new Map();
  const app = Fastify();
  await app.register(sluice.fastify, { limiter, policy: p, key: () => 'one', delay: { maxWaitMs: 5000 }, skipSuccessfulRequests: true });
  app.get('/', (request) => new Promise((resolve) => hold.set(request.query.n, () => resolve({ ok: true }))));
  await app.listen({ port: 0, host: '127.0.0.1' });
  const getN = (n) => new Promise((resolve, reject) => {
    http.get({ port: app.server.address().port, path: `/?n=${n}` }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    }).on('error', reject);
  });
  const until = async (cond) => {
    for (let i = 0; i < 6000 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
    assert.ok(cond());
  };
  // onResponse runs after the answer is sent: wait until it has.
  const settles = async (allowed) => {
    for (let i = 0; i < 2000 && (await limiter.get('one', p)).allowed !== allowed; i++) await new Promise((r) => setTimeout(r, 5));
    assert.equal((await limiter.get('one', p)).allowed, allowed);
  };
  try {
    const a = getN('a');
    await until(() => hold.has('a'));
    hold.get('a')();
    assert.equal(await a, 200);
    await settles(true);
    const b = getN('b');
    await until(() => hold.has('b'));
    const c = getN('c');
    await until(() => hold.has('c'));
    hold.get('b')();
    assert.equal(await b, 200);
    hold.get('c')();
    assert.equal(await c, 200);
    // c given back (the last), b not: one token charged.
    await settlesAt(limiter, p, 50);
  } finally {
    await app.close();
    await limiter.close();
  }
});

// One process of the three: waits for "go" on stdin, then makes n wait()
// calls at once and prints each answer's turn and wait, in call order.
const WAITER = `
const sluice = require(${JSON.stringify(require.resolve('..'))});
const [url, n] = process.argv.slice(1);
const limiter = new sluice.Limiter({ store: { redis: { url, timeoutMs: 5000 } } });
const p = sluice.policy([{ capacity: 1, rate: '10/s' }], { name: 'pool' });
(async () => {
  // Until the store answers (a busy machine may take a few tries).
  for (let i = 0; ; i++) {
    try { await limiter.get('warm', p); break; } catch (e) {
      if (i === 100) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  process.stdout.write('ready\\n');
  await new Promise((r) => process.stdin.once('data', r));
  const out = await Promise.all(Array.from({ length: Number(n) }, () =>
    limiter.wait('api', p, { maxWaitMs: 600000 }).then((t) => [t.turnAtUs, t.waitMs], (e) => ['refused', e.code])));
  process.stdout.write(JSON.stringify(out) + '\\n');
  await limiter.close();
})();
`;

function waiter(url, n) {
  const child = track(spawn(process.execPath, ['-e', WAITER, url, String(n)], { stdio: ['pipe', 'pipe', 'pipe'] }), 'waiter');
  let out = '';
  const lines = [];
  const waiters = [];
  child.stdout.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) {
      lines.push(out.slice(0, i));
      out = out.slice(i + 1);
      while (waiters.length && lines.length) waiters.shift()(lines.shift());
    }
  });
  let err = '';
  child.stderr.on('data', (d) => { err += d; });
  const line = () => new Promise((resolve, reject) => {
    if (lines.length) return resolve(lines.shift());
    waiters.push(resolve);
    child.once('exit', (code) => reject(new Error(`waiter exited ${code}: ${err}`)));
  });
  return { child, line };
}

test('3 processes x 100 wait() on one Redis at 10/s: turns exactly 100 ms apart, one order, none refused', { timeout: 600000 }, async () => {
  const redis = await Redis.start();
  try {
    const ws = [0, 1, 2].map(() => waiter(redis.url, 100));
    assert.deepEqual(await Promise.all(ws.map((w) => w.line())), ['ready', 'ready', 'ready']);
    for (const w of ws) w.child.stdin.write('go\n');
    const answers = (await Promise.all(ws.map((w) => w.line()))).map((l) => JSON.parse(l));
    const all = [];
    answers.forEach((calls, proc) => {
      assert.equal(calls.length, 100);
      assert.ok(calls.every(([turn]) => turn !== 'refused'), `process ${proc}: none refused`);
      // One order: a process's calls get their turns in the order made.
      for (let i = 1; i < calls.length; i++) assert.ok(calls[i][0] > calls[i - 1][0], `process ${proc}, call ${i}`);
      for (const [turn, waitMs] of calls) all.push({ turn, waitMs });
    });
    all.sort((a, b) => a.turn - b.turn);
    // On the server's one clock, every turn is one refill after the one
    // before (a bucket of one: never two in one interval), exactly when
    // it had to wait for it; a gap can only come where the queue ran dry
    // (a call that did not wait).
    for (let i = 1; i < all.length; i++) {
      const gap = all[i].turn - all[i - 1].turn;
      if (all[i].waitMs > 0) assert.equal(gap, 100000, `turn ${i}: ${gap} us after the one before`);
      else assert.ok(gap >= 100000, `turn ${i}: ${gap} us after the one before`);
    }
    assert.ok(all.filter((a) => a.waitMs > 0).length >= 297, 'the three queued on one bucket');
  } finally {
    await redis.stop();
  }
});

test('wait() on Redis: refused past maxWaitMs charging nothing, an aborted wait refunded, set()', async () => {
  const redis = await Redis.start();
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 5000 } } });
  try {
    const p = sluice.policy([{ capacity: 1, rate: '1/min' }], { name: 'ra' });
    await storeReady(limiter, p);
    const first = await limiter.wait('k', p, { maxWaitMs: 0 });
    assert.equal(first.waitMs, 0);
    await assert.rejects(limiter.wait('k', p, { maxWaitMs: 1000 }), (e) => e.code === 'ERR_SLUICE_WAIT' && e.waitMs > 58000);
    const ac = new AbortController();
    const w = limiter.wait('k', p, { maxWaitMs: 120000, signal: ac.signal });
    ac.abort();
    await assert.rejects(w, (e) => e.name === 'AbortError');
    // Refunded: the next turn is a minute away again, not two (the
    // refund lands first: one connection answers in order).
    await assert.rejects(limiter.wait('k', p, { maxWaitMs: 1000 }), (e) => e.code === 'ERR_SLUICE_WAIT' && e.waitMs > 58000 && e.waitMs <= 60000);
    await limiter.set('k', p, 1);
    assert.equal((await limiter.take('k', p)).allowed, true);
    assert.equal((await limiter.take('k', p)).allowed, false);
  } finally {
    await limiter.close();
    await redis.stop();
  }
});
