/*
 * sluice.h -- distributed token-bucket rate limiting.
 *
 * The library has three layers:
 *
 *   1. Policies: a limit is a capacity (the burst) and a refill rate, parsed
 *      from text such as "2/s", "50/min", "0.5/s" or "1/3s" and kept as an
 *      exact rational (no floating point anywhere).
 *
 *   2. The decision function sluice_eval(): pure, no I/O, no allocation, the
 *      caller passes the time.  It is GCRA (the "theoretical arrival time"
 *      form of the token bucket): the whole state of a bucket is one 64-bit
 *      integer, a full bucket needs no state at all, and a state expires
 *      exactly when its bucket becomes full again.  Every store (memory,
 *      Redis script, Redis module) keeps this same integer, so they can serve
 *      the same keys.
 *
 *   3. Stores: the embedded memory store (sluice_memstore_*) and the
 *      shared-memory store for every process of a host (sluice_shmstore_*)
 *      here; the Redis store has its own header.
 *
 * Conventions (every function keeps them; tests/unit/test_api_contract.c
 * checks each one's documented failures):
 *
 *   Names.  Every exported name starts with sluice_, every type is
 *   sluice_*_t.
 *
 *   Results.  A function that can fail returns 0 on success and a negative
 *   SLUICE_E* code on failure (sluice_strerror() says it in words).  One
 *   that takes `char *err, size_t errlen` also writes a one-line message
 *   there when it fails (err may be NULL; the message is cut to errlen and
 *   never holds a password).  The exceptions, each said at the function:
 *     - decisions return 1 when allowed, 0 when rejected, or a negative
 *       code: the take, take-many, peek and reserve of the local stores
 *       (sluice_memstore_take(), sluice_shmstore_peek(),
 *       sluice_memstore_reserve(), ...), and sluice_eval_all() and
 *       sluice_reserve_all() (1 or 0: they cannot fail);
 *       sluice_memstore_take_each() returns how many items were allowed,
 *       or a negative code;
 *     - the local stores' carry (sluice_memstore_carry(),
 *       sluice_shmstore_carry()) returns 1 when it carried a usage, 0
 *       when not, or a negative code;
 *     - predicates return 1 or 0: sluice_limit_valid(),
 *       sluice_limit_same(), sluice_decision_merge(),
 *       sluice_redis_healthy();
 *     - functions that write text return its length (sluice_rate_format(),
 *       sluice_limit_id(), sluice_key_make()) or the text itself
 *       (sluice_strerror(), sluice_redis_url_mask(),
 *       sluice_redis_event_name(): never NULL);
 *     - functions that cannot fail return their value (the pure bucket
 *       functions: sluice_refund(), sluice_penalize(), sluice_block(),
 *       sluice_debt_max_units(), sluice_state_expiry_us(), sluice_carry(),
 *       sluice_carry_units(); sluice_now_us())
 *       or nothing (sluice_eval(), the _free, _close and _stats
 *       functions).
 *
 *   Constructors.  Every store is made by one shape:
 *       int sluice_X_open(sluice_X_t **out, <arguments>, char *err,
 *                         size_t errlen);
 *   (sluice_memstore_open(), sluice_shmstore_open(), sluice_redis_open()):
 *   0 with *out set, or a negative code with *out set to NULL and a message
 *   in err (a NULL out is refused with SLUICE_EINVAL).  Its destructor
 *   (_free, _close) accepts NULL.
 *
 *   Arguments.  A pointer argument must not be NULL unless its comment
 *   says it may be (err may always be NULL).  A store refuses with
 *   SLUICE_EINVAL a limit that is not valid (sluice_limit_valid()), no
 *   limits or more than SLUICE_MAX_LIMITS, and a NULL key of non-zero
 *   length; the pure functions (sluice_eval(), sluice_refund(),
 *   sluice_rate_format(), sluice_limit_id(), ...) do not check, and take
 *   rates and limits as sluice_rate_parse() and sluice_limit_init() make
 *   them.
 *
 *   Ownership.  Every pointer argument is borrowed for the call only: the
 *   function copies what it keeps (keys, limits, options, paths, TLS
 *   settings) before it returns, and the caller may free or reuse it as
 *   soon as the call returns.  The exceptions: sluice_redis_take_many()'s
 *   items are borrowed until its callback (which writes their outputs),
 *   and the uv_loop_t given to sluice_redis_open() must outlive the
 *   client.  A store is the caller's from its _open to its _free or
 *   _close.  Callback arguments (`arg`, `event_arg`) are handed back as
 *   given, never read.  What the library hands to a callback (a decision,
 *   an event, a report) is valid during the callback only; the text the
 *   library returns is static (or the caller's own buffer).  The library
 *   reads no environment variable.
 *
 * Time is measured in microseconds (int64, e.g. since the Unix epoch).  A
 * rate's emission interval (time per token) is kept as interval/per
 * microseconds with per <= SLUICE_RATE_PER_MAX, so all bucket arithmetic is
 * exact integer arithmetic, and every relative quantity stays below 2^53 so
 * that the Redis Lua script (whose numbers are doubles) computes exactly the
 * same decisions.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version; the shared library's SONAME carries its major
 * number (libsluice.so.0).  The build reads it from here. */
