// What users of express-rate-limit and rate-limiter-flexible reach for:
// blockDuration, resetKey/getKey on the middleware, their method names
// answered with sluice's, and options given as strings or with a burst
// named as such.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const http = require('node:http');
const express = require('express');
const sluice = require('..');

function listen(handler) {
  return new Promise((resolve) => {
    const server = http.createServer(handler);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

function get(port) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/' }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    }).on('error', reject);
  });
}

test('blockDuration: a key that hits the limit is blocked for that long, though its bucket refills sooner', async () => {
  let now = 1.7e15; // the limiter's clock, in microseconds: moved by the test
  const limiter = new sluice.Limiter({ clock: () => now });
  const policy = sluice.policy([{ capacity: 1, rate: '1/s' }], { name: 'blk' });
  const app = express();
  app.get('/', sluice.express({ limiter, policy, blockDuration: 60000 }), (req, res) => res.send('ok'));
  const server = await listen(app);
  const { port } = server.address();
  try {
    assert.deepEqual([await get(port), await get(port)], [200, 429]);
    now += 2e6; // the bucket alone would be full again
    const d = await limiter.get('127.0.0.1', policy);
    assert.equal(d.allowed, false, 'blocked');
    assert.equal(d.retryAfterMs, 58000);
    assert.equal(await get(port), 429, 'still blocked after the refill; knocking blocks again, from now');
    now += 58e6;
    assert.equal((await limiter.get('127.0.0.1', policy)).retryAfterMs, 2000, 'the block of the last refusal');
    now += 2e6;
    assert.equal(await get(port), 200, 'the block ends');
    assert.throws(() => sluice.express({ limiter, policy, blockDuration: 0 }), RangeError);
    assert.throws(() => sluice.express({ limiter, policy, blockDuration: '1m' }), TypeError);
  } finally {
    server.close();
    await limiter.close();
  }
});

test('the middleware\'s resetKey and getKey reach its policy\'s buckets; with a policy function they need one named', async () => {
  const limiter = new sluice.Limiter();
  const policy = sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'rk' });
  const mw = sluice.express({ limiter, policy });
  await limiter.take('alice', policy);
  await limiter.take('alice', policy);
  assert.equal((await mw.getKey('alice')).allowed, false);
  await mw.resetKey('alice');
  assert.deepEqual([(await mw.getKey('alice')).remaining, (await limiter.get('alice', policy)).remaining], [1, 1]);
  const tiered = sluice.express({ limiter, policy: () => policy });
  assert.throws(() => tiered.resetKey('alice'), { name: 'TypeError', message: /name one/ });
  assert.equal((await tiered.getKey('alice', policy)).remaining, 1);
  await limiter.close();
});

