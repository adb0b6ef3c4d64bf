// The Express middleware with real express from npm: headers, 429s,
// tiers, routers, bad input, and a Redis that dies under load.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const http = require('node:http');
const express = require('express');
const sluice = require('..');
const { Redis, request, sleep, storeReady } = require('./helpers');

function listen(app) {
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server));
  });
}

// These tests key on a header the test client sets (an app would key on
// what its authentication established); the default key is the client
// address (middleware.test.js).
const byUser = (req) => req.get('x-user-id') || req.ip;

const RATE_HEADERS = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'ratelimit-policy', 'ratelimit'];

test('headers on every decided answer; a 429 with Retry-After and the body', async () => {
  const limiter = new sluice.Limiter({ store: 'memory' });
  const policy = sluice.policy([{ capacity: 3, rate: '1/min' }, { capacity: 100, rate: '100/day' }], { name: 'api' });
  const app = express();
  app.use(sluice.express({ limiter, policy, key: byUser }));
  app.get('/', (req, res) => res.json({ ok: true }));
  const server = await listen(app);
  const { port } = server.address();
  try {
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await request(port, '/', { 'x-user-id': 'dave' }));
    assert.deepEqual(answers.map((a) => a.status), [200, 200, 200, 429]);
    const first = answers[0].headers;
    assert.equal(first['x-ratelimit-limit'], '3');
    assert.equal(first['x-ratelimit-remaining'], '2');
    assert.equal(first['x-ratelimit-reset'], '60', 'one token is back in a minute');
    assert.equal(first['ratelimit-policy'], '"api";q=3;w=180, "api.2";q=100;w=86400',
      'every limit of the policy, the deciding one first');
    assert.equal(first.ratelimit, '"api";r=2;t=60');
    assert.equal(first['retry-after'], undefined);
    const limited = answers[3];
    const retry = Number(limited.headers['retry-after']);
    assert.ok(retry >= 59 && retry <= 60, `Retry-After ${retry}`);
    const body = JSON.parse(limited.body);
    assert.equal(body.error, 'rate_limited');
    assert.equal(body.policy, 'api');
    assert.ok(body.retry_after_ms > 50000 && body.retry_after_ms <= 60000);
    assert.equal(Math.ceil(body.retry_after_ms / 1000), retry, 'Retry-After is the retry time in whole seconds');
    for (const h of RATE_HEADERS) assert.ok(limited.headers[h] !== undefined, h);
    // Another user has a bucket of their own; no x-user-id: the client IP.
    assert.equal((await request(port, '/', { 'x-user-id': 'erin' })).status, 200);
    assert.equal((await request(port, '/')).headers['x-ratelimit-remaining'], '2');
  } finally {
    server.close();
    await limiter.close();
  }
});

test('a cost above the capacity waits a whole window, never Retry-After: 0', async () => {
  const limiter = new sluice.Limiter();
  const policy = sluice.policy([{ capacity: 5, rate: '5/min' }], { name: 'big' });
  const app = express();
  app.use(sluice.express({ limiter, policy, cost: () => 9 }));
  app.get('/', (req, res) => res.send('x'));
  const server = await listen(app);
  try {
    const r = await request(server.address().port, '/');
    assert.equal(r.status, 429);
    assert.equal(r.headers['retry-after'], '60');
    assert.equal(JSON.parse(r.body).retry_after_ms, 60000);
  } finally {
    server.close();
  }
});

test('tiers: a function picks the policy; a router and a single route each get their own', async () => {
  const limiter = new sluice.Limiter();
  const free = sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'free' });
  const paid = sluice.policy([{ capacity: 5, rate: '1/h' }], { name: 'paid' });
  const upload = sluice.policy([{ capacity: 1, rate: '1/h' }], { name: 'upload' });
  const app = express();
  const api = express.Router();
  api.use(sluice.express({ limiter, key: byUser, policy: (req) => (req.get('x-plan') === 'paid' ? paid : free) }));
  api.get('/items', (req, res) => res.json([]));
  app.use('/api', api);
  app.post('/upload', sluice.express({ limiter, policy: upload, key: byUser, cost: () => 1 }), (req, res) => res.status(201).end());
  app.get('/open', (req, res) => res.send('unlimited'));
  const server = await listen(app);
  const { port } = server.address();
  const post = (p, h) => new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: p, method: 'POST', headers: h }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    req.end();
  });
  try {
    const statuses = async (n, h) => {
      const out = [];
      for (let i = 0; i < n; i++) out.push((await request(port, '/api/items', h)).status);
      return out;
    };
    assert.deepEqual(await statuses(3, { 'x-user-id': 'f' }), [200, 200, 429]);
    assert.deepEqual(await statuses(6, { 'x-user-id': 'p', 'x-plan': 'paid' }), [200, 200, 200, 200, 200, 429]);
    assert.equal((await request(port, '/api/items', { 'x-user-id': 'p', 'x-plan': 'paid' })).headers['ratelimit-policy'], '"paid";q=5;w=18000');
    assert.deepEqual([await post('/upload', { 'x-user-id': 'u' }), await post('/upload', { 'x-user-id': 'u' })], [201, 429]);
    const open = await request(port, '/open', { 'x-user-id': 'f' });
    assert.equal(open.status, 200);
    assert.equal(open.headers['x-ratelimit-limit'], undefined, 'routes without the middleware are not limited');
  } finally {
    server.close();
  }
});

