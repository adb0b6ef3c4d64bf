/*
 * test_quota_config.c -- calendar quotas in sluice's config: {quota: N,
 * per: UNIT, align, tz} wherever a limit is written (rules, tiers,
 * overrides), mixed with token buckets; every bad quota refused with
 * "FILE:LINE: what; expected ..."; a reload keeps a changed quota's
 * earlier limit until its windows are over; envoy.windows: calendar makes
 * descriptors calendar quotas, and only the domains it names.
 */
#include "check.h"
#include "policy/config/config.h"
#include "policy/envoy/config.h"
#include "policy/ratelimit_headers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static sluice_config_t *parse(const char *text, char *err, size_t errlen)
{
	err[0] = '\0';
	return sluice_config_parse("t.yaml", text, strlen(text), err, errlen);
}

static const sluice_limit_set_t *tier(const sluice_rule_t *r, const char *n)
{
	return sluice_rule_tier(r, n, strlen(n));
}

/* ------------------------------------------------------------- parsing */

static const char quotas[] =
	"rules:\n"
	"  - name: api\n"
	"    limits:\n"
	"      - {capacity: 100, rate: 2/s}\n"
	"      - {quota: 10000, per: month}\n"
	"      - {quota: 3, per: day, tz: Europe/Berlin}\n"
	"      - {quota: 50, per: hours, align: first_use}\n"
	"      - {quota: 1_000, per: week, align: calendar, tz: UTC}\n"
	"    overrides:\n"
	"      \"customer-42\": [{quota: 20000, per: month}]\n"
	"  - name: plans\n"
	"    key: [\"header:x-user\"]\n"
	"    tiers:\n"
	"      header: x-plan\n"
	"      default: free\n"
	"      limits:\n"
	"        free: [{quota: 100, per: day}]\n"
	"        pro: [{quota: 10000, per: month}, {capacity: 10, rate: "
	"10/s}]\n";

static void test_quotas_parse_where_limits_are_written(void)
{
	char err[512];
	sluice_config_t *c = parse(quotas, err, sizeof(err));
	const sluice_limit_t *l;
	const sluice_limit_set_t *s;
	const void *id = "customer-42";
	size_t idlen = strlen("customer-42");

	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	l = c->rules[0].limits.limits;
	CHECK(c->rules[0].limits.nlimits == 5);
	CHECK(!sluice_limit_is_quota(&l[0]) && l[0].capacity == 100);
	CHECK(sluice_limit_is_quota(&l[1]) && l[1].capacity == 10000);
	CHECK(l[1].window.per == SLUICE_PER_MONTH);
	CHECK(l[1].window.align == SLUICE_ALIGN_CALENDAR);
	CHECK(l[1].window.zone == 0);
	CHECK(l[2].capacity == 3 && l[2].window.per == SLUICE_PER_DAY);
	CHECK(l[2].window.zone != 0);
	CHECK(strcmp(sluice_zone_name(l[2].window.zone), "Europe/Berlin") == 0);
	CHECK(l[3].window.per == SLUICE_PER_HOUR);
	CHECK(l[3].window.align == SLUICE_ALIGN_FIRST_USE);
	CHECK(l[4].capacity == 1000 && l[4].window.per == SLUICE_PER_WEEK);
	CHECK(l[4].window.zone == 0);
	/* The override's own quota. */
	s = sluice_rule_override(&c->rules[0], &id, &idlen, 1);
	CHECK(s != NULL);
	CHECK(s && s->nlimits == 1 && s->limits[0].capacity == 20000 &&
	      s->limits[0].window.per == SLUICE_PER_MONTH);
	/* Tiers, mixed. */
	s = tier(&c->rules[1], "free");
	CHECK(s->nlimits == 1 && s->limits[0].window.per == SLUICE_PER_DAY);
	s = tier(&c->rules[1], "pro");
	CHECK(s->nlimits == 2 && sluice_limit_is_quota(&s->limits[0]) &&
	      !sluice_limit_is_quota(&s->limits[1]));
	sluice_config_free(c);
}

/* A quota and a bucket of the same numbers are different limits (their
 * buckets and counters never mix), and so are two zones. */
