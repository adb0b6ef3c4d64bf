// sluice for Node.js: exact token-bucket rate limiting in the app's own
// process -- libsluice's decisions, its memory store, and its own Redis
// client running on Node's event loop (no ioredis, no HTTP hop).
//
// This file checks arguments and shapes results; every decision is made by
// libsluice in the native addon (src/addon.c).
'use strict';

const fs = require('node:fs');
const path = require('node:path');

// The addon is built by the install script (scripts/build.js).  npm may
// hold install scripts back (npm 11's allowScripts): then build it on the
// first require, once.
function loadAddon() {
  const file = path.join(__dirname, 'build', 'sluice.node');
  if (!fs.existsSync(file)) {
    const { spawnSync } = require('node:child_process');
    const r = spawnSync(process.execPath, [path.join(__dirname, 'scripts', 'build.js')], { stdio: ['ignore', 2, 2] });
    if (r.status !== 0)
      throw new Error(`sluice: the native addon is not built and building it failed (see above); run \`node scripts/build.js\` in ${__dirname}`);
  }
  return require(file);
}

const native = loadAddon();

const NAME_RE = /^[A-Za-z0-9_.-]{1,64}$/;
const MAX_LIMITS = native.MAX_LIMITS;
const DEFAULT_MAX_KEYS = 1000000;
const SLUICE_ETIMEDOUT = native.ETIMEDOUT;

function sluiceError(code, message) {
  const e = new Error(message);
  e.code = code;
  return e;
}

// ---------------------------------------------------------------- policies

/** A named set of limits, charged all-or-nothing.  Made by policy(). */
class Policy {
  constructor(name, limits, handle, windows) {
    this.name = name;
    this.limits = limits;
    this._h = handle;
    // RateLimit-Policy when limit `which` decided, as sluice serve writes
    // it (draft-11 list): that limit first under the policy's name, each
    // other one as "name.N" (N its position, from 1).
    this._quotedName = `"${name}"`;
    const item = (i, n) => `"${n}";q=${limits[i].capacity};w=${windows[i]}`;
    this._policyHeaders = limits.map((_, which) => [item(which, name),
      ...limits.map((__, i) => i).filter((i) => i !== which).map((i) => item(i, `${name}.${i + 1}`))].join(', '));
    this._windowsMs = windows.map((w) => w * 1000);
    Object.freeze(this);
  }
}

function checkCapacity(c, i) {
  if (typeof c !== 'number')
    throw new TypeError(`limit ${i}: capacity must be a number, got ${typeof c}`);
  if (!Number.isSafeInteger(c) || c < 0)
    throw new RangeError(`limit ${i}: capacity must be a whole number of tokens >= 1, got ${c}`);
}

function rateText(r, i) {
  if (typeof r === 'number' && Number.isFinite(r)) return String(r);
  if (typeof r !== 'string')
    throw new TypeError(`limit ${i}: rate must be a string such as "2/s" or "50/min", got ${typeof r}`);
  return r;
}

/**
 * policy([{ capacity, rate }, ...], { name }) -> Policy
 * rate is the core's text: "2/s", "50/min", "0.5/s", "1/3s", "10000/day"
 * (a number means per second).  name (default "default") names the
 * buckets: a policy and a `sluice serve` rule of the same name share them.
 */
function policy(limits, opts = {}) {
  if (limits !== null && typeof limits === 'object' && !Array.isArray(limits)) limits = [limits];
  if (!Array.isArray(limits) || limits.length === 0)
    throw new TypeError('policy() takes an array of { capacity, rate } limits');
  if (limits.length > MAX_LIMITS)
    throw new RangeError(`a policy holds at most ${MAX_LIMITS} limits, got ${limits.length}`);
  if (opts === null || typeof opts !== 'object') throw new TypeError('policy() options must be an object');
  const name = opts.name === undefined ? 'default' : opts.name;
  if (typeof name !== 'string') throw new TypeError('policy name must be a string');
  if (!NAME_RE.test(name))
    throw new RangeError(`policy name "${name}" must be 1 to 64 letters, digits, '_', '.' or '-'`);
  const caps = [];
  const rates = [];
  limits.forEach((l, i) => {
    if (l === null || typeof l !== 'object') throw new TypeError(`limit ${i} must be an object { capacity, rate }`);
    checkCapacity(l.capacity, i);
    caps.push(l.capacity);
    rates.push(rateText(l.rate, i));
  });
  const [handle, windows] = native.policyNew(name, caps, rates);
  return new Policy(name, caps.map((c, i) => Object.freeze({ capacity: c, rate: rates[i] })), handle, windows);
}

