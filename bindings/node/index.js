// sluice for Node.js: exact token-bucket rate limiting in the app's own
// process -- libsluice's decisions, its memory store, and its own Redis
// client running on Node's event loop (no ioredis, no HTTP hop).
//
// This file checks arguments and shapes results; every decision is made by
// libsluice in the native addon (src/addon.c, local.c, redis.c).  Sections:
// options checking, policies, limiters (take, get and the admin verbs),
// client addresses, the middleware (Express, Connect, node:http) and the
// Fastify plugin.
'use strict';

const { EventEmitter } = require('node:events');
const fs = require('node:fs');
const http = require('node:http');
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
// The defaults and store kinds, generated from the C tables
// (src/util/defaults.h, src/store/store_kinds.def; the timeout's reason is
// given there).
const DEFAULTS = require('./lib/defaults.js');
const STORE_KINDS = DEFAULTS.STORE_KINDS;
const DEFAULT_MAX_KEYS = DEFAULTS.MAX_KEYS;
const DEFAULT_TIMEOUT_MS = DEFAULTS.NODE_TIMEOUT_MS;
const SLUICE_ETIMEDOUT = native.ETIMEDOUT;

function sluiceError(code, message) {
  const e = new Error(message);
  e.code = code;
  return e;
}

// ---------------------------------------------------------------- policies

/** A named set of limits, charged all-or-nothing.  Made by policy(). */
// RateLimit values a policy keeps (a power of two).
const ITEM_SLOTS = 16;

class Policy {
  constructor(name, limits, caps, handle, windows) {
    this.name = name;
    this.limits = limits;
    this._h = handle;
    // RateLimit-Policy when limit `which` decided, as sluice serve writes
    // it (draft-11 list): that limit first under the policy's name, each
    // other one as "name.N" (N its position, from 1).
    this._quotedName = `"${name}"`;
    const item = (i, n) => `"${n}";q=${caps[i]};w=${windows[i]}`;
    this._policyHeaders = limits.map((_, which) => [item(which, name),
      ...limits.map((__, i) => i).filter((i) => i !== which).map((i) => item(i, `${name}.${i + 1}`))].join(', '));
    // draft-6 and draft-7's RateLimit-Policy: "capacity;w=window", the
    // deciding limit first.
    const plain = (i) => `${caps[i]};w=${windows[i]}`;
    this._plainHeaders = limits.map((_, which) => [plain(which),
      ...limits.map((__, i) => i).filter((i) => i !== which).map(plain)].join(', '));
    this._windowsMs = windows.map((w) => w * 1000);
    // A calendar quota's w= is its current window's length (a 23-hour
    // day, a 28-day month), as sluice serve says it: such a policy's
    // headers are written per decision (_headers()), the others' above.
    this._caps = caps;
    this._quotas = limits.map((l) => Object.hasOwn(l, 'quota'));
    this._hasQuota = this._quotas.includes(true);
    // The last RateLimit values written (rateLimitItem()).
    this._items = { r: new Array(ITEM_SLOTS).fill(-1), t: new Array(ITEM_SLOTS).fill(-1), s: new Array(ITEM_SLOTS).fill('') };
    Object.freeze(this);
  }

  // Limit i's window in seconds at nowUs: a quota's, for the count
  // resetMs from now when i decided (else the window a take would open).
  _window(i, which, resetMs, nowUs) {
    if (!this._quotas[i]) return this._windowsMs[i] / 1000;
    return native.quotaWindow(this._h, i, i === which ? resetMs : 0, nowUs);
  }

  // [named, plain] RateLimit-Policy when `which` decided, its count
  // resetting in resetMs at nowUs.
  _headers(which, resetMs, nowUs) {
    if (!this._hasQuota) return [this._policyHeaders[which], this._plainHeaders[which]];
    const order = [which, ...this.limits.map((_, i) => i).filter((i) => i !== which)];
    const w = order.map((i) => this._window(i, which, resetMs, nowUs));
    return [order.map((i, k) => `"${k === 0 ? this.name : `${this.name}.${i + 1}`}";q=${this._caps[i]};w=${w[k]}`).join(', '),
      order.map((i, k) => `${this._caps[i]};w=${w[k]}`).join(', ')];
  }
}

function checkCapacity(c, i) {
  if (typeof c !== 'number')
    throw new TypeError(`limit ${i}: capacity must be a number, got ${typeof c}`);
  if (!Number.isSafeInteger(c) || c < 0)
    throw new RangeError(`limit ${i}: capacity must be a whole number of tokens >= 1, got ${c}`);
}

// A calendar quota's units (the core's sluice_per_parse() takes these and
// their plurals) and alignments.
const QUOTA_UNITS = ['second', 'minute', 'hour', 'day', 'week', 'month', 'year'];
const QUOTA_ALIGNS = ['calendar', 'first_use'];
const QUOTA_MAX = 999999999;

// A calendar quota's spec, checked: [quota, [unit, align, zone], frozen
// limit as Policy.limits lists it].
function quotaSpec(l, i) {
  if (Object.hasOwn(l, 'capacity') || Object.hasOwn(l, 'rate'))
    throw new TypeError(`limit ${i}: a limit is a token bucket { capacity, rate } or a calendar quota { quota, per }, not both ` +
      '(a policy may hold both kinds, as separate limits)');
  knownOptions(l, ['quota', 'per', 'align', 'tz'], `policy(): limit ${i}`, QUOTA_PEERS);
  const q = l.quota;
  if (typeof q !== 'number') throw new TypeError(`limit ${i}: quota must be a number, got ${typeName(q)}`);
  if (!Number.isSafeInteger(q) || q < 1 || q > QUOTA_MAX)
    throw new RangeError(`limit ${i}: quota must be a whole number of requests from 1 to ${QUOTA_MAX}, got ${q}`);
  const per = l.per;
  if (typeof per !== 'string')
    throw new TypeError(`limit ${i}: per must be a string (${QUOTA_UNITS.join(', ')}), got ${typeName(per)}`);
  if (!QUOTA_UNITS.includes(per) && !QUOTA_UNITS.includes(per.replace(/s$/, '')))
    throw new RangeError(`limit ${i}: per must be one of ${QUOTA_UNITS.join(', ')}, got ${JSON.stringify(per)}`);
  const align = l.align === undefined ? 'calendar' : l.align;
  if (typeof align !== 'string')
    throw new TypeError(`limit ${i}: align must be 'calendar' or 'first_use', got ${typeName(align)}`);
  if (!QUOTA_ALIGNS.includes(align))
    throw new RangeError(`limit ${i}: align must be 'calendar' or 'first_use', got ${JSON.stringify(align)}`);
  if (l.tz !== undefined && typeof l.tz !== 'string')
    throw new TypeError(`limit ${i}: tz must be an IANA time zone name such as 'Europe/Berlin', got ${typeName(l.tz)}`);
  if (l.tz !== undefined && align === 'first_use')
    throw new RangeError(`limit ${i}: tz applies to calendar windows; a first_use window opens at the key's first request, in no zone`);
  const tz = l.tz === undefined ? 'UTC' : l.tz;
  if (tz === '' || tz.includes('\0') || tz.length > 200)
    throw new RangeError(`limit ${i}: tz must be an IANA time zone name such as 'Europe/Berlin', got ${JSON.stringify(tz)}`);
  return [q, [per, align, tz], Object.freeze({ quota: q, per, align, tz })];
}

function rateText(r, i) {
  if (typeof r === 'number' && Number.isFinite(r)) return String(r);
  if (typeof r !== 'string')
    throw new TypeError(`limit ${i}: rate must be a string such as "2/s" or "50/min", got ${typeof r}`);
  return r;
}

/**
 * policy([{ capacity, rate } | { quota, per, align, tz }, ...], { name })
 *   -> Policy
 * rate is the core's text: "2/s", "50/min", "0.5/s", "1/3s", "10000/day"
 * (a number means per second).  A quota counts `quota` requests per
 * calendar `per` (second .. year) in the zone `tz` (default UTC), reset
 * at the window's end; align 'first_use' opens a key's window at its
 * first request instead.  Both kinds mix in one policy, charged
 * all-or-nothing.  name (default "default") names the buckets: a policy
 * and a `sluice serve` rule of the same name share them.
 */
function policy(limits, opts = {}) {
  if (limits !== null && typeof limits === 'object' && !Array.isArray(limits)) limits = [limits];
  if (!Array.isArray(limits) || limits.length === 0)
    throw new TypeError('policy() takes an array of { capacity, rate } or { quota, per } limits');
  limits = ownList(limits);
  if (limits.length > MAX_LIMITS)
    throw new RangeError(`a policy holds at most ${MAX_LIMITS} limits, got ${limits.length}`);
  if (opts === null || typeof opts !== 'object') throw new TypeError('policy() options must be an object');
  opts = own(opts);
  const name = opts.name === undefined ? 'default' : opts.name;
  if (typeof name !== 'string') throw new TypeError('policy name must be a string');
  if (!NAME_RE.test(name))
    throw new RangeError(`policy name "${name}" must be 1 to 64 letters, digits, '_', '.' or '-'`);
  const caps = [];
  const rates = [];
  const quotas = [];
  const specs = [];
  limits.forEach((l, i) => {
    if (l === null || typeof l !== 'object') throw new TypeError(`limit ${i} must be an object { capacity, rate } or { quota, per }`);
    l = own(l);
    if (Object.hasOwn(l, 'quota') || (Object.hasOwn(l, 'per') && !Object.hasOwn(l, 'capacity'))) {
      const [q, spec, frozen] = quotaSpec(l, i);
      caps.push(q);
      rates.push('');
      quotas.push(spec);
      specs.push(frozen);
      return;
    }
    knownOptions(l, ['capacity', 'rate'], `policy(): limit ${i}`, LIMIT_PEERS);
    checkCapacity(l.capacity, i);
    caps.push(l.capacity);
    rates.push(rateText(l.rate, i));
    quotas.push(null);
    specs.push(Object.freeze({ capacity: l.capacity, rate: rates[i] }));
  });
  const [handle, windows] = native.policyNew(name, caps, rates, quotas);
  return new Policy(name, specs, caps, handle, windows);
}

// ---------------------------------------------------------- options checking

// Levenshtein distance, for "did you mean" (option names are short).
function distance(a, b) {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++)
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
  return d[a.length][b.length];
}

// Every option object is checked whole: a misspelt name, or the name
// another rate limiter uses for something sluice calls otherwise, is a
// TypeError naming it (and sluice's name), never silently ignored.
function knownOptions(obj, known, what, peers = {}) {
  for (const k of Object.keys(obj)) {
    if (known.includes(k)) continue;
    if (Object.prototype.hasOwnProperty.call(peers, k))
      throw new TypeError(`${what}: unknown option "${k}"; in sluice that is ${peers[k]}`);
    const near = known.find((n) => distance(n.toLowerCase(), k.toLowerCase()) <= Math.max(1, Math.floor(n.length / 4)));
    throw new TypeError(`${what}: unknown option "${k}"${near ? ` (did you mean "${near}"?)` : ''}; the options are ${known.join(', ')}`);
  }
}

const typeName = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

// An options object as the app wrote it: its own enumerable properties,
// copied into an object with no prototype.  Every option is read from
// such a copy, so that nothing is inherited -- a polluted
// Object.prototype.skip, .url or .cost would otherwise turn limiting off,
// point the store elsewhere or make requests free.  (Own properties only
// is also what the unknown-option check sees: Object.keys.)
function own(obj) {
  const out = Object.create(null);
  for (const k of Object.keys(obj)) out[k] = obj[k];
  return out;
}

// A list option as the app wrote it: its holes read as undefined, never
// from Array.prototype or Object.prototype.
function ownList(list) {
  const out = new Array(list.length);
  for (let i = 0; i < list.length; i++) out[i] = Object.hasOwn(list, i) ? list[i] : undefined;
  return out;
}