static void test_quota_ids_differ_from_buckets(void)
{
	char err[512], a[SLUICE_LIMIT_ID_MAX], b[SLUICE_LIMIT_ID_MAX];
	sluice_config_t *c = parse("rules:\n"
				   "  - name: r\n"
				   "    limits:\n"
				   "      - {capacity: 3, rate: 3/day}\n"
				   "      - {quota: 3, per: day}\n"
				   "      - {quota: 3, per: day, tz: "
				   "Europe/Berlin}\n",
				   err, sizeof(err));

	CHECK(c != NULL);
	if (!c)
		return;
	sluice_limit_id(&c->rules[0].limits.limits[0], a);
	sluice_limit_id(&c->rules[0].limits.limits[1], b);
	CHECK(strcmp(a, b) != 0);
	CHECK(!sluice_limit_same(&c->rules[0].limits.limits[0],
				 &c->rules[0].limits.limits[1]));
	CHECK(!sluice_limit_same(&c->rules[0].limits.limits[1],
				 &c->rules[0].limits.limits[2]));
	sluice_config_free(c);
}

/* ------------------------------------------------------------- errors */

static const struct {
	const char *limit; /* one limit, on line 4 */
	const char *needle;
} bad[] = {
	{"{quota: 10, per: fortnight}", "fortnight"},
	{"{quota: 10, per: day, tz: Mars/Olympus_Mons}", "Mars/Olympus_Mons"},
	{"{quota: 10, per: day, tz: ../../etc/passwd}", "tz"},
	{"{quota: 0, per: day}", "quota"},
	{"{quota: 1000000000, per: day}", "quota"},
	{"{quota: -1, per: day}", "quota"},
	{"{quota: 10, per: day, capacity: 10}", "capacity"},
	{"{quota: 10, per: day, rate: 1/s}", "rate"},
	{"{quota: 10}", "per"},
	{"{per: day}", "per"},
	{"{capacity: 10, rate: 1/s, tz: UTC}", "tz"},
	{"{quota: 10, per: day, align: midnight}", "midnight"},
	{"{quota: 10, per: day, align: first_use, tz: Europe/Berlin}", "tz"},
	{"{quota: 10, per: day, zone: UTC}", "zone"},
	{"{quota: [1], per: day}", "quota"},
};

static void test_bad_quotas_name_file_and_line(void)
{
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[512], err[1024];
		sluice_config_t *c;

		snprintf(text, sizeof(text),
			 "rules:\n  - name: r\n    limits:\n      - %s\n",
			 bad[i].limit);
		c = parse(text, err, sizeof(err));
		if (c) {
			fprintf(stderr, "accepted: %s\n", bad[i].limit);
			sluice_config_free(c);
		}
		CHECK(c == NULL);
		if (strncmp(err, "t.yaml:4:", 9) != 0 ||
		    !strstr(err, bad[i].needle) || !strstr(err, "expected"))
			fprintf(stderr, "%s -> %s\n", bad[i].limit, err);
		CHECK(strncmp(err, "t.yaml:4:", 9) == 0);
		CHECK(strstr(err, bad[i].needle) != NULL);
		CHECK(strstr(err, "expected") != NULL);
	}
}

/* The same checks in tiers and overrides, on their own lines. */
static void test_bad_quotas_in_tiers_and_overrides(void)
{
	char err[1024];
	sluice_config_t *c;

	c = parse("rules:\n"
		  "  - name: r\n"
		  "    tiers:\n"
		  "      header: x-plan\n"
		  "      default: free\n"
		  "      limits:\n"
		  "        free: [{quota: 10, per: day}]\n"
		  "        pro: [{quota: 10, per: lunar_month}]\n",
		  err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strncmp(err, "t.yaml:8:", 9) == 0);
	CHECK(strstr(err, "lunar_month") != NULL);
	c = parse("rules:\n"
		  "  - name: r\n"
		  "    limits: [{quota: 10, per: day}]\n"
		  "    overrides:\n"
		  "      alice: [{quota: 10, per: day, tz: Nowhere/Land}]\n",
		  err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strncmp(err, "t.yaml:5:", 9) == 0);
	CHECK(strstr(err, "Nowhere/Land") != NULL);
}

