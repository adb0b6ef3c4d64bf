// Ways past a limit, tried as a hostile client (or a hostile dependency)
// would, on every front end of the package: Express, node:http, the
// Fastify plugin and take().
//  - a refund gives back only what the request was charged;
//  - the default key is the client's address however it is spelled
//    (ports, brackets, zones, IPv4-mapped IPv6): the table sluice serve's
//    own unit test reads (tests/unit/client_addresses.tsv);
//  - options and requests are read from their own properties, never from
//    a polluted Object.prototype;
//  - a shared store's path is absolute, as serve requires.
'use strict';
const { test, freePort, ROOT, listen, request: get } = require('./helpers');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const express = require('express');
const Fastify = require('fastify');
const sluice = require('..');


const statuses = async (port, n, urlPath, headers) => {
  const out = [];
  for (let i = 0; i < n; i++) out.push((await get(port, urlPath, headers)).status);
  return out;
};

const pol = (capacity, name) => sluice.policy([{ capacity, rate: '2/h' }], { name });

// A limiter whose refunds are counted (and still made).
function countRefunds(limiter) {
  const refunds = [];
  const real = limiter.refund.bind(limiter);
  limiter.refund = (key, p, n) => {
    refunds.push({ key, policy: p.name, n });
    return real(key, p, n);
  };
  return refunds;
}

// ------------------------------------------------------------- refunds

test('Fastify skipFailedRequests: limited requests a handler passes on are not refunded (a 2/hour bucket stays drained)', async () => {
  const limiter = new sluice.Limiter();
  const refunds = countRefunds(limiter);
  const policy = pol(2, 'fsoft');
  const app = Fastify();
  let answered = 0;
  // Passes limited /soft requests on (to a 404); refuses the others.
  const handler = (request, reply, next) => (request.url.startsWith('/soft') ? next() : reply.code(429).send('no'));
  await app.register(sluice.fastify, { limiter, policy, skipFailedRequests: true, handler });
  app.addHook('onResponse', (request, reply, next) => { answered++; next(); }); // after the plugin's
  app.get('/hard', async () => 'hard');
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address();
  try {
    assert.deepEqual(await statuses(port, 2, '/hard'), [200, 200]);
    assert.deepEqual(await statuses(port, 3, '/soft'), [404, 404, 404], 'limited, passed on, failed');
    while (answered < 5) await new Promise((r) => setImmediate(r));
    assert.deepEqual(refunds, [], 'nothing was charged, nothing is given back');
    assert.equal((await get(port, '/hard')).status, 429, 'the drained bucket stays drained');
    assert.equal((await limiter.get('127.0.0.1', policy)).remaining, 0);
  } finally {
    await app.close();
    await limiter.close();
  }
});

test('skipFailedRequests: a request passed uncharged by onStoreError is not refunded (Fastify, Express)', async () => {
  const port0 = await freePort(); // nothing listens there: every take fails
  const limiter = new sluice.Limiter({ store: { redis: { url: `redis://127.0.0.1:${port0}`, timeoutMs: 200 } } });
  const refunds = countRefunds(limiter);
  const policy = pol(2, 'fopen');
  const fy = Fastify();
  let answered = 0;
  await fy.register(sluice.fastify, { limiter, policy, skipFailedRequests: true, onStoreError: 'open' });
  fy.addHook('onResponse', (request, reply, next) => { answered++; next(); });
  fy.get('/fail', async (request, reply) => reply.code(500).send('failed'));
  await fy.listen({ port: 0, host: '127.0.0.1' });
  const app = express();
  const passOn = (err, req, res, next) => next();
  app.get('/fail', sluice.express({ limiter, policy, skipFailedRequests: true, onStoreError: 'open' }), (req, res) => res.status(500).end());
  app.get('/fn', sluice.express({ limiter, policy, skipFailedRequests: true, onStoreError: passOn }), (req, res) => res.status(500).end());
  const server = await listen(app);
  try {
    assert.deepEqual(await statuses(fy.server.address().port, 2, '/fail'), [500, 500], 'open: passed');
    assert.deepEqual(await statuses(server.address().port, 2, '/fail'), [500, 500]);
    assert.deepEqual(await statuses(server.address().port, 2, '/fn'), [500, 500]);
    while (answered < 2) await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(refunds, [], 'no refund of a charge that never was');
  } finally {
    server.close();
    await fy.close();
    await limiter.close();
  }
});

