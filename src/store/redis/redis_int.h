/*
 * redis_int.h -- internals of the Redis store shared by its files:
 *
 *   client.c   the public API: one-key calls, health, new and free
 *   call.c     a call's life: deadline, circuit breaker, sending, retries,
 *              and the batches of one loop turn's takes
 *   node.c     connections to a node: handshake, reconnect with backoff,
 *              probing
 *   status.c   the node's events, health state, last error and reports
 *   cluster.c  slots (CRC16, hash tags), the slot map, MOVED/ASK
 *   sentinel.c Redis Sentinel: finding the master, following failovers
 *   script.c   the Lua script path (EVALSHA, NOSCRIPT) and reply parsing;
 *              the scripts and their SHA-1 come from the build
 *   module_path.c  the SLUICE.TAKE module path and its reply parser
 *   quota.c    calls with calendar quotas on the script path (quota.lua)
 *   many.c     takes over several keys: one call per slot, refunds
 *   import.c   envoyproxy/ratelimit's counters imported into buckets
 *   command.c  commands in RESP: arguments, the writer, formatted ones
 *   link.c     one socket: a non-blocking connect, write, read replies in
 *              order (hiredis's redisReader parses RESP), TLS through
 *              tls.c; on the loop of sluice_loop.h, which the host gives
 *              (adapters/libuv.c: libuv's)
 *   tls.c      OpenSSL: the context, and a session over memory BIOs
 *   maxmemory.c  the server's maxmemory-policy: may it evict buckets?
 *   reply.c    the RESP reader with bounds on a reply's size, and the
 *              redaction of what a server echoes of our commands
 *   url.c      redis://, rediss:// and unix:// URLs
 *
 * Calls flow one way, down this list of layers (a file calls only files
 * of the layers below its own; no ring):
 *
 *   client.c
 *   many.c, import.c
 *   call.c
 *   cluster.c, sentinel.c
 *   node.c
 *   quota.c
 *   maxmemory.c, script.c, module_path.c
 *   command.c
 *   link.c
 *   reply.c, tls.c, url.c, status.c
 *   the loop (r->loop: sluice_loop.h's table, e.g. adapters/libuv.c)
 *
 * Replies come back as callbacks.  News travels up through hooks, never
 * calls: a connection's news for the topology (up, failed) reaches
 * cluster.c and sentinel.c through hooks they register
 * (sluice_redis_t.on_conn_up, on_conn_failed); a closed handle, a node
 * refusing calls and a lost slot map refresh reach client.c and call.c
 * through r->released, r->probe_calls and r->wake_retry.
 *
 * Ownership of a call: the user callback runs exactly once
 * (sluice_redis__finish(), through the call's shape);
 * a link holds a reference for each command sent with the call as its
 * privdata, and runs that command's callback exactly once (with a NULL
 * reply when the link goes away).  The call is freed when it is finished
 * and no command references it.
 */
#ifndef SLUICE_REDIS_INT_H
#define SLUICE_REDIS_INT_H

#include "sluice_loop.h"
#include "sluice_redis.h"
#include "util/num.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <time.h>

/* Replies outstanding per connection, including those whose caller already
 * timed out; beyond it calls fail fast instead of piling up on a slow Redis. */
#define SLUICE_REDIS_MAX_INFLIGHT 2048
/* Consecutive failures that open the circuit breaker, and how long it stays
 * open before one probe call is let through. */
#define SLUICE_REDIS_BREAKER_FAILURES 5
#define SLUICE_REDIS_BREAKER_OPEN_MS  100
/* Reconnect backoff: doubles from MIN to MAX, so a Redis that comes back is
 * reached again within MAX ms (well inside the 1 s promise). */
#define SLUICE_REDIS_BACKOFF_MIN_MS 10
#define SLUICE_REDIS_BACKOFF_MAX_MS 200
/* A handshake refused (wrong password, no such db, scripts not allowed)
 * is not cured by retrying at once: its backoff doubles up to this. */
#define SLUICE_REDIS_HANDSHAKE_BACKOFF_MAX_MS 2000
/* Connect plus handshake (AUTH, SELECT, SCRIPT LOAD, PING) must finish
 * within this, else the node is timing out (accepts, never answers). */
#define SLUICE_REDIS_CONNECT_TIMEOUT_MS 1000
/* An idle connection is pinged this often; a ping unanswered for
 * timeout_ms marks the connection unusable until it is answered. */
#define SLUICE_REDIS_PROBE_MS 500
/* Timed-out calls with no reply in between after which a connection is
 * declared stuck, dropped and reopened. */
#define SLUICE_REDIS_STUCK_TIMEOUTS 8
/* Redirections (MOVED, ASK) and script reloads one call may follow in a
 * row before it fails: a loop between nodes that disagree.  A retry after
 * a pause (TRYAGAIN, CLUSTERDOWN, LOADING, READONLY, a Sentinel master
 * that moved) starts the count again; the deadline bounds those. */
