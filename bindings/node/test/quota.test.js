// Calendar quotas ({ quota, per, align, tz }): a count per key and
// calendar window, reset when the window ends, beside token buckets in one
// policy (all-or-nothing).  One table of stories run against each local
// store on the limiter's clock (memory, shared memory), then on Redis
// (the script and the module, a real redis-server: the module's test
// clock moves the server's time across a day boundary), the middleware's
// headers, the carry of a policy made again (local stores and Redis),
// and bad input.
//
// No test depends on the real calendar: the local stories run at instants
// of their own, and the Redis ones either set the server's clock or check
// what they read against the server's own TIME before and after (a test
// run across a real boundary retries its window once).
'use strict';
const { test, Redis, BUILD } = require('./helpers');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const sluice = require('..');

const S = 1_000_000; // µs
const at = (iso) => Date.parse(iso) * 1000; // µs since the epoch
let seq = 0;
const uniq = (s) => `q${process.pid}-${++seq}-${s}`;

// A limiter on one local store with a clock the story moves.
function localStores() {
  return [
    ['memory', () => ({})],
    ['shared', (t) => {
      const file = `/dev/shm/sluice-node-quota-${process.pid}-${++seq}`;
      fs.rmSync(file, { force: true });
      t.after(() => fs.rmSync(file, { force: true }));
      return { store: { shared: { path: file, maxKeys: 1000 } } };
    }],
  ];
}

function clocked(t, opts) {
  const clock = { us: 0 };
  const limiter = new sluice.Limiter({ ...opts(t), clock: () => clock.us });
  t.after(() => limiter.close());
  return { limiter, clock };
}

const brief = (d) => ({ allowed: d.allowed, limit: d.limit, remaining: d.remaining, retryAfterMs: d.retryAfterMs, resetMs: d.resetMs });

