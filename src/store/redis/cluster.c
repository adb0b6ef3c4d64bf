/*
 * cluster.c -- Redis Cluster routing, kept small: a key's slot (CRC16 of
 * its hash tag, as Redis computes it), a slot -> master map filled from
 * CLUSTER SLOTS, and the two redirections.  MOVED means the map is stale:
 * note the new owner, refresh the whole map, resend.  ASK means the slot is
 * being migrated: resend this one call to the target, preceded by ASKING,
 * without touching the map.  The limits of one key share a hash tag
 * ("{key}"), so one call never spans two slots.  The script needs no
 * special care: every connection loads it in its handshake, and NOSCRIPT
 * is recovered on whichever master answers it.
 */
#include "store/redis/redis_int.h"

#include <stdio.h>

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- slots */

/* CRC16-CCITT (XMODEM), the checksum Redis Cluster uses for key slots. */
static uint16_t crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;
	size_t i;
	int j;

	for (i = 0; i < len; i++) {
		crc ^= (uint16_t)((unsigned char)buf[i] << 8);
		for (j = 0; j < 8; j++)
			crc = crc & 0x8000 ? (uint16_t)(crc << 1) ^ 0x1021
					   : (uint16_t)(crc << 1);
	}
	return crc;
}

/* Redis's rule: hash only between the first '{' and the next '}' when that
 * is non-empty, else the whole key. */
int sluice_redis__key_slot(const char *key, size_t len)
{
	size_t s, e;

	for (s = 0; s < len && key[s] != '{'; s++)
		;
	if (s < len) {
		for (e = s + 1; e < len && key[e] != '}'; e++)
			;
		if (e < len && e != s + 1)
			return crc16(key + s + 1, e - s - 1) & 16383;
	}
	return crc16(key, len) & 16383;
}

/* ------------------------------------------------------------ the map */

static sluice_redis_node_t *node_get(sluice_redis_t *r, const char *host,
				     int port, int *idx)
{
	sluice_redis_node_t **grown, *n;
	size_t i;

	for (i = 0; i < r->nnodes; i++) {
		n = r->nodes[i];
		if (n->host && n->port == port && strcmp(n->host, host) == 0) {
			*idx = (int)i;
			return n;
		}
	}
	if (r->nnodes >= 4096)
		return NULL;
	grown = realloc(r->nodes, (r->nnodes + 1) * sizeof(*grown));
	if (!grown)
		return NULL;
	r->nodes = grown;
	n = sluice_redis__node_new(r, host, port, NULL);
	if (!n)
		return NULL;
	*idx = (int)r->nnodes;
	r->nodes[r->nnodes++] = n;
	return n;
}

/* A connection of the node has its handshake done. */
static int node_up(const sluice_redis_node_t *n)
{
	unsigned j;

	for (j = 0; j < n->conns[0].r->nconns; j++)
		if (n->conns[j].link && n->conns[j].state == CONN_UP)
			return 1;
	return 0;
}

static void on_slots(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	sluice_redis_t *r = priv;
	sluice_redis_conn_t *k = l->data;
	sluice_redis_node_t *n;
	size_t i, changed = 0;
	int stale;

	r->refreshing = 0;
	if (r->closing)
		return;
	if (!rep) {
		/* Its connection died (often the first seed, down at start,
		 * or a master just killed).  No call may come to ask again,
		 * and /readyz waits for a map: ask another node shortly,
		 * from the retry timer rather than from inside the
		 * teardown of this connection. */
		r->refresh_lost = 1;
		r->refreshed_ms = 0;
		r->wake_retry(r);
		return;
	}
	r->refresh_lost = 0;
	if (rep->type != REDIS_REPLY_ARRAY)
		return;
	for (i = 0; i < rep->elements; i++) {
		redisReply *e = rep->element[i], *m;
		const char *host;
		long long lo, hi, s;
		int idx;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
			continue;
		m = e->element[2];
		if (e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
		    m->element[0]->type != REDIS_REPLY_STRING ||
		    m->element[1]->type != REDIS_REPLY_INTEGER)
			continue;
		lo = e->element[0]->integer;
		hi = e->element[1]->integer;
		if (lo < 0 || hi >= SLUICE_REDIS_NSLOTS || lo > hi)
			continue;
		/* An empty host means "the address you reached me on". */
		host = m->element[0]->len     ? m->element[0]->str
		       : (k && k->node->host) ? k->node->host
					      : "127.0.0.1";
		if (!(n = node_get(r, host, (int)m->element[1]->integer, &idx)))
			continue;
		/* Right after a failover, a node that has not heard of it
		 * yet still names the dead master: a slot is not moved from
		 * a master we reach to one we know we cannot. */
		stale = n->health == HEALTH_UNREACHABLE ||
			n->health == HEALTH_TIMEOUT;
		for (s = lo; s <= hi; s++) {
			if (r->slots[s] == (int16_t)idx ||
			    (stale && r->slots[s] >= 0 &&
			     node_up(r->nodes[r->slots[s]])))
				continue;
			changed++;
			r->slots[s] = (int16_t)idx;
		}
	}
	if (changed) {
		char detail[64];

		snprintf(detail, sizeof(detail), "%zu slots changed master",
			 changed);
		sluice_redis__event(r, k ? k->node : NULL,
				    SLUICE_REDIS_EV_SLOTS_CHANGED, detail);
	}
}

