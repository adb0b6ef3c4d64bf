/*
 * fuzz_config.c -- libFuzzer harness for the config reader.
 *
 * Any bytes must give either a config or a "FILE:LINE: ..." message,
 * never a crash, a leak or undefined behaviour.  A config that loads is
 * also exercised against a request, so the rules it builds are usable.
 */
#include "policy/config/config.h"

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *header(void *ctx, const char *name, size_t *len)
{
	static const char *const h[][2] = {
		{"x-user-id", "alice"},
		{"x-user-tier", "paid"},
		{"x-api-key", "k1"},
		{"x-forwarded-for", "203.0.113.5, 10.0.0.1"},
	};
	size_t i;

	(void)ctx;
	for (i = 0; i < sizeof(h) / sizeof(h[0]); i++)
		if (strcmp(h[i][0], name) == 0) {
			*len = strlen(h[i][1]);
			return h[i][1];
		}
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	sluice_config_t *cfg;
	struct sockaddr_in peer;
	sluice_request_t req;
	sluice_match_t m[4];

	cfg = sluice_config_parse("fuzz.yaml", (const char *)data, size, err,
				  sizeof(err));
	if (!cfg) {
		/* every refusal names the file and a line */
		if (strncmp(err, "fuzz.yaml:", 10) != 0)
			__builtin_trap();
		return 0;
	}
	memset(&peer, 0, sizeof(peer));
	peer.sin_family = AF_INET;
	peer.sin_addr.s_addr = htonl(0x7f000001);
	memset(&req, 0, sizeof(req));
	req.method = "POST";
	req.method_len = 4;
	req.path = "/api/upload?x=1";
	req.path_len = strlen(req.path);
	req.header = header;
	req.peer = (const struct sockaddr *)&peer;
	sluice_rules_match(cfg, &req, m, 4);
	sluice_config_free(cfg);
	return 0;
}