for (const [store, opts] of localStores()) {
  test(`${store} store: {quota: 3, per: 'day'} refused at 23:59:59 UTC is allowed at 00:00 with remaining 2`, async (t) => {
    const { limiter, clock } = clocked(t, opts);
    const pol = sluice.policy([{ quota: 3, per: 'day' }], { name: uniq('day') });
    clock.us = at('2026-12-07T23:59:58Z');
    assert.deepEqual(brief(await limiter.take('k', pol)), { allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetMs: 2000 });
    clock.us = at('2026-12-07T23:59:59Z');
    assert.equal((await limiter.take('k', pol)).remaining, 1);
    assert.equal((await limiter.take('k', pol)).remaining, 0);
    assert.deepEqual(brief(await limiter.take('k', pol)), { allowed: false, limit: 3, remaining: 0, retryAfterMs: 1000, resetMs: 1000 });
    clock.us = at('2026-12-07T23:59:59.999Z');
    assert.equal((await limiter.take('k', pol)).allowed, false, 'the last millisecond of the day is still that day');
    clock.us = at('2026-12-08T00:00:00Z');
    assert.deepEqual(brief(await limiter.take('k', pol)), { allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetMs: 86400000 });
    // Another key is its own count.
    assert.equal((await limiter.take('other', pol)).remaining, 2);
  });

  test(`${store} store: months in a zone, daylight-saving days, ISO weeks and first-use windows`, async (t) => {
    const { limiter, clock } = clocked(t, opts);
    // February in Berlin starts at 2026-01-31T23:00Z (CET, UTC+1); in UTC an hour later.
    const berlin = sluice.policy([{ quota: 2, per: 'month', tz: 'Europe/Berlin' }], { name: uniq('berlin') });
    const utc = sluice.policy([{ quota: 2, per: 'month' }], { name: uniq('utcmonth') });
    clock.us = at('2026-01-31T22:59:59Z');
    for (const p of [berlin, utc]) {
      assert.equal((await limiter.take('k', p)).allowed, true);
      assert.equal((await limiter.take('k', p)).allowed, true);
    }
    assert.deepEqual(brief(await limiter.take('k', berlin)), { allowed: false, limit: 2, remaining: 0, retryAfterMs: 1000, resetMs: 1000 });
    clock.us = at('2026-01-31T23:00:00Z');
    const feb = await limiter.take('k', berlin);
    assert.equal(feb.allowed, true);
    assert.equal(feb.remaining, 1);
    assert.equal(feb.resetMs, 28 * 86400000, 'February 2026 has 28 days (to 2026-02-28T23:00Z)');
    assert.deepEqual(brief(await limiter.take('k', utc)), { allowed: false, limit: 2, remaining: 0, retryAfterMs: 3600000, resetMs: 3600000 });
    // A leap February, in UTC: 29 days.
    clock.us = at('2028-02-01T00:00:00Z');
    assert.equal((await limiter.take('leap', utc)).resetMs, 29 * 86400000);

    // Berlin's days of 23 and 25 hours.
    const day = sluice.policy([{ quota: 1, per: 'day', tz: 'Europe/Berlin' }], { name: uniq('dst') });
    clock.us = at('2026-03-29T12:00:00Z');
    assert.equal((await limiter.take('spring', day)).resetMs, 10 * 3600000, 'the day ends at 22:00Z (CEST from 01:00Z)');
    clock.us = at('2026-10-25T12:00:00Z');
    assert.equal((await limiter.take('autumn', day)).resetMs, 11 * 3600000, 'the day ends at 23:00Z (CET from 01:00Z)');

    // Weeks run Monday to Monday (2026-12-14 is a Monday).
    const week = sluice.policy([{ quota: 1, per: 'week' }], { name: uniq('week') });
    clock.us = at('2026-12-13T23:59:59Z');
    assert.equal((await limiter.take('w', week)).allowed, true);
    assert.equal((await limiter.take('w', week)).allowed, false);
    clock.us = at('2026-12-14T00:00:00Z');
    const mon = await limiter.take('w', week);
    assert.equal(mon.allowed, true);
    assert.equal(mon.resetMs, 7 * 86400000);

    // First use: the window opens at the first request's second and lasts an hour.
    const fu = sluice.policy([{ quota: 2, per: 'hour', align: 'first_use' }], { name: uniq('fu') });
    clock.us = at('2026-12-07T08:17:03.250Z');
    assert.equal((await limiter.take('f', fu)).resetMs, 3600000 - 250);
    clock.us = at('2026-12-07T09:00:00Z'); // a calendar hour later: still the same window
    assert.equal((await limiter.take('f', fu)).remaining, 0);
    assert.equal((await limiter.take('f', fu)).retryAfterMs, 17 * 60000 + 3000);
    clock.us = at('2026-12-07T09:17:03Z');
    const again = await limiter.take('f', fu);
    assert.equal(again.allowed, true);
    assert.equal(again.resetMs, 3600000, 'a new window opens at this request');
  });

  test(`${store} store: a quota and a token bucket in one policy are charged all-or-nothing`, async (t) => {
    const { limiter, clock } = clocked(t, opts);
    // The quota refuses: the bucket keeps its tokens.
    const a = sluice.policy([{ capacity: 5, rate: '1/168h' }, { quota: 2, per: 'day' }], { name: uniq('mixa') });
    clock.us = at('2026-12-07T08:00:00Z');
    assert.equal((await limiter.take('k', a)).allowed, true);
    assert.equal((await limiter.take('k', a)).allowed, true);
    for (let i = 0; i < 3; i++) {
      const d = await limiter.take('k', a);
      assert.equal(d.allowed, false);
      assert.equal(d.limit, 2, 'the quota decided');
      assert.equal(d.retryAfterMs, 16 * 3600000);
    }
    clock.us = at('2026-12-08T08:00:00Z');
    // The next day: the bucket holds 5 - 2 (+ a seventh of a token), so
    // two pass and the quota refuses the third.  Had the three refused
    // requests charged the bucket, it would refuse these (limit 5).
    for (let i = 0; i < 2; i++) {
      const d = await limiter.take('k', a);
      assert.equal(d.allowed, true, `take ${i} of the second day: the refusals charged the bucket nothing`);
    }
    const third = await limiter.take('k', a);
    assert.equal(third.allowed, false);
    assert.equal(third.limit, 2, 'refused by the quota again, not the bucket');
    clock.us = at('2026-12-09T08:00:00Z');
    assert.equal((await limiter.take('k', a)).allowed, true);
    const fourth = await limiter.take('k', a);
    assert.equal(fourth.allowed, false);
    assert.equal(fourth.limit, 5, 'now the bucket is spent (5 taken, two sevenths refilled)');

    // The bucket refuses: the quota keeps its count.
    const b = sluice.policy([{ capacity: 1, rate: '1/h' }, { quota: 3, per: 'day' }], { name: uniq('mixb') });
    clock.us = at('2026-12-07T08:00:00Z');
    assert.equal((await limiter.take('k', b)).allowed, true);
    for (let i = 0; i < 5; i++) {
      const d = await limiter.take('k', b);
      assert.equal(d.allowed, false);
      assert.equal(d.limit, 1, 'the bucket decided');
    }
    clock.us = at('2026-12-07T09:00:00Z');
    assert.equal((await limiter.take('k', b)).allowed, true);
    clock.us = at('2026-12-07T10:00:00Z');
    assert.equal((await limiter.take('k', b)).allowed, true, 'the five refused requests charged the quota nothing');
    clock.us = at('2026-12-07T11:00:00Z');
    const q = await limiter.take('k', b);
    assert.equal(q.allowed, false);
    assert.equal(q.limit, 3, 'now the quota is spent');
    assert.equal(q.retryAfterMs, 13 * 3600000);
  });

  test(`${store} store: no way around a quota: a clock stepping back, peeks, costs above the quota, refunds and the verbs`, async (t) => {
    const { limiter, clock } = clocked(t, opts);
    const pol = sluice.policy([{ quota: 3, per: 'day' }], { name: uniq('sec') });
    clock.us = at('2026-12-07T10:00:00Z');
    for (let i = 0; i < 3; i++) assert.equal((await limiter.take('k', pol)).allowed, true);
    // The clock steps back across the boundary: the count of the later day holds.
    clock.us = at('2026-12-06T23:59:59Z');
    assert.equal((await limiter.take('k', pol)).allowed, false, 'a clock stepping back never grants');
    clock.us = at('2026-12-07T10:00:01Z');
    // Peeks (cost 0, and get: what a take of 1 would leave) charge nothing.
    const pol2 = sluice.policy([{ quota: 3, per: 'day' }], { name: uniq('peek') });
    const left = async () => (await limiter.take('p', pol2, { cost: 0 })).remaining;
    for (let i = 0; i < 5; i++) assert.equal(await left(), 3);
    assert.equal((await limiter.get('p', pol2)).remaining, 2);
    assert.equal((await limiter.get('p', pol2)).remaining, 2);
    assert.equal((await limiter.take('p', pol2)).remaining, 2);
    // A cost above the quota never passes, and charges nothing.
    const big = await limiter.take('p', pol2, { cost: 4 });
    assert.equal(big.allowed, false);
    assert.equal(big.retryAfterMs, Infinity);
    assert.equal(await left(), 2);
    // A multi-cost take past the remaining count is refused whole.
    assert.equal((await limiter.take('p', pol2, { cost: 3 })).allowed, false);
    assert.equal((await limiter.take('p', pol2, { cost: 2 })).remaining, 0);
    // refund gives back, never below an unused window; set, block, penalize, reset.
    await limiter.refund('p', pol2, 1);
    assert.equal(await left(), 1);
    await limiter.refund('p', pol2, 10);
    assert.equal(await left(), 3, 'a refund never gives more than the window held');
    await limiter.block('p', pol2, 60000);
    assert.equal((await limiter.take('p', pol2)).allowed, false, 'a block spends the window');
    await limiter.reset('p', pol2);
    assert.equal(await left(), 3);
    await limiter.set('p', pol2, 1);
    assert.equal((await limiter.take('p', pol2)).remaining, 0);
    await limiter.penalize('p', pol2, 5);
    clock.us = at('2026-12-07T23:59:59Z');
    assert.equal((await limiter.take('p', pol2)).allowed, false, 'a penalty is a debt within the window');
    clock.us = at('2026-12-08T00:00:00Z');
    assert.equal((await limiter.take('p', pol2)).remaining, 2, 'a new window starts unused');
    // wait(): a turn is now or at the window's end, never a guess in between.
    const w = await limiter.wait('p', pol2, { maxWaitMs: 1000 });
    assert.equal(w.waitMs, 0);
    await limiter.take('p', pol2);
    await assert.rejects(limiter.wait('p', pol2, { maxWaitMs: 60000 }),
      (e) => e.code === 'ERR_SLUICE_WAIT' && e.waitMs === 86400000);
    assert.equal(await left(), 0, 'the refused wait charged nothing');
  });

  test(`${store} store: a policy made again with the same name keeps each key's count`, async (t) => {
    const { limiter, clock } = clocked(t, opts);
    // The clock stands at the real time this test started: a policy's
    // earlier limits are kept for a time measured on the wall clock
    // (policies belong to no limiter), and a standing clock crosses no
    // boundary however long the test takes.
    clock.us = Date.now() * 1000;
    const take = async (key, p, n) => { let d; for (let i = 0; i < n; i++) d = await limiter.take(key, p); return d; };
    // Quota lowered: a key that used 4 of 5 is spent under 3.
    let name = uniq('carryq');
    await take('k', sluice.policy([{ quota: 5, per: 'day' }], { name }), 4);
    let d = await limiter.take('k', sluice.policy([{ quota: 3, per: 'day' }], { name }));
    assert.equal(d.allowed, false);
    assert.equal(d.limit, 3);
    // Raised: the difference.
    name = uniq('carryup');
    await take('k', sluice.policy([{ quota: 5, per: 'day' }], { name }), 4);
    d = await limiter.take('k', sluice.policy([{ quota: 10, per: 'day' }], { name }));
    assert.equal(d.remaining, 5);
    // A bucket's shortfall becomes the quota's count, and back.
    name = uniq('carryb2q');
    await take('k', sluice.policy([{ capacity: 5, rate: '1/day' }], { name }), 4);
    assert.equal((await limiter.take('k', sluice.policy([{ quota: 10, per: 'day' }], { name }))).remaining, 5);
    name = uniq('carryq2b');
    await take('k', sluice.policy([{ quota: 5, per: 'day' }], { name }), 3);
    assert.equal((await limiter.take('k', sluice.policy([{ capacity: 5, rate: '1/day' }], { name }))).remaining, 1);
  });
}

