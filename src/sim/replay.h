/*
 * replay.h -- an nginx access log replayed against a config's rules.
 *
 * Each parsed line becomes a request (client address = remote_addr, method
 * and path from the request line, user-agent and referer headers from the
 * log, no other headers) decided at the line's time by rulestate.c.  Lines
 * that share a whole second are spread evenly over it, since the log does
 * not say when within the second they came.
 */
#ifndef SLUICE_SIM_REPLAY_H
#define SLUICE_SIM_REPLAY_H

#include "policy/config/config.h"

#include <stdint.h>
#include <stdio.h>

typedef struct sluice_replay_opts_s {
	size_t top;	   /* limited keys to list per rule (default 10) */
	int64_t window_us; /* the span the sustained rate is judged over
			      (default 60 s) */
} sluice_replay_opts_t;

/* One key of one rule. */
typedef struct sluice_replay_key_s {
	const char *name; /* the identity (store key without the rule) */
	size_t namelen;
	uint64_t requests;
	uint64_t limited;
	int exceeded; /* sent more than the sustained rate in some window */
} sluice_replay_key_t;

typedef struct sluice_replay_rule_s {
	const sluice_rule_t *rule;
	uint64_t requests; /* requests the rule matched */
	uint64_t limited;  /* ... that its buckets would have rejected */
	uint64_t keys;
	uint64_t limited_keys;
	/* The false-positive estimate: limited requests (and their keys)
	 * whose key never sent more than the sustained rate allows within
	 * one window -- rejected only for bursting past the capacity. */
	uint64_t fp_requests;
	uint64_t fp_keys;
	double allowance; /* requests the sustained rate allows per window */
	sluice_replay_key_t *top; /* most limited first */
	size_t ntop;
	char note[256]; /* e.g. which key source the log cannot supply */
} sluice_replay_rule_t;

typedef struct sluice_replay_report_s {
	uint64_t lines;	    /* non-empty lines read */
	uint64_t replayed;  /* parsed and decided */
	uint64_t malformed; /* counted and skipped */
	uint64_t unmatched; /* no rule applied */
	uint64_t rejected;  /* requests an enforcing rule would reject */
	uint64_t first_bad_line;
	char first_bad_why[64];
	int64_t first_us, last_us;
	sluice_replay_rule_t *rules; /* one per config rule */
	size_t nrules;
	void *priv;
} sluice_replay_report_t;

void sluice_replay_opts_default(sluice_replay_opts_t *o);

/*
 * Replays every line of log against cfg.  Returns 0, or SLUICE_ENOMEM /
 * SLUICE_EINVAL (read error) with a message in err.  Free the report with
 * sluice_replay_report_free() in every case.
 */
int sluice_replay_run(const sluice_config_t *cfg, FILE *log,
		      const sluice_replay_opts_t *opts,
		      sluice_replay_report_t *out, char *err, size_t errlen);

void sluice_replay_report_free(sluice_replay_report_t *r);

#endif /* SLUICE_SIM_REPLAY_H */