#define SLUICE_REDIS_MAX_REDIRECTS 5
#define SLUICE_REDIS_RETRY_MS	   5
#define SLUICE_REDIS_NSLOTS	   16384
/* What one reply may claim (reply.c); beyond it the reply is a protocol
 * error and the connection is dropped.  The largest replies sluice asks
 * for: CLUSTER SLOTS (at most 16384 ranges, each with its nodes: a
 * cluster whose every slot is a range of its own, with five replicas,
 * is 16384 x 35 elements: about 570,000), a take_many's EVALSHA (one shortfall
 * per bucket, at most MAX_AGGREGATE buckets per call), INFO (a few kB). */
#define SLUICE_REDIS_REPLY_MAX_AGGREGATE 65536
#define SLUICE_REDIS_REPLY_MAX_ELEMENTS	 (1LL << 20)
#define SLUICE_REDIS_REPLY_MAX_BYTES	 (8u << 20)
/* Bytes sluice_redis__redact() may write beyond the text's length. */
#define SLUICE_REDIS_REDACT_ROOM 16

typedef struct sluice_redis_node_s sluice_redis_node_t;
typedef struct sluice_redis_conn_s sluice_redis_conn_t;
typedef struct sluice_redis_call_s sluice_redis_call_t;
typedef struct sluice_redis_link_s sluice_redis_link_t;
typedef struct sluice_redis_sentinel_state_s sluice_redis_sentinel_state_t;

/* ---------------------------------------------------------------- links */

/* A reply to one command, in order; reply is NULL when the link went away
 * before the answer.  The reply is freed after the callback returns. */
typedef void sluice_redis_reply_fn(sluice_redis_link_t *l, redisReply *reply,
				   void *priv);
/* The link is up (status 0: connected and, with TLS, the handshake done),
 * or it failed or closed (status < 0, l->errstr says why; every command's
 * callback has run with NULL).  Not called after sluice_redis__link_close. */
typedef void sluice_redis_link_fn(sluice_redis_link_t *l, int status);

/* The part of a link its owner reads; link.c allocates more behind it. */
struct sluice_redis_link_s {
	void *data;	  /* the owner's (a conn, a Sentinel) */
	char errstr[256]; /* why it failed, for the log */
	int tls_failed;	  /* the failure was TLS's (handshake, alert) */
	int reached;	  /* the socket connected (whatever came after) */
	int reset;	  /* the connect itself ended in a reset: a server
			     accepted, then dropped us */
	/* sluice_redis__hrtime() when the link last moved on: its connect
	 * seen done, its TLS handshake done, a reply read (0: never).  A
	 * deadline on the server counts from here, so that the time a held
	 * loop took to notice is not charged to the server; bytes alone do
	 * not count, so a server that trickles them gains nothing. */
	uint64_t progress_ns;
};

/* Connects to host:port (a name or an address) or the unix socket at
 * path, in the background, on r's loop; with TLS when tls is set (r->tls
 * must then exist), verifying the certificate against server_name (NULL:
 * host).  Commands may be sent at once: they are written once connected.
 * NULL when out of memory. */
sluice_redis_link_t *sluice_redis__link_open(sluice_redis_t *r,
					     const char *host, int port,
					     const char *path, int tls,
					     sluice_redis_link_fn *on_state);
/* url.c: the socket address of the unix socket at path, or of host:port
 * when host is an address literal: 1 (*ss, *len set); 0 when host is a
 * name to resolve; -1 when path is too long for a socket. */
int sluice_redis__sockaddr(const char *host, int port, const char *path,
			   struct sockaddr_storage *ss, socklen_t *len);
/* url.c: host resolved with getaddrinfo() (IPv4 first), which blocks
 * while it asks: for loops with no resolver of their own.  0, or -1 with
 * why ("resolve: ..."). */
int sluice_redis__resolve_now(const char *host, int port,
			      struct sockaddr_storage *ss, socklen_t *len,
			      char *why, size_t n);
/* Queues a command already in RESP; fn (may be NULL: reply ignored) runs
 * once with its reply.  0, or -1 when the link is closed or full. */
int sluice_redis__link_send(sluice_redis_link_t *l, sluice_redis_reply_fn *fn,
			    void *priv, const char *resp, size_t len);
/* Every reply from now on is a push (SUBSCRIBE): each goes to fn. */
void sluice_redis__link_on_push(sluice_redis_link_t *l,
				sluice_redis_reply_fn *fn, void *priv);
/* Writes what is queued now rather than at the end of the loop turn
 * (for commands queued from the end of the turn itself). */
void sluice_redis__link_flush(sluice_redis_link_t *l);
/* Takes what the socket holds now (a connect done, replies, each
 * dispatched as the loop would), without waiting for the loop: a timer
 * calls it before it declares the server late.  1 when something
 * happened, 0 when nothing was there. */
int sluice_redis__link_poll(sluice_redis_link_t *l);
/* Closes now: each command's callback runs with NULL (on_state does not);
 * safe from inside the link's own callbacks.  The memory goes once the
 * loop has closed the socket. */
void sluice_redis__link_close(sluice_redis_link_t *l);

