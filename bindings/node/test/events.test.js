// Each Limiter hears only its own Redis: the addon opens every store
// through libsluice's store interface with the Limiter's own events
// (sluice_backend_open_events()), not the process's, so two Limiters in
// one process on two servers keep their 'error' events, onError and the
// reason in a failed take's message apart.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const sluice = require('..');
const { Redis, storeReady, waitFor, sleep } = require('./helpers');

test('two Limiters on two Redis servers: when one server goes, only its Limiter hears of it; the other decides on', async () => {
  const ra = await Redis.start();
  const rb = await Redis.start();
  const heard = { a: [], b: [] };
  const open = (r, who) => {
    const l = new sluice.Limiter({ store: { redis: { url: r.url, timeoutMs: 2000 } }, onStoreError: 'reject', onError: (e) => heard[who].push(e) });
    l.on('error', () => {});
    return l;
  };
  const a = open(ra, 'a');
  const b = open(rb, 'b');
  const pol = sluice.policy([{ capacity: 10, rate: '1/h' }]);
  try {
    await storeReady(a, pol);
    await storeReady(b, pol);
    // The same key on each: two buckets, one per server.
    assert.equal((await a.take('k', pol)).remaining, 9);
    assert.equal((await b.take('k', pol)).remaining, 9);
    assert.equal((await a.take('k', pol)).remaining, 8);

    await rb.kill();
    await waitFor(() => heard.b.length > 0, "b's onError");
    assert.equal(heard.b[0].node, `127.0.0.1:${rb.port}`);
    assert.equal(heard.b[0].reason, 'unreachable');
    // b's takes fail naming b's node; a's are decided as before.
    const e = await b.take('k', pol).then(() => assert.fail('decided on a stopped server'), (err) => err);
    assert.match(e.code, /^ERR_SLUICE_(STORE|TIMEOUT)$/);
    assert.equal((await a.take('k', pol)).remaining, 7);
    assert.equal(a.healthy(), true);
    await sleep(200);
    assert.deepEqual(heard.a.map((x) => x.message), []);
    assert.ok(heard.b.every((x) => x.node === `127.0.0.1:${rb.port}`), heard.b.map((x) => x.message).join('\n'));
  } finally {
    await a.close();
    await b.close();
    await ra.stop();
    await rb.stop();
  }
});

test('logger: a node that goes and comes back is told through the app\'s logger (warn, then info), with no listener', async () => {
  const r = await Redis.start();
  const lines = [];
  // pino-like: methods on the prototype, called with the logger as this.
  class Log {
    warn(m) { lines.push(['warn', m, this instanceof Log]); }
    info(m) { lines.push(['info', m, this instanceof Log]); }
  }
  const l = new sluice.Limiter({ store: { redis: { url: r.url, timeoutMs: 2000 } }, onStoreError: 'reject', logger: new Log() });
  const pol = sluice.policy([{ capacity: 10, rate: '1/h' }]);
  const node = `127.0.0.1:${r.port}`;
  try {
    await storeReady(l, pol);
    await r.kill();
    await waitFor(() => lines.some(([lvl]) => lvl === 'warn'), 'the warning');
    const [lvl, msg, bound] = lines.find(([x]) => x === 'warn');
    assert.equal(lvl, 'warn');
    assert.equal(bound, true);
    assert.match(msg, new RegExp(`^sluice: Redis node ${node.replace(/\./g, '\\.')} cannot be used: unreachable`));
    await r.start(); // the same port again
    await waitFor(async () => { try { await l.take('k', pol); return true; } catch { return false; } }, 'the node back');
    await waitFor(() => lines.some(([x]) => x === 'info'), 'the recovery');
    assert.deepEqual(lines.find(([x]) => x === 'info'), ['info', `sluice: Redis node ${node} answers again`, true]);
    assert.throws(() => new sluice.Limiter({ logger: {} }), { name: 'TypeError', message: /warn\(message\)/ });
  } finally {
    await l.close();
    await r.stop();
  }
});
