/*
 * addr.c -- client addresses as rate-limit keys (addr.h).
 */
#include "util/addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static const char *trim(const char *s, size_t *len)
{
	size_t n = *len;

	while (n > 0 && (*s == ' ' || *s == '\t'))
		s++, n--;
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	*len = n;
	return s;
}

static void fold_mapped(sluice_addr_t *ad)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0,    0,
					   0, 0, 0, 0, 0xff, 0xff};

	if (ad->family == AF_INET6 && memcmp(ad->a, mapped, 12) == 0) {
		memmove(ad->a, ad->a + 12, 4);
		memset(ad->a + 4, 0, 12);
		ad->family = AF_INET;
	}
}

int sluice_addr_parse(const char *s, size_t n, sluice_addr_t *ad)
{
	char buf[INET6_ADDRSTRLEN + 8];
	const char *colon, *pct;

	memset(ad, 0, sizeof(*ad));
	s = trim(s, &n);
	if (n == 0 || n >= sizeof(buf))
		return -1;
	if (s[0] == '[') {
		const char *end = memchr(s, ']', n);

		if (!end)
			return -1;
		n = (size_t)(end - s - 1);
		s++;
	} else if ((colon = memchr(s, ':', n)) &&
		   !memchr(colon + 1, ':', n - (size_t)(colon - s) - 1)) {
		n = (size_t)(colon - s); /* IPv4 with a port */
	}
	memcpy(buf, s, n);
	buf[n] = '\0';
	if (inet_pton(AF_INET, buf, ad->a) == 1) {
		ad->family = AF_INET;
		return 0;
	}
	/* A zone names an interface of the host that wrote it: the same
	 * address on any of them is the same client.  Only after an IPv6
	 * address ("1.2.3.4%x" stays refused), and never empty. */
	pct = memchr(buf, '%', n);
	if (pct) {
		if (pct[1] == '\0')
			return -1;
		buf[pct - buf] = '\0';
	}
	if (inet_pton(AF_INET6, buf, ad->a) == 1) {
		ad->family = AF_INET6;
		fold_mapped(ad);
		return 0;
	}
	memset(ad, 0, sizeof(*ad));
	return -1;
}

int sluice_addr_from_sockaddr(const struct sockaddr *sa, sluice_addr_t *ad)
{
	memset(ad, 0, sizeof(*ad));
	if (!sa)
		return -1;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		ad->family = AF_INET;
		memcpy(ad->a, &in->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 =
			(const struct sockaddr_in6 *)sa;

		ad->family = AF_INET6;
		memcpy(ad->a, &in6->sin6_addr, 16);
		fold_mapped(ad);
		return 0;
	}
	return -1;
}

size_t sluice_addr_key(const sluice_addr_t *ad, unsigned ipv6_prefix, char *buf,
		       size_t len)
{
	char text[INET6_ADDRSTRLEN];
	uint8_t a[16];
	unsigned i;
	int n;

	memcpy(a, ad->a, sizeof(a));
	if (ad->family == AF_INET6 && ipv6_prefix < 128) {
		for (i = 0; i < 16; i++) {
			unsigned keep =
				ipv6_prefix > 8 * i ? ipv6_prefix - 8 * i : 0;

			if (keep < 8)
				a[i] &= (uint8_t)(0xff00 >> keep);
		}
	}
	if ((ad->family != AF_INET && ad->family != AF_INET6) ||
	    !inet_ntop(ad->family, a, text, sizeof(text))) {
		if (len)
			buf[0] = '\0';
		return 0;
	}
	if (ad->family == AF_INET6 && ipv6_prefix < 128)
		n = snprintf(buf, len, "%s/%u", text, ipv6_prefix);
	else
		n = snprintf(buf, len, "%s", text);
	if (n < 0 || (size_t)n >= len) {
		if (len)
			buf[0] = '\0';
		return 0;
	}
	return (size_t)n;
}
