// overhead.js -- the limiter's own node CPU per call, without HTTP: each
// variant's middleware (the same one its app serves) is called directly
// on Express request/response objects, 50 calls in flight, and the
// process's CPU time per call is compared with a middleware that does
// nothing, driven the same way.  Express and the HTTP stack cost ~100 µs
// per request and move with the machine's load; this isolates the few µs
// a limiter adds.
//
// The request and response are made as node and Express make them (an
// IncomingMessage and a ServerResponse, given the app's prototypes by
// Object.setPrototypeOf after the properties expressInit adds, and then
// the ones Express adds later), because V8 gives such objects a new hidden
// class for every property added after the prototype change: what a
// middleware adds to the request costs it as much as in the app.  And
// when the middleware is done, the response's head is rendered
// (writeHead, as res.end would), so that the headers a limiter sets are
// paid for as the app pays for them.
//
//   REDIS_URL=redis://127.0.0.1:6379 node overhead.js [calls] [variant ...]
//
// How it is kept steady (a ~25 µs no-op baseline, limiters of 3-30 µs,
// and a single figure per variant used to move by ±10 µs from run to run):
//
// - Many short chunks (`calls` calls each, OVERHEAD_PASSES passes), not a
//   few long rounds: in each pass every variant runs one chunk, between
//   two chunks of the no-op, and its figure for that pass is its CPU per
//   call minus the mean of the two no-op chunks beside it (a drift of the
//   machine's speed within the pass cancels).  The order of the variants
//   rotates from pass to pass, so that none always follows the same one.
//   Each variant's figure is the median over the passes, with the
//   interquartile range (25th to 75th percentile) as its spread.
// - A young-generation collection (gc({type: 'minor'}), --expose-gc)
//   before every chunk, with semi-spaces of a fixed 16 MB (the size node
//   grows them to under load; for every variant alike): each chunk starts
//   with an empty young generation, so the scavenges inside it depend on
//   what the chunk allocates (~13 kB a call, mostly the request and
//   response), not on where the chunk before (of another variant) left
//   off.  Not a full collection: a full one before every chunk ages the
//   bytecode of whatever did not run in the last few, which V8 then
//   flushes and compiles again -- it put the no-op at 35 µs instead of 15.
//   The collector runs on the main thread (--single-threaded-gc): node is
//   pinned to one CPU, where helper threads only take turns with it, and
//   their work is then counted in the chunk that caused it.  And it
//   scavenges when the young generation is full, not when an idle-time
//   task happens to run (--no-minor-gc-task), so that where a scavenge
//   falls does not depend on timing.
// - Every variant (and the no-op) is warmed up first (OVERHEAD_WARMUP
//   calls each, default 4 chunks' worth), so that the JIT has compiled it
//   before the first measured chunk.
// - The users cycle over 10,000 keys across chunks (no chunk starts over
//   at the first user), so that no key nears its limit.
//
// The process re-executes itself with those node flags when started
// without them (OVERHEAD_FLAGS replaces them, space-separated; it must
// keep --expose-gc).  OVERHEAD_TRACE=1 prints every chunk (variant, µs
// per call, involuntary context switches) on stderr.  Prints one JSON object: { variant: median µs of node CPU
// per call beyond the no-op's }, and under "iqr" and "range" each
// variant's [25th, 75th percentile] and [min, max] over the passes.
const http = require('http');
const net = require('net');
const path = require('path');

const FLAGS = process.env.OVERHEAD_FLAGS !== undefined
  ? process.env.OVERHEAD_FLAGS.split(' ').filter(Boolean)
  : ['--expose-gc', '--single-threaded-gc', '--no-minor-gc-task',
    '--min-semi-space-size=16', '--max-semi-space-size=16'];

if (require.main === module &&
    !FLAGS.every((f) => process.execArgv.includes(f))) {
  const r = require('child_process').spawnSync(process.execPath,
    [...process.execArgv, ...FLAGS, __filename, ...process.argv.slice(2)],
    { stdio: 'inherit' });
  process.exit(r.status === null ? 1 : r.status);
}

const express = require('express');

if (typeof global.gc !== 'function') {
  throw new Error('overhead.js needs --expose-gc (OVERHEAD_FLAGS without it?)');
}

const INFLIGHT = 50;
const USERS = 10000;
const PASSES = Number(process.env.OVERHEAD_PASSES || 30);

const app = express();
const sock = new net.Socket();