test('bad input: options throw at once; a bad key or cost from the app is a 500, never a free pass', async () => {
  const limiter = new sluice.Limiter();
  const policy = sluice.policy([{ capacity: 1, rate: '1/h' }]);
  assert.throws(() => sluice.express({ policy }), TypeError);
  assert.throws(() => sluice.express({ limiter, policy: {} }), TypeError);
  assert.throws(() => sluice.express({ limiter, policy, onStoreError: 'maybe' }), RangeError);
  assert.throws(() => sluice.express({ limiter, policy, key: 'x-user-id' }), TypeError);
  assert.throws(() => sluice.policy([{ capacity: 0, rate: '2/s' }]), RangeError);
  assert.throws(() => sluice.policy([{ capacity: 1.5, rate: '2/s' }]), RangeError);
  assert.throws(() => sluice.policy([{ capacity: 5, rate: '2/fortnight' }]), { name: 'RangeError', message: /fortnight/ });
  assert.throws(() => sluice.policy([{ capacity: 5, rate: {} }]), TypeError);
  // A rate too long for the parser is refused whole, never cut into another rate.
  assert.throws(() => sluice.policy([{ capacity: 5, rate: `1/${'0'.repeat(130)}1s` }]), { name: 'RangeError', message: /too long/ });
  assert.throws(() => sluice.policy([]), TypeError);
  assert.throws(() => sluice.policy([{ capacity: 5, rate: '1/s' }], { name: 'bad name' }), RangeError);
  assert.throws(() => limiter.take(42, policy), TypeError);
  assert.throws(() => limiter.take(null, policy), TypeError);
  assert.throws(() => limiter.take('k', {}), TypeError);
  assert.throws(() => limiter.take('k', policy, { cost: -1 }), RangeError);
  assert.throws(() => limiter.take('k', policy, { cost: 0.5 }), RangeError);
  assert.throws(() => limiter.take('k', policy, { cost: 2 ** 60 }), RangeError);
  assert.throws(() => new sluice.Limiter({ store: 'postgres' }), TypeError);
  assert.throws(() => new sluice.Limiter({ maxKeys: 0 }), RangeError);

  const app = express();
  app.get('/nokey', sluice.express({ limiter, policy, key: () => undefined }), (req, res) => res.send('passed'));
  app.get('/badcost', sluice.express({ limiter, policy, cost: () => -3 }), (req, res) => res.send('passed'));
  app.get('/throws', sluice.express({ limiter, policy, key: () => { throw new Error('boom'); } }), (req, res) => res.send('passed'));
  app.use((err, req, res, next) => res.status(500).send(err.name));
  const server = await listen(app);
  const { port } = server.address();
  try {
    for (const p of ['/nokey', '/badcost', '/throws']) {
      const r = await request(port, p);
      assert.equal(r.status, 500, p);
      assert.notEqual(r.body, 'passed', p);
    }
  } finally {
    server.close();
  }
});

