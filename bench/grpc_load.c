/*
 * grpc_load.c -- the load generator of `make bench ONLY=grpc`.
 *
 *   sluice_grpc_load HOST PORT CONNECTIONS STREAMS SECONDS KEYS [WARMUP_S]
 *
 * Keeps STREAMS ShouldRateLimit calls in flight, spread over CONNECTIONS
 * HTTP/2 connections, for SECONDS (after WARMUP_S unmeasured), each call one
 * descriptor (user = one of KEYS values, picked at random), and prints one JSON
 * line: calls, calls per second, latency p50/p99 (ms), and the answers (OK,
 * OVER_LIMIT, other grpc-status).  Why not h2load: it sends one body (-d FILE)
 * for every request, so all its calls charge one bucket; this tool gives each
 * call its own descriptor, as the /v1/check figure's wrk script does with
 * x-user-id.  Bodies are written by hand (a RateLimitRequest is three
 * nested length-delimited fields), so this needs nghttp2 alone.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 64
#define HIST_US	  1000000 /* latency histogram: 1 us buckets to 1 s */
#define BODY_MAX  128
#define OUT_MAX	  (256 * 1024)
#define PATH	  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

typedef struct call_s {
	uint64_t start_ns;
	uint8_t body[BODY_MAX];
	size_t len, off;
	int status; /* grpc-status, -1 until the trailers */
	int code;   /* overall_code, 0 until the message */
} call_t;

typedef struct load_conn_s {
	int fd;
	nghttp2_session *s;
	uint8_t out[OUT_MAX];
	size_t outlen;
} load_conn_t;

static struct {
	unsigned keys, streams;
	uint64_t end_ns, measure_ns;
	uint64_t calls, ok, over, errors, late;
	uint32_t *hist;
	int running;
} L;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t put_str(uint8_t *p, uint8_t tag, const char *s, size_t n)
{
	p[0] = tag;
	p[1] = (uint8_t)n;
	memcpy(p + 2, s, n);
	return n + 2;
}

/* prefix + RateLimitRequest{domain: "bench", descriptors: [{entries:
 * [{key: "user", value: "u<k>"}]}]} */
static size_t make_body(uint8_t *b, unsigned k)
{
	char v[16];
	uint8_t entry[40], desc[48], msg[80];
	size_t e, d, m, vn = (size_t)snprintf(v, sizeof(v), "u%u", k);

	e = put_str(entry, 0x0a, "user", 4);
	e += put_str(entry + e, 0x12, v, vn);
	d = put_str(desc, 0x0a, (const char *)entry, e);
	m = put_str(msg, 0x0a, "bench", 5);
	m += put_str(msg + m, 0x12, (const char *)desc, d);
	b[0] = 0;
	b[1] = b[2] = b[3] = 0;
	b[4] = (uint8_t)m;
	memcpy(b + 5, msg, m);
	return m + 5;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf,
			 size_t len, uint32_t *flags, nghttp2_data_source *src,
			 void *ud)
{
	call_t *c = src->ptr;
	size_t n = c->len - c->off;

	if (n > len)
		n = len;
	memcpy(buf, c->body + c->off, n);
	c->off += n;
	if (c->off == c->len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

static int submit(nghttp2_session *s)
{
	static const nghttp2_nv nv[] = {
#define NV(n, v)                                                               \
	{(uint8_t *)n, (uint8_t *)v, sizeof(n) - 1, sizeof(v) - 1,             \
	 NGHTTP2_NV_FLAG_NONE}
		NV(":method", "POST"),
		NV(":scheme", "http"),
		NV(":authority", "bench"),
		NV(":path", PATH),
		NV("content-type", "application/grpc"),
		NV("te", "trailers"),
	};
	call_t *c = calloc(1, sizeof(*c));
	nghttp2_data_provider prd;

	if (!c)
		return -1;
	c->len = make_body(c->body, (unsigned)(random() % L.keys));
	c->status = -1;
	c->start_ns = now_ns();
	prd.source.ptr = c;
	prd.read_callback = read_body;
	if (nghttp2_submit_request(s, NULL, nv, sizeof(nv) / sizeof(nv[0]),
				   &prd, c) < 0) {
		free(c);
		return -1;
	}
	return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f,
		     const uint8_t *name, size_t nlen, const uint8_t *value,
		     size_t vlen, uint8_t flags, void *ud)
{
	call_t *c = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);

	if (c && nlen == 11 && memcmp(name, "grpc-status", 11) == 0)
		c->status = atoi((const char *)value);
	return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id,
		   const uint8_t *data, size_t len, void *ud)
{
	call_t *c = nghttp2_session_get_stream_user_data(s, id);

	/* overall_code is field 1, packed first: 08 <code>. */
	if (c && !c->code && len >= 7 && data[5] == 0x08)
		c->code = data[6];
	return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t err, void *ud)
{
	call_t *c = nghttp2_session_get_stream_user_data(s, id);
	uint64_t t = now_ns(), us;

	if (!c)
		return 0;
	if (c->start_ns >= L.measure_ns && t <= L.end_ns) {
		L.calls++;
		us = (t - c->start_ns) / 1000;
		L.hist[us < HIST_US ? us : HIST_US]++;
		if (c->status == 0 && c->code == 1)
			L.ok++;
		else if (c->status == 0 && c->code == 2)
			L.over++;
		else
			L.errors++;
	}
	free(c);
	if (L.running && submit(s) < 0)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	return 0;
}

static int open_conn(load_conn_t *c, const char *host, int port,
		     nghttp2_session_callbacks *cbs, unsigned streams)
{
	struct sockaddr_in sa;
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
	int one = 1;
	unsigned i;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return -1;
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	fcntl(c->fd, F_SETFL, O_NONBLOCK);
	if (nghttp2_session_client_new(&c->s, cbs, c) != 0 ||
	    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, 1) != 0)
		return -1;
	for (i = 0; i < streams; i++)
		if (submit(c->s) < 0)
			return -1;
	return 0;
}