// ------------------------------------------------------------- headers

// One request through the middlewares on a synthetic response (the
// limiter's clock decides).
function call(mw, key) {
  const req = new http.IncomingMessage(null);
  req.headers = {};
  req.user = key;
  const res = new http.ServerResponse(req);
  let passed = false;
  mw(req, res, (err) => { if (err) throw err; passed = true; });
  const h = (n) => (res.getHeader(n) === undefined ? undefined : String(res.getHeader(n)));
  return { passed, status: passed ? 200 : res.statusCode, policy: h('RateLimit-Policy'), rl: h('RateLimit'),
    reset: h('X-RateLimit-Reset'), remaining: h('X-RateLimit-Remaining'), limit: h('X-RateLimit-Limit'), retry: h('Retry-After') };
}

test('middleware: a quota\'s headers say the window (w=86400 for a day) and count to its end', () => {
  let now = at('2026-12-07T23:59:58Z');
  const limiter = new sluice.Limiter({ clock: () => now });
  const pol = sluice.policy([{ quota: 3, per: 'day' }], { name: 'daily' });
  const mw = sluice.express({ limiter, policy: pol, key: (req) => req.user });
  let r = call(mw, 'u');
  assert.deepEqual(r, { passed: true, status: 200, policy: '"daily";q=3;w=86400', rl: '"daily";r=2;t=2',
    reset: '2', remaining: '2', limit: '3', retry: undefined });
  call(mw, 'u');
  call(mw, 'u');
  now = at('2026-12-07T23:59:59Z');
  r = call(mw, 'u');
  assert.equal(r.status, 429);
  assert.equal(r.rl, '"daily";r=0;t=1');
  assert.equal(r.retry, '1');
  now = at('2026-12-08T00:00:00Z');
  r = call(mw, 'u');
  assert.equal(r.status, 200);
  assert.equal(r.rl, '"daily";r=2;t=86400');
  assert.equal(r.reset, '86400');
  // w= the current window's length, as sluice serve says it: December
  // has 31 days, 2026 365, Berlin's 2026-03-29 23 hours; a mixed policy
  // lists each limit, the deciding one first.
  const units = { second: 1, minute: 60, hour: 3600, day: 86400, week: 604800, month: 31 * 86400, year: 365 * 86400 };
  for (const [per, w] of Object.entries(units)) {
    const p = sluice.policy([{ quota: 7, per }], { name: `u${per}` });
    assert.equal(call(sluice.express({ limiter, policy: p, key: () => 'x' }), 'x').policy, `"u${per}";q=7;w=${w}`);
  }
  now = at('2026-03-29T12:00:00Z');
  const dst = sluice.policy([{ quota: 7, per: 'day', tz: 'Europe/Berlin' }, { quota: 9, per: 'day', align: 'first_use' }], { name: 'dst' });
  assert.equal(call(sluice.express({ limiter, policy: dst, key: () => 'x' }), 'x').policy, '"dst";q=7;w=82800, "dst.2";q=9;w=86400');
  // A cost that can never pass waits a whole window.
  const never = call(sluice.express({ limiter, policy: dst, key: () => 'y', cost: 8 }), 'y');
  assert.equal(never.status, 429);
  assert.equal(never.retry, '82800');
  const mixed = sluice.policy([{ capacity: 10, rate: '1/s' }, { quota: 2, per: 'hour' }], { name: 'mixed' });
  const mmw = sluice.express({ limiter, policy: mixed, key: (req) => req.user });
  now = at('2026-12-08T10:30:00Z');
  assert.equal(call(mmw, 'm').policy, '"mixed";q=2;w=3600, "mixed.1";q=10;w=10', 'the quota, with 1 left, decides');
  call(mmw, 'm');
  const refused = call(mmw, 'm');
  assert.equal(refused.status, 429);
  assert.equal(refused.retry, '1800');
  assert.equal(refused.rl, '"mixed";r=0;t=1800');
});

