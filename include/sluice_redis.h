/*
 * sluice_redis.h -- the Redis store: bucket state shared by every instance.
 *
 * One client per event loop (libuv), non-blocking, with every decision in
 * flight pipelined onto its connections (plain or TLS; one Redis, a Redis
 * Cluster, or the master named by Redis Sentinel).  Each decision is one
 * atomic server-side call (the SLUICE.TAKE module command when the server
 * has it, else a Lua script loaded once and run by EVALSHA), timed by the
 * Redis server's clock, never the caller's.  State is the same integer as
 * sluice_state_t, stored with PX = its exact time to full.
 *
 * Keys: the bucket of one limit of `key` is stored at
 *   <key_prefix>{<key>}:<limit id>
 * where the limit id is sluice_limit_id() ("100@2/s" for 100 at 2/s):
 * a bucket is named by its limit, never by the limit's position, so
 * switching tiers or a rule gaining or losing a limit keeps the state of
 * every limit that remains, and the script path and the SLUICE.TAKE module
 * serve the same buckets.  All limits of one key share a hash tag (one slot
 * in Redis Cluster) and are charged all-or-nothing in one call.
 *
 * Failures cost at most timeout_ms per call: a call that Redis does not
 * answer in time ends with SLUICE_ETIMEDOUT; a connection with too many
 * unanswered commands, a lost connection, or an open circuit breaker (five
 * consecutive failures; one probe call after 100 ms; one breaker per
 * Redis node, so in a cluster a failing master fails only its own slots)
 * fail calls at once with SLUICE_ESTORE.  Lost connections are retried with a
 * backoff capped at 200 ms; a connection whose handshake is refused (AUTH,
 * SELECT, SCRIPT LOAD, or TLS) backs off up to 2 s, so a wrong password costs
 * the server at most one attempt every 2 s per connection after the first few.
 * An idle connection is probed (PING) every 500 ms, so a Redis that stops
 * answering is noticed without traffic.  A reply is read within bounds (an
 * array of at most 65536 elements, 2^20 in one reply, strings of 8 MB):
 * beyond them it is a protocol error and the connection is dropped.
 * NOSCRIPT (a restarted or flushed
 * Redis) and Cluster redirections (MOVED, ASK) are handled inside the call. See
 * docs/REDIS.md.
 */
#ifndef SLUICE_REDIS_H
#define SLUICE_REDIS_H

#include "sluice.h"
#include "sluice_loop.h"

#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sluice_redis_s sluice_redis_t;

/* What happened to a Redis node (see sluice_redis_opts_t.on_event).  The
 * client reports changes only: a node that stays unreachable is reported
 * once, not at every reconnect attempt. */
typedef enum sluice_redis_event_kind_e {
	SLUICE_REDIS_EV_CONNECTED = 1, /* handshake done, the node answers */
	SLUICE_REDIS_EV_AUTH_FAILED,   /* AUTH / SELECT / SCRIPT LOAD refused */
	SLUICE_REDIS_EV_UNREACHABLE,   /* connect failed or connection lost */
	SLUICE_REDIS_EV_TIMEOUT, /* connect, handshake or calls unanswered */
	SLUICE_REDIS_EV_BREAKER_OPEN,	 /* calls to the node now fail fast */
	SLUICE_REDIS_EV_BREAKER_CLOSED,	 /* calls go through again */
	SLUICE_REDIS_EV_SCRIPT_RELOADED, /* NOSCRIPT: the scripts reloaded */
	SLUICE_REDIS_EV_SLOTS_CHANGED,	 /* cluster: the slot map changed */
	/* TLS: the handshake failed (detail: OpenSSL's reason, e.g. a
	 * certificate that does not verify). */
	SLUICE_REDIS_EV_TLS_FAILED,
	/* Sentinel: the master is now `node` (detail: how it was learnt). */
	SLUICE_REDIS_EV_MASTER_CHANGED,
	/* Sentinel: no Sentinel names a usable master (detail: why). */
	SLUICE_REDIS_EV_NO_MASTER,
	/* The node answers calls with an error (detail: the server's words,
	 * redacted, e.g. "ERR unknown command 'EVALSHA', ..." or "NOPERM
	 * ..."): told once per change of those words, at most once a
	 * second.  While calls keep being refused the node is not healthy
	 * (sluice_redis_healthy()), and a peek is sent to it twice a second
	 * without traffic, so that it recovers on its own. */
	SLUICE_REDIS_EV_REFUSED,
	/* The node's maxmemory policy may evict buckets, or it cannot be
	 * known, or it no longer may (detail: the policy, maxmemory and what
	 * follows).  Only noeviction, or no maxmemory, keeps every bucket:
	 * sluice's keys all have a TTL, so volatile-* policies evict them
	 * too.  Asked at each connection's handshake and every minute; told
	 * on a change (a first "safe" is not told). */
	SLUICE_REDIS_EV_EVICTION
} sluice_redis_event_kind_t;

