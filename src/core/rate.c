/*
 * rate.c -- policy text: rates ("2/s", "0.5/s", "1/3s", "7/day") and
 * capacities ("100"), parsed into exact rationals with messages that say
 * what was expected.
 */
#include "core/decide.h"
#include "sluice.h"
#include "util/errmsg.h"
#include "util/invariant.h"
#include "util/num.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define US_PER_S UINT64_C(1000000)

static const struct {
	const char *name;
	uint64_t us;
} units[] = {
	{"us", 1},
	{"ms", 1000},
	{"s", US_PER_S},
	{"sec", US_PER_S},
	{"second", US_PER_S},
	{"m", 60 * US_PER_S},
	{"min", 60 * US_PER_S},
	{"minute", 60 * US_PER_S},
	{"h", 3600 * US_PER_S},
	{"hour", 3600 * US_PER_S},
	{"d", 86400 * US_PER_S},
	{"day", 86400 * US_PER_S},
};

/* Parses [0-9]+ into *v, advancing *p; 0 on success, -1 no digits, -2 on
 * overflow past `max`. */
static int parse_uint(const char **p, uint64_t max, uint64_t *v, int *ndigits)
{
	const char *s = *p;
	uint64_t x = 0;
	int n = 0;

	while (isdigit((unsigned char)*s)) {
		unsigned dgt = (unsigned)(*s - '0');
		if (x > (max - dgt) / 10)
			return -2;
		x = x * 10 + dgt;
		s++;
		n++;
	}
	if (n == 0)
		return -1;
	*p = s;
	*v = x;
	if (ndigits)
		*ndigits = n;
	return 0;
}

static int unit_us(const char *s, size_t len, uint64_t *us)
{
	size_t i;

	/* Accept plurals: "minutes", "days", "secs". */
	if (len > 1 && s[len - 1] == 's' && !(len == 2 && s[0] == 'm'))
		for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (strlen(units[i].name) == len - 1 &&
			    strncmp(units[i].name, s, len - 1) == 0 &&
			    len - 1 > 1) {
				*us = units[i].us;
				return 0;
			}
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strlen(units[i].name) == len &&
		    strncmp(units[i].name, s, len) == 0) {
			*us = units[i].us;
			return 0;
		}
	return -1;
}

#define RATE_FORMS                                                             \
	"a rate like \"2/s\", \"50/min\", \"2000/h\", \"10000/day\", "         \
	"\"0.5/s\" or \"1/3s\""

static void skip_space(const char **p)
{
	while (isspace((unsigned char)**p))
		(*p)++;
}

/* The amount, "2" or "0.5" at *p (advanced past it), as num / scale
 * tokens (scale a power of ten). */
static int parse_amount(const char *text, const char **p, uint64_t *num,
			uint64_t *scale, char *err, size_t errlen)
{
	uint64_t whole, frac = 0;
	int fdigits = 0, rc;

	if (**p == '-')
		return sluice_fail(SLUICE_ERANGE, err, errlen,
				   "rate \"%s\" is negative: expected %s", text,
				   RATE_FORMS);
	rc = parse_uint(p, UINT64_C(1000000000000), &whole, NULL);
	if (rc == -2)
		return sluice_fail(
			SLUICE_ERANGE, err, errlen,
			"rate \"%s\" is too large: at most 10^12 tokens per "
			"period",
			text);
	if (rc == -1)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "rate \"%s\" is not a number: expected %s",
				   text, RATE_FORMS);
	*scale = 1;
	if (**p == '.') {
		(*p)++;
		rc = parse_uint(p, UINT64_C(999999), &frac, &fdigits);
		if (rc != 0)
			return sluice_fail(
				SLUICE_EINVAL, err, errlen,
				"rate \"%s\": expected 1 to 6 digits after "
				"the decimal point",
				text);
		while (fdigits-- > 0)
			*scale *= 10;
	}
	/* At most 10^12 * 10^6: no overflow. */
	*num = whole * *scale + frac;
	return SLUICE_OK;
}

/* The period after the '/', "s" or "3s" at *p (advanced past it), as
 * mult units of unit_us. */