function optFunction(v, what, shape) {
  if (v !== undefined && typeof v !== 'function') throw new TypeError(`${what} must be a function ${shape}, got ${typeName(v)}`);
  return v === undefined ? null : v;
}

function optBoolean(v, what, dflt) {
  if (v === undefined) return dflt;
  if (typeof v !== 'boolean') throw new TypeError(`${what} must be true or false, got ${typeName(v)}`);
  return v;
}

// Names other limiters give to what sluice calls otherwise.
const LIMIT_PEERS = {
  burst: 'capacity (a token bucket\'s capacity is its burst: { capacity: 5, rate: \'1/s\' } allows 5 at once, then 1 a second)',
  points: "capacity", duration: "rate (e.g. '100/min')", max: 'capacity', limit: 'capacity', windowMs: "rate (e.g. '100/min')",
  refill: 'rate', refillRate: 'rate',
  per: "rate (e.g. '100/min') for a token bucket; a calendar quota is { quota: 10000, per: 'month' }",
  window: "rate (e.g. '100/min'), or a calendar quota { quota, per: 'day' }",
};
// The same for a calendar quota.
const QUOTA_PEERS = {
  limit: 'quota', max: 'quota', points: 'quota', count: 'quota',
  unit: "per ('second', 'minute', 'hour', 'day', 'week', 'month' or 'year')",
  window: "per ('day', 'month', ...)", duration: "per ('day', 'month', ...)", interval: "per ('day', 'month', ...)",
  timezone: "tz (an IANA name such as 'Europe/Berlin')", timeZone: "tz (an IANA name such as 'Europe/Berlin')",
  zone: "tz (an IANA name such as 'Europe/Berlin')",
  firstUse: "align: 'first_use'", alignment: "align ('calendar' or 'first_use')",
};
const POLICY_HINT = "policy: sluice.policy([{ capacity, rate }]) (a token bucket: capacity is the burst, rate the refill, e.g. '100/min')";
const LIMITER_PEERS = {
  storeClient: "store: { redis: { url } } (sluice runs its own Redis client)",
  redis: 'store: { redis: { url } }',
  points: POLICY_HINT,
  duration: POLICY_HINT,
  windowMs: POLICY_HINT,
  max: POLICY_HINT,
  limit: POLICY_HINT,
  keyPrefix: 'store: { redis: { keyPrefix } }',
  blockDuration: "the middleware's blockDuration (ms), or limiter.block(key, policy, ms)",
  execEvenly: "the middleware's delay: { maxWaitMs }, or limiter.wait(key, policy, { maxWaitMs })",
  execEvenlyMinDelayMs: "the middleware's delay: { maxWaitMs }",
  insuranceLimiter: "onStoreError: 'local' (the default: an in-memory limiter on the same policy while the store cannot answer)",
  inMemoryBlockOnConsumed: 'limiter.block(key, policy, ms)',
};
const REDIS_PEERS = {
  host: "url: 'redis://[user:password@]host:port/db'",
  port: "url: 'redis://[user:password@]host:port/db'",
  password: "url: 'redis://[user:password@]host:port/db'",
  username: "url: 'redis://[user:password@]host:port/db'",
  db: "url: 'redis://[user:password@]host:port/db'",
  path: "url: 'unix:///path/to/redis.sock'",
  socket: "url (and tls)",
  connectTimeout: 'timeoutMs',
  commandTimeout: 'timeoutMs',
  prefix: 'keyPrefix',
  sentinels: "sentinel: { master, addrs: ['host:port'] }",
  name: "sentinel: { master }",
  rootNodes: "cluster: ['host:port', ...]",
  nodes: "cluster: ['host:port', ...]",
  enableOfflineQueue: 'nothing: calls fail fast (within timeoutMs) while Redis is away',
};
const MIDDLEWARE_PEERS = {
  keyGenerator: 'key: (req) => string',
  standardHeaders: "headers: 'draft-11' | 'draft-8' | 'draft-7' | 'draft-6' | false",
  legacyHeaders: 'headers: { legacy: true | false }',
  addHeaders: 'headers',
  addHeadersOnExceeding: 'headers',
  windowMs: POLICY_HINT,
  timeWindow: POLICY_HINT,
  max: POLICY_HINT,
  limit: POLICY_HINT,
  points: POLICY_HINT,
  duration: POLICY_HINT,
  store: 'limiter: new sluice.Limiter({ store })',
  passOnStoreError: "onStoreError: 'open'",
  skipOnError: "onStoreError: 'open'",
  identifier: "the policy's name: sluice.policy(limits, { name })",
  keyPrefix: 'store: { redis: { keyPrefix } } on the Limiter',
  allowList: 'skip: (req) => boolean',
  errorResponseBuilder: 'message: (req, res, info) => string | object',
  onLimitReached: 'handler: (req, res, next, info) => ...',
  validate: 'nothing: sluice always checks its options',
  requestProperty: 'requestPropertyName',
};

// ---------------------------------------------------------------- limiters

// A string key goes to the store as UTF-8, which has no spelling for a lone
// UTF-16 surrogate: converted, '\ud800', '\udc00' and '\ufffd' would all
// become one bucket.  Such a string is no identity a client sent (HTTP
// headers and addresses decode to well-formed strings), so it is refused.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const wellFormed = typeof String.prototype.isWellFormed === 'function'
  ? (s) => s.isWellFormed()
  : (s) => !LONE_SURROGATE.test(s);

function checkKey(key) {
  if (typeof key === 'string') {
    if (!wellFormed(key))
      throw new TypeError('key holds a lone UTF-16 surrogate (not valid Unicode): give well-formed text, or a Buffer of the bytes');
    return;
  }
  if (!Buffer.isBuffer(key))
    throw new TypeError(`key must be a string or a Buffer, got ${key === null ? 'null' : typeof key}`);
}

function checkCount(n, what, min) {
  if (typeof n !== 'number') throw new TypeError(`${what} must be a number, got ${typeName(n)}`);
  if (!Number.isSafeInteger(n) || n < min)
    throw new RangeError(`${what} must be a whole number >= ${min}, got ${n}`);
}

function checkCost(cost) {
  if (typeof cost !== 'number') throw new TypeError(`cost must be a number, got ${typeof cost}`);
  if (!Number.isSafeInteger(cost) || cost < 0)
    throw new RangeError(`cost must be a whole number >= 0, got ${cost}`);
}

function checkPolicy(p) {
  if (!(p instanceof Policy)) throw new TypeError('policy must be made by sluice.policy()');
}

// store.shared.group: a group name or number the file is shared through
// (libsluice checks that it exists); "" for none.
function sharedGroup(g) {
  if (g === undefined || g === null) return '';
  if (Number.isInteger(g) && g >= 0 && g < 2 ** 32) return String(g);
  if (typeof g === 'string' && /^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$/.test(g)) return g;
  throw new TypeError('store.shared.group must be a group name or a non-negative integer gid');
}

function storeOptions(opts) {
  let store = opts.store === undefined ? 'memory' : opts.store;
  if (store === 'memory') return { kind: 'memory', maxKeys: opts.maxKeys };
  if (store !== null && typeof store === 'object' && !Array.isArray(store)) {
    store = own(store);
    knownOptions(store, Object.keys(STORE_KINDS).filter((k) => STORE_KINDS[k].options.length), 'store', { shm: 'shared: { path }' });
    const kinds = Object.keys(store).filter((k) => store[k] !== undefined);
    if (kinds.length !== 1) throw new TypeError(`store takes one of memory, shared or redis, got ${kinds.length === 0 ? 'none' : kinds.join(' and ')}`);
    if (store.memory !== undefined) {
      let m = store.memory || {};
      plainObject(m, 'store.memory', '{ maxKeys: 1e6 }');
      m = own(m);
      knownOptions(m, STORE_KINDS.memory.options, 'store.memory');
      return { kind: 'memory', maxKeys: m.maxKeys ?? opts.maxKeys };
    }
    if (store.redis !== undefined) return { kind: 'redis', redis: store.redis };
    const sh = store.shared !== null && typeof store.shared === 'object' ? own(store.shared) : null;
    if (sh === null || typeof sh.path !== 'string' || sh.path === '')
      throw new TypeError("store.shared must be { path: '/dev/shm/NAME', maxKeys, group }");
    knownOptions(sh, STORE_KINDS.shared.options, 'store.shared');
    // As sluice serve's config refuses it, in its words: a relative path
    // names a file in whatever the working directory is (each process
    // of the host may have another, and so another store), and puts a
    // store of up to gigabytes there rather than on a tmpfs.
    if (!sh.path.startsWith('/') || Buffer.byteLength(sh.path) > 4000)
      throw new RangeError(`store.shared.path "${Buffer.from(sh.path).subarray(0, 100).toString()}" is not an absolute path; expected e.g. /dev/shm/sluice`);
    return {
      kind: 'shared', path: optString(sh.path, 'store.shared.path'), maxKeys: sh.maxKeys ?? opts.maxKeys,
      group: sharedGroup(sh.group),
    };
  }
  throw new TypeError("store must be 'memory', { memory: { maxKeys } }, { shared: { path, maxKeys } } or { redis: { url | cluster | sentinel } }");
}

