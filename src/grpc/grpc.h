/*
 * grpc.h -- the gRPC front end of `sluice serve`: Envoy's rate limit
 * service (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit)
 * and the gRPC health service (grpc.health.v1.Health/Check), over HTTP/2
 * cleartext with prior knowledge (h2c: what Envoy speaks to a gRPC
 * cluster), on the same libuv loop threads as the HTTP front end.
 *
 * server.c gives each loop thread one sluice_grpc_t: a listening socket
 * and the connections it accepted.  HTTP/2 is nghttp2's, the messages
 * protobuf-c's (generated from proto/); the decisions are the RLS
 * engine's (src/policy/envoy/rls.h), so both front ends answer alike.
 *
 * Everything here runs on the thread of the loop it was made with.
 */
#ifndef SLUICE_GRPC_GRPC_H
#define SLUICE_GRPC_GRPC_H

#include "policy/svc.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct sluice_grpc_s sluice_grpc_t;

/*
 * A listening socket for `addr` ("HOST:PORT", "[V6]:PORT" or
 * "unix:/PATH").  The first thread passes first_fd -1; the others pass
 * the first thread's descriptor: a TCP address gets a socket of its own
 * (SO_REUSEPORT), a Unix socket a duplicate of the first.  A Unix socket
 * path left behind by a process that is gone is replaced; one that
 * someone accepts on, or a file that is not a socket, is an error.
 * Returns the descriptor, or -1 with a message in err.
 */
int sluice_grpc_socket(const char *addr, int first_fd, char *err,
		       size_t errlen);

/* Removes a Unix socket's path at exit (nothing for TCP). */
void sluice_grpc_socket_unlink(const char *addr);

/*
 * Starts accepting on fd (taken over, closed on failure too) on loop, answering
 * with svc (the thread's config and backend, which must outlive the
 * sluice_grpc_t). Returns NULL with a message in err.
 */
sluice_grpc_t *sluice_grpc_new(uv_loop_t *loop, sluice_svc_t *svc, int fd,
			       const char *addr, char *err, size_t errlen);

/* Called every sweep period: closes connections and streams idle past
 * the config's http.idle_timeout_ms; past force_at_ms (when not 0), the
 * end of a drain, closes every connection. */
void sluice_grpc_sweep(sluice_grpc_t *g, uint64_t force_at_ms);

/* SIGTERM: stop accepting, send GOAWAY on every connection; each closes
 * once its calls in flight are answered. */
void sluice_grpc_drain(sluice_grpc_t *g);

/* Connections open now (the thread ends when the drain leaves none). */
size_t sluice_grpc_nconns(const sluice_grpc_t *g);

/* Closes the listener and every connection (their handles close on the
 * next loop run). */
void sluice_grpc_close_all(sluice_grpc_t *g);

/* Frees g once its loop has closed every handle. */
void sluice_grpc_free(sluice_grpc_t *g);

#endif /* SLUICE_GRPC_GRPC_H */
