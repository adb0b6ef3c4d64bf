/*
 * fuzz_redis_reader.c -- libFuzzer harness for what a Redis server (or
 * anything that answers on its port) sends the client: arbitrary bytes,
 * fed in pieces as a socket would deliver them, into the client's own
 * bounded reader (reply.c), exactly as link.c feeds it.
 *
 * It checks the bounds, not only the absence of crashes: every reply that
 * comes out holds no array longer than SLUICE_REDIS_REPLY_MAX_AGGREGATE,
 * no more than SLUICE_REDIS_REPLY_MAX_ELEMENTS elements in all and no
 * string longer than SLUICE_REDIS_REPLY_MAX_BYTES; the reader never holds
 * more than that of an unfinished reply; and an error or status text,
 * redacted as it was read, has nothing left to redact (no AUTH or HELLO
 * followed by words).  Each reply then goes to the decoders of the
 * module's and the scripts' answers, which must refuse anything that is
 * not a decision.  -rss_limit_mb (scripts/fuzz) catches a bound that
 * does not hold: "*2147483647\r\n" once reserved 16 GB.
 */
#include "store/redis/redis_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checks a reply's bounds; the elements it holds, nested included. */
static size_t check(const redisReply *r, int depth)
{
	size_t i, n = 0;

	if (depth > 8)
		abort(); /* hiredis nests at most 7 deep */
	switch (r->type) {
	case REDIS_REPLY_ARRAY:
		if (r->elements > SLUICE_REDIS_REPLY_MAX_AGGREGATE ||
		    (r->elements && !r->element))
			abort();
		n = r->elements;
		for (i = 0; i < r->elements; i++)
			n += check(r->element[i], depth + 1);
		break;
	case REDIS_REPLY_ERROR:
	case REDIS_REPLY_STATUS: {
		/* Redacting again changes nothing: nothing of ours left. */
		char *copy = malloc(r->len + SLUICE_REDIS_REDACT_ROOM);

		if (!copy)
			break;
		memcpy(copy, r->str, r->len + 1);
		if (sluice_redis__redact(copy, r->len) != r->len ||
		    memcmp(copy, r->str, r->len) != 0)
			abort();
		free(copy);
	}
		/* fall through */
	case REDIS_REPLY_STRING:
		if (r->len > SLUICE_REDIS_REPLY_MAX_BYTES || !r->str ||
		    r->str[r->len] != '\0')
			abort();
		break;
	case REDIS_REPLY_INTEGER:
	case REDIS_REPLY_NIL:
		break;
	default:
		abort();
	}
	return n;
}

static void decode(const redisReply *reply)
{
	static sluice_limit_t limits[3];
	static int init;
	sluice_decision_t d;
	size_t which, n;
	int allowed;

	if (!init) {
		sluice_limit_parse(&limits[0], "100", "2/s", NULL, 0);
		sluice_limit_parse(&limits[1], "7", "3/s", NULL, 0);
		sluice_limit_parse(&limits[2], "5", "1/day", NULL, 0);
		init = 1;
	}
	for (n = 1; n <= 3; n++) {
		if (sluice_redis__parse_reply(reply, n, &allowed, &d, &which) ==
			    0 &&
		    (which >= n || d.allowed != allowed))
			abort();
		if (sluice_redis__parse_script_reply(reply, limits, n, n - 1,
						     &allowed, &d,
						     &which) == 0 &&
		    (which >= n || d.allowed != allowed))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisReader *rd = sluice_redis__reader_new();
	size_t off = 0, chunk;
	int failed = 0;

	if (!rd || size < 1) {
		sluice_redis__reader_free(rd);
		return 0;
	}
	/* The first byte picks the size of the pieces (1..256 bytes, or
	 * all at once), as reads of a socket would cut the stream. */
	chunk = data[0] ? data[0] : size;
	data++;
	size--;
	while (off < size && !failed) {
		size_t n = size - off < chunk ? size - off : chunk;
		redisReply *reply;
		char err[256];

		if (redisReaderFeed(rd, (const char *)data + off, n) !=
		    REDIS_OK)
			break;
		off += n;
		for (;;) {
			if (sluice_redis__reader_get(rd, &reply, err,
						     sizeof(err)) < 0) {
				failed = 1; /* link.c drops the connection */
				break;
			}
			if (!reply)
				break;
			if (check(reply, 0) > SLUICE_REDIS_REPLY_MAX_ELEMENTS)
				abort();
			decode(reply);
			freeReplyObject(reply);
		}
		/* What waits of an unfinished reply is bounded (a read of
		 * at most 16 kB lands on top between two checks). */
		if (!failed &&
		    rd->len - rd->pos > SLUICE_REDIS_REPLY_MAX_BYTES + 65536)
			abort();
	}
	sluice_redis__reader_free(rd);
	return 0;
}