// ---------------------------------------------------------------- Redis

// The server's clock, in µs.
function serverNow(redis) {
  const [s, us] = redis.cli('TIME').trim().split('\n').map(Number);
  return s * S + us;
}

test('Redis (script and module): counts per window, all-or-nothing with a bucket, the key expiring at the window\'s end', async (t) => {
  const module = path.join(BUILD, 'sluice-redis.so');
  assert.ok(fs.existsSync(module), `${module} is built with sluice`);
  const redis = await Redis.start(['--loadmodule', module]);
  t.after(() => redis.stop());
  for (const scriptOnly of [true, false]) {
    const prefix = scriptOnly ? 'qs:' : 'qm:';
    const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 5000, keyPrefix: prefix, scriptOnly } } });
    try {
      // First use: no calendar boundary can fall inside the test.
      const fu = sluice.policy([{ quota: 3, per: 'day', align: 'first_use' }], { name: uniq('rfu') });
      const t0 = serverNow(redis);
      const got = [];
      for (let i = 0; i < 4; i++) got.push(await limiter.take('alice', fu));
      const t1 = serverNow(redis);
      assert.deepEqual(got.map((d) => d.allowed), [true, true, true, false]);
      assert.deepEqual(got.map((d) => d.remaining), [2, 1, 0, 0]);
      // The window opened at the first take's second: it ends 86400 s later.
      const endLo = Math.floor(t0 / S) * S + 86400 * S;
      const endHi = Math.floor(t1 / S) * S + 86400 * S;
      assert.ok(got[3].retryAfterMs * 1000 <= endHi - t0 && got[3].retryAfterMs * 1000 >= endLo - t1 - 1000,
        `retry ${got[3].retryAfterMs} ms: to the window's end`);
      const keys = redis.cli('--scan', '--pattern', `${prefix}*`).trim().split('\n').filter(Boolean);
      assert.equal(keys.length, 1, keys.join(','));
      const pttl = Number(redis.cli('PTTL', keys[0]).trim());
      assert.ok(pttl > 86400000 - (t1 - t0) / 1000 - 2000 && pttl <= 86401000, `PTTL ${pttl}: the window's end (and at most a second)`);

      // Calendar days on the server's clock: refused until the server's
      // midnight; a request the bucket refuses charges the quota nothing
      // (its stored count, end_s * 10^9 + used, says so).
      for (let attempt = 0; ; attempt++) {
        const name = uniq('rcal');
        const cal = sluice.policy([{ quota: 2, per: 'day' }, { capacity: 10, rate: '1/168h' }], { name });
        const mix = sluice.policy([{ capacity: 1, rate: '1/168h' }, { quota: 3, per: 'day' }], { name: `${name}-b` });
        const a = serverNow(redis);
        const d = [];
        for (let i = 0; i < 3; i++) d.push(await limiter.take('bob', cal));
        const m = [];
        for (let i = 0; i < 3; i++) m.push(await limiter.take('bob', mix));
        const b = serverNow(redis);
        const dayEnd = (us) => (Math.floor(us / (86400 * S)) + 1) * 86400 * S;
        if (dayEnd(a) !== dayEnd(b)) { assert.ok(attempt < 1, 'two day boundaries in one test'); continue; }
        assert.deepEqual(d.map((x) => x.allowed), [true, true, false]);
        assert.equal(d[2].limit, 2, 'the quota refused');
        assert.ok(d[2].retryAfterMs * 1000 <= dayEnd(a) - a + 1000 && d[2].retryAfterMs * 1000 >= dayEnd(a) - b - 1000,
          `retry ${d[2].retryAfterMs} ms: to the server's midnight`);
        assert.deepEqual(m.map((x) => [x.allowed, x.limit]), [[true, 1], [false, 1], [false, 1]]);
        const qkeys = redis.cli('--scan', '--pattern', `${prefix}{${name}-b*3@day`).trim().split('\n').filter(Boolean);
        assert.equal(qkeys.length, 1, `the quota's key: ${qkeys}`);
        const state = BigInt(redis.cli('GET', qkeys[0]).trim());
        assert.equal(state % 1000000000n, 1n, 'one request counted: the two the bucket refused charged nothing');
        assert.equal(state / 1000000000n, BigInt(dayEnd(a) / S), 'the count belongs to the window ending at the server\'s midnight');
        break;
      }
    } finally {
      await limiter.close();
    }
  }
  const stats = redis.cli('INFO', 'commandstats');
  assert.match(stats, /cmdstat_sluice\.take[^:]*:calls=[1-9]/i, 'the module decided some');
  assert.match(stats, /cmdstat_evalsha:calls=[1-9]/, 'the script decided some');
});

