/*
 * script.c -- the Lua script path: one EVALSHA per decision, the script
 * loaded once per connection (SCRIPT LOAD is the first command of every
 * handshake, so decisions can be pipelined right behind it).  A NOSCRIPT
 * reply (Redis restarted, failed over, or SCRIPT FLUSH) is recovered on the
 * spot: SCRIPT LOAD, then the same call again on the same connection,
 * which Redis answers in order.  The caller never sees it.
 */
#include "store/redis/redis_int.h"

#include "script_lua.h" /* generated from script.lua by CMake */

#include <stdlib.h>
#include <string.h>

const char sluice_redis__script[] = SLUICE_SCRIPT_LUA;

static void on_loaded(redisAsyncContext *ac, void *reply, void *priv)
{
	/* Errors surface on the EVALSHA that follows (NOSCRIPT). */
	(void)ac;
	(void)reply;
	(void)priv;
}

void sluice_redis__load_script(sluice_redis_conn_t *k)
{
	redisAsyncCommand(k->ac, on_loaded, NULL, "SCRIPT LOAD %b",
			  sluice_redis__script, strlen(sluice_redis__script));
}

/* EVALSHA sha n key... cost (interval per capacity)... */
int sluice_redis__send_script(sluice_redis_conn_t *k, sluice_redis_call_t *c)
{
	sluice_redis_args_t a;
	size_t i;
	int rc;

	a.argc = 0;
	sluice_redis__arg(&a, "EVALSHA", 7);
	sluice_redis__arg(&a, k->r->sha, 40);
	sluice_redis__arg_u64(&a, c->nlimits);
	if (sluice_redis__arg_keys(&a, c) < 0)
		return -1;
	sluice_redis__arg_u64(&a, c->cost);
	for (i = 0; i < c->nlimits; i++) {
		sluice_redis__arg_u64(&a, c->limits[i].rate.interval);
		sluice_redis__arg_u64(&a, c->limits[i].rate.per);
		sluice_redis__arg_u64(&a, c->limits[i].capacity);
	}
	rc = sluice_redis__issue(k, c, &a);
	free(a.keys);
	return rc;
}

/*
 * Both paths answer [allowed, limit, remaining, retry_after_ms (-1: never),
 * reset_ms] plus `which` for several limits.  Times are whole ms (rounded
 * up); the decision carries them as microseconds (ms * 1000).
 */
int sluice_redis__parse_reply(const redisReply *reply, size_t nlimits,
			      int *allowed, sluice_decision_t *d, size_t *which)
{
	long long v[6];
	size_t i, want = 5;

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < want)
		return -1;
	for (i = 0; i < reply->elements && i < 6; i++) {
		if (reply->element[i]->type != REDIS_REPLY_INTEGER)
			return -1;
		v[i] = reply->element[i]->integer;
	}
	*which = reply->elements >= 6 ? (size_t)v[5] : 0;
	if (*which >= nlimits || v[1] < 0 || v[2] < 0 || v[4] < 0)
		return -1;
	*allowed = v[0] != 0;
	d->allowed = *allowed;
	d->limit = (uint64_t)v[1];
	d->remaining = (uint64_t)v[2];
	d->never = v[3] < 0;
	d->retry_after_us = v[3] < 0 ? UINT64_MAX : (uint64_t)v[3] * 1000;
	d->reset_after_us = (uint64_t)v[4] * 1000;
	return 0;
}
