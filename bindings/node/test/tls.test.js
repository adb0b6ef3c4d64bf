// The Redis store over TLS, inside Node: a redis-server with a TLS port
// and certificates made here with the openssl command (a private CA, a
// server certificate for localhost and 127.0.0.1, a client certificate,
// and a CA that signed none of them).  The addon's OpenSSL calls run in
// the node process, beside Node's own OpenSSL: these tests show the
// handshake really happens there, and that a certificate that does not
// verify fails the takes (with OpenSSL's reason) rather than the process.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const sluice = require('..');
const { failsWith, makeCerts, startTlsRedis, storeReady, track, limiterPool } = require('./helpers');

let certs;
let redis;
test.before(async () => {
  certs = makeCerts();
  redis = await startTlsRedis(certs);
});
test.after(async () => { await redis.stop(); });

const limiter = limiterPool(sluice, test);

test('rediss:// with the private CA: the same decisions as plain Redis, in the same bucket', async () => {
  const tls = limiter({ url: redis.tlsUrl, tls: { caFile: certs.path('ca.crt') }, keyPrefix: 'tls:' });
  const plain = limiter({ url: redis.url, keyPrefix: 'tls:' });
  const pol = sluice.policy([{ capacity: 3, rate: '1/h' }], { name: 'tls' });
  const got = [];
  for (let i = 0; i < 4; i++) got.push(await tls.take('alice', pol));
  assert.deepEqual(got.map((d) => d.allowed), [true, true, true, false]);
  assert.deepEqual(got.map((d) => d.remaining), [2, 1, 0, 0]);
  assert.ok(got[3].retryAfterMs > 1000, `retry ${got[3].retryAfterMs}`);
  assert.equal(tls.healthy(), true);
  // The plain port of the same server sees the tokens taken over TLS.
  const peek = await plain.take('alice', pol, { cost: 0 });
  assert.equal(peek.remaining, 0);
  assert.equal((await plain.take('bob', pol)).remaining, 2);
  assert.equal((await tls.take('bob', pol)).remaining, 1);
  // Only TLS clients reach the TLS port: the connection above was one.
  assert.match(redis.cli('CONFIG', 'GET', 'tls-port'), new RegExp(`\\b${redis.tlsPort}\\b`));
});

test('a tls block turns TLS on for a redis:// URL; serverName is the name verified', async () => {
  const pol = sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'sni' });
  const byName = limiter({ url: `redis://127.0.0.1:${redis.tlsPort}`,
    tls: { caFile: certs.path('ca.crt'), serverName: 'localhost' } });
  await storeReady(byName, pol);
  assert.deepEqual([(await byName.take('k', pol)).allowed, (await byName.take('k', pol)).allowed,
    (await byName.take('k', pol)).allowed], [true, true, false]);
  const wrongName = limiter({ url: redis.tlsUrl, tls: { caFile: certs.path('ca.crt'), serverName: 'redis.example.com' } });
  const e = await failsWith(wrongName, pol, /tls_failed/);
  assert.match(e.message, /127\.0\.0\.1:\d+: tls_failed: TLS: certificate verify failed/);
  assert.equal(wrongName.healthy(), false);
});

test('a certificate from another CA: takes fail with the reason, the process goes on, nothing is charged', async () => {
  const pol = sluice.policy([{ capacity: 5, rate: '1/h' }], { name: 'wrongca' });
  const l = limiter({ url: redis.tlsUrl, tls: { caFile: certs.path('other.crt') }, timeoutMs: 200 });
  const e = await failsWith(l, pol, /tls_failed/);
  assert.equal(e.code, 'ERR_SLUICE_STORE');
  assert.match(e.message, /tls_failed: TLS: certificate verify failed/);
  assert.equal(l.healthy(), false);
  // The system's CA store does not hold the private CA either.
  const system = limiter({ url: redis.tlsUrl, timeoutMs: 200 });
  await failsWith(system, pol, /tls_failed: TLS: certificate verify failed/);
  // Not one token was taken; a limiter that can verify works.
  assert.equal(redis.cli('--scan', '--pattern', '*wrongca*').trim(), '');
  const good = limiter({ url: redis.tlsUrl, tls: { caFile: certs.path('ca.crt') } });
  assert.equal((await good.take('k', pol)).remaining, 4);
});

test("rediss:// alone verifies against the system's CA store, as OpenSSL inside node finds it", async () => {
  // SSL_CERT_FILE is OpenSSL's own way to name the default CA file; the
  // test cannot add the private CA to the machine's store.
  const script = `
    const sluice = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    const l = new sluice.Limiter({ store: { redis: { url: ${JSON.stringify(redis.tlsUrl)}, timeoutMs: 5000 } } });
    const p = sluice.policy([{ capacity: 1, rate: '1/h' }], { name: 'systemca' });
    Promise.all([l.take('k', p), l.take('k', p)]).then((d) => console.log(JSON.stringify(d.map((x) => x.allowed))),
      (e) => console.log(JSON.stringify(e.message))).finally(() => l.close());`;
  const child = track(spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, SSL_CERT_FILE: certs.path('ca.crt') } }), 'system-ca');
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  const code = await new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), 60000);
    child.on('exit', (c, sig) => { clearTimeout(t); resolve(sig || c); });
  });
  assert.equal(code, 0, child.log());
  assert.deepEqual(JSON.parse(out), [true, false]);
});