typedef struct sluice_redis_event_s {
	sluice_redis_event_kind_t kind;
	/* "host:port" or the unix socket path; never credentials.  For
	 * SLOTS_CHANGED the node that answered the new map. */
	const char *node;
	/* The server's own words for AUTH_FAILED (e.g. "WRONGPASS ...")
	 * and REFUSED, the system's for UNREACHABLE, a short summary
	 * otherwise; may be "".  A server's words are redacted as they are
	 * read: what follows AUTH or HELLO, or "args beginning with:", is
	 * cut and marked "(redacted)", so what was sent (a password, keys)
	 * never comes back here.  Valid during the callback only. */
	const char *detail;
} sluice_redis_event_t;

/* Told of every node state change, on the loop's thread, from inside the
 * client: it must not call back into the client (no take, no free). */
typedef void (*sluice_redis_event_cb)(void *arg,
				      const sluice_redis_event_t *ev);

/* Why a call or a connection failed, for metrics. */
typedef enum sluice_redis_error_e {
	SLUICE_REDIS_ERR_NONE = 0,
	SLUICE_REDIS_ERR_TIMEOUT,    /* no answer within timeout_ms */
	SLUICE_REDIS_ERR_CONNECTION, /* no connection, or it was lost */
	SLUICE_REDIS_ERR_AUTH,	   /* a handshake refused (AUTH, SELECT, ...) */
	SLUICE_REDIS_ERR_PROTOCOL, /* a reply not understood */
	SLUICE_REDIS_ERR_REDIRECT, /* MOVED or ASK followed (cluster) */
	SLUICE_REDIS_ERR_TLS,	   /* the TLS handshake failed */
	SLUICE_REDIS_ERR_NO_MASTER, /* Sentinel: no master known */
	/* The server refused the call with an error reply: an unknown or
	 * renamed command, a script error, WRONGTYPE... */
	SLUICE_REDIS_ERR_REFUSED,
	SLUICE_REDIS_ERR_NOPERM, /* refused by an ACL (NOPERM) */
	SLUICE_REDIS_ERR_OOM,	 /* refused: maxmemory reached (OOM) */
	/* Not sent: every connection to the node already carries
	 * SLUICE_REDIS_MAX_INFLIGHT (2048) unanswered commands (a Redis
	 * slower than the calls arrive). */
	SLUICE_REDIS_ERR_SATURATED,
	SLUICE_REDIS_ERRORS
} sluice_redis_error_t;

/* A report for metrics (sluice_redis_opts_t.on_report). */
typedef enum sluice_redis_report_e {
	SLUICE_REDIS_REPORT_CALL = 1, /* a call ended: latency_ns, error */
	SLUICE_REDIS_REPORT_ERROR,    /* an error outside calls: error */
	SLUICE_REDIS_REPORT_GAUGES    /* every 500 ms, per node: the gauges */
} sluice_redis_report_t;

typedef struct sluice_redis_node_report_s {
	sluice_redis_report_t what;
	const char *node; /* as in sluice_redis_event_t */
	size_t index;	  /* the node's number in this client (stable) */
	/* Gauges, set in every report. */
	int up;		      /* sluice_redis_healthy() for this node */
	int breaker_open;     /* calls fail fast */
	unsigned connections; /* connections with their handshake done */
	/* 1: maxmemory is set with a policy other than noeviction, so Redis
	 * may evict buckets; 0: it may not; -1: not known (CONFIG GET and
	 * INFO refused, or not asked yet). */
	int eviction_unsafe;
	/* The node's last error in words ("" when none yet): the server's
	 * reply, the system's or OpenSSL's reason.  Valid during the call. */
	const char *last_error;
	uint64_t latency_ns; /* CALL: from the call to its answer */
	sluice_redis_error_t error;
} sluice_redis_node_report_t;

