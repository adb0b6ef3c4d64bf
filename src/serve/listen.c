/*
 * listen.c -- listening sockets made by hand.
 *
 * libuv 1.44 cannot set SO_REUSEPORT, so the socket is created here and
 * handed to the loop with uv_tcp_open().  Every loop thread binds its own
 * socket to the same address; the kernel balances connections across them.
 */
#include "serve/server.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Splits "HOST:PORT", "[V6]:PORT" or ":PORT" into host (maybe empty) and
 * port text. */
static int split(const char *addr, char *host, size_t hlen, char *port,
		 size_t plen)
{
	const char *colon;
	size_t n;

	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');

		if (!end || end[1] != ':')
			return -1;
		n = (size_t)(end - addr - 1);
		if (n >= hlen)
			return -1;
		memcpy(host, addr + 1, n);
		host[n] = '\0';
		colon = end + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon)
			return -1;
		n = (size_t)(colon - addr);
		if (n >= hlen)
			return -1;
		memcpy(host, addr, n);
		host[n] = '\0';
	}
	if (snprintf(port, plen, "%s", colon + 1) >= (int)plen || !colon[1])
		return -1;
	return 0;
}

int sluice_listen_socket(const char *addr, int *port, char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char host[256], service[16];
	int fd = -1, one = 1, r;

	if (split(addr, host, sizeof(host), service, sizeof(service)) < 0) {
		snprintf(err, errlen,
			 "listen: \"%s\": expected HOST:PORT or [IPV6]:PORT",
			 addr);
		return -1;
	}
	if (*port > 0)
		snprintf(service, sizeof(service), "%d", *port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	r = getaddrinfo(host[0] && strcmp(host, "*") ? host : NULL, service,
			&hints, &res);
	if (r != 0) {
		snprintf(err, errlen, "listen: \"%s\": %s", addr,
			 gai_strerror(r));
		return -1;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
	    bind(fd, res->ai_addr, res->ai_addrlen) < 0 ||
	    listen(fd, SOMAXCONN) < 0) {
		snprintf(err, errlen, "listen: %s: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	if (*port <= 0) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
			*port = ntohs(ss.ss_family == AF_INET6
					      ? ((struct sockaddr_in6 *)&ss)
							->sin6_port
					      : ((struct sockaddr_in *)&ss)
							->sin_port);
	}
	return fd;
}
