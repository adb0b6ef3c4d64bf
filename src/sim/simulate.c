/*
 * simulate.c -- `sluice simulate`: the generated traffic against fixed
 * window, sliding window (log and counter), the sluice token bucket and
 * optionally the rules of a config file, with the report.
 *
 * The comparison is the one people make when they pick a limiter: 100
 * requests a minute as a fixed or sliding window, or a bucket of 100 that
 * refills 2 per second.  All of it runs in simulated time, so ten minutes
 * of traffic take well under a second and the same seed prints the same
 * report.
 */
#include "policy/config/config.h"
#include "sim/sim.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SEC	     INT64_C(1000000)
#define MAX_POLICIES 5

static const char *const usage =
	"usage: sluice simulate [--seed N] [--duration SECONDS] [--config "
	"FILE]\n"
	"                       [--json] [--access-log FILE]\n"
	"\n"
	"Generates API traffic (mobile apps, a web+mobile user on one IP, a "
	"campus\n"
	"behind one NAT address, abusers at 18,000 requests/min) and replays "
	"it in\n"
	"simulated time against a fixed window (100/min), a sliding window "
	"log and\n"
	"counter (100/min), the sluice token bucket (100 burst, 2/s) and the "
	"rules\n"
	"of FILE.  The same seed always prints the same report.  --access-log "
	"also\n"
	"writes the traffic as an nginx access log (combined format, from "
	"2026-01-01\n"
	"00:00:00 UTC) for `sluice replay`.\n";

