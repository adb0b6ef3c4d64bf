/*
 * fuzz_grpc.c -- libFuzzer harness for the gRPC front end.
 *
 * Drives one connection's HTTP/2 session and gRPC framing (src/grpc/
 * session.c, session_out.c, stream.c, rpc.c, rls.c, health.c, wire.c)
 * from a buffer, without a socket: bytes in through grpc_conn_feed(), bytes out
 * through a memory transport, decisions by the RLS engine over the memory store
 * and an envoyproxy/ratelimit YAML config.  The first input byte cuts the rest
 * into reads (1 to 253 bytes each, so frames and messages are split
 * anywhere) and says whether the response headers are on; the second
 * whether sweeps run between reads, whether the server starts draining
 * midway, and whether the client is slow to read (the transport then
 * takes output one read later, as a socket whose kernel buffer is full,
 * and the session's backpressure holds reads back).  Any input must end in
 * well-formed output (an HTTP/1.1 505 for an HTTP/1 client, else HTTP/2 frames
 * starting with our SETTINGS), with nothing leaked, no crash and no undefined
 * behaviour.
 *
 * The seed corpus (tests/fuzz/corpus/fuzz_grpc) holds what grpcio sent
 * for real calls (ShouldRateLimit, Health/Check and Watch, errors) and
 * raw floods; tests/fuzz/grpc_seeds.py records them.
 */
#include "grpc/internal.h"
#include "policy/envoy/config.h"
#include "policy/live.h"
#include "store/store.h"
#include "util/listen_socket.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char envoy_yaml[] =
	"domain: fuzz\n"
	"descriptors:\n"
	"  - key: k\n"
	"    rate_limit: {unit: second, requests_per_unit: 5}\n"
	"  - key: k\n"
	"    value: v\n"
	"    rate_limit: {unit: minute, requests_per_unit: 2}\n"
	"  - key: user\n"
	"    descriptors:\n"
	"      - key: path\n"
	"        value: \"/api/*\"\n"
	"        rate_limit: {unit: hour, requests_per_unit: 100}\n"
	"        shadow_mode: true\n"
	"  - key: free\n"
	"    rate_limit: {unlimited: true}\n";

static uv_loop_t loop;
static sluice_svc_t svc;
static sluice_memstore_t *store;
static sluice_grpc_t *g;
static sluice_config_t *cfg;

/* What the connection wrote, checked as it comes. */
static sluice_buf_t out;
static size_t checked; /* bytes of out parsed as frames */
static int http1;      /* the answer is the HTTP/1.1 505 */
static int slow;       /* writes complete one read later */

static void fini(void)
{
	sluice_backend_close(&svc.backend);
	sluice_live_unref(svc.live);
	sluice_memstore_free(store);
	sluice_buf_free(&out);
	free(g);
	uv_run(&loop, UV_RUN_NOWAIT);
	uv_loop_close(&loop);
}

static void init(void)
{
	sluice_envoy_settings_t settings;
	char err[512];

	if (uv_loop_init(&loop) != 0)
		abort();
	sluice_memstore_open(&store, 512, NULL, 0);
	cfg = sluice_config_default();
	if (!store || !cfg)
		abort();
	sluice_envoy_settings_init(&settings);
	cfg->envoy = sluice_envoy_load_text("fuzz.yaml", envoy_yaml,
					    sizeof(envoy_yaml) - 1, &settings,
					    err, sizeof(err));
	if (!cfg->envoy) {
		fprintf(stderr, "fuzz_grpc: %s\n", err);
		abort();
	}
	svc.live = sluice_live_new(cfg);
	svc.metrics = sluice_metrics_new();
	svc.stats_store = store;
	if (!svc.live || !svc.metrics ||
	    sluice_backend_open(&svc.backend, &cfg->store, NULL, store, NULL,
				err, sizeof(err)) < 0)
		abort();
	g = calloc(1, sizeof(*g));
	if (!g)
		abort();
	g->loop = &loop;
	g->svc = &svc;
	g->is_unix = 1;
	g->held_budget = SLUICE_HELD_BUDGET;
	atexit(fini);
}

