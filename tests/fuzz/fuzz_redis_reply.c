/*
 * fuzz_redis_reply.c -- libFuzzer harness for what the Redis store reads
 * from the network and from its configuration: arbitrary bytes parsed as
 * RESP (hiredis' reader) and handed to the store's reply decoder, which
 * must reject anything that is not a well-formed decision; and the same
 * bytes as a redis:// URL.
 */
#include "store/redis/redis_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisReader *rd = redisReaderCreate();
	sluice_redis_url_t u;
	void *reply = NULL;
	char *text;

	redisReaderFeed(rd, (const char *)data, size);
	while (redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
		sluice_decision_t d;
		size_t which, n;
		int allowed;

		for (n = 1; n <= 3; n++)
			if (sluice_redis__parse_reply(reply, n, &allowed, &d,
						      &which) == 0 &&
			    (which >= n || d.allowed != allowed))
				abort();
		freeReplyObject(reply);
		reply = NULL;
	}
	redisReaderFree(rd);

	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (sluice_redis__parse_url(text, &u, NULL, 0) == 0)
		sluice_redis__url_free(&u);
	free(text);
	return 0;
}
