// The Redis store on a Redis Cluster of three masters: keys spread over
// the nodes, each limit still exact.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const sluice = require('..');
const { startCluster } = require('./helpers');

test('a Redis Cluster: keys on every master, each bucket exact', async () => {
  const cluster = await startCluster(3);
  const limiter = new sluice.Limiter({ store: { redis: { cluster: [cluster.seeds[0]], timeoutMs: 2000 } } });
  try {
    const pol = sluice.policy([{ capacity: 3, rate: '1/h' }, { capacity: 5, rate: '5/day' }], { name: 'cl' });
    const users = Array.from({ length: 30 }, (_, i) => `user-${i}`);
    // Retry the first call while the client learns the slot map.
    for (let i = 0; ; i++) {
      try {
        await limiter.take('probe', pol, { cost: 0 });
        break;
      } catch (e) {
        if (i > 100) throw e;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
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
