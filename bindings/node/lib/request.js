// One request through the middleware or the Fastify plugin: its inputs
// (policy, key, cost, skip: the app's functions, maybe async), the
// decision, and the answer -- passed on with the headers, limited, or the
// store's failure handled as onStoreError says.
'use strict';

const http = require('node:http');
const { CLOSED } = require('./errors');
const { checkKey, checkCost } = require('./options');
const { checkPolicy } = require('./policy');
const { OUT_HEADERS, directHeaders, writeHeaders, prevRemaining, keepRemaining, limiterNow } = require('./headers');

const LIMITED = (retryMs, name) => `{"error":"rate_limited","retry_after_ms":${retryMs},"policy":"${name}"}`;
const STORE_DOWN = '{"error":"store_unavailable","message":"the rate-limit store failed and the limiter fails closed"}';
const LIMITER_CLOSED = '{"error":"limiter_closed","message":"the rate limiter is closed"}';
const JSON_TYPE = 'application/json';
const TEXT_TYPE = 'text/plain; charset=utf-8';

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

// answer()'s argument on the local stores' synchronous path, filled and
// read at once, as IN is: no object per request.  answer() reads it into
// locals before it calls anything (a stacked limiter's request may fill
// it again from there) and clears the request's objects from it.
const SYNC = {
  c: null, io: null, req: null, res: null, raw: null, next: null, p: null, key: null, cost: 0,
  allowed: false, limit: 0, remaining: 0, retryMs: 0, resetMs: 0, which: 0, token: undefined,
};

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
    const a = SYNC;
    a.allowed = limiter._take(limiter._mem, key, p._h, cost);
    a.c = c;
    a.io = io;
    a.req = req;
    a.res = res;
    a.raw = raw;
    a.next = next;
    a.p = p;
    a.key = key;
    a.cost = cost;
    a.limit = d[0];
    a.remaining = d[1];
    a.retryMs = d[2];
    a.resetMs = d[3];
    a.which = d[4];
    answer(a);
    return;
  }
  limiter._decide(key, p, cost, (status, allowed, limit, remaining, retryMs, resetMs, which) => {
    if (status !== 0) storeFailed(c, io, req, res, next, status);
    else answer({ c, io, req, res, raw, next, p, key, cost, allowed, limit, remaining, retryMs, resetMs, which, token: undefined });
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
      answer({ c, io, req, res, raw, next, p, key, cost, allowed: false, limit, remaining, retryMs: retry, resetMs: ms < 0 ? 0 : ms,
        which: 0, token: undefined });
      return;
    }
    const go = () => answer({ c, io, req, res, raw, next, p, key, cost, allowed: true, limit, remaining, retryMs: 0, resetMs: ms,
      which: 0, token });
    if (waitUs <= 0) go();
    else setTimeout(go, Math.ceil(waitUs / 1000));
  });
}

/*
 * Answers one request from its decision, given as one object (always
 * written with these fields in this order, one shape; SYNC on the local
 * stores' synchronous path).  It is read into locals first and passed no
 * further.
 *   c, io        the middleware's checked options, how its framework writes
 *   req, res     the request and what the answer is written to
 *   raw          the node:http response its outcome is watched on
 *   next         next(err?): passes the request on
 *   p, key, cost what was asked: the policy, the key, the cost
 *   allowed, limit, remaining, retryMs, resetMs, which
 *                the store's decision (which: the limit that decided)
 *   token        a delayed request's reservation (refunded
 *                conditionally), else undefined
 */
function answer(a) {
  const { c, io, req, res, raw, next, p, key, cost, allowed, limit, remaining, retryMs, resetMs, which, token } = a;
  if (a === SYNC) a.c = a.io = a.req = a.res = a.raw = a.next = a.p = a.key = null;
  let wins;
  const store = io.direct(res);
  if (c.headers !== null) {
    wins = writeHeaders(io, res, store, c, p, key, limit, remaining, resetMs, which, allowed);
  } else {
    const prev = prevRemaining(res, store);
    wins = prev === undefined || !allowed || remaining < prev;
    if (wins) keepRemaining(res, store, remaining);
  }
  const retry = retryMs !== Infinity ? retryMs : wholeWindowMs(c, p, which);
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

// The wait of a cost that can never pass: a whole window, as sluice serve
// says it.
function wholeWindowMs(c, p, which) {
  return p._quotas[which] ? p._window(which, -1, 0, limiterNow(c.limiter)) * 1000 : p._windowsMs[which];
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

module.exports = {
  NODE_IO, FASTIFY_IO, IN, GO, SKIP, requestSlot, requestInputs, continueAsync, decideRequest, watchOutcome, giveBack,
};
