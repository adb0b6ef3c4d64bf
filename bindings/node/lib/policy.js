// Policies: a named set of limits (token buckets and calendar quotas),
// charged all-or-nothing, made by policy() and held by the addon.
'use strict';

const native = require('./addon');
const { knownOptions, typeName, own, ownList, LIMIT_PEERS, QUOTA_PEERS } = require('./options');

const NAME_RE = /^[A-Za-z0-9_.-]{1,64}$/;
const MAX_LIMITS = native.MAX_LIMITS;

// RateLimit values a policy keeps (a power of two).
const ITEM_SLOTS = 16;

/** A named set of limits, charged all-or-nothing.  Made by policy(). */
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

function checkPolicy(p) {
  if (!(p instanceof Policy)) throw new TypeError('policy must be made by sluice.policy()');
}

module.exports = { ITEM_SLOTS, Policy, policy, checkPolicy };
