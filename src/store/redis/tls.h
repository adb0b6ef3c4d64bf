/*
 * tls.h -- a TLS session over memory BIOs (tls.c), for link.c: the link
 * reads and writes the socket, the session turns ciphertext into
 * plaintext and back.  The context is created by
 * sluice_redis__tls_context() (redis_int.h).
 */
#ifndef SLUICE_REDIS_TLS_H
#define SLUICE_REDIS_TLS_H

#include "store/redis/redis_int.h"

typedef struct sluice_redis_tls_session_s sluice_redis_tls_session_t;

/* A client session verifying `name` (a host name: SNI and the name
 * checked; an address: the certificate's IP entries); NULL with err. */
sluice_redis_tls_session_t *sluice_redis__tls_new(struct ssl_ctx_st *ctx,
						  const char *name, char *err,
						  size_t errlen);
void sluice_redis__tls_free(sluice_redis_tls_session_t *s);
/* Advances the handshake: 1 done, 0 needs more input, -1 failed (err:
 * the certificate check's verdict or OpenSSL's reason). */
int sluice_redis__tls_handshake(sluice_redis_tls_session_t *s, char *err,
				size_t errlen);
/* Ciphertext read from the socket; 0 or -1 (memory). */
int sluice_redis__tls_feed(sluice_redis_tls_session_t *s, const char *data,
			   size_t len);
/* Plaintext out: bytes (> 0), 0 when more input is needed, -1 on an
 * error or the end of the session (err says which). */
long sluice_redis__tls_read(sluice_redis_tls_session_t *s, char *buf,
			    size_t cap, char *err, size_t errlen);
/* Plaintext in, all of it; 0 or -1. */
int sluice_redis__tls_write(sluice_redis_tls_session_t *s, const char *data,
			    size_t len, char *err, size_t errlen);
/* The ciphertext to send, in a new buffer the caller frees (*buf NULL
 * and 0 when there is none). */
size_t sluice_redis__tls_take_out(sluice_redis_tls_session_t *s, char **buf);

#endif /* SLUICE_REDIS_TLS_H */
