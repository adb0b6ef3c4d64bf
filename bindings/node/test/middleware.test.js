// The middleware's options, one by one, with real Express 4 from npm:
// the default key (IPv4, IPv6 grouped by /64, behind `trust proxy`),
// handler / statusCode / message, skip, skipSuccessfulRequests /
// skipFailedRequests, the header sets, stacked limiters, req.rateLimit,
// onStoreError, a closed limiter, and options checked with peers' names.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const http = require('node:http');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const express = require('express');
const sluice = require('..');
const { Redis, freePort, waitFor, hangUpRoute, listen, request } = require('./helpers');

function get(server, path = '/', headers = {}, host = '127.0.0.1') {
  return request(server.address().port, path, headers, undefined, host);
}

// An app with one limited route; extra(app) adds settings before it.
async function serve(mwOpts, { extra, route } = {}) {
  const limiter = mwOpts.limiter || new sluice.Limiter();
  const app = express();
  if (extra) extra(app);
  app.get('/', sluice.express({ limiter, ...mwOpts }), route || ((req, res) => res.json({ rateLimit: req.rateLimit || null })));
  app.use((err, req, res, next) => res.status(500).json({ error: err.message }));
  const server = await listen(app);
  return { server, limiter, close: async () => { server.close(); await limiter.close(); } };
}

const pol = (capacity, name = 'mw', rate = '1/h') => sluice.policy([{ capacity, rate }], { name });
const statuses = async (server, n, headers, path) => {
  const out = [];
  for (let i = 0; i < n; i++) out.push((await get(server, path, headers)).status);
  return out;
};

test('default key: the client address; no header the client writes can mint a bucket', async () => {
  const s = await serve({ policy: pol(3) });
  try {
    // Random user ids from one address get that one address's limit.
    const got = [];
    for (let i = 0; i < 6; i++) got.push((await get(s.server, '/', { 'x-user-id': `u-${Math.random()}`, 'x-forwarded-for': `10.0.0.${i}` })).status);
    assert.deepEqual(got, [200, 200, 200, 429, 429, 429]);
    const r = await get(s.server, '/');
    assert.equal(JSON.parse(r.body).error, 'rate_limited');
  } finally {
    await s.close();
  }
});

test('default key: IPv4 keeps the whole address (req.rateLimit.key)', async () => {
  const s = await serve({ policy: pol(3) });
  try {
    assert.equal(JSON.parse((await get(s.server)).body).rateLimit.key, '127.0.0.1');
  } finally {
    await s.close();
  }
});

test('default key: IPv6 over a real ::1 socket, grouped to its /64', async () => {
  const limiter = new sluice.Limiter();
  const app = express();
  app.get('/', sluice.express({ limiter, policy: pol(2) }), (req, res) => res.json(req.rateLimit));
  const server = await listen(app, '::1');
  try {
    const a = await get(server, '/', {}, '::1');
    assert.equal(a.status, 200);
    assert.equal(JSON.parse(a.body).key, '::/64', 'the key sluice serve gives ::1 (inet_ntop)');
    assert.deepEqual(await Promise.all([get(server, '/', {}, '::1'), get(server, '/', {}, '::1')]).then((x) => x.map((r) => r.status).sort()), [200, 429]);
  } finally {
    server.close();
    await limiter.close();
  }
});

test('default key behind trust proxy: X-Forwarded-For from the proxy; IPv6 grouped by ipv6Subnet', async () => {
  const trust = (app) => app.set('trust proxy', 'loopback');
  const s64 = await serve({ policy: pol(2, 'p64') }, { extra: trust });
  const s128 = await serve({ policy: pol(2, 'p128'), ipv6Subnet: 128 }, { extra: trust });
  const s48 = await serve({ policy: pol(2, 'p48'), ipv6Subnet: 48 }, { extra: trust });
  const untrusted = await serve({ policy: pol(2, 'none') });
  const xff = (ip) => ({ 'x-forwarded-for': ip });
  try {
    // Two addresses of one /64 share a bucket; another /64 has its own.
    assert.deepEqual([
      (await get(s64.server, '/', xff('2001:db8:1:2::a'))).status,
      (await get(s64.server, '/', xff('2001:db8:1:2:ffff:ffff:ffff:ffff'))).status,
      (await get(s64.server, '/', xff('2001:db8:1:2::1234'))).status,
      (await get(s64.server, '/', xff('2001:db8:1:3::a'))).status,
    ], [200, 200, 429, 200]);
    assert.equal(JSON.parse((await get(s64.server, '/', xff('2001:db8:1:4::9'))).body).rateLimit.key, '2001:db8:1:4::/64');
    // ipv6Subnet 128: each address alone; 48: a whole /48 together.
    assert.deepEqual(await Promise.all(['::a', '::b', '::c'].map((x) => get(s128.server, '/', xff(`2001:db8:1:2${x}`)))).then((a) => a.map((r) => r.status)), [200, 200, 200]);
    assert.deepEqual([
      (await get(s48.server, '/', xff('2001:db8:1:2::a'))).status,
      (await get(s48.server, '/', xff('2001:db8:1:77::b'))).status,
      (await get(s48.server, '/', xff('2001:db8:1:99::c'))).status,
    ], [200, 200, 429]);
    // IPv4 through the proxy, and an IPv4-mapped address is its IPv4.
    assert.equal(JSON.parse((await get(s64.server, '/', xff('203.0.113.7'))).body).rateLimit.key, '203.0.113.7');
    assert.equal(JSON.parse((await get(s64.server, '/', xff('::ffff:203.0.113.8'))).body).rateLimit.key, '203.0.113.8');
    // Without trust proxy the header is ignored: the socket decides.
    assert.deepEqual(await statuses(untrusted.server, 3, xff('198.51.100.1')), [200, 200, 429]);
    assert.equal(JSON.parse((await get(untrusted.server, '/', xff('198.51.100.2'))).body).error, 'rate_limited');
  } finally {
    await Promise.all([s64.close(), s128.close(), s48.close(), untrusted.close()]);
  }
});

