// The addon decides exactly as the C core: random sequences of takes, on
// an injected clock, through the addon's memory store and through
// sluice_replay_core (sluice_eval_all), decision by decision.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const sluice = require('..');
const { BUILD } = require('./helpers');

// A deterministic generator, so that a failure can be replayed.
function prng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const RATES = ['2/s', '50/min', '0.5/s', '1/3s', '7/day', '3/s', '10/100ms', '2000/h', '1'];

function core(lines) {
  const bin = path.join(BUILD, 'sluice_replay_core');
  assert.ok(fs.existsSync(bin), `${bin} is built by the test build (make test)`);
  const r = spawnSync(bin, [], { input: lines.join('\n') + '\n', encoding: 'utf8', maxBuffer: 1 << 26 });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim().split('\n').map((l) => l.split(' ').map(Number));
}

test('random sequences: the addon and the C core give the same decisions', async () => {
  for (let seed = 1; seed <= 40; seed++) {
    const rnd = prng(seed);
    const n = 1 + Math.floor(rnd() * 3);
    const limits = [];
    for (let i = 0; i < n; i++)
      limits.push({ capacity: 1 + Math.floor(rnd() * 20), rate: RATES[Math.floor(rnd() * RATES.length)] });
    let now = 1_700_000_000_000_000 + Math.floor(rnd() * 1e9);
    const limiter = new sluice.Limiter({ store: 'memory', maxKeys: 16, clock: () => now });
    const pol = sluice.policy(limits, { name: `p${seed}` });
    const lines = [`L ${n} ${limits.map((l) => `${l.capacity} ${l.rate}`).join(' ')}`];
    const got = [];
    for (let i = 0; i < 300; i++) {
      now += Math.floor(rnd() < 0.7 ? rnd() * 300_000 : rnd() * 5_000_000);
      const cost = rnd() < 0.1 ? 0 : rnd() < 0.05 ? 25 : 1 + Math.floor(rnd() * 3);
      lines.push(`T ${now} ${cost}`);
      got.push(await limiter.take('user', pol, { cost }));
    }
    const want = core(lines);
    got.forEach((d, i) => {
      const [allowed, limit, remaining, retryMs, resetMs] = want[i];
      const ctx = `seed ${seed}, take ${i}: ${lines[i + 1]}`;
      assert.equal(d.allowed, allowed === 1, ctx);
      assert.equal(d.limit, limit, ctx);
      assert.equal(d.remaining, remaining, ctx);
      assert.equal(d.retryAfterMs, retryMs === -1 ? Infinity : retryMs, ctx);
      assert.equal(d.resetMs, resetMs, ctx);
      assert.equal(d.policy, `p${seed}`);
    });
    await limiter.close();
  }
});

test('a policy charges every limit all-or-nothing', async () => {
  let now = 1e15;
  const limiter = new sluice.Limiter({ clock: () => now });
  const pol = sluice.policy([{ capacity: 5, rate: '1/s' }, { capacity: 3, rate: '1/min' }], { name: 'two' });
  for (let i = 0; i < 3; i++) assert.equal((await limiter.take('k', pol)).allowed, true);
  const d = await limiter.take('k', pol);
  assert.equal(d.allowed, false);
  assert.equal(d.limit, 3, 'the most restrictive limit is reported');
  now += 5e6; // the per-second limit is full again, the per-minute one is not
  assert.equal((await limiter.take('k', pol)).allowed, false);
  // The rejections charged nothing: after a minute one more passes.
  now += 60e6;
  const after = await limiter.take('k', pol);
  assert.equal(after.allowed, true);
  assert.equal(after.remaining, 0);
});

test('keys: strings and Buffers name the same bucket; policies of other names do not share', async () => {
  const limiter = new sluice.Limiter();
  const a = sluice.policy([{ capacity: 2, rate: '1/min' }], { name: 'a' });
  const b = sluice.policy([{ capacity: 2, rate: '1/min' }], { name: 'b' });
  assert.equal((await limiter.take('zoë', a)).remaining, 1);
  assert.equal((await limiter.take(Buffer.from('zoë'), a)).remaining, 0);
  assert.equal((await limiter.take('zoë', b)).remaining, 1);
  // A long key is hashed, never truncated: keys sharing a 5,000-byte
  // prefix are different buckets.
  const long = 'x'.repeat(5000);
  assert.equal((await limiter.take(long + '1', a)).remaining, 1);
  assert.equal((await limiter.take(long + '2', a)).remaining, 1);
  await limiter.close();
});

test('the memory store is bounded by maxKeys', async () => {
  const limiter = new sluice.Limiter({ store: { memory: { maxKeys: 100 } } });
  const pol = sluice.policy([{ capacity: 1, rate: '1/h' }]);
  for (let i = 0; i < 5000; i++) await limiter.take(`k${i}`, pol);
  // The most recent key is still drained.
  assert.equal((await limiter.take('k4999', pol)).allowed, false);
  await limiter.close();
});

test('each local store writes into the decision array it was opened with, across garbage collections', async () => {
  const native = require(path.join(__dirname, '..', 'build', 'sluice.node'));
  // The array is given once, when the store is opened, and checked then.
  assert.throws(() => native.memoryNew(10), { name: 'TypeError', message: 'decision buffer' });
  assert.throws(() => native.memoryNew(10, new Uint8Array(40)), { name: 'TypeError', message: 'decision buffer' });
  assert.throws(() => native.memoryNew(10, new Float64Array(4)), { name: 'TypeError', message: 'decision buffer' });
  assert.throws(() => native.shmNew('/dev/shm/unused', 10, '', [0, 0, 0, 0, 0]), { name: 'TypeError', message: 'decision buffer' });
  require('node:v8').setFlagsFromString('--expose-gc');
  const gc = require('node:vm').runInNewContext('gc');
  const pol = sluice.policy([{ capacity: 3, rate: '1/h' }]);
  const limiters = Array.from({ length: 20 }, () => new sluice.Limiter());
  for (let round = 0; round < 5; round++) {
    // Garbage and full collections between the takes: a store must keep
    // writing where its limiter reads.
    let junk = [];
    for (let i = 0; i < 20000; i++) junk.push({ i, a: new Float64Array(5) });
    junk = null;
    gc();
    for (const [n, l] of limiters.entries()) {
      const d = await l.take(`k${n}`, pol);
      assert.equal(d.allowed, round < 3, `limiter ${n} round ${round}`);
      assert.equal(d.remaining, Math.max(0, 2 - round), `limiter ${n} round ${round}`);
      assert.equal(d.limit, 3);
    }
  }
  for (const l of limiters) await l.close();
});