/* Called on the loop's thread; must not call back into the client. */
typedef void (*sluice_redis_report_cb)(void *arg,
				       const sluice_redis_node_report_t *rep);

/*
 * TLS towards Redis.  A rediss:// URL (or cluster seed) turns it on with
 * these defaults: the system's CA store, SNI and host-name verification
 * against the node's host.  Every string may be NULL.
 */
typedef struct sluice_redis_tls_s {
	int enabled;		 /* 1: TLS even for redis:// URLs */
	const char *ca_file;	 /* PEM CA bundle; NULL: the system's */
	const char *cert_file;	 /* client certificate (mutual TLS) */
	const char *key_file;	 /* its private key; NULL: in cert_file */
	const char *server_name; /* SNI and the name verified; NULL: host */
	/* Verification of the server's certificate and name, as the
	 * config's `tls.verify` (docs/CONFIG.md), on by default:
	 * SLUICE_REDIS_TLS_VERIFY_ON and 0 (a zeroed struct) verify, and so
	 * does any other value but SLUICE_REDIS_TLS_VERIFY_OFF, which
	 * accepts any certificate (tests only). */
	int verify;
} sluice_redis_tls_t;

#define SLUICE_REDIS_TLS_VERIFY_ON  1
#define SLUICE_REDIS_TLS_VERIFY_OFF (-1)

/*
 * Redis Sentinel: the master of `master` is asked of the Sentinels
 * (SENTINEL get-master-addr-by-name), checked (ROLE) and followed across
 * failovers (+switch-master, and again on a lost connection or READONLY).
 * The URL, when given, names the master's credentials and db (its host is
 * ignored: the Sentinels name the master), and rediss:// there means TLS
 * to the master.
 */
typedef struct sluice_redis_sentinel_s {
	const char *master;	  /* the name the Sentinels monitor */
	const char *const *addrs; /* "host:port" of each Sentinel */
	size_t naddrs;
	const char *user;     /* AUTH to the Sentinels (may be NULL) */
	const char *password; /* NULL: no AUTH */
	int tls;	      /* 1: the Sentinels are reached over TLS */
} sluice_redis_sentinel_t;

/* Checks a Redis URL ("redis[s]://[user:pass@]host[:port][/db]",
 * "unix:///path[?db=N]" or a bare "host[:port]") exactly as
 * sluice_redis_open() reads it: 0, or SLUICE_EINVAL with a message in err
 * that shows the URL masked (sluice_redis_url_mask()).  url is read during
 * the call only. */
SLUICE_API int sluice_redis_url_check(const char *url, char *err,
				      size_t errlen);

/* url with its password replaced by "***" ("redis://user:***@host:6379"),
 * for logs and messages: a URL is never printed otherwise.  Writes out
 * (the caller's, truncated to outlen) and returns it; url is read during
 * the call only. */
SLUICE_API const char *sluice_redis_url_mask(const char *url, char *out,
					     size_t outlen);

/* A name for each kind ("connected", "auth_failed", ...): a static
 * string, valid for the program's life. */
SLUICE_API const char *sluice_redis_event_name(sluice_redis_event_kind_t kind);

typedef struct sluice_redis_opts_s {
	/* "redis[s]://[user:pass@]host:port[/db]" or "unix:///path/to/sock";
	 * NULL when cluster seeds are given. */
	const char *url;
	/* Redis Cluster: "host:port" or "redis[s]://host:port" seeds
	 * (nseeds > 0 selects cluster mode) */
	const char *const *seeds;
	size_t nseeds;
	const char *key_prefix; /* NULL: "sluice:"; no '{' or '}' */
	unsigned timeout_ms;	/* per call; 0: 50 */
	unsigned connections;	/* per client (per node in a cluster); 0: 1 */
	unsigned flags;		/* SLUICE_REDIS_* below */
	/* Node state changes (may be NULL): the library never prints; a
	 * host logs these.  Added last, so zero-initialised options keep
	 * their meaning. */
	sluice_redis_event_cb on_event;
	void *event_arg;
	/* Per-call latency and errors, and node gauges, for metrics (may be
	 * NULL); its argument is event_arg too. */
	sluice_redis_report_cb on_report;
	/* TLS settings (NULL: TLS only for rediss://, with the defaults). */
	const sluice_redis_tls_t *tls;
	/* Redis Sentinel (NULL: none); url then only gives credentials. */
	const sluice_redis_sentinel_t *sentinel;
} sluice_redis_opts_t;

