/*
 * tls.c -- TLS for the Redis links, with OpenSSL.
 *
 * The context holds what every connection shares: the CA store (a file,
 * or the system's), the client certificate for mutual TLS, and whether
 * the server's certificate is verified (by default it is, host name
 * included).  A session runs over two memory BIOs: link.c feeds it the
 * bytes read from the socket and writes out what it produces, so the
 * socket stays libuv's and TLS never blocks or touches a file descriptor.
 */
#include "store/redis/tls.h"
#include "util/errmsg.h"
#include "util/file.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sluice_redis_tls_session_s {
	SSL *ssl;
	BIO *in;  /* ciphertext from the socket */
	BIO *out; /* ciphertext for the socket */
};

/* OpenSSL's reason for the last failure, queue cleared. */
static void tls_reason(char *buf, size_t len)
{
	unsigned long e = ERR_get_error(), next;

	if (!e) {
		snprintf(buf, len, "unknown TLS error");
		return;
	}
	/* The first error is the root cause; drop the rest. */
	while ((next = ERR_get_error()))
		(void)next;
	ERR_error_string_n(e, buf, len);
}

/* ------------------------------------------------------------- context */

/* The most a CA bundle, a certificate chain or a key file may hold. */
#define TLS_FILE_MAX (4u << 20)

/*
 * Reads a TLS file the one way every file is read (util/file.h: without
 * blocking, a regular file owned by this user or root) into a memory BIO,
 * so OpenSSL never opens the path itself: a file swapped for a FIFO or
 * another user's file after the config was checked is refused here too.
 * NULL with why set when refused; the caller frees with tls_file_free().
 */
static BIO *tls_file(const char *path, char **buf, size_t *len, char *why,
		     size_t whylen)
{
	BIO *b;

	*buf = NULL;
	if (sluice_file_read(path, TLS_FILE_MAX, SLUICE_FILE_OWNED, buf, len,
			     NULL, why, whylen) != 0)
		return NULL;
	if (*len > INT32_MAX || !(b = BIO_new_mem_buf(*buf, (int)*len))) {
		snprintf(why, whylen, "out of memory");
		OPENSSL_clear_free(*buf, *len);
		*buf = NULL;
		return NULL;
	}
	return b;
}

static void tls_file_free(BIO *b, char *buf, size_t len)
{
	BIO_free(b);
	if (buf)
		OPENSSL_cleanse(buf, len);
	free(buf);
}

/* Every certificate (and CRL) of a PEM bundle into the context's store. */
static int load_ca(SSL_CTX *ctx, BIO *b)
{
	STACK_OF(X509_INFO) *infos =
		PEM_X509_INFO_read_bio(b, NULL, NULL, NULL);
	X509_STORE *store = SSL_CTX_get_cert_store(ctx);
	int i, n = 0, ok = 1;

	if (!infos)
		return 0;
	for (i = 0; ok && i < sk_X509_INFO_num(infos); i++) {
		X509_INFO *info = sk_X509_INFO_value(infos, i);

		if (info->x509) {
			ok = X509_STORE_add_cert(store, info->x509) == 1;
			n++;
		}
		if (ok && info->crl) {
			ok = X509_STORE_add_crl(store, info->crl) == 1;
			n++;
		}
	}
	sk_X509_INFO_pop_free(infos, X509_INFO_free);
	if (ok && n == 0)
		ERR_raise(ERR_LIB_PEM, PEM_R_NO_START_LINE);
	return ok && n > 0;
}

/* The first certificate of a PEM file as the client's, the rest as its
 * chain (what SSL_CTX_use_certificate_chain_file() does with a path). */
