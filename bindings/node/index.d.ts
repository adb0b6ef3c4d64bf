// Type declarations for the `sluice` package (bindings/node).

import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** One capacity + refill rate pair, e.g. { capacity: 100, rate: '2/s' }. */
export interface BucketSpec {
  /** The burst: whole tokens, >= 1. */
  capacity: number;
  /** Refill: "2/s", "50/min", "0.5/s", "1/3s", "10000/day"; a number is per second. */
  rate: string | number;
}

/** A calendar quota's unit (plural forms are taken too). */
export type QuotaUnit = 'second' | 'minute' | 'hour' | 'day' | 'week' | 'month' | 'year'
  | 'seconds' | 'minutes' | 'hours' | 'days' | 'weeks' | 'months' | 'years';

/** A calendar quota: `quota` requests per calendar window, reset at its
 * end, e.g. { quota: 10000, per: 'month' }. */
export interface QuotaSpec {
  /** Requests per window: a whole number from 1 to 999999999. */
  quota: number;
  /** The window: weeks start on Monday (ISO 8601). */
  per: QuotaUnit;
  /** 'calendar' (default): windows follow the calendar of `tz`;
   * 'first_use': a key's window opens at its first request and lasts one unit. */
  align?: 'calendar' | 'first_use';
  /** An IANA time zone name ('Europe/Berlin') for calendar windows; default 'UTC'. */
  tz?: string;
}

/** One limit of a policy: a token bucket or a calendar quota. */
export type LimitSpec = BucketSpec | QuotaSpec;

/** A policy's limit as it holds it. */
export type PolicyLimit = Readonly<{ capacity: number; rate: string }>
  | Readonly<{ quota: number; per: QuotaUnit; align: 'calendar' | 'first_use'; tz: string }>;

/** A named set of limits, charged all-or-nothing.  Made by policy(). */
export class Policy {
  private constructor();
  readonly name: string;
  readonly limits: ReadonlyArray<PolicyLimit>;
}

export interface PolicyOptions {
  /** Names the buckets (default "default"): a policy and a `sluice serve`
   * rule of the same name share buckets.  1-64 of [A-Za-z0-9_.-]. */
  name?: string;
}

/** Builds a policy of token buckets and calendar quotas (charged
 * all-or-nothing); throws TypeError for a wrong type or option name,
 * RangeError with the core's message for a bad value. */
export function policy(limits: LimitSpec | LimitSpec[], opts?: PolicyOptions): Policy;

export interface Decision {
  allowed: boolean;
  /** The capacity (a quota: its quota) of the most restrictive limit. */
  limit: number;
  /** Whole tokens (a quota: requests) left in that limit after this decision. */
  remaining: number;
  /** 0 when allowed; else ms until this cost could pass (Infinity: never, cost > capacity). */
  retryAfterMs: number;
  /** ms until the bucket is full again; a quota: until its window ends (0 when unused). */
  resetMs: number;
  /** The policy's name. */
  policy: string;
}

/** TLS towards Redis.  Its presence turns TLS on, even for a redis:// URL
 * ({} for the defaults: the system's CA store, the URL's host verified). */
export interface RedisTlsOptions {
  /** PEM bundle of the CAs that may sign the server's certificate; default the system's store. */
  caFile?: string;
  /** PEM client certificate, for servers that require one (mutual TLS). */
  certFile?: string;
  /** Its PEM private key; default: inside certFile. Needs certFile. */
  keyFile?: string;
  /** The name sent as SNI and verified in the certificate; default the URL's host. */
  serverName?: string;
  /** false accepts any certificate (encrypted, but anyone on the path can
   * pose as the server): for tests only.  Default true. */
  verify?: boolean;
}