/* Always use the Lua script, even where the SLUICE.TAKE module is loaded
 * (for comparisons; by default the module is used when present). */
#define SLUICE_REDIS_SCRIPT_ONLY 1u
/* The client's connections and reconnection timers do not keep the loop
 * running: only calls still waiting for an answer do (their deadline
 * timer).  For a host whose process should exit once idle. */
#define SLUICE_REDIS_UNREF 2u
/* Send every take on its own.  By default, where the server's module has
 * SLUICE.TAKEMANY, the takes of one key under one limit that are queued
 * for one connection within one loop turn go as one command
 * (SLUICE.TAKEEACH when they share their limit and cost): Redis spends
 * less per decision, and each caller still gets its own decision or
 * error.  For comparisons. */
#define SLUICE_REDIS_NO_BATCH 4u

/*
 * Ownership, for every call below: what a call takes by pointer is either
 * COPIED (it need not outlive the call: the key, the limits, the items of
 * the admin verbs, the options) or BORROWED until the call's callback has
 * run (the items of sluice_redis_take_many() and the decisions array of
 * sluice_redis_take_decisions(): they must stay valid, and are written
 * just before the callback).  What a callback receives by pointer is the
 * client's, valid during the callback only.  A callback runs exactly once
 * per call that returned 0, on the loop's thread, possibly before the
 * call returns (a call that fails fast); never when the call returned an
 * error.
 */

/*
 * Called once per sluice_redis_take(), on the loop's thread.  status is 0
 * or a negative SLUICE_E* code (SLUICE_ETIMEDOUT, SLUICE_ESTORE); on
 * failure the decision is not set and the caller applies its fail mode.
 * summary is the most restrictive decision (sluice_decision_merge()) and
 * `which` the caller's index of the limit it came from (summary->which
 * too, as from the memory store); it is valid during the callback only.
 */
typedef void (*sluice_redis_cb)(void *arg, int status, int allowed,
				const sluice_decision_t *summary, size_t which);

/* Creates a client on `loop`; connects in the background.  opts and
 * everything it points to (URL, seeds, TLS files, Sentinel) are copied:
 * they need not outlive the call; loop must outlive the client.  Returns
 * 0 with *out set, or, with *out NULL (unless out is NULL) and a message in
 * err (may be NULL), SLUICE_EINVAL (out, loop or opts NULL, a bad URL,
 * seed, prefix or TLS file) or SLUICE_ENOMEM; on failure nothing is left
 * on the loop.  The shape of every store's constructor (sluice.h). */
SLUICE_API int sluice_redis_open(sluice_redis_t **out, uv_loop_t *loop,
				 const sluice_redis_opts_t *opts, char *err,
				 size_t errlen);

/* sluice_redis_open() on any event loop: the host gives the loop's table
 * (sluice_loop.h), which must outlive the client (until the done of
 * sluice_redis_free_then()).  sluice_redis_open(uv, ...) is this with
 * sluice_loop_uv_new(uv), freed with the client. */
SLUICE_API int sluice_redis_open_loop(sluice_redis_t **out, sluice_loop_t *loop,
				      const sluice_redis_opts_t *opts,
				      char *err, size_t errlen);

/* The loop table of a libuv loop (NULL: uv NULL or out of memory), and its
 * release (once no client uses it). */
SLUICE_API sluice_loop_t *sluice_loop_uv_new(uv_loop_t *uv);
SLUICE_API void sluice_loop_uv_free(sluice_loop_t *loop);

