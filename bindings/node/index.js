// sluice for Node.js: exact token-bucket rate limiting in the app's own
// process -- libsluice's decisions, its memory store, and its own Redis
// client running on Node's event loop (no ioredis, no HTTP hop).
//
// The package checks arguments and shapes results; every decision is made
// by libsluice in the native addon (src/addon.c, local.c, redis.c).  This
// file is its entry point; lib/ holds one concern a file:
//   addon.js       loads the native addon (building it if need be)
//   options.js     options checking, shared by every entry
//   errors.js      the errors sluice gives
//   policy.js      policies: policy() and the Policy it makes
//   store.js       the store options (memory, shared, Redis, TLS, Sentinel)
//   limiter.js     the Limiter: take, get, the admin verbs, Redis answers
//                  and events, the local fallback
//   wait.js        the Limiter's waiting verbs: wait(), schedule()
//   address.js     client addresses: ipKey() and the default key
//   headers.js     the rate-limit headers of an answer
//   request.js     one request through the middleware: inputs, decision,
//                  answer
//   middleware.js  the middleware (Express, Connect, node:http)
//   fastify.js     the Fastify plugin
'use strict';

const native = require('./lib/addon');
const { Policy, policy } = require('./lib/policy');
const { Limiter } = require('./lib/limiter');
const { ipKey } = require('./lib/address');
const { OUT_HEADERS } = require('./lib/headers');
const { express } = require('./lib/middleware');
const { fastifyPlugin } = require('./lib/fastify');

module.exports = { Limiter, Policy, policy, express, fastify: fastifyPlugin, ipKey, version: native.version };
// For the package's tests: whether the headers take the direct path.
Object.defineProperty(module.exports, '_directHeaders', { value: OUT_HEADERS !== null });
