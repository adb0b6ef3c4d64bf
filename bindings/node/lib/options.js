// Options checking: every option object the app gives is read from a
// copy of its own properties and checked whole (a misspelt name, or
// another rate limiter's name for it, is a TypeError naming sluice's),
// and the argument checks the verbs share.
'use strict';

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

module.exports = {
  knownOptions, knownKeys, typeName, own, ownList, optFunction, optBoolean, positiveInt, optString, plainObject, classProp,
  LIMIT_PEERS, QUOTA_PEERS, LIMITER_PEERS, REDIS_PEERS, MIDDLEWARE_PEERS,
  checkKey, checkCount, checkCost, costOption,
};