function positiveInt(v, what, dflt, max) {
  if (v === undefined) return dflt;
  // A string ('1e6', '50' from an environment variable) is named as one:
  // "got 50" would read as a number that was refused.
  if (typeof v !== 'number') throw new TypeError(`${what} must be a number, got ${typeName(v)} ${JSON.stringify(v)}`);
  if (!Number.isSafeInteger(v) || v < 1 || v > max)
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
  t = own(t);
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
  s = own(s);
  if (Array.isArray(s.addrs)) s.addrs = ownList(s.addrs);
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

const REDIS_KEYS = STORE_KINDS.redis.options;

function redisOptions(r, unref) {
  if (r === null || typeof r !== 'object' || Array.isArray(r)) throw new TypeError('store.redis must be an object');
  r = own(r);
  if (Array.isArray(r.cluster)) r.cluster = ownList(r.cluster);
  knownOptions(r, REDIS_KEYS, 'store.redis', REDIS_PEERS);
  if (r.scriptOnly !== undefined) optBoolean(r.scriptOnly, 'redis.scriptOnly', false);
  const o = {
    unref: unref ? 1 : 0,
    timeoutMs: positiveInt(r.timeoutMs, 'redis.timeoutMs', DEFAULT_TIMEOUT_MS, 3600000),
    connections: positiveInt(r.connections, 'redis.connections', DEFAULTS.CONNECTIONS, 64),
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
    o.url = r.url === undefined ? DEFAULTS.REDIS_URL : r.url;
  }
  return o;
}

function decision(allowed, limit, remaining, retryAfterMs, resetMs, name) {
  return { allowed, limit, remaining, retryAfterMs, resetMs, policy: name };
}

// The addon's admin operations (src/addon.h).
const ADMIN_RESET = 0;
const ADMIN_REFUND = 1;
const ADMIN_PENALIZE = 2;
const ADMIN_BLOCK = 3;
const ADMIN_SET = 4;
// The longest wait a reservation accepts (the core's SLUICE_WAIT_MAX_US),
// and wait()'s default.
const WAIT_MAX_MS = 2 ** 40 / 1000;
const WAIT_DEFAULT_MS = 60000;
const CLOSED = -100;
// The addon's answer table (src/redis.c): rows of id, status, allowed and
// the decision's five numbers, up to ANSWER_BATCH rows per call.
const ANSWER_FIELDS = 8;
const ANSWER_BATCH = 256;

// Node events that leave a Redis node unusable (sluice_redis_event_name()).
const NODE_FAILURES = new Set(['unreachable', 'timeout', 'auth_failed', 'tls_failed', 'no_master', 'refused']);

const LIMITER_KEYS = ['store', 'maxKeys', 'clock', 'unref', 'onError', 'logger', 'onStoreError'];
// Buckets the local fallback keeps (least recently used evicted beyond).
const LOCAL_MAX_KEYS = 100000;

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
 * Every store: unref (an idle Redis limiter does not hold the process
 * open), onError(err) (a Redis node became unusable; also the 'error'
 * event when it has listeners, and 'recover' when the node answers again).
 * onStoreError: 'local' (default) or 'reject': while Redis cannot answer,
 * take() and get() decide with an in-memory limiter of this process on
 * the same policy, or reject.  The change into local decisions and back
 * is told once each ('error' with code ERR_SLUICE_LOCAL, then 'recover'
 * with reason 'local'; the logger; console.warn when nothing listens).
 */
class Limiter extends EventEmitter {
  constructor(opts = {}) {
    super();
    if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) throw new TypeError('Limiter options must be an object');
    opts = own(opts);
    knownOptions(opts, LIMITER_KEYS, 'new Limiter()', LIMITER_PEERS);
    const s = storeOptions(opts);
    this._closed = false;
    this._closing = null;
    this._onError = optFunction(opts.onError, 'onError', '(err) => ...');
    this._logger = loggerOption(opts.logger);
    this._down = new Map(); // node -> "kind: detail" of its failure
    const ose = opts.onStoreError === undefined ? 'local' : opts.onStoreError;
    if (ose !== 'local' && ose !== 'reject')
      throw new RangeError(`new Limiter(): onStoreError must be 'local' or 'reject', got ${typeof ose === 'string' ? JSON.stringify(ose) : typeName(ose)}`);
    this._localDefault = ose === 'local';
    // The local fallback: an in-memory store made at the first failure,
    // kept across outages (a store that flaps does not refill it), and
    // whether decisions are local now.  _epoch counts the changes: a
    // call ends or starts a fallback only if none happened while it was
    // on its way (a call sent before Redis came back that fails after
    // it did still decides locally, and says so).
    this._local = null;
    this._localBuf = null;
    this._fallback = false;
    this._epoch = 0;
    this._evicting = new Map(); // node -> why it may evict buckets
    const unref = optBoolean(opts.unref, 'unref', false);
    if (s.kind === 'memory' || s.kind === 'shared') {
      // Both local stores decide at once, through the same path.
      this.store = s.kind;
      // The store writes each decision here (the addon holds it).
      this._buf = new Float64Array(5);
      if (s.kind === 'memory') {
        this._mem = native.memoryNew(positiveInt(s.maxKeys, 'maxKeys', DEFAULT_MAX_KEYS, 2 ** 40), this._buf);
        this._take = native.memoryTake;
        this._peek = native.memoryPeek;
        this._admin = native.memoryAdmin;
      } else {
        this._mem = native.shmNew(s.path, positiveInt(s.maxKeys, 'maxKeys', DEFAULT_MAX_KEYS, 2 ** 32), s.group, this._buf);
        this._take = native.shmTake;
        this._peek = native.shmPeek;
        this._admin = native.shmAdmin;
      }
      this._redis = null;
      this._clock = optFunction(opts.clock, 'clock', '() -> microseconds since the epoch');
    } else {
      if (opts.clock !== undefined) throw new TypeError('clock applies to the memory store only (Redis decides on its own time)');
      if (opts.maxKeys !== undefined) throw new TypeError('maxKeys applies to the memory and shared stores only');
      this.store = 'redis';
      this._mem = null;
      this._take = null;
      // Calls waiting on Redis: id -> done (the addon answers an id, no
      // function or reference per call), and ids free for reuse.
      this._slots = [];
      this._freeIds = [];
      // Per id: 1 when the call falls back to the local limiter, and
      // what that needs (_fallbackAnswer).
      this._fbOn = [];
      this._fb = [];
      // The addon writes each batch of answers here (ANSWER_FIELDS
      // numbers each) and calls _answers(n) once for the batch.
      this._ans = new Float64Array(ANSWER_FIELDS * ANSWER_BATCH);
      this._ansAt = 0;
      this._redis = native.redisNew(this, redisOptions(s.redis, unref), this._ans);
    }
  }

  // The decision of one take (peek: of cost, charging nothing), as
  // numbers, to done(status, allowed, limit, remaining, retryAfterMs,
  // resetMs, which): synchronously on the local stores, from Node's loop
  // on Redis.  Arguments are already checked.
  // local: on a store failure, decide with the local fallback instead
  // (the answer then has status 0, and the fallback is told).
  _decide(key, p, cost, done, peek = false, local = this._localDefault) {
    if (this._closed) {
      done(CLOSED, false, 0, 0, 0, 0, 0);
      return;
    }
    if (this._mem !== null) {
      const b = this._buf;
      const fn = peek ? this._peek : this._take;
      const allowed = this._clock === null
        ? fn(this._mem, key, p._h, cost)
        : fn(this._mem, key, p._h, cost, this._clock());
      done(0, allowed, b[0], b[1], b[2], b[3], b[4]);
      return;
    }
    const id = this._slot(done);
    if (local) {
      // What a local decision needs, in a record kept per id (no
      // allocation per call once the ids are in use).
      let f = this._fb[id];
      if (f === undefined || f === null) f = this._fb[id] = { key: null, p: null, cost: 0, peek: false, epoch: 0 };
      f.key = key;
      f.p = p;
      f.cost = cost;
      f.peek = peek;
      f.epoch = this._epoch;
      this._fbOn[id] = 1;
    }
    try {
      (peek ? native.redisPeek : native.redisTake)(this._redis, key, p._h, cost, id);
    } catch (e) {
      this._unslot(id);
      throw e;
    }
  }

  _slot(done) {
    const id = this._freeIds.length > 0 ? this._freeIds.pop() : this._slots.length;
    this._slots[id] = done;
    this._fbOn[id] = 0;
    return id;
  }

  _unslot(id) {
    this._slots[id] = null;
    this._fbOn[id] = 0;
    this._freeIds.push(id);
  }

  // The answer of a call sent with the local fallback: a store failure
  // is decided by the local limiter (told when that starts); a success
  // of a call sent during a fallback ends it (told).
  _fallbackAnswer(key, p, cost, peek, epoch, done, status, allowed, limit, remaining, retry, reset, which) {
    if (status === 0) {
      if (!this._fallback || epoch !== this._epoch) {
        done(status, allowed, limit, remaining, retry, reset, which);
        return;
      }
      // The app's listeners run first (the log reads in order); one that
      // throws does not lose the answer.
      try {
        this._fallbackEnds();
      } finally {
        done(status, allowed, limit, remaining, retry, reset, which);
      }
      return;
    }
    if (status === CLOSED || this._closed) {
      done(status, allowed, limit, remaining, retry, reset, which);
      return;
    }
    if (this._fallback) {
      this._decideLocally(key, p, cost, peek, done, status);
      return;
    }
    try {
      this._fallbackStarts(status);
    } finally {
      this._decideLocally(key, p, cost, peek, done, status);
    }
  }

  // The local fallback's decision, to done; the store's failure (status)
  // when not even an in-memory store can be made.
  _decideLocally(key, p, cost, peek, done, status) {
    let ok;
    try {
      if (this._local === null) {
        this._localBuf = new Float64Array(5);
        this._local = native.memoryNew(LOCAL_MAX_KEYS, this._localBuf);
      }
      ok = (peek ? native.memoryPeek : native.memoryTake)(this._local, key, p._h, cost);
    } catch (e) {
      done(status, false, 0, 0, 0, 0, 0);
      return;
    }
    const b = this._localBuf;
    done(0, ok, b[0], b[1], b[2], b[3], b[4]);
  }

  _fallbackStarts(status) {
    this._fallback = true;
    this._epoch++;
    const cause = this._error(status);
    const err = sluiceError('ERR_SLUICE_LOCAL',
      `sluice: the Redis store cannot answer (${cause.message.replace(/^sluice: /, '')}); ` +
      'each process decides alone, with an in-memory limiter on the same policy, until it answers again');
    err.node = '';
    err.reason = 'local';
    err.detail = cause.message;
    err.cause = cause;
    const heard = this._logger !== null || this._onError !== null || this.listenerCount('error') > 0;
    this._tell(err, '', 'local', cause.message);
    // Nobody asked to hear of it: the limit is per process now, which
    // an operator must know.
    if (!heard) console.warn(err.message);
  }

  _fallbackEnds() {
    this._fallback = false;
    this._epoch++;
    const msg = 'sluice: the Redis store answers again; decisions are shared again';
    if (this._logger !== null) (this._logger.info !== undefined ? this._logger.info : this._logger.warn)(msg);
    else if (this.listenerCount('recover') === 0) console.warn(msg);
    this.emit('recover', { node: '', reason: 'local' });
  }

  /** true while store failures are decided by this process's local limiter. */
  get local() {
    return this._fallback;
  }

  // From the addon, inside one callback scope per batch: the first n rows
  // of the answer table, each (id, status, allowed, limit, remaining,
  // retryAfterMs, resetMs, which).  When a callback throws, the addon
  // reports it as uncaught and calls again: _ansAt keeps the place.
  _answers(n) {
    const a = this._ans;
    while (this._ansAt < n) {
      const o = this._ansAt++ * ANSWER_FIELDS;
      const id = a[o];
      const done = this._slots[id];
      if (this._fbOn[id] === 1) {
        // Read out first: the record is the id's, reused once it is free.
        const f = this._fb[id];
        const key = f.key;
        const p = f.p;
        f.key = f.p = null;
        this._unslot(id);
        this._fallbackAnswer(key, p, f.cost, f.peek, f.epoch, done,
          a[o + 1], a[o + 2] === 1, a[o + 3], a[o + 4], a[o + 5], a[o + 6], a[o + 7]);
        continue;
      }
      this._unslot(id);
      done(a[o + 1], a[o + 2] === 1, a[o + 3], a[o + 4], a[o + 5], a[o + 6], a[o + 7]);
    }
    this._ansAt = 0;
  }

  // The error of a failed call.  The message ends with what a Redis node
  // last reported and still has (a certificate that does not verify, a
  // refused password, no master), when there is such a failure.
  _error(status) {
    if (status === CLOSED || this._closed)
      return sluiceError('ERR_SLUICE_CLOSED', 'sluice: the limiter is closed');
    const [why, kind] = this._redis === null ? ['', ''] : native.redisLastError(this._redis);
    const tail = why === '' ? '' : ` (${why})`;
    if (status === SLUICE_ETIMEDOUT)
      return sluiceError('ERR_SLUICE_TIMEOUT', `sluice: the Redis store did not answer in time${tail}`);
    // A node refusing the calls (an ACL, a renamed command, OOM): its own
    // words, redacted, are in the message.
    if (kind === 'refused')
      return sluiceError('ERR_SLUICE_REFUSED', `sluice: the Redis store refused the call${tail}`);
    return sluiceError('ERR_SLUICE_STORE', `sluice: the Redis store failed: ${native.strerror(status)}${tail}`);
  }

  // From the addon, inside the Redis client: every node state change.
  // The app's hooks run later, outside the client (which they may call).
  _storeEvent(kind, node, detail) {
    setImmediate(() => this._nodeChanged(kind, node, detail));
  }

  _nodeChanged(kind, node, detail) {
    if (this._closed) return;
    if (kind === 'eviction_policy') {
      this._evictionChanged(node, detail);
    } else if (NODE_FAILURES.has(kind)) {
      const why = detail === '' ? kind : `${kind}: ${detail}`;
      if (this._down.get(node) === why) return; // the same state: once
      this._down.set(node, why);
      const code = kind === 'refused' ? 'ERR_SLUICE_REFUSED' : 'ERR_SLUICE_STORE';
      const what = kind === 'refused' ? 'refuses the calls' : 'cannot be used';
      this._tell(sluiceError(code, `sluice: Redis node ${node} ${what}: ${why}`), node, kind, detail);
    } else if ((kind === 'connected' && this._down.has(node)) || (kind === 'master_changed' && this._down.size > 0) ||
      (kind === 'breaker_closed' && (this._down.get(node) || '').startsWith('refused'))) {
      if (kind === 'master_changed') this._down.clear();
      else this._down.delete(node);
      this._recovered(node);
    }
  }

  // The node's maxmemory policy may evict buckets (a drained bucket
  // evicted is full again), or it cannot be known: an error the app hears
  // of, though takes go on; 'recover' once the node says it may not.
  _evictionChanged(node, detail) {
    if (detail.endsWith('buckets are never evicted')) {
      if (this._evicting.delete(node)) this._recovered(node);
      return;
    }
    if (this._evicting.get(node) === detail) return;
    this._evicting.set(node, detail);
    this._tell(sluiceError('ERR_SLUICE_EVICTION', `sluice: Redis node ${node} may evict buckets: ${detail}`),
      node, 'eviction_policy', detail);
  }

  _recovered(node) {
    if (this._logger !== null && this._logger.info !== undefined) this._logger.info(`sluice: Redis node ${node} answers again`);
    this.emit('recover', { node });
  }

  _tell(err, node, kind, detail) {
    err.node = node;
    err.reason = kind;
    err.detail = detail;
    if (this._logger !== null) this._logger.warn(err.message);
    if (this._onError !== null) this._onError(err);
    // 'error' without a listener would throw: an app that has not
    // asked is told through failed takes instead.
    if (this.listenerCount('error') > 0) this.emit('error', err);
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
    const cost = costOption(opts, 'take');
    return this._promise(key, p, cost, false);
  }

  /**
   * get(key, policy, { cost = 1 }) -> Promise<Decision>: the decision a take
   * of cost would get now, charging nothing (a drained bucket says
   * allowed: false with its retryAfterMs).
   */
  get(key, p, opts) {
    checkKey(key);
    checkPolicy(p);
    const cost = costOption(opts, 'get');
    return this._promise(key, p, cost, true);
  }

  _promise(key, p, cost, peek) {
    return new Promise((resolve, reject) => {
      this._decide(key, p, cost, (status, allowed, limit, remaining, retry, reset) => {
        if (status !== 0) reject(this._error(status));
        else resolve(decision(allowed, limit, remaining, retry, reset, p.name));
      }, peek);
    });
  }

  // One admin call: the same state sluice serve's /v1/reset and
  // /v1/refund change.
  _adminCall(key, p, n, op) {
    if (this._closed) return Promise.reject(this._error(CLOSED));
    if (this._mem !== null) {
      try {
        if (this._clock === null) this._admin(this._mem, key, p._h, n, op);
        else this._admin(this._mem, key, p._h, n, op, this._clock());
      } catch (e) {
        return Promise.reject(e);
      }
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const id = this._slot((status) => {
        if (status !== 0) reject(this._error(status));
        else resolve();
      });
      try {
        native.redisAdmin(this._redis, key, p._h, n, op, id);
      } catch (e) {
        this._unslot(id);
        throw e;
      }
    });
  }

  /** reset(key, policy) -> Promise<void>: every bucket of the key under the
   * policy becomes full. */
  reset(key, p) {
    checkKey(key);
    checkPolicy(p);
    return this._adminCall(key, p, 0, ADMIN_RESET);
  }

  /** refund(key, policy, n = 1) -> Promise<void>: n tokens back to each
   * limit, never above its capacity. */
  refund(key, p, n = 1) {
    checkKey(key);
    checkPolicy(p);
    checkCount(n, 'refund: n', 0);
    return this._adminCall(key, p, n, ADMIN_REFUND);
  }

  /** penalize(key, policy, n = 1) -> Promise<void>: n tokens charged with
   * no check; beyond empty, a debt that delays the next allowed request. */
  penalize(key, p, n = 1) {
    checkKey(key);
    checkPolicy(p);
    checkCount(n, 'penalize: n', 0);
    return this._adminCall(key, p, n, ADMIN_PENALIZE);
  }

  /** block(key, policy, ms) -> Promise<void>: no request of the key passes
   * for ms milliseconds; the first one after passes (a longer block or
   * debt already there stays). */
  block(key, p, ms) {
    checkKey(key);
    checkPolicy(p);
    checkCount(ms, 'block: ms', 1);
    return this._adminCall(key, p, ms, ADMIN_BLOCK);
  }

  /** set(key, policy, remaining) -> Promise<void>: every bucket of the key
   * under the policy holds `remaining` whole tokens from now (the
   * capacity or more: full), whatever it held. */
  set(key, p, remaining) {
    checkKey(key);
    checkPolicy(p);
    checkCount(remaining, 'set: remaining', 0);
    return this._adminCall(key, p, remaining, ADMIN_SET);
  }

  // ------------------------------------------------------ waiting a turn

  // One reservation (the store's reserve: charged now, into debt if need
  // be, the wait until this request's turn answered; refused, charging
  // nothing, past maxWaitUs), to done(status, reserved, waitUs, nowUs,
  // remaining, resetOrRetryMs, limit, token): synchronously on the local
  // stores, from Node's loop on Redis.  waitUs -1: never.  token (null
  // when refused): the states the reservation left, what _refundIf()
  // gives it back against.
  _reserve(key, p, cost, maxWaitUs, done) {
    if (this._closed) {
      done(CLOSED, false, 0, 0, 0, 0, 0, null);
      return;
    }
    if (this._mem !== null) {
      const b = this._buf;
      const fn = this.store === 'memory' ? native.memoryReserve : native.shmReserve;
      const token = this._clock === null
        ? fn(this._mem, key, p._h, cost, maxWaitUs)
        : fn(this._mem, key, p._h, cost, maxWaitUs, this._clock());
      done(0, token !== false, b[0], b[1], b[2], b[3], b[4], token === false ? null : token);
      return;
    }
    // The token is read as the answer is handled, before the id can be
    // reused.
    const id = this._slot((status, reserved, waitUs, nowUs, remaining, ms, limit) =>
      done(status, reserved, waitUs, nowUs, remaining, ms, limit,
        reserved ? native.redisToken(this._redis, id) : null));
    try {
      native.redisReserve(this._redis, key, p._h, cost, maxWaitUs, id);
    } catch (e) {
      this._unslot(id);
      throw e;
    }
  }

  // Gives a reservation back only while nothing was charged after it
  // (the store's refund_if: the key's buckets still hold the states of
  // its token) -> Promise<boolean> refunded.  A reservation made after
  // it was given the next turn; refunding ours then would let one
  // request more than the limit into that interval, so it stays
  // charged (its turn goes unused).  A token is good for one refund.
  _refundIf(key, p, cost, token) {
    if (this._closed) return Promise.reject(this._error(CLOSED));
    if (cost <= 0 || typeof token !== 'string' || token === '') return Promise.resolve(false);
    if (this._mem !== null) {
      const fn = this.store === 'memory' ? native.memoryRefundIf : native.shmRefundIf;
      try {
        return Promise.resolve(this._clock === null
          ? fn(this._mem, key, p._h, cost, token)
          : fn(this._mem, key, p._h, cost, token, this._clock()));
      } catch (e) {
        return Promise.reject(e);
      }
    }
    return new Promise((resolve, reject) => {
      const id = this._slot((status, refunded) => {
        if (status !== 0) reject(this._error(status));
        else resolve(refunded);
      });
      try {
        native.redisRefundIf(this._redis, key, p._h, cost, token, id);
      } catch (e) {
        this._unslot(id);
        reject(e);
      }
    });
  }

  /**
   * wait(key, policy, { maxWaitMs = 60000, cost = 1, signal }) ->
   * Promise<{ waitMs, turnAtUs, limit, remaining, policy }>: waits for
   * this request's turn instead of being refused.  One atomic step
   * reserves the cost (the bucket may go into debt) and answers when the
   * turn is; the promise resolves then.  Waiters in any number of
   * processes on one store are spaced exactly by the refill, with no
   * retries.  turnAtUs is the turn on the store's clock (microseconds
   * since the epoch; Redis: the server's), the same clock for every
   * waiter.  Rejects at once, charging nothing, when the turn is more
   * than maxWaitMs away (ERR_SLUICE_WAIT: err.waitMs says how long it
   * would have been, err.retryAfterMs when one would fit); an AbortSignal
   * that fires before the turn rejects (its reason) and gives the token
   * back only while nobody was given a turn after this one (a
   * conditional refund: refunding then would let one request more than
   * the limit through).  What happened is the 'aborted' event, once the
   * store answered: { key, policy, cost, refunded } (refunded false: the
   * turn goes unused; error set when the store failed).
   */
  wait(key, p, opts) {
    checkKey(key);
    checkPolicy(p);
    const { cost, maxWaitMs, signal } = waitOptions(opts, 'wait');
    if (signal !== null && signal.aborted) return Promise.reject(abortReason(signal));
    return new Promise((resolve, reject) => {
      this._reserve(key, p, cost, Math.floor(maxWaitMs * 1000), (status, reserved, waitUs, nowUs, remaining, ms, limit, token) => {
        if (status !== 0) {
          reject(this._error(status));
          return;
        }
        if (!reserved) {
          reject(waitRefused(p, waitUs, ms, maxWaitMs));
          return;
        }
        const turn = { waitMs: waitUs / 1000, turnAtUs: nowUs + waitUs, limit, remaining, policy: p.name };
        if (signal === null && waitUs <= 0) {
          resolve(turn);
          return;
        }
        this._waitTurn(key, p, cost, token, signal, waitUs, turn, resolve, reject);
      });
    });
  }

  // The timer of one reserved turn, and its abort: the timer cleared, the
  // promise rejected with the signal's reason, the cost given back if
  // nobody was given a turn after it, and the 'aborted' event told.
  _waitTurn(key, p, cost, token, signal, waitUs, turn, resolve, reject) {
    let timer = null;
    const onAbort = () => {
      if (timer !== null) clearTimeout(timer);
      reject(abortReason(signal));
      // A refund that fails leaves the charge (a turn unused), which
      // limits more, never less.
      this._refundIf(key, p, cost, token).then(
        (refunded) => this._aborted(key, p, cost, refunded, null),
        (err) => this._aborted(key, p, cost, false, err));
    };
    if (signal !== null) {
      if (signal.aborted) {
        onAbort();
        return;
      }
      signal.addEventListener('abort', onAbort, { once: true });
    }
    timer = setTimeout(() => {
      if (signal !== null) signal.removeEventListener('abort', onAbort);
      resolve(turn);
    }, Math.ceil(waitUs / 1000));
  }

  // Tells an aborted wait's outcome; a listener that throws is the
  // app's (reported as uncaught, as for any event).
  _aborted(key, p, cost, refunded, error) {
    if (this.listenerCount('aborted') === 0) return;
    const ev = { key, policy: p.name, cost, refunded };
    if (error !== null) ev.error = error;
    this.emit('aborted', ev);
  }

  /**
   * schedule(key, policy, fn, { maxWaitMs, cost, signal }) ->
   * Promise<fn's result>: wait() for the turn, then fn().  Rejects as
   * wait() does, without calling fn.
   */
  schedule(key, p, fn, opts) {
    if (typeof fn !== 'function') throw new TypeError(`schedule(key, policy, fn, opts): fn must be a function, got ${typeName(fn)}`);
    return this.wait(key, p, opts).then(() => fn());
  }

  // rate-limiter-flexible's method names: a TypeError pointing to
  // sluice's, not "is not a function".
  consume() { throw peerMethod('consume(key, points)', 'take(key, policy, { cost })'); }

  delete() { throw peerMethod('delete(key)', 'reset(key, policy)'); }

  penalty() { throw peerMethod('penalty(key, points)', 'penalize(key, policy, n)'); }

  reward() { throw peerMethod('reward(key, points)', 'refund(key, policy, n)'); }

  /** true when the store can answer now (memory: always; Redis: connected,
   * breaker closed) -- for a readiness probe. */
  healthy() {
    if (this._closed) return false;
    return this._redis === null ? true : native.redisHealthy(this._redis);
  }

  /** true once close() was called. */
  get closed() {
    return this._closed;
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

// wait()'s options: { maxWaitMs, cost, signal }.
function waitOptions(opts, what) {
  if (opts === undefined) return { cost: 1, maxWaitMs: WAIT_DEFAULT_MS, signal: null };
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts))
    throw new TypeError(`${what}(key, policy, opts): opts must be an object { maxWaitMs, cost, signal }, got ${typeName(opts)}`);
  opts = own(opts);
  knownKeys(opts, ['maxWaitMs', 'cost', 'signal'], `${what}()`);
  const cost = opts.cost === undefined ? 1 : opts.cost;
  checkCost(cost);
  let maxWaitMs = WAIT_DEFAULT_MS;
  if (opts.maxWaitMs !== undefined) {
    if (typeof opts.maxWaitMs !== 'number' || !(opts.maxWaitMs >= 0))
      throw new TypeError(`${what}(): maxWaitMs must be a number of milliseconds >= 0, got ${typeName(opts.maxWaitMs)}`);
    maxWaitMs = Math.min(opts.maxWaitMs, WAIT_MAX_MS);
  }
  const signal = opts.signal === undefined ? null : opts.signal;
  if (signal !== null && (typeof signal !== 'object' || typeof signal.addEventListener !== 'function' || !('aborted' in signal)))
    throw new TypeError(`${what}(): signal must be an AbortSignal, got ${typeName(signal)}`);
  return { cost, maxWaitMs, signal };
}