#define SLUICE_VERSION "0.1.0"

/* Marks the library's API: the library is built with hidden visibility, so
 * only these names are exported from libsluice.so (and libsluice-redis.so). */
#if defined(SLUICE_BUILDING) && defined(__GNUC__)
#define SLUICE_API __attribute__((visibility("default")))
#else
#define SLUICE_API
#endif

/* ---------------------------------------------------------------- errors */

#define SLUICE_OK	 0
#define SLUICE_EINVAL	 (-1) /* malformed argument or policy text */
#define SLUICE_ERANGE	 (-2) /* a number is out of the supported range */
#define SLUICE_ENOMEM	 (-3) /* allocation failed */
#define SLUICE_ESTORE	 (-4) /* the store failed (connection, protocol) */
#define SLUICE_ETIMEDOUT (-5) /* the store did not answer in time */

/* A short static description of a SLUICE_E* code. */
SLUICE_API const char *sluice_strerror(int err);

/* ----------------------------------------------------------------- rates */

/* The largest denominator of an emission interval.  The fractional part of
 * a state is kept in 1/per microsecond steps in the last three decimal digits
 * of the state (see sluice_state_t), so per must stay <= 1000. */
#define SLUICE_RATE_PER_MAX 1000u

/* The longest time an empty bucket may take to refill: 2^48 us, about 8.9
 * years. */
#define SLUICE_REFILL_MAX_US (UINT64_C(1) << 48)

/* The latest time the state encoding can hold (about the year 2242): a
 * state (now + up to twice SLUICE_REFILL_MAX_US) * 1000 fits in int64.
 * sluice_eval() clamps `now` into [0, SLUICE_TIME_MAX_US]. */
#define SLUICE_TIME_MAX_US INT64_C(8600000000000000)

/* Relative bucket quantities (in 1/per microsecond units) stay below this
 * bound, which keeps them exact in an IEEE double (Redis Lua). */
#define SLUICE_UNITS_MAX (UINT64_C(1) << 52)

/*
 * A refill rate as an exact emission interval: one token every
 * interval/per microseconds, reduced to lowest terms.
 * "2/s" is {500000, 1}; "7/day" is {86400000000, 7}; "3/s" is {1000000, 3}.
 */
typedef struct sluice_rate_s {
	uint64_t interval; /* numerator, >= 1 */
	uint32_t per;	   /* denominator, 1 .. SLUICE_RATE_PER_MAX */
} sluice_rate_t;

/*
 * Parses a rate: NUMBER ["/" [MULTIPLIER] UNIT].  NUMBER is a positive
 * decimal ("2", "0.5"); MULTIPLIER a positive integer ("1/3s" is one token
 * every three seconds); UNIT one of ms, s, sec, second, m, min, minute, h,
 * hour, d, day (plural forms too).  A bare NUMBER means per second.
 * Returns 0, or SLUICE_EINVAL / SLUICE_ERANGE with a message in err (which
 * may be NULL) saying what was expected.
 */
SLUICE_API int sluice_rate_parse(const char *text, sluice_rate_t *out,
				 char *err, size_t errlen);

/* Writes the rate in canonical text ("2/s", "7/day") and returns the length
 * snprintf() would have written. */
SLUICE_API int sluice_rate_format(const sluice_rate_t *rate, char *buf,
				  size_t len);

/* ---------------------------------------------------------------- limits */

/*
 * What makes a limit a calendar quota (sluice_quota.h) rather than a token
 * bucket: per == 0 (every field 0, as a zeroed limit has) is a token
 * bucket.  Eight bytes with no padding, so limits compare with memcmp.
 */
typedef struct sluice_window_s {
	uint8_t per;	   /* 0: token bucket; else SLUICE_PER_* */
	uint8_t align;	   /* SLUICE_ALIGN_CALENDAR or _FIRST_USE */
	uint16_t zone;	   /* 0: UTC; else sluice_zone_load()'s id */
	uint32_t reserved; /* 0 */
} sluice_window_t;

/* One capacity + rate pair, with the derived constants the math needs; or
 * a calendar quota (window.per != 0: capacity is the quota, rate is
 * {1, 1} and tau the quota, see sluice_quota.h). */