/** Redis Sentinel: the Sentinels name the master, which is followed across failovers. */
export interface RedisSentinelOptions {
  /** The name the Sentinels monitor (`sentinel monitor NAME ...`). */
  master: string;
  /** The Sentinels, "host:port" (at least one). */
  addrs: string[];
  /** The Sentinels' own ACL user; needs password. */
  user?: string;
  /** The Sentinels' own password (not the master's: that is in url). */
  password?: string;
  /** Reach the Sentinels over TLS; default: when the master is (rediss:// or tls). */
  tls?: boolean;
}

export interface RedisOptions {
  /** "redis://[user:pass@]host:port[/db]", "rediss://..." (TLS) or "unix:///path";
   * default redis://127.0.0.1:6379.  With sentinel, optional: it gives the
   * master's credentials, db and scheme only (its host is ignored). */
  url?: string;
  /** Redis Cluster seeds, "host:port" or "rediss://host:port" (instead of url). */
  cluster?: string[];
  /** TLS settings; present, they turn TLS on. */
  tls?: RedisTlsOptions;
  /** The master of a Sentinel group (not with cluster). */
  sentinel?: RedisSentinelOptions;
  /** Per call, default 250 (above the p99.9 of answers on a busy host; docs/BENCHMARKS.md). */
  timeoutMs?: number;
  /** Connections per node, default 1 (every call is pipelined). */
  connections?: number;
  /** Key prefix, default "sluice:" (the same as sluice serve's). */
  keyPrefix?: string;
  /** Always use the Lua script, even where the SLUICE.TAKE module is loaded. */
  scriptOnly?: boolean;
}

export interface LimiterOptions {
  /** 'memory' (default), { memory: { maxKeys } }, { shared: { path, maxKeys, group } }
   * (the host's shared-memory store: every process that opens the same file
   * shares its buckets; group, a name or gid, shares it across users) or
   * { redis: RedisOptions }. */
  store?:
    | 'memory'
    | { memory: { maxKeys?: number } }
    | { shared: { path: string; maxKeys?: number; group?: string | number } }
    | { redis: RedisOptions };
  /** Memory and shared store bound, default 1e6 buckets. */
  maxKeys?: number;
  /** Memory and shared stores only: the time in microseconds since the epoch (simulations, tests). */
  clock?: () => number;
  /** Redis: the client's connections do not keep the process alive while
   * no call is waiting (default false: an open limiter holds the process, as a socket does). */
  unref?: boolean;
  /** Called once per change of a Redis node into an unusable state, with the
   * node and the reason (as /readyz names them). */
  onError?: (err: StoreError) => void;
  /** What sluice would log (a store node failing, recovering), through the app's
   * logger: console, pino, winston, Fastify's app.log. */
  logger?: { warn(message: string): unknown; info?(message: string): unknown };
  /** Redis: while the store cannot answer, take() and get() are decided by an
   * in-memory limiter of this process on the same policy ('local', the
   * default; told once each way: the 'error' event with ERR_SLUICE_LOCAL,
   * then 'recover' with reason 'local'; console.warn when nothing listens),
   * or reject ('reject'). */
  onStoreError?: 'local' | 'reject';
}

/** An error of the store: code ERR_SLUICE_STORE, ERR_SLUICE_TIMEOUT,
 * ERR_SLUICE_REFUSED (the server answered the call with an error),
 * ERR_SLUICE_CLOSED, or ERR_SLUICE_LOCAL (the 'error' event: the local
 * fallback now decides). */
export interface SluiceError extends Error {
  code: 'ERR_SLUICE_STORE' | 'ERR_SLUICE_TIMEOUT' | 'ERR_SLUICE_REFUSED' | 'ERR_SLUICE_CLOSED' | 'ERR_SLUICE_LOCAL' | string;
}

/** A Redis node that became unusable, refuses the calls, or may evict
 * buckets (onError, the 'error' event). */
