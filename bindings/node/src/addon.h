/*
 * addon.h -- what the addon's files share: the Node-API helpers, the
 * policy object, the arguments every take reads, and each file's table
 * of functions for the module's exports.
 *
 *   addon.c   helpers, policies, keys, the module's exports
 *   config.c  a Limiter's store options into a store config
 *   local.c   the stores that answer at once (memory, shared memory)
 *   redis.c   the stores that answer from Node's loop (Redis)
 *   wait.c    reservations on Redis, and every store's conditional
 *             refund, with their state tokens
 *
 * Every store is opened and called through the store interface
 * (src/store/store.h: sluice_backend_open_events(), then ops->take,
 * peek, reset, refund, penalize, block, reserve, set), as `sluice serve`
 * calls it: the
 * addon names no store's own functions, so a store added there is a
 * store the addon can open.
 */
#ifndef SLUICE_ADDON_H
#define SLUICE_ADDON_H

#define NAPI_VERSION 8
#include <node_api.h>

#include "sluice.h"
#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

#define DECISION_FIELDS 5

/* Returns NULL with an exception pending when a Node-API call fails. */
#define CHECK(env, call)                                                       \
	do {                                                                   \
		if ((call) != napi_ok)                                         \
			return addon_throw_last(env);                          \
	} while (0)

/* Throws the last Node-API error unless an exception is pending; NULL. */
napi_value addon_throw_last(napi_env env);

/* The pointer inside an external, or NULL. */
void *addon_external(napi_env env, napi_value v);

/* A decision as the numbers JS reads (see the layout in addon.c). */
void addon_decision(const sluice_decision_t *d, size_t which,
		    double out[DECISION_FIELDS]);

/* The limits a key's bucket may hold usage under, for one limit of a
 * policy that replaced one of the same name (carry.c). */
#define ADDON_CARRY_MAX 4
typedef struct addon_carry_s {
	sluice_limit_t from[ADDON_CARRY_MAX];
	int64_t until_us[ADDON_CARRY_MAX];
	size_t n;
} addon_carry_t;

typedef struct policy_s {
	char name[SLUICE_KEY_NAME_MAX + 1];
	size_t nlimits;
	sluice_limit_t limits[SLUICE_MAX_LIMITS];
	addon_carry_t carry[SLUICE_MAX_LIMITS];
	int carries; /* any carry[i].n */
} policy_t;

/* A new policy learns the limits of the last one of its name (its
 * earlier limits, carry[]), and becomes the last one (carry.c). */
void addon_policy_learn(policy_t *p, int64_t now_us);

/* Before a call on key under p: the store's carry verb, when p replaced
 * a policy of its name with other limits. */
void addon_carry(sluice_backend_t *be, const policy_t *p, const void *key,
		 size_t keylen, int64_t now_us);

/*
 * The arguments every store call starts with: (store, key, policy, n, ...)
 * with n a whole number (a cost, or ms).  Returns the store's pointer with
 * the key built (sluice_key_make(), as sluice serve builds it) and n
 * read, or NULL with an exception pending.
 */
void *addon_take_args(napi_env env, napi_value *argv, policy_t **p,
		      char key[SLUICE_KEY_MAX], size_t *keylen, uint64_t *n);

/* What an admin call does (the op argument of memoryAdmin & co.). */
enum { ADMIN_RESET, ADMIN_REFUND, ADMIN_PENALIZE, ADMIN_BLOCK, ADMIN_SET };

/* The store's verb of admin call `op` on the item (its cost the n of
 * refund and penalize, the ms of block, the tokens set leaves), at now_us
 * (0 on a store that decides on its own clock): the verb's return, or
 * SLUICE_EINVAL for an op that names none (cb not called). */
int addon_admin(sluice_backend_t *be, sluice_take_item_t *it, int32_t op,
		int64_t now_us, sluice_store_cb cb, void *arg);

/* A reservation's answer as the DECISION_FIELDS numbers JS reads (in the
 * place of a decision's): wait_us (-1: never), now_us (the store's
 * clock), remaining, then reset_ms when reserved, else retry_after_ms
 * (until a reservation with the same max_wait passes; -1 never), and
 * limit. */
void addon_reservation(const sluice_reservation_t *r,
		       double out[DECISION_FIELDS]);

/* A reservation's state token: the states it left (its
 * sluice_reservation_t.states, one per limit of the policy) in decimal,
 * joined by '.' (sluice_states_format()), as JS holds it (a string: a
 * state passes 2^53). */
#define ADDON_TOKEN_MAX SLUICE_STATES_TEXT_MAX
void addon_token_format(const sluice_state_t *states, size_t n,
			char out[ADDON_TOKEN_MAX]);
/* The token in v (a string of n states) into states[0..n); NULL with a
 * TypeError pending when it is not one. */
void *addon_token_parse(napi_env env, napi_value v, size_t n,
			sluice_state_t *states);

/* redisNew()'s options object into *cfg (its strings the caller's, freed
 * by addon_config_free()); -1 on a Node-API failure, with what was
 * copied in *cfg. */
int addon_redis_config(napi_env env, napi_value opts,
		       sluice_store_config_t *cfg);
void addon_config_free(sluice_store_config_t *cfg);

typedef struct addon_fn_s {
	const char *name;
	napi_callback fn;
} addon_fn_t;

extern const addon_fn_t addon_local_fns[];
extern const size_t addon_local_nfns;
extern const addon_fn_t addon_redis_fns[];
extern const size_t addon_redis_nfns;
extern const addon_fn_t addon_wait_fns[];
extern const size_t addon_wait_nfns;

#endif