static int parse_period(const char *text, const char **p, uint64_t *mult,
			uint64_t *unit_us_out, char *err, size_t errlen)
{
	const char *u;
	int rc;

	skip_space(p);
	if (isdigit((unsigned char)**p)) {
		rc = parse_uint(p, SLUICE_UNITS_MAX, mult, NULL);
		if (rc != 0 || *mult == 0)
			return sluice_fail(SLUICE_ERANGE, err, errlen,
					   "rate \"%s\": the period multiplier "
					   "must be 1 to 2^52",
					   text);
		/* "1/1.5s": a fraction of a period would be a rate this
		 * fixed-point form cannot hold exactly; say so rather than
		 * "unknown time unit \".\"". */
		if (**p == '.')
			return sluice_fail(
				SLUICE_EINVAL, err, errlen,
				"rate \"%s\": the period multiplier must be "
				"a whole number: expected e.g. \"2/3s\" "
				"rather than \"1/1.5s\"",
				text);
		skip_space(p);
	}
	u = *p;
	while (isalpha((unsigned char)**p))
		(*p)++;
	if (*p == u || unit_us(u, (size_t)(*p - u), unit_us_out) != 0)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "rate \"%s\": unknown time unit \"%.*s\": "
				   "expected us, ms, s, min, h or day",
				   text, (int)(*p - u), u);
	return SLUICE_OK;
}

/* num / scale tokens per period_us: one token every period/den us, the
 * fraction in lowest terms, or an error when it does not fit. */
static int rate_reduce(const char *text, uint64_t num, unsigned __int128 period,
		       sluice_rate_t *out, char *err, size_t errlen)
{
	uint64_t den = num, g;

	if (num == 0)
		return sluice_fail(
			SLUICE_ERANGE, err, errlen,
			"rate \"%s\" is zero: a bucket must refill; expected "
			"%s",
			text, RATE_FORMS);
	g = sluice_gcd((uint64_t)(period % den), den);
	g = g ? g : den;
	period /= g;
	den /= g;
	/* In lowest terms (gcd(period, den) is gcd(period % den, den)). */
	SLUICE_ASSERT(den >= 1 &&
		      sluice_gcd((uint64_t)(period % den), den) == 1);
	if (den > SLUICE_RATE_PER_MAX)
		return sluice_fail(
			SLUICE_ERANGE, err, errlen,
			"rate \"%s\" is too fine to keep exact: one token "
			"every %llu/%llu us needs steps below 1/%u us; "
			"choose a nearby rate (e.g. a round number per "
			"second or minute)",
			text, (unsigned long long)period,
			(unsigned long long)den, SLUICE_RATE_PER_MAX);
	if (period > SLUICE_UNITS_MAX || period / den > SLUICE_REFILL_MAX_US)
		return sluice_fail(
			SLUICE_ERANGE, err, errlen,
			"rate \"%s\" is too slow: at least one token per "
			"%llu days",
			text,
			(unsigned long long)(SLUICE_REFILL_MAX_US /
					     86400000000ull));
	out->interval = (uint64_t)period;
	out->per = (uint32_t)den;
	return SLUICE_OK;
}

int sluice_rate_parse(const char *text, sluice_rate_t *out, char *err,
		      size_t errlen)
{
	const char *p = text;
	uint64_t num = 0, scale = 1, mult = 1, unit = US_PER_S;
	int rc;

	if (!text)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "missing rate: expected %s", RATE_FORMS);
	skip_space(&p);
	rc = parse_amount(text, &p, &num, &scale, err, errlen);
	if (rc < 0)
		return rc;
	skip_space(&p);
	if (*p == '/') {
		p++;
		rc = parse_period(text, &p, &mult, &unit, err, errlen);
		if (rc < 0)
			return rc;
	}
	skip_space(&p);
	if (*p != '\0')
		return sluice_fail(
			SLUICE_EINVAL, err, errlen,
			"rate \"%s\": unexpected \"%s\": expected %s", text, p,
			RATE_FORMS);
	/* tokens = num / scale per (mult*unit) us, so the interval is
	 * mult*unit*scale / num us per token. */
	return rate_reduce(text, num, (unsigned __int128)mult * unit * scale,
			   out, err, errlen);
}