// ------------------------------------------------------------ bad input

test('bad quotas are refused with a TypeError or RangeError naming the limit and the option', () => {
  const bad = [
    [{ quota: '10', per: 'day' }, TypeError, /limit 0: quota must be a number, got string/],
    [{ quota: 0, per: 'day' }, RangeError, /limit 0: quota must be a whole number of requests from 1 to 999999999, got 0/],
    [{ quota: 1.5, per: 'day' }, RangeError, /got 1\.5/],
    [{ quota: -3, per: 'day' }, RangeError, /got -3/],
    [{ quota: 1e9, per: 'day' }, RangeError, /got 1000000000/],
    [{ quota: NaN, per: 'day' }, RangeError, /got NaN/],
    [{ quota: 10 }, TypeError, /per must be a string \(second, minute, hour, day, week, month, year\), got undefined/],
    [{ quota: 10, per: 86400 }, TypeError, /per must be a string/],
    [{ quota: 10, per: 'fortnight' }, RangeError, /per must be one of second, minute, hour, day, week, month, year, got "fortnight"/],
    [{ quota: 10, per: 'Day' }, RangeError, /got "Day"/],
    [{ quota: 10, per: '1/day' }, RangeError, /got "1\/day"/],
    [{ quota: 10, per: 'day', align: 'midnight' }, RangeError, /align must be 'calendar' or 'first_use', got "midnight"/],
    [{ quota: 10, per: 'day', align: true }, TypeError, /align must be/],
    [{ quota: 10, per: 'day', tz: 'Mars/Olympus_Mons' }, RangeError, /limit 0: .*Mars\/Olympus_Mons/],
    [{ quota: 10, per: 'day', tz: '../../../etc/passwd' }, RangeError, /limit 0: .*etc\/passwd/],
    [{ quota: 10, per: 'day', tz: '/etc/passwd' }, RangeError, /limit 0: /],
    [{ quota: 10, per: 'day', tz: '' }, RangeError, /tz must be an IANA time zone name/],
    [{ quota: 10, per: 'day', tz: 'Europe/Berlin\0' }, RangeError, /tz must be an IANA time zone name/],
    [{ quota: 10, per: 'day', tz: 1 }, TypeError, /tz must be an IANA time zone name such as 'Europe\/Berlin', got number/],
    [{ quota: 10, per: 'day', align: 'first_use', tz: 'Europe/Berlin' }, RangeError, /tz applies to calendar windows/],
    [{ quota: 10, per: 'day', capacity: 10 }, TypeError, /a token bucket \{ capacity, rate \} or a calendar quota \{ quota, per \}, not both/],
    [{ quota: 10, per: 'day', rate: '10/day' }, TypeError, /not both/],
    [{ capacity: 10, per: 'day' }, TypeError, /unknown option "per"; in sluice that is rate .* a calendar quota is \{ quota: 10000, per: 'month' \}/],
    [{ quota: 10, per: 'day', timezone: 'UTC' }, TypeError, /unknown option "timezone"; in sluice that is tz/],
    [{ quota: 10, unit: 'day' }, TypeError, /unknown option "unit"; in sluice that is per/],
    [{ quota: 10, per: 'day', aligne: 'calendar' }, TypeError, /unknown option "aligne" \(did you mean "align"\?\)/],
  ];
  for (const [spec, type, msg] of bad) {
    assert.throws(() => sluice.policy([spec]), (e) => e instanceof type && msg.test(e.message), `${JSON.stringify(spec)} (${String(spec.tz)})`);
  }
  // In a mixed policy, the message names the position; nothing is made.
  assert.throws(() => sluice.policy([{ capacity: 5, rate: '1/s' }, { quota: 5, per: 'day', tz: 'No/Such_Zone' }]),
    (e) => e instanceof RangeError && /^limit 1: /.test(e.message) && /No\/Such_Zone/.test(e.message));
  // What is taken: plural units, every unit, a zone, both alignments.
  for (const per of ['second', 'minutes', 'hour', 'days', 'week', 'month', 'years']) sluice.policy([{ quota: 1, per }]);
  const p = sluice.policy([{ quota: 999999999, per: 'month', tz: 'America/New_York' }, { quota: 1, per: 'hour', align: 'first_use' }, { capacity: 1, rate: '1/s' }]);
  assert.deepEqual(p.limits, [{ quota: 999999999, per: 'month', align: 'calendar', tz: 'America/New_York' },
    { quota: 1, per: 'hour', align: 'first_use', tz: 'UTC' }, { capacity: 1, rate: '1/s' }]);
  assert.ok(Object.isFrozen(p.limits[0]));
});

