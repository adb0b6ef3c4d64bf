/*
 * tls.c -- TLS on the gRPC listener (grpc.tls), over memory BIOs: conn.c
 * hands the socket's bytes in (grpc_tls_in) and sends what comes out
 * (c->cipher); the session (session.c) sees only plaintext, as over h2c.
 *
 * Each loop thread keeps its own server context, built from the config's
 * files and built again when the config names other files or when a file
 * changes (looked at on an accept, at most once a second), so a renewed
 * certificate is served without a restart; a context that cannot be built
 * is logged and the previous one kept.  With client_ca_file the client
 * must present a certificate that CA signed (mutual TLS), and with
 * client_sans one of whose names (DNS or IP SANs) is on that list.
 */
#include "grpc/internal.h"
#include "util/log.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ contexts */

/* ALPN: gRPC clients offer "h2" and require it back. */
static int select_alpn(SSL *ssl, const unsigned char **out,
		       unsigned char *outlen, const unsigned char *in,
		       unsigned inlen, void *arg)
{
	static const unsigned char h2[] = {2, 'h', '2'};

	(void)ssl;
	(void)arg;
	if (SSL_select_next_proto((unsigned char **)out, outlen, h2, sizeof(h2),
				  in, inlen) == OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_OK;
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* What the files are now: a change of any makes another stamp. */
static uint64_t files_stamp(const sluice_grpc_tls_config_t *t)
{
	const char *files[3] = {t->cert_file, t->key_file, t->client_ca_file};
	uint64_t h = 1469598103934665603ull;
	struct stat st;
	size_t i, k;

	for (i = 0; i < 3; i++) {
		uint64_t v[4] = {0};

		if (files[i] && stat(files[i], &st) == 0) {
			v[0] = (uint64_t)st.st_ino;
			v[1] = (uint64_t)st.st_size;
			v[2] = (uint64_t)st.st_mtim.tv_sec;
			v[3] = (uint64_t)st.st_mtim.tv_nsec;
		}
		for (k = 0; k < 4; k++)
			h = (h ^ v[k]) * 1099511628211ull;
	}
	return h;
}

/* The first OpenSSL error, for a log line. */
static const char *ssl_error(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();

	if (!e)
		snprintf(buf, len, "unknown error");
	else
		ERR_error_string_n(e, buf, len);
	ERR_clear_error();
	return buf;
}

SSL_CTX *grpc_tls_ctx_build(const sluice_grpc_tls_config_t *t, char *err,
			    size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	char why[256];

	if (!ctx) {
		snprintf(err, errlen, "cannot make a TLS context: %s",
			 ssl_error(why, sizeof(why)));
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
	if (SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1) {
		snprintf(err, errlen, "grpc.tls.cert_file %s: %s", t->cert_file,
			 ssl_error(why, sizeof(why)));
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, t->key_file, SSL_FILETYPE_PEM) !=
		    1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		/* Never the key's content: only where it is. */
		snprintf(err, errlen,
			 "grpc.tls.key_file %s: cannot be used with the "
			 "certificate: %s",
			 t->key_file, ssl_error(why, sizeof(why)));
		goto fail;
	}
	if (t->client_ca_file) {
		STACK_OF(X509_NAME) *names =
			SSL_load_client_CA_file(t->client_ca_file);

		if (!names || SSL_CTX_load_verify_locations(
				      ctx, t->client_ca_file, NULL) != 1) {
			sk_X509_NAME_pop_free(names, X509_NAME_free);
			snprintf(err, errlen, "grpc.tls.client_ca_file %s: %s",
				 t->client_ca_file,
				 ssl_error(why, sizeof(why)));
			goto fail;
		}
		SSL_CTX_set_client_CA_list(ctx, names);
		X509_VERIFY_PARAM_set_purpose(SSL_CTX_get0_param(ctx),
					      X509_PURPOSE_SSL_CLIENT);
		SSL_CTX_set_verify(
			ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
			NULL);
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* This thread's context for the running config: rebuilt when the config
 * or a file changed; NULL when there has never been a good one. */
static SSL_CTX *current_ctx(sluice_grpc_t *g)
{
	const sluice_grpc_tls_config_t *t = &g->svc->live->cfg->grpc.tls;
	uint64_t now = uv_now(g->loop), stamp;
	SSL_CTX *ctx;
	char err[512];

	if (t == g->tls_cfg && g->tls_ctx && now - g->tls_checked_ms < 1000)
		return g->tls_ctx;
	g->tls_checked_ms = now;
	stamp = files_stamp(t);
	if (t == g->tls_cfg && g->tls_ctx && stamp == g->tls_stamp)
		return g->tls_ctx;
	if (!(ctx = grpc_tls_ctx_build(t, err, sizeof(err)))) {
		sluice_log_error("grpc: TLS: %s; %s", err,
				 g->tls_ctx ? "keeping the certificate in use"
					    : "refusing connections");
		g->tls_cfg = t;
		g->tls_stamp = stamp;
		return g->tls_ctx;
	}
	if (g->tls_ctx)
		sluice_log_info("grpc: TLS certificates loaded again from %s",
				t->cert_file);
	SSL_CTX_free(g->tls_ctx); /* connections keep their own reference */
	g->tls_ctx = ctx;
	g->tls_cfg = t;
	g->tls_stamp = stamp;
	return ctx;
}

void grpc_tls_release(sluice_grpc_t *g)
{
	SSL_CTX_free(g->tls_ctx);
	g->tls_ctx = NULL;
}

/* --------------------------------------------------------- connections */

int grpc_tls_start(grpc_conn_t *c)
{
	SSL_CTX *ctx = current_ctx(c->g);
	BIO *rb, *wb;

	if (!ctx || !(c->ssl = SSL_new(ctx)))
		return -1;
	rb = BIO_new(BIO_s_mem());
	wb = BIO_new(BIO_s_mem());
	if (!rb || !wb) {
		BIO_free(rb);
		BIO_free(wb);
		SSL_free(c->ssl);
		c->ssl = NULL;
		return -1;
	}
	BIO_set_mem_eof_return(rb, -1);
	SSL_set_bio(c->ssl, rb, wb);
	SSL_set_accept_state(c->ssl);
	return 0;
}

void grpc_tls_free(grpc_conn_t *c)
{
	SSL_free(c->ssl);
	c->ssl = NULL;
	sluice_buf_free(&c->cipher);
}

/* What OpenSSL wrote moves to c->cipher, for conn.c to send. */
static int drain_wbio(grpc_conn_t *c)
{
	BIO *wb = SSL_get_wbio(c->ssl);
	char buf[16384];
	int n;

	while ((n = BIO_read(wb, buf, sizeof(buf))) > 0)
		sluice_buf_append(&c->cipher, buf, (size_t)n);
	return c->cipher.oom ? -1 : 0;
}

/* With client_sans: 1 when a name of the client's certificate is on the
 * list (DNS names as X509_check_host matches them, IP addresses). */
static int san_allowed(const grpc_conn_t *c)
{
	const sluice_grpc_tls_config_t *t = &c->g->svc->live->cfg->grpc.tls;
	X509 *peer;
	size_t i;
	int ok = 0;

	if (!t->nclient_sans)
		return 1;
	if (!(peer = SSL_get1_peer_certificate(c->ssl)))
		return 0;
	for (i = 0; i < t->nclient_sans && !ok; i++)
		ok = X509_check_host(peer, t->client_sans[i], 0,
				     X509_CHECK_FLAG_NEVER_CHECK_SUBJECT,
				     NULL) == 1 ||
		     X509_check_ip_asc(peer, t->client_sans[i], 0) == 1;
	X509_free(peer);
	return ok;
}

int grpc_tls_in(grpc_conn_t *c, const uint8_t *p, size_t n)
{
	char peer[96], why[256];
	uint8_t plain[16384];
	int r, e;

	if (BIO_write(SSL_get_rbio(c->ssl), p, (int)n) != (int)n)
		return -1;
	if (!c->tls_ready) {
		r = SSL_do_handshake(c->ssl);
		if (r != 1) {
			e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_READ ||
			    e == SSL_ERROR_WANT_WRITE)
				return drain_wbio(c);
			c->io->peer(c, peer, sizeof(peer));
			sluice_log_warn("grpc: TLS handshake with %s failed: "
					"%s",
					peer, ssl_error(why, sizeof(why)));
			drain_wbio(c); /* the alert, if any */
			return -1;
		}
		if (!san_allowed(c)) {
			c->io->peer(c, peer, sizeof(peer));
			sluice_log_warn("grpc: TLS client %s refused: its "
					"certificate names none of "
					"grpc.tls.client_sans",
					peer);
			return -1;
		}
		c->tls_ready = 1;
	}
	while ((r = SSL_read(c->ssl, plain, sizeof(plain))) > 0) {
		grpc_conn_feed(c, plain, (size_t)r);
		if (c->closing)
			return 0;
	}
	e = SSL_get_error(c->ssl, r);
	if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
		ERR_clear_error();
		return -1; /* a close_notify or a broken record */
	}
	return drain_wbio(c);
}

int grpc_tls_out(grpc_conn_t *c)
{
	int r;

	if (c->out.len && c->tls_ready) {
		r = SSL_write(c->ssl, c->out.data, (int)c->out.len);
		if (r <= 0) {
			ERR_clear_error();
			return -1;
		}
		/* One SSL_write of all of it (no partial writes: the
		 * default mode writes every byte or fails). */
		c->out.len = 0;
		if (c->out.cap > 65536)
			sluice_buf_free(&c->out);
	}
	return drain_wbio(c);
}

int sluice_grpc_tls_check(const sluice_config_t *cfg, char *err, size_t errlen)
{
	SSL_CTX *ctx;

	if (!cfg->grpc.tls.cert_file)
		return 0;
	if (!(ctx = grpc_tls_ctx_build(&cfg->grpc.tls, err, errlen)))
		return -1;
	SSL_CTX_free(ctx);
	return 0;
}