// ---------------------------------------------------------------- limiters

function checkKey(key) {
  if (typeof key !== 'string' && !Buffer.isBuffer(key))
    throw new TypeError(`key must be a string or a Buffer, got ${key === null ? 'null' : typeof key}`);
}

function checkCost(cost) {
  if (typeof cost !== 'number') throw new TypeError(`cost must be a number, got ${typeof cost}`);
  if (!Number.isSafeInteger(cost) || cost < 0)
    throw new RangeError(`cost must be a whole number >= 0, got ${cost}`);
}

function checkPolicy(p) {
  if (!(p instanceof Policy)) throw new TypeError('policy must be made by sluice.policy()');
}

function storeOptions(opts) {
  const store = opts.store === undefined ? 'memory' : opts.store;
  if (store === 'memory') return { kind: 'memory', maxKeys: opts.maxKeys };
  if (store !== null && typeof store === 'object') {
    if (store.memory !== undefined) return { kind: 'memory', maxKeys: (store.memory || {}).maxKeys ?? opts.maxKeys };
    if (store.redis !== undefined) return { kind: 'redis', redis: store.redis };
    if (store.shared !== undefined) {
      const sh = store.shared;
      if (sh === null || typeof sh !== 'object' || typeof sh.path !== 'string' || sh.path === '')
        throw new TypeError("store.shared must be { path: '/dev/shm/NAME', maxKeys }");
      return { kind: 'shared', path: sh.path, maxKeys: sh.maxKeys ?? opts.maxKeys };
    }
  }
  throw new TypeError("store must be 'memory', { memory: { maxKeys } }, { shared: { path, maxKeys } } or { redis: { url | cluster | sentinel } }");
}

function positiveInt(v, what, dflt, max) {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1 || v > max)
    throw new RangeError(`${what} must be a whole number from 1 to ${max}, got ${v}`);
  return v;
}

// A C string for the addon: a NUL inside would silently cut it there (a
// file path would then name another file).
function optString(v, what) {
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new TypeError(`${what} must be a string, got ${v === null ? 'null' : typeof v}`);
  if (v === '' || v.includes('\0')) throw new RangeError(`${what} must be a non-empty string without NUL`);
  return v;
}

function plainObject(v, what, example) {
  if (v === null || typeof v !== 'object' || Array.isArray(v))
    throw new TypeError(`${what} must be an object such as ${example}`);
}

// The TLS and Sentinel objects name files and credentials: a misspelt key
// (or the config file's snake_case, ca_file) is refused rather than
// silently ignored.
function knownKeys(obj, keys, what) {
  for (const k of Object.keys(obj))
    if (!keys.includes(k)) throw new TypeError(`${what} has no option "${k}"; expected ${keys.join(', ')}`);
}

const TLS_KEYS = ['caFile', 'certFile', 'keyFile', 'serverName', 'verify'];
const SENTINEL_KEYS = ['master', 'addrs', 'user', 'password', 'tls'];
const ADDR_RE = /^[^\s/@]+:([0-9]{1,5})$/; // "[::1]:26379" too

// redis.tls: its presence turns TLS on, whatever the URL's scheme (as the
// `tls:` block of sluice serve's config does).
function tlsOptions(t) {
  plainObject(t, 'redis.tls', "{ caFile: '/etc/ssl/redis-ca.pem' }, or {} for the defaults");
  knownKeys(t, TLS_KEYS, 'redis.tls');
  const o = {
    caFile: optString(t.caFile, 'redis.tls.caFile'),
    certFile: optString(t.certFile, 'redis.tls.certFile'),
    keyFile: optString(t.keyFile, 'redis.tls.keyFile'),
    serverName: optString(t.serverName, 'redis.tls.serverName'),
    noVerify: 0,
  };
  if (o.keyFile !== undefined && o.certFile === undefined)
    throw new TypeError('redis.tls.keyFile needs certFile (the client certificate it belongs to)');
  if (o.serverName !== undefined && (o.serverName.length > 253 || /[\s/:@]/.test(o.serverName)))
    throw new RangeError(`redis.tls.serverName "${o.serverName}" must be the host name the server's certificate holds, e.g. redis.example.com`);
  if (t.verify !== undefined && typeof t.verify !== 'boolean')
    throw new TypeError(`redis.tls.verify must be a boolean, got ${t.verify === null ? 'null' : typeof t.verify}`);
  if (t.verify === false) o.noVerify = 1;
  return o;
}