export interface StoreError extends SluiceError {
  code: 'ERR_SLUICE_STORE' | 'ERR_SLUICE_REFUSED' | 'ERR_SLUICE_EVICTION' | 'ERR_SLUICE_LOCAL';
  /** "host:port" (never credentials); "" for ERR_SLUICE_LOCAL. */
  node: string;
  /** 'unreachable' | 'timeout' | 'auth_failed' | 'tls_failed' | 'no_master' | 'refused' | 'eviction_policy' | 'local' */
  reason: string;
  /** The server's, the system's or OpenSSL's words; may be "". */
  detail: string;
}

export interface TakeOptions {
  /** Tokens to take, a whole number >= 0 (default 1); 0 peeks. */
  cost?: number;
}

export interface WaitOptions {
  /** The longest wait for a turn, in ms (default 60000; at most about
   * 12.7 days).  A turn further away rejects at once, charging nothing. */
  maxWaitMs?: number;
  /** Tokens to reserve, a whole number >= 0 (default 1). */
  cost?: number;
  /** Cancels the wait: the promise rejects with the signal's reason and the
   * reserved tokens are given back (refund). */
  signal?: AbortSignal;
}

/** A reserved turn: wait() resolved at it. */
export interface Turn {
  /** How long the turn was from the store's answer, in ms (fractional). */
  waitMs: number;
  /** The turn on the store's clock (Redis: the server's), in microseconds
   * since the epoch: one clock for every process on the store. */
  turnAtUs: number;
  limit: number;
  /** Whole tokens left once reserved (0 while the bucket is in debt). */
  remaining: number;
  policy: string;
}

/** Why wait() was refused (code ERR_SLUICE_WAIT): nothing was charged. */
export interface WaitError extends SluiceError {
  code: 'ERR_SLUICE_WAIT';
  /** The wait the turn would have had (Infinity: the cost exceeds a capacity). */
  waitMs: number;
  /** When a wait of the same maxWaitMs would fit (Infinity: never). */
  retryAfterMs: number;
  policy: string;
}

export class Limiter extends EventEmitter {
  constructor(opts?: LimiterOptions);
  readonly store: 'memory' | 'shared' | 'redis';
  /** true once close() was called. */
  readonly closed: boolean;
  /** Charges cost tokens from every limit of the policy, all or none.
   * Rejects with a SluiceError (code ERR_SLUICE_STORE, ERR_SLUICE_TIMEOUT or
   * ERR_SLUICE_CLOSED); a Redis error's message ends with the node's last
   * failure, e.g. "(10.0.0.5:6380: tls_failed: TLS: certificate verify failed: ...)". */
  take(key: string | Buffer, policy: Policy, opts?: TakeOptions): Promise<Decision>;
  /** The decision a take of cost (default 1) would get now, charging nothing. */
  get(key: string | Buffer, policy: Policy, opts?: TakeOptions): Promise<Decision>;
  /** Every bucket of the key under the policy becomes full (as sluice serve's /v1/reset). */
  reset(key: string | Buffer, policy: Policy): Promise<void>;
  /** n tokens (default 1) back to each limit, never above its capacity (as /v1/refund). */
  refund(key: string | Buffer, policy: Policy, n?: number): Promise<void>;
  /** n tokens (default 1) charged with no check: beyond empty, a debt that
   * delays the next allowed request. */
  penalize(key: string | Buffer, policy: Policy, n?: number): Promise<void>;
  /** No request of the key passes for ms milliseconds (>= 1); the first after passes. */
  block(key: string | Buffer, policy: Policy, ms: number): Promise<void>;
  /** Every bucket of the key under the policy holds `remaining` whole
   * tokens from now (the capacity or more: full), whatever it held. */
  set(key: string | Buffer, policy: Policy, remaining: number): Promise<void>;
  /** Waits for this request's turn instead of being refused: one atomic
   * reservation (the bucket may go into debt) answers when the turn is, and
   * the promise resolves then.  Waiters in any number of processes on one
   * store are spaced exactly by the refill.  Rejects at once with a
   * WaitError, charging nothing, when the turn is more than maxWaitMs away. */
  wait(key: string | Buffer, policy: Policy, opts?: WaitOptions): Promise<Turn>;
  /** wait(), then fn(): its result (fn is not called when wait() rejects). */
  schedule<T>(key: string | Buffer, policy: Policy, fn: () => T | PromiseLike<T>, opts?: WaitOptions): Promise<Awaited<T>>;
  /** true when the store can answer now (for a readiness probe). */
  healthy(): boolean;
  /** true while store failures are decided by this process's local fallback. */
  readonly local: boolean;
  /** @deprecated rate-limiter-flexible's name: throws a TypeError; use take(key, policy, { cost }). */
  consume(...args: unknown[]): never;
  /** @deprecated rate-limiter-flexible's name: throws a TypeError; use reset(key, policy). */
  delete(...args: unknown[]): never;
  /** @deprecated rate-limiter-flexible's name: throws a TypeError; use penalize(key, policy, n). */
  penalty(...args: unknown[]): never;
  /** @deprecated rate-limiter-flexible's name: throws a TypeError; use refund(key, policy, n). */
  reward(...args: unknown[]): never;
  /** Rejects the calls still in flight; the process may then exit. */
  close(): Promise<void>;