int sluice_rate_format(const sluice_rate_t *rate, char *buf, size_t len)
{
	static const struct {
		const char *name;
		uint64_t us;
	} fmt[] = {{"s", US_PER_S},
		   {"min", 60 * US_PER_S},
		   {"h", 3600 * US_PER_S},
		   {"day", 86400 * US_PER_S}};
	size_t i;

	/* per tokens every interval us: the smallest unit with a whole count */
	for (i = 0; i < sizeof(fmt) / sizeof(fmt[0]); i++) {
		unsigned __int128 tok =
			(unsigned __int128)fmt[i].us * rate->per;
		if (tok % rate->interval == 0)
			return snprintf(
				buf, len, "%llu/%s",
				(unsigned long long)(tok / rate->interval),
				fmt[i].name);
	}
	/* e.g. one token every 3 days: "1/259200s"; else exact in us.  Both
	 * forms parse back to the same rate. */
	if (rate->interval % (US_PER_S) == 0 && rate->per == 1)
		return snprintf(
			buf, len, "1/%llus",
			(unsigned long long)(rate->interval / US_PER_S));
	return snprintf(buf, len, "%u/%lluus", rate->per,
			(unsigned long long)rate->interval);
}

int sluice_limit_init(sluice_limit_t *limit, uint64_t capacity,
		      const sluice_rate_t *rate, char *err, size_t errlen)
{
	uint64_t g;

	if (capacity == 0)
		return sluice_fail(SLUICE_ERANGE, err, errlen,
				   "capacity must be at least 1");
	if (rate->interval == 0 || rate->per == 0 ||
	    rate->per > SLUICE_RATE_PER_MAX)
		return sluice_fail(SLUICE_EINVAL, err, errlen, "invalid rate");
	if (capacity > SLUICE_UNITS_MAX / rate->interval ||
	    capacity * rate->interval / rate->per > SLUICE_REFILL_MAX_US) {
		uint64_t most = SLUICE_UNITS_MAX / rate->interval;
		uint64_t by_time =
			(uint64_t)((unsigned __int128)SLUICE_REFILL_MAX_US *
				   rate->per / rate->interval);
		return sluice_fail(
			SLUICE_ERANGE, err, errlen,
			"capacity %llu is too large for this rate: an empty "
			"bucket may take at most %llu days to refill (at "
			"most %llu tokens)",
			(unsigned long long)capacity,
			(unsigned long long)(SLUICE_REFILL_MAX_US /
					     86400000000ULL),
			(unsigned long long)(most < by_time ? most : by_time));
	}
	limit->capacity = capacity;
	limit->rate = *rate;
	/* Lowest terms: a limit has one spelling, so its identity
	 * (sluice_limit_id()) is the same however the rate was written. */
	g = sluice_gcd(rate->interval, rate->per);
	limit->rate.interval /= g;
	limit->rate.per /= (uint32_t)g;
	limit->tau = capacity * limit->rate.interval;
	memset(&limit->window, 0, sizeof(limit->window)); /* a token bucket */
	/* Reduced, tau = C*T exact (no wrap) and within 2^52 units and
	 * SLUICE_REFILL_MAX_US: every limit built here is one the stores
	 * accept. */
	SLUICE_ASSERT(sluice_gcd(limit->rate.interval, limit->rate.per) == 1 &&
		      limit->tau / limit->rate.interval == capacity &&
		      limit->tau / limit->rate.per <= SLUICE_REFILL_MAX_US &&
		      sluice_limit_valid_inline(limit));
	return SLUICE_OK;
}

int sluice_limit_parse(sluice_limit_t *limit, const char *capacity,
		       const char *rate, char *err, size_t errlen)
{
	const char *p = capacity;
	sluice_rate_t r;
	uint64_t cap;
	int rc;

	if (!p)
		return sluice_fail(
			SLUICE_EINVAL, err, errlen,
			"missing capacity: expected a whole number >= 1");
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '-')
		return sluice_fail(
			SLUICE_ERANGE, err, errlen,
			"capacity \"%s\" is negative: expected a whole "
			"number >= 1",
			capacity);
	rc = parse_uint(&p, SLUICE_UNITS_MAX, &cap, NULL);
	while (rc == 0 && isspace((unsigned char)*p))
		p++;
	if (rc == -2)
		return sluice_fail(SLUICE_ERANGE, err, errlen,
				   "capacity \"%s\" is too large", capacity);
	if (rc != 0 || *p != '\0')
		return sluice_fail(
			SLUICE_EINVAL, err, errlen,
			"capacity \"%s\" is not a whole number: expected "
			"e.g. 100",
			capacity);
	if ((rc = sluice_rate_parse(rate, &r, err, errlen)) != 0)
		return rc;
	return sluice_limit_init(limit, cap, &r, err, errlen);
}
