// The rate-limit headers of an answer (RateLimit-Policy, RateLimit or
// RateLimit-Limit/-Remaining/-Reset, X-RateLimit-*) in the standard the
// middleware's headers option names, stacked limiters merged; and node's
// own header store, which they are written into directly when it can be.
'use strict';

const http = require('node:http');
const { knownOptions, typeName, own, optBoolean } = require('./options');
const { ITEM_SLOTS } = require('./policy');

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

module.exports = {
  OUT_HEADERS, directHeaders, headerOptions, writeHeaders, prevRemaining, keepRemaining, limiterNow,
};