test('Redis (script and module): {quota: 3, per: \'day\'} refused at 23:59:59 UTC on the server\'s clock is allowed at 00:00 with remaining 2', async (t) => {
  // The server's wall clock stands where the test writes it
  // (tests/tools/frozen_clock.c, FROZEN_CLOCK_FILE): the script's TIME and
  // the module's clock both read it.  The client's clock plays no part in
  // a UTC day (the server computes the window).
  const shim = path.join(BUILD, 'libfrozen_clock.so');
  const module = path.join(BUILD, 'sluice-redis.so');
  assert.ok(fs.existsSync(shim) && fs.existsSync(module), `${shim} and ${module} are built with sluice`);
  const clockFile = path.join(fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'sluice-quota-')), 'now');
  t.after(() => fs.rmSync(path.dirname(clockFile), { recursive: true, force: true }));
  const setClock = (iso) => fs.writeFileSync(clockFile, String(at(iso)));
  setClock('2026-12-07T12:00:00Z');
  const saved = { LD_PRELOAD: process.env.LD_PRELOAD, FROZEN_CLOCK_FILE: process.env.FROZEN_CLOCK_FILE };
  let redis;
  try {
    process.env.LD_PRELOAD = shim;
    process.env.FROZEN_CLOCK_FILE = clockFile;
    redis = await Redis.start(['--loadmodule', module]);
  } finally {
    for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k]; else process.env[k] = v;
  }
  t.after(() => redis.stop());
  assert.equal(serverNow(redis), at('2026-12-07T12:00:00Z'), 'the server reads the test\'s clock');
  for (const scriptOnly of [true, false]) {
    const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 5000, keyPrefix: scriptOnly ? 'bs:' : 'bm:', scriptOnly } } });
    try {
      const pol = sluice.policy([{ quota: 3, per: 'day' }], { name: uniq('rday') });
      setClock('2026-12-07T23:59:58Z');
      assert.deepEqual(brief(await limiter.take('k', pol)), { allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetMs: 2000 });
      setClock('2026-12-07T23:59:59Z');
      assert.equal((await limiter.take('k', pol)).remaining, 1);
      assert.equal((await limiter.take('k', pol)).remaining, 0);
      assert.deepEqual(brief(await limiter.take('k', pol)), { allowed: false, limit: 3, remaining: 0, retryAfterMs: 1000, resetMs: 1000 });
      setClock('2026-12-08T00:00:00Z');
      assert.deepEqual(brief(await limiter.take('k', pol)), { allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetMs: 86400000 });
      // A clock stepping back never grants.
      setClock('2026-12-07T23:59:59Z');
      await limiter.take('k', pol);
      assert.equal((await limiter.take('k', pol)).allowed, true, 'the later window keeps counting: 3 of 3');
      assert.equal((await limiter.take('k', pol)).allowed, false);
    } finally {
      await limiter.close();
    }
  }
  const stats = redis.cli('INFO', 'commandstats');
  assert.match(stats, /cmdstat_sluice\.take[^:]*:calls=[1-9]/i, 'the module decided some');
});

