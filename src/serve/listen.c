/*
 * listen.c -- listening sockets made by hand.
 *
 * libuv 1.44 cannot set SO_REUSEPORT, so the socket is created here and
 * handed to the loop with uv_tcp_open().  Every loop thread binds its own
 * socket to the same address; the kernel balances connections across them.
 */
#include "serve/server.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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