/* Moves frames out; returns -1 when the connection broke. */
static int pump_out(load_conn_t *c)
{
	for (;;) {
		while (c->outlen < OUT_MAX / 2) {
			const uint8_t *d;
			ssize_t n = nghttp2_session_mem_send(c->s, &d);

			if (n < 0)
				return -1;
			if (n == 0)
				break;
			memcpy(c->out + c->outlen, d, (size_t)n);
			c->outlen += (size_t)n;
		}
		if (!c->outlen)
			return 0;
		ssize_t w = write(c->fd, c->out, c->outlen);

		if (w < 0)
			return errno == EAGAIN ? 0 : -1;
		memmove(c->out, c->out + w, c->outlen - (size_t)w);
		c->outlen -= (size_t)w;
	}
}

static double percentile(double p)
{
	uint64_t want = (uint64_t)(p * (double)L.calls), seen = 0;
	unsigned i;

	for (i = 0; i <= HIST_US; i++) {
		seen += L.hist[i];
		if (seen > want)
			return i / 1000.0;
	}
	return HIST_US / 1000.0;
}

int main(int argc, char **argv)
{
	static load_conn_t conns[MAX_CONNS];
	static uint8_t buf[64 * 1024];
	nghttp2_session_callbacks *cbs;
	struct pollfd pf[MAX_CONNS];
	unsigned nconns, i, warm = argc > 7 ? (unsigned)atoi(argv[7]) : 0;
	uint64_t start;
	double secs;

	if (argc < 7) {
		fprintf(stderr,
			"usage: %s HOST PORT CONNECTIONS STREAMS "
			"SECONDS KEYS [WARMUP_S]\n",
			argv[0]);
		return 2;
	}
	nconns = (unsigned)atoi(argv[3]);
	L.streams = (unsigned)atoi(argv[4]);
	L.keys = (unsigned)atoi(argv[6]);
	if (!nconns || nconns > MAX_CONNS || L.streams < nconns || !L.keys)
		return 2;
	L.hist = calloc(HIST_US + 1, sizeof(*L.hist));
	srandom((unsigned)getpid());
	nghttp2_session_callbacks_new(&cbs);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
	start = now_ns();
	L.measure_ns = start + (uint64_t)warm * 1000000000u;
	L.end_ns = L.measure_ns + (uint64_t)atoi(argv[5]) * 1000000000u;
	L.running = 1;
	for (i = 0; i < nconns; i++)
		if (!L.hist ||
		    open_conn(&conns[i], argv[1], atoi(argv[2]), cbs,
			      L.streams / nconns + (i < L.streams % nconns)) <
			    0) {
			printf("{\"error\": \"cannot connect: %s\"}\n",
			       strerror(errno));
			return 1;
		}
	while (now_ns() < L.end_ns) {
		for (i = 0; i < nconns; i++) {
			if (pump_out(&conns[i]) < 0) {
				printf("{\"error\": \"connection %u broke\"}\n",
				       i);
				return 1;
			}
			pf[i].fd = conns[i].fd;
			pf[i].events = POLLIN | (conns[i].outlen ? POLLOUT : 0);
		}
		if (poll(pf, nconns, 100) < 0)
			continue;
		for (i = 0; i < nconns; i++) {
			ssize_t n;

			if (!(pf[i].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			n = read(conns[i].fd, buf, sizeof(buf));
			if (n == 0 || (n < 0 && errno != EAGAIN) ||
			    (n > 0 &&
			     nghttp2_session_mem_recv(conns[i].s, buf,
						      (size_t)n) < 0)) {
				printf("{\"error\": \"connection %u "
				       "closed\"}\n",
				       i);
				return 1;
			}
		}
	}
	L.running = 0;
	secs = (double)(L.end_ns - L.measure_ns) / 1e9;
	printf("{\"calls\": %llu, \"seconds\": %.1f, \"cps\": %.0f, "
	       "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"ok\": %llu, "
	       "\"over_limit\": %llu, \"errors\": %llu}\n",
	       (unsigned long long)L.calls, secs, (double)L.calls / secs,
	       percentile(0.50), percentile(0.99), (unsigned long long)L.ok,
	       (unsigned long long)L.over, (unsigned long long)L.errors);
	for (i = 0; i < nconns; i++) {
		nghttp2_session_del(conns[i].s);
		close(conns[i].fd);
	}
	nghttp2_session_callbacks_del(cbs);
	free(L.hist);
	return 0;
}
