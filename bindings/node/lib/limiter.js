// The Limiter: take, get and the admin verbs on one store (memory,
// shared, Redis), the Redis store's answers and node events, and the
// local fallback while Redis cannot answer.  Waiting a turn is wait.js.
'use strict';

const { EventEmitter } = require('node:events');
const native = require('./addon');
const { CLOSED, sluiceError, peerMethod } = require('./errors');
const {
  knownOptions, typeName, own, optFunction, optBoolean, positiveInt, classProp, LIMITER_PEERS,
  checkKey, checkCount, costOption,
} = require('./options');
const { checkPolicy } = require('./policy');
const { DEFAULT_MAX_KEYS, storeOptions, redisOptions } = require('./store');
const { WaitVerbs } = require('./wait');

const SLUICE_ETIMEDOUT = native.ETIMEDOUT;

function decision(allowed, limit, remaining, retryAfterMs, resetMs, name) {
  return { allowed, limit, remaining, retryAfterMs, resetMs, policy: name };
}

// The addon's admin operations (src/addon.h).
const ADMIN_RESET = 0;
const ADMIN_REFUND = 1;
const ADMIN_PENALIZE = 2;
const ADMIN_BLOCK = 3;
const ADMIN_SET = 4;
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

  // Waiting a turn -- wait(), schedule() and the reservations and
  // conditional refunds behind them -- is wait.js (WaitVerbs, below).

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

// The waiting verbs (wait.js) are methods of the class as if written in
// it: the same property attributes (not enumerable), the same prototype.
for (const name of Object.getOwnPropertyNames(WaitVerbs.prototype)) {
  if (name !== 'constructor')
    Object.defineProperty(Limiter.prototype, name, Object.getOwnPropertyDescriptor(WaitVerbs.prototype, name));
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

module.exports = { Limiter };
