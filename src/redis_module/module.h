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

/* SLUICE.TESTCLOCK [us] (clock.c; registered only with TESTCLOCK). */
int sluice_rm_testclock(RedisModuleCtx *ctx, RedisModuleString **argv,
			int argc);

/* 1 when the argument is `word`, in any letter case (COST, cost): take.c. */
int sluice_rm_arg_is(RedisModuleString *arg, const char *word);

/* How states are read and written (take.c): the low-level key API with
 * int-encoded values as SET makes them, the low-level key API with embstr
 * values (public calls only), or GET and SET through RedisModule_Call. */
enum { SLUICE_RM_STORE_INT, SLUICE_RM_STORE_STRING, SLUICE_RM_STORE_CALL };
extern int sluice_rm_store;

/* 1 when the server's string objects are laid out as Redis 7.0 - 8.0 lay
 * them out (what SLUICE_RM_STORE_INT relies on). */
int sluice_rm_probe_objects(void);

/* What the commands keep for the module's life; 0 or -1 (memory). */
int sluice_rm_take_init(void);

/* SLUICE.TAKE key capacity rate [COST n] */
int sluice_rm_take(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* SLUICE.TAKEMULTI numkeys key [key ...] capacity rate [...] [COST n] */
int sluice_rm_takemulti(RedisModuleCtx *ctx, RedisModuleString **argv,
			int argc);

/* SLUICE.TAKEMANY key capacity rate cost [key capacity rate cost ...] */
int sluice_rm_takemany(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* SLUICE.TAKEEACH capacity rate cost key [key ...] */
int sluice_rm_takeeach(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

#endif /* SLUICE_REDIS_MODULE_H */
