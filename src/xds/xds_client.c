/*
 * xds_client.c -- the xDS stream (xds.h): a thread that connects to the
 * control plane, speaks gRPC over HTTP/2 (nghttp2, client side; TLS by
 * OpenSSL, with a client certificate for mTLS), keeps one
 * StreamAggregatedResources call open, and hands each DiscoveryResponse
 * to the main loop to apply.
 *
 * One thread with blocking waits (poll() over the socket and a wake-up
 * pipe) rather than the main loop: the control plane's traffic is a few
 * messages a minute, and a connect, a TLS handshake or a slow peer never
 * holds up the loop that reloads and serves the admin endpoints.
 */
#include "sluice.h"
#include "util/log.h"
#include "xds/xds.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
#define CONNECT_MS     10000 /* connect and TLS handshake */
/* A control plane silent this long is sent a PING; silent twice as long,
 * it is taken for gone (a peer that vanished without closing). */
#define IDLE_PING_MS 30000

/* ------------------------------------------------------------- metrics */

static atomic_int started, connected;
static atomic_ullong accepted, rejected, failures;

int sluice_xds_waiting(void)
{
	return sluice_envoy_xds_pending();
}

void sluice_xds_metrics_render(sluice_buf_t *out)
{
	if (!atomic_load(&started))
		return;
	sluice_buf_printf(
		out,
		"# HELP sluice_envoy_xds_updates_total xDS responses by "
		"result: accepted (applied, ACKed) or rejected (NACKed, the "
		"running config kept).\n"
		"# TYPE sluice_envoy_xds_updates_total counter\n"
		"sluice_envoy_xds_updates_total{result=\"accepted\"} %llu\n"
		"sluice_envoy_xds_updates_total{result=\"rejected\"} %llu\n"
		"# HELP sluice_envoy_xds_connected 1 while the stream to the "
		"xDS control plane is up.\n"
		"# TYPE sluice_envoy_xds_connected gauge\n"
		"sluice_envoy_xds_connected %d\n"
		"# HELP sluice_envoy_xds_errors_total Connections to the xDS "
		"control plane that failed or were lost.\n"
		"# TYPE sluice_envoy_xds_errors_total counter\n"
		"sluice_envoy_xds_errors_total %llu\n"
		"# HELP sluice_envoy_xds_waiting 1 until the first config "
		"from the control plane is accepted (/readyz is 503).\n"
		"# TYPE sluice_envoy_xds_waiting gauge\n"
		"sluice_envoy_xds_waiting %d\n",
		(unsigned long long)atomic_load(&accepted),
		(unsigned long long)atomic_load(&rejected),
		atomic_load(&connected),
		(unsigned long long)atomic_load(&failures),
		sluice_envoy_xds_pending());
}

/* ------------------------------------------------------------ the state */

/* A response waiting for the main loop's verdict. */
typedef struct job_s {
	sluice_envoy_text_t *texts;
	size_t n;
	int rc;
	int done;
	char err[1024];
} job_t;

struct sluice_xds_s {
	sluice_envoy_xds_t *cfg;
	sluice_xds_apply_fn apply;
	void *arg;
	uv_async_t async;
	pthread_t thread;
	int wake[2];
	atomic_int stop;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	job_t *job;
	SSL_CTX *ctx;
	/* The connection (the thread's alone). */
	int fd;
	SSL *ssl;
	nghttp2_session *h2;
	int32_t stream;
	int closed;	   /* the stream ended */
	sluice_buf_t in;   /* the response stream's bytes */
	sluice_buf_t body; /* request bytes for nghttp2 */
	sluice_buf_t wire; /* bytes nghttp2 gave, not yet sent */
	char *version;	   /* the last accepted version_info */
	int responses;	   /* this connection's */
	char why[512];	   /* how the connection ended */
	int state;	   /* logged: 0 none, 1 up, 2 down */
	int said_no;	   /* this call was answered with an error status */
	int refused;	   /* the last said no before any response */
	unsigned rnd;
};

static void fail(sluice_xds_t *x, const char *fmt, const char *a)
{
	if (!x->why[0])
		snprintf(x->why, sizeof(x->why), fmt, a ? a : "");
}