typedef struct sluice_limit_s {
	uint64_t capacity;	/* burst, >= 1 */
	sluice_rate_t rate;	/* refill, in lowest terms */
	uint64_t tau;		/* capacity * rate.interval: time from empty to
				   full, in 1/rate.per microsecond units */
	sluice_window_t window; /* all 0 for a token bucket */
} sluice_limit_t;

/*
 * Builds a limit.  Fails with SLUICE_ERANGE when capacity is 0 or when the
 * time to refill an empty bucket does not fit the exact range
 * (capacity * rate.interval must not exceed SLUICE_UNITS_MAX, and the time
 * itself must not exceed SLUICE_REFILL_MAX_US).
 */
SLUICE_API int sluice_limit_init(sluice_limit_t *limit, uint64_t capacity,
				 const sluice_rate_t *rate, char *err,
				 size_t errlen);

/* Parses a capacity ("100") and a rate ("2/s") into a limit. */
SLUICE_API int sluice_limit_parse(sluice_limit_t *limit, const char *capacity,
				  const char *rate, char *err, size_t errlen);

/*
 * The most limits one call may charge at once (a rule's or tier's limits;
 * every store and `sluice serve` use this bound).
 */
#define SLUICE_MAX_LIMITS 16

/*
 * A limit's identity, which names its bucket in every store:
 * "<capacity>@<rate>" with the rate's canonical text (sluice_rate_format()
 * of the rate in lowest terms): "100@2/s", "1000@1000/h", "5@1/259200s",
 * "10@3/7000000us".  One spelling per limit, and different limits never
 * share one.  A key's state for a limit is found by key + this id, never
 * by the limit's position: switching tiers, a rule gaining or losing a
 * limit on reload, or two callers with different limits on one key never
 * read or reset each other's state.  A calendar quota's id is
 * "<quota>@<unit>", with ":<zone>" for a calendar in a zone other than UTC
 * or ":first_use" for first-use windows: "10000@month",
 * "3@day:Europe/Berlin", "100@hour:first_use" (no slash after the "@",
 * so never a bucket's id).  Writes the NUL-terminated id into buf
 * (at least SLUICE_LIMIT_ID_MAX bytes) and returns its length.
 */
#define SLUICE_LIMIT_ID_MAX 64
SLUICE_API size_t sluice_limit_id(const sluice_limit_t *limit,
				  char buf[SLUICE_LIMIT_ID_MAX]);

/* 1 when the limit is one sluice_limit_init() could have built (the stores
 * refuse others with SLUICE_EINVAL rather than divide by zero). */
SLUICE_API int sluice_limit_valid(const sluice_limit_t *limit);

/* 1 when a and b are the same limit (same capacity, same rate in any
 * terms), so they share one bucket. */
SLUICE_API int sluice_limit_same(const sluice_limit_t *a,
				 const sluice_limit_t *b);

/* ------------------------------------------------------------- decisions */

/*
 * The state of one bucket: its theoretical arrival time (TAT), encoded as
 *   whole_microseconds * 1000 + fraction
 * where fraction (< rate.per) counts 1/rate.per microsecond steps.  0, or
 * any TAT in the past, means "full".  Stores keep this value verbatim and
 * may drop it once it lies in the past (see sluice_state_expiry_us()).
 */
typedef int64_t sluice_state_t;

/* What one decision tells the caller.  Times are microseconds, rounded up
 * to the next whole microsecond (the earliest instant the statement holds). */
typedef struct sluice_decision_s {
	int allowed;		 /* 1: the cost was taken; 0: rejected */
	int never;		 /* 1: cost > capacity, can never pass */
	uint64_t limit;		 /* the capacity */
	uint64_t remaining;	 /* whole tokens left after this decision */
	uint64_t retry_after_us; /* 0 when allowed; else time until this
				    cost could pass (UINT64_MAX if never) */
	uint64_t reset_after_us; /* time until the bucket is full again */
	size_t which;		 /* the index of the limit this decision is
				    about, among the call's limits (0 for
				    sluice_eval()) */
} sluice_decision_t;

/*
 * Decides whether `cost` tokens can be taken from a bucket in `state` at
 * time `now_us`.  Pure: it writes the would-be new state to *next and the
 * answer to *d, and changes nothing else; the caller commits *next (which
 * equals state when nothing was taken).  cost 0 peeks.  A clock that steps
 * backwards never grants tokens; any elapsed time, even years, is safe.
 */
SLUICE_API void sluice_eval(const sluice_limit_t *limit, sluice_state_t state,
			    int64_t now_us, uint64_t cost, sluice_state_t *next,
			    sluice_decision_t *d);

