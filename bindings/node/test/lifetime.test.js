// A limiter's lifetime and store state: unref lets an idle Redis limiter's
// process exit (a waiting call still holds it); onError and the 'error'
// event hear of each change of a node's state once, with the reason, and
// 'recover' when the node answers again.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const sluice = require('..');
const { Redis, freePort, sleep, track, waitFor } = require('./helpers');

// A child process that takes once, prints the decision, and leaves an
// unref'd 3 s timer: it fires (exit 3) only if something else holds the
// loop open.
function child(url, unref) {
  const code = `
    const sluice = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    const l = new sluice.Limiter({ store: { redis: { url: ${JSON.stringify(url)}, timeoutMs: 5000 } }, unref: ${unref} });
    const p = sluice.policy([{ capacity: 5, rate: '1/h' }]);
    l.take('k', p).then((d) => {
      console.log(JSON.stringify(d));
      setTimeout(() => { console.log('held open'); process.exit(3); }, 3000).unref();
    }, (e) => { console.log(e.code); process.exit(2); });`;
  const c = track(spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'pipe'] }), 'child');
  let out = '';
  c.stdout.on('data', (d) => { out += d; });
  return new Promise((resolve) => c.on('exit', (status) => resolve({ status, out })));
}

test('unref: an idle Redis limiter does not hold the process open; a waiting take does', async () => {
  const redis = await Redis.start();
  try {
    const idle = await child(redis.url, true);
    assert.equal(idle.status, 0, idle.out);
    assert.equal(JSON.parse(idle.out.split('\n')[0]).allowed, true, 'the take waited for its answer');
    const held = await child(redis.url, false);
    assert.equal(held.status, 3, 'without unref the open limiter keeps the process alive');
    assert.match(held.out, /held open/);
  } finally {
    await redis.stop();
  }
});

test('unref: a callback whose own call fails at once (breaker open) leaves nothing running; the process exits', async () => {
  const port = await freePort();
  // Calls chained from inside the addon's callbacks: once the breaker is
  // open, each fails at once and is settled in the same batch.
  const code = `
    const sluice = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    const l = new sluice.Limiter({ store: { redis: { url: 'redis://127.0.0.1:${port}', timeoutMs: 100 } }, unref: true });
    const p = sluice.policy([{ capacity: 5, rate: '1/h' }]);
    let fast = 0;
    function chain(n, done) {
      const t0 = Date.now();
      l._decide('k' + n, p, 1, (status) => {
        if (Date.now() - t0 < 50) fast++;
        if (n === 0) done(); else chain(n - 1, done);
      });
    }
    let rounds = 0;
    (function round() {
      chain(20, () => {
        if (++rounds < 20 && fast < 20) { setTimeout(round, 50); return; }
        console.log('fast ' + fast);
        setTimeout(() => { console.log('held open'); process.exit(3); }, 3000).unref();
      });
    })();`;
  const c = track(spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'pipe'] }), 'child');
  let out = '';
  c.stdout.on('data', (d) => { out += d; });
  const status = await new Promise((resolve) => c.on('exit', resolve));
  assert.match(out, /fast \d+/);
  assert.ok(Number(/fast (\d+)/.exec(out)[1]) > 0, `no call failed at once: ${out}`);
  assert.equal(status, 0, out);
});

