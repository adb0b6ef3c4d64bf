/*
 * test_replay.c -- `sluice replay`: nginx log lines are parsed (combined,
 * common, trailing fields), malformed lines are counted and skipped, and a
 * small log replayed against two rules gives exact counts.
 */
#include "check.h"
#include "policy/config/config.h"
#include "sim/accesslog.h"
#include "sim/replay.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC		   INT64_C(1000000)
#define T_2026_11_30_10_00 INT64_C(1796032800) /* Unix seconds */

/* ------------------------------------------------------------- parsing */

static void test_parses_a_combined_line(void)
{
	char line[] = "203.0.113.9 - alice [30/Nov/2026:10:00:00 +0000] "
		      "\"GET /v1/feed?page=2 HTTP/1.1\" 200 512 "
		      "\"https://example.com/\" \"ExampleApp/4.2 (iOS)\"";
	sluice_logline_t ll;
	const char *why = NULL;

	CHECK(sluice_logline_parse(line, &ll, &why) == 0);
	CHECK(strcmp(ll.addr, "203.0.113.9") == 0);
	CHECK(ll.peer.ss_family == AF_INET);
	CHECK(ll.time_us == T_2026_11_30_10_00 * SEC);
	CHECK(!ll.has_fraction);
	CHECK(strcmp(ll.method, "GET") == 0);
	CHECK(strcmp(ll.path, "/v1/feed") == 0);
	CHECK(ll.status == 200);
	CHECK(strcmp(ll.referer, "https://example.com/") == 0);
	CHECK(strcmp(ll.agent, "ExampleApp/4.2 (iOS)") == 0);
}

static void test_parses_variants(void)
{
	char with_rt[] = "2001:db8::7 - - [30/Nov/2026:11:00:00 +0100] "
			 "\"POST /login HTTP/2.0\" 401 0 \"-\" \"curl/8\" "
			 "0.003 \"198.51.100.1\"";
	char common[] = "10.0.0.1 - - [30/Nov/2026:09:59:59.250 -0000] "
			"\"GET http://api.example.com/x?y HTTP/1.0\" 304 -";
	sluice_logline_t ll;
	const char *why = NULL;

	CHECK(sluice_logline_parse(with_rt, &ll, &why) == 0);
	CHECK(ll.peer.ss_family == AF_INET6);
	CHECK(ll.time_us == T_2026_11_30_10_00 * SEC); /* 11:00 at +0100 */
	CHECK(strcmp(ll.method, "POST") == 0 && ll.status == 401);
	CHECK(ll.referer == NULL);
	CHECK(strcmp(ll.agent, "curl/8") == 0);

	CHECK(sluice_logline_parse(common, &ll, &why) == 0);
	CHECK(ll.time_us == T_2026_11_30_10_00 * SEC - 750000);
	CHECK(ll.has_fraction);
	CHECK(strcmp(ll.path, "/x") == 0);
	CHECK(ll.referer == NULL && ll.agent == NULL);
}

static void test_rejects_malformed_lines_with_a_reason(void)
{
	static const char *const bad[] = {
		"",
		"not-an-address - - [30/Nov/2026:10:00:00 +0000] \"GET / "
		"HTTP/1.1\" 200 1",
		"10.0.0.1 - - [30/Nov/2026:10:00:00] \"GET / HTTP/1.1\" 200 1",
		"10.0.0.1 - - [31/Foo/2026:10:00:00 +0000] \"GET / HTTP/1.1\" "
		"200 1",
		"10.0.0.1 - - [30/Nov/2026:10:00:00 +0000] \"\\x16\\x03\\x01\" "
		"400 150 \"-\" \"-\"",
		"10.0.0.1 - - [30/Nov/2026:10:00:00 +0000] \"-\" 400 0",
		"10.0.0.1 - - [30/Nov/2026:10:00:00 +0000] \"GET / HTTP/1.1\"",
		"10.0.0.1 - - [30/Nov/2026:10:00:00 +0000] \"GET / HTTP/1.1\" "
		"2x0 1",
		"10.0.0.1 - - [30/Nov/2026:10:00:00 +0000",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char buf[256];
		sluice_logline_t ll;
		const char *why = NULL;

		snprintf(buf, sizeof(buf), "%s", bad[i]);
		if (sluice_logline_parse(buf, &ll, &why) != -1) {
			fprintf(stderr, "accepted: %s\n", bad[i]);
			CHECK(0);
		}
		CHECK(why != NULL && why[0] != '\0');
	}
}

/* -------------------------------------------------------------- replay */