/*
 * Several limits on one request, all-or-nothing: evaluates every limit;
 * when all allow, next[i] holds the charged states; when any rejects, every
 * next[i] equals states[i] (nothing is charged) and the decisions report the
 * state as it is.  decisions[i].which is i.  *summary (may be NULL) is the
 * most restrictive decision (sluice_decision_merge()), and summary->which
 * the index of the limit it came from.  Returns 1 if allowed, 0 if not.
 */
SLUICE_API int
sluice_eval_all(const sluice_limit_t *limits, const sluice_state_t *states,
		size_t n, int64_t now_us, uint64_t cost, sluice_state_t *next,
		sluice_decision_t *decisions, sluice_decision_t *summary);

/*
 * Folds decision b into *a so that *a is the most restrictive of the two:
 * rejected beats allowed; among rejections the longest retry_after wins;
 * among allowed ones the fewest remaining tokens wins; on a tie a stays.
 * Returns 1 when b replaced a (a->which then names b's limit).
 */
SLUICE_API int sluice_decision_merge(sluice_decision_t *a,
				     const sluice_decision_t *b);

/*
 * Gives `cost` tokens back to a bucket in `state` at `now_us` (the inverse
 * of a charge, e.g. when the upstream failed the request): returns the new
 * state, never beyond full (0 when full).  Pure, like sluice_eval().
 */
SLUICE_API sluice_state_t sluice_refund(const sluice_limit_t *limit,
					sluice_state_t state, int64_t now_us,
					uint64_t cost);

/*
 * Charges `cost` tokens to a bucket in `state` at `now_us` with no check
 * (a penalty): the bucket may go into debt, which delays the next allowed
 * request until the refill has paid it.  The debt is bounded by
 * sluice_debt_max_units() (at least tau; about 17 years of refill at most).
 * Pure, like sluice_eval().
 */
SLUICE_API sluice_state_t sluice_penalize(const sluice_limit_t *limit,
					  sluice_state_t state, int64_t now_us,
					  uint64_t cost);

/*
 * Blocks a bucket in `state` for `ms` milliseconds from `now_us`: no take
 * of one token or more passes before then, and the first one passes
 * exactly then (the bucket refills from one token's worth).  A longer
 * block or debt already there stays.  Pure, like sluice_eval().
 */
SLUICE_API sluice_state_t sluice_block(const sluice_limit_t *limit,
				       sluice_state_t state, int64_t now_us,
				       uint64_t ms);

/* The largest shortfall (in 1/rate.per microsecond units) sluice_penalize()
 * and sluice_block() leave for this limit. */
SLUICE_API uint64_t sluice_debt_max_units(const sluice_limit_t *limit);

/* The first microsecond at which `state` describes a full bucket: a store
 * may forget the state from then on.  0 for the empty state. */
SLUICE_API int64_t sluice_state_expiry_us(sluice_state_t state);

/* ----------------------------------------------------------- limit change */

/*
 * A bucket's usage carried across a change of its limit (an operator
 * lowering or raising a named limit's capacity or rate): returns the state
 * under `to` of a bucket whose state under `from` is `state` at `now_us`.
 * The rule: what was used stays used, in the new limit's terms -- the
 * tokens the bucket is short of full under `from` are short under `to`,
 * at most to's capacity (a drained bucket stays drained, whatever the
 * change) and never fewer than none; the bucket then refills at to's
 * rate.  With the same rate the shortfall is kept exactly; across a
 * change of rate the tokens used are counted whole, a token partly
 * refilled counting as used.  0 when the bucket is full.  Pure, like
 * sluice_eval(); every store carries with it (the Redis script repeats
 * it).
 */
SLUICE_API sluice_state_t sluice_carry(const sluice_limit_t *from,
				       sluice_state_t state,
				       const sluice_limit_t *to,
				       int64_t now_us);

/* sluice_carry() on a shortfall D (in from's 1/per microsecond units):
 * the shortfall under `to`, in to's units (<= to->tau). */
SLUICE_API uint64_t sluice_carry_units(const sluice_limit_t *from, uint64_t D,
				       const sluice_limit_t *to);

/* ------------------------------------------------------------------ keys */

/* Longest bucket name a key carries (longer names are cut). */
#define SLUICE_KEY_NAME_MAX 64
/* Identities longer than this many bytes are hashed in keys. */
#define SLUICE_IDENTITY_MAX 200
/* Room for any key sluice_key_make() writes, with its terminating NUL. */
#define SLUICE_KEY_MAX (SLUICE_KEY_NAME_MAX + 1 + SLUICE_IDENTITY_MAX + 1)

