/*
 * main.c -- the `sluice` program: a table of subcommands.
 *
 * To add a subcommand, write `static int cmd_NAME(int argc, char **argv)`
 * (argv[0] is the subcommand's name) and add a line to `commands`.  Exit
 * statuses: 0 success, 1 runtime failure, 2 bad usage or bad config.
 */
#include "core/test_clock.h"
#include "policy/config/config.h"
#include "policy/envoy/config.h"
#include "serve/server.h"
#include "sim/sim.h"
#include "sluice.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct command_s {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
} command_t;

static int cmd_serve(int argc, char **argv);
static int cmd_check_config(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const command_t commands[] = {
	{"serve", "run the HTTP rate-limit decision service", cmd_serve},
	{"check-config",
	 "validate a config file (or an envoy config directory)",
	 cmd_check_config},
	{"simulate", "compare limiters on generated traffic",
	 sluice_cmd_simulate},
	{"replay", "replay an nginx access log against a config",
	 sluice_cmd_replay},
	{"version", "print the version", cmd_version},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: sluice COMMAND [OPTIONS]\n\n"
		   "Distributed token-bucket rate limiting for HTTP APIs.\n\n"
		   "Commands:\n");
	for (i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-14s %s\n", commands[i].name,
			commands[i].summary);
	fprintf(f, "\nRun `sluice COMMAND --help` for a command's options.\n");
}

/* --------------------------------------------------------------- serve */

static void serve_usage(FILE *f)
{
	fprintf(f,
		"usage: sluice serve [-c FILE] [--listen HOST:PORT] "
		"[--grpc-listen ADDR] [--threads N]\n\n"
		"Runs the HTTP decision service:\n"
		"  /v1/check   for nginx auth_request, Caddy/Traefik forward "
		"auth, Envoy\n"
		"              ext_authz (the config's `proxy:` names which)\n"
		"  /v1/take    JSON API for application middleware\n"
		"  /metrics    Prometheus metrics; /healthz, /readyz\n\n"
		"Options:\n"
		"  -c, --config FILE     YAML config (rules, store, limits). "
		"Without it:\n"
		"                        listen 127.0.0.1:8080, memory store, "
		"two rules:\n"
		"                        `default`, the classic policy "
		"(capacity 100,\n"
		"                        refill 2/s, key = x-user-id header, "
		"else the\n"
		"                        client IP), and `default-ip`, a "
		"ceiling per\n"
		"                        client IP (capacity 200, refill "
		"4/s).\n"
		"  -l, --listen ADDR     ADDRESS:PORT or [IPV6]:PORT to listen "
		"on (numeric\n"
		"                        address); overrides the file's "
		"`listen`.\n"
		"  -t, --threads N       event-loop threads (1..%d); overrides "
		"the file's\n"
		"                        `threads`.  Each thread has its own "
		"socket\n"
		"                        (SO_REUSEPORT).\n"
		"  -h, --help            this text.\n\n"
		"Signals: SIGHUP reloads the config file (a bad file is "
		"rejected and\n"
		"the running config kept; bucket state is kept); SIGTERM or "
		"SIGINT\n"
		"finishes requests in progress and exits 0.\n",
		SLUICE_MAX_THREADS);
}