static int load_chain(SSL_CTX *ctx, BIO *b)
{
	X509 *x = PEM_read_bio_X509_AUX(b, NULL, NULL, NULL);
	unsigned long e;

	if (!x || SSL_CTX_use_certificate(ctx, x) != 1) {
		X509_free(x);
		return 0;
	}
	X509_free(x);
	SSL_CTX_clear_chain_certs(ctx);
	while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL))) {
		if (SSL_CTX_add0_chain_cert(ctx, x) != 1) {
			X509_free(x);
			return 0;
		}
	}
	/* The end of the file is the one error expected here. */
	e = ERR_peek_last_error();
	if (ERR_GET_LIB(e) == ERR_LIB_PEM &&
	    ERR_GET_REASON(e) == PEM_R_NO_START_LINE) {
		ERR_clear_error();
		return 1;
	}
	return 0;
}

static int load_key(SSL_CTX *ctx, BIO *b)
{
	EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
	int ok = k && SSL_CTX_use_PrivateKey(ctx, k) == 1;

	EVP_PKEY_free(k);
	return ok;
}

/* Loads one TLS file with load(); 0, or -1 with the message in err. */
static int tls_load(SSL_CTX *ctx, const char *what, const char *path,
		    int (*load)(SSL_CTX *, BIO *), char *err, size_t errlen)
{
	char why[200], *buf;
	size_t len = 0;
	BIO *b = tls_file(path, &buf, &len, why, sizeof(why));
	int ok;

	if (!b)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis tls: %s \"%s\" %s", what, path, why);
	ok = load(ctx, b);
	tls_file_free(b, buf, len);
	if (ok)
		return 0;
	tls_reason(why, sizeof(why));
	return sluice_fail(SLUICE_EINVAL, err, errlen,
			   "redis tls: %s \"%s\": %s", what, path, why);
}

struct ssl_ctx_st *sluice_redis__tls_context(const sluice_redis_tls_t *o,
					     char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const char *what = "", *file = "";
	char why[200];

	if (!ctx) {
		tls_reason(why, sizeof(why));
		sluice_fail(SLUICE_ENOMEM, err, errlen, "redis tls: %s", why);
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_verify(ctx,
			   o && o->verify == SLUICE_REDIS_TLS_VERIFY_OFF
				   ? SSL_VERIFY_NONE
				   : SSL_VERIFY_PEER,
			   NULL);
	if (o && o->ca_file) {
		if (tls_load(ctx, "ca_file", o->ca_file, load_ca, err,
			     errlen) != 0)
			goto failed;
	} else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
		what = "the system's CA store";
		goto fail;
	}
	if (o && o->key_file && !o->cert_file) {
		SSL_CTX_free(ctx);
		sluice_fail(SLUICE_EINVAL, err, errlen,
			    "redis tls: a key_file needs a cert_file");
		return NULL;
	}
	if (o && o->cert_file) {
		if (tls_load(ctx, "cert_file", o->cert_file, load_chain, err,
			     errlen) != 0 ||
		    tls_load(ctx, "key_file",
			     o->key_file ? o->key_file : o->cert_file, load_key,
			     err, errlen) != 0)
			goto failed;
		what = "key_file";
		file = o->key_file ? o->key_file : o->cert_file;
		if (SSL_CTX_check_private_key(ctx) != 1)
			goto fail;
	}
	return ctx;
fail:
	tls_reason(why, sizeof(why));
	sluice_fail(SLUICE_EINVAL, err, errlen, "redis tls: %s%s%s%s: %s", what,
		    file[0] ? " \"" : "", file, file[0] ? "\"" : "", why);
failed:
	SSL_CTX_free(ctx);
	return NULL;
}

void sluice_redis__tls_context_free(struct ssl_ctx_st *ctx)
{
	SSL_CTX_free(ctx);
}

/* ------------------------------------------------------------- sessions */

static int is_ip(const char *name)
{
	unsigned char buf[16];

	return inet_pton(AF_INET, name, buf) == 1 ||
	       inet_pton(AF_INET6, name, buf) == 1;
}