test('skipFailedRequests: a charged request that fails is refunded exactly its cost, once (Express, Fastify)', async () => {
  const limiter = new sluice.Limiter();
  const refunds = countRefunds(limiter);
  const policy = pol(9, 'fcost');
  const app = express();
  app.get('/fail', sluice.express({ limiter, policy, cost: 3, skipFailedRequests: true }), (req, res) => res.status(500).end());
  const server = await listen(app);
  const fy = Fastify();
  await fy.register(sluice.fastify, { limiter, policy, cost: 3, skipFailedRequests: true });
  fy.get('/fail', async (request, reply) => reply.code(500).send('failed'));
  await fy.listen({ port: 0, host: '127.0.0.1' });
  try {
    assert.equal((await get(server.address().port, '/fail')).status, 500);
    assert.equal((await get(fy.server.address().port, '/fail')).status, 500);
    const end = Date.now() + 20000;
    while (refunds.length < 2 && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(refunds, [{ key: '127.0.0.1', policy: 'fcost', n: 3 }, { key: '127.0.0.1', policy: 'fcost', n: 3 }]);
  } finally {
    server.close();
    await fy.close();
    await limiter.close();
  }
});

// ---------------------------------------------------------- addresses

const TABLE = path.join(ROOT, 'tests', 'unit', 'client_addresses.tsv');

function tableRows() {
  return fs.readFileSync(TABLE, 'utf8').split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const [address, prefix, key] = l.split('\t');
      return { address, prefix: Number(prefix), key };
    });
}

test('ipKey: every spelling of an address in the table sluice serve is tested against gives serve\'s key', () => {
  const rows = tableRows();
  assert.ok(rows.length >= 20);
  for (const { address, prefix, key } of rows) {
    const subnet = prefix === 128 ? false : prefix;
    if (key === '-') assert.throws(() => sluice.ipKey(address, subnet), TypeError, JSON.stringify(address));
    else assert.equal(sluice.ipKey(address, subnet), key, JSON.stringify(address));
  }
  assert.equal(sluice.ipKey('1.2.3.4:1000'), '1.2.3.4');
  assert.equal(sluice.ipKey('[2001:db8:1:2::1]:443'), '2001:db8:1:2::/64');
  assert.throws(() => sluice.ipKey('1.2.3.4', 129), RangeError);
});

test('behind trust proxy, an X-Forwarded-For address with a new port each time is one bucket (Express, Fastify)', async () => {
  const limiter = new sluice.Limiter();
  const app = express();
  app.set('trust proxy', 'loopback');
  app.get('/', sluice.express({ limiter, policy: pol(1, 'xffport') }), (req, res) => res.send(req.rateLimit.key));
  const server = await listen(app);
  const fy = Fastify({ trustProxy: '127.0.0.1' });
  await fy.register(sluice.fastify, { limiter, policy: pol(1, 'xffportf') });
  fy.get('/', async (request) => request.rateLimit.key);
  await fy.listen({ port: 0, host: '127.0.0.1' });
  try {
    for (const port of [server.address().port, fy.server.address().port]) {
      const got = [];
      for (let i = 0; i < 5; i++) got.push((await get(port, '/', { 'x-forwarded-for': `203.0.113.5:${1000 + i}` })).status);
      assert.deepEqual(got, [200, 429, 429, 429, 429], 'ports are not identities');
      const v6 = [];
      for (let i = 0; i < 3; i++) v6.push(await get(port, '/', { 'x-forwarded-for': `[2001:db8:7:8::${i + 1}]:${443 + i}` }));
      assert.equal(v6[0].body, '2001:db8:7:8::/64');
      assert.deepEqual(v6.map((r) => r.status), [200, 429, 429], 'brackets and ports: one /64');
      // An entry that is no address: the proxy's own address, as serve.
      const junk = await get(port, '/', { 'x-forwarded-for': 'unknown' });
      assert.deepEqual([junk.status, junk.body], [200, '127.0.0.1']);
      assert.equal((await get(port, '/', { 'x-forwarded-for': 'unknown, junk' })).status, 429);
    }
  } finally {
    server.close();
    await fy.close();
    await limiter.close();
  }
});