/* The server's output: an HTTP/1.1 505, or HTTP/2 frames, SETTINGS
 * first, each with a known type and a length within the frame size
 * nghttp2 may use (16 KiB, or more if the client allowed it). */
static void check_frames(void)
{
	while (out.len - checked >= 9) {
		const uint8_t *f = (const uint8_t *)out.data + checked;
		size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];

		if (checked == 0 && f[3] != 4) /* SETTINGS */
			__builtin_trap();
		if (f[3] > 9 || len > (1u << 24) - 1)
			__builtin_trap();
		if (out.len - checked < 9 + len)
			return;
		checked += 9 + len;
	}
}

static int mem_write(grpc_conn_t *c)
{
	if (c->out.len == 0 || c->writing)
		return 0;
	if (out.len == 0 && c->out.len >= 9 &&
	    memcmp(c->out.data, "HTTP/1.1 ", 9) == 0)
		http1 = 1;
	if (!http1) {
		/* Keep what is needed to parse the next frame's header. */
		if (checked > 65536) {
			sluice_buf_consume(&out, checked);
			checked = 0;
		}
		sluice_buf_append(&out, c->out.data, c->out.len);
		check_frames();
	}
	c->out.len = 0;
	c->writing = (unsigned)slow;
	return 0;
}

static void mem_read(grpc_conn_t *c, int on)
{
	c->reading = (unsigned)on;
}

static void mem_close(grpc_conn_t *c)
{
	(void)c; /* released by the harness once feeding is over */
}

static void mem_peer(grpc_conn_t *c, char *buf, size_t len)
{
	(void)c;
	snprintf(buf, len, "fuzz");
}

static const grpc_io_t mem_io = {mem_write, mem_read, mem_close, mem_peer};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	grpc_conn_t *c;
	size_t chunk, off, n, reads = 0;
	int sweep, drain_at;

	if (!ready) {
		init();
		ready = 1;
	}
	if (size < 2)
		return 0;
	chunk = (size_t)(data[0] >> 2) * 4 + 1; /* 1 .. 253 bytes a read */
	sweep = data[1] & 1;
	slow = (data[1] >> 7) & 1;
	drain_at = (data[1] & 2) ? ((data[1] >> 2) & 31) : -1; /* that read */
	cfg->envoy->settings.response_headers = (data[0] & 1);
	data += 2;
	size -= 2;

	out.len = 0;
	checked = 0;
	http1 = 0;
	svc.draining = 0;
	g->draining = 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return 0;
	grpc_conn_start(g, c, &mem_io);
	for (off = 0; off < size && !c->closing; off += n, reads++) {
		n = size - off < chunk ? size - off : chunk;
		if (c->writing) {
			/* The kernel took the pending write. */
			c->writing = 0;
			grpc_conn_flush(c);
			if (c->closing)
				break;
		}
		if (!c->reading && !c->writing)
			break; /* the session reads nothing more */
		if (!c->reading) {
			n = 0; /* held back: the client's bytes wait */
			continue;
		}
		grpc_conn_feed(c, data + off, n);
		if (!c->closing && sweep)
			sluice_grpc_sweep(g, 0);
		if ((int)reads == drain_at && !c->closing) {
			svc.draining = 1;
			sluice_grpc_drain(g);
		}
	}
	/* The client is gone. */
	grpc_conn_close(c);
	grpc_conn_release(c);
	free(c);
	/* Timers of the calls (grpc-timeout) close on the loop. */
	uv_run(&loop, UV_RUN_NOWAIT);
	if (g->held != 0 || g->nconns != 0 || g->partial || g->partial_tail)
		__builtin_trap();
	return 0;
}