/* Asks a node for the slot map: one request at a time, at most every
 * 100 ms (any time once a MOVED or a lost refresh cleared refreshed_ms).
 * A request unanswered for timeout_ms (at least 100 ms) stops holding the
 * next one back: it may sit on a hung master's connection, which is open
 * but answers nothing, until that connection is dropped.  Nodes are asked
 * in turn, those with a connection up and their breaker not open first:
 * a connection still connecting may be to a dead master, and an open
 * breaker says the node is failing. */
void sluice_redis__refresh_slots(sluice_redis_t *r)
{
	uint64_t now = sluice_redis__now(r);
	uint64_t wait = r->timeout_ms > 100 ? r->timeout_ms : 100;
	size_t i, j;
	int pass;

	if (!r->cluster || r->closing)
		return;
	if (r->refreshing ? now - r->refresh_sent_ms < wait
			  : r->refreshed_ms && now - r->refreshed_ms < 100)
		return;
	for (pass = 0; pass < 2; pass++)
		for (j = 0; j < r->nnodes; j++) {
			sluice_redis_node_t *n =
				r->nodes[(r->refresh_rr + j) % r->nnodes];
			sluice_redis_conn_t *k = sluice_redis__pick(n);

			if (!k || (pass == 0 && (k->state != CONN_UP ||
						 n->breaker == BREAKER_OPEN)))
				continue;
			if (sluice_redis__command(k->link, on_slots, r,
						  "CLUSTER SLOTS") == 0) {
				i = (r->refresh_rr + j) % r->nnodes;
				r->refresh_rr = i + 1;
				r->refreshing = 1;
				r->refreshed_ms = r->refresh_sent_ms = now;
				return;
			}
		}
}

/* on_conn_up: refresh now if the map has holes or the last refresh was
 * lost. */
static void slots_check(sluice_redis_t *r)
{
	size_t i;

	if (!r->cluster || r->closing)
		return;
	for (i = 0; i < SLUICE_REDIS_NSLOTS && !r->refresh_lost; i++)
		if (r->slots[i] < 0)
			break;
	if (r->refresh_lost || i < SLUICE_REDIS_NSLOTS) {
		r->refreshed_ms = 0;
		sluice_redis__refresh_slots(r);
	}
}

int sluice_redis__cluster_init(sluice_redis_t *r)
{
	r->cluster = 1;
	r->slots = malloc(SLUICE_REDIS_NSLOTS * sizeof(*r->slots));
	if (!r->slots)
		return SLUICE_ENOMEM;
	memset(r->slots, 0xff, SLUICE_REDIS_NSLOTS * sizeof(*r->slots));
	r->on_conn_up = slots_check;
	return 0;
}

/* The node serving `slot`; any node when the map does not know yet (it
 * answers MOVED if it is the wrong one). */
sluice_redis_node_t *sluice_redis__route(sluice_redis_t *r, int slot)
{
	if (r->cluster && slot >= 0 && r->slots[slot] >= 0)
		return r->nodes[r->slots[slot]];
	return r->nodes[0];
}

/* ------------------------------------------------------ redirections */

int sluice_redis__redirect(sluice_redis_call_t *c, const redisReply *reply)
{
	sluice_redis_t *r = c->r;
	sluice_redis_node_t *n;
	char host[256];
	const char *sp, *colon;
	int moved, idx, port, slot;
	size_t hl;

	if (!r->cluster || reply->len < 4)
		return 0;
	moved = strncmp(reply->str, "MOVED ", 6) == 0;
	if (!moved && strncmp(reply->str, "ASK ", 4) != 0)
		return 0;
	/* "MOVED <slot> <host>:<port>" / "ASK <slot> <host>:<port>" */
	slot = atoi(reply->str + (moved ? 6 : 4));
	sp = strchr(reply->str + (moved ? 6 : 4), ' ');
	colon = sp ? strrchr(sp, ':') : NULL;
	if (!colon || slot < 0 || slot >= SLUICE_REDIS_NSLOTS)
		return 0;
	hl = (size_t)(colon - sp - 1);
	if (hl >= sizeof(host))
		return 0;
	memcpy(host, sp + 1, hl);
	host[hl] = '\0';
	port = atoi(colon + 1);
	if (!hl)
		strcpy(host, "127.0.0.1");
	n = node_get(r, host, port, &idx);
	if (!n || ++c->redirects > SLUICE_REDIS_MAX_REDIRECTS)
		return 0;
	if (moved) {
		r->moved++;
		sluice_redis__report(r, c->conn ? c->conn->node : NULL,
				     SLUICE_REDIS_REPORT_ERROR, 0,
				     SLUICE_REDIS_ERR_REDIRECT);
		r->slots[slot] = (int16_t)idx;
		r->refreshed_ms = 0;
		sluice_redis__refresh_slots(r);
	} else {
		r->asked++;
		sluice_redis__report(r, c->conn ? c->conn->node : NULL,
				     SLUICE_REDIS_REPORT_ERROR, 0,
				     SLUICE_REDIS_ERR_REDIRECT);
		c->ask = n;
	}
	return 1;
}
