/*
 * xds.h -- sluice's xDS client: an ADS state-of-the-world subscription to
 * the control plane named by envoy.xds (policy/envoy/xds.h) for
 * type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig, as
 * envoyproxy/ratelimit makes with CONFIG_TYPE=GRPC_XDS_SOTW.
 *
 * The stream runs on a thread of its own (xds_client.c: blocking I/O
 * under poll(), HTTP/2 by nghttp2, TLS by OpenSSL); each response's
 * resources are handed to the main loop, which builds and checks the
 * config (the apply callback) while the thread waits, then ACKs
 * (version_info and the nonce) or NACKs (the nonce, the last accepted
 * version and a google.rpc.Status naming the problem).  A lost stream is
 * tried again after 500 ms, doubling to 30 s, with jitter; the running
 * config stays meanwhile.  Each connection reads the TLS files again.
 */
#ifndef SLUICE_XDS_XDS_H
#define SLUICE_XDS_XDS_H

#include "policy/envoy/xds.h"
#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define SLUICE_XDS_TYPE_URL                                                    \
	"type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
/* The largest gRPC message accepted (grpc-go's default receive size). */
#define SLUICE_XDS_MAX_MSG (4u << 20)

typedef struct sluice_xds_s sluice_xds_t;

/*
 * Applies a set of resources on the main loop: takes the texts (frees
 * them, or keeps them), returns 0, or -1 with a message (the NACK's).
 */
typedef int (*sluice_xds_apply_fn)(void *arg, sluice_envoy_text_t *texts,
				   size_t n, char *err, size_t errlen);

/* Starts the client on its thread; apply runs on `loop` (the caller's).
 * NULL with a message when it cannot start. */
sluice_xds_t *sluice_xds_start(uv_loop_t *loop, const sluice_envoy_xds_t *cfg,
			       sluice_xds_apply_fn apply, void *arg, char *err,
			       size_t errlen);
/* 0 when cfg's TLS files make a context (a reload is refused else), or
 * -1 with a message naming the block's FILE:LINE. */
int sluice_xds_check(const sluice_envoy_xds_t *cfg, char *err, size_t errlen);
/* The settings the client runs with. */
const sluice_envoy_xds_t *sluice_xds_config(const sluice_xds_t *x);
/* Stops and frees it (the loop's thread; the loop must run to close its
 * handle). */
void sluice_xds_stop(sluice_xds_t *x);

/* 1 while a client runs that has not yet had a config accepted (/readyz
 * answers 503 until then). */
int sluice_xds_waiting(void);

/* sluice_envoy_xds_* on GET /metrics (nothing when xds never started). */
void sluice_xds_metrics_render(sluice_buf_t *out);

/* ----------------------------------------------- the wire (xds_wire.c) */

typedef struct sluice_xds_response_s {
	char *version;
	char *nonce;
	char *type_url;
	sluice_envoy_text_t *texts; /* one per resource */
	size_t ntexts;
} sluice_xds_response_t;

/* Decodes a DiscoveryResponse and renders its resources; -1 with a
 * message (r's nonce is kept when the message itself decoded). */
int sluice_xds_decode(const uint8_t *msg, size_t len, sluice_xds_response_t *r,
		      char *err, size_t errlen);
void sluice_xds_response_free(sluice_xds_response_t *r);

/* The ADS call's request headers at most: its own and envoy.xds.headers. */
#define SLUICE_XDS_CALL_HEADERS (7 + SLUICE_XDS_MAX_HEADERS)

/* The ADS call's request headers (names[i]: values[i], pseudo-headers
 * first, then s->headers in their order), pointing into s and static
 * text; returns how many (at most SLUICE_XDS_CALL_HEADERS). */
size_t sluice_xds_call_headers(const sluice_envoy_xds_t *s, const char *names[],
			       const char *values[]);

/* A DiscoveryRequest as one gRPC message (5-byte prefix); error: NULL
 * for an ACK, else the NACK's message.  NULL when out of memory. */
uint8_t *sluice_xds_request(const sluice_envoy_xds_t *s, const char *version,
			    const char *nonce, const char *error, size_t *len);

#endif /* SLUICE_XDS_XDS_H */
