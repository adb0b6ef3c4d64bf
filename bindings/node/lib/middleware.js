// The middleware for Express 4 and 5, Connect and node:http: its options,
// checked once when it is made, and the function a request goes through
// (request.js answers it).
'use strict';

const {
  knownOptions, knownKeys, typeName, own, optFunction, optBoolean, plainObject, MIDDLEWARE_PEERS, checkCount,
} = require('./options');
const { Policy, checkPolicy } = require('./policy');
const { Limiter } = require('./limiter');
const { WAIT_MAX_MS } = require('./wait');
const { subnetBits, defaultKey } = require('./address');
const { headerOptions } = require('./headers');
const {
  NODE_IO, IN, GO, SKIP, requestSlot, requestInputs, continueAsync, decideRequest, watchOutcome,
} = require('./request');

const MIDDLEWARE_KEYS = ['limiter', 'policy', 'key', 'ipv6Subnet', 'cost', 'skip', 'handler', 'statusCode', 'message',
  'headers', 'requestPropertyName', 'onStoreError', 'skipSuccessfulRequests', 'skipFailedRequests', 'requestWasSuccessful', 'blockDuration',
  'delay'];

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

module.exports = { middlewareOptions, express };
