'use strict';
// A limit stays a limit when Redis or the host is slow: a blocked event
// loop is not taken for a slow Redis, and while the store cannot answer
// each process decides with its own in-memory limiter on the same policy
// (onStoreError: 'local', the default), saying so once per change.
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn } = require('node:child_process');
const sluice = require('..');
const { Redis, freePort, request, sleep, storeReady, track, stopChild, waitFor } = require('./helpers');

const PKG = path.resolve(__dirname, '..');

// Runs a script in a node of its own; its stdout and stderr when it ends.
function runScript(script, timeoutMs = 60000) {
  return new Promise((resolve, reject) => {
    const child = track(spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] }), 'script');
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

test('a loop blocked 1.2 s right after new Limiter(): the first take is decided by Redis, nothing is told', async () => {
  const redis = await Redis.start();
  // Its own process: the block is the whole process's, as an app's
  // large require tree after the limiter was made.
  const script = `
    const sluice = require(${JSON.stringify(PKG)});
    const l = new sluice.Limiter({ store: { redis: { url: ${JSON.stringify(redis.url)} } } });
    const told = [];
    l.on('error', (e) => told.push(e.message));
    l.on('recover', (i) => told.push('recover ' + JSON.stringify(i)));
    const end = Date.now() + 1200;
    while (Date.now() < end) {} // the loop blocked
    const p = sluice.policy([{ capacity: 5, rate: '1/h' }], { name: 'held' });
    l.take('k', p).then(async (d) => {
      const local = l.local;
      await new Promise((r) => setTimeout(r, 300)); // events come on later turns
      console.log(JSON.stringify({ remaining: d.remaining, allowed: d.allowed, local, told }));
      await l.close();
    }, (e) => { console.log(JSON.stringify({ error: e.message, told })); l.close(); });
  `;
  try {
    const r = await runScript(script);
    assert.equal(r.code, 0, r.err);
    const got = JSON.parse(r.out.trim());
    assert.deepEqual(got, { remaining: 4, allowed: true, local: false, told: [] }, r.err);
    assert.equal(r.err, '', 'nothing logged');
    // Redis holds the bucket: the take was decided there.
    assert.notEqual(redis.cli('--scan', '--pattern', '*held*').trim(), '');
  } finally {
    await redis.stop();
  }
});

test('take() with Redis down: decided by a local limiter on the same policy, told once each way through the logger', async () => {
  const redis = await Redis.start();
  const log = [];
  const logger = { warn: (m) => log.push(['warn', m]), info: (m) => log.push(['info', m]) };
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 200 } }, logger });
  const pol = sluice.policy([{ capacity: 3, rate: '1/h' }], { name: 'fb' });
  const fallback = () => log.filter(([, m]) => /decides alone|decisions are shared again/.test(m));
  try {
    await storeReady(limiter, pol);
    assert.equal((await limiter.take('k', pol)).remaining, 2);
    await redis.kill();
    // The local bucket is the policy's own: full at first, then limits.
    const got = [];
    for (let i = 0; i < 5; i++) {
      const d = await limiter.take('k', pol);
      got.push([d.allowed, d.remaining, d.limit, d.policy]);
    }
    assert.deepEqual(got, [[true, 2, 3, 'fb'], [true, 1, 3, 'fb'], [true, 0, 3, 'fb'], [false, 0, 3, 'fb'], [false, 0, 3, 'fb']]);
    assert.equal(limiter.local, true);
    assert.equal(fallback().length, 1, JSON.stringify(log));
    assert.equal(fallback()[0][0], 'warn');
    assert.match(fallback()[0][1], /^sluice: the Redis store cannot answer \(.*\); each process decides alone/);
    // get() too, charging nothing.
    assert.equal((await limiter.get('other', pol)).remaining, 2);
    assert.equal((await limiter.get('other', pol)).remaining, 2);
    await redis.start();
    await waitFor(async () => { await limiter.take('k2', pol); return !limiter.local; }, 'decisions shared again', 30000);
    assert.deepEqual(fallback().map(([level]) => level), ['warn', 'info'], JSON.stringify(log));
    assert.match(fallback()[1][1], /answers again/);
    // Back on Redis (restarted empty: its bucket is full again), not on
    // the local one (drained).
    assert.equal((await limiter.take('k', pol)).remaining, 2);
    assert.notEqual(redis.cli('--scan', '--pattern', '*fb*').trim(), '');
  } finally {
    await limiter.close();
    await redis.stop();
  }
});

