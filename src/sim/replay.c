/*
 * replay.c -- see replay.h: the replay itself and its per-rule figures.
 */
#include "sim/replay.h"
#include "sim/accesslog.h"
#include "sim/rulestate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC INT64_C(1000000)

/* Per store key: who it belongs to and how it fared. */
typedef struct {
	size_t rule;
	uint64_t requests, limited;
	int64_t window;	  /* the window `count` belongs to */
	uint64_t count;	  /* tokens asked for in that window */
	double allowance; /* tokens the sustained rate allows per window */
	int exceeded;
} keystat_t;

typedef struct {
	sluice_rulestate_t rs;
	keystat_t *keys;
	size_t cap;
	const sluice_config_t *cfg;
	const sluice_replay_opts_t *opts;
	sluice_replay_report_t *rep;
	/* Lines of the current whole second, waiting to be spread over it. */
	struct pending {
		char *line;
		sluice_logline_t ll;
	} * group;
	size_t ngroup, gcap;
} replay_t;

void sluice_replay_opts_default(sluice_replay_opts_t *o)
{
	o->top = 10;
	o->window_us = 60 * SEC;
}

/* ------------------------------------------------------------ deciding */

typedef struct {
	const sluice_logline_t *ll;
} hdr_ctx_t;

/* The only headers an access log records. */
static const char *log_header(void *ctx, const char *name, size_t *len)
{
	const sluice_logline_t *ll = ((hdr_ctx_t *)ctx)->ll;
	const char *v = NULL;

	if (strcmp(name, "user-agent") == 0)
		v = ll->agent;
	else if (strcmp(name, "referer") == 0)
		v = ll->referer;
	if (v)
		*len = strlen(v);
	return v;
}

/* Tokens per window that the slowest limit of a set refills. */
static double allowance(const sluice_limit_set_t *set, int64_t window_us)
{
	double best = -1;
	size_t i;

	for (i = 0; i < set->nlimits; i++) {
		const sluice_rate_t *r = &set->limits[i].rate;
		double a = (double)window_us * r->per / (double)r->interval;

		if (best < 0 || a < best)
			best = a;
	}
	return best;
}

static keystat_t *keystat(replay_t *rp, size_t k)
{
	if (k >= rp->cap) {
		size_t n = rp->cap ? rp->cap * 2 : 1024;
		keystat_t *s;

		while (n <= k)
			n *= 2;
		s = realloc(rp->keys, n * sizeof(*s));
		if (!s)
			return NULL;
		memset(s + rp->cap, 0, (n - rp->cap) * sizeof(*s));
		rp->keys = s;
		rp->cap = n;
	}
	return &rp->keys[k];
}

static int decide(replay_t *rp, const sluice_logline_t *ll, int64_t t)
{
	const sluice_rule_hit_t *hits;
	sluice_replay_report_t *rep = rp->rep;
	hdr_ctx_t hc = {ll};
	sluice_request_t req;
	size_t n, i;
	int pass;

	memset(&req, 0, sizeof(req));
	req.method = ll->method;
	req.method_len = strlen(ll->method);
	req.path = ll->path;
	req.path_len = strlen(ll->path);
	req.header = log_header;
	req.header_ctx = &hc;
	req.peer = (const struct sockaddr *)&ll->peer;
	pass = sluice_rulestate_decide(&rp->rs, &req, t, &hits, &n);
	if (pass < 0)
		return pass;
	if (rep->replayed == 0 || t < rep->first_us)
		rep->first_us = t;
	if (rep->replayed == 0 || t > rep->last_us)
		rep->last_us = t;
	rep->replayed++;
	if (n == 0)
		rep->unmatched++;
	if (!pass)
		rep->rejected++;
	for (i = 0; i < n; i++) {
		const sluice_match_t *m = &hits[i].match;
		size_t r = (size_t)(m->rule - rp->cfg->rules);
		keystat_t *ks = keystat(rp, hits[i].key);
		int64_t w = t / rp->opts->window_us;

		if (!ks)
			return SLUICE_ENOMEM;
		if (ks->requests == 0) {
			ks->rule = r;
			ks->allowance = allowance(m->set, rp->opts->window_us);
			ks->window = w;
		}
		if (ks->window != w) {
			ks->window = w;
			ks->count = 0;
		}
		ks->requests++;
		ks->count += m->rule->cost;
		if ((double)ks->count > ks->allowance)
			ks->exceeded = 1;
		rep->rules[r].requests++;
		if (hits[i].rejected) {
			ks->limited++;
			rep->rules[r].limited++;
		}
	}
	return 0;
}