test('sluice.ipKey groups addresses as the default key does', () => {
  assert.equal(sluice.ipKey('2001:DB8:1:2:3:4:5:6'), '2001:db8:1:2::/64');
  assert.equal(sluice.ipKey('2001:db8:1:2::5%eth0', false), '2001:db8:1:2::5');
  assert.equal(sluice.ipKey('::ffff:192.0.2.1'), '192.0.2.1');
  assert.equal(sluice.ipKey('192.0.2.1'), '192.0.2.1');
  assert.equal(sluice.ipKey('2001:db8:ffff::1', 36), '2001:db8:f000::/36');
  assert.throws(() => sluice.ipKey(undefined), TypeError);
});

test('key: what authentication established; a missing identity is an error, never a free pass', async () => {
  const s = await serve({ policy: pol(1), key: (req) => req.user.id }, {
    extra: (app) => app.use((req, res, next) => {
      if (req.get('authorization') === 'Bearer alice-token') req.user = { id: 'alice' };
      next();
    }),
  });
  try {
    assert.deepEqual(await statuses(s.server, 2, { authorization: 'Bearer alice-token' }), [200, 429]);
    assert.equal((await get(s.server, '/')).status, 500, 'no user: the key function throws -> next(err)');
  } finally {
    await s.close();
  }
});

test('handler, statusCode and message', async () => {
  const seen = [];
  const h = await serve({ policy: pol(1, 'h'), handler: (req, res, next, info) => { seen.push(info); res.status(418).send('teapot'); } });
  const sc = await serve({ policy: pol(1, 'sc'), statusCode: 503 });
  const ms = await serve({ policy: pol(1, 'ms'), message: 'slow down' });
  const mo = await serve({ policy: pol(1, 'mo'), message: { error: 'too many', retry: true } });
  const mf = await serve({ policy: pol(1, 'mf'), message: (req, res, info) => ({ wait: info.retryAfterMs > 0, policy: info.policy }) });
  const ma = await serve({ policy: pol(1, 'ma'), message: async () => 'later' });
  try {
    for (const s of [h, sc, ms, mo, mf, ma]) assert.equal((await get(s.server)).status, 200);
    const rh = await get(h.server);
    assert.deepEqual([rh.status, rh.body], [418, 'teapot']);
    assert.equal(seen.length, 1);
    assert.equal(seen[0].allowed, false);
    assert.equal(seen[0].policy, 'h');
    assert.ok(seen[0].retryAfterMs > 3500000);
    assert.equal(rh.headers['retry-after'] !== undefined, true, 'headers are set before the handler runs');
    const rsc = await get(sc.server);
    assert.equal(rsc.status, 503);
    assert.equal(JSON.parse(rsc.body).error, 'rate_limited');
    const rms = await get(ms.server);
    assert.deepEqual([rms.status, rms.body], [429, 'slow down']);
    assert.match(rms.headers['content-type'], /^text\/plain/);
    const rmo = await get(mo.server);
    assert.deepEqual(JSON.parse(rmo.body), { error: 'too many', retry: true });
    assert.match(rmo.headers['content-type'], /^application\/json/);
    assert.deepEqual(JSON.parse((await get(mf.server)).body), { wait: true, policy: 'mf' });
    assert.equal((await get(ma.server)).body, 'later');
  } finally {
    await Promise.all([h, sc, ms, mo, mf, ma].map((s) => s.close()));
  }
});

test('skip: sync and async; a skipped request is not charged', async () => {
  const s = await serve({ policy: pol(1), skip: (req) => req.query.free === '1' });
  const a = await serve({ policy: pol(1), skip: async (req) => req.query.free === '1' });
  try {
    for (const x of [s, a]) {
      assert.deepEqual(await statuses(x.server, 3, {}, '/?free=1'), [200, 200, 200]);
      assert.deepEqual(await statuses(x.server, 2), [200, 429]);
      // An async skip answering false is no free pass.
      assert.equal((await get(x.server, '/?free=0')).status, 429);
    }
  } finally {
    await s.close();
    await a.close();
  }
});

test('async policy, key and cost', async () => {
  const s = await serve({ policy: async () => pol(3, 'async'), key: async (req) => req.get('x-k'), cost: async () => 2 });
  try {
    assert.deepEqual(await statuses(s.server, 2, { 'x-k': 'a' }), [200, 429]);
    assert.equal((await get(s.server, '/', { 'x-k': 'b' })).status, 200);
    assert.equal((await get(s.server, '/')).status, 500, 'an async key resolving to undefined is an error');
  } finally {
    await s.close();
  }
});

