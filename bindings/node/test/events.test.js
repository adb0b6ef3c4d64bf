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
    const l = new sluice.Limiter({ store: { redis: { url: r.url, timeoutMs: 2000 } }, onError: (e) => heard[who].push(e) });
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
