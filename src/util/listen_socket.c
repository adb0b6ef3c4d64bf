/*
 * listen_socket.c -- listening sockets made by hand.
 *
 * libuv 1.44 cannot set SO_REUSEPORT, so the socket is created here and
 * handed to the loop with uv_tcp_open().  Every loop thread binds its own
 * socket to the same address; the kernel balances connections across them.
 */
#include "util/listen_socket.h"

#include "sluice.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int sluice_listen_parse(const char *text, struct sockaddr_storage *ss,
			char *err, size_t errlen)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *port, *end;
	unsigned long p;
	size_t hlen;

	memset(ss, 0, sizeof(*ss));
	if (text[0] == '[') {
		end = strchr(text, ']');
		if (!end || end[1] != ':')
			goto bad;
		hlen = (size_t)(end - text - 1);
		text++;
		port = end + 2;
	} else {
		end = strrchr(text, ':');
		if (!end || memchr(text, ':', (size_t)(end - text)))
			goto bad;
		hlen = (size_t)(end - text);
		port = end + 1;
	}
	if (hlen == 0 || hlen >= sizeof(host) || !*port ||
	    strspn(port, "0123456789") != strlen(port) || strlen(port) > 5)
		goto bad;
	p = strtoul(port, NULL, 10);
	if (p == 0 || p > 65535)
		goto bad;
	memcpy(host, text, hlen);
	host[hlen] = '\0';
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr)) {
		ss->ss_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)p);
		return 0;
	}
	if (inet_pton(AF_INET6, host,
		      &((struct sockaddr_in6 *)ss)->sin6_addr)) {
		ss->ss_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)p);
		return 0;
	}
bad:
	if (err && errlen)
		snprintf(err, errlen,
			 "listen address \"%.80s\" is not valid; expected "
			 "ADDRESS:PORT with a numeric address and a port from "
			 "1 to 65535, e.g. 127.0.0.1:8080 or [::1]:8080",
			 text);
	return SLUICE_EINVAL;
}

/*
 * SO_REUSEPORT would also let a second sluice process (same user) bind the
 * port and silently take half the connections -- with its own memory
 * store, doubling every limit.  So first bind once without it: that fails
 * when anyone already holds the port.
 */
static int probe(const struct sockaddr_storage *ss, socklen_t len,
		 const char *addr, char *err, size_t errlen)
{
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (const struct sockaddr *)ss, len) < 0) {
		snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

int sluice_listen_socket(const char *addr, int first, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, one = 1;

	if (sluice_listen_parse(addr, &ss, err, errlen) < 0)
		return -1;
	len = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
				       : sizeof(struct sockaddr_in);
	if (first && probe(&ss, len, addr, err, errlen) < 0)
		return -1;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, len) < 0 ||
	    listen(fd, SOMAXCONN) < 0) {
		snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}
