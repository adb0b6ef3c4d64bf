// The store options of a Limiter: which store (memory, shared, Redis),
// and the Redis client's settings (URL, cluster, Sentinel, TLS), checked
// and put in the shape the addon reads.
'use strict';

const {
  knownOptions, knownKeys, own, ownList, optBoolean, positiveInt, optString, plainObject, REDIS_PEERS,
} = require('./options');

// The defaults and store kinds, generated from the C tables
// (src/util/defaults.h, src/store/store_kinds.def; the timeout's reason is
// given there).
const DEFAULTS = require('./defaults.js');
const STORE_KINDS = DEFAULTS.STORE_KINDS;
const DEFAULT_MAX_KEYS = DEFAULTS.MAX_KEYS;
const DEFAULT_TIMEOUT_MS = DEFAULTS.NODE_TIMEOUT_MS;

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

module.exports = { DEFAULT_MAX_KEYS, storeOptions, redisOptions };
