// The Redis store on a Redis Cluster of three masters: keys spread over
// the nodes, each limit still exact.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const sluice = require('..');
const { startCluster, storeReady } = require('./helpers');

test('a Redis Cluster: keys on every master, each bucket exact', async () => {
  const cluster = await startCluster(3);
  const limiter = new sluice.Limiter({ store: { redis: { cluster: [cluster.seeds[0]], timeoutMs: 2000 } } });
  try {
    const pol = sluice.policy([{ capacity: 3, rate: '1/h' }, { capacity: 5, rate: '5/day' }], { name: 'cl' });
    const users = Array.from({ length: 30 }, (_, i) => `user-${i}`);
    await storeReady(limiter, pol); // the client learns the slot map
    for (const u of users) {
      const got = [];
      for (let i = 0; i < 4; i++) got.push((await limiter.take(u, pol)).allowed);
      assert.deepEqual(got, [true, true, true, false], u);
    }
    const perNode = cluster.nodes.map((n) => Number(n.cli('DBSIZE').trim()));
    assert.equal(perNode.reduce((a, b) => a + b, 0), users.length * 2, `two keys per user: ${perNode}`);
    assert.ok(perNode.every((k) => k > 0), `every master holds buckets: ${perNode}`);
  } finally {
    await limiter.close();
    await cluster.stop();
  }
});

// Resolves to 'ok' or the call's error code; never rejects.
const settled = (p) => p.then(() => 'ok', (e) => e.code || String(e));

// p, or a failure naming what still waits after ms (a lost answer fails
// here, not as a hung run).
function within(p, ms, what) {
  let timer;
  const late = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still waiting after ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

// Every kind of call the limiter makes on Redis, in turn.
const pol1 = sluice.policy([{ capacity: 3, rate: '1/h' }], { name: 'cc1' });
const pol2 = sluice.policy([{ capacity: 3, rate: '1/h' }, { capacity: 5, rate: '5/day' }], { name: 'cc2' });
const CALLS = [
  (l, k) => l.take(k, pol1),
  (l, k) => l.take(k, pol2),
  (l, k) => l.get(k, pol2),
  (l, k) => l.refund(k, pol1, 1),
  (l, k) => l.penalize(k, pol2, 1),
  (l, k) => l.block(k, pol1, 1000),
  (l, k) => l.reset(k, pol2),
];

test('close() on a cluster settles every call waiting -- before the slot map is known, and while a master is reconnected -- and ends', async () => {
  const cluster = await startCluster(3);
  const ok = /^(ok|ERR_SLUICE_CLOSED|ERR_SLUICE_STORE|ERR_SLUICE_TIMEOUT)$/;
  try {
    // Calls made at once, while the client still asks for the slot map,
    // close() in their midst, then calls after it.
    const a = new sluice.Limiter({ store: { redis: { cluster: [cluster.seeds[0]], timeoutMs: 2000 } } });
    const calls = [];
    let closing = null;
    for (let i = 0; i < 42; i++) {
      if (i === 28) closing = a.close();
      calls.push(settled(CALLS[i % CALLS.length](a, `early-${i}`)));
    }
    await within(closing, 30000, 'close() before the slot map');
    const early = await within(Promise.all(calls), 30000, 'calls made before the slot map');
    assert.ok(early.every((r) => ok.test(r)), early.join(' '));
    assert.deepEqual(early.slice(28), Array(14).fill('ERR_SLUICE_CLOSED'), 'calls after close()');

    // A master killed and brought back: calls on its slots fail or wait
    // while the client reconnects; close() while it does.
    const b = new sluice.Limiter({ store: { redis: { cluster: [cluster.seeds[0]], timeoutMs: 2000 } } });
    await storeReady(b, pol1);
    const gone = cluster.nodes[1];
    const more = [];
    await gone.kill();
    for (let i = 0; i < 21; i++) {
      more.push(settled(CALLS[i % CALLS.length](b, `down-${i}`)));
      await new Promise((r) => setImmediate(r));
    }
    await gone.start();
    for (let i = 0; i < 21; i++) {
      if (i === 11) closing = b.close();
      more.push(settled(CALLS[i % CALLS.length](b, `back-${i}`)));
    }
    await within(closing, 30000, 'close() while a master reconnects');
    const late = await within(Promise.all(more), 30000, 'calls while a master reconnects');
    assert.ok(late.every((r) => ok.test(r)), late.join(' '));
  } finally {
    await cluster.stop();
  }
});