/* A parsed redis:// or unix:// URL. */
typedef struct sluice_redis_url_s {
	char *host; /* NULL for unix sockets */
	int port;
	char *path; /* unix socket path or NULL */
	char *user; /* NULL: none */
	char *pass; /* NULL: no AUTH */
	int db;	    /* 0: no SELECT */
	int tls;    /* rediss:// */
} sluice_redis_url_t;

enum { CONN_DOWN, CONN_CONNECTING, CONN_UP };

struct sluice_redis_conn_s {
	sluice_redis_t *r;
	sluice_redis_node_t *node;
	sluice_redis_link_t *link; /* NULL while down */
	int state;
	unsigned inflight; /* commands sent with a reply callback */
	unsigned stuck;	   /* timeouts since the last reply */
	unsigned backoff_ms;
	unsigned inflight_hs;	/* handshake replies still to come */
	int hs_failed;		/* the handshake was refused: long backoff */
	int lost_early;		/* lost after connecting, before the handshake
				   was answered (a server refusing us, as a
				   TLS reset): long backoff */
	uint64_t last_reply_ms; /* loop clock of the last reply */
	uint64_t probe_sent_ms; /* a PING in flight since; 0: none */
	int module;		/* SLUICE.TAKE present: -1 unknown, 0, 1 */
	int module_reserve;	/* SLUICE.RESERVE present too: 1 */
	int module_refund_if;	/* SLUICE.REFUNDIF present too: 1 */
	int batch;		/* SLUICE_REDIS_BATCH_*: what it can batch */
	/* Takes gathered for one command (call.c), sent at the end of the
	 * loop turn; NULL: none.  On r->batches while not NULL. */
	struct sluice_redis_batch_s *open_batch;
	sluice_redis_conn_t *batch_next; /* r->batches list */
	int drop;		    /* drop at the end of the current sweep */
	sluice_loop_timer_t *timer; /* connect timeout / reconnect backoff */
};

struct sluice_redis_node_s {
	char *host; /* NULL with a unix socket, or a master not known yet */
	int port;
	char *path;
	char last_error[256]; /* the last failure in words, "" if none */
	unsigned rr;	      /* round robin over conns */
	sluice_redis_conn_t *conns;

	/* The circuit breaker of the calls routed here: one per node, so a
	 * dead cluster master fails only its own slots' calls. */
	int breaker;
	unsigned failures;
	uint64_t open_until_ms;
	int probing;
	size_t index;	  /* in r->nodes */
	int breaker_told; /* an open breaker was reported */

	/* Calls refused by the server (an error reply) since the last
	 * success, the refusal last reported and when. */
	unsigned refusals;
	char refusal[160];
	uint64_t refusal_told_ms;
	int refusal_probing; /* a peek (probe_calls) in flight */
	/* Sentinel: the connections are being dropped because the master
	 * moved (node_move); their calls in flight are resent there. */
	int moving;
	/* Can the server evict buckets (maxmemory.c): EVICT_*, and what it
	 * said ("policy/maxmemory"), so a change is told once. */
	int evict;
	char evict_seen[48];

	char name[80]; /* "host:port" or the socket path, for events */
	int health;    /* HEALTH_*: the state last reported */
	uint64_t noscript_told_ms; /* last SCRIPT_RELOADED event */
};

/* What a connection's server can decide in one command (module_path.c). */
enum {
	SLUICE_REDIS_BATCH_NONE, /* no SLUICE.TAKEMANY */
	SLUICE_REDIS_BATCH_MANY, /* SLUICE.TAKEMANY */
	SLUICE_REDIS_BATCH_EACH	 /* SLUICE.TAKEMANY and SLUICE.TAKEEACH */
};
/* The most takes one batched command carries. */
#define SLUICE_REDIS_BATCH_MAX 512

enum { EVICT_UNCHECKED = -2, EVICT_UNKNOWN = -1, EVICT_SAFE, EVICT_UNSAFE };

enum {
	HEALTH_UNKNOWN,
	HEALTH_UP,
	HEALTH_AUTH,
	HEALTH_UNREACHABLE,
	HEALTH_TIMEOUT,
	HEALTH_TLS
};

/* What a call's reply decided (status 0). */
typedef struct sluice_redis_outcome_s {
	int allowed;
	sluice_decision_t d; /* one-key calls: d.which is the caller's index */
	/* a reservation: its wait, the server's clock and the state each
	 * distinct limit's bucket holds after it (reserve.c) */
	uint64_t wait_us;
	int64_t now_us;
	sluice_state_t states[SLUICE_MAX_LIMITS];
} sluice_redis_outcome_t;

/* A kind of call: what its reply means and whom it answers.  client.c:
 * one key (sluice_redis_take/peek) and one item (a take_many of one);
 * many.c: a group of a take over several keys, and an admin call (refund,
 * reset, penalize, block, and a cluster take's refunds). */
