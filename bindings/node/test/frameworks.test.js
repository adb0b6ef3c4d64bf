// The same middleware on Express 5, a Router and a single route, Connect,
// plain node:http, and the Fastify plugin -- real frameworks from npm.
'use strict';
const { test, listen, request: get } = require('./helpers');
const assert = require('node:assert/strict');
const express5 = require('express5');
const connect = require('connect');
const Fastify = require('fastify');
const sluice = require('..');
const { waitFor, hangUpRoute } = require('./helpers');


const statuses = async (port, n, path, headers) => {
  const out = [];
  for (let i = 0; i < n; i++) out.push((await get(port, path, headers)).status);
  return out;
};

test('Express 5: app.use, a Router, a single route; async errors from the key go to the error handler', async () => {
  assert.match(require('express5/package.json').version, /^5\./);
  const limiter = new sluice.Limiter();
  const app = express5();
  const api = express5.Router();
  api.use(sluice.express({ limiter, policy: sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'api5' }) }));
  api.get('/items', (req, res) => res.json(req.rateLimit));
  app.use('/api', api);
  app.get('/one', sluice.express({ limiter, policy: sluice.policy([{ capacity: 1, rate: '1/h' }], { name: 'one5' }) }), (req, res) => res.send('one'));
  app.get('/auth', sluice.express({ limiter, policy: sluice.policy([{ capacity: 1, rate: '1/h' }], { name: 'auth5' }), key: async (req) => req.user.id }), (req, res) => res.send('x'));
  app.get('/open', (req, res) => res.send('open'));
  app.use((err, req, res, next) => res.status(500).send('error'));
  const server = await listen(app);
  const { port } = server.address();
  try {
    assert.deepEqual(await statuses(port, 3, '/api/items'), [200, 200, 429]);
    const r = await get(port, '/api/items');
    assert.equal(r.headers['ratelimit-policy'], '"api5";q=2;w=7200');
    assert.deepEqual(await statuses(port, 2, '/one'), [200, 429]);
    assert.equal((await get(port, '/open')).headers['ratelimit-policy'], undefined);
    assert.equal((await get(port, '/auth')).status, 500);
  } finally {
    server.close();
    await limiter.close();
  }
});

test('Connect: the middleware as it is', async () => {
  const limiter = new sluice.Limiter();
  const app = connect();
  app.use(sluice.express({ limiter, policy: sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'connect' }), skipFailedRequests: true }));
  app.use((req, res) => {
    res.statusCode = req.url === '/fail' ? 500 : 200;
    res.end('connect');
  });
  const server = await listen(app);
  const { port } = server.address();
  try {
    for (let i = 0; i < 3; i++) {
      assert.equal((await get(port, '/fail')).status, 500);
      await waitFor(async () => (await limiter.get('127.0.0.1', sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'connect' }))).remaining === 1, 'refund');
    }
    assert.deepEqual(await statuses(port, 3, '/'), [200, 200, 429]);
  } finally {
    server.close();
    await limiter.close();
  }
});

test('plain node:http: called with our own next; the socket address is the key', async () => {
  const limiter = new sluice.Limiter();
  const limit = sluice.express({ limiter, policy: sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'plain' }), headers: 'draft-7' });
  const server = await listen((req, res) => limit(req, res, (err) => {
    if (err) {
      res.statusCode = 500;
      res.end(String(err.message));
      return;
    }
    res.end(JSON.stringify(req.rateLimit));
  }));
  const { port } = server.address();
  try {
    const r = await get(port, '/', { 'x-forwarded-for': '10.9.9.9', 'x-user-id': 'someone' });
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(r.body).key, '127.0.0.1');
    assert.equal(r.headers.ratelimit, 'limit=2, remaining=1, reset=3600');
    assert.deepEqual(await statuses(port, 2, '/', { 'x-user-id': 'another' }), [200, 429]);
    await limiter.close();
    assert.equal((await get(port, '/')).status, 503, 'closed: 503');
  } finally {
    server.close();
  }
});