static int cmd_serve(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"listen", required_argument, NULL, 'l'},
		{"grpc-listen", required_argument, NULL, 'G'},
		{"threads", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	sluice_serve_opts_t opts = {0};
	char *end;
	long n;
	int c;

	while ((c = getopt_long(argc, argv, "c:l:t:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			opts.config_path = optarg;
			break;
		case 'l': {
			struct sockaddr_storage ss;
			char err[256];

			if (sluice_listen_parse(optarg, &ss, err,
						sizeof(err))) {
				fprintf(stderr, "sluice serve: --listen: %s\n",
					err);
				return 2;
			}
			opts.listen = optarg;
			break;
		}
		case 'G': {
			char err[256];

			if (sluice_grpc_listen_parse(optarg, err,
						     sizeof(err))) {
				fprintf(stderr,
					"sluice serve: --grpc-listen: %s\n",
					err);
				return 2;
			}
			opts.grpc_listen = optarg;
			break;
		}
		case 't':
			n = strtol(optarg, &end, 10);
			if (*end || n < 1 || n > SLUICE_MAX_THREADS) {
				fprintf(stderr,
					"sluice serve: --threads: expected "
					"1..%d, got \"%s\"\n",
					SLUICE_MAX_THREADS, optarg);
				return 2;
			}
			opts.threads = (unsigned)n;
			break;
		case 'h':
			serve_usage(stdout);
			return 0;
		default:
			serve_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sluice serve: unexpected argument \"%s\"\n",
			argv[optind]);
		serve_usage(stderr);
		return 2;
	}
	return sluice_serve(&opts);
}

/* -------------------------------------------------------- check-config */

/* Enough to fix a file in one pass, few enough to read. */
#define CHECK_MAX_ERRORS 20

/* A directory: envoyproxy/ratelimit's YAML files, as the `envoy:`
 * section's config_dir would load them. */
static int check_envoy_dir(const char *dir, char *report, size_t len)
{
	sluice_envoy_settings_t s;
	sluice_envoy_config_t *cfg;
	char first[1024];
	unsigned n = 0;

	sluice_envoy_settings_init(&s);
	cfg = sluice_envoy_load_dir(dir, &s, first, sizeof(first), report, len,
				    CHECK_MAX_ERRORS, &n);
	if (!cfg) {
		fputs(report, stderr);
		if (n > CHECK_MAX_ERRORS)
			fprintf(stderr, "%s: %u more errors not shown\n", dir,
				n - CHECK_MAX_ERRORS);
		fprintf(stderr, "%s: %u error%s\n", dir, n, n == 1 ? "" : "s");
		return 2;
	}
	printf("%s: ok (%zu domain%s in %zu file%s)\n", dir, cfg->ndomains,
	       cfg->ndomains == 1 ? "" : "s", cfg->nfiles,
	       cfg->nfiles == 1 ? "" : "s");
	sluice_envoy_config_free(cfg);
	return 0;
}

static int cmd_check_config(int argc, char **argv)
{
	static char report[CHECK_MAX_ERRORS * 1100];
	struct stat st;
	unsigned n;

	if (argc == 2 &&
	    (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		printf("usage: sluice check-config FILE|DIR\n\n"
		       "Validates FILE as `sluice serve` would load it (with "
		       "the envoy: section's\n"
		       "config_dir), or DIR as a directory of "
		       "envoyproxy/ratelimit YAML files.\n"
		       "Prints \"FILE: ok\" and exits 0, or prints every "
		       "error (up to %d), one\n"
		       "FILE:LINE: what is wrong per line, and exits 2.\n",
		       CHECK_MAX_ERRORS);
		return 0;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: sluice check-config FILE|DIR\n");
		return 2;
	}
	if (stat(argv[1], &st) == 0 && S_ISDIR(st.st_mode))
		return check_envoy_dir(argv[1], report, sizeof(report));
	n = sluice_config_check(argv[1], report, sizeof(report),
				CHECK_MAX_ERRORS);
	if (n > 0) {
		fputs(report, stderr);
		if (n > CHECK_MAX_ERRORS)
			fprintf(stderr, "%s: %u more errors not shown\n",
				argv[1], n - CHECK_MAX_ERRORS);
		fprintf(stderr, "%s: %u error%s\n", argv[1], n,
			n == 1 ? "" : "s");
		return 2;
	}
	printf("%s: ok\n", argv[1]);
	return 0;
}

/* ------------------------------------------------------------- version */

static int cmd_version(int argc, char **argv)
{
	printf("sluice %s\n", SLUICE_VERSION);
	return 0;
}

/* ---------------------------------------------------------------- main */

/* Tests shift the program's clock (clock-skew tests of the Redis store):
 * SLUICE_TEST_CLOCK_OFFSET_US microseconds, added to sluice_now_us(). */
static void test_clock(void)
{
	const char *s = getenv("SLUICE_TEST_CLOCK_OFFSET_US");

	if (s)
		sluice__set_test_clock_offset(strtoll(s, NULL, 10));
}

int main(int argc, char **argv)
{
	size_t i;

	test_clock();
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0)
		return cmd_version(argc - 1, argv + 1);
	for (i = 0; i < NCOMMANDS; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "sluice: unknown command \"%s\"\n\n", argv[1]);
	usage(stderr);
	return 2;
}
