/*
 * fuzz_redis_reply.c -- libFuzzer harness for what the Redis store reads
 * from the network and from its configuration: arbitrary bytes parsed as
 * RESP (hiredis' reader) and handed to the store's reply decoders (the
 * module's and the scripts'), which must reject anything that is not a
 * well-formed decision; and the same bytes as a redis:// URL.
 */
#include "store/redis/redis_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* hiredis 0.14's reader allocates an array of the announced size before it
 * reads any element (Redis is a trusted peer), so "*2000000000" exhausts
 * memory inside hiredis, not in sluice.  Such inputs skip the RESP part. */
static int announces_huge_array(const uint8_t *data, size_t size)
{
	size_t i;

	for (i = 0; i < size; i++) {
		uint64_t n = 0;
		size_t j;

		if (data[i] != '*')
			continue;
		for (j = i + 1; j < size && data[j] >= '0' && data[j] <= '9';
		     j++)
			if ((n = n * 10 + (uint64_t)(data[j] - '0')) > 4096)
				return 1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sluice_limit_t limits[3];
	static int init;
	redisReader *rd = redisReaderCreate();
	sluice_redis_url_t u;
	void *reply = NULL;
	char *text;

	if (!init) {
		/* the scripts' replies are decoded against the call's limits */
		sluice_limit_parse(&limits[0], "100", "2/s", NULL, 0);
		sluice_limit_parse(&limits[1], "7", "3/s", NULL, 0);
		sluice_limit_parse(&limits[2], "5", "1/day", NULL, 0);
		init = 1;
	}
	if (!announces_huge_array(data, size))
		redisReaderFeed(rd, (const char *)data, size);
	while (redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
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