function abortReason(signal) {
  if (signal.reason !== undefined) return signal.reason;
  const e = new Error('The operation was aborted');
  e.name = 'AbortError';
  e.code = 'ABORT_ERR';
  return e;
}

// A wait refused: its turn was past maxWaitMs (waitUs -1: the cost exceeds
// a capacity and never passes).
function waitRefused(p, waitUs, retryMs, maxWaitMs) {
  const never = waitUs < 0;
  const e = sluiceError('ERR_SLUICE_WAIT', never
    ? `sluice: the cost exceeds the capacity of policy ${p.name}: it can never pass`
    : `sluice: the turn is ${Math.ceil(waitUs / 1000)} ms away, more than maxWaitMs (${maxWaitMs}); nothing was charged`);
  e.waitMs = never ? Infinity : waitUs / 1000;
  e.retryAfterMs = retryMs < 0 ? Infinity : retryMs;
  e.policy = p.name;
  return e;
}

// logger: what sluice would log (a store node failing, recovering, able
// to evict buckets), through the app's logger -- console, pino, winston,
// Fastify's app.log: an object with warn(message), and info(message) if
// it has one.  Its own properties or its class's (pino's methods live on
// its prototype), never Object.prototype's.
function loggerOption(l) {
  if (l === undefined) return null;
  if (l === null || typeof l !== 'object' && typeof l !== 'function')
    throw new TypeError(`logger must be an object with warn(message) (console, pino, winston, app.log), got ${typeName(l)}`);
  const warn = classProp(l, 'warn');
  const info = classProp(l, 'info');
  if (typeof warn !== 'function') throw new TypeError('logger must have a warn(message) method (console, pino, winston, app.log)');
  return { warn: (m) => warn.call(l, m), info: typeof info === 'function' ? (m) => info.call(l, m) : undefined };
}