test('skipFailedRequests refunds a 500; skipSuccessfulRequests refunds a 200; requestWasSuccessful decides', async () => {
  const route = (req, res) => res.status(Number(req.query.status || 200)).send('x');
  const failed = await serve({ policy: pol(2, 'f'), skipFailedRequests: true }, { route });
  const ok = await serve({ policy: pol(2, 'o'), skipSuccessfulRequests: true }, { route });
  const custom = await serve({ policy: pol(2, 'c'), skipFailedRequests: true, requestWasSuccessful: (req, res) => res.statusCode !== 503 }, { route });
  try {
    // Five 500s: each refunded once its response finished.
    for (let i = 0; i < 5; i++) {
      assert.equal((await get(failed.server, '/?status=500')).status, 500);
      await waitFor(async () => (await failed.limiter.get('127.0.0.1', pol(2, 'f'))).remaining === 1, 'the refund of a 500');
    }
    assert.deepEqual(await statuses(failed.server, 3), [200, 200, 429], 'successes count');
    for (let i = 0; i < 4; i++) {
      assert.equal((await get(ok.server)).status, 200);
      await waitFor(async () => (await ok.limiter.get('127.0.0.1', pol(2, 'o'))).remaining === 1, 'the refund of a 200');
    }
    assert.deepEqual(await statuses(ok.server, 3, {}, '/?status=404'), [404, 404, 429], 'failures count');
    // 500 counts as a success here; 503 does not.
    assert.equal((await get(custom.server, '/?status=503')).status, 503);
    await waitFor(async () => (await custom.limiter.get('127.0.0.1', pol(2, 'c'))).remaining === 1, 'the refund of a 503');
    assert.deepEqual(await statuses(custom.server, 3, {}, '/?status=500'), [500, 500, 429]);
  } finally {
    await Promise.all([failed.close(), ok.close(), custom.close()]);
  }
});

test('a client that hangs up before the answer gets no refund, whatever skip* says', async () => {
  // With skipFailedRequests, a connection closed before the response
  // finished once counted as a failure and got its token back: a client
  // that hung up as soon as its request reached the handler (which still
  // did the work) was never limited.
  const { n, route, hangUp } = hangUpRoute(); // the route never answers
  const apps = await Promise.all([
    serve({ policy: pol(2, 'hf'), skipFailedRequests: true }, { route }),
    serve({ policy: pol(2, 'hs'), skipSuccessfulRequests: true }, { route }),
  ]);
  try {
    for (const [i, a] of apps.entries()) {
      const got = [];
      for (let k = 0; k < 4; k++) got.push(await hangUp(a.server.address().port));
      assert.deepEqual(got, ['hung up', 'hung up', 429, 429], `app ${i}`);
      const d = await a.limiter.get('127.0.0.1', pol(2, i ? 'hs' : 'hf'));
      assert.equal(d.remaining, 0);
    }
    assert.equal(n.ran, 4);
  } finally {
    await Promise.all(apps.map((a) => a.close()));
  }
});

test('headers: draft-11 (default), draft-8, draft-7, draft-6, legacy, epoch reset, none', async () => {
  const two = () => sluice.policy([{ capacity: 3, rate: '1/min' }, { capacity: 100, rate: '100/day' }], { name: 'api' });
  const mk = (headers) => serve({ policy: two(), headers });
  const d11 = await mk(undefined);
  const d8 = await mk('draft-8');
  const d7 = await mk({ standard: 'draft-7', legacy: false });
  const d6 = await mk('draft-6');
  const epoch = await mk({ standard: false, reset: 'epoch' });
  const none = await mk(false);
  try {
    let h = (await get(d11.server)).headers;
    assert.equal(h['ratelimit-policy'], '"api";q=3;w=180, "api.2";q=100;w=86400');
    assert.equal(h.ratelimit, '"api";r=2;t=60');
    assert.deepEqual([h['x-ratelimit-limit'], h['x-ratelimit-remaining'], h['x-ratelimit-reset']], ['3', '2', '60']);
    h = (await get(d8.server)).headers;
    assert.match(h['ratelimit-policy'], /^"api";q=3;w=180, "api.2";q=100;w=86400;pk=:[A-Za-z0-9+/]{16}:$/);
    assert.ok(!h['ratelimit-policy'].includes('127.0.0.1'), 'the partition key is a hash, never the key');
    assert.equal(h.ratelimit, '"api";r=2;t=60');
    h = (await get(d7.server)).headers;
    assert.equal(h['ratelimit-policy'], '3;w=180, 100;w=86400');
    assert.equal(h.ratelimit, 'limit=3, remaining=2, reset=60');
    assert.equal(h['x-ratelimit-limit'], undefined, 'legacy: false');
    h = (await get(d6.server)).headers;
    assert.equal(h['ratelimit-policy'], '3;w=180, 100;w=86400');
    assert.deepEqual([h['ratelimit-limit'], h['ratelimit-remaining'], h['ratelimit-reset']], ['3', '2', '60']);
    assert.equal(h.ratelimit, undefined);
    const before = Math.floor(Date.now() / 1000);
    h = (await get(epoch.server)).headers;
    const reset = Number(h['x-ratelimit-reset']);
    assert.ok(reset >= before + 59 && reset <= Math.ceil(Date.now() / 1000) + 61, `epoch reset ${reset}`);
    assert.equal(h['ratelimit-policy'], undefined);
    const r = await get(none.server);
    for (const k of Object.keys(r.headers)) assert.doesNotMatch(k, /ratelimit/, k);
    for (let i = 0; i < 3; i++) await get(none.server);
    const limited = await get(none.server);
    assert.equal(limited.status, 429);
    assert.equal(limited.headers['retry-after'], undefined, 'headers: false sends none, Retry-After included');
  } finally {
    await Promise.all([d11, d8, d7, d6, epoch, none].map((s) => s.close()));
  }
});