// Requests at a steady pace while Redis is killed and restarted: each is
// answered within the timeout plus a margin (generous: a busy machine),
// with the configured fail mode: 'local' (the default) decides with the
// process's own limiter, headers and all, and says so once when it starts
// and once when it ends; 'open' and 'closed' send no rate-limit headers.
// The timeout is long enough that every request while Redis is up is
// decided on a machine oversubscribed several times over (a 250 ms one
// could be missed there, failing open or closed); the outage is longer
// than the timeout plus the margin, so a request that waited for Redis to
// come back is still the slowest by far.
const OUTAGE_MS = 3500;
for (const mode of ['local', 'open', 'closed']) {
  test(`Redis killed mid-load, onStoreError '${mode}'`, async () => {
    const redis = await Redis.start();
    const timeoutMs = 1000;
    const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs } } });
    const policy = sluice.policy([{ capacity: 1000, rate: '100/s' }], { name: 'live' });
    await storeReady(limiter, policy);
    const told = []; // the local fallback's changes, in order
    limiter.on('error', (e) => { if (e.code === 'ERR_SLUICE_LOCAL') told.push('local'); });
    limiter.on('recover', (info) => { if (info.reason === 'local') told.push('shared'); });
    const app = express();
    app.use(sluice.express({ limiter, policy, key: byUser, ...(mode === 'local' ? {} : { onStoreError: mode }) }));
    app.get('/', (req, res) => res.send('served'));
    const server = await listen(app);
    const { port } = server.address();
    const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
    const results = [];
    let phase = 'up';
    const load = (async () => {
      const end = Date.now() + 60000; // bounded however the phases go
      while (phase !== 'done' && Date.now() < end) {
        const batch = [];
        // A request belongs to a phase when it was sent and answered in
        // it: one sent once Redis is dead cannot have been decided by it,
        // one answered before the kill was.
        const sent = phase;
        for (let i = 0; i < 8; i++)
          batch.push(request(port, '/', { 'x-user-id': `u${i}` }, agent)
            .then((r) => results.push({ phase: sent === phase ? sent : 'between', ...r })));
        await Promise.all(batch);
        await sleep(10);
      }
    })();
    try {
      await sleep(500);
      phase = 'killing';
      await redis.kill();
      phase = 'down';
      await sleep(OUTAGE_MS);
      phase = 'restarting';
      await redis.start();
      phase = 'back';
      const t0 = Date.now();
      // Until Redis decides again: with 'local' the fallback sends the
      // same headers, so its end is the 'recover' it announces.
      const decidedByRedis = () => mode !== 'local' || told[told.length - 1] === 'shared';
      while (Date.now() - t0 < 20000) {
        const lastBack = results.filter((r) => r.phase === 'back').slice(-8);
        if (lastBack.length === 8 && lastBack.every((r) => r.headers['x-ratelimit-limit'] === '1000') &&
            decidedByRedis()) break;
        await sleep(100);
      }
      phase = 'done';
      await load;
    } finally {
      phase = 'done';
      agent.destroy();
      server.close();
      await limiter.close();
      await redis.stop();
    }
    const slowest = Math.max(...results.map((r) => r.ms));
    assert.ok(slowest < timeoutMs + 2000, `every answer within the timeout plus a margin: slowest ${slowest} ms`);
    assert.ok(timeoutMs + 2000 < OUTAGE_MS, 'a request held through the outage would fail the bound above');
    const up = results.filter((r) => r.phase === 'up');
    assert.ok(up.length > 0 && up.every((r) => r.status === 200 && r.headers['x-ratelimit-limit'] === '1000'));
    const down = results.filter((r) => r.phase === 'down');
    assert.ok(down.length > 0, 'requests were made while Redis was down');
    for (const r of down) {
      assert.equal(r.status, mode === 'closed' ? 503 : 200, JSON.stringify(r.body));
      if (mode === 'local') {
        assert.equal(r.headers['x-ratelimit-limit'], '1000', 'decided by the local limiter, headers sent');
        assert.equal(r.body, 'served');
        continue;
      }
      for (const h of RATE_HEADERS) assert.equal(r.headers[h], undefined, `no ${h} when the store failed`);
      if (mode === 'open') assert.equal(r.body, 'served');
      else assert.equal(JSON.parse(r.body).error, 'store_unavailable');
    }
    if (mode === 'local') {
      // Told once per change: local, shared, local, ... ending shared.
      assert.ok(told.length >= 2, `the fallback told: ${told}`);
      told.forEach((t, i) => assert.equal(t, i % 2 === 0 ? 'local' : 'shared', `told in turn: ${told}`));
      assert.equal(told[told.length - 1], 'shared', `the end of the fallback told: ${told}`);
    } else {
      assert.deepEqual(told, [], 'the fallback is never used');
    }
    const back = results.filter((r) => r.phase === 'back').slice(-8);
    assert.ok(back.length === 8 && back.every((r) => r.status === 200 && r.headers['x-ratelimit-limit'] === '1000'),
      'decisions resume once Redis is back');
  });
}
