/*
 * test_rate.c -- policy text: what parses, to which exact rational, and
 * what each kind of bad input says.
 */
#include "check.h"
#include "sluice.h"

#include <string.h>

static void expect_rate(const char *text, uint64_t interval, uint32_t per)
{
	sluice_rate_t r;
	char err[256] = "";

	if (sluice_rate_parse(text, &r, err, sizeof(err)) != 0 ||
	    r.interval != interval || r.per != per) {
		fprintf(stderr, "rate %s: got %llu/%u (%s), want %llu/%u\n",
			text, (unsigned long long)r.interval, r.per, err,
			(unsigned long long)interval, per);
		check_failed_now = 1;
	}
}

static void test_accepted_forms(void)
{
	expect_rate("2/s", 500000, 1);
	expect_rate("120/min", 500000, 1);
	expect_rate("5000/h", 720000, 1);
	expect_rate("10000/day", 8640000, 1);
	expect_rate("0.5/s", 2000000, 1);
	expect_rate("1/3s", 3000000, 1);
	expect_rate("7/day", 86400000000ULL, 7);
	expect_rate("1000000/s", 1, 1);
	expect_rate("3/s", 1000000, 3);
	expect_rate("50/min", 1200000, 1);
	expect_rate("2000/h", 1800000, 1);
	expect_rate("100", 10000, 1);
	expect_rate(" 2 / second ", 500000, 1);
	expect_rate("10/100ms", 10000, 1);
	expect_rate("5/minutes", 12000000, 1);
	expect_rate("1000000000/s", 1, 1000);
}

static void expect_error(const char *text, int code, const char *needle)
{
	sluice_rate_t r;
	char err[256] = "";
	int rc = sluice_rate_parse(text, &r, err, sizeof(err));

	if (rc != code || !strstr(err, needle)) {
		fprintf(stderr, "rate %s: rc %d (%s), want %d containing %s\n",
			text ? text : "(null)", rc, err, code, needle);
		check_failed_now = 1;
	}
}

static void test_bad_rates_say_what_was_expected(void)
{
	expect_error("0/s", SLUICE_ERANGE, "is zero");
	expect_error("-1", SLUICE_ERANGE, "negative");
	expect_error("abc", SLUICE_EINVAL, "not a number");
	expect_error("2/fortnight", SLUICE_EINVAL, "unknown time unit");
	expect_error("99999999999999999999/s", SLUICE_ERANGE, "too large");
	expect_error("2/s extra", SLUICE_EINVAL, "unexpected");
	expect_error("1.", SLUICE_EINVAL, "after the decimal point");
	expect_error("1/1.5s", SLUICE_EINVAL, "must be a whole number");
	expect_error("1/ 1.5 min", SLUICE_EINVAL, "must be a whole number");
	expect_error("1001/s", SLUICE_ERANGE, "too fine");
	expect_error("1/10000day", SLUICE_ERANGE, "too slow");
	expect_error("", SLUICE_EINVAL, "not a number");
	expect_error(NULL, SLUICE_EINVAL, "missing rate");
	CHECK(strlen(sluice_strerror(SLUICE_ERANGE)) > 0);
}

static void test_capacity_errors(void)
{
	sluice_limit_t l;
	char err[256];

	CHECK(sluice_limit_parse(&l, "0", "2/s", err, sizeof(err)) ==
	      SLUICE_ERANGE);
	CHECK(strstr(err, "at least 1"));
	CHECK(sluice_limit_parse(&l, "-5", "2/s", err, sizeof(err)) ==
	      SLUICE_ERANGE);
	CHECK(sluice_limit_parse(&l, "ten", "2/s", err, sizeof(err)) ==
	      SLUICE_EINVAL);
	CHECK(strstr(err, "whole number"));
	CHECK(sluice_limit_parse(&l, "100000", "1/day", err, sizeof(err)) ==
	      SLUICE_ERANGE);
	CHECK(strstr(err, "to refill"));
	CHECK(sluice_limit_parse(&l, "100", "2/s", err, sizeof(err)) == 0);
	CHECK_EQ_U64(l.tau, 100 * 500000);
}

/* Every rate written by sluice_rate_format() parses back to itself (the
 * Redis module receives rates as text). */
static void test_format_round_trips(void)
{
	const char *texts[] = {"2/s",  "7/day",	    "0.5/s",	"1/3s",
			       "3/s",  "1000000/s", "999/s",	"2000/h",
			       "1/7s", "13/17min",  "1/1000ms", "5/3day"};
	size_t i;

	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		sluice_rate_t a, b;
		char buf[64];

		CHECK(sluice_rate_parse(texts[i], &a, NULL, 0) == 0);
		CHECK(sluice_rate_format(&a, buf, sizeof(buf)) > 0);
		CHECK(sluice_rate_parse(buf, &b, NULL, 0) == 0);
		CHECK(a.interval == b.interval && a.per == b.per);
	}
}

/* The exact form the Redis store sends the module, "<per>/<interval>us",
 * parses back to the same rate for every rate, down to the slowest. */
static void test_exact_us_form_round_trips(void)
{
	const char *texts[] = {"2/s",	    "7/day",	    "1/3s",
			       "3/s",	    "1000000000/s", "999/s",
			       "1/3000day", "13/17min"};
	size_t i;

	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		sluice_rate_t a, b;
		char buf[64];

		CHECK(sluice_rate_parse(texts[i], &a, NULL, 0) == 0);
		snprintf(buf, sizeof(buf), "%u/%lluus", a.per,
			 (unsigned long long)a.interval);
		CHECK(sluice_rate_parse(buf, &b, NULL, 0) == 0);
		CHECK(a.interval == b.interval && a.per == b.per);
	}
}

int main(void)
{
	RUN(test_accepted_forms);
	RUN(test_bad_rates_say_what_was_expected);
	RUN(test_capacity_errors);
	RUN(test_format_round_trips);
	RUN(test_exact_us_form_round_trips);
	TESTS_DONE();
}
