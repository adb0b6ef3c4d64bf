// Waiting a turn: a Limiter's reservations (wait(), schedule(), and the
// middleware's delay), their conditional refund when aborted, and wait()'s
// options and errors.  The methods are the Limiter's own (limiter.js puts
// them on its prototype): this file is the part of the class that waits.
'use strict';

const native = require('./addon');
const { CLOSED, sluiceError } = require('./errors');
const { knownKeys, typeName, own, checkKey, checkCost } = require('./options');
const { checkPolicy } = require('./policy');

// The longest wait a reservation accepts (the core's SLUICE_WAIT_MAX_US),
// and wait()'s default.
const WAIT_MAX_MS = 2 ** 40 / 1000;
const WAIT_DEFAULT_MS = 60000;

// The Limiter's methods that wait: `this` is a Limiter (its store, its
// call slots, its _error()).
class WaitVerbs {
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

module.exports = { WAIT_MAX_MS, WaitVerbs };
