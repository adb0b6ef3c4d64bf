/*
 * carry.c -- SLUICE.CARRY: a key's usage carried to a changed limit, for
 * clients of the module that name their buckets themselves.
 *
 *   SLUICE.CARRY key capacity rate from_key from_capacity from_rate
 *                [from_key from_capacity from_rate ...]
 *
 * key is the bucket under the limit now (capacity, rate), each from_key a
 * bucket of the same client under a limit it had, the most recent first.
 * When key holds no state (none, or a full bucket), the first from_key
 * that does is carried into it with sluice_carry() -- what was used stays
 * used, in the new limit's terms, never more than its capacity -- and
 * written as a take writes a state; every from_key is deleted, carried or
 * not, so usage counts once.  Replies 1 when a usage was carried, else 0.
 * The same rule and the same state as the Redis client's carry.lua, which
 * the client sends whether the module is loaded or not (a unit test holds
 * the script to sluice_carry()); the stored value is unchanged.
 */
#include "redis_module/module.h"

#define CARRY_USAGE                                                            \
	"SLUICE.CARRY key capacity rate from_key from_capacity from_rate "     \
	"[from_key from_capacity from_rate ...]"

int sluice_rm_carry(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	sluice_limit_t to, from[SLUICE_MAX_LIMITS];
	sluice_state_t state, old, carried = 0;
	RedisModuleKey *k, *fk;
	int64_t now = sluice_rm_now_us();
	int n, i, have;

	if (argc < 7 || (argc - 1) % 3 != 0 ||
	    (n = (argc - 4) / 3) > SLUICE_MAX_LIMITS - 1)
		return RedisModule_ReplyWithError(
			ctx, "ERR wrong number of arguments for 'sluice.carry' "
			     "command: expected " CARRY_USAGE
			     " (at most 15 earlier keys)");
	if (sluice_rm_parse_limit(ctx, argv[2], argv[3], &to) != 0)
		return REDISMODULE_OK;
	for (i = 0; i < n; i++)
		if (sluice_rm_parse_limit(ctx, argv[5 + 3 * i], argv[6 + 3 * i],
					  &from[i]) != 0)
			return REDISMODULE_OK;
	if (sluice_rm_open_state(ctx, argv[1], &k, &state) != 0)
		return REDISMODULE_OK;
	/* Full at now: the state is at most now * 1000 (decide.c). */
	have = state > now * 1000;
	for (i = 0; i < n; i++) {
		RedisModuleCallReply *r;

		if (sluice_rm_open_state(ctx, argv[4 + 3 * i], &fk, &old) !=
		    0) {
			sluice_rm_close_keys(&k, 1);
			return REDISMODULE_OK;
		}
		sluice_rm_close_keys(&fk, 1);
		if (!have && old > now * 1000) {
			carried = sluice_carry(&from[i], old, &to, now);
			have = 1;
		}
		/* Replicated as itself: deleting is the same on a replica. */
		r = RedisModule_Call(ctx, "DEL", "!s", argv[4 + 3 * i]);
		if (r)
			RedisModule_FreeCallReply(r);
	}
	if (carried > 0 &&
	    sluice_rm_write_state(ctx, k, argv[1], carried, NULL) != 0) {
		sluice_rm_close_keys(&k, 1);
		return REDISMODULE_OK;
	}
	sluice_rm_close_keys(&k, 1);
	return RedisModule_ReplyWithLongLong(ctx, carried > 0);
}