/*
 * Charges `cost` against every limit of `key`, all-or-nothing (cost 0
 * peeks).  The same limit given twice is one bucket, charged once.  key
 * and limits are copied (they need not outlive the call).  The
 * callback may run before this returns (for example when the
 * circuit breaker is open and the call fails fast).  Returns 0, or
 * SLUICE_EINVAL when the call is malformed (nlimits 0 or above
 * SLUICE_MAX_LIMITS, a limit that is not valid, a key
 * longer than 65535 bytes, or, in a cluster, several limits on a key that
 * is empty or starts with '}', which has no hash tag) or SLUICE_ENOMEM;
 * the callback is then not called.
 */
SLUICE_API int sluice_redis_take(sluice_redis_t *r, const void *key,
				 size_t keylen, const sluice_limit_t *limits,
				 size_t nlimits, uint64_t cost,
				 sluice_redis_cb cb, void *arg);

/*
 * sluice_redis_take() with the memory store's decision shape
 * (sluice_memstore_take()): besides the summary, one decision per limit
 * is written into decisions[0..nlimits) (decisions[i].which is i; the
 * same limit given twice gets the same decision twice), when status is
 * 0, before the callback runs; on failure decisions is left as it was.
 * key and limits are copied; decisions (may be NULL: as
 * sluice_redis_take()) is BORROWED until the callback.  Several limits
 * then go through the script even where the module is loaded (the module
 * answers the summary only); one limit goes to the module as usual.
 * Times are whole milliseconds (rounded up), as the summary's.  Returns
 * as sluice_redis_take().
 */
SLUICE_API int sluice_redis_take_decisions(sluice_redis_t *r, const void *key,
					   size_t keylen,
					   const sluice_limit_t *limits,
					   size_t nlimits, uint64_t cost,
					   sluice_decision_t *decisions,
					   sluice_redis_cb cb, void *arg);

/* Called once per sluice_redis_take_many() (and per admin verb); on
 * status 0 the items' outputs are set and allowed is 1 when every item
 * was charged (an admin verb: 1). */
typedef void (*sluice_redis_many_cb)(void *arg, int status, int allowed);

/*
 * Charges items[0..n) all-or-nothing (the shape of
 * sluice_memstore_take_many()).  items (and the keys and limits they
 * point to) are BORROWED: they stay valid and untouched until the
 * callback; their outputs are written just before it.  Each item is a key with
 * its limits and cost, named in Redis as sluice_redis_take() names it.
 *
 * On one Redis server every key is charged by one atomic server-side
 * call: either all are charged or none, whatever runs concurrently.  In
 * Redis Cluster, where one call cannot span slots, the items are grouped
 * by slot and each group is charged atomically on its own master; when a
 * group rejects (or fails), every group that allowed is given back
 * exactly what it was charged.  Until that refund lands (one round trip),
 * concurrent requests see those keys charged: they may be rejected where
 * they would have passed, never the reverse, and a refund that fails
 * leaves the charge in place (see docs/REDIS.md).
 *
 * Items may share a key, and a bucket (the same key and limit: a request
 * carrying one descriptor twice): as in sluice_memstore_take_many(), each
 * item is decided on the state the items before it left, and the bucket
 * is charged for every item (one server-side charge of the costs summed).
 *
 * Returns 0, or SLUICE_EINVAL (n 0, an item malformed as for
 * sluice_redis_take(), more than 65536 limits over all the items) /
 * SLUICE_ENOMEM; the callback is then not called.
 */
SLUICE_API int sluice_redis_take_many(sluice_redis_t *r,
				      sluice_take_item_t *items, size_t n,
				      sluice_redis_many_cb cb, void *arg);

/*
 * Admin verbs over items[0..n) (key and limits, as for take_many; the
 * outputs are not written; the items are copied, they need not outlive
 * the call): sluice_redis_refund() gives each item's cost
 * back to its buckets (never beyond full), sluice_redis_reset() makes
 * them full.  Both run refund.lua, one atomic call per item, whether or
 * not the module is loaded (it keeps the same state).  cb runs once, with
 * the first failure or 0 (allowed is 1).  Returns 0, or SLUICE_EINVAL (n
 * 0, an item malformed as for sluice_redis_take()) / SLUICE_ENOMEM; the
 * callback is then not called.
 */
