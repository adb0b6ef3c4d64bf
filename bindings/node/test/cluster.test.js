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
