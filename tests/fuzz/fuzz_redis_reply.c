/*
 * fuzz_redis_reply.c -- libFuzzer harness for what the Redis store reads
 * from the network and from its configuration: arbitrary bytes parsed as
 * RESP (hiredis's reader, bounded as the client bounds it: reply.c) and
 * handed to the store's reply decoders (the module's and the scripts'),
 * which must reject anything that is not a well-formed decision; and the
 * same bytes as a redis:// URL, whose masked form never shows a password.
 * fuzz_redis_reader.c feeds the reader in pieces and checks its bounds.
 */
#include "store/redis/redis_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sluice_limit_t limits[3];
	static int init;
	/* The client's own reader, bounded (reply.c): a reply announcing
	 * 2^31 elements is refused before anything is allocated. */
	redisReader *rd = sluice_redis__reader_new();
	sluice_redis_url_t u;
	redisReply *reply = NULL;
	char *text, err[256];

	if (!init) {
		/* the scripts' replies are decoded against the call's limits */
		sluice_limit_parse(&limits[0], "100", "2/s", NULL, 0);
		sluice_limit_parse(&limits[1], "7", "3/s", NULL, 0);
		sluice_limit_parse(&limits[2], "5", "1/day", NULL, 0);
		init = 1;
	}
	if (!rd)
		return 0;
	redisReaderFeed(rd, (const char *)data, size);
	while (sluice_redis__reader_get(rd, &reply, err, sizeof(err)) == 0 &&
	       reply) {
		sluice_decision_t d;
		size_t which, n;
		int allowed;

		for (n = 1; n <= 3; n++) {
			if (sluice_redis__parse_reply(reply, n, &allowed, &d,
						      &which) == 0 &&
			    (which >= n || d.allowed != allowed))
				abort();
			if (sluice_redis__parse_script_reply(reply, limits, n,
							     n - 1, &allowed,
							     &d, &which) == 0 &&
			    (which >= n || d.allowed != allowed))
				abort();
		}
		freeReplyObject(reply);
		reply = NULL;
	}
	sluice_redis__reader_free(rd);

	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (sluice_redis__parse_url(text, &u, NULL, 0) == 0) {
		char shown[256];

		/* A URL with a password is never shown with it. */
		sluice_redis_url_mask(text, shown, sizeof(shown));
		if (u.pass && strchr(text, '@') && !strstr(shown, "***@"))
			abort();
		sluice_redis__url_free(&u);
	}
	free(text);
	return 0;
}