  on(event: 'error', listener: (err: StoreError) => void): this;
  on(event: 'recover', listener: (info: { node: string; reason?: 'local' }) => void): this;
  /** An aborted wait(): whether its reservation was given back (only
   * while nobody was given a turn after it; error: the store failed). */
  on(event: 'aborted', listener: (info: { key: string; policy: string; cost: number; refunded: boolean; error?: Error }) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  once(event: 'error', listener: (err: StoreError) => void): this;
  once(event: 'recover', listener: (info: { node: string; reason?: 'local' }) => void): this;
  once(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** What the middleware knows of a decided request: req.rateLimit (or
 * requestPropertyName), and the handler's and message's info. */
export interface RateLimitInfo extends Decision {
  /** The bucket's key (for the default key: the client address, IPv6 as its /64). */
  key: string | Buffer;
  /** The tokens this request cost. */
  cost: number;
}

/** Which rate-limit headers the middleware sends. */
export type HeaderStandard = 'draft-11' | 'draft-8' | 'draft-7' | 'draft-6';
export interface HeaderOptions {
  /** The IETF fields: 'draft-11' (default: RateLimit-Policy and RateLimit with the policy's name),
   * 'draft-8' (the same with a partition key), 'draft-7', 'draft-6' (RateLimit-Limit/-Remaining/-Reset),
   * or false. */
  standard?: HeaderStandard | false;
  /** X-RateLimit-Limit, -Remaining and -Reset (default true). */
  legacy?: boolean;
  /** X-RateLimit-Reset: 'seconds' until the bucket is full (default) or
   * 'epoch': the Unix time of that instant, in seconds. */
  reset?: 'seconds' | 'epoch';
}

type MaybePromise<T> = T | Promise<T>;

/** The request and response the middleware's functions receive by default:
 * node:http's, with whatever the framework adds (Express's req.ip, req.get,
 * res.status, an authentication middleware's req.user, ...). */
export type AnyRequest = IncomingMessage & { ip?: string; [key: string]: any };
export type AnyResponse = ServerResponse & { [key: string]: any };

export interface MiddlewareOptions<Req = AnyRequest, Res = AnyResponse> {
  limiter: Limiter;
  /** A policy, or a function choosing one per request (tiers). */
  policy: Policy | ((req: Req) => MaybePromise<Policy>);
  /** Whose bucket; default the client address (req.ip, which follows Express's
   * `trust proxy`; else the socket), IPv6 grouped to its /64.  Never a header by default. */
  key?: (req: Req) => MaybePromise<string | Buffer>;
  /** The default key's IPv6 prefix length (1-128, default 64), or false for whole addresses. */
  ipv6Subnet?: number | false;
  /** Tokens per request, a whole number >= 0 or a function; default 1. */
  cost?: number | ((req: Req) => MaybePromise<number>);
  /** true: the request is not limited (nor charged). */
  skip?: (req: Req, res: Res) => MaybePromise<boolean>;
  /** Answers a limited request instead of the default 429 (headers already set). */
  handler?: (req: Req, res: Res, next: (err?: unknown) => void, info: RateLimitInfo) => void;
  /** The status of a limited request (default 429). */
  statusCode?: number;
  /** The body of a limited request: text, an object sent as JSON, or a function
   * returning either (default {"error":"rate_limited","retry_after_ms":N,"policy":"name"}). */
  message?: string | object | ((req: Req, res: Res, info: RateLimitInfo) => MaybePromise<string | object>);
  /** Which rate-limit headers to send; default { standard: 'draft-11', legacy: true }. */
  headers?: HeaderStandard | HeaderOptions | boolean;
  /** Where the decision is left on the request (default 'rateLimit'), or false. */
  requestPropertyName?: string | false;
  /** When the store fails: 'local' (default: the limiter's local fallback
   * decides, headers sent), 'open' (pass, no headers), 'closed' (503),
   * or a function deciding.  A closed limiter is no store failure: always 503. */
  onStoreError?: 'local' | 'open' | 'closed' | ((err: SluiceError, req: Req, res: Res, next: (err?: unknown) => void) => void);
  /** Give the tokens back when the response succeeds (requestWasSuccessful; default status < 400). */
  skipSuccessfulRequests?: boolean;
  /** Give the tokens back when the response finishes failed (status >= 400); a connection the client closes first keeps its charge. */
  skipFailedRequests?: boolean;
  requestWasSuccessful?: (req: Req, res: Res) => boolean;
  /** A key that hits the limit passes nothing more for this many ms (limiter.block()). */
  blockDuration?: number;
  /** A request over the limit waits for its turn (limiter.wait()) instead
   * of being refused, unless the turn is more than maxWaitMs away (then it
   * is limited, charging nothing): rate-limiter-flexible's execEvenly,
   * nginx's limit_req without nodelay. */
  delay?: { maxWaitMs: number };
}

/** The middleware, with express-rate-limit's verbs on its key's buckets (the
 * middleware's policy, or the one given: required with a policy function). */
export interface Middleware<Req, Res> {
  (req: Req, res: Res, next: (err?: unknown) => void): void;
  resetKey(key: string | Buffer, policy?: Policy): Promise<void>;
  getKey(key: string | Buffer, policy?: Policy): Promise<Decision>;
}

/** @deprecated the name of the options before the Fastify plugin; use MiddlewareOptions. */
export type ExpressOptions<Req = AnyRequest, Res = AnyResponse> = MiddlewareOptions<Req, Res>;

/** Express 4/5, Connect or node:http middleware: rate-limit headers on every decided
 * answer, 429 with Retry-After and a JSON body when limited. */
export function express<Req extends IncomingMessage = AnyRequest, Res extends ServerResponse = AnyResponse>(
  opts: MiddlewareOptions<Req, Res>,
): Middleware<Req, Res>;

/** The Fastify plugin: app.register(sluice.fastify, options).  The functions
 * receive Fastify's request and reply. */
export const fastify: {
  (instance: any, opts: MiddlewareOptions<any, any>, done: (err?: Error) => void): void;
};

/** The default key of a client address, as `sluice serve` keys it: a port,
 * brackets and an IPv6 zone dropped; IPv4 as it is (an IPv4-mapped IPv6
 * address as its IPv4), IPv6 as its /subnet network, e.g.
 * "2001:db8:1:2::/64".  A TypeError for a text that is no address. */
export function ipKey(address: string, subnet?: number | false): string;

export const version: string;

// The middleware leaves its decision on the request (requestPropertyName,
// default 'rateLimit'): node:http's IncomingMessage, and so Express's
// Request, say so.
declare module 'http' {
  interface IncomingMessage {
    rateLimit?: RateLimitInfo;
  }
}
