// http_load.js -- the soak's HTTP load: GET /v1/check to each `sluice
// serve` instance on a fixed schedule whatever the answers (open loop),
// bounded in count (rate x seconds per instance) and in flight; keep-alive
// connections.  Node's HTTP client costs a few per cent of a core at the
// soak's rates, so the load keeps its schedule on a busy machine.
//
//   node http_load.js CONFIG.json
//
// CONFIG: {targets: [{name, port, rate (req/s)}], keys: [...], seconds,
// startAt (ms since the epoch), out (file), maxInFlight (per target)}.
// Writes one line per request to `out`: "sent done target key outcome"
// (times in ms since the epoch; outcome the HTTP status, "503-no-retry-after"
// for a 503 without Retry-After, "refused", "reset", "timeout" or
// "skipped" when the in-flight bound held it back), then "# done lag=MS"
// (the worst lateness of the schedule) once every request has ended.
// A few requests on the key "warm-up" precede the schedule, unrecorded.
'use strict';
const fs = require('node:fs');
const http = require('node:http');

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const out = fs.openSync(cfg.out, 'w');
const lines = [];
let lag = 0;
let pending = 0;

function record(sent, target, key, outcome) {
  lines.push(`${sent} ${Date.now()} ${target.name} ${key} ${outcome}\n`);
}

function send(target, key, sent, retried) {
  let over = false;
  const end = (outcome) => {
    if (over) return;
    over = true;
    target.inFlight--;
    pending--;
    record(sent, target, key, outcome);
  };
  const req = http.request({
    host: '127.0.0.1', port: target.port, path: '/v1/check', agent: target.agent,
    headers: { 'x-user-id': key },
  }, (res) => {
    res.resume();
    res.on('end', () => {
      const noRetry = res.statusCode === 503 && !res.headers['retry-after'];
      end(noRetry ? '503-no-retry-after' : res.statusCode);
    });
    res.on('error', () => end('reset'));
  });
  req.setTimeout(15000, () => req.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' })));
  req.on('error', (e) => {
    // A kept-alive connection the server closed before this request
    // reached it: once more on a fresh one, as HTTP clients do.
    if (req.reusedSocket && !retried && !over && e.code === 'ECONNRESET') {
      over = true; // this attempt; the retry counts as the same request
      send(target, key, sent, true);
      return;
    }
    end(e.code === 'ECONNREFUSED' ? 'refused' : e.code === 'TIMEOUT' ? 'timeout' : 'reset');
  });
  req.end();
}

const period = cfg.targets.map((t) => 1000 / t.rate);
const total = cfg.targets.map((t) => Math.floor(t.rate * cfg.seconds));
const next = cfg.targets.map(() => 0);
for (const t of cfg.targets) {
  t.inFlight = 0;
  t.agent = new http.Agent({ keepAlive: true, maxSockets: cfg.maxInFlight });
}

function tick() {
  const now = Date.now();
  let left = false;
  cfg.targets.forEach((t, i) => {
    while (next[i] < total[i] && cfg.startAt + next[i] * period[i] <= now) {
      lag = Math.max(lag, now - (cfg.startAt + next[i] * period[i]));
      // Each target's share cycles through the users from its own offset.
      const key = cfg.keys[(next[i] + i * 7) % cfg.keys.length];
      if (t.inFlight >= cfg.maxInFlight) {
        record(now, t, key, 'skipped');
      } else {
        t.inFlight++;
        pending++;
        send(t, key, now, false);
      }
      next[i]++;
    }
    if (next[i] < total[i]) left = true;
  });
  if (lines.length) fs.writeSync(out, lines.splice(0).join(''));
  if (left) {
    setTimeout(tick, 2);
    return;
  }
  const deadline = Date.now() + 30000;
  const drain = () => {
    if (lines.length) fs.writeSync(out, lines.splice(0).join(''));
    if (pending > 0 && Date.now() < deadline) {
      setTimeout(drain, 20);
      return;
    }
    fs.writeSync(out, `# done lag=${lag} pending=${pending}\n`);
    fs.closeSync(out);
    for (const t of cfg.targets) t.agent.destroy();
    process.exit(0);
  };
  drain();
}

// Warm up before the schedule starts (the HTTP stack compiled, a few
// connections open), on a key of its own: a cold client answers its
// first requests a second late on a busy machine.
function warmUp(round) {
  if (round === 3 || Date.now() > cfg.startAt - 500) {
    setTimeout(tick, Math.max(0, cfg.startAt - Date.now()));
    return;
  }
  let left = 0;
  for (const t of cfg.targets) {
    for (let i = 0; i < 8; i++) {
      left++;
      const req = http.get({ host: '127.0.0.1', port: t.port, path: '/v1/check', agent: t.agent,
        headers: { 'x-user-id': 'warm-up' } }, (res) => {
        res.resume();
        res.on('end', () => { if (--left === 0) warmUp(round + 1); });
      });
      req.on('error', () => { if (--left === 0) warmUp(round + 1); });
    }
  }
}
warmUp(0);
