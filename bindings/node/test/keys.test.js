// Key management on every store -- get, reset, refund, penalize, block --
// and the same stored state as `sluice serve`'s /v1/reset and /v1/refund:
// serve and the Node limiter take turns on one key and see each other's
// changes.  Keys with lone surrogates are refused; identities are encoded
// by libsluice exactly as serve encodes them.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const sluice = require('..');
const { BUILD, Redis, startCluster, startSluice, storeReady, request } = require('./helpers');

const TOKEN = 'node-admin-token-0123456789abcdef';

function post(port, path, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } }, (res) => {
      let b = '';
      res.on('data', (d) => { b += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: b, headers: res.headers }));
    });
    req.on('error', reject);
    req.end(data);
  });
}

// serve's view of the key: /v1/take with cost 0 on the rule's bucket.
async function serveRemaining(s, key) {
  const r = await request(s.port, '/v1/check', { 'x-user-id': key });
  return { status: r.status, remaining: Number(r.headers['x-ratelimit-remaining']) };
}

const RULES = `admin: {token: "${TOKEN}"}
rules:
  - name: km
    key: ["header:x-user-id"]
    limits: [{capacity: 5, rate: 1/h}, {capacity: 8, rate: 8/day}]
`;

// One scenario on any store, against serve on the same store.
async function agreeWithServe(limiter, s, key) {
  const pol = sluice.policy([{ capacity: 5, rate: '1/h' }, { capacity: 8, rate: '8/day' }], { name: 'km' });
  // get charges nothing, and says what a take would get.
  let d = await limiter.get(key, pol);
  assert.deepEqual([d.allowed, d.remaining, d.retryAfterMs], [true, 4, 0]);
  assert.equal((await limiter.get(key, pol)).remaining, 4, 'get charged nothing');
  for (let i = 0; i < 5; i++) assert.equal((await limiter.take(key, pol)).allowed, true);
  d = await limiter.get(key, pol);
  assert.equal(d.allowed, false, 'a drained bucket: get says not allowed');
  assert.ok(d.retryAfterMs > 3590000 && d.retryAfterMs <= 3600000, `retryAfterMs ${d.retryAfterMs}`);
  assert.equal((await serveRemaining(s, key)).status, 429, 'serve sees the drained bucket');

  // serve's /v1/refund -> Node sees the token.
  assert.equal((await post(s.port, '/v1/refund', { rule: 'km', key, cost: 2 })).status, 200);
  d = await limiter.get(key, pol);
  assert.deepEqual([d.allowed, d.remaining], [true, 1]);
  // Node's refund -> serve sees it (never above capacity).
  await limiter.refund(key, pol, 1);
  assert.deepEqual(await serveRemaining(s, key), { status: 200, remaining: 2 }); // serve took one: 3 - 1
  await limiter.refund(key, pol, 100);
  assert.equal((await limiter.get(key, pol)).remaining, 4, 'a refund never fills beyond capacity');

  // Node's penalize: a debt serve honours.
  await limiter.penalize(key, pol, 7); // 5 - 7: two tokens of debt
  d = await limiter.get(key, pol);
  assert.equal(d.allowed, false);
  assert.ok(d.retryAfterMs > 3 * 3600000 - 10000 && d.retryAfterMs <= 3 * 3600000, `retry after a debt of 2: ${d.retryAfterMs}`);
  assert.equal((await serveRemaining(s, key)).status, 429);
  // serve's /v1/reset clears it, for Node too.
  assert.equal((await post(s.port, '/v1/reset', { rule: 'km', key })).status, 200);
  d = await limiter.get(key, pol);
  assert.deepEqual([d.allowed, d.remaining], [true, 4]);

  // Node's block: nothing passes for ms, on serve either.
  await limiter.block(key, pol, 120000);
  d = await limiter.get(key, pol);
  assert.equal(d.allowed, false);
  assert.ok(d.retryAfterMs > 115000 && d.retryAfterMs <= 120000, `blocked for 120 s: ${d.retryAfterMs}`);
  assert.equal((await limiter.take(key, pol)).allowed, false);
  assert.equal((await serveRemaining(s, key)).status, 429);
  // A shorter block leaves the longer one.
  await limiter.block(key, pol, 1000);
  assert.ok((await limiter.get(key, pol)).retryAfterMs > 100000);
  // Node's reset: serve sees a full bucket.
  await limiter.reset(key, pol);
  assert.deepEqual(await serveRemaining(s, key), { status: 200, remaining: 4 });
}