/*
 * The first byte of an ad-hoc key: a bucket whose limits its caller chose
 * (sluice serve's POST /v1/take without a rule keys it "\x1e<key>").  The
 * memory and shared-memory stores evict ad-hoc buckets among themselves
 * while any is left to evict, so that a flood of them, whatever rates its
 * callers pick, never empties the table of rule buckets (see
 * sluice_memstore_open()).  No rule name starts with this byte.
 */
#define SLUICE_KEY_ADHOC 0x1e

/*
 * Writes the store key of the bucket `name` for one identity into out:
 * "<name>\x1f<encoded identity>", the identity being the bytes of
 * parts[0..nparts) joined (a composite identity's parts separated by the
 * byte 0x1f, which no part may hold).  The identity is kept verbatim when
 * it is at most SLUICE_IDENTITY_MAX bytes, does not start with '~' and
 * holds no control character (a byte below 0x20, or 0x7f) other than
 * 0x1f; any other identity is replaced by "~" and the lower-case hex
 * SHA-256 of its bytes.  So keys are bounded and two distinct identities
 * never share a bucket.  sluice serve's rules, /v1/take, the admin
 * endpoints and the language bindings all build keys here, so they share
 * buckets.  Returns the key's length (NUL-terminated).
 */
SLUICE_API size_t sluice_key_make(const char *name, const void *const *parts,
				  const size_t *lens, size_t nparts,
				  char out[SLUICE_KEY_MAX]);

/* ---------------------------------------------------------- memory store */

typedef struct sluice_memstore_s sluice_memstore_t;

/* Counters a caller can read at any time (see sluice_memstore_stats()). */
typedef struct sluice_memstore_stats_s {
	uint64_t keys;		  /* resident buckets now (key + limit) */
	uint64_t max_keys;	  /* the bound on them */
	uint64_t expired;	  /* states reclaimed because they were full */
	uint64_t evicted_full;	  /* evicted to make room, losing nothing */
	uint64_t evicted_lossy;	  /* evicted while not full (the nearest to
				     full found): that bucket restarts full */
	uint64_t evicted_debt_us; /* what lossy evictions forgave: the sum of
				     their buckets' times to full */
	uint64_t recovered;	  /* shared-memory store only: shards
				     repaired after a process died holding
				     their lock; always 0 in the memory
				     store, which one process owns */
} sluice_memstore_stats_t;

/*
 * Creates an in-memory store holding at most max_keys buckets (>= 1; a key
 * with n limits has n buckets).  It is safe for concurrent callers (the
 * table is split into shards, each with its own lock).  When full it
 * evicts what loses least: a full bucket, else the one nearest to full
 * among the buckets of the new one's kind (rule or ad-hoc:
 * SLUICE_KEY_ADHOC), so a flood of fresh keys does not reset drained
 * buckets, and a flood of ad-hoc ones of any rate does not reach rule
 * buckets while an ad-hoc one is left to evict.  Returns 0 with
 * *out set, or, with a message in err, SLUICE_EINVAL (out is NULL),
 * SLUICE_ERANGE (max_keys is 0) or SLUICE_ENOMEM.
 */
SLUICE_API int sluice_memstore_open(sluice_memstore_t **out, size_t max_keys,
				    char *err, size_t errlen);
/* Frees the store and its buckets (NULL: nothing). */
SLUICE_API void sluice_memstore_free(sluice_memstore_t *store);

/*
 * Takes `cost` from every limit of `key` atomically, all-or-nothing (see
 * sluice_eval_all()).  Keys are bytes of any length.  A key's state is kept
 * per limit, identified by the limit itself (as sluice_limit_id()), not by
 * its position: the same key may come with other limits (another tier, a
 * reloaded rule) and every limit it had before keeps its state; the same
 * limit twice is one bucket, charged once.  Writes one decision per limit
 * into decisions (may be NULL) and the most restrictive one into *summary
 * (may be NULL; summary->which is its limit's index).  Returns 1 if
 * allowed, 0 if rejected, or SLUICE_EINVAL when nlimits is 0 or above
 * SLUICE_MAX_LIMITS or a limit is not valid (sluice_limit_valid()).
 */
SLUICE_API int sluice_memstore_take(sluice_memstore_t *store, const void *key,
				    size_t keylen, const sluice_limit_t *limits,
				    size_t nlimits, uint64_t cost,
				    int64_t now_us,
				    sluice_decision_t *decisions,
				    sluice_decision_t *summary);

/*
 * One key of a take over several keys: the caller fills the inputs; the
 * take fills the outputs.
 */
typedef struct sluice_take_item_s {
	const void *key; /* bytes of any length */
	size_t keylen;
	const sluice_limit_t *limits;
	size_t nlimits; /* 1 .. SLUICE_MAX_LIMITS */
	uint64_t cost;
	/* outputs */
	int allowed;		   /* this key's limits alone would pass */
	sluice_decision_t summary; /* its most restrictive decision;
				      summary.which is that limit's index */
} sluice_take_item_t;