/* -------------------------------------------------------------- carry */

static const sluice_carry_from_t *carry_of(const sluice_limit_set_t *s,
					   size_t i)
{
	return s->carry ? &s->carry[i] : NULL;
}

/* A reload lowering a quota (or turning a bucket into a quota) hands the
 * old limit to the new one, kept at least until the old limit's window
 * open now is over (a month's: the 1st of next month). */
static void test_reload_carries_quotas_until_their_windows_end(void)
{
	char err[512];
	sluice_config_t *a, *b;
	const sluice_carry_from_t *cf;
	int64_t now = sluice_now_us(), end;

	a = parse("rules:\n  - name: r\n    limits:\n"
		  "      - {quota: 10000, per: year}\n"
		  "      - {capacity: 5, rate: 1/h}\n"
		  "      - {quota: 9, per: month}\n",
		  err, sizeof(err));
	b = parse("rules:\n  - name: r\n    limits:\n"
		  "      - {quota: 3000, per: year}\n"
		  "      - {quota: 5, per: day}\n"
		  "      - {capacity: 9, rate: 9/h}\n",
		  err, sizeof(err));
	CHECK(a != NULL && b != NULL);
	if (!a || !b)
		goto out;
	CHECK(sluice_config_carry(b, a, now) == 0);
	cf = carry_of(&b->rules[0].limits, 0);
	CHECK(cf && cf->n == 1);
	CHECK(cf &&
	      sluice_limit_same(&cf->from[0], &a->rules[0].limits.limits[0]));
	end = sluice_quota_calendar(&a->rules[0].limits.limits[0], now, NULL);
	CHECK(cf && cf->until_us[0] >= end);
	cf = carry_of(&b->rules[0].limits, 1); /* bucket -> quota */
	CHECK(cf && cf->n == 1 && !sluice_limit_is_quota(&cf->from[0]));
	cf = carry_of(&b->rules[0].limits, 2); /* quota -> bucket */
	CHECK(cf && cf->n == 1 && sluice_limit_is_quota(&cf->from[0]));
	end = sluice_quota_calendar(&a->rules[0].limits.limits[2], now, NULL);
	CHECK(cf && cf->until_us[0] >= end);
out:
	sluice_config_free(a);
	sluice_config_free(b);
}

/* ------------------------------------------------------------- headers */

/* w= of a quota is its current window's length: a UTC day is 86400 s, a
 * month 28 to 31 days, and a day of Europe/Berlin 23 to 25 hours. */
static void test_policy_window_of_a_quota(void)
{
	char err[512];
	sluice_config_t *c = parse("rules:\n  - name: r\n    limits:\n"
				   "      - {quota: 3, per: day}\n"
				   "      - {quota: 3, per: month}\n"
				   "      - {quota: 3, per: day, tz: "
				   "Europe/Berlin}\n",
				   err, sizeof(err));
	const sluice_limit_t *l;
	uint64_t w;

	CHECK(c != NULL);
	if (!c)
		return;
	l = c->rules[0].limits.limits;
	CHECK(sluice_limit_window_s(&l[0]) == 86400);
	w = sluice_limit_window_s(&l[1]);
	CHECK(w >= 28 * 86400 && w <= 31 * 86400);
	w = sluice_limit_window_s(&l[2]);
	CHECK(w >= 23 * 3600 && w <= 25 * 3600);
	/* 2024-02-10 12:00 UTC: February of a leap year, 29 days. */
	CHECK(sluice_quota_window_s(&l[1], 0, INT64_C(1707566400000000)) ==
	      29 * 86400);
	/* After a decision: its window, whatever the header's clock read a
	 * little later (a decision at 23:59:59.9 UTC, answered at 00:00:00.2
	 * of Feb 1 2027, reports January's 31 days, not February's). */
	CHECK(sluice_quota_window_s(&l[1], 100000,
				    INT64_C(1801440000000000) - 100000 +
					    300000) == 31 * 86400);
	CHECK(sluice_quota_window_s(&l[0], 100000,
				    INT64_C(1801440000000000) - 100000 +
					    300000) == 86400);
	/* Redis's clock decided, 15 s ahead of ours: the same window. */
	CHECK(sluice_quota_window_s(&l[1], 5000000,
				    INT64_C(1801440000000000) - 20000000) ==
	      31 * 86400);
	/* 2026-03-29, Berlin's spring forward: a day of 23 hours. */
	CHECK(sluice_quota_window_s(&l[2], 0, INT64_C(1774778400000000)) ==
	      23 * 3600);
	sluice_config_free(c);
}