// The carry on Redis, on both paths: the stories of the local stores,
// on first-use windows (no calendar boundary can fall inside the test).
test('Redis (script and module): a policy made again with the same name keeps each key\'s quota count', async (t) => {
  const redis = await Redis.start(['--loadmodule', path.join(BUILD, 'sluice-redis.so')]);
  t.after(() => redis.stop());
  for (const scriptOnly of [true, false]) {
    const limiter = new sluice.Limiter({ store: { redis: { url: redis.url, timeoutMs: 5000, scriptOnly } } });
    const how = `scriptOnly ${scriptOnly}`;
    try {
      const take = async (key, p, n) => { for (let i = 0; i < n; i++) await limiter.take(key, p); };
      const q = (n, name) => sluice.policy([{ quota: n, per: 'day', align: 'first_use' }], { name });
      let name = uniq('rcarry');
      await take('k', q(5, name), 4);
      const d = await limiter.take('k', q(3, name));
      assert.equal(d.allowed, false, `${how}: 4 used stay used under a quota of 3`);
      assert.equal(d.limit, 3);
      name = uniq('rcarryup');
      await take('k', q(5, name), 4);
      assert.equal((await limiter.take('k', q(10, name))).remaining, 5, `${how}: raised, the difference`);
      name = uniq('rcarryb2q');
      await take('k', sluice.policy([{ capacity: 5, rate: '1/day' }], { name }), 4);
      assert.equal((await limiter.take('k', q(10, name))).remaining, 5, `${how}: a bucket's shortfall becomes the count`);
      name = uniq('rcarryq2b');
      await take('k', q(5, name), 3);
      assert.equal((await limiter.take('k', sluice.policy([{ capacity: 5, rate: '1/day' }], { name }))).remaining, 1,
        `${how}: a count becomes a bucket's shortfall`);
    } finally {
      await limiter.close();
    }
  }
});