/*
 * Takes each item's cost from every limit of its key, all-or-nothing
 * across all of them, atomically with respect to every other take on the
 * same store from any thread: either every item is charged or none is.
 * Each item's outputs say what its own limits decided (an item that would
 * pass reports allowed = 1 even when another item rejected the take, and
 * then was not charged).  A bucket (a key and a limit, as in
 * sluice_memstore_take()) may appear in several items: they are decided in
 * order, each on the state the previous one left.  Returns
 * 1 when every item was allowed and charged, 0 when nothing was charged,
 * SLUICE_EINVAL for a malformed item (as for sluice_memstore_take()), or
 * SLUICE_ENOMEM.
 */
SLUICE_API int sluice_memstore_take_many(sluice_memstore_t *store,
					 sluice_take_item_t *items, size_t n,
					 int64_t now_us);

/*
 * Independent decisions in one call: each item is decided as
 * sluice_memstore_take() would decide it, in order (a key given twice sees
 * the first decision's state), each charged on its own; item.allowed and
 * item.summary hold its decision.  Batching lets the store fetch the
 * buckets of the next keys from memory while it decides the current one,
 * so a batch costs less per decision than single takes on a table larger
 * than the caches.  Returns how many items were allowed, or SLUICE_EINVAL
 * for a malformed item (then nothing is decided).
 */
SLUICE_API int sluice_memstore_take_each(sluice_memstore_t *store,
					 sluice_take_item_t *items, size_t n,
					 int64_t now_us);

/*
 * Makes every bucket of `key` under limits[0..nlimits) full (forgets
 * their states).  Returns 0, or SLUICE_EINVAL as sluice_memstore_take().
 */
SLUICE_API int sluice_memstore_reset(sluice_memstore_t *store, const void *key,
				     size_t keylen,
				     const sluice_limit_t *limits,
				     size_t nlimits);

/*
 * Gives `cost` tokens back to every bucket of `key` under
 * limits[0..nlimits) (sluice_refund()), atomically with takes on the key.
 * Returns 0, or SLUICE_EINVAL as sluice_memstore_take().
 */
SLUICE_API int sluice_memstore_refund(sluice_memstore_t *store, const void *key,
				      size_t keylen,
				      const sluice_limit_t *limits,
				      size_t nlimits, uint64_t cost,
				      int64_t now_us);

/*
 * The decision a take of `cost` would get now, charging nothing (a take
 * with cost 0 always passes; this says whether cost would).  Returns 1 or
 * 0 as the take would, or SLUICE_EINVAL as sluice_memstore_take().
 */
SLUICE_API int sluice_memstore_peek(sluice_memstore_t *store, const void *key,
				    size_t keylen, const sluice_limit_t *limits,
				    size_t nlimits, uint64_t cost,
				    int64_t now_us,
				    sluice_decision_t *decisions,
				    sluice_decision_t *summary);

/*
 * Charges `cost` to every bucket of `key` under limits[0..nlimits) with no
 * check (sluice_penalize()): a debt that delays the next allowed take.
 * Returns 0, or SLUICE_EINVAL as sluice_memstore_take().
 */
SLUICE_API int sluice_memstore_penalize(sluice_memstore_t *store,
					const void *key, size_t keylen,
					const sluice_limit_t *limits,
					size_t nlimits, uint64_t cost,
					int64_t now_us);

/*
 * Lets no take of `key` under limits[0..nlimits) pass for `ms`
 * milliseconds (sluice_block()).  Returns 0, or SLUICE_EINVAL as
 * sluice_memstore_take().
 */
SLUICE_API int sluice_memstore_block(sluice_memstore_t *store, const void *key,
				     size_t keylen,
				     const sluice_limit_t *limits,
				     size_t nlimits, uint64_t ms,
				     int64_t now_us);

/*
 * Carries the usage of `key` to the limit `to` from the limits it had
 * before (from[0..nfrom), the most recent first, at most
 * SLUICE_MAX_LIMITS): when the bucket under `to` holds no state (it is
 * full), the first bucket under from[] that does is carried into it with
 * sluice_carry() (what was used stays used, in to's terms).  Every bucket
 * under from[] is then forgotten, carried or not, so usage is counted
 * once and a later change back to one of them finds nothing stale.  A
 * host calls it before a take when the limit changed (a reload); a
 * limit equal to `to` among from[] is skipped.  Returns 1 when a usage
 * was carried, 0 when not, or SLUICE_EINVAL (a limit not valid, nfrom
 * above SLUICE_MAX_LIMITS).
 */