function peerMethod(theirs, ours) {
  return new TypeError(`sluice: ${theirs} is rate-limiter-flexible's; in sluice that is limiter.${ours}`);
}

function costOption(opts, what) {
  let cost = 1;
  if (opts !== undefined) {
    if (opts === null || typeof opts !== 'object') throw new TypeError(`${what}() options must be an object`);
    opts = own(opts);
    knownOptions(opts, ['cost'], `${what}() options`);
    if (opts.cost !== undefined) cost = opts.cost;
  }
  checkCost(cost);
  return cost;
}

// ---------------------------------------------------------- client addresses

// A property of an object sluice did not make (a request, a socket), as
// its own class defines it: never inherited from Object.prototype, where a
// polluted `Object.prototype.ip` would answer for every request that has
// no `ip` of its own (node:http's), and pick its bucket.  Costs one check
// while Object.prototype has no such property.
const OBJECT_PROTO = Object.prototype;

function classProp(obj, name) {
  if (!Object.hasOwn(OBJECT_PROTO, name)) return obj[name];
  for (let o = obj; o !== null && o !== OBJECT_PROTO; o = Object.getPrototypeOf(o))
    if (Object.hasOwn(o, name)) return obj[name];
  return undefined;
}

// An IPv4 address exactly as inet_ntop writes it (no leading zero, each
// part <= 255): its key is itself, with no call into the addon.  Every
// other text goes to the addon's parser, sluice serve's own.
const IPV4_KEY = /^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$/;

// The key of an address text, or null when it is no address.
function addressKey(address, bits) {
  if (IPV4_KEY.test(address)) return address;
  return native.ipKey(address, bits);
}

function subnetBits(subnet, what) {
  if (subnet === false) return 128;
  if (!Number.isInteger(subnet) || subnet < 1 || subnet > 128)
    throw new RangeError(`${what} must be a prefix length from 1 to 128 (default 64) or false, got ${subnet}`);
  return subnet;
}

/**
 * ipKey(address, subnet = 64) -> the bucket key of a client address, as
 * `sluice serve` keys it (the same parser, in the addon): a port, the
 * brackets of "[2001:db8::1]:443" and an IPv6 zone are dropped; an IPv4
 * address as it is (an IPv4-mapped IPv6 address as its IPv4); an IPv6
 * address as its /subnet network ("2001:db8:1:2::/64"), since one client
 * commonly holds a whole /64.  subnet false keeps the address whole.  A
 * text that is no address is a TypeError.
 */
function ipKey(address, subnet = 64) {
  const bits = subnetBits(subnet, 'ipKey(): subnet');
  if (typeof address !== 'string' || address === '')
    throw new TypeError(`the client address is unknown (got ${typeName(address)}): the connection may be gone`);
  const k = addressKey(address, bits);
  if (k === null) throw new TypeError(`${JSON.stringify(address.slice(0, 100))} is not an IP address`);
  return k;
}

// The default key: the client's address -- Express's req.ip (which
// follows `trust proxy`), Fastify's request.ip (`trustProxy`), else the
// socket's peer (node:http, Connect); never a header the client could
// write.  An address that does not parse (an X-Forwarded-For entry such
// as "unknown" that the framework handed on) gives way to the socket's
// peer, the proxy that sent it, as sluice serve's walk stops at an entry
// it cannot read: never a bucket of the client's choosing.
function defaultKey(req, bits) {
  const ip = classProp(req, 'ip');
  if (typeof ip === 'string' && ip !== '') {
    const k = addressKey(ip, bits);
    if (k !== null) return k;
  }
  let sock = classProp(req, 'socket');
  if (sock === undefined || sock === null) {
    const raw = classProp(req, 'raw');
    if (raw !== null && typeof raw === 'object') sock = classProp(raw, 'socket');
  }
  const peer = sock !== null && typeof sock === 'object' ? classProp(sock, 'remoteAddress') : undefined;
  if (typeof peer === 'string' && peer !== '') {
    const k = addressKey(peer, bits);
    if (k !== null) return k;
  }
  throw new TypeError(`the client address is unknown (got ${typeName(peer)}): the connection may be gone`);
}

// ---------------------------------------------------------------- middleware

const LIMITED = (retryMs, name) => `{"error":"rate_limited","retry_after_ms":${retryMs},"policy":"${name}"}`;
const STORE_DOWN = '{"error":"store_unavailable","message":"the rate-limit store failed and the limiter fails closed"}';
const LIMITER_CLOSED = '{"error":"limiter_closed","message":"the rate limiter is closed"}';
const JSON_TYPE = 'application/json';
const TEXT_TYPE = 'text/plain; charset=utf-8';

// The remaining count of the answer's winning limiter, per response, for
// stacked limiters.  Not a property of the response: a symbol added to
// every ServerResponse changed its shape and cost more than the decision
// itself (bench/node/overhead.js: 10.5 -> 6.0 µs per call on the memory
// store).  In the response's header store when sluice writes there (a
// symbol key, which node never lists, sends or counts as a header), else
// in a WeakMap (whose entries cost the garbage collector more).
const REMAINING = new WeakMap();
const K_REMAINING = Symbol('sluice.remaining');

function prevRemaining(res, store) {
  if (store !== null) return store[K_REMAINING];
  const prev = REMAINING.get(res);
  if (prev !== undefined || OUT_HEADERS === null) return prev;
  const h = res[OUT_HEADERS];
  return h === null || h === undefined ? undefined : h[K_REMAINING];
}

function keepRemaining(res, store, remaining) {
  if (store !== null) store[K_REMAINING] = remaining;
  else REMAINING.set(res, remaining);
}

// The RateLimit-Policy lists written so far on this response, in both
// syntaxes (draft-11/8's named items, draft-6/7's plain ones), so that a
// stacked limiter writes the whole list in the deciding limiter's syntax:
// never two syntaxes in one field.  Beside the remaining count.
const POLICIES = new WeakMap();
const K_POL_NAMED = Symbol('sluice.policies.named');
const K_POL_PLAIN = Symbol('sluice.policies.plain');

function prevPolicies(res, store) {
  if (store !== null) return store[K_POL_NAMED] === undefined ? undefined : [store[K_POL_NAMED], store[K_POL_PLAIN]];
  const prev = POLICIES.get(res);
  if (prev !== undefined || OUT_HEADERS === null) return prev;
  const h = res[OUT_HEADERS];
  return h === null || h === undefined || h[K_POL_NAMED] === undefined ? undefined : [h[K_POL_NAMED], h[K_POL_PLAIN]];
}

function keepPolicies(res, store, named, plain) {
  if (store !== null) {
    store[K_POL_NAMED] = named;
    store[K_POL_PLAIN] = plain;
  } else {
    POLICIES.set(res, [named, plain]);
  }
}

// Removes a header another limiter wrote on this response.
function dropHeader(io, res, store, lower, name) {
  if (store !== null) delete store[lower];
  else io.remove(res, name);
}

// One header: straight into the store, or through the framework.
function putHeader(io, res, store, lower, name, value) {
  if (store !== null) store[lower] = [name, value];
  else io.set(res, name, value);
}

const MIDDLEWARE_KEYS = ['limiter', 'policy', 'key', 'ipv6Subnet', 'cost', 'skip', 'handler', 'statusCode', 'message',
  'headers', 'requestPropertyName', 'onStoreError', 'skipSuccessfulRequests', 'skipFailedRequests', 'requestWasSuccessful', 'blockDuration',
  'delay'];
const STANDARDS = ['draft-11', 'draft-8', 'draft-7', 'draft-6'];
const HEADER_KEYS = ['standard', 'legacy', 'reset'];

// headers: 'draft-11' | 'draft-8' | 'draft-7' | 'draft-6' | true | false |
// { standard, legacy, reset: 'seconds' | 'epoch' } -> { standard, legacy,
// epoch } or null (no rate-limit headers at all).
function headerOptions(h, what) {
  const out = { standard: 'draft-11', legacy: true, epoch: false };
  if (h === undefined || h === true) return out;
  if (h === false) return null;
  if (typeof h === 'string') {
    if (!STANDARDS.includes(h)) throw new RangeError(`${what}.headers: "${h}" is not one of ${STANDARDS.join(', ')}`);
    out.standard = h;
    return out;
  }
  if (h === null || typeof h !== 'object' || Array.isArray(h))
    throw new TypeError(`${what}.headers must be 'draft-11', 'draft-8', 'draft-7', 'draft-6', false or { standard, legacy, reset }, got ${typeName(h)}`);
  h = own(h);
  knownOptions(h, HEADER_KEYS, `${what}.headers`);
  if (h.standard !== undefined) {
    if (h.standard !== false && !STANDARDS.includes(h.standard))
      throw new RangeError(`${what}.headers.standard must be one of ${STANDARDS.join(', ')} or false, got ${JSON.stringify(h.standard)}`);
    out.standard = h.standard;
  }
  out.legacy = optBoolean(h.legacy, `${what}.headers.legacy`, true);
  if (h.reset !== undefined && h.reset !== 'seconds' && h.reset !== 'epoch')
    throw new RangeError(`${what}.headers.reset must be 'seconds' (until full) or 'epoch' (Unix time, seconds), got ${JSON.stringify(h.reset)}`);
  out.epoch = h.reset === 'epoch';
  if (out.standard === false && !out.legacy) return null;
  return out;
}

