// wait.js -- limiter.wait() on Redis: how fast reservations are answered,
// and how exactly the turns come, across processes.
//
//   REDIS_URL=redis://127.0.0.1:6379 node wait.js [procs] [waits]
//
// Two phases, each run by `procs` processes at once (this script forks
// itself), every process making `waits` wait() calls at once on one key:
//
// - throughput: a bucket too large to drain (every turn is now): wait()
//   calls answered per second over all processes, i.e. reservations the
//   store makes (one atomic call each) and the promises they settle;
// - spacing: one token refilled at RATE (a worker pool sharing a partner's
//   limit): on the server's clock the turns must come exactly one refill
//   apart (their gaps' error: 0 when exact), and each promise resolves
//   after its turn (lateness: the host's clock at resolution, the same
//   CLOCK_REALTIME Redis reads, less turnAtUs; its p50, p99, max), never
//   before; the achieved rate is the calls over the span of the turns.
//
// Prints one JSON line.  Sluice is the package in bindings/node.
'use strict';
const { fork } = require('node:child_process');
const path = require('node:path');

const sluice = require(path.join(__dirname, '..', '..', 'bindings', 'node'));

const RATE = Number(process.env.WAIT_RATE) || 200; // per second

async function child(phase, n) {
  const limiter = new sluice.Limiter({ store: { redis: { url: process.env.REDIS_URL, timeoutMs: 5000 } } });
  const p = phase === 'throughput'
    ? sluice.policy([{ capacity: 1e9, rate: '1000/s' }], { name: 'wait-tp' })
    : sluice.policy([{ capacity: 1, rate: `${RATE}/s` }], { name: 'wait-sp' });
  for (let i = 0; ; i++) {
    try { await limiter.get('warm', p); break; } catch (e) {
      if (i === 100) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  process.send({ ready: true });
  await new Promise((r) => process.once('message', r));
  const t0 = process.hrtime.bigint();
  const out = await Promise.all(Array.from({ length: n }, () => limiter.wait('k', p, { maxWaitMs: 600000 })
    .then((t) => [t.turnAtUs, Date.now() * 1000 - t.turnAtUs])));
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  process.send({ out, s });
  await limiter.close();
}

function pct(sorted, q) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : null;
}

async function phase(name, procs, n) {
  const kids = Array.from({ length: procs }, () => fork(__filename, ['--child', name, String(n)]));
  const msgs = kids.map((k) => new Promise((resolve) => k.on('message', (m) => { if (!m.ready) resolve(m); })));
  await Promise.all(kids.map((k) => new Promise((resolve) => k.once('message', resolve))));
  for (const k of kids) k.send('go');
  const res = await Promise.all(msgs);
  return res;
}

async function main() {
  const procs = Number(process.argv[2]) || 3;
  const n = Number(process.argv[3]) || 2000;
  const tp = await phase('throughput', procs, n);
  const slowest = Math.max(...tp.map((r) => r.s));
  const sp = await phase('spacing', procs, Math.min(n, RATE * 5));
  const turns = sp.flatMap((r) => r.out.map((x) => x[0])).sort((a, b) => a - b);
  const late = sp.flatMap((r) => r.out.map((x) => x[1])).sort((a, b) => a - b);
  const gapUs = 1e6 / RATE;
  let gapErr = 0;
  for (let i = 1; i < turns.length; i++) gapErr = Math.max(gapErr, Math.abs(turns[i] - turns[i - 1] - gapUs));
  const spanS = (turns[turns.length - 1] - turns[0]) / 1e6;
  console.log(JSON.stringify({
    procs,
    throughput_waits: procs * n,
    throughput_waits_per_s: Math.round((procs * n) / slowest),
    spacing_rate_per_s: RATE,
    spacing_waits: turns.length,
    spacing_achieved_per_s: Math.round(((turns.length - 1) / spanS) * 10) / 10,
    spacing_gap_error_us_max: Math.round(gapErr * 1000) / 1000,
    spacing_late_ms_p50: pct(late, 0.5) / 1000,
    spacing_late_ms_p99: pct(late, 0.99) / 1000,
    spacing_late_ms_max: late[late.length - 1] / 1000,
    spacing_early: late.filter((x) => x < 0).length,
  }));
}

if (process.argv[2] === '--child') child(process.argv[3], Number(process.argv[4])).catch((e) => { console.error(e); process.exit(1); });
else main().catch((e) => { console.error(e); process.exit(1); });