SLUICE_API int sluice_memstore_carry(sluice_memstore_t *store, const void *key,
				     size_t keylen, const sluice_limit_t *to,
				     const sluice_limit_t *from, size_t nfrom,
				     int64_t now_us);

/*
 * Reserves `cost` on every bucket of `key` under limits[0..nlimits)
 * (sluice_reserve_all()), atomically with every take of the key: charged
 * now, into debt if need be, with *wait_us (may be NULL) the time from
 * now_us until the request's turn, and *summary (may be NULL) the
 * reservation's decision.  Returns 1 when reserved, 0 when refused
 * (nothing charged: the turn is later than max_wait_us), or SLUICE_EINVAL
 * as sluice_memstore_take().
 */
SLUICE_API int sluice_memstore_reserve(sluice_memstore_t *store,
				       const void *key, size_t keylen,
				       const sluice_limit_t *limits,
				       size_t nlimits, uint64_t cost,
				       uint64_t max_wait_us, int64_t now_us,
				       sluice_decision_t *summary,
				       uint64_t *wait_us);

/*
 * Sets every bucket of `key` under limits[0..nlimits) to hold `remaining`
 * whole tokens now (sluice_set_remaining(); the capacity or more: full),
 * whatever it held, atomically with takes on the key.  Returns 0, or
 * SLUICE_EINVAL as sluice_memstore_take().
 */
SLUICE_API int sluice_memstore_set(sluice_memstore_t *store, const void *key,
				   size_t keylen, const sluice_limit_t *limits,
				   size_t nlimits, uint64_t remaining,
				   int64_t now_us);

/* Copies the store's counters. */
SLUICE_API void sluice_memstore_stats(sluice_memstore_t *store,
				      sluice_memstore_stats_t *out);

/* ---------------------------------------------------- shared-memory store */

/*
 * The shared-memory store: the memory store's table in a file on a tmpfs
 * (/dev/shm/NAME), shared by every process and thread of a host that opens
 * it.  They all charge the same buckets, exactly, and a process that
 * restarts finds every bucket as it was.  Decisions, bounds, eviction and
 * expiry are the memory store's.  A process killed at any instruction, even
 * holding a shard's lock, leaves no one blocked and no bucket corrupted:
 * the locks are robust, and the next process to take one repairs that
 * shard's table.  (A process killed in the middle of a take over several
 * limits may leave that take charged on some of them only.)
 */
typedef struct sluice_shmstore_s sluice_shmstore_t;

/*
 * Opens the store in the file at path, creating it (mode 0600, sized for
 * max_keys buckets, about 32 to 64 bytes each, all reserved at creation)
 * if it does not exist.  The file holds a magic, a layout version, its
 * parameters, which key hash it uses and its secret keys (random at
 * creation: clients cannot predict which keys share a slot).  Keys of up
 * to 16 bytes are hashed with AES-128 when the creating process has
 * AES-NI, else with SipHash-1-3-128, longer keys with SipHash; a process
 * that cannot compute the file's hash refuses the file (SLUICE_ESTORE,
 * the message says why) rather than hash another way.  Whoever may write the
 * file may rewrite any bucket, so it is refused (the message names its owner)
 * unless it is a regular file (not a symbolic link) owned by this
 * process's user or root and writable by no one else, in a directory
 * others cannot swap it in (owned by this user or root; writable by
 * others only with the sticky bit, as /dev/shm).  A file of another layout
 * version, made for another max_keys, of the wrong size, with a damaged
 * shard (counters, lock type, entries: shards a dead process left half
 * updated are repaired first) or not a store at all is refused, never
 * reinterpreted.
 * Returns 0 with *store set, or SLUICE_EINVAL / SLUICE_ERANGE (bad
 * arguments), SLUICE_ENOMEM or SLUICE_ESTORE (the file: owner, permission,
 * space, layout) with a message naming the path in err (may be NULL).
 *
 * The file's content is never trusted: a file damaged or shrunk while
 * open makes the calls below fail with SLUICE_ESTORE (a SIGBUS on the
 * mapping is caught by a handler installed at the first open, which
 * passes any other SIGBUS on), never crash, and a shard's lock held past
 * 10 s fails the call rather than hanging it.
 */
SLUICE_API int sluice_shmstore_open(sluice_shmstore_t **store, const char *path,
				    size_t max_keys, char *err, size_t errlen);

/*
 * As sluice_shmstore_open(), for processes of several users sharing one
 * file through a group (a name or a number; NULL or "": none): a file
 * this call creates gets that group and mode 0660, and a file owned by
 * another user is accepted when it carries that group (its members are
 * trusted with the buckets and the hash key).  Processes of one user
 * (Node.js cluster workers, several `sluice serve`) need no group.
 */