typedef struct sluice_redis_shape_s {
	/* The reply of a call that reached Redis -> *out; 0, or -1 when it
	 * is not the reply expected (a protocol error). */
	int (*parse)(sluice_redis_call_t *c, const redisReply *reply,
		     sluice_redis_outcome_t *out);
	/* Answers the caller, once: status 0 with *out, or a failure (out
	 * NULL). */
	void (*done)(sluice_redis_call_t *c, int status,
		     const sluice_redis_outcome_t *out);
} sluice_redis_shape_t;

struct sluice_redis_call_s {
	const sluice_redis_shape_t *shape;
	sluice_redis_call_t *prev, *next; /* pending list, by deadline */
	sluice_redis_call_t *retry_next;  /* waiting for a resend */
	sluice_redis_t *r;
	uint64_t deadline_ms;
	sluice_redis_cb cb; /* one key: the caller's callback */
	void *arg;
	/* one item of a take_many: the item (outputs written at the end)
	 * and the take's callback */
	sluice_take_item_t *item;
	sluice_redis_many_cb item_cb;
	int done;		    /* user callback ran */
	int waiting;		    /* on the retry list */
	int probe;		    /* the half-open breaker probe */
	sluice_redis_node_t *guard; /* whose breaker admitted it */
	unsigned refs;	    /* commands in flight that carry this call */
	unsigned redirects; /* in a row, since the last retry after a pause */
	sluice_redis_node_t *ask;  /* send ASKING + the call to this node */
	sluice_redis_conn_t *conn; /* where it was last sent */
	int script; /* last sent as EVALSHA (else to the module) */
	int slot;
	uint64_t cost;
	uint64_t start_ns;	   /* sluice_redis__hrtime() when started */
	sluice_redis_error_t fail; /* why it failed, when it does */
	size_t nlimits;		   /* distinct limits (duplicates dropped) */
	unsigned char orig[SLUICE_MAX_LIMITS]; /* caller's index of each */
	/* sluice_redis_take_decisions(): the caller's decision per limit,
	 * written before its callback (NULL: not asked); ncaller of them,
	 * the caller's limit j being distinct limit dist[j]. */
	sluice_decision_t *decisions;
	size_t ncaller;
	unsigned char dist[SLUICE_MAX_LIMITS];
	/* take_many: one entry per key (nlimits of them, limits[] flat),
	 * NULL for a one-key call; `many` is the take it belongs to. */
	struct sluice_redis_mkey_s *mk;
	/* take_many: the bucket (index into mk) of each limit of each of
	 * the call's items, in the call's order of items: items that share
	 * a bucket share one entry of mk, charged with their costs summed */
	size_t *bucket_of;
	struct sluice_redis_many_s *many;
	int refund;    /* gives back what a take of the same keys charged */
	int adjust;    /* SLUICE_REDIS_ADJUST_*: a penalty or a block */
	int peek;      /* the decision of cost, charging nothing */
	size_t group;  /* which of the take's calls this is */
	char *keybase; /* "<prefix>{<key>}:" */
	size_t keybaselen;
	/* sluice_redis_reserve() (reserve.c): a reservation with its
	 * longest wait, answered to reserve_cb */
	int reserve;
	uint64_t max_wait_us;
	sluice_redis_reserve_cb reserve_cb;
	/* sluice_redis_refund_if() (reserve.c): a conditional refund, the
	 * state each distinct limit's bucket must still hold (answered to
	 * item_cb, item NULL: allowed is 1 when refunded) */
	int refund_if;
	sluice_state_t expected[SLUICE_MAX_LIMITS];
	sluice_limit_t limits[];
};

enum { BREAKER_CLOSED, BREAKER_OPEN, BREAKER_HALF_OPEN };

/* What an admin call over items does (many.c's give_back()). */
enum {
	SLUICE_REDIS_ADJUST_NONE,
	SLUICE_REDIS_ADJUST_PENALIZE, /* mk[].cost: the cost */
	SLUICE_REDIS_ADJUST_BLOCK,    /* mk[].cost: the ms */
	SLUICE_REDIS_ADJUST_CARRY,    /* limits[0] now, the rest earlier */
	SLUICE_REDIS_ADJUST_SET,      /* mk[].cost: the tokens (set.lua) */
	SLUICE_REDIS_ADJUST_IMPORT    /* mk[0] the bucket, mk[1] the foreign
					 counter, mk[2] the mark; mk[0].cost
					 the window in ms (import.lua) */
};

struct sluice_redis_s {
	sluice_loop_t *loop;
	sluice_loop_t *own_loop; /* made by sluice_redis_open(): freed with r */
	char *prefix;
	unsigned timeout_ms;
	unsigned nconns;
	unsigned flags;
	sluice_redis_url_t url; /* auth/db (and the node when not a cluster) */
	int cluster;
	struct ssl_ctx_st *tls; /* TLS context (NULL: none needed) */
	int tls_nodes;		/* the data nodes are reached over TLS */
	char *tls_name;		/* server_name, or NULL: each node's host */
	sluice_redis_sentinel_state_t *sentinel; /* NULL: no Sentinel */
	sluice_redis_node_t **nodes;
	size_t nnodes;
	int16_t *slots;		  /* cluster: slot -> node index, -1 unknown */
	int refreshing;		  /* a CLUSTER SLOTS is in flight */
	int refresh_lost;	  /* the last one died with its connection */
	uint64_t refreshed_ms;	  /* last asked; 0: ask at the next chance */
	uint64_t refresh_sent_ms; /* when the one in flight was sent */
	size_t refresh_rr;	  /* the node to ask first next time */
	char sha[41];		  /* script.lua (one limit) */
	char sha_multi[41];	  /* script_multi.lua */
	char sha_refund[41];	  /* refund.lua */
	char sha_adjust[41];	  /* adjust.lua */
	char sha_carry[41];	  /* carry.lua */

