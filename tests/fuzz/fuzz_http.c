/*
 * fuzz_http.c -- libFuzzer harness for request handling.
 *
 * Drives the whole byte path of a connection -- http-parser glue, the
 * limits (400/413/431), routing, /v1/check with its rules, POST /v1/take
 * with its JSON, /metrics -- from a buffer, without sockets, over the
 * memory store.  The first input byte picks the config (the classic
 * default, or one with several rules, tiers, costs and a shadow rule),
 * whether the service is draining, and how the rest is cut into reads,
 * so request boundaries land anywhere; the second, the bound on unsent
 * answers (out_high) past which the connection holds requests back, as
 * for a client that does not read (0: none).  Any input must end in answers
 * that are well-formed status lines, never a crash, leak or undefined
 * behaviour.
 */
#include "serve/handlers.h"
#include "serve/http_conn.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char rules_yaml[] =
	"http: {max_header_bytes: 2048, max_body_bytes: 512}\n"
	"rules:\n"
	"  - name: api\n"
	"    key: [\"header:x-user-id\", \"header:x-api-key+ip\", \"ip\"]\n"
	"    limits:\n"
	"      - {capacity: 5, rate: 1/s}\n"
	"      - {capacity: 50, rate: 50/min}\n"
	"  - name: upload\n"
	"    match: {methods: [POST, PUT], path: \"/api/up*\"}\n"
	"    cost: 3\n"
	"    on_store_error: local\n"
	"    tiers:\n"
	"      header: x-user-tier\n"
	"      default: free\n"
	"      limits:\n"
	"        free: [{capacity: 4, rate: 2/min}]\n"
	"        paid: [{capacity: 40, rate: 20/min}]\n"
	"  - name: trial\n"
	"    shadow: true\n"
	"    limits: [{capacity: 2, rate: 1/h}]\n";

static sluice_svc_t svcs[2];
static sluice_memstore_t *store;

/* At exit, so that LeakSanitizer sees everything returned (the store hides
 * tags in its slot pointers, which a leak scan cannot follow). */
static void fini(void)
{
	size_t i;

	for (i = 0; i < 2; i++) {
		sluice_backend_close(&svcs[i].backend);
		sluice_live_unref(svcs[i].live);
		sluice_take_free(svcs[i].spare);
	}
	sluice_memstore_free(store);
}

static void init_svc(sluice_svc_t *svc, sluice_config_t *cfg,
		     sluice_memstore_t *shared)
{
	char err[256];

	if (!cfg)
		abort();
	svc->live = sluice_live_new(cfg);
	svc->metrics = sluice_metrics_new();
	svc->stats_store = shared;
	if (!svc->live || !svc->metrics ||
	    sluice_backend_open(&svc->backend, &cfg->store, NULL, shared, NULL,
				err, sizeof(err)) < 0)
		abort();
}

static void init(void)
{
	char err[512];

	/* Small, so eviction runs too. */
	sluice_memstore_open(&store, 512, NULL, 0);
	if (!store)
		abort();
	atexit(fini);
	init_svc(&svcs[0], sluice_config_default(), store);
	init_svc(&svcs[1],
		 sluice_config_parse("fuzz.yaml", rules_yaml,
				     sizeof(rules_yaml) - 1, err, sizeof(err)),
		 store);
}

/* Every answer written must start with a status line.  Then, as the
 * transport does once out is written, requests held back are resumed. */
static void check_output(sluice_conn_t *c)
{
	do {
		if (c->out.len && (c->out.len < 12 ||
				   memcmp(c->out.data, "HTTP/1.1 ", 9) != 0))
			__builtin_trap();
		c->out.len = 0;
		if (sluice_conn_backlogged(c))
			sluice_conn_resume(c);
	} while (c->out.len);
	if (sluice_conn_backlogged(c))
		__builtin_trap(); /* held back with nothing to write */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	struct sockaddr_in peer;
	sluice_conn_t *c;
	sluice_svc_t *svc;
	size_t chunk, off, n, out_high;

	if (!ready) {
		init();
		ready = 1;
	}
	if (size < 2)
		return 0;
	svc = &svcs[data[0] & 1];
	svc->draining = (data[0] >> 1) & 1;
	chunk = (size_t)(data[0] >> 2) * 4 + 1; /* 1 .. 253 bytes a read */
	out_high = (size_t)data[1] * 8;		/* 0 .. 2040 bytes */
	data += 2;
	size -= 2;

	memset(&peer, 0, sizeof(peer));
	peer.sin_family = AF_INET;
	peer.sin_port = htons(40000);
	peer.sin_addr.s_addr = htonl(0x7f000001); /* trusted by default */
	c = malloc(sizeof(*c));
	if (!c)
		return 0;
	sluice_conn_init(c, svc, NULL, (const struct sockaddr *)&peer);
	c->out_high = out_high;
	for (off = 0; off < size && !c->want_close; off += n) {
		n = size - off < chunk ? size - off : chunk;
		sluice_conn_feed(c, (const char *)data + off, n);
		check_output(c);
	}
	sluice_conn_eof(c);
	/* The memory store answers synchronously: nothing can be pending. */
	if (!sluice_conn_release(c))
		__builtin_trap();
	free(c);
	return 0;
}