test("no listener and no logger: the fallback is one console.warn each way; onStoreError: 'reject' rejects instead", async () => {
  const port = await freePort(); // nothing listens there
  const script = `
    const sluice = require(${JSON.stringify(PKG)});
    const url = 'redis://127.0.0.1:${port}';
    const p = sluice.policy([{ capacity: 2, rate: '1/h' }]);
    (async () => {
      const l = new sluice.Limiter({ store: { redis: { url, timeoutMs: 100 } } });
      const out = [];
      for (let i = 0; i < 4; i++) out.push((await l.take('k', p)).allowed);
      const r = new sluice.Limiter({ store: { redis: { url, timeoutMs: 100 } }, onStoreError: 'reject' });
      const e = await r.take('k', p).then(() => null, (err) => err.code);
      console.log(JSON.stringify({ out, local: l.local, rejected: e }));
      await l.close();
      await r.close();
    })();
  `;
  const r = await runScript(script);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(JSON.parse(r.out.trim()), { out: [true, true, false, false], local: true, rejected: r.out.includes('ERR_SLUICE_TIMEOUT') ? 'ERR_SLUICE_TIMEOUT' : 'ERR_SLUICE_STORE' });
  const warned = r.err.split('\n').filter((l) => l.includes('decides alone'));
  assert.equal(warned.length, 1, r.err);
  assert.throws(() => new sluice.Limiter({ onStoreError: 'open' }), { name: 'RangeError', message: /onStoreError must be 'local' or 'reject'/ });
});

test("an 'error' listener that throws at the fallback's start loses no answer", async () => {
  const port = await freePort(); // nothing listens there
  const script = `
    const sluice = require(${JSON.stringify(PKG)});
    const p = sluice.policy([{ capacity: 2, rate: '1/h' }]);
    const thrown = [];
    process.on('uncaughtException', (e) => thrown.push(e.message));
    const l = new sluice.Limiter({ store: { redis: { url: 'redis://127.0.0.1:${port}', timeoutMs: 100 } } });
    l.on('error', () => { throw new Error('from the listener'); });
    Promise.all([l.take('k', p), l.take('k', p), l.take('k', p)]).then(async (ds) => {
      console.log(JSON.stringify({ allowed: ds.map((d) => d.allowed), thrown }));
      await l.close();
    });
  `;
  const r = await runScript(script);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(JSON.parse(r.out.trim()), { allowed: [true, true, false], thrown: ['from the listener'] });
});