// redis.sentinel: the Sentinels name the master; by default they are
// reached over TLS when the master is.
function sentinelOptions(s, masterTls) {
  plainObject(s, 'redis.sentinel', "{ master: 'mymaster', addrs: ['10.0.0.1:26379'] }");
  knownKeys(s, SENTINEL_KEYS, 'redis.sentinel');
  if (typeof s.master !== 'string')
    throw new TypeError('redis.sentinel.master must be a string: the name the Sentinels monitor');
  if (s.master === '' || /[\s\0]/.test(s.master))
    throw new RangeError(`redis.sentinel.master "${s.master}" must be a non-empty name without spaces`);
  if (!Array.isArray(s.addrs) || s.addrs.length === 0 || !s.addrs.every((a) => typeof a === 'string'))
    throw new TypeError("redis.sentinel.addrs must be a non-empty list of the Sentinels' 'host:port'");
  for (const a of s.addrs) {
    const m = ADDR_RE.exec(a);
    if (!m || Number(m[1]) < 1 || Number(m[1]) > 65535)
      throw new RangeError(`redis.sentinel.addrs: "${a}" is not 'host:port'`);
  }
  const o = {
    master: s.master,
    addrs: s.addrs.slice(),
    user: optString(s.user, 'redis.sentinel.user'),
    password: optString(s.password, 'redis.sentinel.password'),
    tls: masterTls ? 1 : 0,
  };
  if (o.user !== undefined && o.password === undefined)
    throw new TypeError('redis.sentinel.user needs password (the Sentinels\' own, not the master\'s)');
  if (s.tls !== undefined) {
    if (typeof s.tls !== 'boolean')
      throw new TypeError(`redis.sentinel.tls must be a boolean, got ${s.tls === null ? 'null' : typeof s.tls}`);
    o.tls = s.tls ? 1 : 0;
  }
  return o;
}

function redisOptions(r) {
  if (r === null || typeof r !== 'object') throw new TypeError('store.redis must be an object');
  const o = {
    timeoutMs: positiveInt(r.timeoutMs, 'redis.timeoutMs', 50, 3600000),
    connections: positiveInt(r.connections, 'redis.connections', 1, 64),
    scriptOnly: r.scriptOnly ? 1 : 0,
  };
  if (r.keyPrefix !== undefined) {
    if (typeof r.keyPrefix !== 'string') throw new TypeError('redis.keyPrefix must be a string');
    o.keyPrefix = r.keyPrefix;
  }
  if (r.url !== undefined && typeof r.url !== 'string') throw new TypeError('redis.url must be a string');
  if (r.tls !== undefined) o.tls = tlsOptions(r.tls);
  if (r.cluster !== undefined) {
    if (!Array.isArray(r.cluster) || r.cluster.length === 0 || !r.cluster.every((s) => typeof s === 'string'))
      throw new TypeError("redis.cluster must be a list of 'host:port' seeds");
    if (r.url !== undefined) throw new TypeError('give redis.url or redis.cluster, not both');
    if (r.sentinel !== undefined) throw new TypeError('give redis.sentinel or redis.cluster, not both');
    o.seeds = r.cluster;
  } else if (r.sentinel !== undefined) {
    // The url, if any, gives the master's credentials, db and scheme.
    if (r.url !== undefined) o.url = r.url;
    o.sentinel = sentinelOptions(r.sentinel, o.tls !== undefined || (r.url || '').startsWith('rediss://'));
  } else {
    o.url = r.url === undefined ? 'redis://127.0.0.1:6379' : r.url;
  }
  return o;
}

function decision(allowed, limit, remaining, retryAfterMs, resetMs, name) {
  return { allowed, limit, remaining, retryAfterMs, resetMs, policy: name };
}

/**
 * new Limiter({ store: 'memory', maxKeys, clock })
 *   clock (memory and shared stores): () -> the time in microseconds since
 *   the epoch, for simulations and tests; default the wall clock
 * new Limiter({ store: { shared: { path: '/dev/shm/NAME', maxKeys } } })
 *   every process of the host that opens the same file shares its buckets
 *   (cluster workers, PM2 instances, sluice serve)
 * new Limiter({ store: { redis: { url, timeoutMs, connections, keyPrefix } } })
 * new Limiter({ store: { redis: { cluster: ['host:port', ...] } } })
 * new Limiter({ store: { redis: { url: 'rediss://...', tls: { caFile, certFile,
 *   keyFile, serverName, verify } } } })
 * new Limiter({ store: { redis: { sentinel: { master, addrs, user, password,
 *   tls }, url } } })
 */
