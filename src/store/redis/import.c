/*
 * import.c -- sluice_redis_import(): a bucket started with the usage
 * envoyproxy/ratelimit counted for the same descriptor in the same Redis
 * (envoy.import_counters, docs/ENVOY.md's cutover).
 *
 * One import.lua call over three keys: the bucket's state, the foreign
 * counter, and the bucket's import mark.  Redis runs it atomically, so
 * the check "the bucket holds no state and was not imported in this
 * window" and the write cannot be split by a take of the same bucket.
 * The three keys are in different slots (the counter's name is
 * envoyproxy's, with no hash tag): a cluster client refuses the call,
 * and the config refuses import_counters with a cluster store.
 */
#include "store/redis/redis_int.h"
#include "util/invariant.h"

#include <stdlib.h>
#include <string.h>

/* Appended to the bucket's name: its import mark. */
#define MARK	 "#import"
#define MARK_LEN (sizeof(MARK) - 1)

/* The reply: the tokens the bucket was started with used (0: none). */
static int import_parse(sluice_redis_call_t *c, const redisReply *reply,
			sluice_redis_outcome_t *out)
{
	(void)c;
	if (reply->type != REDIS_REPLY_INTEGER || reply->integer < 0)
		return -1;
	out->allowed = reply->integer > 0;
	return 0;
}

static void import_done(sluice_redis_call_t *c, int status,
			const sluice_redis_outcome_t *out)
{
	c->item_cb(c->arg, status, out ? out->allowed : 0);
}

static const sluice_redis_shape_t import_shape = {import_parse, import_done};

int sluice_redis_import(sluice_redis_t *r, const void *key, size_t keylen,
			const sluice_limit_t *limit, const char *counter,
			size_t counterlen, uint64_t window_ms,
			sluice_redis_many_cb cb, void *arg)
{
	size_t plen = strlen(r->prefix), blen, room;
	sluice_redis_call_t *c;
	sluice_redis_mkey_t *mk;
	char *name;
	int rc;

	if (!cb || r->closing || !counter || !counterlen || window_ms == 0)
		return SLUICE_EINVAL;
	/* Three slots: a cluster cannot run the script. */
	if (r->cluster)
		return SLUICE_EINVAL;
	if ((rc = sluice_redis__check_item(r, key, keylen, limit, 1)) < 0)
		return rc;
	if (counterlen > 65535)
		return SLUICE_EINVAL;
	/* The names: the bucket's, the counter's, the bucket's again with
	 * MARK (each bucket name at most room bytes). */
	room = plen + keylen + 3 + SLUICE_LIMIT_ID_MAX;
	c = calloc(1, sizeof(*c) + sizeof(*limit) + 3 * sizeof(*mk) + 2 * room +
			      MARK_LEN + counterlen);
	if (!c)
		return SLUICE_ENOMEM;
	c->r = r;
	c->shape = &import_shape;
	c->limits[0] = *limit;
	c->nlimits = 1;
	c->ncaller = 1;
	mk = (sluice_redis_mkey_t *)(c->limits + 1);
	name = (char *)(mk + 3);
	/* The bucket's name, as sluice_redis_take() gives it:
	 * "<prefix>{<key>}:<limit id>". */
	memcpy(name, r->prefix, plen);
	blen = plen;
	name[blen++] = '{';
	if (keylen)
		memcpy(name + blen, key, keylen);
	blen += keylen;
	name[blen++] = '}';
	name[blen++] = ':';
	blen += sluice_limit_id(limit, name + blen);
	SLUICE_ASSERT(blen <= room);
	mk[0].name = name;
	mk[0].len = blen;
	mk[0].cost = window_ms;
	mk[1].name = name + blen;
	mk[1].len = counterlen;
	memcpy(name + blen, counter, counterlen);
	mk[2].name = name + blen + counterlen;
	mk[2].len = blen + MARK_LEN;
	memcpy(name + blen + counterlen, name, blen);
	memcpy(name + 2 * blen + counterlen, MARK, MARK_LEN);
	c->mk = mk;
	c->adjust = SLUICE_REDIS_ADJUST_IMPORT;
	c->item_cb = cb;
	c->arg = arg;
	sluice_redis__start(c);
	return 0;
}
