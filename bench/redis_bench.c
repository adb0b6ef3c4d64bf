/*
 * redis_bench.c -- decisions per second, latency and Redis CPU per
 * decision for one way of rate limiting on a running redis-server:
 *
 *   --mode sluice    the sluice Redis store (script, or the module when
 *                    loaded), pipelined: --conns connections, --depth
 *                    calls in flight in total
 *   --mode script    the same, forced onto the Lua script
 *   --mode classic   bench/redis_classic.lua the way the classic middleware
 *                    drives it: one EVALSHA per request per connection, no
 *                    pipelining, --conns connections (50 by default)
 *
 * First every key of the keyspace gets one decision (memory per key is
 * measured then), then random keys for --seconds.  Prints one JSON object.
 * Measurement only: not a test.
 */
#include "sluice_redis.h"

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static struct {
	const char *host, *mode, *script_path;
	int port;
	double seconds;
	unsigned keys, conns, depth;
} opt = {"127.0.0.1", "sluice", "bench/redis_classic.lua", 6379, 5, 100000,
	 0,	      512};

static uv_loop_t *loop;
static uint64_t t_end_ns, done, errors, allowed;
static uint32_t *lat;
static size_t nlat, caplat;
static int filling;
static unsigned fill_next, inflight;
static char classic_sha[64];

static void die(const char *what)
{
	fprintf(stderr, "redis_bench: %s\n", what);
	exit(1);
}