	sluice_redis_call_t *head, *tail; /* pending, oldest first */
	sluice_redis_call_t *retry_head;
	sluice_loop_timer_t *sweep;
	sluice_loop_timer_t *retry;
	sluice_loop_timer_t *probe; /* pings idle connections (node.c) */
	/* Connections with gathered takes (call.c), sent by `gather` at the
	 * end of the loop turn. */
	sluice_redis_conn_t *batches;
	sluice_loop_hook_t *gather;
	unsigned probe_ticks;
	sluice_redis_event_cb on_event;
	sluice_redis_report_cb on_report;
	void *event_arg;
	/* A connection's news for whoever follows the topology, hooks
	 * registered by cluster.c (a connection came up: fill the slot
	 * map's holes) and sentinel.c (a connection failed: ask where the
	 * master is now); NULL: nobody.  So node.c calls neither. */
	void (*on_conn_up)(sluice_redis_t *r);
	void (*on_conn_failed)(sluice_redis_t *r, int health, const char *why);
	/* Hooks of the layers above for those below, so that calls flow
	 * one way: a handle or link of r's closed (client.c: the memory
	 * goes with the last), a node refuses every call (client.c: send
	 * it a peek), a slot map refresh was lost (call.c: run the retry
	 * timer soon). */
	void (*released)(sluice_redis_t *r);
	void (*probe_calls)(sluice_redis_t *r, sluice_redis_node_t *n);
	void (*wake_retry)(sluice_redis_t *r);
	int closing;
	unsigned open_handles; /* loop handles (and links) still to close */
	/* sluice_redis_free_then(): told once the memory is released */
	void (*on_released)(void *arg);
	void *on_released_arg;
	uint64_t moved, asked, noscript; /* redirections followed (tests) */
	uint64_t quota_skew_told_ms; /* quota.c: a clock far off, last told */
};

/* The loop's clock (ms, cached for the turn) and the monotonic clock in ns
 * (clock_gettime(): a vDSO call, no system call). */
static inline uint64_t sluice_redis__now(const sluice_redis_t *r)
{
	return r->loop->ops->now(r->loop);
}
static inline uint64_t sluice_redis__hrtime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
/* r's loop's timers and hooks (sluice_loop.h), in short. */
static inline void sluice_redis__timer_start(const sluice_redis_t *r,
					     sluice_loop_timer_t *t,
					     uint64_t ms, uint64_t repeat_ms)
{
	r->loop->ops->timer_start(t, ms, repeat_ms);
}
static inline void sluice_redis__timer_stop(const sluice_redis_t *r,
					    sluice_loop_timer_t *t)
{
	r->loop->ops->timer_stop(t);
}
static inline int sluice_redis__timer_active(const sluice_redis_t *r,
					     const sluice_loop_timer_t *t)
{
	return r->loop->ops->timer_active(t);
}
/* A timer of r's that runs fn(arg), counted in r->open_handles until
 * sluice_redis__timer_close() has released it; NULL: out of memory. */
static inline sluice_loop_timer_t *sluice_redis__timer_new(sluice_redis_t *r,
							   sluice_loop_fn *fn,
							   void *arg,
							   unsigned flags)
{
	sluice_loop_timer_t *t =
		r->loop->ops->timer_new(r->loop, fn, arg, flags);

	if (t)
		r->open_handles++;
	return t;
}
static inline void sluice_redis__handle_closed(void *arg)
{
	sluice_redis_t *r = arg;

	r->released(r);
}
/* Stops and closes t (NULL: nothing); r->released runs once it is gone. */
static inline void sluice_redis__timer_close(sluice_redis_t *r,
					     sluice_loop_timer_t *t)
{
	if (t)
		r->loop->ops->timer_close(t, sluice_redis__handle_closed, r);
}

/* command.c: a command in RESP, built on the stack (on the heap when it
 * grows beyond); `failed` once an allocation failed. */
typedef struct sluice_redis_resp_s {
	char *buf;
	size_t len, cap;
	int failed;
	char stack[2048];
} sluice_redis_resp_t;
void sluice_redis__resp_init(sluice_redis_resp_t *o);
void sluice_redis__resp_free(sluice_redis_resp_t *o);
void sluice_redis__resp_array(sluice_redis_resp_t *o, size_t n);
void sluice_redis__resp_arg(sluice_redis_resp_t *o, const char *s, size_t len);
void sluice_redis__resp_u64(sluice_redis_resp_t *o, uint64_t v);
/* The Redis key of each of the call's limits. */
void sluice_redis__resp_keys(sluice_redis_resp_t *o,
			     const sluice_redis_call_t *c);
