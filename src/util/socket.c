/*
 * socket.c -- a client socket made the same way on every system: Linux
 * sets its flags at socket() (SOCK_NONBLOCK | SOCK_CLOEXEC); elsewhere
 * (util/platform.h) fcntl() sets them before anything else can see the
 * descriptor, and SO_NOSIGPIPE stands in for send()'s MSG_NOSIGNAL where
 * that flag is missing (macOS).
 */
#include "util/socket.h"
#include "util/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int sluice_stream_socket(int family)
{
#if SLUICE_LINUX
	return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
#else
	int fd = socket(family, SOCK_STREAM, 0), fl, e;

	if (fd < 0)
		return -1;
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 ||
	    (fl = fcntl(fd, F_GETFL)) < 0 ||
	    fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
#ifdef SO_NOSIGPIPE
	{
		int one = 1;

		(void)setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one,
				 sizeof(one));
	}
#endif
	return fd;
#endif
}