test('verify: false accepts a certificate no CA given vouches for', async () => {
  const pol = sluice.policy([{ capacity: 2, rate: '1/h' }], { name: 'noverify' });
  const l = limiter({ url: redis.tlsUrl, tls: { caFile: certs.path('other.crt'), verify: false } });
  const got = [];
  for (let i = 0; i < 3; i++) got.push((await l.take('k', pol)).allowed);
  assert.deepEqual(got, [true, true, false]);
});

test('mutual TLS: a server that asks for a client certificate gets certFile/keyFile', async () => {
  const mtls = await startTlsRedis(certs, 'yes');
  try {
    const pol = sluice.policy([{ capacity: 3, rate: '1/h' }], { name: 'mtls' });
    const withCert = limiter({ url: mtls.tlsUrl,
      tls: { caFile: certs.path('ca.crt'), certFile: certs.path('client.crt'), keyFile: certs.path('client.key') } });
    const got = [];
    for (let i = 0; i < 4; i++) got.push((await withCert.take('k', pol)).allowed);
    assert.deepEqual(got, [true, true, true, false]);
    // Without one, the server ends every session: no decision is made.
    const without = limiter({ url: mtls.tlsUrl, tls: { caFile: certs.path('ca.crt') }, timeoutMs: 200 });
    await failsWith(without, pol, /tls_failed/);
    assert.equal(without.healthy(), false);
    assert.equal((await withCert.take('k2', pol)).remaining, 2);
  } finally {
    await mtls.stop();
  }
});

test('bad tls and sentinel options throw at once, naming the option', () => {
  const bad = (redis, type, msg) => assert.throws(() => new sluice.Limiter({ store: { redis } }),
    (e) => e instanceof type && msg.test(e.message), `${JSON.stringify(redis)}`);
  const url = 'rediss://127.0.0.1:1';
  bad({ url, tls: 'yes' }, TypeError, /redis\.tls must be an object/);
  bad({ url, tls: null }, TypeError, /redis\.tls must be an object/);
  bad({ url, tls: { ca_file: '/x' } }, TypeError, /redis\.tls has no option "ca_file"/);
  bad({ url, tls: { caFile: 42 } }, TypeError, /redis\.tls\.caFile must be a string/);
  bad({ url, tls: { caFile: '' } }, RangeError, /redis\.tls\.caFile/);
  bad({ url, tls: { caFile: 'a\0b' } }, RangeError, /redis\.tls\.caFile/);
  bad({ url, tls: { keyFile: '/k.pem' } }, TypeError, /keyFile needs certFile/);
  bad({ url, tls: { serverName: 'a b' } }, RangeError, /serverName/);
  bad({ url, tls: { verify: 'false' } }, TypeError, /redis\.tls\.verify must be a boolean/);
  // Files are read when the limiter is made: one that cannot be is the
  // library's error, naming it.
  assert.throws(() => new sluice.Limiter({ store: { redis: { url, tls: { caFile: '/nonexistent/ca.pem' } } } }),
    (e) => e.code === 'ERR_SLUICE_REDIS' && /ca_file "\/nonexistent\/ca\.pem"/.test(e.message));
  assert.throws(() => new sluice.Limiter({ store: { redis: { url, tls: { certFile: certs.path('ca.crt') } } } }),
    (e) => e.code === 'ERR_SLUICE_REDIS' && /key_file/.test(e.message));

  const sentinel = { master: 'mymaster', addrs: ['127.0.0.1:26379'] };
  bad({ sentinel: 'mymaster' }, TypeError, /redis\.sentinel must be an object/);
  bad({ sentinel: { ...sentinel, master: undefined } }, TypeError, /redis\.sentinel\.master must be a string/);
  bad({ sentinel: { ...sentinel, master: 'my master' } }, RangeError, /redis\.sentinel\.master/);
  bad({ sentinel: { ...sentinel, addrs: [] } }, TypeError, /redis\.sentinel\.addrs must be a non-empty list/);
  bad({ sentinel: { ...sentinel, addrs: '127.0.0.1:26379' } }, TypeError, /redis\.sentinel\.addrs/);
  bad({ sentinel: { ...sentinel, addrs: [26379] } }, TypeError, /redis\.sentinel\.addrs/);
  bad({ sentinel: { ...sentinel, addrs: ['127.0.0.1'] } }, RangeError, /"127\.0\.0\.1" is not 'host:port'/);
  bad({ sentinel: { ...sentinel, addrs: ['127.0.0.1:70000'] } }, RangeError, /is not 'host:port'/);
  bad({ sentinel: { ...sentinel, user: 'u' } }, TypeError, /user needs password/);
  bad({ sentinel: { ...sentinel, password: 7 } }, TypeError, /redis\.sentinel\.password must be a string/);
  bad({ sentinel: { ...sentinel, tls: 'yes' } }, TypeError, /redis\.sentinel\.tls must be a boolean/);
  bad({ sentinel: { ...sentinel, sentinels: [] } }, TypeError, /redis\.sentinel has no option "sentinels"/);
  bad({ sentinel, cluster: ['127.0.0.1:7000'] }, TypeError, /sentinel or redis\.cluster, not both/);
  assert.throws(() => new sluice.Limiter({ store: { redis: { sentinel, url: 'unix:///tmp/redis.sock' } } }),
    (e) => e.code === 'ERR_SLUICE_REDIS' && /sentinel/i.test(e.message));
});