// The draft-8 partition key: a hash of the key, never the key itself.
function partitionKey(key) {
  return require('node:crypto').createHash('sha256').update(key).digest().subarray(0, 12).toString('base64');
}

// node's ServerResponse keeps its headers in an own property under an
// internal symbol (kOutHeaders), lower-cased name -> [name, value], which
// setHeader() fills after checking the name and the value and which
// getHeader(), writeHead() and the header block read.  The rate-limit
// headers have fixed names and values sluice builds (numbers, policy names
// of [A-Za-z0-9_.-], base64), so nothing needs checking: they go straight
// there, for a fifth of setHeader()'s cost.  Found once by its effect on a
// probe response; when it is not found, or the response is not a plain
// node one (no such property, headers sent, setHeader replaced), the
// headers go through setHeader() as before.
const OUTGOING = http.OutgoingMessage.prototype;
const SET_HEADER = OUTGOING.setHeader;

// Whether node's setHeader is node's own: a library loaded before sluice
// may have replaced it already (a header audit, a filter), and the direct
// path must not go around that.  Asked of the function itself: given a
// bad name, node's throws ERR_INVALID_HTTP_TOKEN from node:_http_outgoing,
// called straight from here -- a wrapper would be a frame in between, or
// throw its own error.  On any doubt, no.
function nodesOwnSetHeader(fn) {
  const { prepareStackTrace, stackTraceLimit } = Error;
  let sites = null;
  let code = null;
  try {
    Error.stackTraceLimit = 10;
    Error.prepareStackTrace = (e, callSites) => callSites;
    try {
      fn.call(new http.ServerResponse(new http.IncomingMessage(null)), '', '');
    } catch (e) {
      code = e.code;
      sites = e.stack;
    }
  } finally {
    Error.prepareStackTrace = prepareStackTrace;
    Error.stackTraceLimit = stackTraceLimit;
  }
  return code === 'ERR_INVALID_HTTP_TOKEN' && Array.isArray(sites) && sites.length >= 2 &&
    sites[0].getFileName() === 'node:_http_outgoing' &&
    sites[1].getFileName() === __filename && sites[1].getFunctionName() === 'nodesOwnSetHeader';
}

const OUT_HEADERS = (() => {
  try {
    if (!nodesOwnSetHeader(SET_HEADER)) return null;
    const res = new http.ServerResponse(new http.IncomingMessage(null));
    for (const sym of Object.getOwnPropertySymbols(res)) {
      if (res[sym] !== null) continue;
      res.setHeader('X-Sluice-Probe', '1');
      const h = res[sym];
      const found = h !== null && typeof h === 'object' && Array.isArray(h['x-sluice-probe']);
      res.removeHeader('X-Sluice-Probe');
      if (!found) continue;
      // And the other way: what is put there is what node reads.
      h['x-sluice-probe'] = ['X-Sluice-Probe', 2];
      const seen = res.getHeader('x-sluice-probe') === 2 && res.getHeaderNames().includes('x-sluice-probe');
      delete h['x-sluice-probe'];
      if (seen && res.getHeaderNames().length === 0) return sym;
    }
  } catch {
    // Another node: setHeader() it is.
  }
  return null;
})();

// The prototype of the header stores sluice makes: empty and frozen, so
// that a store reads and enumerates exactly as node's own ({ __proto__:
// null }: no inherited name, no __proto__ accessor), but starts as an
// object with fast properties.  node's starts in dictionary mode, whose
// table V8 reallocates as it grows: from the fourth header and again from
// the sixth, about 700 bytes a response with sluice's five headers, its
// two slots and the app's own few, where fast properties add a 3-slot
// array now and then (and node's for-in over them uses the map's cached
// key list instead of building one per response).
const HEADER_STORE_PROTO = Object.freeze(Object.create(null));

// The header store of a plain node response, to write sluice's headers
// into directly (made when the response has none yet), or null: then they
// go through the framework's own call.
//
// Only when nothing replaced setHeader anywhere a call res.setHeader()
// would look: not on the response itself, not on any prototype between it
// and node's (Express's app.response and express.response, a library's
// subclass), not on node's own.  A header filter or audit installed there
// then sees sluice's headers like any other.  The lookup starts at the
// response's prototype, not at the response: Express sets every
// response's prototype, so a load through the response misses its inline
// cache on every request, while the prototype (app.response, or node's
// ServerResponse.prototype) keeps its shape and V8 revalidates the cached
// load whenever any object of the chain changes -- the whole chain is
// checked each time at the cost of one monomorphic load.
function directHeaders(res) {
  if (OUT_HEADERS === null || res._header || Object.hasOwn(res, 'setHeader')) return null;
  const proto = Object.getPrototypeOf(res);
  if (proto === null || proto.setHeader !== SET_HEADER) return null;
  let h = res[OUT_HEADERS];
  if (h === undefined) return null;
  if (h === null) res[OUT_HEADERS] = h = Object.create(HEADER_STORE_PROTO);
  return h;
}

// req.rateLimit (or the configured name) without a property added to the
// request.  Express gives every request its app's prototype
// (Object.setPrototypeOf), and V8 then makes a new hidden class for each
// property added to that request afterwards: a plain `req.rateLimit =
// info` cost about 3 µs a request, more than the decision.  So on such a
// prototype (not node's IncomingMessage.prototype, whose requests keep
// cached shapes) sluice defines the name once, as an accessor reading the
// decision from a symbol slot of the response's header store (which
// sluice fills anyway, and which node never sends or lists), through
// Express's req.res.  Assigning it (another limiter, the app) makes an
// own property as before.  Where the slot cannot be used (no header store,
// no req.res, a prototype that has the name already) the property is
// assigned as before.
const REQ_SLOTS = new Map(); // name -> { sym, get, set }
const IN_PROTO = http.IncomingMessage.prototype;

function requestSlot(name) {
  let slot = REQ_SLOTS.get(name);
  if (slot === undefined) {
    const sym = Symbol(`sluice.${name}`);
    slot = {
      sym,
      get() {
        const res = this.res;
        const h = res !== null && typeof res === 'object' && OUT_HEADERS !== null ? res[OUT_HEADERS] : undefined;
        return h === null || h === undefined ? undefined : h[sym];
      },
      set(v) {
        Object.defineProperty(this, name, { value: v, writable: true, enumerable: true, configurable: true });
      },
    };
    REQ_SLOTS.set(name, slot);
  }
  return slot;
}

// Whether requests of this prototype read `name` from the slot: defines
// the accessor when the prototype has no such name.  Not configurable, so
// that the answer holds for the prototype's lifetime.
function protoUsesSlot(proto, name) {
  if (proto === null || proto === IN_PROTO || OUT_HEADERS === null || !Object.isExtensible(proto)) return false;
  const slot = requestSlot(name);
  const d = Object.getOwnPropertyDescriptor(proto, name);
  if (d === undefined) {
    if (name in proto) return false;
    Object.defineProperty(proto, name, { get: slot.get, set: slot.set, enumerable: false, configurable: false });
    return true;
  }
  return d.get === slot.get;
}

// Leaves the decision for later handlers as c.prop of req.
function keepInfo(c, req, res, store, info) {
  if (store !== null) {
    const proto = Object.getPrototypeOf(req);
    if (proto !== c.reqProto) {
      c.reqSlot = protoUsesSlot(proto, c.prop);
      c.reqProto = proto;
    }
    // An own property (assigned earlier for this request) shadows the
    // slot: then it is assigned again.
    if (c.reqSlot && req.res === res && !Object.hasOwn(req, c.prop)) {
      store[c.reqSym] = info;
      return;
    }
  }
  // The usual name as a named store, whose transition the inline cache
  // keeps; a computed name goes through a keyed store.
  if (c.prop === 'rateLimit') req.rateLimit = info;
  else req[c.prop] = info;
}

// How one framework writes an answer.
const NODE_IO = {
  set: (res, name, value) => res.setHeader(name, value),
  direct: directHeaders,
  get: (res, name) => res.getHeader(name),
  remove: (res, name) => res.removeHeader(name),
  send(res, status, type, body) {
    res.statusCode = status;
    res.setHeader('Content-Type', type);
    res.end(body);
  },
};
const FASTIFY_IO = {
  set: (reply, name, value) => { reply.header(name, value); },
  direct: () => null,
  get: (reply, name) => reply.getHeader(name),
  remove: (reply, name) => { reply.removeHeader(name); },
  send(reply, status, type, body) {
    reply.code(status).type(type).send(body);
  },
};

const isThenable = (v) => v !== null && typeof v === 'object' && typeof v.then === 'function';

/*
 * The checked options of one middleware (or Fastify plugin) -- every
 * option validated once, here, so a request costs no checks but the
 * values the app's functions return.
 */
