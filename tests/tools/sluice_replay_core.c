/*
 * sluice_replay_core.c -- replays a sequence of decisions through the core
 * (sluice_eval_all) and prints each result, so that integration tests can
 * compare another path (the Redis module, the Redis script) with the core
 * decision by decision.
 *
 * Reads commands from stdin, one per line:
 *
 *   L n cap1 rate1 [cap2 rate2 ...]   set n limits; every state becomes 0
 *   S i state                         set the state of limit i
 *   P cap rate                        print "interval per capacity" (the
 *                                     limit as the Redis script takes it)
 *   T now_us cost                     decide and commit, print one line:
 *
 *   allowed limit remaining retry_after_ms reset_ms which state0 [state1 ...]
 *
 * with the same conventions as SLUICE.TAKEMULTI: times are the decision's
 * microseconds rounded up to milliseconds, retry_after_ms is -1 when the
 * cost exceeds the capacity, which is the index of the most restrictive
 * limit, and the states are the committed states.  Errors go to stderr with
 * exit status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define MAX_LIMITS SLUICE_MAX_LIMITS

static long long ms_ceil(uint64_t us)
{
	return (long long)(us / 1000 + (us % 1000 != 0));
}

static int die(int line, const char *msg)
{
	fprintf(stderr, "sluice_replay_core: line %d: %s\n", line, msg);
	return 1;
}

int main(void)
{
	sluice_limit_t limits[MAX_LIMITS];
	sluice_state_t states[MAX_LIMITS], next[MAX_LIMITS];
	sluice_decision_t d[MAX_LIMITS], summary;
	char buf[4096], err[256];
	size_t n = 0, i, w;
	int line = 0;

	while (fgets(buf, sizeof(buf), stdin)) {
		char *save = NULL, *tok = strtok_r(buf, " \t\r\n", &save);

		line++;
		if (!tok)
			continue;
		if (strcmp(tok, "L") == 0) {
			char *cnt = strtok_r(NULL, " \t\r\n", &save);

			n = cnt ? strtoul(cnt, NULL, 10) : 0;
			if (n == 0 || n > MAX_LIMITS)
				return die(line, "L: need 1 to 64 limits");
			for (i = 0; i < n; i++) {
				char *cap = strtok_r(NULL, " \t\r\n", &save);
				char *rate = strtok_r(NULL, " \t\r\n", &save);

				if (sluice_limit_parse(&limits[i], cap, rate,
						       err, sizeof(err)) != 0)
					return die(line, err);
				states[i] = 0;
			}
		} else if (strcmp(tok, "P") == 0) {
			char *cap = strtok_r(NULL, " \t\r\n", &save);
			char *rate = strtok_r(NULL, " \t\r\n", &save);
			sluice_limit_t l;

			if (sluice_limit_parse(&l, cap, rate, err, sizeof(err)))
				return die(line, err);
			printf("%llu %u %llu\n",
			       (unsigned long long)l.rate.interval, l.rate.per,
			       (unsigned long long)l.capacity);
		} else if (strcmp(tok, "S") == 0) {
			char *idx = strtok_r(NULL, " \t\r\n", &save);
			char *val = strtok_r(NULL, " \t\r\n", &save);

			if (!idx || !val || (i = strtoul(idx, NULL, 10)) >= n)
				return die(line, "S: expected S index state");
			states[i] = strtoll(val, NULL, 10);
		} else if (strcmp(tok, "T") == 0) {
			char *now = strtok_r(NULL, " \t\r\n", &save);
			char *cost = strtok_r(NULL, " \t\r\n", &save);

			if (!now || !cost || n == 0)
				return die(line, "T: expected T now_us cost "
						 "after L");
			sluice_eval_all(
				limits, states, n, strtoll(now, NULL, 10),
				strtoull(cost, NULL, 10), next, d, &summary);
			w = summary.which;
			printf("%d %llu %llu %lld %lld %zu", summary.allowed,
			       (unsigned long long)summary.limit,
			       (unsigned long long)summary.remaining,
			       summary.never ? -1LL
					     : ms_ceil(summary.retry_after_us),
			       ms_ceil(summary.reset_after_us), w);
			for (i = 0; i < n; i++) {
				states[i] = next[i];
				printf(" %lld", (long long)states[i]);
			}
			printf("\n");
		} else {
			return die(line, "unknown command (L, P, S or T)");
		}
	}
	return 0;
}
