// The Redis store behind Redis Sentinel: the master the Sentinels name,
// plain and over TLS.  (Failovers are tested with libsluice's client in
// tests/integration/test_redis_sentinel.py; here, the options' way from
// JavaScript to the client.)
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const sluice = require('..');
const { Redis, failsWith, makeCerts, startTlsRedis, startSentinel, storeReady, limiterPool } = require('./helpers');

const limiter = limiterPool(sluice, test);

test('decisions land on the master the Sentinel names; a name it does not know is no_master', async () => {
  const master = await Redis.start();
  const sentinel = await startSentinel(master.port);
  try {
    const pol = sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'sen' });
    const l = limiter({ sentinel: { master: 'mymaster', addrs: ['127.0.0.1:1', sentinel.addr] }, keyPrefix: 'sen:' });
    await storeReady(l, pol);
    const got = [];
    for (let i = 0; i < 3; i++) got.push((await l.take('k', pol)).allowed);
    assert.deepEqual(got, [true, true, false]);
    assert.equal(master.cli('--scan', '--pattern', 'sen:*').trim().split('\n').length, 1);

    const unknown = limiter({ sentinel: { master: 'nosuch', addrs: [sentinel.addr] }, timeoutMs: 200 });
    const e = await failsWith(unknown, pol, /no_master/);
    assert.match(e.message, /nosuch: no_master/);
    assert.equal(unknown.healthy(), false);
  } finally {
    await sentinel.stop();
    await master.stop();
  }
});

test('over TLS: a tls block reaches the master and, by default, the Sentinels over TLS', async () => {
  const certs = makeCerts();
  const master = await startTlsRedis(certs);
  const sentinel = await startSentinel(master.tlsPort, { certs });
  try {
    const pol = sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'sentls' });
    const l = limiter({ url: 'rediss://mymaster', tls: { caFile: certs.path('ca.crt') },
      sentinel: { master: 'mymaster', addrs: [sentinel.addr] } });
    await storeReady(l, pol);
    const got = [];
    for (let i = 0; i < 3; i++) got.push((await l.take('k', pol)).allowed);
    assert.deepEqual(got, [true, true, false]);
    // sentinel.tls: false speaks plain to a TLS-only Sentinel: no master.
    const plain = limiter({ tls: { caFile: certs.path('ca.crt') }, timeoutMs: 200,
      sentinel: { master: 'mymaster', addrs: [sentinel.addr], tls: false } });
    await failsWith(plain, pol, /mymaster: no_master/);
  } finally {
    await sentinel.stop();
    await master.stop();
  }
});

test('key management through Sentinel: get, penalize, block, refund and reset on the master', async () => {
  const master = await Redis.start();
  const sentinel = await startSentinel(master.port);
  try {
    const pol = sluice.policy([{ capacity: 3, rate: '1/h' }], { name: 'senkm' });
    const l = limiter({ sentinel: { master: 'mymaster', addrs: [sentinel.addr] } });
    await storeReady(l, pol);
    assert.deepEqual(await l.get('u', pol).then((d) => [d.allowed, d.remaining]), [true, 2]);
    await l.penalize('u', pol, 4);
    const d = await l.get('u', pol);
    assert.equal(d.allowed, false);
    assert.ok(d.retryAfterMs > 2 * 3600000 - 10000 && d.retryAfterMs <= 2 * 3600000, `a debt of one: ${d.retryAfterMs}`);
    assert.equal(master.cli('--scan', '--pattern', 'sluice:*senkm*').trim().split('\n').filter(Boolean).length, 1, 'the state is on the master');
    await l.refund('u', pol, 3);
    assert.deepEqual(await l.get('u', pol).then((x) => [x.allowed, x.remaining]), [true, 1]);
    await l.block('u', pol, 30000);
    assert.equal((await l.take('u', pol)).allowed, false);
    await l.reset('u', pol);
    assert.equal(master.cli('--scan', '--pattern', 'sluice:*senkm*').trim(), '', 'reset: no key left');
    assert.equal((await l.take('u', pol)).remaining, 2);
  } finally {
    await sentinel.stop();
    await master.stop();
  }
});