function middlewareOptions(opts, what) {
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) throw new TypeError(`${what}() takes an options object`);
  opts = own(opts);
  knownOptions(opts, MIDDLEWARE_KEYS, `${what}()`, MIDDLEWARE_PEERS);
  const c = {};
  c.limiter = opts.limiter;
  if (!(c.limiter instanceof Limiter)) throw new TypeError(`${what}(): limiter must be a sluice.Limiter, got ${typeName(c.limiter)}`);
  const pol = opts.policy;
  if (!(pol instanceof Policy) && typeof pol !== 'function')
    throw new TypeError(`${what}(): policy must be a sluice.policy() or a function (req) -> policy`);
  c.policy = pol instanceof Policy ? pol : null;
  c.policyFn = typeof pol === 'function' ? pol : null;
  const bits = subnetBits(opts.ipv6Subnet === undefined ? 64 : opts.ipv6Subnet, `${what}(): ipv6Subnet`);
  c.keyFn = optFunction(opts.key, `${what}(): key`, '(req) -> string | Buffer');
  if (c.keyFn === null) c.keyFn = (req) => defaultKey(req, bits);
  else if (opts.ipv6Subnet !== undefined) throw new TypeError(`${what}(): ipv6Subnet applies to the default key only (use sluice.ipKey(address, subnet) in yours)`);
  c.cost = 1;
  c.costFn = null;
  if (typeof opts.cost === 'number') {
    checkCount(opts.cost, `${what}(): cost`, 0);
    c.cost = opts.cost;
  } else {
    c.costFn = optFunction(opts.cost, `${what}(): cost`, '(req) -> whole number, or a number');
  }
  c.skip = optFunction(opts.skip, `${what}(): skip`, '(req, res) -> boolean');
  c.handler = optFunction(opts.handler, `${what}(): handler`, '(req, res, next, info) => ...');
  c.statusCode = 429;
  if (opts.statusCode !== undefined) {
    if (!Number.isInteger(opts.statusCode) || opts.statusCode < 400 || opts.statusCode > 599)
      throw new RangeError(`${what}(): statusCode must be an HTTP error status (400-599), got ${opts.statusCode}`);
    c.statusCode = opts.statusCode;
  }
  const m = opts.message;
  if (m !== undefined && typeof m !== 'string' && typeof m !== 'function' && (m === null || typeof m !== 'object'))
    throw new TypeError(`${what}(): message must be a string, an object (sent as JSON) or a function (req, res, info), got ${typeName(m)}`);
  c.message = m === undefined ? null : m;
  c.headers = headerOptions(opts.headers, `${what}()`);
  const prop = opts.requestPropertyName === undefined ? 'rateLimit' : opts.requestPropertyName;
  if (prop !== false && (typeof prop !== 'string' || prop === ''))
    throw new TypeError(`${what}(): requestPropertyName must be a property name or false, got ${typeName(prop)}`);
  c.prop = prop === false ? null : prop;
  c.reqSym = c.prop === null ? null : requestSlot(c.prop).sym;
  c.reqProto = undefined; // the request prototype last seen, and
  c.reqSlot = false; //      whether its requests read c.prop from the slot
  const ose = opts.onStoreError === undefined ? 'local' : opts.onStoreError;
  if (ose !== 'local' && ose !== 'open' && ose !== 'closed' && typeof ose !== 'function')
    throw new RangeError(`${what}(): onStoreError must be 'local', 'open', 'closed' or a function (err, req, res, next), got ${JSON.stringify(ose)}`);
  c.onStoreError = ose;
  // 'local': the limiter's local fallback decides (and the headers go
  // out as usual); the others see the failure.
  c.local = ose === 'local';
  c.skipOk = optBoolean(opts.skipSuccessfulRequests, `${what}(): skipSuccessfulRequests`, false);
  c.skipFailed = optBoolean(opts.skipFailedRequests, `${what}(): skipFailedRequests`, false);
  c.wasOk = optFunction(opts.requestWasSuccessful, `${what}(): requestWasSuccessful`, '(req, res) -> boolean');
  if (c.wasOk !== null && !c.skipOk && !c.skipFailed)
    throw new TypeError(`${what}(): requestWasSuccessful needs skipSuccessfulRequests or skipFailedRequests`);
  if (c.wasOk === null) c.wasOk = (req, res) => res.statusCode < 400;
  // Called for a request that was charged (allowed, cost > 0), and only
  // then: what may later be refunded is exactly what was charged.  A
  // limited request that a handler passes on with next(), and one passed
  // uncharged by onStoreError, have nothing to give back.
  c.charged = c.skipOk || c.skipFailed ? watchOutcome : null;
  c.blockMs = 0;
  if (opts.blockDuration !== undefined) {
    checkCount(opts.blockDuration, `${what}(): blockDuration`, 1);
    c.blockMs = opts.blockDuration;
  }
  // delay: { maxWaitMs }: a request over the limit waits for its turn
  // (nginx's limit_req without nodelay) instead of being refused, unless
  // that turn is more than maxWaitMs away.
  c.delayUs = 0;
  if (opts.delay !== undefined) {
    plainObject(opts.delay, `${what}(): delay`, '{ maxWaitMs: 2000 }');
    const d = own(opts.delay);
    knownKeys(d, ['maxWaitMs'], `${what}(): delay`);
    if (typeof d.maxWaitMs !== 'number' || !(d.maxWaitMs > 0))
      throw new TypeError(`${what}(): delay.maxWaitMs must be a number of milliseconds > 0, got ${typeName(d.maxWaitMs)}`);
    c.delayUs = Math.floor(Math.min(d.maxWaitMs, WAIT_MAX_MS) * 1000);
  }
  return c;
}

// The draft-11 (and draft-8) RateLimit value, "<name>";r=<remaining>;t=<s>:
// the one built last for each remaining count (modulo ITEM_SLOTS) is kept
// with its numbers and given again while both numbers are the same --
// under steady traffic most answers repeat a few values, and building one
// cost about 120 bytes of short-lived strings a request.
function rateLimitItem(p, remaining, resetS) {
  const c = p._items;
  const i = remaining & (ITEM_SLOTS - 1);
  if (c.r[i] === remaining && c.t[i] === resetS) return c.s[i];
  const s = `${p._quotedName};r=${remaining};t=${resetS}`;
  c.r[i] = remaining;
  c.t[i] = resetS;
  c.s[i] = s;
  return s;
}

const STANDARD_VALUE_HEADERS = [['ratelimit', 'RateLimit'], ['ratelimit-limit', 'RateLimit-Limit'],
  ['ratelimit-remaining', 'RateLimit-Remaining'], ['ratelimit-reset', 'RateLimit-Reset']];
const LEGACY_HEADERS = [['x-ratelimit-limit', 'X-RateLimit-Limit'], ['x-ratelimit-remaining', 'X-RateLimit-Remaining'],
  ['x-ratelimit-reset', 'X-RateLimit-Reset']];

// The limiter's time in microseconds (its clock, else the wall clock:
// Redis decides on its own, which the wall clock approximates).
function limiterNow(limiter) {
  return limiter._clock !== null && limiter._clock !== undefined ? limiter._clock() : Date.now() * 1000;
}

// The rate-limit headers of one decision.  `res` is what io writes to;
// store is io.direct(res).
function writeHeaders(io, res, store, c, p, key, limit, remaining, resetMs, which, allowed) {
  const h = c.headers;
  const prev = prevRemaining(res, store);
  const stacked = prev !== undefined;
  // Several limiters on one answer: the most restrictive one's headers
  // stay (a rejection, else the fewest remaining; the first on a tie), and
  // RateLimit-Policy lists every policy.
  const wins = !stacked || !allowed || remaining < prev;
  const resetS = Math.ceil(resetMs / 1000);
  if (h.standard !== false) {
    const namedSyntax = h.standard === 'draft-11' || h.standard === 'draft-8';
    let named = p._policyHeaders[which];
    let plain = p._plainHeaders[which];
    if (p._hasQuota) [named, plain] = p._headers(which, resetMs, limiterNow(c.limiter));
    if (h.standard === 'draft-8') named += `;pk=:${partitionKey(key)}:`;
    let pol = namedSyntax ? named : plain;
    const before = stacked ? prevPolicies(res, store) : undefined;
    if (before !== undefined) {
      // Every policy of the answer, in one syntax: the deciding
      // limiter's (this one when it wins, else the one before).
      const namedAll = wins ? `${named}, ${before[0]}` : `${before[0]}, ${named}`;
      const plainAll = wins ? `${plain}, ${before[1]}` : `${before[1]}, ${plain}`;
      const useNamed = wins ? namedSyntax : io.get(res, 'RateLimit-Policy') === before[0];
      pol = useNamed ? namedAll : plainAll;
      keepPolicies(res, store, namedAll, plainAll);
    } else {
      keepPolicies(res, store, named, plain);
    }
    putHeader(io, res, store, 'ratelimit-policy', 'RateLimit-Policy', pol);
    if (wins) {
      switch (h.standard) {
        case 'draft-11':
        case 'draft-8':
        case 'draft-7':
          if (h.standard === 'draft-7') putHeader(io, res, store, 'ratelimit', 'RateLimit', `limit=${limit}, remaining=${remaining}, reset=${resetS}`);
          else putHeader(io, res, store, 'ratelimit', 'RateLimit', rateLimitItem(p, remaining, resetS));
          // A draft-6 limiter before this one: its numbers are not this answer's.
          if (stacked) {
            dropHeader(io, res, store, 'ratelimit-limit', 'RateLimit-Limit');
            dropHeader(io, res, store, 'ratelimit-remaining', 'RateLimit-Remaining');
            dropHeader(io, res, store, 'ratelimit-reset', 'RateLimit-Reset');
          }
          break;
        default:
          putHeader(io, res, store, 'ratelimit-limit', 'RateLimit-Limit', limit);
          putHeader(io, res, store, 'ratelimit-remaining', 'RateLimit-Remaining', remaining);
          putHeader(io, res, store, 'ratelimit-reset', 'RateLimit-Reset', resetS);
          if (stacked) dropHeader(io, res, store, 'ratelimit', 'RateLimit');
      }
    }
  } else if (wins && stacked) {
    // The deciding limiter sends no RateLimit fields: another's would
    // describe a limit that did not decide.
    for (const [lower, name] of STANDARD_VALUE_HEADERS) dropHeader(io, res, store, lower, name);
  }
  // Likewise the X-RateLimit-* of a limiter that no longer decides.
  if (wins && stacked && !h.legacy) for (const [lower, name] of LEGACY_HEADERS) dropHeader(io, res, store, lower, name);
  if (wins && h.legacy) {
    putHeader(io, res, store, 'x-ratelimit-limit', 'X-RateLimit-Limit', limit);
    putHeader(io, res, store, 'x-ratelimit-remaining', 'X-RateLimit-Remaining', remaining);
    putHeader(io, res, store, 'x-ratelimit-reset', 'X-RateLimit-Reset', h.epoch ? Math.ceil((Date.now() + resetMs) / 1000) : resetS);
  }
  if (wins) keepRemaining(res, store, remaining);
  return wins;
}

// Gives the charge back when the response finishes as the options say
// it should not count (skipSuccessfulRequests / skipFailedRequests).  A
// connection closed before the response finished keeps its charge: the
// client chose to hang up, and the handler may have done the work
// anyway (were it refunded as a failure, a client hanging up on every
// request would never be limited).
function watchOutcome(c, req, res, key, p, cost, token) {
  res.once('finish', () => {
    const ok = c.wasOk(req, res);
    if (ok ? c.skipOk : c.skipFailed) giveBack(c, key, p, cost, token);
  });
}

// A charge given back as the options say (best effort: an unreturned
// charge limits more, never less).  A delayed request's (token: its
// reservation's) only while nobody was given a turn after it: others
// were queued behind it, and refunding would let one more request into
// that interval than the limit allows.
function giveBack(c, key, p, cost, token) {
  if (token === undefined) c.limiter.refund(key, p, cost).catch(() => {});
  else c.limiter._refundIf(key, p, cost, token).catch(() => {});
}

/*
 * Answers one request once its inputs are known: decides, writes the
 * headers, and passes, limits or applies the store-error mode.  raw is
 * the node:http response the outcome is watched on; next(err?) continues.
 * The local stores answer synchronously, with no closure per request.
 */
function decideRequest(c, io, req, res, raw, next, p, key, cost) {
  const limiter = c.limiter;
  if (limiter._closed) {
    storeFailed(c, io, req, res, next, CLOSED);
    return;
  }
  if (c.delayUs > 0) {
    delayRequest(c, io, req, res, raw, next, p, key, cost);
    return;
  }
  if (limiter._mem !== null && limiter._clock === null) {
    const d = limiter._buf;
    const allowed = limiter._take(limiter._mem, key, p._h, cost);
    answer(c, io, req, res, raw, next, p, key, cost, allowed, d[0], d[1], d[2], d[3], d[4]);
    return;
  }
  limiter._decide(key, p, cost, (status, allowed, limit, remaining, retryMs, resetMs, which) => {
    if (status !== 0) storeFailed(c, io, req, res, next, status);
    else answer(c, io, req, res, raw, next, p, key, cost, allowed, limit, remaining, retryMs, resetMs, which);
  }, false, c.local);
}

// delay: the request is reserved its turn and passed on then; refused
// (nothing charged) as a limited request when the turn is past
// delay.maxWaitMs.  Headers say what the reservation left.
function delayRequest(c, io, req, res, raw, next, p, key, cost) {
  c.limiter._reserve(key, p, cost, c.delayUs, (status, reserved, waitUs, nowUs, remaining, ms, limit, token) => {
    if (status !== 0) {
      storeFailed(c, io, req, res, next, status);
      return;
    }
    if (!reserved) {
      const retry = ms < 0 ? Infinity : ms;
      answer(c, io, req, res, raw, next, p, key, cost, false, limit, remaining, retry, ms < 0 ? 0 : ms, 0);
      return;
    }
    const go = () => answer(c, io, req, res, raw, next, p, key, cost, true, limit, remaining, 0, ms, 0, token);
    if (waitUs <= 0) go();
    else setTimeout(go, Math.ceil(waitUs / 1000));
  });
}

