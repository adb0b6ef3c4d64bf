/*
 * tls_server.h -- TLS for sluice serve's listeners (the HTTP listener's
 * http.tls, admin.tls and the gRPC listener's grpc.tls), written once:
 * the settings, the server context built from their files and built again
 * when the files change, and one connection's TLS over memory BIOs.
 *
 * A front end owns its socket and event loop; it hands the socket's bytes
 * in (sluice_tls_conn_in), gets the plaintext through a callback, and
 * sends what lands in the connection's `cipher` buffer.  Nothing here
 * touches a socket or a loop, so the HTTP front end (src/serve/tcp.c) and
 * the gRPC one (src/grpc/conn.c) use the same code.
 */
#ifndef SLUICE_UTIL_TLS_SERVER_H
#define SLUICE_UTIL_TLS_SERVER_H

#include "util/buf.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct ssl_ctx_st;
struct ssl_st;

/* The most names a client_sans list holds. */
#define SLUICE_TLS_MAX_SANS 16

/* A listener's tls: block (policy/config/tls.c parses it); off when
 * cert_file is NULL. */
typedef struct sluice_tls_server_config_s {
	char *cert_file;      /* PEM chain, the server's first */
	char *key_file;	      /* its PEM private key */
	char *client_ca_file; /* mutual TLS: clients must present a
				 certificate this CA signed; NULL: none */
	/* With client_ca_file: the client certificate must name one of
	 * these (DNS or IP SANs); none: any name. */
	char *client_sans[SLUICE_TLS_MAX_SANS];
	size_t nclient_sans;
} sluice_tls_server_config_t;

void sluice_tls_server_config_free(sluice_tls_server_config_t *t);

/*
 * A server context from t's files: TLS 1.2 at least, the client
 * certificate required when client_ca_file is given; with alpn (one
 * protocol name, e.g. "h2") clients must offer it.  `what` names the
 * block in messages ("http.tls").  NULL with why in err (the file and
 * OpenSSL's reason; never a key's content).
 */
struct ssl_ctx_st *sluice_tls_ctx_build(const sluice_tls_server_config_t *t,
					const char *what, const char *alpn,
					char *err, size_t errlen);

/*
 * Where one listener's connections get their context, shared by every
 * loop thread of the process: built from the running config's files on
 * first use, and again when the config names other files or a file
 * changes (looked at on an accept, at most once a second), so a renewed
 * certificate is served without a restart.  A context that cannot be
 * built is logged once (until the files change again) and the previous
 * one kept.  Define one with SLUICE_TLS_SOURCE_INIT.
 */
typedef struct sluice_tls_source_s {
	const char *what; /* "http.tls", for the log */
	const char *alpn; /* what clients must offer, or NULL */
	pthread_mutex_t lock;
	struct ssl_ctx_st *ctx;		       /* NULL: never a good one */
	const sluice_tls_server_config_t *cfg; /* last asked with */
	uint64_t stamp;	     /* the names and files ctx was built from */
	uint64_t checked_ms; /* when the files were last looked at */
	unsigned users;	     /* sluice_tls_source_hold() minus drops */
} sluice_tls_source_t;

#define SLUICE_TLS_SOURCE_INIT(what, alpn)                                     \
	{                                                                      \
		(what), (alpn), PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0, 0 \
	}

/* A loop thread starts (hold) and ends (drop) using src; the last drop
 * frees the context (connections keep their own reference). */
void sluice_tls_source_hold(sluice_tls_source_t *src);
void sluice_tls_source_drop(sluice_tls_source_t *src);

/*
 * A new server-side session for a connection accepted under t (the
 * running config's block) at now_ms (a monotonic clock).  *failed is set
 * to 1 when this call built the context again and that failed (count it:
 * it is logged once).  NULL when there is no context at all.
 */
struct ssl_st *sluice_tls_source_session(sluice_tls_source_t *src,
					 const sluice_tls_server_config_t *t,
					 uint64_t now_ms, int *failed);

/* ---------------------------------------------------------- connections */

typedef struct sluice_tls_conn_s {
	struct ssl_st *ssl;  /* NULL: cleartext */
	sluice_buf_t cipher; /* records to send, in order */
	unsigned ready : 1;  /* the handshake is done */
} sluice_tls_conn_t;

/* Takes ssl (from sluice_tls_source_session) for tc, over memory BIOs.
 * 0, or -1 (ssl is freed). */
int sluice_tls_conn_start(sluice_tls_conn_t *tc, struct ssl_st *ssl);

/* Plaintext for the front end; returns nonzero to stop (the connection
 * is closing). */
typedef int (*sluice_tls_plain_fn)(void *arg, const uint8_t *p, size_t n);

/* What sluice_tls_conn_in() says went wrong (each: close, after sending
 * cipher, which may hold an alert). */
#define SLUICE_TLS_CLOSED    (-1) /* a close_notify, a broken record */
#define SLUICE_TLS_HANDSHAKE (-2) /* refused: why says OpenSSL's reason */
#define SLUICE_TLS_SAN                                                         \
	(-3)			  /* the certificate names none of             \
				     client_sans */
#define SLUICE_TLS_PLAINTEXT (-4) /* the client spoke cleartext HTTP */

/*
 * The socket's bytes in: the handshake (then the client_sans check of
 * t), then every whole record's plaintext to fn.  Records to send land
 * in tc->cipher.  0, or one of the codes above.
 */
int sluice_tls_conn_in(sluice_tls_conn_t *tc,
		       const sluice_tls_server_config_t *t, const uint8_t *p,
		       size_t n, sluice_tls_plain_fn fn, void *arg, char *why,
		       size_t whylen);

/* plain's bytes encrypted onto tc->cipher (plain is emptied; nothing
 * before the handshake is done).  0, or -1: close. */
int sluice_tls_conn_out(sluice_tls_conn_t *tc, sluice_buf_t *plain);

/* A close_notify alert onto tc->cipher (we close after an answer). */
void sluice_tls_conn_shutdown(sluice_tls_conn_t *tc);

void sluice_tls_conn_free(sluice_tls_conn_t *tc);

#endif /* SLUICE_UTIL_TLS_SERVER_H */
