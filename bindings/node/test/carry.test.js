// A policy made again with the same name and another capacity or rate
// keeps each key's usage (what was used stays used), on every store: the
// memory store, the shared-memory store and Redis.
'use strict';
const { test, Redis } = require('./helpers');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const sluice = require('..');

let seq = 0;

async function passes(limiter, key, pol, most = 40) {
  let n = 0;
  while (n < most && (await limiter.take(key, pol)).allowed) n++;
  return n;
}

// The three stories, each under a name of its own (a name's earlier
// limits are the process's), on one limiter.
async function stories(limiter, tag) {
  const name = (s) => `carry-${tag}-${s}`;

  // Drained on 5/h, lowered to 3 at 2/h: still refused, retry in the new
  // rate's terms (30 minutes); a new key starts full.
  let pol = sluice.policy([{ capacity: 5, rate: '1/h' }], { name: name('low') });
  assert.equal(await passes(limiter, 'abuser', pol), 5);
  pol = sluice.policy([{ capacity: 3, rate: '2/h' }], { name: name('low') });
  const d = await limiter.take('abuser', pol);
  assert.equal(d.allowed, false);
  assert.equal(d.limit, 3);
  assert.ok(d.retryAfterMs <= 1800000 && d.retryAfterMs > 1700000, String(d.retryAfterMs));
  assert.equal(await passes(limiter, 'newcomer', pol), 3);

  // Raised: the difference.
  pol = sluice.policy([{ capacity: 5, rate: '1/h' }], { name: name('up') });
  assert.equal(await passes(limiter, 'u', pol), 5);
  pol = sluice.policy([{ capacity: 8, rate: '1/h' }], { name: name('up') });
  assert.equal(await passes(limiter, 'u', pol), 3);

  // Half used across a rate change.
  pol = sluice.policy([{ capacity: 10, rate: '1/h' }], { name: name('half') });
  for (let i = 0; i < 5; i++) assert.equal((await limiter.take('h', pol)).allowed, true);
  pol = sluice.policy([{ capacity: 10, rate: '1/day' }], { name: name('half') });
  assert.equal((await limiter.take('h', pol)).remaining, 4);
}

test('memory store: a policy of the same name keeps each key\'s usage', async () => {
  const limiter = new sluice.Limiter();
  await stories(limiter, 'mem');
  await limiter.close();
});

test('shared store: a policy of the same name keeps each key\'s usage', async (t) => {
  const file = `/dev/shm/sluice-node-carry-${process.pid}`;
  fs.rmSync(file, { force: true });
  t.after(() => fs.rmSync(file, { force: true }));
  const limiter = new sluice.Limiter({ store: { shared: { path: file, maxKeys: 100 } } });
  await stories(limiter, 'shm');
  await limiter.close();
});

test('redis store: a policy of the same name keeps each key\'s usage', async (t) => {
  const redis = await Redis.start();
  t.after(() => redis.stop());
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 5000 } } });
  await stories(limiter, 'redis');
  await limiter.close();
});