static const char *ssl_error(void)
{
	static _Thread_local char buf[256];
	unsigned long e = ERR_get_error();

	ERR_clear_error();
	if (!e)
		return "connection closed";
	ERR_error_string_n(e, buf, sizeof(buf));
	return buf;
}

/* Waits for the socket (events) or the wake-up pipe; 1 ready, 0 timed
 * out, -1 stopping. */
static int wait_fd(sluice_xds_t *x, int fd, short events, int ms)
{
	struct pollfd p[2] = {{.fd = x->wake[0], .events = POLLIN},
			      {.fd = fd, .events = events}};
	int r;

	if (atomic_load(&x->stop))
		return -1;
	do
		r = poll(p, fd >= 0 ? 2 : 1, ms);
	while (r < 0 && errno == EINTR);
	if (atomic_load(&x->stop) || (p[0].revents & POLLIN))
		return -1;
	return r > 0 ? 1 : 0;
}

/* ------------------------------------------------------------ transport */

static int dial(sluice_xds_t *x)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	int r, fd = -1, soerr;
	socklen_t sl = sizeof(soerr);

	if ((r = getaddrinfo(x->cfg->host, x->cfg->port, &hints, &res)) != 0) {
		fail(x, "cannot resolve it: %s", gai_strerror(r));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
			    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
		    (errno == EINPROGRESS &&
		     wait_fd(x, fd, POLLOUT, CONNECT_MS) == 1 &&
		     getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
		     soerr == 0))
			break;
		if (errno == EINPROGRESS)
			errno = ETIMEDOUT;
		if (soerr)
			errno = soerr;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		fail(x, "cannot connect: %s", strerror(errno));
	x->fd = fd;
	return fd < 0 ? -1 : 0;
}

static int handshake(sluice_xds_t *x)
{
	const char *name =
		x->cfg->server_name ? x->cfg->server_name : x->cfg->host;
	X509_VERIFY_PARAM *vp;
	long v;
	int r;

	if (!(x->ssl = SSL_new(x->ctx)) || !SSL_set_fd(x->ssl, x->fd)) {
		fail(x, "TLS: %s", ssl_error());
		return -1;
	}
	vp = SSL_get0_param(x->ssl);
	/* An address is checked against the certificate's IP SANs. */
	if (X509_VERIFY_PARAM_set1_ip_asc(vp, name) != 1) {
		SSL_set_tlsext_host_name(x->ssl, name);
		SSL_set1_host(x->ssl, name);
	}
	ERR_clear_error();
	for (;;) {
		r = SSL_connect(x->ssl);
		if (r == 1)
			return 0;
		r = SSL_get_error(x->ssl, r);
		if (r != SSL_ERROR_WANT_READ && r != SSL_ERROR_WANT_WRITE)
			break;
		if (wait_fd(x, x->fd,
			    r == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
			    CONNECT_MS) != 1) {
			fail(x, "TLS handshake timed out%s", NULL);
			return -1;
		}
	}
	v = SSL_get_verify_result(x->ssl);
	if (v != X509_V_OK)
		fail(x, "TLS: the server's certificate: %s",
		     X509_verify_cert_error_string(v));
	else
		fail(x, "TLS handshake failed: %s", ssl_error());
	return -1;
}

/* >0 bytes, 0 closed, -2 try later, -1 error. */
static ssize_t io_recv(sluice_xds_t *x, void *buf, size_t n)
{
	ssize_t r;

	if (x->ssl) {
		int e;

		ERR_clear_error();
		r = SSL_read(x->ssl, buf, (int)n);
		if (r > 0)
			return r;
		e = SSL_get_error(x->ssl, (int)r);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
			return -2;
		if (e == SSL_ERROR_ZERO_RETURN)
			return 0;
		fail(x, "TLS: %s", ssl_error());
		return -1;
	}
	r = recv(x->fd, buf, n, 0);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return -2;
	if (r < 0)
		fail(x, "read: %s", strerror(errno));
	return r;
}

static ssize_t io_send(sluice_xds_t *x, const void *buf, size_t n)
{
	ssize_t r;

	if (x->ssl) {
		int e;

		ERR_clear_error();
		r = SSL_write(x->ssl, buf, (int)n);
		if (r > 0)
			return r;
		e = SSL_get_error(x->ssl, (int)r);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
			return -2;
		fail(x, "TLS: %s", ssl_error());
		return -1;
	}
	r = send(x->fd, buf, n, MSG_NOSIGNAL);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return -2;
	if (r < 0)
		fail(x, "write: %s", strerror(errno));
	return r;
}

