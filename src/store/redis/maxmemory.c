/*
 * maxmemory.c -- can the server evict sluice's buckets?
 *
 * A bucket evicted by Redis is a bucket full again: under maxmemory with
 * an eviction policy, a flood of keys (anyone's) can give a drained
 * client its whole burst back, and nothing else would say so.  Every key
 * sluice writes has a TTL (its time to full), so the volatile-* policies
 * (volatile-lru, -lfu, -random, -ttl) evict buckets just as the allkeys-*
 * ones do: only `noeviction` (or no maxmemory at all) keeps them.
 *
 * Each connection asks at its handshake (so again after a reconnect or a
 * failover), and the probe timer asks again every minute: CONFIG GET
 * maxmemory*, or INFO memory when CONFIG is refused (renamed, an ACL), and
 * when both are refused the answer is "unknown".  A change of verdict is
 * one SLUICE_REDIS_EV_EVICTION event for the node; the node reports carry
 * it for the metrics (eviction_unsafe).
 */
#include "store/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Judges the server's settings (NULL: not known) and tells a change. */
static void judge(sluice_redis_node_t *n, const char *policy,
		  const char *maxmemory)
{
	char detail[256], seen[48];
	int verdict;

	if (!policy || !maxmemory) {
		verdict = EVICT_UNKNOWN;
		snprintf(seen, sizeof(seen), "?");
		snprintf(detail, sizeof(detail),
			 "maxmemory-policy unknown (CONFIG GET and INFO memory "
			 "refused): unless the server runs with noeviction or "
			 "no maxmemory, it may evict buckets, and a drained "
			 "bucket evicted is full again");
	} else if (strcmp(maxmemory, "0") == 0 ||
		   strcmp(policy, "noeviction") == 0) {
		verdict = EVICT_SAFE;
		snprintf(seen, sizeof(seen), "%.30s/%.16s", policy, maxmemory);
		snprintf(detail, sizeof(detail),
			 "maxmemory %s, maxmemory-policy %s: buckets are "
			 "never evicted",
			 maxmemory, policy);
	} else {
		verdict = EVICT_UNSAFE;
		snprintf(seen, sizeof(seen), "%.30s/%.16s", policy, maxmemory);
		snprintf(detail, sizeof(detail),
			 "maxmemory %.20s with maxmemory-policy %.30s: Redis "
			 "may "
			 "evict buckets (every sluice key has a TTL, so "
			 "volatile-* policies evict them too), and a drained "
			 "bucket evicted is full again; use noeviction",
			 maxmemory, policy);
	}
	if (n->evict == verdict && strcmp(n->evict_seen, seen) == 0)
		return;
	/* The first verdict is news only when it is not "safe". */
	if (n->evict != EVICT_UNCHECKED || verdict != EVICT_SAFE)
		sluice_redis__event(n->conns[0].r, n, SLUICE_REDIS_EV_EVICTION,
				    detail);
	n->evict = verdict;
	snprintf(n->evict_seen, sizeof(n->evict_seen), "%s", seen);
}

static int mine(sluice_redis_link_t *l)
{
	sluice_redis_conn_t *k = l->data;

	return k && k->link == l && !k->r->closing;
}

/* "field:value\r\n" in INFO's text -> value (in buf), or NULL. */
static const char *info_field(const char *text, const char *field, char *buf,
			      size_t len)
{
	size_t flen = strlen(field), n;
	const char *p = text;

	while ((p = strstr(p, field))) {
		if ((p == text || p[-1] == '\n') && p[flen] == ':') {
			p += flen + 1;
			n = strcspn(p, "\r\n");
			if (n >= len)
				return NULL;
			memcpy(buf, p, n);
			buf[n] = '\0';
			return buf;
		}
		p += flen;
	}
	return NULL;
}

static void on_info(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	char policy[64], maxmemory[32];

	(void)priv;
	if (!rep || !mine(l))
		return;
	if (rep->type != REDIS_REPLY_STRING &&
	    rep->type != REDIS_REPLY_STATUS) {
		judge(((sluice_redis_conn_t *)l->data)->node, NULL, NULL);
		return;
	}
	judge(((sluice_redis_conn_t *)l->data)->node,
	      info_field(rep->str, "maxmemory_policy", policy, sizeof(policy)),
	      info_field(rep->str, "maxmemory", maxmemory, sizeof(maxmemory)));
}

static void on_config(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	const char *policy = NULL, *maxmemory = NULL;
	size_t i;

	(void)priv;
	if (!rep || !mine(l))
		return;
	if (rep->type != REDIS_REPLY_ARRAY) {
		/* CONFIG renamed away or not allowed: INFO may still say. */
		sluice_redis__command(l, on_info, NULL, "INFO memory");
		return;
	}
	for (i = 0; i + 1 < rep->elements; i += 2) {
		const redisReply *k = rep->element[i], *v = rep->element[i + 1];

		if (k->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue;
		if (strcmp(k->str, "maxmemory") == 0)
			maxmemory = v->str;
		else if (strcmp(k->str, "maxmemory-policy") == 0)
			policy = v->str;
	}
	if (!policy || !maxmemory) {
		sluice_redis__command(l, on_info, NULL, "INFO memory");
		return;
	}
	judge(((sluice_redis_conn_t *)l->data)->node, policy, maxmemory);
}

void sluice_redis__check_eviction(sluice_redis_conn_t *k)
{
	if (k->link)
		sluice_redis__command(k->link, on_config, NULL,
				      "CONFIG GET maxmemory*");
}
