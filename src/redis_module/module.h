/*
 * module.h -- what the files of sluice-redis.so share: the clock and the
 * command implementations registered by RedisModule_OnLoad().
 */
#ifndef SLUICE_REDIS_MODULE_H
#define SLUICE_REDIS_MODULE_H

#include <stdint.h>

#include "redis_module/redismodule_api.h"

/* The time a decision uses: the server's clock in microseconds since the
 * UNIX epoch, or the test clock when it is set (see SLUICE.TESTCLOCK). */
int64_t sluice_rm_now_us(void);

/* 1 when the argument is `word`, in any letter case (COST, cost). */
int sluice_rm_arg_is(RedisModuleString *arg, const char *word);

/* SLUICE.TAKE key capacity rate [COST n] */
int sluice_rm_take(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* SLUICE.TAKEMULTI numkeys key [key ...] capacity rate [...] [COST n] */
int sluice_rm_takemulti(RedisModuleCtx *ctx, RedisModuleString **argv,
			int argc);

#endif /* SLUICE_REDIS_MODULE_H */
