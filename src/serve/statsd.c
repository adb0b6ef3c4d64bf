/*
 * statsd.c -- envoy.statsd: envoyproxy/ratelimit's stats sent over UDP to
 * a StatsD (or DogStatsD) agent, as its USE_STATSD / USE_DOG_STATSD do:
 * every flush_ms, each counter that moved since the last flush as one
 * "PREFIXratelimit.service.rate_limit.DOMAIN.KEY.STAT:N|c" line (with
 * "|#k:v,..." tags for DogStatsD), lines packed into datagrams that fit
 * a usual MTU.  UDP: an agent that is away loses the counts, nothing here
 * waits for it.  Runs on the main loop (serve/server.c's timer).
 */
#include "serve/statsd.h"
#include "policy/envoy/metrics.h"
#include "util/buf.h"
#include "util/listen_socket.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Datagrams stay under an Ethernet MTU with IP and UDP headers. */
#define DGRAM_MAX 1400

typedef struct flush_s {
	const sluice_envoy_settings_t *s;
	int fd;
	struct sockaddr_storage to;
	socklen_t tolen;
	sluice_buf_t dgram;
	unsigned failed; /* sends refused this flush */
} flush_t;

static int fd = -1;

static void send_dgram(flush_t *f)
{
	if (!f->dgram.len)
		return;
	if (sendto(f->fd, f->dgram.data, f->dgram.len, MSG_DONTWAIT,
		   (struct sockaddr *)&f->to, f->tolen) < 0)
		f->failed++;
	f->dgram.len = 0;
}

static void on_stat(void *arg, const char *name, uint64_t delta)
{
	flush_t *f = arg;
	char line[1024];
	int n;

	n = snprintf(line, sizeof(line), "%s%s:%llu|c%s%s\n",
		     f->s->statsd_prefix ? f->s->statsd_prefix : "", name,
		     (unsigned long long)delta,
		     f->s->statsd_dog && f->s->statsd_tags ? "|#" : "",
		     f->s->statsd_dog && f->s->statsd_tags ? f->s->statsd_tags
							   : "");
	if (n <= 0 || (size_t)n >= sizeof(line))
		return; /* a name too long for any datagram */
	if (f->dgram.len + (size_t)n > DGRAM_MAX)
		send_dgram(f);
	sluice_buf_append(&f->dgram, line, (size_t)n);
}

void sluice_statsd_flush(const sluice_envoy_settings_t *s)
{
	flush_t f = {.s = s, .tolen = sizeof(f.to)};
	char err[256];

	if (!s || !s->statsd_addr)
		return;
	if (sluice_listen_parse(s->statsd_addr, &f.to, err, sizeof(err)) < 0)
		return; /* checked at load */
	f.tolen = f.to.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					     : sizeof(struct sockaddr_in);
	if (fd < 0 || fcntl(fd, F_GETFD) < 0) {
		fd = socket(f.to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return;
	}
	f.fd = fd;
	sluice_envoy_stats_delta(on_stat, &f);
	send_dgram(&f);
	sluice_buf_free(&f.dgram);
	if (f.failed)
		sluice_log_warn("envoy.statsd: %u datagrams to %s not sent: %s",
				f.failed, s->statsd_addr, strerror(errno));
}