async function fastifyApp(opts, setup) {
  const app = Fastify();
  if (setup) setup(app);
  await app.register(sluice.fastify, opts);
  app.get('/', async (request) => ({ rateLimit: request.rateLimit }));
  app.get('/fail', async (request, reply) => reply.code(500).send({ failed: true }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { app, port: app.server.address().port };
}

test('Fastify: the plugin limits every route with the same options and headers', async () => {
  const limiter = new sluice.Limiter();
  const policy = sluice.policy([{ capacity: 3, rate: '1/min' }], { name: 'fy' });
  const { app, port } = await fastifyApp({ limiter, policy });
  try {
    const r = await get(port, '/', { 'x-user-id': 'random' });
    assert.equal(r.status, 200);
    assert.equal(r.headers['ratelimit-policy'], '"fy";q=3;w=180');
    assert.equal(r.headers.ratelimit, '"fy";r=2;t=60');
    assert.equal(r.headers['x-ratelimit-limit'], '3');
    assert.deepEqual(JSON.parse(r.body).rateLimit, { allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetMs: 60000, policy: 'fy', key: '127.0.0.1', cost: 1 });
    assert.deepEqual(await statuses(port, 3, '/', { 'x-user-id': 'other' }), [200, 200, 429]);
    const limited = await get(port, '/');
    assert.equal(limited.status, 429);
    assert.equal(JSON.parse(limited.body).error, 'rate_limited');
    assert.ok(Number(limited.headers['retry-after']) >= 1);
    await limiter.close();
    const closed = await get(port, '/');
    assert.equal(closed.status, 503);
    assert.equal(JSON.parse(closed.body).error, 'limiter_closed');
  } finally {
    await app.close();
  }
});

test('Fastify: trustProxy and the IPv6 /64, skipFailedRequests, handler, message, skip', async () => {
  const limiter = new sluice.Limiter();
  const p = (name, capacity = 2) => sluice.policy([{ capacity, rate: '1/h' }], { name });
  const a = await fastifyApp({ limiter, policy: p('fa') }, null);
  const b = Fastify({ trustProxy: '127.0.0.1' });
  await b.register(sluice.fastify, { limiter, policy: p('fb'), skipFailedRequests: true, message: 'slow down', skip: (req) => req.url === '/free' });
  b.get('/', async (request) => request.rateLimit.key);
  b.get('/free', async () => 'free');
  b.get('/fail', async (request, reply) => reply.code(500).send('failed'));
  await b.listen({ port: 0, host: '127.0.0.1' });
  const bp = b.server.address().port;
  const seen = [];
  const c = Fastify();
  await c.register(sluice.fastify, { limiter, policy: p('fc', 1), handler: (request, reply, next, info) => { seen.push(info.policy); reply.code(418).send('teapot'); } });
  c.get('/', async () => 'ok');
  await c.listen({ port: 0, host: '127.0.0.1' });
  const cp = c.server.address().port;
  try {
    assert.equal((await get(a.port)).status, 200);
    const xff = (ip) => ({ 'x-forwarded-for': ip });
    assert.equal((await get(bp, '/', xff('2001:db8:5:6::1'))).body, '2001:db8:5:6::/64');
    assert.equal((await get(bp, '/', xff('2001:db8:5:6::2'))).status, 200);
    const third = await get(bp, '/', xff('2001:db8:5:6::3'));
    assert.deepEqual([third.status, third.body], [429, 'slow down'], 'one /64, one bucket');
    assert.equal((await get(bp, '/', xff('2001:db8:5:7::1'))).status, 200, 'another /64');
    assert.deepEqual(await statuses(bp, 3, '/free', xff('2001:db8:5:6::1')), [200, 200, 200], 'skipped');
    for (let i = 0; i < 3; i++) {
      assert.equal((await get(bp, '/fail', xff('2001:db8:9::1'))).status, 500);
      await waitFor(async () => (await limiter.get('2001:db8:9:0::/64', p('fb'))).remaining === 1, 'the refund of a 500');
    }
    assert.deepEqual(await statuses(cp, 2, '/'), [200, 418]);
    assert.deepEqual(seen, ['fc']);
  } finally {
    await Promise.all([a.app.close(), b.close(), c.close()]);
    await limiter.close();
  }
});

test('Fastify: a client that hangs up before the answer gets no refund, whatever skip* says', async () => {
  const { n, route, hangUp } = hangUpRoute(); // the route never answers
  const apps = [];
  for (const skip of ['skipFailedRequests', 'skipSuccessfulRequests']) {
    const app = Fastify();
    const limiter = new sluice.Limiter();
    const policy = sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'hang' });
    await app.register(sluice.fastify, { limiter, policy, [skip]: true });
    app.get('/', (request, reply) => route(request.raw, reply.raw));
    await app.listen({ port: 0, host: '127.0.0.1' });
    apps.push({ app, limiter, policy, port: app.server.address().port });
  }
  try {
    for (const [i, a] of apps.entries()) {
      const got = [];
      for (let k = 0; k < 4; k++) got.push(await hangUp(a.port));
      assert.deepEqual(got, ['hung up', 'hung up', 429, 429], `app ${i}`);
      assert.equal((await a.limiter.get('127.0.0.1', a.policy)).remaining, 0);
    }
    assert.equal(n.ran, 4);
  } finally {
    for (const a of apps) {
      await a.app.close();
      await a.limiter.close();
    }
  }
});

test('Fastify: bad options fail the registration with the option named', async () => {
  const limiter = new sluice.Limiter();
  const app = Fastify();
  app.register(sluice.fastify, { limiter, policy: sluice.policy([{ capacity: 1, rate: '1/h' }]), timeWindow: 60000 });
  await assert.rejects(app.ready(), { name: 'TypeError', message: /"timeWindow".*policy/ });
  const app2 = Fastify();
  app2.register(sluice.fastify, { limiter, policy: sluice.policy([{ capacity: 1, rate: '1/h' }]), allowList: ['127.0.0.1'] });
  await assert.rejects(app2.ready(), { name: 'TypeError', message: /"allowList".*skip/ });
  await limiter.close();
});