// Three Express apps with default options on one Redis, two CPU-bound
// loops beside them, and Redis frozen (SIGSTOP) for a while in the middle:
// the requests Redis decided never pass the limit, each process's local
// fallback allows at most the policy itself while it is in use, and every
// process that decided locally said so (console.warn: nobody listens).
test('three processes, default options, busy host, Redis frozen mid-run: allowed <= 100 + the local fallback of each process that logged one', async () => {
  const redis = await Redis.start();
  const CAP = 100;
  const app = `
    const express = require('express');
    const sluice = require(${JSON.stringify(PKG)});
    const limiter = new sluice.Limiter({ store: { redis: { url: ${JSON.stringify(redis.url)} } } });
    const policy = sluice.policy([{ capacity: ${CAP}, rate: '1/h' }], { name: 'three' });
    const a = express();
    a.use(sluice.express({ limiter, policy, key: () => 'one-client' }));
    // Whether the decision was the local fallback's (read as it is made).
    a.get('/', (req, res) => res.send(limiter.local ? 'local' : 'shared'));
    const s = a.listen(0, '127.0.0.1', () => console.log('port ' + s.address().port));
  `;
  const burners = [];
  const apps = [];
  const logs = [];
  try {
    for (let i = 0; i < 2; i++)
      burners.push(track(spawn(process.execPath, ['-e', 'const e = Date.now() + 120000; while (Date.now() < e) {}'],
        { stdio: 'ignore' }), 'burner'));
    for (let i = 0; i < 3; i++) {
      const child = track(spawn(process.execPath, ['-e', app], { cwd: PKG, stdio: ['ignore', 'pipe', 'pipe'] }), `app${i}`);
      logs.push('');
      child.stderr.on('data', (d) => { logs[i] += d; });
      child.port = new Promise((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (d) => {
          out += d;
          const m = /port (\d+)/.exec(out);
          if (m) resolve(Number(m[1]));
        });
        child.on('exit', () => reject(new Error(`app${i} ended: ${logs[i]}`)));
      });
      apps.push(child);
    }
    const ports = await Promise.all(apps.map((c) => c.port));
    const results = ports.map(() => []);
    // n requests to each app, 8 at a time per app.
    const round = async (n) => {
      await Promise.all(ports.map(async (port, i) => {
        for (let k = 0; k < n; k += 8)
          await Promise.all(Array.from({ length: Math.min(8, n - k) }, () =>
            request(port, '/').then((r) => results[i].push(r))));
      }));
    };
    await round(30);
    redis.proc.kill('SIGSTOP'); // hung: connections open, nothing answers
    try {
      await round(40);
    } finally {
      redis.proc.kill('SIGCONT');
    }
    await round(30);
    await sleep(300); // the last transitions logged
    let allowed = 0;
    let shared = 0;
    let bound = CAP;
    const told = [];
    for (let i = 0; i < 3; i++) {
      const rs = results[i];
      for (const r of rs) assert.ok(r.status === 200 || r.status === 429, `app${i}: ${r.status} ${r.body}`);
      for (const r of rs) assert.ok(r.headers['x-ratelimit-limit'] === String(CAP), `app${i}: headers on every answer`);
      const ok = rs.filter((r) => r.status === 200);
      const local = ok.filter((r) => r.body === 'local').length;
      allowed += ok.length;
      shared += ok.length - local;
      // The logged changes, in order: local, shared, local, ...
      const changes = logs[i].split('\n').filter((l) => /decides alone|decisions are shared again/.test(l))
        .map((l) => (/decides alone/.test(l) ? 'local' : 'shared'));
      changes.forEach((c, k) => assert.equal(c, k % 2 === 0 ? 'local' : 'shared', `app${i} told in turn: ${changes}`));
      told.push(changes.length);
      if (local > 0) assert.ok(changes.length >= 1, `app${i} decided ${local} locally and logged no fallback: ${logs[i]}`);
      // What its fallback may allow while in use: the policy's own bucket
      // (its refill over this run, 1/h, is less than one token).
      if (changes.length > 0) bound += CAP + 1;
      // Nothing else is logged by default but the store's state.
      assert.doesNotMatch(logs[i], /Error|uncaught/i, logs[i]);
    }
    console.log(`# three processes: allowed ${allowed} (by Redis ${shared}), bound ${bound}, fallback changes logged ${told}`);
    assert.ok(shared <= CAP, `Redis's decisions allowed ${shared} > ${CAP}`);
    assert.ok(allowed <= bound, `allowed ${allowed} > ${bound}`);
    assert.ok(told.some((n) => n > 0), 'the frozen Redis made at least one process fall back');
  } finally {
    for (const c of [...apps, ...burners]) await stopChild(c, 'SIGKILL');
    redis.proc.kill('SIGCONT');
    await redis.stop();
  }
});
