// The Fastify plugin: the middleware's options, per route too
// (@fastify/rate-limit's config.rateLimit), on Fastify's hooks.
'use strict';

const { typeName, own } = require('./options');
const { middlewareOptions } = require('./middleware');
const { FASTIFY_IO, IN, GO, SKIP, requestInputs, continueAsync, decideRequest, giveBack } = require('./request');

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

module.exports = { fastifyPlugin };