// ------------------------------------------------------------ pollution

// Runs fn with Object.prototype[name] = value, removed afterwards.
async function polluted(props, fn) {
  for (const [k, v] of Object.entries(props))
    Object.defineProperty(Object.prototype, k, { value: v, configurable: true, writable: true, enumerable: false });
  try {
    return await fn();
  } finally {
    for (const k of Object.keys(props)) delete Object.prototype[k];
  }
}

test('a polluted Object.prototype neither turns limiting off nor picks the key (node:http, Express, take())', async () => {
  const limiter = new sluice.Limiter();
  const out = await polluted({ skip: () => true, ip: '6.6.6.6', cost: 0, headers: false, name: 'evil', key: () => 'evil' }, async () => {
    const limit = sluice.express({ limiter, policy: pol(1, 'proto') });
    const server = await listen((req, res) => limit(req, res, () => res.end(JSON.stringify(req.rateLimit))));
    const app = express();
    app.get('/', sluice.express({ limiter, policy: pol(1, 'protox') }), (req, res) => res.send('x'));
    const xs = await listen(app);
    try {
      const first = await get(server.address().port);
      const plain = [first.status, (await get(server.address().port)).status];
      const ex = await statuses(xs.address().port, 2, '/');
      const p = sluice.policy([{ capacity: 1, rate: '1/h' }]);
      const takes = [(await limiter.take('t', p, {})).allowed, (await limiter.take('t', p, {})).allowed];
      return { key: JSON.parse(first.body).key, plain, ex, takes, name: p.name, header: first.headers['ratelimit-policy'] };
    } finally {
      server.close();
      xs.close();
    }
  });
  try {
    assert.deepEqual(out.plain, [200, 429], 'Object.prototype.skip does not skip');
    assert.deepEqual(out.ex, [200, 429]);
    assert.equal(out.key, '127.0.0.1', 'Object.prototype.ip is not the client');
    assert.deepEqual(out.takes, [true, false], 'Object.prototype.cost does not make takes free');
    assert.equal(out.name, 'default');
    assert.equal(out.header, '"proto";q=1;w=1800', 'Object.prototype.headers does not remove them');
  } finally {
    await limiter.close();
  }
});

test('a polluted Object.prototype does not reach the store options (url, shared path, maxKeys)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-proto-'));
  try {
    await polluted({ store: { shared: { path: path.join(dir, 'evil') } }, url: 'redis://192.0.2.1:1/', maxKeys: 1 }, async () => {
      const l = new sluice.Limiter({});
      assert.equal(l.store, 'memory');
      const p = sluice.policy([{ capacity: 1, rate: '1/h' }], { name: 'mk' });
      for (let i = 0; i < 5; i++) assert.equal((await l.take(`k${i}`, p)).allowed, true);
      assert.equal((await l.take('k0', p)).allowed, false, 'maxKeys 1 was not read: k0 kept its bucket');
      await l.close();
    });
    assert.deepEqual(fs.readdirSync(dir), [], 'no store file made from an inherited path');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// ------------------------------------------------------------- shared path

test('a relative shared-store path is refused as sluice serve refuses it, and nothing is created', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-rel-'));
  const cwd = process.cwd();
  try {
    process.chdir(dir);
    for (const p of ['sluice.shm', './sluice.shm', '../x/sluice.shm'])
      assert.throws(() => new sluice.Limiter({ store: { shared: { path: p } } }),
        { name: 'RangeError', message: `store.shared.path "${p}" is not an absolute path; expected e.g. /dev/shm/sluice` });
    assert.deepEqual(fs.readdirSync(dir), []);
  } finally {
    process.chdir(cwd);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