/* --------------------------------------------------------------- envoy */

static char dir[64];

static sluice_config_t *envoy_cfg(const char *windows, char *err, size_t errlen)
{
	char text[512];

	snprintf(text, sizeof(text), "envoy:\n  config_dir: %s\n%s%s%s", dir,
		 windows ? "  windows: " : "", windows ? windows : "",
		 windows ? "\n" : "");
	return parse(text, err, errlen);
}

static void put(const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

static const sluice_limit_t *first_limit(const sluice_config_t *c,
					 const char *domain)
{
	size_t i;

	for (i = 0; i < c->envoy->ndomains; i++)
		if (strcmp(c->envoy->domains[i].name, domain) == 0)
			return &c->envoy->domains[i]
					.children[0]
					.limit->set.limits[0];
	return NULL;
}

static void test_envoy_windows_calendar(void)
{
	char err[1024], cmd[128];
	sluice_config_t *c;
	const sluice_limit_t *l;

	snprintf(dir, sizeof(dir), "/tmp/sluice-quota-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	put("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: "
		      "{unit: day, requests_per_unit: 3}\n");
	put("b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: "
		      "{unit: month, requests_per_unit: 7}\n");
	/* Default: token buckets, as before. */
	c = envoy_cfg(NULL, err, sizeof(err));
	CHECK(c != NULL);
	if (c) {
		CHECK(!sluice_limit_is_quota(first_limit(c, "a")));
		sluice_config_free(c);
	}
	c = envoy_cfg("calendar", err, sizeof(err));
	CHECK(c != NULL);
	if (c) {
		l = first_limit(c, "a");
		CHECK(sluice_limit_is_quota(l) && l->capacity == 3 &&
		      l->window.per == SLUICE_PER_DAY && l->window.zone == 0);
		l = first_limit(c, "b");
		CHECK(sluice_limit_is_quota(l) && l->capacity == 7 &&
		      l->window.per == SLUICE_PER_MONTH);
		sluice_config_free(c);
	}
	c = envoy_cfg("{calendar: [b]}", err, sizeof(err));
	CHECK(c != NULL);
	if (c) {
		CHECK(!sluice_limit_is_quota(first_limit(c, "a")));
		CHECK(sluice_limit_is_quota(first_limit(c, "b")));
		sluice_config_free(c);
	}
	c = envoy_cfg("fixed", err, sizeof(err));
	CHECK(c == NULL && strncmp(err, "t.yaml:3:", 9) == 0 &&
	      strstr(err, "fixed") && strstr(err, "expected"));
	c = envoy_cfg("{calendar: b}", err, sizeof(err));
	CHECK(c == NULL && strncmp(err, "t.yaml:3:", 9) == 0);
	c = envoy_cfg("{fixed: [b]}", err, sizeof(err));
	CHECK(c == NULL && strncmp(err, "t.yaml:3:", 9) == 0);
	/* burst means nothing to a calendar window. */
	put("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: "
		      "{unit: day, requests_per_unit: 3, burst: 9}\n");
	c = envoy_cfg("calendar", err, sizeof(err));
	CHECK(c == NULL && strstr(err, "a.yaml:4:") && strstr(err, "burst"));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
}

int main(void)
{
	RUN(test_quotas_parse_where_limits_are_written);
	RUN(test_quota_ids_differ_from_buckets);
	RUN(test_bad_quotas_name_file_and_line);
	RUN(test_bad_quotas_in_tiers_and_overrides);
	RUN(test_reload_carries_quotas_until_their_windows_end);
	RUN(test_policy_window_of_a_quota);
	RUN(test_envoy_windows_calendar);
	TESTS_DONE();
}
