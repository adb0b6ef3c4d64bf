/*
 * replay_cmd.c -- `sluice replay --config FILE [--json] [--top N]
 * [--window SECONDS] ACCESS_LOG`: the report of replay.c.
 */
#include "sim/replay.h"
#include "sim/sim.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SEC INT64_C(1000000)

static const char *const usage =
	"usage: sluice replay --config FILE [--json] [--top N] "
	"[--window SECONDS] ACCESS_LOG\n"
	"\n"
	"Replays an nginx access log (combined or common format, extra "
	"trailing\n"
	"fields ignored; '-' reads stdin) against the rules of FILE in the "
	"log's\n"
	"own time, and reports per rule what would have been limited, the "
	"most\n"
	"limited keys, and how many of those never exceeded the sustained "
	"rate\n"
	"within a window (default 60 s): the likely false positives.\n";

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* "100 + 2/s, 1000 + 500/h" */
static void limits_text(const sluice_rule_t *rule, char *buf, size_t len)
{
	const sluice_limit_set_t *set =
		rule->ntiers ? &rule->tiers[rule->default_tier] : &rule->limits;
	size_t i, off = 0;
	char rate[64];

	buf[0] = '\0';
	for (i = 0; i < set->nlimits && off < len; i++) {
		sluice_rate_format(&set->limits[i].rate, rate, sizeof(rate));
		off += (size_t)snprintf(
			buf + off, len - off, "%s%llu + %s", i ? ", " : "",
			(unsigned long long)set->limits[i].capacity, rate);
	}
	if (rule->ntiers && off < len)
		snprintf(buf + off, len - off, " (tier %s of %zu, by %s)",
			 set->name, rule->ntiers, rule->tier_header);
}

/* "header:x-user-id, ip" */
static void sources_text(const sluice_rule_t *rule, char *buf, size_t len)
{
	size_t s, p, off = 0;

	buf[0] = '\0';
	for (s = 0; s < rule->nsources && off < len; s++)
		for (p = 0; p < rule->sources[s].nparts && off < len; p++) {
			const sluice_key_part_t *kp =
				&rule->sources[s].parts[p];

			off += (size_t)snprintf(
				buf + off, len - off, "%s%s%s",
				p ? "+" : (s ? ", " : ""),
				kp->kind == SLUICE_KEY_IP ? "ip" : "header:",
				kp->kind == SLUICE_KEY_IP ? "" : kp->header);
		}
}

/* A key for display: composite parts are joined with \x1f in the store
 * key, shown as '+'. */
static const char *key_text(const sluice_replay_key_t *k, char *buf, size_t len)
{
	size_t i, n = k->namelen < len - 1 ? k->namelen : len - 1;

	for (i = 0; i < n; i++)
		buf[i] = k->name[i] == '\x1f' ? '+' : k->name[i];
	buf[n] = '\0';
	return buf;
}