// token: a delayed request's reservation (refunded conditionally).
function answer(c, io, req, res, raw, next, p, key, cost, allowed, limit, remaining, retryMs, resetMs, which, token) {
  let wins;
  const store = io.direct(res);
  if (c.headers !== null) {
    wins = writeHeaders(io, res, store, c, p, key, limit, remaining, resetMs, which, allowed);
  } else {
    const prev = prevRemaining(res, store);
    wins = prev === undefined || !allowed || remaining < prev;
    if (wins) keepRemaining(res, store, remaining);
  }
  // A cost that can never pass waits for a whole window, as sluice
  // serve says it.
  const retry = retryMs !== Infinity ? retryMs
    : p._quotas[which] ? p._window(which, -1, 0, limiterNow(c.limiter)) * 1000 : p._windowsMs[which];
  let info = null;
  if (c.prop !== null && wins) {
    info = { allowed, limit, remaining, retryAfterMs: allowed ? 0 : retry, resetMs, policy: p.name, key, cost };
    keepInfo(c, req, res, store, info);
  }
  if (allowed) {
    if (c.charged !== null && cost > 0) c.charged(c, req, raw, key, p, cost, token);
    next();
    return;
  }
  limited(c, io, req, res, next, p, key, cost, info, limit, remaining, retry, resetMs);
}

function limited(c, io, req, res, next, p, key, cost, info, limit, remaining, retry, resetMs) {
  if (c.headers !== null) io.set(res, 'Retry-After', Math.max(1, Math.ceil(retry / 1000)));
  if (c.headers !== null && c.headers.legacy) io.set(res, 'X-RateLimit-Retry-After-Ms', retry);
  if (info === null) info = { allowed: false, limit, remaining, retryAfterMs: retry, resetMs, policy: p.name, key, cost };
  // blockDuration: a key that hits the limit passes nothing more for
  // that long from its last refused request (a client that keeps trying
  // while blocked stays blocked; a block already longer stays).  Best
  // effort: when the store cannot block, the limit itself still holds.
  if (c.blockMs > 0) c.limiter.block(key, p, c.blockMs).catch(() => {});
  if (c.handler !== null) {
    c.handler(req, res, next, info);
    return;
  }
  const m = c.message;
  if (m === null) {
    io.send(res, c.statusCode, JSON_TYPE, LIMITED(retry, p.name));
    return;
  }
  const body = typeof m === 'function' ? m(req, res, info) : m;
  if (isThenable(body)) {
    body.then((b) => sendMessage(io, res, c.statusCode, b), next);
    return;
  }
  sendMessage(io, res, c.statusCode, body);
}

function sendMessage(io, res, status, body) {
  if (typeof body === 'string') io.send(res, status, TEXT_TYPE, body);
  else io.send(res, status, JSON_TYPE, JSON.stringify(body));
}

// The store failed (or the limiter is closed, which is no store failure:
// a closed limiter never lets a request through).
function storeFailed(c, io, req, res, next, status) {
  if (status === CLOSED || c.limiter._closed) {
    io.send(res, 503, JSON_TYPE, LIMITER_CLOSED);
    return;
  }
  const mode = c.onStoreError;
  if (mode === 'open') {
    next();
    return;
  }
  if (mode === 'closed') {
    io.set(res, 'Retry-After', '1');
    io.send(res, 503, JSON_TYPE, STORE_DOWN);
    return;
  }
  mode(c.limiter._error(status), req, res, next);
}

// requestInputs()'s answer, read at once by its caller (no object per
// request): GO with IN.p, IN.k and IN.cost set; SKIP; or ASYNC when an
// app's function answered with a promise (IN.stage and IN.v say where).
const IN = { p: null, k: null, cost: 1, stage: 0, v: null };
const GO = 0;
const SKIP = 1;
const ASYNC = 2;

/*
 * Computes (policy, key, cost) for a request, synchronously when the
 * app's functions are; any of them may return a promise.  Throws what
 * they throw, or a TypeError/RangeError for a bad value.
 */
function requestInputs(c, req, res) {
  let p = c.policy;
  let k = null;
  let cost = c.cost;
  let v;
  IN.p = null;
  IN.k = null;
  if (c.skip !== null) {
    v = c.skip(req, res);
    if (isThenable(v)) return later(0, v, p, k);
    if (v) return SKIP;
  }
  if (c.policyFn !== null) {
    p = c.policyFn(req);
    if (isThenable(p)) return later(1, p, null, k);
  }
  checkPolicy(p);
  k = c.keyFn(req);
  if (isThenable(k)) return later(2, k, p, null);
  checkKey(k);
  if (c.costFn !== null) {
    cost = c.costFn(req);
    if (isThenable(cost)) return later(3, cost, p, k);
    checkCost(cost);
  }
  IN.p = p;
  IN.k = k;
  IN.cost = cost;
  return GO;
}

function later(stage, v, p, k) {
  IN.stage = stage;
  IN.v = v;
  IN.p = p;
  IN.k = k;
  return ASYNC;
}

// The rest of requestInputs() once a function answered with a promise;
// then go(p, k, cost), skip() or fail(err).
function continueAsync(c, req, res, stage, v, go, skip, fail, p, k) {
  (async () => {
    let cost;
    if (stage === 0) {
      if (await v) return skip;
      v = c.policyFn === null ? c.policy : c.policyFn(req);
      stage = 1;
    }
    if (stage === 1) {
      p = await v;
      checkPolicy(p);
      v = c.keyFn(req);
      stage = 2;
    }
    if (stage === 2) {
      k = await v;
      checkKey(k);
      v = c.costFn === null ? c.cost : c.costFn(req);
      stage = 3;
    }
    cost = await v;
    checkCost(cost);
    return () => go(p, k, cost);
  })().then((then) => then(), fail);
}

/**
 * express(options) -> (req, res, next) middleware for Express 4 and 5,
 * a Router or a single route, Connect, and plain node:http (call it with
 * your own next).  Options: README.md, "The middleware".
 */
function express(opts) {
  const c = middlewareOptions(opts, 'express');
  function sluiceLimit(req, res, next) {
    let r;
    try {
      r = requestInputs(c, req, res);
    } catch (err) {
      next(err);
      return;
    }
    if (r === GO) decideRequest(c, NODE_IO, req, res, res, next, IN.p, IN.k, IN.cost);
    else if (r === SKIP) next();
    else continueAsync(c, req, res, IN.stage, IN.v, (p, k, cost) => decideRequest(c, NODE_IO, req, res, res, next, p, k, cost), next, next, IN.p, IN.k);
  }
  keyVerbs(sluiceLimit, c, 'express');
  return sluiceLimit;
}

// express-rate-limit's resetKey(key) and getKey(key) on the middleware:
// the key's buckets under the middleware's policy (or the one given,
// which a middleware with a policy function must name).
function keyVerbs(fn, c, what) {
  const policyOf = (p, verb) => {
    if (p === undefined) p = c.policy;
    if (p === null) throw new TypeError(`${what}().${verb}(key, policy): this middleware picks its policy per request: name one`);
    checkPolicy(p);
    return p;
  };
  fn.resetKey = (key, p) => c.limiter.reset(key, policyOf(p, 'resetKey'));
  fn.getKey = (key, p) => c.limiter.get(key, policyOf(p, 'getKey'));
}

// ------------------------------------------------------------------ fastify

/**
 * fastify: a Fastify plugin with the middleware's options:
 *   app.register(sluice.fastify, { limiter, policy, ... })
 * It limits every route of the instance it is registered on (and its
 * children); key, policy, cost and skip receive Fastify's request
 * (request.ip follows `trustProxy`), handler (request, reply, next, info).
 */
function fastifyPlugin(instance, opts, done) {
  let base;
  try {
    base = fastifyOptions(opts, null, 'fastify');
  } catch (err) {
    done(err);
    return;
  }
  // @fastify/rate-limit's per-route options: `config: { rateLimit: false }`
  // leaves a route unlimited; `config: { rateLimit: { ...options } }`
  // limits it with the plugin's options and these over them (its own
  // policy, key, cost...).  Checked when the route is added, so a bad
  // option stops the app at start-up with the route named.  Keyed by the
  // rateLimit object, which Fastify's copy of the route's config keeps.
  const routes = new WeakMap();
  let perRoute = false;
  instance.addHook('onRoute', (route) => {
    const cfg = route.config;
    if (cfg === null || typeof cfg !== 'object' || !Object.hasOwn(cfg, 'rateLimit')) return;
    const rl = cfg.rateLimit;
    const what = `fastify route ${route.method} ${route.url}: config.rateLimit`;
    if (rl === false) {
      perRoute = true;
      return;
    }
    if (rl === null || typeof rl !== 'object' || Array.isArray(rl))
      throw new TypeError(`${what} must be false or an object of the plugin's options, got ${typeName(rl)}`);
    if (!routes.has(rl)) routes.set(rl, fastifyOptions(opts, rl, what));
    perRoute = true;
  });
  // The options of this request's route: the plugin's, a route's own, or
  // null (not limited).  request.routeOptions is built per read: read only
  // once a route has options of its own.
  const optionsOf = (request) => {
    if (!perRoute) return base;
    const cfg = request.routeOptions.config;
    const rl = cfg !== null && typeof cfg === 'object' && Object.hasOwn(cfg, 'rateLimit') ? cfg.rateLimit : undefined;
    if (rl === false) return null;
    return rl === undefined ? base : routes.get(rl) || base;
  };
  if (base.c.prop !== null && !instance.hasRequestDecorator(base.c.prop)) instance.decorateRequest(base.c.prop, null);
  const kCharge = Symbol('sluice.charge');
  instance.addHook('onRequest', (request, reply, next) => {
    const o = optionsOf(request);
    if (o === null) {
      next();
      return;
    }
    const c = o.c;
    const go = (p, k, cost) => decideRequest(o.cw, FASTIFY_IO, request, reply, reply.raw, next, p, k, cost);
    let r;
    try {
      r = requestInputs(c, request, reply);
    } catch (err) {
      next(err);
      return;
    }
    if (r === GO) go(IN.p, IN.k, IN.cost);
    else if (r === SKIP) next();
    else continueAsync(c, request, reply, IN.stage, IN.v, go, next, next, IN.p, IN.k);
  });
  instance.addHook('onResponse', (request, reply, next) => {
    const ch = request[kCharge];
    // Only an answer that finished counts, as on the middleware: a
    // connection that failed first keeps its charge.
    if (ch !== undefined && reply.raw.writableFinished) {
      const c = ch.c;
      const ok = c.wasOk(request, reply);
      if (ok ? c.skipOk : c.skipFailed) giveBack(c, ch.k, ch.p, ch.cost, ch.token);
    }
    next();
  });
  done();

  // The checked options of the plugin (route null) or of a route: c as
  // the middleware's, and cw, what a decision uses -- the outcome is read
  // in onResponse, not on the socket: a charged request leaves what it
  // was charged on the request.
  function fastifyOptions(pluginOpts, route, what) {
    let o = pluginOpts;
    if (route !== null) {
      if (o === null || typeof o !== 'object') throw new TypeError('fastify() takes an options object');
      o = { ...own(o), ...own(route) };
    }
    const c = middlewareOptions(o, what);
    const watch = c.skipOk || c.skipFailed;
    const cw = watch ? { ...c, charged: (cc, request, raw, k, p, cost, token) => { request[kCharge] = { c, k, p, cost, token }; } } : c;
    return { c, cw };
  }
}
// Not encapsulated: the hook applies to the instance it is registered on
// (what fastify-plugin does, without the dependency).
fastifyPlugin[Symbol.for('skip-override')] = true;
fastifyPlugin[Symbol.for('fastify.display-name')] = 'sluice';

module.exports = { Limiter, Policy, policy, express, fastify: fastifyPlugin, ipKey, version: native.version };
// For the package's tests: whether the headers take the direct path.
Object.defineProperty(module.exports, '_directHeaders', { value: OUT_HEADERS !== null });