/* Sends a command given as words ("PING", "SELECT 3"): each space
 * separates two arguments; %s takes a C string, %d an int, %b a pointer
 * and a size_t (binary); 0 or -1. */
int sluice_redis__command(sluice_redis_link_t *l, sluice_redis_reply_fn *fn,
			  void *priv, const char *fmt, ...);
/* The one check of a key and its limits as every call takes them:
 * SLUICE_EINVAL for nlimits 0 or above SLUICE_MAX_LIMITS, a limit that
 * is not valid, a key longer than 65535 bytes (or NULL with a length),
 * or, in a cluster, several limits on a key with no hash tag (empty, or
 * starting with '}'); else 0. */
int sluice_redis__check_item(const sluice_redis_t *r, const void *key,
			     size_t keylen, const sluice_limit_t *limits,
			     size_t nlimits);

/* call.c */
/* Enqueues and sends a new call (see sluice_redis_take()). */
void sluice_redis__start(sluice_redis_call_t *c);
/* Sends every call waiting for a resend now (or fails it when closing). */
void sluice_redis__retry_now(sluice_redis_t *r);
void sluice_redis__send(sluice_redis_call_t *c);
void sluice_redis__finish(sluice_redis_call_t *c, int status,
			  const redisReply *reply);
void sluice_redis__retry_later(sluice_redis_call_t *c);
/* call.c's part of a new client: the deadline and retry timers, the
 * batches' end-of-turn hook (each one of r->open_handles) and the
 * r->wake_retry hook; 0, or -1 when out of memory (those made are closed
 * by sluice_redis__calls_close()).  Then their closing, and the release of
 * the takes gathered and not sent (sluice_redis_free(): their calls are
 * finished). */
int sluice_redis__calls_init(sluice_redis_t *r);
void sluice_redis__calls_close(sluice_redis_t *r);
void sluice_redis__batches_drop(sluice_redis_t *r);
/* Runs the retry timer soon even with no call waiting (it also retries a
 * lost slot map refresh); below call.c, r->wake_retry. */
void sluice_redis__wake_retry(sluice_redis_t *r);

/* status.c: the node's events, health and reports (calls nothing here) */
/* 1 when the node can take calls: its breaker is not open (or its open
 * time is over), it does not refuse every call, and a connection is
 * usable. */
int sluice_redis__node_healthy(const sluice_redis_t *r,
			       const sluice_redis_node_t *n);

/* node.c */
/* host NULL and path NULL: an address not known yet (Sentinel), set by
 * sluice_redis__node_move(). */
sluice_redis_node_t *sluice_redis__node_new(sluice_redis_t *r, const char *host,
					    int port, const char *path);
void sluice_redis__node_free(sluice_redis_node_t *n);
/* The node is now at host:port (NULL: nowhere known): its connections
 * are dropped (their calls fail) and reopened there. 0 or -1 (memory). */
int sluice_redis__node_move(sluice_redis_node_t *n, const char *host, int port);
/* status.c: records the node's last error in words (the log and
 * metrics show it). */
void sluice_redis__node_error(sluice_redis_node_t *n, const char *what);
void sluice_redis__conn_start(sluice_redis_conn_t *k);
void sluice_redis__conn_drop(sluice_redis_conn_t *k);
/* Takes what every connection's socket holds now, before a timer judges
 * a call or a ping late (a loop held past the deadline polls after its
 * timers). */
void sluice_redis__poll_links(sluice_redis_t *r);
sluice_redis_conn_t *sluice_redis__pick(sluice_redis_node_t *n);
/* 1 when pick() found nothing only because every connection that is up
 * carries SLUICE_REDIS_MAX_INFLIGHT commands (at least one is up). */
int sluice_redis__node_saturated(const sluice_redis_node_t *n);
/* status.c: 1 when the connection finished its handshake and its last
 * ping (if any) was answered within timeout_ms. */
int sluice_redis__conn_usable(const sluice_redis_conn_t *k);
/* Makes and starts the idle-connection probe timer (one per client,
 * r->probe); 0, or -1 when out of memory. */
int sluice_redis__probe_start(sluice_redis_t *r);
/* status.c: reports a node event to the host (any kind) ... */
void sluice_redis__event(sluice_redis_t *r, sluice_redis_node_t *n,
			 sluice_redis_event_kind_t kind, const char *detail);
/* ... and a node state, only when it differs from the last one. */
void sluice_redis__health(sluice_redis_node_t *n, int health,
			  const char *detail);
/* Reports to on_report (latency_ns 0 unless a call ended). */
void sluice_redis__report(sluice_redis_t *r, sluice_redis_node_t *n,
			  sluice_redis_report_t what, uint64_t latency_ns,
			  sluice_redis_error_t error);

