// Type declarations for the `sluice` package (bindings/node).

/** One capacity + refill rate pair, e.g. { capacity: 100, rate: '2/s' }. */
export interface LimitSpec {
  /** The burst: whole tokens, >= 1. */
  capacity: number;
  /** Refill: "2/s", "50/min", "0.5/s", "1/3s", "10000/day"; a number is per second. */
  rate: string | number;
}

/** A named set of limits, charged all-or-nothing.  Made by policy(). */
export class Policy {
  private constructor();
  readonly name: string;
  readonly limits: ReadonlyArray<Readonly<{ capacity: number; rate: string }>>;
}

export interface PolicyOptions {
  /** Names the buckets (default "default"): a policy and a `sluice serve`
   * rule of the same name share buckets.  1-64 of [A-Za-z0-9_.-]. */
  name?: string;
}

/** Builds a policy; throws RangeError with the core's message on a bad limit. */
export function policy(limits: LimitSpec | LimitSpec[], opts?: PolicyOptions): Policy;

export interface Decision {
  allowed: boolean;
  /** The capacity of the most restrictive limit. */
  limit: number;
  /** Whole tokens left in that limit after this decision. */
  remaining: number;
  /** 0 when allowed; else ms until this cost could pass (Infinity: never, cost > capacity). */
  retryAfterMs: number;
  /** ms until the bucket is full again. */
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
  /** Per call, default 50. */
  timeoutMs?: number;
  /** Connections per node, default 1 (every call is pipelined). */
  connections?: number;
  /** Key prefix, default "sluice:" (the same as sluice serve's). */
  keyPrefix?: string;
  /** Always use the Lua script, even where the SLUICE.TAKE module is loaded. */
  scriptOnly?: boolean;
}

export interface LimiterOptions {
  /** 'memory' (default), { memory: { maxKeys } }, { shared: { path, maxKeys } }
   * (the host's shared-memory store: every process that opens the same file
   * shares its buckets) or { redis: RedisOptions }. */
  store?:
    | 'memory'
    | { memory: { maxKeys?: number } }
    | { shared: { path: string; maxKeys?: number } }
    | { redis: RedisOptions };
  /** Memory store bound, default 1e6 keys. */
  maxKeys?: number;
  /** Memory and shared stores only: the time in microseconds since the epoch (simulations, tests). */
  clock?: () => number;
}

export interface TakeOptions {
  /** Tokens to take, a whole number >= 0 (default 1); 0 peeks. */
  cost?: number;
}

export class Limiter {
  constructor(opts?: LimiterOptions);
  readonly store: 'memory' | 'shared' | 'redis';
  /** Rejects with code ERR_SLUICE_STORE, ERR_SLUICE_TIMEOUT or ERR_SLUICE_CLOSED; a
   * Redis error's message ends with the node's last failure, e.g.
   * "(10.0.0.5:6380: tls_failed: TLS: certificate verify failed: ...)". */
  take(key: string | Buffer, policy: Policy, opts?: TakeOptions): Promise<Decision>;
  /** true when the store can answer now (for a readiness probe). */
  healthy(): boolean;
  /** Rejects the calls still in flight; the process may then exit. */
  close(): Promise<void>;
}

/** The subset of Express's request the defaults use. */
export interface RequestLike {
  get(name: string): string | undefined;
  ip?: string;
}

export interface ExpressOptions<Req extends RequestLike = RequestLike> {
  limiter: Limiter;
  /** A policy, or a function choosing one per request (tiers). */
  policy: Policy | ((req: Req) => Policy);
  /** Whose bucket; default req.get('x-user-id') || req.ip. */
  key?: (req: Req) => string | Buffer;
  /** Tokens per request; default 1. */
  cost?: (req: Req) => number;
  /** When the store fails: 'open' (default, no headers) or 'closed' (503). */
  onStoreError?: 'open' | 'closed';
}

/** Express (or Connect) middleware: rate-limit headers on every decided
 * answer, 429 with Retry-After and a JSON body when limited. */
export function express<Req extends RequestLike = RequestLike>(
  opts: ExpressOptions<Req>,
): (req: Req, res: any, next: (err?: unknown) => void) => void;

export const version: string;