class Limiter {
  constructor(opts = {}) {
    if (opts === null || typeof opts !== 'object') throw new TypeError('Limiter options must be an object');
    const s = storeOptions(opts);
    this._closed = false;
    this._closing = null;
    if (s.kind === 'memory' || s.kind === 'shared') {
      // Both local stores decide at once, through the same path.
      this.store = s.kind;
      if (s.kind === 'memory') {
        this._mem = native.memoryNew(positiveInt(s.maxKeys, 'maxKeys', DEFAULT_MAX_KEYS, 2 ** 40));
        this._take = native.memoryTake;
      } else {
        this._mem = native.shmNew(s.path, positiveInt(s.maxKeys, 'maxKeys', DEFAULT_MAX_KEYS, 2 ** 32));
        this._take = native.shmTake;
      }
      this._buf = new Float64Array(5);
      this._redis = null;
      if (opts.clock !== undefined && typeof opts.clock !== 'function')
        throw new TypeError('clock must be a function () -> microseconds');
      this._clock = opts.clock || null;
    } else {
      if (opts.clock !== undefined) throw new TypeError('clock applies to the memory store only (Redis decides on its own time)');
      this.store = 'redis';
      this._mem = null;
      this._take = null;
      this._redis = native.redisNew(this, redisOptions(s.redis));
    }
  }

  // The decision of one take, as numbers, to done(status, allowed, limit,
  // remaining, retryAfterMs, resetMs, which): synchronously on the memory
  // store, from Node's loop on Redis.  Arguments are already checked.
  _decide(key, p, cost, done) {
    if (this._closed) {
      done(-100, false, 0, 0, 0, 0, 0);
      return;
    }
    if (this._mem !== null) {
      const b = this._buf;
      const allowed = this._clock === null
        ? this._take(this._mem, key, p._h, cost, b)
        : this._take(this._mem, key, p._h, cost, b, this._clock());
      done(0, allowed, b[0], b[1], b[2], b[3], b[4]);
      return;
    }
    native.redisTake(this._redis, key, p._h, cost, done);
  }

  // The error of a failed take.  The message ends with what a Redis node
  // last reported and still has (a certificate that does not verify, a
  // refused password, no master), when there is such a failure.
  _error(status) {
    if (status === -100 || this._closed)
      return sluiceError('ERR_SLUICE_CLOSED', 'sluice: the limiter is closed');
    const why = this._redis === null ? '' : native.redisLastError(this._redis);
    const tail = why === '' ? '' : ` (${why})`;
    if (status === SLUICE_ETIMEDOUT)
      return sluiceError('ERR_SLUICE_TIMEOUT', `sluice: the Redis store did not answer in time${tail}`);
    return sluiceError('ERR_SLUICE_STORE', `sluice: the Redis store failed: ${native.strerror(status)}${tail}`);
  }

  /**
   * take(key, policy, { cost = 1 }) -> Promise<{ allowed, limit, remaining,
   * retryAfterMs, resetMs, policy }>.  Charges cost tokens from every
   * limit of the policy, all or none; cost 0 peeks.  Rejects when the store
   * fails (ERR_SLUICE_STORE, ERR_SLUICE_TIMEOUT) or the limiter is closed.
   */
  take(key, p, opts) {
    checkKey(key);
    checkPolicy(p);
    let cost = 1;
    if (opts !== undefined) {
      if (opts === null || typeof opts !== 'object') throw new TypeError('take() options must be an object');
      if (opts.cost !== undefined) cost = opts.cost;
    }
    checkCost(cost);
    return new Promise((resolve, reject) => {
      this._decide(key, p, cost, (status, allowed, limit, remaining, retry, reset) => {
        if (status !== 0) reject(this._error(status));
        else resolve(decision(allowed, limit, remaining, retry, reset, p.name));
      });
    });
  }

  /** true when the store can answer now (memory: always; Redis: connected,
   * breaker closed) -- for a readiness probe. */
  healthy() {
    if (this._closed) return false;
    return this._redis === null ? true : native.redisHealthy(this._redis);
  }