// What Express hands a middleware (expressInit, then the query parser):
// a request and a response (never sent) on the app's prototypes.
function exchange(user, next) {
  const req = new http.IncomingMessage(sock);
  req.method = 'GET';
  req.url = '/';
  req.headers = { 'x-user-id': user };
  const res = new http.ServerResponse(req);
  req.res = res;
  res.req = req;
  req.next = next;
  Object.setPrototypeOf(req, app.request);
  Object.setPrototypeOf(res, app.response);
  res.locals = Object.create(null);
  req.query = {};
  return [req, res];
}

// Where each variant's next chunk starts in the users' cycle.
const cursor = {};

// `calls` calls of mw, INFLIGHT at a time; each call's next() starts the
// next one from the event loop (setImmediate), as a new request would.
// Resolves to the process's CPU µs per call (all threads, user + system).
function drive(name, mw, calls) {
  return new Promise((resolve, reject) => {
    let started = 0;
    let idle = 0;
    const first = cursor[name] || 0;
    cursor[name] = first + calls;
    const timer = setTimeout(() => reject(new Error('no progress in 120 s')),
      120000);
    global.gc({ type: 'minor' });
    const t0 = process.cpuUsage();
    const s0 = process.resourceUsage().involuntaryContextSwitches;
    function go() {
      if (started >= calls) {
        if (++idle === INFLIGHT) {
          const d = process.cpuUsage(t0);
          const sw = process.resourceUsage().involuntaryContextSwitches - s0;
          clearTimeout(timer);
          if (process.env.OVERHEAD_TRACE) {
            console.error(`${name} ${((d.user + d.system) / calls).toFixed(2)} ${sw}`);
          }
          resolve((d.user + d.system) / calls);
        }
        return;
      }
      const i = first + started;
      const [req, res] = exchange(`user-${(i * 7919) % USERS}`, go);
      started++;
      // A 429 (not expected at these counts) ends the call like next().
      res.end = () => setImmediate(go);
      mw(req, res, () => {
        res.writeHead(200);
        setImmediate(go);
      });
    }
    for (let i = 0; i < INFLIGHT; i++) go();
  });
}

function quantile(a, q) {
  const s = [...a].sort((x, y) => x - y);
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return s[lo] + (s[hi] - s[lo]) * (pos - lo);
}

async function main() {
  const calls = Number(process.argv[2] || 2000);
  const names = process.argv.slice(3);
  const warm = Number(process.env.OVERHEAD_WARMUP || 4 * calls);
  const mws = {};
  for (const n of names) {
    mws[n] = await require(path.join(__dirname, n.replace(/_/g, '-')))
      .middleware();
  }
  const noop = (req, res, next) => next();
  // Warm-up, unmeasured: the no-op and every variant, in chunks, in turn.
  for (let done = 0; done < warm; done += calls) {
    await drive('noop', noop, calls);
    for (const n of names) await drive(n, mws[n], calls);
  }
  const own = Object.fromEntries(names.map((n) => [n, []]));
  const abs = Object.fromEntries(names.map((n) => [n, []]));
  const noops = [];
  for (let p = 0; p < PASSES; p++) {
    const order = names.map((_, i) => names[(i + p) % names.length]);
    let before = await drive('noop', noop, calls);
    noops.push(before);
    for (const n of order) {
      const v = await drive(n, mws[n], calls);
      const after = await drive('noop', noop, calls);
      noops.push(after);
      own[n].push(v - (before + after) / 2);
      abs[n].push(v);
      before = after;
    }
  }
  const r2 = (v) => Math.round(v * 100) / 100;
  const out = { iqr: {}, range: {}, cpu_us_per_call: {}, passes: PASSES,
    calls, flags: FLAGS };
  for (const n of names) {
    out[n] = r2(quantile(own[n], 0.5));
    out.iqr[n] = [r2(quantile(own[n], 0.25)), r2(quantile(own[n], 0.75))];
    out.range[n] = [r2(Math.min(...own[n])), r2(Math.max(...own[n]))];
    out.cpu_us_per_call[n] = r2(quantile(abs[n], 0.5));
  }
  out.noop_us_per_call = r2(quantile(noops, 0.5));
  out.noop_iqr = [r2(quantile(noops, 0.25)), r2(quantile(noops, 0.75))];
  console.log(JSON.stringify(out));
  process.exit(0);
}

main().catch((err) => {
  console.error(err.stack || err.message);
  process.exit(1);
});