SLUICE_API int sluice_redis_refund(sluice_redis_t *r,
				   const sluice_take_item_t *items, size_t n,
				   sluice_redis_many_cb cb, void *arg);
SLUICE_API int sluice_redis_reset(sluice_redis_t *r,
				  const sluice_take_item_t *items, size_t n,
				  sluice_redis_many_cb cb, void *arg);

/*
 * The local stores' shape of reset and refund (sluice_memstore_reset(),
 * sluice_memstore_refund()), asynchronous: one key under
 * limits[0..nlimits), cb once with 0 or the failure (allowed is 1).  key
 * and limits are copied.  Returns 0, or SLUICE_EINVAL (as
 * sluice_redis_take()) / SLUICE_ENOMEM; the callback is then not called.
 * The store's clock is the server's, so there is no now_us.
 */
SLUICE_API int sluice_redis_reset_key(sluice_redis_t *r, const void *key,
				      size_t keylen,
				      const sluice_limit_t *limits,
				      size_t nlimits, sluice_redis_many_cb cb,
				      void *arg);
SLUICE_API int sluice_redis_refund_key(sluice_redis_t *r, const void *key,
				       size_t keylen,
				       const sluice_limit_t *limits,
				       size_t nlimits, uint64_t cost,
				       sluice_redis_many_cb cb, void *arg);

/*
 * More admin verbs over items[0..n), as sluice_redis_refund():
 * sluice_redis_penalize() charges each item's cost with no check
 * (sluice_penalize(): a debt that delays the next allowed take);
 * sluice_redis_block() lets no take of the items' buckets pass for ms
 * milliseconds (sluice_block()).  Both run adjust.lua, one atomic call
 * per item; the state is the one takes read and write.  The items are
 * copied, and the results and callback are sluice_redis_refund()'s.
 */
SLUICE_API int sluice_redis_penalize(sluice_redis_t *r,
				     const sluice_take_item_t *items, size_t n,
				     sluice_redis_many_cb cb, void *arg);
SLUICE_API int sluice_redis_block(sluice_redis_t *r,
				  const sluice_take_item_t *items, size_t n,
				  uint64_t ms, sluice_redis_many_cb cb,
				  void *arg);

/*
 * A key's usage carried to its changed limit `to` from the limits it had
 * (from[0..nfrom), the most recent first; nfrom below
 * SLUICE_MAX_LIMITS), as sluice_memstore_carry() does it: carry.lua, one
 * atomic call, whether or not the module is loaded (the state is the
 * same; the stored format does not change).  Sent before a take on the
 * same client, it reaches the server first.  key and limits are copied;
 * cb once with 0 or the failure.  Returns 0, or SLUICE_EINVAL (a limit
 * not valid, too many) / SLUICE_ENOMEM; the callback is then not called.
 */
SLUICE_API int sluice_redis_carry(sluice_redis_t *r, const void *key,
				  size_t keylen, const sluice_limit_t *to,
				  const sluice_limit_t *from, size_t nfrom,
				  sluice_redis_many_cb cb, void *arg);

/*
 * A key's bucket under `limit` started with the usage another limiter
 * counted in the same Redis: the integer at the key `counter` (bytes,
 * envoyproxy/ratelimit's fixed-window counter, docs/ENVOY.md), c, makes
 * min(c, capacity) tokens used at the server's clock -- only when the
 * bucket holds no state and was not imported while that counter lives
 * (a mark beside the bucket, kept window_ms when the counter has no
 * TTL); a bucket with state is never touched, so repeating it is
 * harmless.  import.lua, one atomic call, written as a charge writes the
 * state (the module reads it).  Sent before a take on the same client,
 * it reaches the server first.  cb once with 0 or the failure; its
 * `allowed` is 1 when usage was imported.  Returns 0, or SLUICE_EINVAL
 * (a cluster client: the keys are in different slots; a limit not
 * valid; no counter) / SLUICE_ENOMEM; the callback is then not called.
 */
SLUICE_API int sluice_redis_import(sluice_redis_t *r, const void *key,
				   size_t keylen, const sluice_limit_t *limit,
				   const char *counter, size_t counterlen,
				   uint64_t window_ms, sluice_redis_many_cb cb,
				   void *arg);