function badArgs(limiter) {
  const pol = sluice.policy([{ capacity: 5, rate: '1/h' }]);
  assert.throws(() => limiter.get(1, pol), TypeError);
  assert.throws(() => limiter.reset('k', {}), TypeError);
  assert.throws(() => limiter.refund('k', pol, -1), RangeError);
  assert.throws(() => limiter.refund('k', pol, 1.5), RangeError);
  assert.throws(() => limiter.penalize('k', pol, '2'), TypeError);
  assert.throws(() => limiter.block('k', pol, 0), RangeError);
  assert.throws(() => limiter.block('k', pol), TypeError);
  assert.throws(() => limiter.get('k', pol, { costt: 1 }), { name: 'TypeError', message: /"costt".*did you mean "cost"/ });
}

test('memory store: key management agrees with serve on its own memory store', async () => {
  // Two processes cannot share a memory store: here serve and the limiter
  // each run the scenario, and must answer the same.
  const s = await startSluice(RULES);
  const limiter = new sluice.Limiter();
  try {
    badArgs(limiter);
    // serve's own store is another; drive both the same way through a
    // limiter that mirrors serve's calls on its memory store.
    const pol = sluice.policy([{ capacity: 5, rate: '1/h' }, { capacity: 8, rate: '8/day' }], { name: 'km' });
    for (let i = 0; i < 5; i++) {
      await limiter.take('m', pol);
      await request(s.port, '/v1/check', { 'x-user-id': 'm' });
    }
    await limiter.refund('m', pol, 2);
    await post(s.port, '/v1/refund', { rule: 'km', key: 'm', cost: 2 });
    assert.equal((await limiter.get('m', pol)).remaining, 1);
    assert.deepEqual(await serveRemaining(s, 'm'), { status: 200, remaining: 1 });
    await limiter.reset('m', pol);
    await post(s.port, '/v1/reset', { rule: 'km', key: 'm' });
    assert.equal((await limiter.get('m', pol)).remaining, 4);
    assert.deepEqual(await serveRemaining(s, 'm'), { status: 200, remaining: 4 });
    // penalize and block on the memory store.
    await limiter.penalize('m', pol, 7);
    assert.equal((await limiter.take('m', pol)).allowed, false);
    await limiter.reset('m', pol);
    await limiter.block('m', pol, 60000);
    const d = await limiter.get('m', pol);
    assert.equal(d.allowed, false);
    assert.ok(d.retryAfterMs > 55000 && d.retryAfterMs <= 60000);
  } finally {
    await limiter.close();
    await s.stop();
  }
});

test('memory store: a block ends exactly when it says, on the limiter\'s clock', async () => {
  let now = 1700000000000000;
  const limiter = new sluice.Limiter({ clock: () => now });
  const pol = sluice.policy([{ capacity: 10, rate: '1/s' }]);
  await limiter.block('c', pol, 2500);
  assert.equal((await limiter.get('c', pol)).retryAfterMs, 2500);
  now += 2499000;
  assert.equal((await limiter.take('c', pol)).allowed, false);
  now += 1000;
  assert.equal((await limiter.take('c', pol)).allowed, true, 'the first request after the block passes');
  assert.equal((await limiter.take('c', pol)).allowed, false, 'and the bucket refills from there');
  await limiter.close();
});

test('shared store: key management agrees with serve on the same file', async (t) => {
  const file = `/dev/shm/sluice-node-keys-${process.pid}`;
  fs.rmSync(file, { force: true });
  t.after(() => fs.rmSync(file, { force: true }));
  const s = await startSluice(`store: {shared: {path: ${file}, max_keys: 10000}}\n${RULES}`);
  const limiter = new sluice.Limiter({ store: { shared: { path: file, maxKeys: 10000 } } });
  try {
    await agreeWithServe(limiter, s, 'shared-user');
  } finally {
    await limiter.close();
    await s.stop();
  }
});

