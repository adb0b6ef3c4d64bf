/*
 * prefetch.c -- the keys of a batch (SLUICE.TAKEMANY, SLUICE.TAKEEACH) or
 * of one SLUICE.TAKEMULTI brought toward the cache before they are
 * decided, on Redis 7.0.
 *
 * Why: with a large key space most of what a decision costs the server is
 * waiting for memory: the bucket of the key's hash in the keyspace
 * dictionary, the entries chained there and their key names, and the same
 * in the dictionary of expiries.  A single SLUICE.TAKE waits for those one
 * after the other, and so does a batch that decides its keys in turn; but
 * a batch knows all its keys at the start, so it can ask for the lines of
 * the next keys together and let the misses overlap (a window of
 * PREFETCH_WINDOW keys: as many as the core keeps misses in flight).
 *
 * How: the module API has no prefetch, so this reads the server's own
 * structures, as Redis 7.0 lays them out (server.h, dict.h): the redisDb
 * of an open key handle (state.c keeps it), its two dictionaries, and
 * the server's own hash function, dictGenHashFunction(), looked up in the
 * server process by name.  It only reads, and only issues prefetch hints:
 * it changes no decision, no stored byte and no reply, whatever it finds.
 * It is on only when sluice_rm_prefetch_init() finds Redis 7.0.x (7.2
 * changed the entries, 7.4 the keyspace), those functions exported, and
 * the module storing through the key API (STORE int); and every batch
 * checks that both dictionaries hash with dictSdsHash() before reading
 * further, so a layout it does not know is never walked.
 */
#include "redis_module/module.h"

#include <dlfcn.h>
#include <stdint.h>

/* How many keys ahead a batch asks for. */
#define PREFETCH_WINDOW 16

/* Redis 7.0's dict (dict.h), its entry, and the head of its redisDb. */
struct server_dict {
	void *type; /* dictType: its first member is the hash function */
	struct server_entry **table[2];
	unsigned long used[2];
	long rehashidx; /* -1: not rehashing */
	int16_t pauserehash;
	signed char size_exp[2]; /* -1: no table */
};

struct server_entry {
	void *key; /* an sds: the key name */
	void *val; /* the value object (keyspace) or the expiry (expires) */
	struct server_entry *next;
};

struct server_db {
	struct server_dict *dict[2]; /* the keyspace, the expiries */
};

static uint64_t (*server_hash)(const void *key, size_t len);
static void *server_sds_hash; /* dictSdsHash(): what both dicts use */

int sluice_rm_prefetch_init(int int_store)
{
	int version = RedisModule_GetServerVersion
			      ? RedisModule_GetServerVersion()
			      : 0;

	server_hash = NULL;
	server_sds_hash = NULL;
	/* 0x00MMmmpp: 7.0.x only. */
	if ((version >> 8) != 0x0700 || !int_store)
		return 0;
	server_sds_hash = dlsym(RTLD_DEFAULT, "dictSdsHash");
	*(void **)&server_hash = dlsym(RTLD_DEFAULT, "dictGenHashFunction");
	if (!server_sds_hash || !server_hash) {
		server_hash = NULL;
		return 0;
	}
	return 1;
}

int sluice_rm_prefetch_on(void)
{
	return server_hash != NULL;
}

static struct server_entry **bucket(const struct server_dict *d, int t,
				    uint64_t h)
{
	if (d->size_exp[t] < 0 || !d->table[t])
		return NULL;
	return &d->table[t][h & ((1UL << d->size_exp[t]) - 1)];
}

void sluice_rm_prefetch(void *db, RedisModuleString **keys, int stride, int n)
{
	const struct server_db *sdb = db;
	struct server_entry **slot[PREFETCH_WINDOW][2], **next;
	const struct server_dict *d;
	const char *s;
	size_t len;
	uint64_t h;
	int i, t;

	if (!server_hash || !sdb || n <= 0)
		return;
	if (n > PREFETCH_WINDOW)
		n = PREFETCH_WINDOW;
	for (t = 0; t < 2; t++)
		if (!sdb->dict[t] ||
		    *(void *const *)sdb->dict[t]->type != server_sds_hash)
			return;
	/* Three passes, each issuing the loads the previous one made
	 * possible, so the misses of all n keys are in flight together: the
	 * buckets; the first entry chained in each; its key name and (in the
	 * keyspace) its value object. */
	for (i = 0; i < n; i++) {
		s = RedisModule_StringPtrLen(keys[i * stride], &len);
		h = server_hash(s, len);
		for (t = 0; t < 2; t++) {
			d = sdb->dict[t];
			slot[i][t] = bucket(d, 0, h);
			if (slot[i][t])
				__builtin_prefetch(slot[i][t]);
			/* Rehashing: the key may have moved already. */
			if (d->rehashidx != -1 && (next = bucket(d, 1, h)))
				__builtin_prefetch(next);
		}
	}
	for (i = 0; i < n; i++)
		for (t = 0; t < 2; t++)
			if (slot[i][t] && *slot[i][t])
				__builtin_prefetch(*slot[i][t]);
	for (i = 0; i < n; i++)
		for (t = 0; t < 2; t++)
			if (slot[i][t] && *slot[i][t]) {
				__builtin_prefetch((*slot[i][t])->key);
				if (t == 0)
					__builtin_prefetch((*slot[i][t])->val);
			}
}