/* Sends what nghttp2 has; 0, or -1 on a broken connection. */
static int pump_out(sluice_xds_t *x)
{
	const uint8_t *p;
	ssize_t n;

	for (;;) {
		if (!x->wire.len) {
			n = nghttp2_session_mem_send(x->h2, &p);
			if (n < 0) {
				fail(x, "HTTP/2: %s", nghttp2_strerror((int)n));
				return -1;
			}
			if (n == 0)
				return 0;
			sluice_buf_append(&x->wire, p, (size_t)n);
			if (x->wire.oom) {
				fail(x, "out of memory%s", NULL);
				return -1;
			}
		}
		n = io_send(x, x->wire.data, x->wire.len);
		if (n == -2)
			return 0;
		if (n < 0)
			return -1;
		sluice_buf_consume(&x->wire, (size_t)n);
	}
}

/* --------------------------------------------------------- the gRPC call */

static ssize_t on_read_body(nghttp2_session *s, int32_t id, uint8_t *buf,
			    size_t len, uint32_t *flags,
			    nghttp2_data_source *src, void *arg)
{
	sluice_xds_t *x = arg;
	size_t n = x->body.len < len ? x->body.len : len;

	if (!n)
		return NGHTTP2_ERR_DEFERRED; /* the stream stays open */
	memcpy(buf, x->body.data, n);
	sluice_buf_consume(&x->body, n);
	return (ssize_t)n;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id,
		   const uint8_t *data, size_t len, void *arg)
{
	sluice_xds_t *x = arg;

	if (id != x->stream)
		return 0;
	if (x->in.len + len > SLUICE_XDS_MAX_MSG + 5 + 65536) {
		fail(x, "a response larger than the %s limit", "4 MiB");
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	sluice_buf_append(&x->in, data, len);
	return x->in.oom ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f,
		     const uint8_t *name, size_t nlen, const uint8_t *value,
		     size_t vlen, uint8_t flags, void *arg)
{
	sluice_xds_t *x = arg;

	if (f->hd.stream_id != x->stream)
		return 0;
	if ((nlen == 11 && !memcmp(name, "grpc-status", 11) &&
	     !(vlen == 1 && value[0] == '0')) ||
	    (nlen == 7 && !memcmp(name, ":status", 7) &&
	     !(vlen == 3 && !memcmp(value, "200", 3)))) {
		char v[200];

		snprintf(v, sizeof(v), "%.*s %.*s%s", (int)nlen, name,
			 (int)(vlen < 150 ? vlen : 150), value,
			 vlen == 2 && !memcmp(value, "16", 2)
				 ? " (unauthenticated: see envoy.xds.headers)"
				 : "");
		fail(x, "the server answered %s", v);
		x->said_no = 1;
	}
	return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *arg)
{
	sluice_xds_t *x = arg;

	if (id == x->stream) {
		x->closed = 1;
		fail(x, "the server ended the stream%s", NULL);
	}
	return 0;
}

static int queue(sluice_xds_t *x, const char *nonce, const char *error)
{
	size_t n;
	uint8_t *m = sluice_xds_request(x->cfg, x->version, nonce, error, &n);

	if (!m)
		return -1;
	sluice_buf_append(&x->body, m, n);
	free(m);
	if (x->body.oom)
		return -1;
	if (x->stream > 0)
		nghttp2_session_resume_data(x->h2, x->stream);
	return 0;
}

static int open_call(sluice_xds_t *x)
{
	const char *names[SLUICE_XDS_CALL_HEADERS];
	const char *values[SLUICE_XDS_CALL_HEADERS];
	nghttp2_nv hdrs[SLUICE_XDS_CALL_HEADERS];
	size_t i, n = sluice_xds_call_headers(x->cfg, names, values);
	nghttp2_session_callbacks *cb;
	nghttp2_data_provider body = {.read_callback = on_read_body};

	if (nghttp2_session_callbacks_new(&cb) != 0)
		return -1;
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
	if (nghttp2_session_client_new(&x->h2, cb, x) != 0) {
		nghttp2_session_callbacks_del(cb);
		return -1;
	}
	nghttp2_session_callbacks_del(cb);
	if (nghttp2_submit_settings(x->h2, NGHTTP2_FLAG_NONE, NULL, 0) != 0 ||
	    queue(x, "", NULL) < 0)
		return -1;
	for (i = 0; i < n; i++) /* copied by nghttp2 */
		hdrs[i] = (nghttp2_nv){(uint8_t *)names[i],
				       (uint8_t *)values[i], strlen(names[i]),
				       strlen(values[i]), NGHTTP2_NV_FLAG_NONE};
	x->stream = nghttp2_submit_request(x->h2, NULL, hdrs, n, &body, x);
	return x->stream > 0 ? 0 : -1;
}

/* ------------------------------------------------------------ responses */

/* Hands the resources to the main loop and waits for its verdict. */
static int apply(sluice_xds_t *x, sluice_xds_response_t *r, char *err,
		 size_t errlen)
{
	job_t job = {.texts = r->texts, .n = r->ntexts};

	r->texts = NULL; /* the main loop's now */
	r->ntexts = 0;
	pthread_mutex_lock(&x->mu);
	x->job = &job;
	pthread_mutex_unlock(&x->mu);
	uv_async_send(&x->async);
	pthread_mutex_lock(&x->mu);
	while (!job.done && !atomic_load(&x->stop))
		pthread_cond_wait(&x->cv, &x->mu);
	if (!job.done) { /* stopping: never taken */
		x->job = NULL;
		pthread_mutex_unlock(&x->mu);
		sluice_envoy_texts_free(job.texts, job.n);
		return -2;
	}
	pthread_mutex_unlock(&x->mu);
	snprintf(err, errlen, "%s", job.err);
	return job.rc;
}

static void on_async(uv_async_t *a)
{
	sluice_xds_t *x = a->data;
	job_t *job;

	pthread_mutex_lock(&x->mu);
	job = x->job;
	x->job = NULL;
	pthread_mutex_unlock(&x->mu);
	if (!job)
		return;
	job->rc = x->apply(x->arg, job->texts, job->n, job->err,
			   sizeof(job->err));
	job->texts = NULL;
	pthread_mutex_lock(&x->mu);
	job->done = 1;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
}

/* One DiscoveryResponse: applied and ACKed, or NACKed.  -1 ends the
 * connection. */
static int handle(sluice_xds_t *x, const uint8_t *msg, size_t len)
{
	sluice_xds_response_t r;
	char err[1024];
	int rc;

	rc = sluice_xds_decode(msg, len, &r, err, sizeof(err));
	if (rc == 0)
		rc = apply(x, &r, err, sizeof(err));
	if (rc == -2) {
		sluice_xds_response_free(&r);
		return -1;
	}
	x->responses++;
	if (rc == 0) {
		free(x->version);
		x->version = r.version;
		r.version = NULL;
		atomic_fetch_add(&accepted, 1);
		sluice_envoy_xds_set_pending(0);
		sluice_log_info("envoy.xds: applied version \"%.100s\" from "
				"%s",
				x->version ? x->version : "", x->cfg->server);
	} else {
		atomic_fetch_add(&rejected, 1);
		sluice_log_error("envoy.xds: rejected version \"%.100s\" "
				 "from %s, keeping the running config: %s",
				 r.version ? r.version : "", x->cfg->server,
				 err);
	}
	rc = queue(x, r.nonce ? r.nonce : "", rc == 0 ? NULL : err);
	sluice_xds_response_free(&r);
	return rc;
}

/* Each whole gRPC message in x->in; -1 ends the connection. */
static int drain_in(sluice_xds_t *x)
{
	while (x->in.len >= 5) {
		const uint8_t *p = (const uint8_t *)x->in.data;
		uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 |
			     (uint32_t)p[3] << 8 | p[4];

		if (p[0] != 0) {
			fail(x, "a compressed response (not asked for)%s",
			     NULL);
			return -1;
		}
		if (n > SLUICE_XDS_MAX_MSG) {
			fail(x, "a response larger than the %s limit", "4 MiB");
			return -1;
		}
		if (x->in.len < 5 + (size_t)n)
			return 0;
		if (handle(x, p + 5, n) < 0)
			return -1;
		sluice_buf_consume(&x->in, 5 + (size_t)n);
	}
	return 0;
}

/* ------------------------------------------------------ the connection */

static void set_state(sluice_xds_t *x, int up)
{
	atomic_store(&connected, up);
	if (up && x->state != 1)
		sluice_log_info("envoy.xds: connected to %s (node %s)",
				x->cfg->server, x->cfg->node_id);
	else if (!up && x->state != 2)
		sluice_log_warn("envoy.xds: %s: %s; trying again with "
				"backoff, serving the last config meanwhile",
				x->cfg->server, x->why);
	x->state = up ? 1 : 2;
}

static void hang_up(sluice_xds_t *x)
{
	if (x->h2)
		nghttp2_session_del(x->h2);
	x->h2 = NULL;
	if (x->ssl)
		SSL_free(x->ssl);
	x->ssl = NULL;
	if (x->fd >= 0)
		close(x->fd);
	x->fd = -1;
	x->stream = 0;
	x->closed = 0;
	x->in.len = x->body.len = x->wire.len = 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static SSL_CTX *make_ctx(const sluice_envoy_xds_t *c, char *err, size_t errlen)
{
	static const unsigned char alpn[] = "\x02h2";
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

	if (!ctx)
		goto bad;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
				      SSL_MODE_ENABLE_PARTIAL_WRITE);
	if ((c->ca_file ? SSL_CTX_load_verify_locations(ctx, c->ca_file, NULL)
			: SSL_CTX_set_default_verify_paths(ctx)) != 1)
		goto bad;
	if (c->cert_file &&
	    (SSL_CTX_use_certificate_chain_file(ctx, c->cert_file) != 1 ||
	     SSL_CTX_use_PrivateKey_file(ctx, c->key_file, SSL_FILETYPE_PEM) !=
		     1 ||
	     SSL_CTX_check_private_key(ctx) != 1))
		goto bad;
	SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1);
	return ctx;
bad:
	snprintf(err, errlen, "%s%senvoy.xds.tls: %s", c->where ? c->where : "",
		 c->where ? ": " : "", ssl_error());
	SSL_CTX_free(ctx);
	return NULL;
}