SLUICE_API int sluice_shmstore_open_group(sluice_shmstore_t **store,
					  const char *path, size_t max_keys,
					  const char *group, char *err,
					  size_t errlen);

/* Unmaps the store (the file and its buckets stay). */
SLUICE_API void sluice_shmstore_close(sluice_shmstore_t *store);

/* As sluice_memstore_take(); SLUICE_ESTORE when the file failed (see
 * above).  So are the calls below. */
SLUICE_API int sluice_shmstore_take(sluice_shmstore_t *store, const void *key,
				    size_t keylen, const sluice_limit_t *limits,
				    size_t nlimits, uint64_t cost,
				    int64_t now_us,
				    sluice_decision_t *decisions,
				    sluice_decision_t *summary);

/* As sluice_memstore_take_many(): all-or-nothing across keys, atomic with
 * respect to every take of every process on the same file. */
SLUICE_API int sluice_shmstore_take_many(sluice_shmstore_t *store,
					 sluice_take_item_t *items, size_t n,
					 int64_t now_us);

/* As sluice_memstore_reset() and sluice_memstore_refund(), for every
 * process on the same file. */
SLUICE_API int sluice_shmstore_reset(sluice_shmstore_t *store, const void *key,
				     size_t keylen,
				     const sluice_limit_t *limits,
				     size_t nlimits);
SLUICE_API int sluice_shmstore_refund(sluice_shmstore_t *store, const void *key,
				      size_t keylen,
				      const sluice_limit_t *limits,
				      size_t nlimits, uint64_t cost,
				      int64_t now_us);

/* As sluice_memstore_peek(), sluice_memstore_penalize() and
 * sluice_memstore_block(), for every process on the same file. */
SLUICE_API int sluice_shmstore_peek(sluice_shmstore_t *store, const void *key,
				    size_t keylen, const sluice_limit_t *limits,
				    size_t nlimits, uint64_t cost,
				    int64_t now_us,
				    sluice_decision_t *decisions,
				    sluice_decision_t *summary);
SLUICE_API int sluice_shmstore_penalize(sluice_shmstore_t *store,
					const void *key, size_t keylen,
					const sluice_limit_t *limits,
					size_t nlimits, uint64_t cost,
					int64_t now_us);
SLUICE_API int sluice_shmstore_block(sluice_shmstore_t *store, const void *key,
				     size_t keylen,
				     const sluice_limit_t *limits,
				     size_t nlimits, uint64_t ms,
				     int64_t now_us);

/* As sluice_memstore_carry(), for every process on the same file. */
SLUICE_API int sluice_shmstore_carry(sluice_shmstore_t *store, const void *key,
				     size_t keylen, const sluice_limit_t *to,
				     const sluice_limit_t *from, size_t nfrom,
				     int64_t now_us);

/* As sluice_memstore_reserve() and sluice_memstore_set(), for every
 * process on the same file: reservations from every process queue on one
 * bucket. */
SLUICE_API int sluice_shmstore_reserve(sluice_shmstore_t *store,
				       const void *key, size_t keylen,
				       const sluice_limit_t *limits,
				       size_t nlimits, uint64_t cost,
				       uint64_t max_wait_us, int64_t now_us,
				       sluice_decision_t *summary,
				       uint64_t *wait_us);
SLUICE_API int sluice_shmstore_set(sluice_shmstore_t *store, const void *key,
				   size_t keylen, const sluice_limit_t *limits,
				   size_t nlimits, uint64_t remaining,
				   int64_t now_us);

/* The store's counters (over every process's takes). */
SLUICE_API void sluice_shmstore_stats(sluice_shmstore_t *store,
				      sluice_memstore_stats_t *out);

/* Checks the table's invariants (counts, bounds, every bucket reachable
 * and unique): 0, or SLUICE_ESTORE with what is wrong in err. */
SLUICE_API int sluice_shmstore_check(sluice_shmstore_t *store, char *err,
				     size_t errlen);

/* ------------------------------------------------------------------ time */

/* The wall clock (CLOCK_REALTIME) in microseconds since the Unix epoch.
 * The library reads no environment variable (the `sluice` program's test
 * clock, SLUICE_TEST_CLOCK_OFFSET_US, is the program's own). */
SLUICE_API int64_t sluice_now_us(void);

#ifdef __cplusplus
}
#endif

/* Reservations (waiting for a turn) and set: sluice_reserve.h. */
#include "sluice_reserve.h"
/* Calendar quotas (a count per day, per month, ...): sluice_quota.h. */
#include "sluice_quota.h"

#endif /* SLUICE_H */
