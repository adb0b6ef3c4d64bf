/*
 * test_headers.c -- the rate-limit header fields and the 429 body, byte
 * for byte: rounding (always up, Retry-After never 0), the IETF
 * RateLimit-Policy window, string escaping.
 */
#include "check.h"
#include "policy/ratelimit_headers.h"

#include <string.h>

static sluice_limit_t limit(const char *cap, const char *rate)
{
	sluice_limit_t l;
	char err[256];

	if (sluice_limit_parse(&l, cap, rate, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	return l;
}

static int buf_is(sluice_buf_t *b, const char *want)
{
	int ok = b->len == strlen(want) && memcmp(b->data, want, b->len) == 0;

	if (!ok)
		fprintf(stderr, "got:  %.*s\nwant: %s\n", (int)b->len, b->data,
			want);
	sluice_buf_free(b);
	return ok;
}

static void test_rounding_is_always_up(void)
{
	CHECK_EQ_U64(sluice_us_to_s_ceil(0), 0);
	CHECK_EQ_U64(sluice_us_to_s_ceil(1), 1);
	CHECK_EQ_U64(sluice_us_to_s_ceil(1000000), 1);
	CHECK_EQ_U64(sluice_us_to_s_ceil(1000001), 2);
	CHECK_EQ_U64(sluice_us_to_ms_ceil(1), 1);
	CHECK_EQ_U64(sluice_us_to_ms_ceil(1000), 1);
	CHECK_EQ_U64(sluice_us_to_ms_ceil(1001), 2);
}

static void test_retry_after_is_never_zero(void)
{
	CHECK_EQ_U64(sluice_retry_after_s(0), 1);
	CHECK_EQ_U64(sluice_retry_after_s(1), 1);
	CHECK_EQ_U64(sluice_retry_after_s(2000001), 3);
}

static void test_window_is_time_to_refill_from_empty(void)
{
	sluice_limit_t a = limit("100", "2/s"), b = limit("50", "50/min"),
		       c = limit("10", "3/s"), d = limit("1", "1000/s");

	CHECK_EQ_U64(sluice_limit_window_s(&a), 50);
	CHECK_EQ_U64(sluice_limit_window_s(&b), 60);
	CHECK_EQ_U64(sluice_limit_window_s(&c), 4); /* 3.33 s, rounded up */
	CHECK_EQ_U64(sluice_limit_window_s(&d), 1); /* 1 ms, rounded up */
}

static void test_allowed_headers(void)
{
	sluice_limit_t l = limit("100", "2/s");
	sluice_decision_t d = {.allowed = 1,
			       .limit = 100,
			       .remaining = 42,
			       .reset_after_us = 29000001};
	sluice_buf_t b = {0};

	sluice_ratelimit_headers(&b, "api", &l, &d, 0);
	CHECK(buf_is(&b, "X-RateLimit-Limit: 100\r\n"
			 "X-RateLimit-Remaining: 42\r\n"
			 "X-RateLimit-Reset: 30\r\n"
			 "RateLimit-Policy: \"api\";q=100;w=50\r\n"
			 "RateLimit: \"api\";r=42;t=30\r\n"));
}

static void test_limited_headers_add_retry(void)
{
	sluice_limit_t l = limit("100", "2/s");
	sluice_decision_t d = {.allowed = 0,
			       .limit = 100,
			       .remaining = 0,
			       .retry_after_us = 1500,
			       .reset_after_us = 50000000};
	sluice_buf_t b = {0};

	sluice_ratelimit_headers(&b, "upload/paid", &l, &d, 1);
	CHECK(buf_is(&b, "X-RateLimit-Limit: 100\r\n"
			 "X-RateLimit-Remaining: 0\r\n"
			 "X-RateLimit-Reset: 50\r\n"
			 "RateLimit-Policy: \"upload/paid\";q=100;w=50\r\n"
			 "RateLimit: \"upload/paid\";r=0;t=50\r\n"
			 "Retry-After: 1\r\n"
			 "X-RateLimit-Retry-After-Ms: 2\r\n"));
}

static void test_policy_lists_every_limit_of_the_rule(void)
{
	sluice_limit_t l[3] = {limit("100", "2/s"), limit("1000", "1000/day"),
			       limit("5", "5/min")};
	sluice_decision_t d = {.allowed = 1,
			       .limit = 1000,
			       .remaining = 7,
			       .reset_after_us = 1000000};
	sluice_buf_t b = {0};

	/* The second limit decided: it comes first under the rule's name,
	 * the others follow named by their position. */
	sluice_ratelimit_headers_set(&b, "api", l, 3, 1, &d, 0);
	CHECK(buf_is(&b, "X-RateLimit-Limit: 1000\r\n"
			 "X-RateLimit-Remaining: 7\r\n"
			 "X-RateLimit-Reset: 1\r\n"
			 "RateLimit-Policy: \"api\";q=1000;w=86400, "
			 "\"api.1\";q=100;w=50, \"api.3\";q=5;w=60\r\n"
			 "RateLimit: \"api\";r=7;t=1\r\n"));
}

/* Every header name as written on the wire is in one case: each word
 * capitalised, "RateLimit" as the draft spells it. */
static void test_header_names_in_one_case(void)
{
	sluice_limit_t l = limit("10", "1/s");
	sluice_decision_t d = {.limit = 10, .retry_after_us = 1000};
	sluice_buf_t b = {0};
	const char *p, *line;

	sluice_ratelimit_headers(&b, "api", &l, &d, 1);
	sluice_buf_append(&b, "", 1);
	for (line = b.data; *line; line = strstr(line, "\r\n") + 2) {
		const char *colon = strchr(line, ':');
		int start = 1;

		CHECK(colon);
		for (p = line; p < colon; p++) {
			if (start)
				CHECK(*p >= 'A' && *p <= 'Z');
			start = *p == '-';
		}
		CHECK(strncmp(line, "X-RateLimit-", 12) == 0 ||
		      strncmp(line, "RateLimit", 9) == 0 ||
		      strncmp(line, "Retry-After:", 12) == 0);
	}
	sluice_buf_free(&b);
}

static void test_cost_that_never_passes_waits_a_window(void)
{
	sluice_limit_t l = limit("10", "1/s");
	sluice_decision_t d = {.never = 1, .retry_after_us = UINT64_MAX};

	CHECK_EQ_U64(sluice_retry_us(&l, &d), 10000000);
}

static void test_policy_names_are_escaped(void)
{
	sluice_buf_t b = {0};

	sluice_sf_string(&b, "a\"b\\c\x01\xc3\xa9");
	CHECK(buf_is(&b, "\"a\\\"b\\\\c\""));
}

static void test_limited_body(void)
{
	sluice_buf_t b = {0};

	sluice_limited_body(&b, "we\"ird", 1234567);
	CHECK(buf_is(&b, "{\"error\":\"rate_limited\",\"retry_after_ms\":1235,"
			 "\"policy\":\"we\\\"ird\"}"));
}

int main(void)
{
	RUN(test_rounding_is_always_up);
	RUN(test_retry_after_is_never_zero);
	RUN(test_window_is_time_to_refill_from_empty);
	RUN(test_allowed_headers);
	RUN(test_limited_headers_add_retry);
	RUN(test_policy_lists_every_limit_of_the_rule);
	RUN(test_header_names_in_one_case);
	RUN(test_cost_that_never_passes_waits_a_window);
	RUN(test_policy_names_are_escaped);
	RUN(test_limited_body);
	TESTS_DONE();
}
