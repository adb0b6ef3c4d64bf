/*
 * addr.h -- client addresses as rate-limit keys: one parser and one
 * formatter for every front end that keys buckets by address (`sluice
 * serve`'s X-Forwarded-For / X-Real-IP / peer, and the Node middleware's
 * default key, which calls these through its addon), so that one client
 * address is one bucket whichever way it was spelled.
 */
#ifndef SLUICE_UTIL_ADDR_H
#define SLUICE_UTIL_ADDR_H

#include <stddef.h>
#include <stdint.h>

struct sockaddr;

/* An address in network byte order; IPv4-mapped IPv6 (::ffff:a.b.c.d) is
 * folded to IPv4, so that a dual-stack socket's view of an IPv4 client
 * is the same key as the IPv4 one.  family is AF_INET or AF_INET6. */
typedef struct sluice_addr_s {
	int family;
	uint8_t a[16];
} sluice_addr_t;

/*
 * Parses one address as proxies write it: "1.2.3.4", "1.2.3.4:80",
 * "2001:db8::1", "[2001:db8::1]" and "[2001:db8::1]:80", with spaces or
 * tabs around it.  A port is dropped (a client has many; its address is
 * its identity), and so is an IPv6 zone ("fe80::1%eth0"), which the
 * address of a socket never carries either.  Returns 0, or -1 when the
 * text is no address (then *ad is zeroed).
 */
int sluice_addr_parse(const char *s, size_t n, sluice_addr_t *ad);

/* The address of a socket (AF_INET or AF_INET6; its port and scope are
 * not part of it).  Returns 0, or -1 for another family or NULL. */
int sluice_addr_from_sockaddr(const struct sockaddr *sa, sluice_addr_t *ad);

/*
 * The bucket key of an address: IPv4 as inet_ntop writes it
 * ("203.0.113.7"); IPv6 truncated to its first ipv6_prefix bits (one
 * client commonly holds a whole /64) and written "2001:db8:1:2::/64", or
 * whole ("2001:db8::1") when ipv6_prefix is 128 or more.  Writes a NUL-
 * terminated text into buf and returns its length; 0 (buf "") when it
 * does not fit.
 */
size_t sluice_addr_key(const sluice_addr_t *ad, unsigned ipv6_prefix, char *buf,
		       size_t len);

/* Longest sluice_addr_key() text, with its NUL: an IPv6 address, "/" and
 * three digits. */
#define SLUICE_ADDR_KEY_MAX (46 + 4)

#endif /* SLUICE_UTIL_ADDR_H */
