/*
 * tls_server.c -- TLS on sluice serve's listeners (tls_server.h): the
 * server context from a tls: block's files, kept fresh for every loop
 * thread, and each connection's session over memory BIOs.
 *
 * One context per listener for the whole process, behind a mutex taken
 * once per accept: a renewed certificate is then read once, and a file
 * that cannot be used is logged once, however many threads accept.
 * OpenSSL lets every thread make sessions from one context.
 */
#include "util/tls_server.h"
#include "util/log.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void sluice_tls_server_config_free(sluice_tls_server_config_t *t)
{
	size_t i;

	free(t->cert_file);
	free(t->key_file);
	free(t->client_ca_file);
	for (i = 0; i < t->nclient_sans; i++)
		free(t->client_sans[i]);
	memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------ contexts */

/* ALPN: the context's one protocol (its length-prefixed form is arg);
 * a client that offers others is refused, as gRPC clients require. */
static int select_alpn(SSL *ssl, const unsigned char **out,
		       unsigned char *outlen, const unsigned char *in,
		       unsigned inlen, void *arg)
{
	const unsigned char *proto = arg;

	(void)ssl;
	if (SSL_select_next_proto((unsigned char **)out, outlen, proto,
				  (unsigned)proto[0] + 1, in,
				  inlen) == OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_OK;
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* The first OpenSSL error, for a message. */
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

/* Whether each file t names is a regular file: 0, or -1 with why in err.
 * A FIFO or a device where a renewed file was expected would block the
 * thread that reads it. */
static int files_regular(const sluice_tls_server_config_t *t, const char *what,
			 char *err, size_t errlen)
{
	const char *files[3] = {t->cert_file, t->key_file, t->client_ca_file};
	static const char *const fields[3] = {"cert_file", "key_file",
					      "client_ca_file"};
	struct stat st;
	int i;

	for (i = 0; i < 3; i++) {
		if (!files[i])
			continue;
		if (stat(files[i], &st) < 0) {
			snprintf(err, errlen, "%s.%s %s: %s", what, fields[i],
				 files[i], strerror(errno));
			return -1;
		}
		if (!S_ISREG(st.st_mode)) {
			snprintf(err, errlen, "%s.%s %s: not a regular file",
				 what, fields[i], files[i]);
			return -1;
		}
	}
	return 0;
}

/* A server context with the protocol's settings (and ALPN's alpn), no
 * files yet: NULL with why in err. */
static SSL_CTX *ctx_new(const char *alpn, char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	char why[256];

	if (!ctx) {
		snprintf(err, errlen, "cannot make a TLS context: %s",
			 ssl_error(why, sizeof(why)));
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* A client may not renegotiate (a handshake's cost, again and
	 * again, on one connection). */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
	/* Sessions resume (nginx's proxy_ssl_session_reuse, Envoy) only
	 * with a session id context once client certificates are asked
	 * for: OpenSSL refuses the resumption with an internal error
	 * alert otherwise.  Its value only has to be the same for every
	 * context that may resume the session. */
	SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"sluice", 6);
	if (alpn) {
		/* "h2" as ALPN writes it: its length, then the name; the
		 * string literal lives as long as the program. */
		static const unsigned char h2[] = {2, 'h', '2'};

		if (strcmp(alpn, "h2") != 0) {
			snprintf(err, errlen, "unknown ALPN protocol %s", alpn);
			SSL_CTX_free(ctx);
			return NULL;
		}
		SSL_CTX_set_alpn_select_cb(ctx, select_alpn, (void *)h2);
	}
	return ctx;
}

/* The certificate chain and its key into ctx: 0, or -1 with why in err. */
static int use_cert_key(SSL_CTX *ctx, const sluice_tls_server_config_t *t,
			const char *what, char *err, size_t errlen)
{
	char why[256];

	if (SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1) {
		snprintf(err, errlen, "%s.cert_file %s: %s", what, t->cert_file,
			 ssl_error(why, sizeof(why)));
		return -1;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, t->key_file, SSL_FILETYPE_PEM) !=
		    1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		/* Never the key's content: only where it is. */
		snprintf(err, errlen,
			 "%s.key_file %s: cannot be used with the "
			 "certificate: %s",
			 what, t->key_file, ssl_error(why, sizeof(why)));
		return -1;
	}
	return 0;
}

/* Client certificates required, signed by an authority of
 * t->client_ca_file: 0, or -1 with why in err. */
static int use_client_ca(SSL_CTX *ctx, const sluice_tls_server_config_t *t,
			 const char *what, char *err, size_t errlen)
{
	STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(t->client_ca_file);
	char why[256];

	if (!names ||
	    SSL_CTX_load_verify_locations(ctx, t->client_ca_file, NULL) != 1) {
		sk_X509_NAME_pop_free(names, X509_NAME_free);
		snprintf(err, errlen, "%s.client_ca_file %s: %s", what,
			 t->client_ca_file, ssl_error(why, sizeof(why)));
		return -1;
	}
	SSL_CTX_set_client_CA_list(ctx, names);
	X509_VERIFY_PARAM_set_purpose(SSL_CTX_get0_param(ctx),
				      X509_PURPOSE_SSL_CLIENT);
	SSL_CTX_set_verify(
		ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	return 0;
}

SSL_CTX *sluice_tls_ctx_build(const sluice_tls_server_config_t *t,
			      const char *what, const char *alpn, char *err,
			      size_t errlen)
{
	SSL_CTX *ctx;

	if (files_regular(t, what, err, errlen) < 0 ||
	    !(ctx = ctx_new(alpn, err, errlen)))
		return NULL;
	if (use_cert_key(ctx, t, what, err, errlen) < 0 ||
	    (t->client_ca_file &&
	     use_client_ca(ctx, t, what, err, errlen) < 0)) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

/* What the files are now, names included: a change of any (a renewal
 * renames a new file over the old: another inode) makes another stamp. */
static uint64_t files_stamp(const sluice_tls_server_config_t *t)
{
	const char *files[3] = {t->cert_file, t->key_file, t->client_ca_file};
	uint64_t h = 1469598103934665603ull;
	struct stat st;
	const char *s;
	size_t i, k;

	for (i = 0; i < 3; i++) {
		uint64_t v[4] = {0};

		for (s = files[i]; s && *s; s++)
			h = (h ^ (unsigned char)*s) * 1099511628211ull;
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

void sluice_tls_source_hold(sluice_tls_source_t *src)
{
	pthread_mutex_lock(&src->lock);
	src->users++;
	pthread_mutex_unlock(&src->lock);
}

void sluice_tls_source_drop(sluice_tls_source_t *src)
{
	pthread_mutex_lock(&src->lock);
	if (src->users && --src->users == 0) {
		SSL_CTX_free(src->ctx);
		src->ctx = NULL;
		src->cfg = NULL;
		src->stamp = 0;
	}
	pthread_mutex_unlock(&src->lock);
}

/* The context for t, built again when t is another block (a reload)
 * or its files changed; called under src->lock. */
static SSL_CTX *current_ctx(sluice_tls_source_t *src,
			    const sluice_tls_server_config_t *t,
			    uint64_t now_ms, int *failed)
{
	uint64_t stamp;
	SSL_CTX *ctx;
	char err[512];

	if (t == src->cfg && src->ctx && now_ms - src->checked_ms < 1000)
		return src->ctx;
	src->checked_ms = now_ms;
	stamp = files_stamp(t);
	src->cfg = t;
	if (stamp == src->stamp)
		return src->ctx; /* the files of the last attempt */
	src->stamp = stamp;
	if (!(ctx = sluice_tls_ctx_build(t, src->what, src->alpn, err,
					 sizeof(err)))) {
		/* Logged once: the stamp is this attempt's until the
		 * files change again. */
		sluice_log_error("TLS: %s; %s", err,
				 src->ctx ? "keeping the certificate in use"
					  : "refusing connections");
		*failed = 1;
		return src->ctx;
	}
	if (src->ctx)
		sluice_log_info("%s: certificates loaded again from %s",
				src->what, t->cert_file);
	SSL_CTX_free(src->ctx); /* connections keep their own reference */
	src->ctx = ctx;
	return ctx;
}

SSL *sluice_tls_source_session(sluice_tls_source_t *src,
			       const sluice_tls_server_config_t *t,
			       uint64_t now_ms, int *failed)
{
	SSL_CTX *ctx;
	SSL *ssl = NULL;

	*failed = 0;
	pthread_mutex_lock(&src->lock);
	if ((ctx = current_ctx(src, t, now_ms, failed)))
		ssl = SSL_new(ctx); /* holds ctx: freed with the last */
	pthread_mutex_unlock(&src->lock);
	return ssl;
}

/* --------------------------------------------------------- connections */

int sluice_tls_conn_start(sluice_tls_conn_t *tc, SSL *ssl)
{
	BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());

	if (!rb || !wb) {
		BIO_free(rb);
		BIO_free(wb);
		SSL_free(ssl);
		return -1;
	}
	/* An empty read BIO says "want more", not end of file. */
	BIO_set_mem_eof_return(rb, -1);
	SSL_set_bio(ssl, rb, wb);
	SSL_set_accept_state(ssl);
	tc->ssl = ssl;
	tc->ready = 0;
	return 0;
}

void sluice_tls_conn_free(sluice_tls_conn_t *tc)
{
	SSL_free(tc->ssl);
	tc->ssl = NULL;
	sluice_buf_free(&tc->cipher);
}

/* What OpenSSL wrote moves to tc->cipher, for the front end to send. */
static int drain_wbio(sluice_tls_conn_t *tc)
{
	BIO *wb = SSL_get_wbio(tc->ssl);
	char buf[16384];
	int n;

	while ((n = BIO_read(wb, buf, sizeof(buf))) > 0)
		sluice_buf_append(&tc->cipher, buf, (size_t)n);
	return tc->cipher.oom ? -1 : 0;
}

/* With client_sans: 1 when a name of the client's certificate is on the
 * list (DNS names as X509_check_host matches them, IP addresses). */
static int san_allowed(const sluice_tls_conn_t *tc,
		       const sluice_tls_server_config_t *t)
{
	X509 *peer;
	size_t i;
	int ok = 0;

	if (!t->nclient_sans)
		return 1;
	if (!(peer = SSL_get1_peer_certificate(tc->ssl)))
		return 0;
	for (i = 0; i < t->nclient_sans && !ok; i++)
		ok = X509_check_host(peer, t->client_sans[i], 0,
				     X509_CHECK_FLAG_NEVER_CHECK_SUBJECT,
				     NULL) == 1 ||
		     X509_check_ip_asc(peer, t->client_sans[i], 0) == 1;
	X509_free(peer);
	return ok;
}

int sluice_tls_conn_in(sluice_tls_conn_t *tc,
		       const sluice_tls_server_config_t *t, const uint8_t *p,
		       size_t n, sluice_tls_plain_fn fn, void *arg, char *why,
		       size_t whylen)
{
	uint8_t plain[16384];
	int r, e;

	if (BIO_write(SSL_get_rbio(tc->ssl), p, (int)n) != (int)n)
		return SLUICE_TLS_CLOSED;
	if (!tc->ready) {
		r = SSL_do_handshake(tc->ssl);
		if (r != 1) {
			e = SSL_get_error(tc->ssl, r);
			if (e == SSL_ERROR_WANT_READ ||
			    e == SSL_ERROR_WANT_WRITE)
				return drain_wbio(tc);
			/* Cleartext HTTP on a TLS port: the front end may
			 * tell the client so in words it can read. */
			if (ERR_GET_REASON(ERR_peek_error()) ==
			    SSL_R_HTTP_REQUEST) {
				ERR_clear_error();
				return SLUICE_TLS_PLAINTEXT;
			}
			ssl_error(why, whylen);
			drain_wbio(tc); /* the alert, if any */
			return SLUICE_TLS_HANDSHAKE;
		}
		if (!san_allowed(tc, t))
			return SLUICE_TLS_SAN;
		tc->ready = 1;
	}
	while ((r = SSL_read(tc->ssl, plain, sizeof(plain))) > 0)
		if (fn(arg, plain, (size_t)r))
			return 0;
	e = SSL_get_error(tc->ssl, r);
	if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
		/* The client's close_notify gets ours back (in cipher). */
		if (e == SSL_ERROR_ZERO_RETURN) {
			SSL_shutdown(tc->ssl);
			drain_wbio(tc);
		}
		ERR_clear_error();
		return SLUICE_TLS_CLOSED; /* a close_notify, a broken record */
	}
	return drain_wbio(tc);
}

int sluice_tls_conn_out(sluice_tls_conn_t *tc, sluice_buf_t *plain)
{
	int r;

	if (plain->len && tc->ready) {
		r = SSL_write(tc->ssl, plain->data, (int)plain->len);
		if (r <= 0) {
			ERR_clear_error();
			return -1;
		}
		/* One SSL_write of all of it (no partial writes: the
		 * default mode writes every byte or fails). */
		plain->len = 0;
		if (plain->cap > 65536)
			sluice_buf_free(plain);
	}
	return drain_wbio(tc);
}

void sluice_tls_conn_shutdown(sluice_tls_conn_t *tc)
{
	if (!tc->ssl || !tc->ready)
		return;
	SSL_shutdown(tc->ssl);
	ERR_clear_error();
	drain_wbio(tc);
}