/* Decides the buffered lines of one second, spread evenly over it. */
static int flush(replay_t *rp)
{
	size_t i, n = rp->ngroup;
	int rc = 0;

	for (i = 0; i < n; i++) {
		const sluice_logline_t *ll = &rp->group[i].ll;
		int64_t t = ll->time_us;

		if (!ll->has_fraction)
			t += (int64_t)i * SEC / (int64_t)n;
		if (!rc)
			rc = decide(rp, ll, t);
		free(rp->group[i].line);
	}
	rp->ngroup = 0;
	return rc;
}

static int push(replay_t *rp, const char *line, size_t len)
{
	struct pending *g;
	const char *why = NULL;
	char *copy = malloc(len + 1);
	sluice_logline_t ll;

	if (!copy)
		return SLUICE_ENOMEM;
	memcpy(copy, line, len + 1);
	if (sluice_logline_parse(copy, &ll, &why) < 0) {
		sluice_replay_report_t *rep = rp->rep;

		if (rep->malformed++ == 0) {
			rep->first_bad_line = rep->lines;
			snprintf(rep->first_bad_why, sizeof(rep->first_bad_why),
				 "%s", why);
		}
		free(copy);
		return 0;
	}
	/* A new second (or a precise time) closes the group. */
	if (rp->ngroup && (ll.has_fraction || rp->group[0].ll.has_fraction ||
			   ll.time_us != rp->group[0].ll.time_us)) {
		int rc = flush(rp);

		if (rc < 0) {
			free(copy);
			return rc;
		}
	}
	if (rp->ngroup == rp->gcap) {
		size_t c = rp->gcap ? rp->gcap * 2 : 64;

		g = realloc(rp->group, c * sizeof(*g));
		if (!g) {
			free(copy);
			return SLUICE_ENOMEM;
		}
		rp->group = g;
		rp->gcap = c;
	}
	rp->group[rp->ngroup].line = copy;
	rp->group[rp->ngroup].ll = ll;
	rp->ngroup++;
	return 0;
}

/* ------------------------------------------------------------ figures */

/* Which key sources of the rule the log can never supply. */
static void note_sources(const sluice_rule_t *rule, char *note, size_t len)
{
	size_t s, p, off = 0, lacking = 0;

	note[0] = '\0';
	for (s = 0; s < rule->nsources; s++) {
		const sluice_key_source_t *src = &rule->sources[s];

		for (p = 0; p < src->nparts; p++) {
			const char *h = src->parts[p].header;

			if (src->parts[p].kind != SLUICE_KEY_HEADER ||
			    strcmp(h, "user-agent") == 0 ||
			    strcmp(h, "referer") == 0)
				continue;
			if (off < len)
				off += (size_t)snprintf(
					note + off, len - off, "%s%s",
					lacking ? ", " : "the log has no ", h);
			lacking++;
			break;
		}
	}
	if (lacking && off < len)
		snprintf(note + off, len - off,
			 lacking == rule->nsources
				 ? " header: no key, nothing to replay"
				 : " header: keyed by the next source");
}

static int cmp_limited(const void *a, const void *b)
{
	const sluice_replay_key_t *x = a, *y = b;
	size_t n;
	int c;

	if (x->limited != y->limited)
		return x->limited > y->limited ? -1 : 1;
	if (x->requests != y->requests)
		return x->requests > y->requests ? -1 : 1;
	n = x->namelen < y->namelen ? x->namelen : y->namelen;
	c = memcmp(x->name, y->name, n);
	return c ? c : (x->namelen > y->namelen) - (x->namelen < y->namelen);
}

