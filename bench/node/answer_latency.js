// answer_latency.js -- how long a Node app waits for Redis's answers on a
// busy host: the figure the Limiter's default timeoutMs is chosen from.
//
//   node bench/node/answer_latency.js [seconds=20] [busy loops=2] [in flight=64]
//
// Starts its own redis-server on a free loopback port and `busy` CPU-bound
// node processes beside it (each ends by itself after the run plus 10 s,
// and is killed by its pid when the run ends), then runs an app's worth of
// takes for `seconds`: 64 requests in flight (or `in flight`), each a take on the sluice
// Redis store (default client, a timeout too long to fire) followed by
// ~50 µs of synchronous work, as a route handler does.  A sample is the time
// from take() to its promise's callback, as the app sees it: Redis's own
// time, the network, and the time the event loop (and the host) took to
// get to the answer.  Prints one JSON line: the samples, their
// percentiles (p50, p99, p99.9, max, in ms), the event loop's delay
// percentiles and the load average before and after.
'use strict';
const { spawn } = require('node:child_process');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { monitorEventLoopDelay } = require('node:perf_hooks');
const sluice = require(path.resolve(__dirname, '../../bindings/node'));

const SECONDS = Number(process.argv[2] || 20);
const BUSY = Number(process.argv[3] === undefined ? 2 : process.argv[3]);
const IN_FLIGHT = Number(process.argv[4] || 64);

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

async function startRedis() {
  const port = await freePort();
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'no'], { stdio: 'ignore' });
  for (let i = 0; i < 200; i++) {
    const up = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => { c.end(); resolve(true); });
      c.on('error', () => resolve(false));
    });
    if (up) return { proc, port };
    await sleep(25);
  }
  proc.kill('SIGKILL');
  throw new Error('redis-server did not start');
}

// ~50 µs of the synchronous work a handler does (JSON in and out).
function handlerWork(i) {
  let s = '';
  for (let k = 0; k < 20; k++) s = JSON.stringify({ user: `u${i}`, k, items: [1, 2, 3, s.length] });
  return s.length;
}

function pct(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

async function main() {
  const redis = await startRedis();
  const burners = [];
  for (let i = 0; i < BUSY; i++) {
    const ms = (SECONDS + 10) * 1000;
    burners.push(spawn(process.execPath, ['-e', `const e = Date.now() + ${ms}; while (Date.now() < e) {}`],
      { stdio: 'ignore' }));
  }
  const limiter = new sluice.Limiter({ store: { redis: { url: `redis://127.0.0.1:${redis.port}`, timeoutMs: 60000 } },
    onStoreError: 'reject' });
  const policy = sluice.policy([{ capacity: 100, rate: '2/s' }]);
  const loadBefore = os.loadavg()[0];
  const samples = [];
  let sink = 0;
  try {
    await limiter.take('warm', policy, { cost: 0 });
    await sleep(1000); // the burners at full speed
    const delay = monitorEventLoopDelay({ resolution: 1 });
    delay.enable();
    const end = Date.now() + SECONDS * 1000;
    const worker = async (w) => {
      for (let i = 0; Date.now() < end; i++) {
        const t0 = process.hrtime.bigint();
        await limiter.take(`u${(w * 7919 + i) % 10000}`, policy);
        samples.push(Number(process.hrtime.bigint() - t0) / 1e6);
        sink += handlerWork(i);
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, (_, w) => worker(w)));
    delay.disable();
    samples.sort((a, b) => a - b);
    const r = (v) => Math.round(v * 100) / 100;
    console.log(JSON.stringify({
      node: process.version, cpus: os.cpus().length, cpu: os.cpus()[0].model, busy_loops: BUSY,
      seconds: SECONDS, in_flight: IN_FLIGHT, samples: samples.length,
      answer_ms: { p50: r(pct(samples, 0.5)), p99: r(pct(samples, 0.99)), p999: r(pct(samples, 0.999)),
        max: r(samples[samples.length - 1]) },
      loop_delay_ms: { p50: r(delay.percentile(50) / 1e6), p99: r(delay.percentile(99) / 1e6),
        p999: r(delay.percentile(99.9) / 1e6), max: r(delay.max / 1e6) },
      load_before: loadBefore, load_after: os.loadavg()[0], sink: sink > 0,
    }));
  } finally {
    await limiter.close();
    for (const b of burners) b.kill('SIGKILL');
    redis.proc.kill('SIGKILL');
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