test('onError and the error event: once per change of a node\'s state, with the node and the reason; recover after', async () => {
  const port = await freePort();
  const errors = [];
  const events = [];
  const recovered = [];
  const limiter = new sluice.Limiter({ store: { redis: { url: `redis://127.0.0.1:${port}`, timeoutMs: 300 } }, onStoreError: 'reject', onError: (e) => errors.push(e) });
  limiter.on('error', (e) => events.push(e));
  limiter.on('recover', (r) => recovered.push(r));
  const pol = sluice.policy([{ capacity: 100, rate: '10/s' }]);
  let redis;
  try {
    await waitFor(() => errors.length > 0, 'onError');
    assert.equal(errors[0].code, 'ERR_SLUICE_STORE');
    assert.equal(errors[0].node, `127.0.0.1:${port}`);
    assert.equal(errors[0].reason, 'unreachable');
    assert.match(errors[0].message, new RegExp(`127\\.0\\.0\\.1:${port}.*unreachable`));
    assert.deepEqual(events.map((e) => e.message), errors.map((e) => e.message));
    // Takes keep failing while it stays down: no new call per take.
    for (let i = 0; i < 10; i++) await limiter.take(`k${i}`, pol).then(() => assert.fail('decided'), (e) => assert.match(e.code, /^ERR_SLUICE_(STORE|TIMEOUT)$/));
    await sleep(200);
    assert.equal(errors.length, 1, errors.map((e) => e.message).join('\n'));
    redis = await Redis.start([], port);
    await waitFor(() => recovered.length > 0, 'recover');
    assert.deepEqual(recovered[0], { node: `127.0.0.1:${port}` });
    await waitFor(async () => limiter.take('up', pol).then(() => true, () => false), 'takes answered');
    await redis.kill();
    await waitFor(() => errors.length > 1, 'onError again once the node is lost');
    assert.equal(errors[1].node, `127.0.0.1:${port}`);
    assert.equal(errors.length, events.length);
  } finally {
    await limiter.close();
    if (redis) await redis.stop();
  }
});

test('a Redis refusing the calls: onError and the error event say refused with its redacted words; takes fail ERR_SLUICE_REFUSED', async () => {
  const redis = await Redis.start(['--rename-command', 'EVALSHA', '']);
  const errors = [];
  const events = [];
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 2000, scriptOnly: true } }, onStoreError: 'reject', onError: (e) => errors.push(e) });
  limiter.on('error', (e) => events.push(e));
  const pol = sluice.policy([{ capacity: 5, rate: '1/s' }]);
  try {
    const e = await limiter.take('secret-key-name', pol).then(() => null, (err) => err);
    assert.ok(e, 'the take was refused');
    assert.equal(e.code, 'ERR_SLUICE_REFUSED', e.message);
    assert.match(e.message, /refused.*unknown command/i);
    assert.ok(!e.message.includes('secret-key-name'), e.message);
    await waitFor(() => errors.length > 0, 'onError');
    assert.equal(errors[0].code, 'ERR_SLUICE_REFUSED');
    assert.equal(errors[0].reason, 'refused');
    assert.equal(errors[0].node, `127.0.0.1:${redis.port}`);
    assert.match(errors[0].detail, /unknown command/i);
    assert.ok(!errors[0].detail.includes('secret-key-name'), errors[0].detail);
    assert.deepEqual(events.map((x) => x.message), errors.map((x) => x.message));
  } finally {
    await limiter.close();
    await redis.stop();
  }
});

test('a Redis that may evict buckets: onError and the error event say so (ERR_SLUICE_EVICTION); takes go on', async () => {
  const redis = await Redis.start(['--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru']);
  const errors = [];
  const events = [];
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 2000 } }, onError: (e) => errors.push(e) });
  limiter.on('error', (e) => events.push(e));
  const pol = sluice.policy([{ capacity: 5, rate: '1/s' }]);
  try {
    await waitFor(() => errors.length > 0, 'onError');
    assert.equal(errors[0].code, 'ERR_SLUICE_EVICTION');
    assert.equal(errors[0].reason, 'eviction_policy');
    assert.equal(errors[0].node, `127.0.0.1:${redis.port}`);
    assert.match(errors[0].detail, /allkeys-lru/);
    assert.match(errors[0].message, /may evict buckets/);
    assert.equal(events.length, 1);
    assert.equal((await limiter.take('k', pol)).allowed, true);
    await sleep(300);
    assert.equal(errors.length, 1, 'told once');
  } finally {
    await limiter.close();
    await redis.stop();
  }
});

test('no error listener: a failing node is no uncaught error (takes say it)', async () => {
  const port = await freePort();
  const limiter = new sluice.Limiter({ store: { redis: { url: `redis://127.0.0.1:${port}`, timeoutMs: 200 } }, onStoreError: 'reject' });
  const pol = sluice.policy([{ capacity: 1, rate: '1/s' }]);
  try {
    const e = await limiter.take('k', pol).then(() => null, (err) => err);
    assert.match(e.code, /^ERR_SLUICE_(STORE|TIMEOUT)$/);
    await waitFor(() => limiter._down.size > 0, 'the node reported down');
  } finally {
    await limiter.close();
  }
});
