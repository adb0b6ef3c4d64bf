// node_load.js -- the soak's Node.js instance: the `sluice` addon
// (bindings/node) on the same Redis Sentinel group as the `sluice serve`
// instances, charging the same buckets (policy "soak" = rule "soak"),
// under an open-loop load: take() calls are started on a fixed schedule
// whatever the answers, bounded in count (rate x seconds) and in flight.
//
//   node node_load.js CONFIG.json
//
// CONFIG: {sentinels: ["127.0.0.1:P", ...], master, capacity, rate
// (tokens/s), timeoutMs, keys: [...], reqRate (takes/s), seconds,
// startAt (ms since the epoch), out (file), maxInFlight}.
// Writes one line per call to `out`: "sent done key outcome" (times in
// ms since the epoch, outcome "allowed", "denied" or the error's code),
// then a line "# done ..." once every call has ended (with its resident
// memory and open descriptors before the load, rss0/fd0, and after it,
// rss1/fd1), and exits 0.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const sluice = require(path.resolve(__dirname, '..', '..', 'bindings', 'node'));

const policy = sluice.policy([{ capacity: cfg.capacity, rate: cfg.rate }], { name: 'soak' });
const limiter = new sluice.Limiter({
  store: { redis: { sentinel: { master: cfg.master, addrs: cfg.sentinels }, timeoutMs: cfg.timeoutMs } },
  // As the serve instances' on_store_error: closed: the soak bounds what
  // the shared store allows, so a store failure must refuse, not decide
  // locally (the default 'local' lets each process through on its own).
  onStoreError: 'reject',
});

const out = fs.openSync(cfg.out, 'w');
const lines = [];
function flush() {
  if (lines.length) fs.writeSync(out, lines.splice(0).join(''));
}

const total = Math.floor(cfg.reqRate * cfg.seconds);
const period = 1000 / cfg.reqRate;
let started = 0;
let inFlight = 0;
let skipped = 0;
let rss0 = -1;
let fd0 = -1;
const fds = () => fs.readdirSync('/proc/self/fd').length;

function one(i) {
  const key = cfg.keys[i % cfg.keys.length];
  const sent = Date.now();
  inFlight++;
  limiter.take(key, policy).then(
    (d) => [d.allowed ? 'allowed' : 'denied'],
    (e) => [e.code || 'error'],
  ).then(([outcome]) => {
    inFlight--;
    lines.push(`${sent} ${Date.now()} ${key} ${outcome}\n`);
  });
}

// Every tick starts the calls whose time has come (several after a late
// tick: the schedule, not the answers, sets the pace).
function tick() {
  const now = Date.now();
  while (started < total && cfg.startAt + started * period <= now) {
    if (inFlight >= cfg.maxInFlight) {
      skipped++;
      lines.push(`${now} ${now} ${cfg.keys[started % cfg.keys.length]} skipped\n`);
    } else {
      one(started);
    }
    started++;
  }
  flush();
  if (started < total) {
    setTimeout(tick, Math.max(1, Math.min(10, cfg.startAt + started * period - Date.now())));
    return;
  }
  // Every call ends within its timeout; wait for the last ones (bounded).
  const deadline = Date.now() + 30000;
  const drain = () => {
    flush();
    if (inFlight > 0 && Date.now() < deadline) {
      setTimeout(drain, 20);
      return;
    }
    fs.writeSync(out, `# done inflight=${inFlight} skipped=${skipped} ` +
      `rss0=${rss0} fd0=${fd0} rss1=${process.memoryUsage().rss} fd1=${fds()}\n`);
    fs.closeSync(out);
    limiter.close().then(() => process.exit(0));
  };
  drain();
}

// The figures before the load: once the store is connected (bounded by
// the start time).
function begin() {
  if (!limiter.healthy() && Date.now() < cfg.startAt - 100) {
    setTimeout(begin, 20);
    return;
  }
  // A few calls on a key of its own warm the path up (unrecorded).
  const warm = [];
  for (let i = 0; i < 8; i++) warm.push(limiter.take('warm-up', policy).catch(() => null));
  Promise.all(warm).then(() => {
    rss0 = process.memoryUsage().rss;
    fd0 = fds();
    setTimeout(tick, Math.max(0, cfg.startAt - Date.now()));
  });
}
begin();