static const char config[] = "rules:\n"
			     "  - name: api\n"
			     "    match: {path: \"/api/*\"}\n"
			     "    key: [\"header:x-user-id\", ip]\n"
			     "    limits: [{capacity: 3, rate: 1/s}]\n"
			     "  - name: login\n"
			     "    match: {methods: [POST], path: /login}\n"
			     "    key: ip\n"
			     "    limits: [{capacity: 2, rate: 1/min}]\n";

static void line(FILE *f, const char *ip, int min, int sec, const char *request)
{
	fprintf(f,
		"%s - - [30/Nov/2026:10:%02d:%02d +0000] \"%s HTTP/1.1\" 200 "
		"42 \"-\" \"test/1.0\"\n",
		ip, min, sec, request);
}

/*
 * 10.0.0.1: 5 requests in one second (spread 0.2 s apart): 3 from the
 *   bucket, the 4th and 5th come before a whole token refills -> 2 limited,
 *   although 5 a minute is far below the sustained 60/min: false positives.
 * 10.0.0.2: 2 a second for 35 s (70 in the minute, over 60/min): 33 limited.
 * 10.0.0.3: 4 logins in one second: 2 pass, 2 limited (over 1/min).
 * plus 1 unmatched request, 3 malformed lines and 1 empty line.
 */
static FILE *small_log(void)
{
	FILE *f = tmpfile();
	int i;

	if (!f)
		return NULL;
	for (i = 0; i < 5; i++)
		line(f, "10.0.0.1", 0, 0, "GET /api/items");
	fputs("this is not a log line\n", f);
	for (i = 0; i < 70; i++)
		line(f, "10.0.0.2", 1, i / 2, "GET /api/search?q=x");
	fputs("\n10.0.0.9 - - [30/Nov/2026:10:01:40 +0000] \"-\" 400 0 "
	      "\"-\" \"-\"\n",
	      f);
	for (i = 0; i < 4; i++)
		line(f, "10.0.0.3", 2, 0, "POST /login");
	line(f, "10.0.0.3", 2, 1, "GET /health");
	fputs("10.0.0.3 - - [30/Nov/2026:10:02:02 +0000] \"GET /api/x", f);
	rewind(f);
	return f;
}

static void test_replays_a_small_log_with_exact_counts(void)
{
	char err[512];
	sluice_config_t *cfg = sluice_config_parse(
		"t.yaml", config, strlen(config), err, sizeof(err));
	sluice_replay_opts_t o;
	sluice_replay_report_t r;
	const sluice_replay_rule_t *api, *login;
	FILE *f = small_log();
	int rc;

	CHECK(cfg != NULL && f != NULL);
	sluice_replay_opts_default(&o);
	rc = sluice_replay_run(cfg, f, &o, &r, err, sizeof(err));
	fclose(f);
	CHECK(rc == 0);
	CHECK_EQ_U64(r.lines, 5 + 1 + 70 + 1 + 4 + 1 + 1);
	CHECK_EQ_U64(r.malformed, 3);
	CHECK_EQ_U64(r.first_bad_line, 6);
	CHECK_EQ_U64(r.replayed, 5 + 70 + 4 + 1);
	CHECK_EQ_U64(r.unmatched, 1);
	CHECK_EQ_U64(r.rejected, 2 + 33 + 2);
	CHECK_EQ_U64(r.first_us, T_2026_11_30_10_00 * SEC);
	CHECK_EQ_U64(r.last_us, (T_2026_11_30_10_00 + 121) * SEC);
	CHECK_EQ_U64(r.nrules, 2);

	api = &r.rules[0];
	CHECK(strstr(api->note, "x-user-id") != NULL);
	CHECK_EQ_U64(api->requests, 75);
	CHECK_EQ_U64(api->keys, 2);
	CHECK_EQ_U64(api->limited, 35);
	CHECK_EQ_U64(api->limited_keys, 2);
	CHECK_EQ_U64(api->fp_keys, 1);
	CHECK_EQ_U64(api->fp_requests, 2);
	CHECK(api->allowance == 60.0);
	CHECK_EQ_U64(api->ntop, 2);
	CHECK(api->top[0].namelen == 8 &&
	      memcmp(api->top[0].name, "10.0.0.2", 8) == 0);
	CHECK_EQ_U64(api->top[0].limited, 33);
	CHECK(api->top[0].exceeded);
	CHECK(memcmp(api->top[1].name, "10.0.0.1", 8) == 0);
	CHECK_EQ_U64(api->top[1].limited, 2);
	CHECK(!api->top[1].exceeded);

	login = &r.rules[1];
	CHECK(login->note[0] == '\0');
	CHECK_EQ_U64(login->requests, 4);
	CHECK_EQ_U64(login->limited, 2);
	CHECK_EQ_U64(login->fp_requests, 0);
	sluice_replay_report_free(&r);
	sluice_config_free(cfg);
}