static void iso_time(int64_t us, char *buf, size_t len)
{
	time_t t = (time_t)(us / SEC);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void print_text(const char *logname, const char *cfgname,
		       const sluice_replay_report_t *r, int64_t window_us)
{
	char a[32], b[32], lim[256], src[256], key[512];
	size_t i, k;

	printf("sluice replay: %s against %s\n", logname, cfgname);
	printf("  lines %llu, replayed %llu, malformed %llu",
	       (unsigned long long)r->lines, (unsigned long long)r->replayed,
	       (unsigned long long)r->malformed);
	if (r->malformed)
		printf(" (first: line %llu, %s)",
		       (unsigned long long)r->first_bad_line, r->first_bad_why);
	printf(", no rule matched %llu\n", (unsigned long long)r->unmatched);
	if (r->replayed) {
		iso_time(r->first_us, a, sizeof(a));
		iso_time(r->last_us, b, sizeof(b));
		printf("  from %s to %s (%.0f s)\n", a, b,
		       (double)(r->last_us - r->first_us) / SEC);
	}
	printf("  would be rejected: %llu requests (%.2f%%)\n",
	       (unsigned long long)r->rejected, pct(r->rejected, r->replayed));
	for (i = 0; i < r->nrules; i++) {
		const sluice_replay_rule_t *rr = &r->rules[i];

		limits_text(rr->rule, lim, sizeof(lim));
		sources_text(rr->rule, src, sizeof(src));
		printf("\nrule %s (line %d)%s: %s; key %s\n", rr->rule->name,
		       rr->rule->line, rr->rule->shadow ? " [shadow]" : "", lim,
		       src);
		if (rr->note[0])
			printf("  note: %s\n", rr->note);
		printf("  requests %llu from %llu keys; would be limited %llu "
		       "(%.2f%%) in %llu keys\n",
		       (unsigned long long)rr->requests,
		       (unsigned long long)rr->keys,
		       (unsigned long long)rr->limited,
		       pct(rr->limited, rr->requests),
		       (unsigned long long)rr->limited_keys);
		if (!rr->limited)
			continue;
		printf("  false-positive estimate: %llu of the %llu (%.1f%%), "
		       "from %llu keys that never sent more than %.6g requests "
		       "in %.0f s\n",
		       (unsigned long long)rr->fp_requests,
		       (unsigned long long)rr->limited,
		       pct(rr->fp_requests, rr->limited),
		       (unsigned long long)rr->fp_keys, rr->allowance,
		       (double)window_us / SEC);
		printf("  top limited keys:\n  %9s %9s  %s\n", "limited",
		       "requests", "key");
		for (k = 0; k < rr->ntop; k++)
			printf("  %9llu %9llu  %s%s\n",
			       (unsigned long long)rr->top[k].limited,
			       (unsigned long long)rr->top[k].requests,
			       key_text(&rr->top[k], key, sizeof(key)),
			       rr->top[k].exceeded ? ""
						   : "  (never over rate)");
	}
}

static void print_json(const char *logname, const char *cfgname,
		       const sluice_replay_report_t *r, int64_t window_us)
{
	json_t *root = json_object(), *rules = json_array();
	char lim[256], src[256], key[512];
	size_t i, k;

	json_object_set_new(root, "log", json_string(logname));
	json_object_set_new(root, "config", json_string(cfgname));
	json_object_set_new(root, "lines", json_integer((json_int_t)r->lines));
	json_object_set_new(root, "replayed",
			    json_integer((json_int_t)r->replayed));
	json_object_set_new(root, "malformed",
			    json_integer((json_int_t)r->malformed));
	json_object_set_new(root, "unmatched",
			    json_integer((json_int_t)r->unmatched));
	json_object_set_new(root, "rejected",
			    json_integer((json_int_t)r->rejected));
	json_object_set_new(root, "window_s",
			    json_real((double)window_us / SEC));
	for (i = 0; i < r->nrules; i++) {
		const sluice_replay_rule_t *rr = &r->rules[i];
		json_t *o = json_object(), *top = json_array();

		limits_text(rr->rule, lim, sizeof(lim));
		sources_text(rr->rule, src, sizeof(src));
		json_object_set_new(o, "name", json_string(rr->rule->name));
		json_object_set_new(o, "limits", json_string(lim));
		json_object_set_new(o, "key", json_string(src));
		json_object_set_new(o, "shadow",
				    json_boolean(rr->rule->shadow));
		json_object_set_new(o, "note", json_string(rr->note));
		json_object_set_new(o, "requests",
				    json_integer((json_int_t)rr->requests));
		json_object_set_new(o, "keys",
				    json_integer((json_int_t)rr->keys));
		json_object_set_new(o, "limited",
				    json_integer((json_int_t)rr->limited));
		json_object_set_new(o, "limited_keys",
				    json_integer((json_int_t)rr->limited_keys));
		json_object_set_new(o, "false_positive_requests",
				    json_integer((json_int_t)rr->fp_requests));
		json_object_set_new(o, "false_positive_keys",
				    json_integer((json_int_t)rr->fp_keys));
		json_object_set_new(o, "sustained_per_window",
				    json_real(rr->allowance));
		for (k = 0; k < rr->ntop; k++) {
			json_t *t = json_object();

			json_object_set_new(
				t, "key",
				json_string(key_text(&rr->top[k], key,
						     sizeof(key))));
			json_object_set_new(
				t, "limited",
				json_integer((json_int_t)rr->top[k].limited));
			json_object_set_new(
				t, "requests",
				json_integer((json_int_t)rr->top[k].requests));
			json_object_set_new(t, "over_sustained_rate",
					    json_boolean(rr->top[k].exceeded));
			json_array_append_new(top, t);
		}
		json_object_set_new(o, "top_limited", top);
		json_array_append_new(rules, o);
	}
	json_object_set_new(root, "rules", rules);
	json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
	printf("\n");
	json_decref(root);
}

/* The command line, read. */
typedef struct {
	sluice_replay_opts_t ro;
	const char *config, *logname;
	int json;
} replay_args_t;

/* argv into a: -1 to go on, else the exit status (--help's 0, or 2 after
 * a usage error said). */
static int read_args(int argc, char **argv, replay_args_t *a)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		{"top", required_argument, NULL, 't'},
		{"window", required_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	uint64_t v;
	int opt;

	memset(a, 0, sizeof(*a));
	sluice_replay_opts_default(&a->ro);
	optind = 0;
	while ((opt = getopt_long(argc, argv, "c:jt:w:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			a->config = optarg;
			break;
		case 'j':
			a->json = 1;
			break;
		case 't':
			if (sluice_sim_opt_u64("replay", "top",
					       "a count from 1 to 100000",
					       optarg, 1, 100000, &v) < 0)
				return 2;
			a->ro.top = (size_t)v;
			break;
		case 'w':
			if (sluice_sim_opt_u64("replay", "window",
					       "seconds from 1 to 86400",
					       optarg, 1, 86400, &v) < 0)
				return 2;
			a->ro.window_us = (int64_t)v * SEC;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	if (!a->config || optind != argc - 1) {
		fprintf(stderr, "sluice replay: %s\n%s",
			!a->config ? "--config FILE is required"
				   : "exactly one ACCESS_LOG is required",
			usage);
		return 2;
	}
	a->logname = argv[optind];
	return -1;
}

/* The log replayed against cfg's rules and the report printed: the exit
 * status. */
static int replay(const replay_args_t *a, const sluice_config_t *cfg, FILE *log)
{
	sluice_replay_report_t rep;
	char err[512];
	int rc;

	rc = sluice_replay_run(cfg, log, &a->ro, &rep, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "sluice replay: %s: %s\n", a->logname, err);
		rc = 1;
	} else {
		if (a->json)
			print_json(a->logname, a->config, &rep,
				   a->ro.window_us);
		else
			print_text(a->logname, a->config, &rep,
				   a->ro.window_us);
		rc = fflush(stdout) == 0 ? 0 : 1;
	}
	sluice_replay_report_free(&rep);
	return rc;
}

int sluice_cmd_replay(int argc, char **argv)
{
	replay_args_t a;
	sluice_config_t *cfg;
	FILE *log;
	int rc;
	char err[512];

	if ((rc = read_args(argc, argv, &a)) >= 0)
		return rc;
	cfg = sluice_config_load(a.config, err, sizeof(err));
	if (!cfg) {
		fprintf(stderr, "sluice replay: %s\n", err);
		return 2;
	}
	log = strcmp(a.logname, "-") == 0 ? stdin : fopen(a.logname, "r");
	if (!log) {
		fprintf(stderr, "sluice replay: %s: %s\n", a.logname,
			strerror(errno));
		sluice_config_free(cfg);
		return 2;
	}
	rc = replay(&a, cfg, log);
	if (log != stdin)
		fclose(log);
	sluice_config_free(cfg);
	return rc;
}
