/*
 * tls.c -- TLS on the gRPC listener (grpc.tls): conn.c hands the
 * socket's bytes in (grpc_tls_in) and sends what comes out (c->tls's
 * cipher); the session (session.c) sees only plaintext, as over h2c.
 *
 * The context, its reload when the files change and each connection's
 * session over memory BIOs are util/tls_server.c's, which the HTTP
 * listener uses too; what is the gRPC listener's own is ALPN "h2" (gRPC
 * clients require it), the log lines and the counters.
 */
#include "grpc/internal.h"
#include "util/log.h"

/* Every loop thread's connections: one context, read once a change. */
static sluice_tls_source_t source = SLUICE_TLS_SOURCE_INIT("grpc.tls", "h2");

void grpc_tls_hold(void)
{
	sluice_tls_source_hold(&source);
}

void grpc_tls_release(sluice_grpc_t *g)
{
	(void)g;
	sluice_tls_source_drop(&source);
}

int grpc_tls_start(grpc_conn_t *c)
{
	sluice_grpc_t *g = c->g;
	int failed;
	struct ssl_st *ssl =
		sluice_tls_source_session(&source, &g->svc->live->cfg->grpc.tls,
					  uv_now(g->loop), &failed);

	if (failed)
		sluice_count(
			&g->svc->metrics->tls_reload_failures[SLUICE_TLS_GRPC],
			1);
	if (!ssl)
		return -1;
	return sluice_tls_conn_start(&c->tls, ssl);
}

void grpc_tls_free(grpc_conn_t *c)
{
	sluice_tls_conn_free(&c->tls);
}

static int feed(void *arg, const uint8_t *p, size_t n)
{
	grpc_conn_t *c = arg;

	grpc_conn_feed(c, p, n);
	return c->closing;
}

int grpc_tls_in(grpc_conn_t *c, const uint8_t *p, size_t n)
{
	char peer[96], why[256];
	int r = sluice_tls_conn_in(&c->tls, &c->g->svc->live->cfg->grpc.tls, p,
				   n, feed, c, why, sizeof(why));

	if (r == SLUICE_TLS_HANDSHAKE || r == SLUICE_TLS_PLAINTEXT) {
		c->io->peer(c, peer, sizeof(peer));
		sluice_log_warn("grpc: TLS handshake with %s failed: %s", peer,
				r == SLUICE_TLS_PLAINTEXT ? "cleartext HTTP"
							  : why);
	} else if (r == SLUICE_TLS_SAN) {
		c->io->peer(c, peer, sizeof(peer));
		sluice_log_warn("grpc: TLS client %s refused: its certificate "
				"names none of grpc.tls.client_sans",
				peer);
	}
	return r < 0 ? -1 : 0;
}

int grpc_tls_out(grpc_conn_t *c)
{
	return sluice_tls_conn_out(&c->tls, &c->out);
}