static void test_top_limits_the_list(void)
{
	char err[512];
	sluice_config_t *cfg = sluice_config_parse(
		"t.yaml", config, strlen(config), err, sizeof(err));
	sluice_replay_opts_t o;
	sluice_replay_report_t r;
	FILE *f = small_log();

	CHECK(cfg != NULL && f != NULL);
	sluice_replay_opts_default(&o);
	o.top = 1;
	o.window_us = 3600 * SEC; /* 3600 a window: 70 is no longer over */
	CHECK(sluice_replay_run(cfg, f, &o, &r, err, sizeof(err)) == 0);
	fclose(f);
	CHECK_EQ_U64(r.rules[0].ntop, 1);
	CHECK_EQ_U64(r.rules[0].fp_keys, 2);
	CHECK_EQ_U64(r.rules[0].fp_requests, 35);
	sluice_replay_report_free(&r);
	sluice_config_free(cfg);
}

static void test_shadow_rules_are_charged_on_their_own(void)
{
	static const char text[] = "rules:\n"
				   "  - name: strict\n"
				   "    key: ip\n"
				   "    limits: [{capacity: 1, rate: 1/min}]\n"
				   "  - name: trial\n"
				   "    key: ip\n"
				   "    shadow: true\n"
				   "    limits: [{capacity: 2, rate: 1/min}]\n";
	char err[512];
	sluice_config_t *cfg = sluice_config_parse("t.yaml", text, strlen(text),
						   err, sizeof(err));
	sluice_replay_opts_t o;
	sluice_replay_report_t r;
	FILE *f = tmpfile();
	int i;

	/* Three requests: the enforcing rule passes only the first; the
	 * shadow rule, charged even when the request is rejected, passes two
	 * and would limit the third.  Only the enforcing rule rejects. */
	CHECK(cfg != NULL && f != NULL);
	for (i = 0; i < 3; i++)
		line(f, "10.9.9.9", 0, i, "GET /");
	rewind(f);
	sluice_replay_opts_default(&o);
	CHECK(sluice_replay_run(cfg, f, &o, &r, err, sizeof(err)) == 0);
	fclose(f);
	CHECK_EQ_U64(r.replayed, 3);
	CHECK_EQ_U64(r.rejected, 2);
	CHECK_EQ_U64(r.rules[0].limited, 2);
	CHECK_EQ_U64(r.rules[1].limited, 1);
	sluice_replay_report_free(&r);
	sluice_config_free(cfg);
}

/* Replay decides every matching rule, as serve does: a rule after
 * sixteen that match the same request still limits it. */
static void test_a_rule_after_sixteen_matching_ones_counts(void)
{
	char text[4096], err[512];
	size_t n = 0;
	sluice_config_t *cfg;
	sluice_replay_opts_t o;
	sluice_replay_report_t r;
	FILE *f = tmpfile();
	int i;

	n += (size_t)snprintf(text + n, sizeof(text) - n, "rules:\n");
	for (i = 0; i < 16; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      "  - name: r%d\n    key: ip\n"
				      "    limits: [{capacity: 100, rate: "
				      "1/min}]\n",
				      i);
	snprintf(text + n, sizeof(text) - n,
		 "  - name: upload\n    match: {path: \"/api/upload\"}\n"
		 "    key: ip\n    limits: [{capacity: 2, rate: 2/min}]\n");
	cfg = sluice_config_parse("t.yaml", text, strlen(text), err,
				  sizeof(err));
	CHECK(cfg != NULL && f != NULL);
	for (i = 0; i < 10; i++)
		line(f, "10.7.7.7", 0, 0, "POST /api/upload");
	rewind(f);
	sluice_replay_opts_default(&o);
	CHECK(sluice_replay_run(cfg, f, &o, &r, err, sizeof(err)) == 0);
	fclose(f);
	CHECK_EQ_U64(r.replayed, 10);
	CHECK_EQ_U64(r.rejected, 8);
	CHECK_EQ_U64(r.rules[16].limited, 8);
	CHECK_EQ_U64(r.rules[0].limited, 0);
	sluice_replay_report_free(&r);
	sluice_config_free(cfg);
}

int main(void)
{
	RUN(test_parses_a_combined_line);
	RUN(test_parses_variants);
	RUN(test_rejects_malformed_lines_with_a_reason);
	RUN(test_replays_a_small_log_with_exact_counts);
	RUN(test_top_limits_the_list);
	RUN(test_shadow_rules_are_charged_on_their_own);
	RUN(test_a_rule_after_sixteen_matching_ones_counts);
	TESTS_DONE();
}