test('rate-limiter-flexible\'s method names say sluice\'s', () => {
  const limiter = new sluice.Limiter();
  for (const [name, ours] of [['consume', /take\(key, policy, \{ cost \}\)/], ['delete', /reset\(/], ['penalty', /penalize\(/], ['reward', /refund\(/]])
    assert.throws(() => limiter[name]('k', 1), { name: 'TypeError', message: ours }, name);
  limiter.close();
});

test('numbers given as strings are TypeErrors naming the string; a burst is named as the capacity', () => {
  assert.throws(() => new sluice.Limiter({ maxKeys: '1e6' }), { name: 'TypeError', message: 'maxKeys must be a number, got string "1e6"' });
  assert.throws(() => new sluice.Limiter({ store: { redis: { timeoutMs: '50' } } }), { name: 'TypeError', message: 'redis.timeoutMs must be a number, got string "50"' });
  assert.throws(() => sluice.policy({ capacity: 10, rate: '1/s', burst: 5 }), { name: 'TypeError', message: /"burst".*capacity/ });
  assert.throws(() => sluice.policy([{ capacity: 10, rate: '1/s', capcity: 5 }]), { name: 'TypeError', message: /did you mean "capacity"/ });
});

test('Fastify per-route config.rateLimit: false leaves a route unlimited, an object overrides the plugin\'s options; a bad one stops the app', async () => {
  const Fastify = require('fastify');
  const limiter = new sluice.Limiter();
  const app = Fastify();
  await app.register(sluice.fastify, { limiter, policy: sluice.policy([{ capacity: 1, rate: '1/h' }], { name: 'fglobal' }) });
  app.get('/', async () => 'global');
  app.get('/free', { config: { rateLimit: false } }, async () => 'free');
  app.get('/login', { config: { rateLimit: { policy: sluice.policy([{ capacity: 3, rate: '1/h' }], { name: 'flogin' }), statusCode: 503 } } }, async (request) => request.rateLimit.policy);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address();
  const many = async (url, n) => {
    const out = [];
    for (let i = 0; i < n; i++) {
      out.push(await new Promise((resolve, reject) => {
        http.get({ host: '127.0.0.1', port, path: url }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); }).on('error', reject);
      }));
    }
    return out;
  };
  try {
    assert.deepEqual(await many('/', 2), [200, 429]);
    assert.deepEqual(await many('/free', 3), [200, 200, 200], 'rateLimit: false');
    assert.deepEqual(await many('/login', 4), [200, 200, 200, 503], 'its own policy and status');
    assert.equal((await limiter.get('127.0.0.1', sluice.policy([{ capacity: 3, rate: '1/h' }], { name: 'flogin' }))).remaining, 0);
    assert.deepEqual(await many('/nowhere', 1), [429], 'a 404 is limited by the plugin\'s options');
  } finally {
    await app.close();
  }
  const bad = Fastify();
  await bad.register(sluice.fastify, { limiter, policy: sluice.policy([{ capacity: 1, rate: '1/h' }]) });
  assert.throws(() => bad.get('/x', { config: { rateLimit: { max: 5 } } }, async () => 'x'), { name: 'TypeError', message: /GET \/x: config\.rateLimit.*"max"/ });
  await bad.close();
  await limiter.close();
});

test('stacked limiters: one RateLimit-Policy syntax (the deciding limiter\'s), and no other limiter\'s numbers beside its own', async () => {
  const limiter = new sluice.Limiter({ clock: () => 1.7e15 }); // time stands still: no refill between requests
  const app = express();
  app.use(sluice.express({ limiter, policy: sluice.policy([{ capacity: 100, rate: '2/s' }], { name: 'api' }) }));
  app.get('/tight', sluice.express({ limiter, policy: sluice.policy([{ capacity: 1, rate: '1/h' }], { name: 'tight' }), headers: { standard: 'draft-7', legacy: false } }), (req, res) => res.send('t'));
  app.get('/loose', sluice.express({ limiter, policy: sluice.policy([{ capacity: 500, rate: '10/s' }], { name: 'loose' }), headers: { standard: 'draft-6', legacy: false } }), (req, res) => res.send('l'));
  const server = await listen(app);
  const { port } = server.address();
  const head = (url) => new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: url }, (res) => { res.resume(); res.on('end', () => resolve(res)); }).on('error', reject);
  });
  try {
    await head('/tight');
    const r = await head('/tight');
    assert.equal(r.statusCode, 429);
    assert.equal(r.headers['ratelimit-policy'], '1;w=3600, 100;w=50', 'the deciding limiter\'s (draft-7) syntax for every policy');
    assert.equal(r.headers.ratelimit, 'limit=1, remaining=0, reset=3600');
    assert.equal(r.headers['x-ratelimit-remaining'], undefined, 'no other limiter\'s remaining beside RateLimit');
    const l = await head('/loose');
    assert.equal(l.statusCode, 200);
    assert.equal(l.headers['ratelimit-policy'], '"api";q=100;w=50, "loose";q=500;w=50', 'api decides (fewer left): its syntax');
    assert.equal(l.headers.ratelimit, '"api";r=97;t=2');
    assert.equal(l.headers['x-ratelimit-remaining'], '97');
    assert.equal(l.headers['ratelimit-remaining'], undefined);
  } finally {
    server.close();
    await limiter.close();
  }
});
