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
// Prints one JSON object: { variant: µs of node CPU per call beyond the
// no-op middleware's }, each the median of OVERHEAD_ROUNDS rounds (default
// 3; every middleware once per round, the order reversed every other
// round), and under "range" each variant's [min, max] over the rounds.
const http = require('http');
const net = require('net');
const path = require('path');
const express = require('express');

const INFLIGHT = 50;
const USERS = 10000;
const ROUNDS = Number(process.env.OVERHEAD_ROUNDS || 3);

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

// `calls` calls of mw, INFLIGHT at a time; each call's next() starts the
// next one from the event loop (setImmediate), as a new request would.
function drive(mw, calls) {
  return new Promise((resolve, reject) => {
    let started = 0;
    let idle = 0;
    const t0 = process.cpuUsage();
    const timer = setTimeout(() => reject(new Error('no progress in 120 s')),
      120000);
    function go() {
      if (started >= calls) {
        if (++idle === INFLIGHT) {
          clearTimeout(timer);
          const d = process.cpuUsage(t0);
          resolve((d.user + d.system) / calls);
        }
        return;
      }
      const [req, res] = exchange(`user-${(started * 7919) % USERS}`, go);
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

async function main() {
  const calls = Number(process.argv[2] || 30000);
  const names = process.argv.slice(3);
  const mws = { noop: (req, res, next) => next() };
  for (const n of names) {
    mws[n] = await require(path.join(__dirname, n.replace(/_/g, '-')))
      .middleware();
  }
  const cpu = {};
  const entries = Object.entries(mws);
  for (let r = 0; r < ROUNDS; r++) {
    for (const [n, mw] of r % 2 ? [...entries].reverse() : entries) {
      (cpu[n] = cpu[n] || []).push(await drive(mw, calls));
    }
  }
  const median = (a) => {
    const s = [...a].sort((x, y) => x - y);
    const h = s.length >> 1;
    return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
  };
  const r2 = (v) => Math.round(v * 100) / 100;
  // Each round's figure is against that round's no-op.
  const own = (n) => cpu[n].map((v, i) => v - cpu.noop[i]);
  const out = { range: {}, rounds: ROUNDS, calls };
  for (const n of names) {
    out[n] = r2(median(own(n)));
    out.range[n] = [r2(Math.min(...own(n))), r2(Math.max(...own(n)))];
  }
  out.noop_us_per_call = r2(median(cpu.noop));
  console.log(JSON.stringify(out));
  process.exit(0);
}

main().catch((err) => {
  console.error(err.stack || err.message);
  process.exit(1);
});
