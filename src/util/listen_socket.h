/*
 * listen_socket.h -- listening sockets made by hand (listen_socket.c),
 * for the HTTP (src/serve) and gRPC (src/grpc) listeners alike.
 */
#ifndef SLUICE_UTIL_LISTEN_SOCKET_H
#define SLUICE_UTIL_LISTEN_SOCKET_H

#include <stddef.h>
#include <sys/socket.h>

/*
 * Parses a listen address, "ADDRESS:PORT" or "[IPV6]:PORT" with a numeric
 * address (the form of `listen:` and `--listen`).  Returns 0, or
 * SLUICE_EINVAL with a message saying what was expected.
 */
int sluice_listen_parse(const char *text, struct sockaddr_storage *ss,
			char *err, size_t errlen);

/* Request and answer bytes all connections together may buffer before
 * those with unsent answers parse no further, split over the threads. */
#define SLUICE_HELD_BUDGET (16u * 1024 * 1024)

/* A non-blocking listening socket on "ADDRESS:PORT" or "[IPV6]:PORT"
 * with SO_REUSEPORT, so that every thread can bind one; `first` also
 * checks that no other process holds the address.  Returns the
 * descriptor, or -1 with a message. */
int sluice_listen_socket(const char *addr, int first, char *err, size_t errlen);

#endif /* SLUICE_UTIL_LISTEN_SOCKET_H */