static int summarise(replay_t *rp)
{
	sluice_replay_report_t *rep = rp->rep;
	size_t nkeys = sluice_keymap_count(rp->rs.keys), k, r;
	sluice_replay_key_t *all = malloc((nkeys + 1) * sizeof(*all));

	if (!all)
		return SLUICE_ENOMEM;
	for (r = 0; r < rep->nrules; r++) {
		sluice_replay_rule_t *rr = &rep->rules[r];
		size_t n = 0;

		rr->allowance = -1;
		for (k = 0; k < nkeys && k < rp->cap; k++) {
			const keystat_t *ks = &rp->keys[k];
			sluice_replay_key_t *o;
			const char *sep;

			if (ks->rule != r || ks->requests == 0)
				continue;
			rr->keys++;
			if (rr->allowance < 0 || ks->allowance < rr->allowance)
				rr->allowance = ks->allowance;
			if (!ks->limited)
				continue;
			rr->limited_keys++;
			if (!ks->exceeded) {
				rr->fp_keys++;
				rr->fp_requests += ks->limited;
			}
			o = &all[n++];
			o->name =
				sluice_keymap_key(rp->rs.keys, k, &o->namelen);
			/* The store key is "<rule>\x1f<identity>". */
			sep = memchr(o->name, '\x1f', o->namelen);
			if (sep) {
				o->namelen -= (size_t)(sep + 1 - o->name);
				o->name = sep + 1;
			}
			o->requests = ks->requests;
			o->limited = ks->limited;
			o->exceeded = ks->exceeded;
		}
		qsort(all, n, sizeof(*all), cmp_limited);
		rr->ntop = n < rp->opts->top ? n : rp->opts->top;
		rr->top = malloc((rr->ntop + 1) * sizeof(*rr->top));
		if (!rr->top) {
			free(all);
			return SLUICE_ENOMEM;
		}
		memcpy(rr->top, all, rr->ntop * sizeof(*rr->top));
	}
	free(all);
	return 0;
}

/* ------------------------------------------------------------ the run */

int sluice_replay_run(const sluice_config_t *cfg, FILE *log,
		      const sluice_replay_opts_t *opts,
		      sluice_replay_report_t *out, char *err, size_t errlen)
{
	replay_t *rp = calloc(1, sizeof(*rp));
	char *line = NULL;
	size_t cap = 0, r;
	ssize_t len;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	out->rules = calloc(cfg->nrules + 1, sizeof(*out->rules));
	if (!rp || !out->rules || sluice_rulestate_init(&rp->rs, cfg) < 0) {
		free(rp);
		snprintf(err, errlen, "out of memory");
		return SLUICE_ENOMEM;
	}
	out->priv = rp;
	out->nrules = cfg->nrules;
	rp->cfg = cfg;
	rp->opts = opts;
	rp->rep = out;
	for (r = 0; r < cfg->nrules; r++) {
		out->rules[r].rule = &cfg->rules[r];
		note_sources(&cfg->rules[r], out->rules[r].note,
			     sizeof(out->rules[r].note));
	}
	errno = 0;
	while (rc == 0 && (len = getline(&line, &cap, log)) >= 0) {
		while (len > 0 &&
		       (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (len == 0)
			continue;
		out->lines++;
		if (memchr(line, '\0', (size_t)len)) {
			/* NUL bytes: not a text log line. */
			if (out->malformed++ == 0) {
				out->first_bad_line = out->lines;
				snprintf(out->first_bad_why,
					 sizeof(out->first_bad_why),
					 "NUL byte in line");
			}
			continue;
		}
		rc = push(rp, line, (size_t)len);
	}
	free(line);
	if (rc == 0 && ferror(log)) {
		snprintf(err, errlen, "read error: %s", strerror(errno));
		rc = SLUICE_EINVAL;
	}
	if (rc == 0)
		rc = flush(rp);
	if (rc == 0)
		rc = summarise(rp);
	if (rc == SLUICE_ENOMEM)
		snprintf(err, errlen, "out of memory");
	return rc;
}

void sluice_replay_report_free(sluice_replay_report_t *r)
{
	replay_t *rp = r->priv;
	size_t i;

	for (i = 0; r->rules && i < r->nrules; i++)
		free(r->rules[i].top);
	free(r->rules);
	if (rp) {
		for (i = 0; i < rp->ngroup; i++)
			free(rp->group[i].line);
		free(rp->group);
		free(rp->keys);
		sluice_rulestate_free(&rp->rs);
		free(rp);
	}
	memset(r, 0, sizeof(*r));
}
