/*
 * socket.h -- a client socket made the same way on every system.
 */
#ifndef SLUICE_UTIL_SOCKET_H
#define SLUICE_UTIL_SOCKET_H

#include <sys/socket.h>

/* A write to a peer that closed is an error told as one, never a SIGPIPE:
 * send() with MSG_NOSIGNAL where it has it, else the socket's own
 * SO_NOSIGPIPE (sluice_stream_socket() sets it). */
#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

/* A non-blocking, close-on-exec stream socket of that address family, or
 * -1 (errno says why). */
int sluice_stream_socket(int family);

#endif /* SLUICE_UTIL_SOCKET_H */