/* Human descriptions of the built-in policies, by name. */
static const char *describe(const char *name)
{
	if (strcmp(name, "fixed_window") == 0)
		return "fixed window, 100/min";
	if (strcmp(name, "sliding_log") == 0)
		return "sliding window log, 100/min";
	if (strcmp(name, "sliding_counter") == 0)
		return "sliding window counter, 100/min";
	if (strcmp(name, "sluice_token_bucket") == 0)
		return "sluice token bucket, 100 + 2/s";
	return name;
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* ---------------------------------------------------------------- text */

static void print_text(const sluice_sim_trace_t *tr, uint64_t seed,
		       const sluice_sim_result_t *res, size_t n)
{
	const sluice_sim_result_t *r0 = &res[0];
	size_t i, c;

	printf("sluice simulate: seed %llu, %lld s of traffic, %zu requests "
	       "(%llu legitimate, %llu abusive), %zu keys\n\n",
	       (unsigned long long)seed, (long long)(tr->duration_us / SEC),
	       tr->nevents, (unsigned long long)r0->legit,
	       (unsigned long long)r0->abuse, tr->nkeys);
	printf("%-34s %10s %12s %16s %14s\n", "policy", "false 429",
	       "legit 429s", "abusive blocked", "spike in 2 s");
	for (i = 0; i < n; i++) {
		const sluice_sim_result_t *r = &res[i];

		printf("%-34.34s %9.2f%% %12llu %15.2f%% %14llu\n",
		       describe(r->policy), pct(r->legit_rejected, r->legit),
		       (unsigned long long)r->legit_rejected,
		       pct(r->abuse_rejected, r->abuse),
		       (unsigned long long)r->spike);
	}
	printf("\nrejected share by client class:\n%-34s", "policy");
	for (c = 0; c < SLUICE_SIM_NCLASSES; c++)
		printf(" %11s", sluice_sim_class_name((sluice_sim_class_t)c));
	printf("\n%-34s", "(requests)");
	for (c = 0; c < SLUICE_SIM_NCLASSES; c++)
		printf(" %11llu", (unsigned long long)r0->requests[c]);
	printf("\n");
	for (i = 0; i < n; i++) {
		printf("%-34.34s", describe(res[i].policy));
		for (c = 0; c < SLUICE_SIM_NCLASSES; c++)
			printf(" %10.2f%%",
			       pct(res[i].rejected[c], res[i].requests[c]));
		printf("\n");
	}
	printf("\nboundary spike: the most requests one key got through in "
	       "any 2 s span\n");
	for (i = 0; i < n; i++)
		printf("  %-32.32s %4llu  key %s at t=%.3f s\n",
		       describe(res[i].policy),
		       (unsigned long long)res[i].spike,
		       res[i].spike ? tr->keys[res[i].spike_key] : "-",
		       (double)res[i].spike_start_us / SEC);
}

/* ---------------------------------------------------------------- JSON */

static json_t *series(const uint32_t *v, size_t n)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

static void print_json(const sluice_sim_trace_t *tr, uint64_t seed,
		       const sluice_sim_result_t *res, size_t n)
{
	json_t *root = json_object(), *pols = json_array(), *traffic;
	size_t i, c;

	traffic = json_object();
	for (c = 0; c < SLUICE_SIM_NCLASSES; c++)
		json_object_set_new(
			traffic, sluice_sim_class_name((sluice_sim_class_t)c),
			json_integer((json_int_t)res[0].requests[c]));
	json_object_set_new(root, "seed", json_integer((json_int_t)seed));
	json_object_set_new(root, "duration_s",
			    json_integer(tr->duration_us / SEC));
	json_object_set_new(root, "requests",
			    json_integer((json_int_t)tr->nevents));
	json_object_set_new(root, "keys", json_integer((json_int_t)tr->nkeys));
	json_object_set_new(root, "requests_by_class", traffic);
	for (i = 0; i < n; i++) {
		const sluice_sim_result_t *r = &res[i];
		json_t *p = json_object(), *cls = json_object();

		json_object_set_new(p, "name", json_string(r->policy));
		json_object_set_new(p, "description",
				    json_string(describe(r->policy)));
		json_object_set_new(p, "legit_requests",
				    json_integer((json_int_t)r->legit));
		json_object_set_new(
			p, "legit_rejected",
			json_integer((json_int_t)r->legit_rejected));
		json_object_set_new(
			p, "false_429_rate",
			json_real(pct(r->legit_rejected, r->legit) / 100));
		json_object_set_new(p, "abuse_requests",
				    json_integer((json_int_t)r->abuse));
		json_object_set_new(
			p, "abuse_blocked",
			json_integer((json_int_t)r->abuse_rejected));
		json_object_set_new(
			p, "abuse_blocked_share",
			json_real(pct(r->abuse_rejected, r->abuse) / 100));
		json_object_set_new(p, "spike_2s",
				    json_integer((json_int_t)r->spike));
		json_object_set_new(
			p, "spike_key",
			json_string(r->spike ? tr->keys[r->spike_key] : ""));
		json_object_set_new(p, "spike_start_s",
				    json_real((double)r->spike_start_us / SEC));
		for (c = 0; c < SLUICE_SIM_NCLASSES; c++)
			json_object_set_new(
				cls,
				sluice_sim_class_name((sluice_sim_class_t)c),
				json_integer((json_int_t)r->rejected[c]));
		json_object_set_new(p, "rejected_by_class", cls);
		json_object_set_new(p, "abuse_passed_per_s",
				    series(r->abuse_passed, r->nseconds));
		json_object_set_new(p, "legit_rejected_per_s",
				    series(r->legit_rejected_s, r->nseconds));
		json_array_append_new(pols, p);
	}
	json_object_set_new(root, "policies", pols);
	json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
	printf("\n");
	json_decref(root);
}

/* ------------------------------------------------------ access log */

/* Where the written log's time starts: 2026-01-01T00:00:00Z. */
#define LOG_EPOCH INT64_C(1767225600)

/* The trace as nginx would have logged it (combined format), so that
 * `sluice replay` can be tried on it.  Whole seconds only, like nginx. */
static int write_access_log(const sluice_sim_trace_t *tr, const char *path)
{
	static const char *const mon[] = {"Jan", "Feb", "Mar", "Apr",
					  "May", "Jun", "Jul", "Aug",
					  "Sep", "Oct", "Nov", "Dec"};
	FILE *f = fopen(path, "w");
	size_t i;

	if (!f)
		return -1;
	for (i = 0; i < tr->nevents; i++) {
		const sluice_sim_event_t *ev = &tr->events[i];
		const sluice_sim_client_t *c = &tr->clients[ev->client];
		const sluice_sim_route_t *rt = &sluice_sim_routes[ev->route];
		time_t t = (time_t)(LOG_EPOCH + ev->t_us / SEC);
		struct tm tm;

		gmtime_r(&t, &tm);
		fprintf(f,
			"%s - %s [%02d/%s/%04d:%02d:%02d:%02d +0000] \"%s %s "
			"HTTP/1.1\" 200 0 \"-\" \"%s\"\n",
			c->ip, c->user_id[0] ? c->user_id : "-", tm.tm_mday,
			mon[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour,
			tm.tm_min, tm.tm_sec, rt->method, rt->path, c->agent);
	}
	i = (size_t)ferror(f);
	if (fclose(f) != 0)
		i = 1;
	return i ? -1 : 0;
}

/* ------------------------------------------------------------- command */

int sluice_sim_parse_u64(const char *s, uint64_t min, uint64_t max,
			 uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int sluice_sim_opt_u64(const char *cmd, const char *opt, const char *want,
		       const char *arg, uint64_t min, uint64_t max,
		       uint64_t *out)
{
	if (sluice_sim_parse_u64(arg, min, max, out) == 0)
		return 0;
	fprintf(stderr, "sluice %s: --%s wants %s, not '%s'\n", cmd, opt, want,
		arg);
	return -1;
}

/* The trace through each limiter compared (and the config's rules, with
 * cfg), the results printed: the command's exit status. */
static int compare(const sluice_sim_trace_t *tr, sluice_config_t *cfg,
		   const char *config, uint64_t seed, int json)
{
	sluice_sim_policy_t *pols[MAX_POLICIES] = {0};
	sluice_sim_result_t res[MAX_POLICIES];
	sluice_limit_t bucket;
	size_t npol = 0, i;
	char err[512];
	int rc = 1;

	if (sluice_limit_parse(&bucket, "100", "2/s", err, sizeof(err)) < 0)
		goto out;
	pols[npol++] = sluice_sim_fixed_window(100, 60 * SEC, tr->nkeys);
	pols[npol++] = sluice_sim_sliding_log(100, 60 * SEC, tr->nkeys);
	pols[npol++] = sluice_sim_sliding_counter(100, 60 * SEC, tr->nkeys);
	pols[npol++] = sluice_sim_token_bucket(&bucket, tr->nkeys);
	if (cfg)
		pols[npol++] = sluice_sim_config_policy(cfg, config);
	for (i = 0; i < npol; i++)
		if (!pols[i])
			goto out;
	if (sluice_sim_run(tr, pols, npol, res) < 0)
		goto out;
	if (json)
		print_json(tr, seed, res, npol);
	else
		print_text(tr, seed, res, npol);
	for (i = 0; i < npol; i++)
		sluice_sim_result_free(&res[i]);
	rc = 0;
	if (fflush(stdout) != 0) {
		perror("sluice simulate: stdout");
		rc = 1;
	}
	goto done;
out:
	fprintf(stderr, "sluice simulate: out of memory\n");
done:
	for (i = 0; i < npol; i++)
		sluice_sim_policy_free(pols[i]);
	return rc;
}

/* The command line, read. */
typedef struct {
	uint64_t seed, secs;
	const char *config, *access_log;
	int json;
} simulate_args_t;

/* argv into a: -1 to go on, else the exit status (--help's 0, or 2 after
 * a usage error said). */
static int read_args(int argc, char **argv, simulate_args_t *a)
{
	static const struct option opts[] = {
		{"seed", required_argument, NULL, 's'},
		{"duration", required_argument, NULL, 'd'},
		{"config", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		{"access-log", required_argument, NULL, 'a'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int opt;

	memset(a, 0, sizeof(*a));
	a->seed = 1;
	a->secs = 600;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "s:d:c:ja:h", opts, NULL)) !=
	       -1) {
		switch (opt) {
		case 's':
			if (sluice_sim_opt_u64("simulate", "seed",
					       "a non-negative integer", optarg,
					       0, UINT64_MAX, &a->seed) < 0)
				return 2;
			break;
		case 'd':
			/* A day of the standard mix is about 25 million
			 * events (400 MB); longer runs say nothing new. */
			if (sluice_sim_opt_u64("simulate", "duration",
					       "whole seconds from 1 to 86400",
					       optarg, 1, 86400, &a->secs) < 0)
				return 2;
			break;
		case 'c':
			a->config = optarg;
			break;
		case 'j':
			a->json = 1;
			break;
		case 'a':
			a->access_log = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sluice simulate: unexpected argument '%s'\n%s",
			argv[optind], usage);
		return 2;
	}
	return -1;
}

int sluice_cmd_simulate(int argc, char **argv)
{
	simulate_args_t a;
	sluice_sim_params_t params;
	sluice_sim_trace_t tr;
	sluice_config_t *cfg = NULL;
	int rc;
	char err[512];

	if ((rc = read_args(argc, argv, &a)) >= 0)
		return rc;
	if (a.config) {
		cfg = sluice_config_load(a.config, err, sizeof(err));
		if (!cfg) {
			fprintf(stderr, "sluice simulate: %s\n", err);
			return 2;
		}
	}
	sluice_sim_params_default(&params);
	params.duration_us = (int64_t)a.secs * SEC;
	if (sluice_sim_generate(&params, a.seed, &tr) < 0) {
		fprintf(stderr, "sluice simulate: out of memory\n");
		if (cfg)
			sluice_config_free(cfg);
		return 1;
	}
	if (a.access_log && write_access_log(&tr, a.access_log) < 0) {
		fprintf(stderr, "sluice simulate: %s: %s\n", a.access_log,
			strerror(errno));
		rc = 2;
	} else {
		rc = compare(&tr, cfg, a.config, a.seed, a.json);
	}
	sluice_sim_trace_free(&tr);
	if (cfg)
		sluice_config_free(cfg);
	return rc;
}