  /** Closes the store.  Calls still waiting on Redis are rejected
   * (ERR_SLUICE_CLOSED); afterwards the process is free to exit. */
  close() {
    if (this._closing) return this._closing;
    this._closed = true;
    this._closing = new Promise((resolve) => {
      // Never from inside a Redis callback: the client is freed from the
      // loop's check phase.
      setImmediate(() => {
        if (this._redis !== null) native.redisClose(this._redis);
        this._mem = null;
        resolve();
      });
    });
    return this._closing;
  }
}

// ------------------------------------------------------------------ express

function defaultKey(req) {
  return req.get('x-user-id') || req.ip;
}

const LIMITED = (retryMs, name) => `{"error":"rate_limited","retry_after_ms":${retryMs},"policy":"${name}"}`;
const STORE_DOWN = '{"error":"store_unavailable","message":"the rate-limit store failed and the limiter fails closed"}';

/**
 * express({ limiter, policy, key, cost, onStoreError }) -> middleware
 *   policy: a Policy, or a function (req) -> Policy (tiers)
 *   key: (req) -> string | Buffer; default x-user-id, else req.ip
 *   cost: (req) -> whole number >= 0; default 1
 *   onStoreError: 'open' (default: let the request through, no headers)
 *                 or 'closed' (503)
 */
function express(opts) {
  if (opts === null || typeof opts !== 'object') throw new TypeError('express() takes an options object');
  const { limiter, key = defaultKey, cost, onStoreError = 'open' } = opts;
  const pol = opts.policy;
  if (!(limiter instanceof Limiter)) throw new TypeError('express(): limiter must be a sluice.Limiter');
  if (!(pol instanceof Policy) && typeof pol !== 'function')
    throw new TypeError('express(): policy must be a sluice.policy() or a function (req) -> policy');
  if (typeof key !== 'function') throw new TypeError('express(): key must be a function (req) -> string');
  if (cost !== undefined && typeof cost !== 'function') throw new TypeError('express(): cost must be a function (req) -> number');
  if (onStoreError !== 'open' && onStoreError !== 'closed')
    throw new RangeError("express(): onStoreError must be 'open' or 'closed'");
  const closed = onStoreError === 'closed';

  return function sluiceLimit(req, res, next) {
    let p, k, c;
    try {
      p = typeof pol === 'function' ? pol(req) : pol;
      checkPolicy(p);
      k = key(req);
      checkKey(k);
      c = cost === undefined ? 1 : cost(req);
      checkCost(c);
    } catch (err) {
      next(err);
      return;
    }
    // The memory store answers at once: no closure on that path.
    if (limiter._mem !== null && limiter._clock === null && !limiter._closed) {
      const d = limiter._buf;
      const allowed = limiter._take(limiter._mem, k, p._h, c, d);
      answer(res, next, p, closed, 0, allowed, d[0], d[1], d[2], d[3], d[4]);
      return;
    }
    limiter._decide(k, p, c, (status, allowed, limit, remaining, retryMs, resetMs, which) =>
      answer(res, next, p, closed, status, allowed, limit, remaining, retryMs, resetMs, which));
  };
}

// Writes the middleware's answer for one decision (status: 0 or the
// store's error code).
function answer(res, next, p, failClosed, status, allowed, limit, remaining, retryMs, resetMs, which) {
  if (status !== 0) {
    if (!failClosed) {
      next();
      return;
    }
    res.statusCode = 503;
    res.setHeader('Retry-After', '1');
    res.setHeader('Content-Type', 'application/json');
    res.end(STORE_DOWN);
    return;
  }
  const resetS = Math.ceil(resetMs / 1000);
  res.setHeader('X-RateLimit-Limit', limit);
  res.setHeader('X-RateLimit-Remaining', remaining);
  res.setHeader('X-RateLimit-Reset', resetS);
  res.setHeader('RateLimit-Policy', p._policyHeaders[which]);
  res.setHeader('RateLimit', `${p._quotedName};r=${remaining};t=${resetS}`);
  if (allowed) {
    next();
    return;
  }
  // A cost that can never pass waits for a whole window, as sluice serve
  // says it.
  const retry = retryMs === Infinity ? p._windowsMs[which] : retryMs;
  res.statusCode = 429;
  res.setHeader('Retry-After', Math.max(1, Math.ceil(retry / 1000)));
  res.setHeader('X-RateLimit-Retry-After-Ms', retry);
  res.setHeader('Content-Type', 'application/json');
  res.end(LIMITED(retry, p.name));
}

module.exports = { Limiter, Policy, policy, express, version: native.version };