sluice_redis_tls_session_t *sluice_redis__tls_new(struct ssl_ctx_st *ctx,
						  const char *name, char *err,
						  size_t errlen)
{
	sluice_redis_tls_session_t *s = calloc(1, sizeof(*s));
	X509_VERIFY_PARAM *param;

	if (!s || !(s->ssl = SSL_new(ctx)) || !(s->in = BIO_new(BIO_s_mem())) ||
	    !(s->out = BIO_new(BIO_s_mem()))) {
		if (s) {
			BIO_free(s->in);
			SSL_free(s->ssl);
			free(s);
		}
		snprintf(err, errlen, "TLS: out of memory");
		return NULL;
	}
	/* EOF on an empty input BIO means "wait for more", not the end. */
	BIO_set_mem_eof_return(s->in, -1);
	BIO_set_mem_eof_return(s->out, -1);
	SSL_set_bio(s->ssl, s->in, s->out);
	SSL_set_connect_state(s->ssl);
	if (name && *name) {
		param = SSL_get0_param(s->ssl);
		/* SNI is for host names only (RFC 6066); an address is
		 * checked against the certificate's IP entries. */
		if (is_ip(name)) {
			X509_VERIFY_PARAM_set1_ip_asc(param, name);
		} else {
			SSL_set_tlsext_host_name(s->ssl, name);
			SSL_set1_host(s->ssl, name);
		}
	}
	return s;
}

void sluice_redis__tls_free(sluice_redis_tls_session_t *s)
{
	if (!s)
		return;
	SSL_free(s->ssl); /* frees both BIOs */
	free(s);
}

/* The reason for a failed call: the certificate check's verdict when that
 * is what failed, else OpenSSL's error queue. */
static int tls_error(sluice_redis_tls_session_t *s, int rc, char *err,
		     size_t errlen)
{
	int e = SSL_get_error(s->ssl, rc);
	long v;
	char why[200];

	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return 0;
	if (e == SSL_ERROR_ZERO_RETURN) {
		snprintf(err, errlen, "TLS: the server closed the session");
		return -1;
	}
	v = SSL_get_verify_result(s->ssl);
	if (v != X509_V_OK) {
		ERR_clear_error();
		snprintf(err, errlen, "TLS: certificate verify failed: %s",
			 X509_verify_cert_error_string(v));
		return -1;
	}
	tls_reason(why, sizeof(why));
	snprintf(err, errlen, "TLS: %s", why);
	return -1;
}

int sluice_redis__tls_handshake(sluice_redis_tls_session_t *s, char *err,
				size_t errlen)
{
	int rc = SSL_do_handshake(s->ssl);

	if (rc == 1)
		return 1;
	return tls_error(s, rc, err, errlen);
}

int sluice_redis__tls_feed(sluice_redis_tls_session_t *s, const char *data,
			   size_t len)
{
	return BIO_write(s->in, data, (int)len) == (int)len ? 0 : -1;
}

long sluice_redis__tls_read(sluice_redis_tls_session_t *s, char *buf,
			    size_t cap, char *err, size_t errlen)
{
	int rc = SSL_read(s->ssl, buf, (int)cap);

	if (rc > 0)
		return rc;
	return tls_error(s, rc, err, errlen) < 0 ? -1 : 0;
}

int sluice_redis__tls_write(sluice_redis_tls_session_t *s, const char *data,
			    size_t len, char *err, size_t errlen)
{
	/* A memory BIO takes everything: one call writes it all. */
	int rc;

	if (!len)
		return 0;
	rc = SSL_write(s->ssl, data, (int)len);
	if (rc == (int)len)
		return 0;
	if (tls_error(s, rc, err, errlen) == 0)
		snprintf(err, errlen, "TLS: a write was cut short");
	return -1;
}

size_t sluice_redis__tls_take_out(sluice_redis_tls_session_t *s, char **buf)
{
	size_t n = (size_t)BIO_ctrl_pending(s->out);

	*buf = NULL;
	if (!n || !(*buf = malloc(n)))
		return 0;
	return (size_t)BIO_read(s->out, *buf, (int)n);
}