test('stacked limiters: the most restrictive answer\'s headers stay; RateLimit-Policy lists them all', async () => {
  const limiter = new sluice.Limiter();
  const burst = sluice.policy([{ capacity: 10, rate: '1/s' }], { name: 'burst' });
  const daily = sluice.policy([{ capacity: 4, rate: '4/day' }], { name: 'daily' });
  const app = express();
  app.get('/', sluice.express({ limiter, policy: burst }), sluice.express({ limiter, policy: daily }), (req, res) => res.json(req.rateLimit));
  app.get('/rev', sluice.express({ limiter, policy: daily }), sluice.express({ limiter, policy: burst }), (req, res) => res.json(req.rateLimit));
  // Between the two, a middleware replaces setHeader: the second limiter
  // writes through it, and still sees what the first one answered.
  const wrapSetHeader = (req, res, next) => {
    const own = res.setHeader;
    res.setHeader = function setHeader(name, value) { return own.call(this, name, value); };
    next();
  };
  const m1 = sluice.policy([{ capacity: 4, rate: '4/day' }], { name: 'm1' });
  const m2 = sluice.policy([{ capacity: 10, rate: '1/s' }], { name: 'm2' });
  app.get('/mixed', sluice.express({ limiter, policy: m1 }), wrapSetHeader, sluice.express({ limiter, policy: m2 }), (req, res) => res.json(req.rateLimit));
  const server = await listen(app);
  try {
    const mixed = await get(server, '/mixed');
    assert.equal(mixed.headers['ratelimit-policy'], '"m1";q=4;w=86400, "m2";q=10;w=10');
    assert.equal(mixed.headers.ratelimit, '"m1";r=3;t=21600', 'the first limiter, the more restrictive, stays');
    assert.equal(JSON.parse(mixed.body).policy, 'm1');
    const r = await get(server, '/');
    assert.equal(r.headers['ratelimit-policy'], '"daily";q=4;w=86400, "burst";q=10;w=10');
    assert.equal(r.headers.ratelimit, '"daily";r=3;t=21600');
    assert.equal(r.headers['x-ratelimit-remaining'], '3');
    assert.equal(JSON.parse(r.body).policy, 'daily', 'req.rateLimit is the most restrictive decision');
    const rev = await get(server, '/rev');
    assert.equal(rev.headers['ratelimit-policy'], '"daily";q=4;w=86400, "burst";q=10;w=10');
    assert.equal(rev.headers.ratelimit, '"daily";r=2;t=43200', 'the first limiter stays when it is the more restrictive');
    assert.equal(JSON.parse(rev.body).policy, 'daily');
    await get(server, '/');
    const last = await get(server, '/');
    assert.equal(last.status, 200);
    const limited = await get(server, '/');
    assert.equal(limited.status, 429);
    assert.equal(limited.headers.ratelimit, '"daily";r=0;t=86400');
    assert.equal(JSON.parse(limited.body).policy, 'daily');
  } finally {
    server.close();
    await limiter.close();
  }
});