/* The TLS files as they are now, for each connection: renewed ones
 * (cert-manager, a Secret's update) are used without a reload. */
static int renew_ctx(sluice_xds_t *x)
{
	char err[512];
	SSL_CTX *ctx = make_ctx(x->cfg, err, sizeof(err));

	if (!ctx) {
		fail(x, "%s", err);
		return -1;
	}
	SSL_CTX_free(x->ctx);
	x->ctx = ctx;
	return 0;
}

/* One connection, until it ends; returns the responses it carried. */
static int session(sluice_xds_t *x)
{
	uint8_t buf[16384];
	uint64_t heard = now_ms(), pinged = 0;
	ssize_t n;
	int r, up = 0;

	x->why[0] = '\0';
	x->responses = x->said_no = 0;
	if ((x->cfg->tls && renew_ctx(x) < 0) || dial(x) < 0 ||
	    (x->ctx && handshake(x) < 0) || open_call(x) < 0)
		goto out;
	while (!atomic_load(&x->stop)) {
		if (pump_out(x) < 0)
			break;
		r = wait_fd(x, x->fd, POLLIN | (x->wire.len ? POLLOUT : 0),
			    1000);
		if (r < 0)
			break;
		if (now_ms() - heard >= 2 * IDLE_PING_MS) {
			fail(x, "no answer to a PING%s", NULL);
			break;
		}
		if (now_ms() - heard >= IDLE_PING_MS && pinged <= heard) {
			nghttp2_submit_ping(x->h2, NGHTTP2_FLAG_NONE, NULL);
			pinged = now_ms();
		}
		while ((n = io_recv(x, buf, sizeof(buf))) > 0) {
			heard = now_ms();
			if (nghttp2_session_mem_recv(x->h2, buf, (size_t)n) <
			    0) {
				fail(x, "HTTP/2: a protocol error%s", NULL);
				goto out;
			}
			if (drain_in(x) < 0)
				goto out;
			/* Connected once the server's first frames came; once
			 * a response came after calls it refused (each retry
			 * refused is one state, logged once). */
			if (!up && (!x->refused || x->responses))
				set_state(x, up = 1);
		}
		if (n == 0 || n == -1) {
			fail(x, "the server closed the connection%s", NULL);
			break;
		}
		if (x->closed)
			break;
	}
out:
	x->refused = !x->responses && (x->said_no || x->refused);
	if (!atomic_load(&x->stop)) {
		fail(x, "the stream ended%s", NULL);
		atomic_fetch_add(&failures, 1);
		set_state(x, 0);
	}
	hang_up(x);
	return x->responses;
}