for (const withModule of [false, true]) {
  test(`Redis${withModule ? ' with the sluice module' : ''}: key management agrees with serve on the same Redis`, async () => {
    const module = path.join(BUILD, 'sluice-redis.so');
    if (withModule) assert.ok(fs.existsSync(module), `${module} is built with sluice`);
    const redis = await Redis.start(withModule ? ['--loadmodule', module] : []);
    const s = await startSluice(`store: {redis: {url: "${redis.url}", timeout_ms: 2000}}\n${RULES}`);
    const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 2000 } } });
    try {
      await storeReady(limiter, sluice.policy([{ capacity: 1, rate: '1/s' }]));
      badArgs(limiter);
      await agreeWithServe(limiter, s, 'redis-user');
      // The stored state is one string per limit, as takes write it, and
      // a reset bucket is no key at all.
      const pol = sluice.policy([{ capacity: 5, rate: '1/h' }, { capacity: 8, rate: '8/day' }], { name: 'km' });
      await limiter.reset('redis-user', pol);
      const scan = () => redis.cli('--scan', '--pattern', 'sluice:*redis-user*').trim().split('\n').filter(Boolean);
      assert.deepEqual(scan(), []);
      await limiter.penalize('redis-user', sluice.policy([{ capacity: 5, rate: '1/h' }], { name: 'km' }), 2);
      const keys = scan();
      assert.equal(keys.length, 1);
      assert.match(redis.cli('GET', keys[0]).trim(), /^[0-9]{19,}$/);
      const ttl = Number(redis.cli('PTTL', keys[0]).trim());
      assert.ok(ttl > 7190000 && ttl <= 7200000, `PTTL ${ttl}: the time until full`);
      if (withModule) assert.match(redis.cli('INFO', 'commandstats'), /cmdstat_sluice\.take/i, 'takes went through the module');
    } finally {
      await limiter.close();
      await s.stop();
      await redis.stop();
    }
  });
}

test('Redis Cluster: key management agrees with serve on the same cluster', async () => {
  const cluster = await startCluster(3);
  const s = await startSluice(`store: {redis_cluster: {seeds: ["${cluster.seeds[0]}"], timeout_ms: 2000}}\n${RULES}`);
  const limiter = new sluice.Limiter({ store: { redis: { cluster: [cluster.seeds[0]], timeoutMs: 2000 } } });
  try {
    await storeReady(limiter, sluice.policy([{ capacity: 1, rate: '1/s' }]));
    for (const user of ['c-alice', 'c-bob', 'c-carol']) await agreeWithServe(limiter, s, user);
  } finally {
    await limiter.close();
    await s.stop();
    await cluster.stop();
  }
});

test('a closed limiter refuses every verb', async () => {
  const pol = sluice.policy([{ capacity: 5, rate: '1/h' }]);
  const limiter = new sluice.Limiter();
  await limiter.close();
  assert.equal(limiter.closed, true);
  for (const call of [() => limiter.get('k', pol), () => limiter.take('k', pol), () => limiter.reset('k', pol),
    () => limiter.refund('k', pol, 1), () => limiter.penalize('k', pol, 1), () => limiter.block('k', pol, 10)])
    await assert.rejects(call(), { code: 'ERR_SLUICE_CLOSED' });
});

test('keys: lone surrogates are refused; U+FFFD and real pairs are their own buckets', async () => {
  const limiter = new sluice.Limiter();
  const pol = sluice.policy([{ capacity: 1, rate: '1/h' }]);
  for (const k of ['\ud800', '\udbff', '\udc00', 'a\ud800b', '\udfff\ud800'])
    assert.throws(() => limiter.take(k, pol), { name: 'TypeError', message: /surrogate/ }, JSON.stringify(k));
  await assert.rejects(async () => limiter.get('\udc00x', pol), TypeError);
  assert.equal((await limiter.take('\ufffd', pol)).allowed, true);
  assert.equal((await limiter.take('\ufffd', pol)).allowed, false);
  assert.equal((await limiter.take('\ud83d\ude00', pol)).allowed, true, 'a surrogate pair is a character of its own');
  assert.equal((await limiter.take(Buffer.from([0xed, 0xa0, 0x80]), pol)).allowed, true, 'any bytes as a Buffer');
  await limiter.close();
});

test('keys: the identity is encoded by libsluice, as serve encodes it (long, control and ~ keys)', async () => {
  const redis = await Redis.start();
  const s = await startSluice(`store: {redis: {url: "${redis.url}", timeout_ms: 2000}}
rules:
  - name: enc
    key: ["header:x-user-id"]
    limits: [{capacity: 3, rate: 1/h}]
`);
  const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 2000 } } });
  const pol = sluice.policy([{ capacity: 3, rate: '1/h' }], { name: 'enc' });
  try {
    await storeReady(limiter, pol);
    const long = 'x'.repeat(300);
    const tilde = `~${require('node:crypto').createHash('sha256').update(long).digest('hex')}`;
    for (const key of [long, tilde, '~plain']) {
      await limiter.take(key, pol);
      await limiter.take(key, pol);
      const r = await request(s.port, '/v1/check', { 'x-user-id': key });
      assert.equal(r.headers['x-ratelimit-remaining'], '0', `serve charges the bucket Node charged for ${key.slice(0, 20)}`);
      await limiter.reset(key, pol);
    }
  } finally {
    await limiter.close();
    await s.stop();
    await redis.stop();
  }
});