static void record(uint64_t t0)
{
	uint64_t us = (uv_hrtime() - t0) / 1000;

	done++;
	if (!filling && nlat < caplat)
		lat[nlat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

/* The next key: every key once while filling, then random ones; 0 when
 * the phase is over. */
static int next_key(char *buf, size_t len)
{
	unsigned k;

	if (filling) {
		if (fill_next >= opt.keys)
			return 0;
		k = fill_next++;
	} else {
		if (uv_hrtime() >= t_end_ns)
			return 0;
		k = (unsigned)rand() % opt.keys;
	}
	return snprintf(buf, len, "k%011u", k);
}

/* ------------------------------------------------------ sluice store */

static sluice_redis_t *store;
static sluice_limit_t policy;

static void sluice_issue(void);

static void on_sluice(void *arg, int status, int ok, const sluice_decision_t *d,
		      size_t which)
{
	record((uint64_t)(uintptr_t)arg);
	inflight--;
	if (status)
		errors++;
	else if (ok)
		allowed++;
	sluice_issue();
	if (inflight == 0)
		uv_stop(loop);
}

static void sluice_issue(void)
{
	char key[32];
	int n;

	while (inflight < opt.depth && (n = next_key(key, sizeof(key))) > 0) {
		inflight++;
		if (sluice_redis_take(store, key, (size_t)n, &policy, 1, 1,
				      on_sluice,
				      (void *)(uintptr_t)uv_hrtime()) < 0)
			die("take failed");
	}
}

static void run_sluice(int script_only)
{
	sluice_redis_opts_t o = {0};
	char url[128], err[256];

	snprintf(url, sizeof(url), "redis://%s:%d", opt.host, opt.port);
	o.url = url;
	o.key_prefix = "";
	o.timeout_ms = 1000;
	o.connections = opt.conns ? opt.conns : 4;
	o.flags = script_only ? SLUICE_REDIS_SCRIPT_ONLY : 0;
	if (sluice_redis_new(loop, &o, &store, err, sizeof(err)) < 0)
		die(err);
	sluice_issue();
	uv_run(loop, UV_RUN_DEFAULT);
}

/* ------------------------------------------------- classic baseline */

typedef struct classic_conn_s {
	redisAsyncContext *ac;
	uint64_t t0;
} classic_conn_t;

static void classic_issue(classic_conn_t *c);

static void on_classic(redisAsyncContext *ac, void *reply, void *priv)
{
	redisReply *r = reply;
	classic_conn_t *c = priv;

	record(c->t0);
	inflight--;
	if (!r || r->type != REDIS_REPLY_ARRAY)
		errors++;
	else if (r->element[0]->integer)
		allowed++;
	classic_issue(c);
}

static void classic_issue(classic_conn_t *c)
{
	char key[32], now[32];
	struct timeval tv;

	if (next_key(key, sizeof(key)) <= 0) {
		if (inflight == 0)
			uv_stop(loop);
		return;
	}
	gettimeofday(&tv, NULL);
	snprintf(now, sizeof(now), "%lld",
		 (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000);
	c->t0 = uv_hrtime();
	inflight++;
	redisAsyncCommand(c->ac, on_classic, c, "EVALSHA %s 1 %s 100 2 %s 1",
			  classic_sha, key, now);
}

static classic_conn_t *cs;

static void run_classic(void)
{
	unsigned i, n = opt.conns ? opt.conns : 50;

	if (!cs) {
		cs = calloc(n, sizeof(*cs));
		for (i = 0; i < n; i++) {
			cs[i].ac = redisAsyncConnect(opt.host, opt.port);
			if (!cs[i].ac || cs[i].ac->err)
				die("connect failed");
			redisLibuvAttach(cs[i].ac, loop);
		}
	}
	for (i = 0; i < n; i++)
		classic_issue(&cs[i]);
	uv_run(loop, UV_RUN_DEFAULT);
}

/* ----------------------------------------------------------- reports */

static redisContext *admin;

static long long info_num(const char *section, const char *field)
{
	redisReply *r = redisCommand(admin, "INFO %s", section);
	char *p;
	long long v = -1;

	if (r && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, field)))
		v = atoll(p + strlen(field));
	if (r)
		freeReplyObject(r);
	return v;
}

static double usec_per_call(const char *cmd)
{
	redisReply *r = redisCommand(admin, "INFO commandstats");
	char needle[64], *p;
	double v = -1;

	snprintf(needle, sizeof(needle), "cmdstat_%s:", cmd);
	if (r && r->type == REDIS_REPLY_STRING &&
	    (p = strstr(r->str, needle)) && (p = strstr(p, "usec_per_call=")))
		v = atof(p + 14);
	if (r)
		freeReplyObject(r);
	return v;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void command(const char *fmt)
{
	redisReply *r = redisCommand(admin, fmt);

	if (!r || r->type == REDIS_REPLY_ERROR)
		die(fmt);
	freeReplyObject(r);
}

static void load_classic(void)
{
	FILE *f = fopen(opt.script_path, "r");
	char buf[8192];
	size_t n;
	redisReply *r;

	if (!f)
		die("cannot open the classic script (--script PATH)");
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	r = redisCommand(admin, "SCRIPT LOAD %s", buf);
	if (!r || r->type != REDIS_REPLY_STRING)
		die("SCRIPT LOAD failed");
	snprintf(classic_sha, sizeof(classic_sha), "%s", r->str);
	freeReplyObject(r);
}

int main(int argc, char **argv)
{
	long long m0, m1, keys;
	double secs, cpu = -1;
	uint64_t t0, d0;
	int i, classic;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--host"))
			opt.host = argv[i + 1];
		else if (!strcmp(argv[i], "--port"))
			opt.port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--mode"))
			opt.mode = argv[i + 1];
		else if (!strcmp(argv[i], "--seconds"))
			opt.seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--keys"))
			opt.keys = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--conns"))
			opt.conns = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--depth"))
			opt.depth = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--script"))
			opt.script_path = argv[i + 1];
		else
			die("usage: redis_bench [--host H] [--port P] [--mode "
			    "sluice|script|classic] [--seconds S] [--keys K] "
			    "[--conns C] [--depth D] [--script PATH]");
	}
	if (!opt.keys)
		die("--keys must be > 0");
	classic = !strcmp(opt.mode, "classic");
	admin = redisConnect(opt.host, opt.port);
	if (!admin || admin->err)
		die("cannot connect");
	loop = uv_default_loop();
	sluice_limit_parse(&policy, "100", "2/s", NULL, 0);
	if (classic)
		load_classic();

	/* Fill: one decision per key, for memory per key. */
	command("FLUSHALL");
	m0 = info_num("memory", "used_memory:");
	filling = 1;
	if (classic)
		run_classic();
	else
		run_sluice(!strcmp(opt.mode, "script"));
	m1 = info_num("memory", "used_memory:");
	{
		redisReply *r = redisCommand(admin, "DBSIZE");

		keys = r ? r->integer : 0;
		if (r)
			freeReplyObject(r);
	}

	/* Timed run on random keys. */
	filling = 0;
	caplat = 20000000;
	lat = malloc(caplat * sizeof(*lat));
	command("CONFIG RESETSTAT");
	d0 = done;
	t0 = uv_hrtime();
	t_end_ns = t0 + (uint64_t)(opt.seconds * 1e9);
	if (classic)
		run_classic();
	else
		sluice_issue(), uv_run(loop, UV_RUN_DEFAULT);
	secs = (double)(uv_hrtime() - t0) / 1e9;
	if (classic)
		cpu = usec_per_call("evalsha");
	else if ((cpu = usec_per_call("sluice.take")) < 0)
		cpu = usec_per_call("evalsha");
	qsort(lat, nlat, sizeof(*lat), cmp_u32);
	printf("{\"mode\": \"%s\", \"decisions\": %llu, \"seconds\": %.2f, "
	       "\"decisions_per_s\": %.0f, \"p50_us\": %u, \"p99_us\": %u, "
	       "\"errors\": %llu, \"allowed\": %llu, "
	       "\"redis_usec_per_decision\": %.2f, \"keys\": %lld, "
	       "\"bytes_per_key\": %.1f}\n",
	       opt.mode, (unsigned long long)(done - d0), secs,
	       (double)(done - d0) / secs, nlat ? lat[nlat / 2] : 0,
	       nlat ? lat[nlat * 99 / 100] : 0, (unsigned long long)errors,
	       (unsigned long long)allowed, cpu, keys,
	       keys ? (double)(m1 - m0) / (double)keys : 0.0);
	free(lat);
	if (store)
		sluice_redis_free(store);
	for (i = 0; cs && i < (int)(opt.conns ? opt.conns : 50); i++)
		redisAsyncFree(cs[i].ac);
	uv_run(loop, UV_RUN_DEFAULT);
	redisFree(admin);
	return errors ? 1 : 0;
}
