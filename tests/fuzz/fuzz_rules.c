/*
 * fuzz_rules.c -- libFuzzer harness for request matching: path
 * readings (paths.c) and globs, key building, tiers and the client address
 * behind trusted proxies, over hostile header values.
 *
 * Input: lines "METHOD\nPATH\nX-FORWARDED-FOR\nX-REAL-IP\nX-USER-ID\nTIER";
 * a '\r' inside a header's field splits it into several header lines; the
 * first byte's low bit picks an IPv4 or IPv6 (trusted) peer.
 */
#include "policy/config/config.h"

#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char config[] =
	"trusted_proxies: [127.0.0.0/8, \"::1/128\", 10.0.0.0/8]\n"
	"ipv6_prefix: 48\n"
	"rules:\n"
	"  - name: api\n"
	"    key: [\"header:x-user-id\", ip]\n"
	"    limits: [{capacity: 100, rate: 2/s}]\n"
	"  - name: up\n"
	"    match: {methods: [POST, get], path: \"/a*/?p*load*\"}\n"
	"    key: \"header:x-user-id+ip\"\n"
	"    tiers:\n"
	"      header: x-user-tier\n"
	"      default: free\n"
	"      limits:\n"
	"        free: [{capacity: 5, rate: 1/s}]\n"
	"        paid: [{capacity: 50, rate: 10/s}]\n"
	"  - name: exact\n"
	"    match: {path: \"/X/*/y/\", case_sensitive: true, strict_slash: "
	"true}\n"
	"    limits: [{capacity: 5, rate: 1/s}]\n";

static sluice_config_t *cfg;

typedef struct fields_s {
	const char *v[6];
	size_t len[6];
} fields_t;

static const char *header(void *ctx, const char *name, size_t *len)
{
	static const char *const names[] = {"x-forwarded-for", "x-real-ip",
					    "x-user-id", "x-user-tier"};
	fields_t *f = ctx;
	size_t i;

	for (i = 0; i < 4; i++)
		if (strcmp(names[i], name) == 0 && f->v[i + 2]) {
			*len = f->len[i + 2];
			return f->v[i + 2];
		}
	return NULL;
}

/* The index-th '\r'-separated line of a field. */
static const char *header_line(void *ctx, const char *name, size_t index,
			       size_t *len)
{
	const char *v = header(ctx, name, len), *end, *cr;

	if (!v)
		return NULL;
	end = v + *len;
	for (;;) {
		cr = memchr(v, '\r', (size_t)(end - v));
		if (index-- == 0) {
			*len = (size_t)((cr ? cr : end) - v);
			return v;
		}
		if (!cr)
			return NULL;
		v = cr + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
	sluice_request_t req;
	sluice_match_t m[4];
	fields_t f;
	char ip[64];
	size_t i, start = 0, n = 0;

	if (!cfg) {
		char err[256];

		cfg = sluice_config_parse("fuzz", config, sizeof(config) - 1,
					  err, sizeof(err));
		if (!cfg)
			abort();
	}
	memset(&f, 0, sizeof(f));
	for (i = 0; i <= size && n < 6; i++)
		if (i == size || data[i] == '\n') {
			f.v[n] = (const char *)data + start;
			f.len[n++] = i - start;
			start = i + 1;
		}
	memset(&req, 0, sizeof(req));
	req.method = f.v[0] ? f.v[0] : "GET";
	req.method_len = f.v[0] ? f.len[0] : 3;
	req.path = f.v[1];
	req.path_len = f.len[1];
	req.header = header;
	req.header_line = header_line;
	req.header_ctx = &f;
	memset(&in4, 0, sizeof(in4));
	memset(&in6, 0, sizeof(in6));
	in4.sin_family = AF_INET;
	in4.sin_addr.s_addr = htonl(0x7f000001);
	in6.sin6_family = AF_INET6;
	in6.sin6_addr.s6_addr[15] = 1;
	req.peer = size && (data[0] & 1) ? (const struct sockaddr *)&in6
					 : (const struct sockaddr *)&in4;
	n = sluice_rules_match(cfg, &req, m, 4);
	for (i = 0; i < n; i++)
		if (m[i].keylen >= sizeof(m[i].key) ||
		    m[i].key[m[i].keylen] != '\0' || !m[i].set ||
		    m[i].set->nlimits == 0)
			__builtin_trap();
	if (sluice_client_ip(cfg, &req, ip, sizeof(ip)) >= sizeof(ip))
		__builtin_trap();
	return 0;
}