/* maxmemory.c */
/* Asks the server (on k's link) whether it may evict buckets; a change of
 * verdict is an EV_EVICTION event for k's node. */
void sluice_redis__check_eviction(sluice_redis_conn_t *k);

/* cluster.c */
int sluice_redis__key_slot(const char *key, size_t len);
void sluice_redis__refresh_slots(sluice_redis_t *r);
/* Makes r a cluster client: an empty slot map, and the hook that
 * refreshes it when a connection comes up and the map has holes or the
 * last refresh was lost.  0 or SLUICE_ENOMEM. */
int sluice_redis__cluster_init(sluice_redis_t *r);
sluice_redis_node_t *sluice_redis__route(sluice_redis_t *r, int slot);
/* Handles a MOVED/ASK error: 1 when the call is to be sent again (to
 * the new owner, or with c->ask set). */
int sluice_redis__redirect(sluice_redis_call_t *c, const redisReply *reply);

/* sentinel.c */
/* The master may have moved (a READONLY reply): ask the Sentinels. */
void sluice_redis__sentinel_lost(sluice_redis_t *r, const char *why);
/* 1 while r's Sentinels are asked and none has yet failed a whole round
 * (a call may wait for their answer), else 0 (no Sentinel too). */
int sluice_redis__sentinel_finding(const sluice_redis_t *r);
/* Starts asking the Sentinels for the master of r's node 0 (created with
 * no address); 0, or SLUICE_EINVAL / SLUICE_ENOMEM with a message. */
int sluice_redis__sentinel_start(sluice_redis_t *r,
				 const sluice_redis_sentinel_t *s, char *err,
				 size_t errlen);
/* The master's connection was lost, it answered READONLY, or ROLE says it
 * is no master: ask the Sentinels again (at most every 100 ms). */
/* Closes the Sentinel connections (from sluice_redis_free()). */
void sluice_redis__sentinel_free(sluice_redis_t *r);
/* Checks the options (before anything is allocated). */
int sluice_redis__sentinel_check(const sluice_redis_sentinel_t *s, char *err,
				 size_t errlen);

/* tls.c */
/* The context for opts (rediss:// or opts->tls): CA, client certificate,
 * verification; NULL with a message in err when a file is unusable. */
struct ssl_ctx_st *sluice_redis__tls_context(const sluice_redis_tls_t *o,
					     char *err, size_t errlen);
void sluice_redis__tls_context_free(struct ssl_ctx_st *ctx);

/* script.c */
extern const char sluice_redis__script[];
extern const char sluice_redis__script_multi[];
/* Their SHA-1 in hex, computed by CMake (the names EVALSHA calls). */
extern const char sluice_redis__script_sha[41];
extern const char sluice_redis__script_multi_sha[41];
extern const char sluice_redis__script_refund_sha[41];
extern const char sluice_redis__script_refund[];
extern const char sluice_redis__script_adjust_sha[41];
extern const char sluice_redis__script_adjust[];
extern const char sluice_redis__script_carry_sha[41];
extern const char sluice_redis__script_carry[];
extern const char sluice_redis__script_reserve_sha[41];
extern const char sluice_redis__script_reserve[];
extern const char sluice_redis__script_set_sha[41];
extern const char sluice_redis__script_set[];
extern const char sluice_redis__script_refund_if_sha[41];
extern const char sluice_redis__script_refund_if[];
extern const char sluice_redis__script_import_sha[41];
extern const char sluice_redis__script_import[];
/* The call as EVALSHA of the script for its shape (one limit, several,
 * several keys, a refund). */
void sluice_redis__script_command(const sluice_redis_t *r,
				  const sluice_redis_call_t *c,
				  sluice_redis_resp_t *o);
/* SCRIPT LOAD of every script; fn gets each reply (NULL: ignored, errors
 * then surface as NOSCRIPT on the next call). */
void sluice_redis__load_script(sluice_redis_conn_t *k,
			       sluice_redis_reply_fn *fn);
/* The script's reply (its shortfalls) -> the decision (the core's);
 * 0 or -1.  _each also writes each limit's into each[0..n) (may be
 * NULL). */
int sluice_redis__parse_script_reply(const redisReply *reply,
				     const sluice_limit_t *limits, size_t n,
				     uint64_t cost, int *allowed,
				     sluice_decision_t *d, size_t *which);
int sluice_redis__parse_script_reply_each(const redisReply *reply,
					  const sluice_limit_t *limits,
					  size_t n, uint64_t cost, int *allowed,
					  sluice_decision_t *d, size_t *which,
					  sluice_decision_t *each);
/* The same for n shortfalls el[0..n) of one key's limits. */
int sluice_redis__decide_shortfalls(const redisReply *const *el,
				    const sluice_limit_t *limits, size_t n,
				    uint64_t cost, int *allowed,
				    sluice_decision_t *d, size_t *which,
				    sluice_decision_t *each);
/* One bucket's shortfall el -> the state the core decides it from
 * (its shortfall at time 0); 0 or -1 for a reply that is no shortfall. */