static void *run(void *arg)
{
	sluice_xds_t *x = arg;
	unsigned delay = BACKOFF_MIN_MS, ms;

	while (!atomic_load(&x->stop)) {
		if (session(x) > 0)
			delay = BACKOFF_MIN_MS;
		/* Jitter: somewhere in the upper half of the delay. */
		x->rnd = x->rnd * 1103515245u + 12345u;
		ms = delay / 2 + (x->rnd >> 8) % (delay / 2 + 1);
		if (wait_fd(x, -1, 0, (int)ms) < 0)
			break;
		delay = delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2;
	}
	return NULL;
}

/* ------------------------------------------------------------ lifetime */

int sluice_xds_check(const sluice_envoy_xds_t *cfg, char *err, size_t errlen)
{
	SSL_CTX *ctx = cfg && cfg->tls ? make_ctx(cfg, err, errlen) : NULL;

	SSL_CTX_free(ctx);
	return cfg && cfg->tls && !ctx ? -1 : 0;
}

const sluice_envoy_xds_t *sluice_xds_config(const sluice_xds_t *x)
{
	return x ? x->cfg : NULL;
}

sluice_xds_t *sluice_xds_start(uv_loop_t *loop, const sluice_envoy_xds_t *cfg,
			       sluice_xds_apply_fn apply_fn, void *arg,
			       char *err, size_t errlen)
{
	sluice_xds_t *x = calloc(1, sizeof(*x));

	if (!x || !(x->cfg = sluice_envoy_xds_copy(cfg))) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	x->fd = -1;
	x->wake[0] = x->wake[1] = -1;
	x->apply = apply_fn;
	x->arg = arg;
	x->rnd = (unsigned)time(NULL) ^ (unsigned)getpid();
	if (cfg->tls && !(x->ctx = make_ctx(cfg, err, errlen)))
		goto fail;
	if (pipe2(x->wake, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		goto fail;
	}
	pthread_mutex_init(&x->mu, NULL);
	pthread_cond_init(&x->cv, NULL);
	uv_async_init(loop, &x->async, on_async);
	x->async.data = x;
	atomic_store(&started, 1);
	sluice_envoy_xds_set_pending(1);
	if (pthread_create(&x->thread, NULL, run, x) != 0) {
		snprintf(err, errlen, "cannot start the xDS thread");
		x->thread = 0;
		sluice_xds_stop(x);
		return NULL;
	}
	return x;
fail:
	if (x) {
		SSL_CTX_free(x->ctx);
		sluice_envoy_xds_free(x->cfg);
		free(x);
	}
	return NULL;
}

static void on_closed(uv_handle_t *h)
{
	sluice_xds_t *x = h->data;

	sluice_buf_free(&x->in);
	sluice_buf_free(&x->body);
	sluice_buf_free(&x->wire);
	free(x->version);
	SSL_CTX_free(x->ctx);
	sluice_envoy_xds_free(x->cfg);
	free(x);
}

void sluice_xds_stop(sluice_xds_t *x)
{
	if (!x)
		return;
	atomic_store(&x->stop, 1);
	if (write(x->wake[1], "x", 1) < 0) {
		/* the pipe is full or gone: the stop flag is seen anyway */
	}
	pthread_mutex_lock(&x->mu);
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
	if (x->thread)
		pthread_join(x->thread, NULL);
	x->job = NULL;
	close(x->wake[0]);
	close(x->wake[1]);
	pthread_mutex_destroy(&x->mu);
	pthread_cond_destroy(&x->cv);
	sluice_envoy_xds_set_pending(0);
	atomic_store(&connected, 0);
	uv_close((uv_handle_t *)&x->async, on_closed);
}