test('headers are the response\'s own: getHeader/getHeaders/hasHeader see them, removeHeader drops them, a replaced setHeader receives them', async () => {
  const seen = [];
  const { server, close } = await serve({ policy: pol(5, 'hdr') }, {
    extra: (app) => app.use((req, res, next) => {
      if (req.query.wrap !== undefined) {
        const own = res.setHeader;
        res.setHeader = function setHeader(name, value) {
          seen.push(name);
          return own.call(this, name, value);
        };
      }
      next();
    }),
    route: (req, res) => {
      const names = res.getHeaderNames().filter((n) => /ratelimit/.test(n)).sort();
      const got = { names, has: res.hasHeader('RateLimit'), one: res.getHeader('X-RateLimit-Remaining'), all: res.getHeaders().ratelimit };
      res.removeHeader('x-ratelimit-limit');
      res.json(got);
    },
  });
  try {
    // node 18 to 24 keep a response's headers where sluice puts its own.
    assert.equal(sluice._directHeaders, true);
    const r = await get(server);
    const b = JSON.parse(r.body);
    assert.deepEqual(b.names, ['ratelimit', 'ratelimit-policy', 'x-ratelimit-remaining', 'x-ratelimit-reset']
      .concat(['x-ratelimit-limit']).sort());
    assert.equal(b.has, true);
    assert.equal(String(b.one), '4');
    assert.equal(b.all, '"hdr";r=4;t=3600');
    assert.equal(r.headers.ratelimit, '"hdr";r=4;t=3600');
    assert.equal(r.headers['x-ratelimit-limit'], undefined, 'removed by the route');
    assert.equal(r.headers['x-ratelimit-remaining'], '4');
    const w = await get(server, '/?wrap');
    assert.equal(w.headers.ratelimit, '"hdr";r=3;t=7200');
    assert.deepEqual(seen.filter((n) => /ratelimit/i.test(n)).sort(),
      ['RateLimit', 'RateLimit-Policy', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']);
  } finally {
    await close();
  }
});

test('a setHeader replaced on a prototype between the response and node\'s (app.response, express.response) receives sluice\'s headers', async () => {
  const RL = ['RateLimit', 'RateLimit-Policy', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'];
  const limiter = new sluice.Limiter();
  const app = express();
  app.get('/', sluice.express({ limiter, policy: pol(10, 'chain') }), (req, res) => res.json({ ok: true }));
  const server = await listen(app);
  // Express's own response prototype is shared by every app of the
  // process: put it back whatever happens.
  const expressProto = Object.getPrototypeOf(app.response);
  const restore = () => {
    delete app.response.setHeader;
    delete expressProto.setHeader;
  };
  try {
    assert.equal(sluice._directHeaders, true);
    assert.equal(Object.hasOwn(app.response, 'setHeader'), false);
    assert.equal(Object.hasOwn(expressProto, 'setHeader'), false);
    // First with nothing replaced: sluice has taken its direct path on
    // this app's responses before the replacement comes.
    const plain = await get(server);
    assert.equal(plain.headers.ratelimit, '"chain";r=9;t=3600');

    // A header filter on app.response: it sees every sluice header and
    // what it drops is not sent.
    const seen = [];
    app.response.setHeader = function setHeader(name, value) {
      seen.push(name);
      if (/^x-ratelimit-/i.test(name)) return this;
      return http.ServerResponse.prototype.setHeader.call(this, name, value);
    };
    const filtered = await get(server);
    assert.equal(filtered.status, 200);
    assert.deepEqual(RL.filter((n) => seen.includes(n)), RL, `app.response.setHeader saw ${seen.join(', ')}`);
    assert.equal(filtered.headers.ratelimit, '"chain";r=8;t=7200');
    for (const n of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'])
      assert.equal(filtered.headers[n], undefined, `${n} was dropped by the app's filter`);

    // The same one level up, on Express's shared response prototype.
    delete app.response.setHeader;
    seen.length = 0;
    expressProto.setHeader = function setHeader(name, value) {
      seen.push(name);
      return http.ServerResponse.prototype.setHeader.call(this, name, String(value) + (/^ratelimit$/i.test(name) ? ';x' : ''));
    };
    const upper = await get(server);
    assert.deepEqual(RL.filter((n) => seen.includes(n)), RL, `express.response.setHeader saw ${seen.join(', ')}`);
    assert.equal(upper.headers.ratelimit, '"chain";r=7;t=10800;x');

    // Taken away again: the headers are sluice's own once more.
    restore();
    seen.length = 0;
    const back = await get(server);
    assert.equal(back.headers.ratelimit, '"chain";r=6;t=14400');
    assert.equal(back.headers['x-ratelimit-remaining'], '6');
    assert.deepEqual(seen, []);
  } finally {
    restore();
    server.close();
    await limiter.close();
  }
});

test('node\'s setHeader replaced before sluice is loaded receives sluice\'s headers (no direct path in that process)', async () => {
  // A process of its own: the replacement is process-wide, and must come
  // before sluice is required.
  const script = `
    const http = require('node:http');
    const own = http.OutgoingMessage.prototype.setHeader;
    const seen = [];
    http.OutgoingMessage.prototype.setHeader = function setHeader(name, value) {
      seen.push(name);
      if (/^x-ratelimit-/i.test(name)) return this;
      return own.call(this, name, value);
    };
    const sluice = require(${JSON.stringify(path.join(__dirname, '..'))});
    const express = require(${JSON.stringify(require.resolve('express'))});
    const limiter = new sluice.Limiter();
    const app = express();
    app.get('/', sluice.express({ limiter, policy: sluice.policy([{ capacity: 5, rate: '1/h' }], { name: 'early' }) }), (req, res) => res.json({ ok: true }));
    const server = app.listen(0, '127.0.0.1', () => {
      http.get({ host: '127.0.0.1', port: server.address().port, path: '/' }, (res) => {
        res.resume();
        res.on('end', () => {
          console.log(JSON.stringify({ direct: sluice._directHeaders, seen, ratelimit: res.headers.ratelimit || null,
            legacy: Object.keys(res.headers).filter((n) => n.startsWith('x-ratelimit-')) }));
          server.close();
          limiter.close();
        });
      });
    });`;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.equal(out.direct, false, 'the direct path is off when node\'s setHeader is not node\'s own');
  for (const n of ['RateLimit', 'RateLimit-Policy', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'])
    assert.ok(out.seen.includes(n), `the replaced setHeader saw ${n} (it saw ${out.seen.join(', ')})`);
  assert.equal(out.ratelimit, '"early";r=4;t=3600');
  assert.deepEqual(out.legacy, [], 'what the replacement dropped is not sent');
});

test('the header store sluice makes has fast properties and reads, renders and changes exactly as node\'s own', () => {
  // A process of its own, for V8's %HasFastProperties.  Each response is
  // rendered (writeHead) beside one given the same headers through
  // setHeader alone (node's own store): the same bytes, names, lookups.
  const script = `
    const http = require('node:http');
    const sluice = require(${JSON.stringify(path.join(__dirname, '..'))});
    const limiter = new sluice.Limiter();
    const mw = sluice.express({ limiter, key: () => 'user', policy: sluice.policy([{ capacity: 5, rate: '1/h' }], { name: 'fast' }) });
    const store = (res) => Object.getOwnPropertySymbols(res).map((s) => res[s])
      .find((v) => v !== null && typeof v === 'object' && 'ratelimit' in v);
    const out = [];
    const responses = [];
    for (let i = 0; i < 3; i++) {
      const req = new http.IncomingMessage(null);
      req.headers = {};
      const res = new http.ServerResponse(req);
      res.sendDate = false;
      responses.push(res);
      mw(req, res, (err) => {
        if (err) throw err;
        const fast = %HasFastProperties(store(res));
        const ref = new http.ServerResponse(new http.IncomingMessage(null));
        ref.sendDate = false;
        for (const n of res.getHeaderNames()) ref.setHeader(res.getRawHeaderNames()[res.getHeaderNames().indexOf(n)], res.getHeader(n));
        for (const r of [res, ref]) {
          r.setHeader('Content-Type', 'text/plain');
          r.setHeader('__proto__', 'p');
          r.setHeader('ETag', 'x');
          if (i === 1) r.appendHeader('X-RateLimit-Limit', 'more');
          if (i === 2) r.removeHeader('ratelimit-policy');
        }
        const look = (r) => ({ names: r.getHeaderNames(), raw: r.getRawHeaderNames(), proto: r.getHeader('__proto__'),
          toString: r.hasHeader('toString'), ctor: r.getHeader('constructor'), limit: r.getHeader('x-ratelimit-limit'),
          all: Object.entries(r.getHeaders()) });
        const a = look(res);
        const b = look(ref);
        res.writeHead(200);
        ref.writeHead(200);
        out.push({ fast, a, b, head: res._header, refHead: ref._header });
      });
    }
    out.push({ first: responses[0].getHeader('x-ratelimit-limit') });
    console.log(JSON.stringify(out));
    limiter.close();`;
  const r = spawnSync(process.execPath, ['--allow-natives-syntax', '-e', script], { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  for (const [i, o] of out.slice(0, 3).entries()) {
    assert.equal(o.fast, true, `response ${i}: the store has fast properties`);
    assert.deepEqual(o.a, o.b, `response ${i}: read as node's own store reads`);
    assert.equal(o.head, o.refHead, `response ${i}: rendered as node's own store renders`);
    assert.equal(o.a.toString, false);
    assert.equal(o.a.ctor, undefined);
    assert.equal(o.a.proto, 'p');
  }
  assert.match(out[0].head, /^HTTP\/1\.1 200 OK\r\nRateLimit-Policy: "fast";q=5;w=18000\r\nRateLimit: "fast";r=4;t=3600\r\nX-RateLimit-Limit: 5\r\n/);
  assert.match(out[1].head, /\r\nX-RateLimit-Limit: 5\r\nX-RateLimit-Limit: more\r\n/);
  assert.doesNotMatch(out[2].head, /RateLimit-Policy/);
  assert.equal(out[3].first, 5, 'appending to one response\'s header leaves another\'s alone');
});

test('RateLimit values kept per policy: a new one whenever the remaining count or the reset changes, each policy its own; stacked, the most restrictive stays', () => {
  let now = 1_700_000_000_000_000; // µs, the limiter's clock
  const limiter = new sluice.Limiter({ clock: () => now });
  const wide = sluice.policy([{ capacity: 40, rate: '1/s' }], { name: 'wide' });
  const other = sluice.policy([{ capacity: 40, rate: '1/s' }], { name: 'other' });
  const narrow = sluice.policy([{ capacity: 5, rate: '1/s' }], { name: 'narrow' });
  const call = (mws, user) => {
    const req = new http.IncomingMessage(null);
    req.headers = {};
    const res = new http.ServerResponse(req);
    let i = 0;
    const next = (err) => {
      if (err) throw err;
      if (i < mws.length) mws[i++](req, res, next);
    };
    next();
    return { rl: res.getHeader('RateLimit'), policy: res.getHeader('RateLimit-Policy'), remaining: res.getHeader('X-RateLimit-Remaining') };
  };
  const byUser = (policy) => sluice.express({ limiter, policy, key: (req) => req.user });
  const mwWide = byUser(wide);
  const mwOther = byUser(other);
  const user = (u, mw) => [(req, res, next) => { req.user = u; next(); }, mw];
  try {
    // Remaining 39 down to 0 for one user (every count, those that share a
    // slot too), the reset growing a second a request.
    for (let n = 1; n <= 40; n++) assert.equal(call(user('a', mwWide), 'a').rl, `"wide";r=${40 - n};t=${n}`);
    // Another user at the same counts and resets; then at the same count
    // with another reset (the clock moved); another policy at the same
    // numbers has its own name.
    assert.equal(call(user('b', mwWide)).rl, '"wide";r=39;t=1');
    now += 500_000;
    assert.equal(call(user('a', mwWide)).rl, '"wide";r=0;t=40');
    assert.equal(call(user('c', mwOther)).rl, '"other";r=39;t=1');
    assert.equal(call(user('a', mwOther)).rl, '"other";r=39;t=1');
    assert.equal(call(user('a', mwOther)).rl, '"other";r=38;t=2');
    assert.equal(call(user('c', mwWide)).rl, '"wide";r=39;t=1');
    // The same remaining count with another reset: a bucket refilled by
    // half a token (a token every 2 s) is full a second sooner.
    const mwHalf = byUser(sluice.policy([{ capacity: 40, rate: '1/2s' }], { name: 'half' }));
    for (let n = 1; n <= 3; n++) call(user('x', mwHalf));
    assert.equal(call(user('y', mwHalf)).rl, '"half";r=39;t=2');
    assert.equal(call(user('y', mwHalf)).rl, '"half";r=38;t=4');
    assert.equal(call(user('x', mwHalf)).rl, '"half";r=36;t=8');
    now += 1_000_000;
    assert.equal(call(user('y', mwHalf)).rl, '"half";r=37;t=5');
    assert.equal(call(user('z', mwHalf)).rl, '"half";r=39;t=2');
    assert.equal(call(user('z', mwHalf)).rl, '"half";r=38;t=4');
    assert.equal(call(user('z', mwHalf)).rl, '"half";r=37;t=6');
    // Stacked: the narrow limiter, most restrictive, leaves its values,
    // whichever order; RateLimit-Policy lists both.
    const mwNarrow = byUser(narrow);
    const s1 = call([(req, res, next) => { req.user = 'd'; next(); }, mwWide, mwNarrow]);
    assert.equal(s1.rl, '"narrow";r=4;t=1');
    assert.equal(s1.policy, '"narrow";q=5;w=5, "wide";q=40;w=40');
    assert.equal(s1.remaining, 4);
    const s2 = call([(req, res, next) => { req.user = 'e'; next(); }, mwNarrow, mwWide]);
    assert.equal(s2.rl, '"narrow";r=4;t=1');
    assert.equal(s2.policy, '"narrow";q=5;w=5, "wide";q=40;w=40');
    assert.equal(call(user('e', mwWide)).rl, '"wide";r=38;t=2');
  } finally {
    limiter.close();
  }
});

test('the response object is left as it was: no property of sluice\'s on it, with headers on or off', async () => {
  for (const headers of [undefined, false]) {
    const { server, close } = await serve({ policy: pol(5), headers }, {
      route: (req, res) => res.json({ own: Object.getOwnPropertySymbols(res).map(String).concat(Object.keys(res)).filter((k) => /sluice|remaining/i.test(k)) }),
    });
    try {
      const r = await get(server);
      assert.equal(r.status, 200);
      assert.deepEqual(JSON.parse(r.body).own, [], `headers ${headers}`);
    } finally {
      await close();
    }
  }
});

test('requestPropertyName: rateLimit by default, another name, or none', async () => {
  const a = await serve({ policy: pol(5, 'a') });
  const b = await serve({ policy: pol(5, 'b'), requestPropertyName: 'quota' }, { route: (req, res) => res.json([req.quota, req.rateLimit || null]) });
  const c = await serve({ policy: pol(5, 'c'), requestPropertyName: false });
  try {
    const ra = JSON.parse((await get(a.server)).body).rateLimit;
    assert.deepEqual(ra, { allowed: true, limit: 5, remaining: 4, retryAfterMs: 0, resetMs: 3600000, policy: 'a', key: '127.0.0.1', cost: 1 });
    const [quota, none] = JSON.parse((await get(b.server)).body);
    assert.equal(quota.remaining, 4);
    assert.equal(none, null);
    assert.equal(JSON.parse((await get(c.server)).body).rateLimit, null);
  } finally {
    await Promise.all([a.close(), b.close(), c.close()]);
  }
});

test('req.rateLimit on Express adds no property to the request (no new hidden class per request); the app may still assign it', async () => {
  const limiter = new sluice.Limiter();
  const p1 = pol(5, 'one');
  const p2 = pol(3, 'two');
  const app = express();
  const look = (req) => ({ own: Object.hasOwn(req, 'rateLimit'), policy: req.rateLimit ? req.rateLimit.policy : null, remaining: req.rateLimit ? req.rateLimit.remaining : null });
  app.get('/', sluice.express({ limiter, policy: p1 }), (req, res) => res.json(look(req)));
  // Two limiters: the second, more restrictive, answer is the one left.
  app.get('/two', sluice.express({ limiter, policy: pol(5, 'wide') }), sluice.express({ limiter, policy: p2 }), (req, res) => res.json(look(req)));
  // The app assigns the name itself, before and after the limiter.
  app.get('/mine', (req, res, next) => { req.rateLimit = 'before'; next(); }, sluice.express({ limiter, policy: p1 }), (req, res) => res.json(look(req)));
  app.get('/after', sluice.express({ limiter, policy: p1 }), (req, res, next) => { req.rateLimit = { policy: 'app', remaining: -1 }; next(); },
    (req, res) => res.json(look(req)));
  // Not on Express: plain node:http keeps an own property, as before.
  const plainMw = sluice.express({ limiter, policy: pol(5, 'plain') });
  const plain = http.createServer((req, res) => plainMw(req, res, () => res.end(JSON.stringify(look(req)))));
  const server = await listen(app);
  await new Promise((resolve) => plain.listen(0, '127.0.0.1', resolve));
  try {
    assert.deepEqual(JSON.parse((await get(server)).body), { own: false, policy: 'one', remaining: 4 });
    assert.deepEqual(JSON.parse((await get(server)).body), { own: false, policy: 'one', remaining: 3 });
    assert.deepEqual(JSON.parse((await get(server, '/two')).body), { own: false, policy: 'two', remaining: 2 });
    // The app's own value, assigned before: the limiter's decision replaces it.
    assert.deepEqual(JSON.parse((await get(server, '/mine')).body), { own: true, policy: 'one', remaining: 2 });
    const after = JSON.parse((await get(server, '/after')).body);
    assert.deepEqual(after, { own: true, policy: 'app', remaining: -1 });
    // A request the limiter never saw has none.
    assert.equal(Object.getOwnPropertyDescriptor(express.request, 'rateLimit'), undefined, 'Express\'s shared prototype is left alone');
    assert.deepEqual(JSON.parse((await get(plain)).body), { own: true, policy: 'plain', remaining: 4 });
  } finally {
    server.close();
    plain.close();
    await limiter.close();
  }
});

test('onStoreError: a function gets the error with its code; a failed take\'s error carries a code', async () => {
  const port = await freePort(); // nothing listens there
  const limiter = new sluice.Limiter({ store: { redis: { url: `redis://127.0.0.1:${port}`, timeoutMs: 200 } }, onStoreError: 'reject' });
  const errors = [];
  const s = await serve({ limiter, policy: pol(5), onStoreError: (err, req, res, next) => { errors.push(err); res.status(502).send(err.code); } });
  try {
    const r = await get(s.server);
    assert.equal(r.status, 502);
    assert.match(r.body, /^ERR_SLUICE_(STORE|TIMEOUT)$/);
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof Error);
    await assert.rejects(limiter.take('k', pol(5)), (e) => /^ERR_SLUICE_(STORE|TIMEOUT)$/.test(e.code));
  } finally {
    await s.close();
  }
});

test('a closed limiter never lets a request through: 503, with onStoreError \'open\' too', async () => {
  for (const onStoreError of ['open', 'closed', () => { throw new Error('not a store error'); }]) {
    const s = await serve({ policy: pol(5), onStoreError });
    try {
      assert.equal((await get(s.server)).status, 200);
      await s.limiter.close();
      const r = await get(s.server);
      assert.equal(r.status, 503);
      assert.equal(JSON.parse(r.body).error, 'limiter_closed');
      assert.equal(r.headers['x-ratelimit-limit'], undefined);
    } finally {
      await s.close();
    }
  }
  // On Redis too.
  const redis = await Redis.start();
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 2000 } } });
  const s = await serve({ limiter, policy: pol(5) });
  try {
    await waitFor(async () => (await get(s.server)).headers['x-ratelimit-limit'] === '5', 'Redis answering');
    await limiter.close();
    assert.equal((await get(s.server)).status, 503);
  } finally {
    await s.close();
    await redis.stop();
  }
});

test('options: unknown names, peers\' names and wrong types are TypeErrors naming them', () => {
  const limiter = new sluice.Limiter();
  const policy = pol(5);
  const bad = (opts, re, type = TypeError) => assert.throws(() => sluice.express({ limiter, policy, ...opts }), { name: type.name, message: re }, JSON.stringify(Object.keys(opts)));
  bad({ keyGenerator: () => 'x' }, /"keyGenerator".*key:/);
  bad({ standardHeaders: 'draft-7' }, /"standardHeaders".*headers:/);
  bad({ legacyHeaders: false }, /"legacyHeaders".*headers: \{ legacy/);
  bad({ windowMs: 60000 }, /"windowMs".*policy: sluice\.policy/);
  bad({ max: 100 }, /"max".*policy/);
  bad({ limit: 100 }, /"limit".*policy/);
  bad({ store: {} }, /"store".*limiter: new sluice\.Limiter/);
  bad({ passOnStoreError: true }, /"passOnStoreError".*onStoreError: 'open'/);
  bad({ identifier: 'x' }, /"identifier".*name/);
  bad({ keyprefix: 'x' }, /"keyprefix"/);
  bad({ skipFailedRequest: true }, /"skipFailedRequest".*did you mean "skipFailedRequests"/);
  bad({ handlr: () => {} }, /"handlr".*did you mean "handler"/);
  bad({ key: 'x-user-id' }, /key must be a function/);
  bad({ skip: true }, /skip must be a function/);
  bad({ handler: 'x' }, /handler must be a function/);
  bad({ statusCode: 200 }, /statusCode/, RangeError);
  bad({ statusCode: '429' }, /statusCode/, RangeError);
  bad({ message: 42 }, /message must be/);
  bad({ headers: 'draft-9' }, /draft-9/, RangeError);
  bad({ headers: { standart: 'draft-7' } }, /"standart".*did you mean "standard"/);
  bad({ headers: { legacy: 'no' } }, /legacy must be true or false/);
  bad({ headers: { reset: 'unix' } }, /reset/, RangeError);
  bad({ headers: 7 }, /headers must be/);
  bad({ requestPropertyName: 7 }, /requestPropertyName/);
  bad({ onStoreError: 'maybe' }, /onStoreError/, RangeError);
  bad({ skipSuccessfulRequests: 'yes' }, /skipSuccessfulRequests must be true or false/);
  bad({ requestWasSuccessful: () => true }, /needs skipSuccessfulRequests or skipFailedRequests/);
  bad({ ipv6Subnet: 129 }, /ipv6Subnet/, RangeError);
  bad({ ipv6Subnet: 56, key: () => 'k' }, /ipv6Subnet applies to the default key/);
  bad({ cost: -1 }, /cost/, RangeError);
  bad({ cost: '1' }, /cost must be a function/);
  assert.throws(() => sluice.express({ policy }), /limiter must be a sluice\.Limiter/);
  assert.throws(() => sluice.express({ limiter, policy: {} }), /policy must be/);
  assert.throws(() => sluice.express(null), TypeError);
  // The Limiter's own options.
  const badL = (opts, re, type = TypeError) => assert.throws(() => new sluice.Limiter(opts), { name: type.name, message: re }, JSON.stringify(opts));
  badL({ stor: 'memory' }, /"stor".*did you mean "store"/);
  badL({ store: { redis: { urll: 'redis://127.0.0.1:1' } } }, /store\.redis: unknown option "urll".*did you mean "url"/);
  badL({ store: { redis: { host: 'localhost', port: 6379 } } }, /"host".*url: 'redis:\/\//);
  badL({ store: { redis: { connectTimeout: 100 } } }, /"connectTimeout".*timeoutMs/);
  badL({ storeClient: {} }, /"storeClient".*store: \{ redis/);
  badL({ points: 10, duration: 1 }, /"points".*policy/);
  badL({ blockDuration: 10 }, /"blockDuration".*limiter\.block/);
  badL({ store: { memry: {} } }, /"memry".*did you mean "memory"/);
  badL({ store: { memory: { maxkeys: 5 } } }, /"maxkeys".*did you mean "maxKeys"/);
  badL({ store: { memory: {}, redis: {} } }, /one of memory, shared or redis/);
  badL({ store: { shared: { path: '/dev/shm/x', max: 5 } } }, /"max"/);
  badL({ unref: 'yes' }, /unref must be true or false/);
  badL({ onError: 'log' }, /onError must be a function/);
  badL({ store: { redis: { url: 'redis://127.0.0.1:1' } }, maxKeys: 5 }, /maxKeys applies to the memory and shared stores/);
  badL({ store: { redis: { scriptOnly: 'yes' } } }, /scriptOnly must be true or false/);
});