int sluice_redis__shortfall_state(const redisReply *e, const sluice_limit_t *l,
				  sluice_state_t *state);
/* A decision's times in whole ms, rounded up, as the module answers. */
void sluice_redis__whole_ms(sluice_decision_t *d);
/* quota.c: calls whose limits include a calendar quota (quota.lua, held
 * by script.c with the other scripts) */
extern const char sluice_redis__script_quota[];
extern const char sluice_redis__script_quota_sha[41];
/* Added to the client's clock where it places calendar windows (tests
 * of a client whose clock is far off; 0 otherwise). */
extern int64_t sluice_redis__quota_skew_us;
/* 1 when one of limits[0..n) is a calendar quota. */
int sluice_redis__has_quota(const sluice_limit_t *limits, size_t n);
/* The call (a take, peek, refund, reset, penalty, block or set, of one
 * key or a take_many's group) as EVALSHA of quota.lua. */
void sluice_redis__quota_command(const sluice_redis_call_t *c,
				 sluice_redis_resp_t *o);
/* quota.lua's reply to call c -> the server's time and each limit's
 * state at it: 0; 1 when limit *skew's window could not be placed (the
 * client's clock is far off: nothing was written; told as an
 * EV_REFUSED event of c's node, at most once a second); -1 for a reply
 * not expected. */
int sluice_redis__quota_states(const sluice_redis_call_t *c,
			       const redisReply *reply,
			       const sluice_limit_t *limits, size_t n,
			       int64_t *now_us, sluice_state_t *states,
			       size_t *skew);
/* The refusal of a call whose quota `which` could not be placed: retry
 * in 1 s. */
void sluice_redis__quota_skewed(const sluice_limit_t *l, size_t which,
				sluice_decision_t *d);
/* As sluice_redis__parse_script_reply_each(), for quota.lua's reply. */
int sluice_redis__quota_decide(const sluice_redis_call_t *c,
			       const redisReply *reply,
			       const sluice_limit_t *limits, size_t n,
			       uint64_t cost, int *allowed,
			       sluice_decision_t *d, size_t *which,
			       sluice_decision_t *each);
/* The module's reply -> the decision; 0 or -1. */
int sluice_redis__parse_reply(const redisReply *reply, size_t nlimits,
			      int *allowed, sluice_decision_t *d,
			      size_t *which);

/* client.c's one-key call, for reserve.c: checked key, `shape`; NULL
 * when out of memory. */
sluice_redis_call_t *sluice_redis__one_call(sluice_redis_t *r,
					    const sluice_redis_shape_t *shape,
					    const void *key, size_t keylen,
					    const sluice_limit_t *limits,
					    size_t nlimits, uint64_t cost);

/* many.c: calls over several keys (sluice_redis_take_many()) */
typedef struct sluice_redis_mkey_s {
	const char *name; /* the full Redis key */
	size_t len;
	uint64_t cost; /* the costs of every item charging it, summed */
	size_t item;   /* the last of the take's items charging it */
} sluice_redis_mkey_t;
/* A take over items[0..n) (n >= 2, already checked), in groups. */
int sluice_redis__take_many(sluice_redis_t *r, sluice_take_item_t *items,
			    size_t n, sluice_redis_many_cb cb, void *arg);

/* module_path.c */
void sluice_redis__detect_module(sluice_redis_conn_t *k);
/* The call as SLUICE.TAKE (one limit) or SLUICE.TAKEMULTI. */
void sluice_redis__module_command(const sluice_redis_call_t *c,
				  sluice_redis_resp_t *o);
/* calls[0..n) (one key and one limit each) as one command for a server
 * that can `batch` (SLUICE_REDIS_BATCH_MANY or _EACH): SLUICE.TAKEEACH
 * when they share their limit and cost and the server has it, else
 * SLUICE.TAKEMANY; the one chosen. */
int sluice_redis__module_batch_command(sluice_redis_call_t *const *calls,
				       size_t n, int batch,
				       sluice_redis_resp_t *o);

/* reply.c */
/* A RESP reader whose replies are bounded (SLUICE_REDIS_REPLY_MAX_*) and
 * whose error and status texts are redacted; NULL when out of memory. */
redisReader *sluice_redis__reader_new(void);
void sluice_redis__reader_free(redisReader *rd);
/* The next whole reply fed so far (*reply NULL: none yet); 0, or -1 with
 * the reason in err when the input is not RESP or crosses a bound. */
int sluice_redis__reader_get(redisReader *rd, redisReply **reply, char *err,
			     size_t errlen);
/* Cuts what follows AUTH or HELLO, or "args beginning with:", in a
 * server's text s[0..len) (with SLUICE_REDIS_REDACT_ROOM bytes to spare
 * after it) and marks it "(redacted)"; the new length. */
size_t sluice_redis__redact(char *s, size_t len);

/* url.c */
int sluice_redis__parse_url(const char *text, sluice_redis_url_t *u, char *err,
			    size_t errlen);
void sluice_redis__url_free(sluice_redis_url_t *u);

#endif /* SLUICE_REDIS_INT_H */