/*
 * The decision a take of `cost` would get now (as sluice_redis_take()),
 * charging nothing: the script is sent more than a bucketful, which it
 * never charges, and the client decides `cost` on the shortfalls it
 * answers.  Always the script path (the module keeps the same state).
 * key and limits are copied, as for sluice_redis_take().
 */
SLUICE_API int sluice_redis_peek(sluice_redis_t *r, const void *key,
				 size_t keylen, const sluice_limit_t *limits,
				 size_t nlimits, uint64_t cost,
				 sluice_redis_cb cb, void *arg);

/*
 * A reservation (sluice_reserve_all()) of `cost` on every limit of `key`,
 * in one atomic server-side call at the server's clock: charged now, into
 * debt if need be, answering the wait until this request's turn; refused,
 * charging nothing, when the turn is more than max_wait_us away.  Any
 * number of clients on one server are queued exactly by the refill.  One
 * limit goes to SLUICE.RESERVE where the module has it, else (and several
 * limits always) to reserve.lua; both write the same state.  cb runs once
 * with status 0 and the reservation (res->now_us is the server's clock,
 * res->summary's times whole ms rounded up, res->wait_us exact), or a
 * failure (res NULL).  key and limits are copied.  Returns as
 * sluice_redis_take().
 */
typedef void (*sluice_redis_reserve_cb)(void *arg, int status,
					const sluice_reservation_t *res);
SLUICE_API int sluice_redis_reserve(sluice_redis_t *r, const void *key,
				    size_t keylen, const sluice_limit_t *limits,
				    size_t nlimits, uint64_t cost,
				    uint64_t max_wait_us,
				    sluice_redis_reserve_cb cb, void *arg);

/*
 * A conditional refund (sluice_refund_if()): gives `cost` back to every
 * limit of `key` only while each bucket still holds expected[i] (for
 * limits[i]: the reservation's res->states), in one atomic server-side
 * call at the server's clock; else writes nothing.  One limit goes to
 * SLUICE.REFUNDIF where the module has it, else refund_if.lua.  cb runs
 * once: status 0 with allowed 1 when refunded, 0 when not, or a
 * failure.  key, limits and expected are copied.
 * A call resent after a lost reply may answer 0 for a refund its first
 * sending made (the state then moved on by that refund): never the
 * reverse.  Returns as sluice_redis_take().
 */
SLUICE_API int sluice_redis_refund_if(sluice_redis_t *r, const void *key,
				      size_t keylen,
				      const sluice_limit_t *limits,
				      size_t nlimits, uint64_t cost,
				      const sluice_state_t *expected,
				      sluice_redis_many_cb cb, void *arg);

/*
 * An admin verb over items[0..n), as sluice_redis_refund(): each item's
 * buckets hold `remaining` whole tokens from now (sluice_set_remaining();
 * the capacity or more: full, the key deleted), whatever they held: one
 * atomic call of set.lua per item.
 */
SLUICE_API int sluice_redis_set(sluice_redis_t *r,
				const sluice_take_item_t *items, size_t n,
				uint64_t remaining, sluice_redis_many_cb cb,
				void *arg);

/* 1 when the client believes the store can answer (a connection whose
 * handshake succeeded and whose last probe was answered within timeout_ms,
 * breaker not open; in a cluster, for every slot's master), for /readyz.
 * Reads the client's state only (no I/O, no callback). */
SLUICE_API int sluice_redis_healthy(const sluice_redis_t *r);

/* Closes the connections; calls that are still pending (those gathered
 * for a batch too) fail with SLUICE_ESTORE, each callback once, before
 * this returns; what they borrowed is then the caller's again.  Call it from
 * the loop's thread, outside the client's callbacks; the memory is released
 * once the loop has run again (it closes the client's timers). */
SLUICE_API void sluice_redis_free(sluice_redis_t *r);

/* As sluice_redis_free(), and then calls done(arg) from the loop once the
 * client has closed its last handle and released its memory: a host that
 * tears its loop down (a Node.js worker, say) waits for this before it
 * stops running the loop or unloads the code the close callbacks live in. */
SLUICE_API void sluice_redis_free_then(sluice_redis_t *r,
				       void (*done)(void *arg), void *arg);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_REDIS_H */
