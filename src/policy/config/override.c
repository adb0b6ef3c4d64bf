/*
 * override.c -- per-key limits of a rule, and their lookup.
 *
 *   overrides:                      # inline
 *     "customer-42": [{capacity: 2000, rate: 50/s}]
 *   overrides_file: /etc/sluice/overrides.yaml   # the same mapping
 *
 * A request whose identity (the value the rule's key sources give) has an
 * override is decided on the override's limits instead of the rule's or
 * its tier's: an override beats tiers.  Its buckets are its own (a bucket
 * is a key and a limit), so a key that gains or loses an override starts
 * from a full bucket of the new limits.
 *
 * The file is read with the config, so a SIGHUP reloads it; its errors
 * name the file and line.  A key given twice (in either place) is an
 * error.  Lookups go through an open-addressing table keyed by SipHash
 * under a seed drawn at load: one hash and a short probe, however many
 * keys (100,000 is an ordinary file), and the probe lengths depend only on
 * the configured keys, never on what clients send.  Keys that share
 * limits share one copy of them.
 */
#include "policy/config/internal.h"
#include "util/siphash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Distinct limit sets searched for a copy to share; beyond, each new set
 * is kept on its own (correct, only larger). */
#define DEDUP_SCAN 256

static void overrides_free(sluice_overrides_t *o)
{
	size_t i;

	if (!o)
		return;
	for (i = 0; i < o->n; i++)
		free(o->entries[i].key);
	free(o->entries);
	free(o->slots);
	for (i = 0; i < o->nsets; i++) {
		free(o->sets[i].name);
		free(o->sets[i].carry);
	}
	free(o->sets);
	free(o);
}

void sluice_config_free_overrides(sluice_rule_t *r)
{
	overrides_free(r->overrides);
	r->overrides = NULL;
}

/* Index of a set equal to *set (adding it when new), or -1 (no memory). */
static long add_set(sluice_overrides_t *o, const sluice_limit_set_t *set)
{
	size_t i, from = o->nsets > DEDUP_SCAN ? o->nsets - DEDUP_SCAN : 0;

	for (i = from; i < o->nsets; i++)
		if (o->sets[i].nlimits == set->nlimits &&
		    memcmp(o->sets[i].limits, set->limits,
			   set->nlimits * sizeof(set->limits[0])) == 0)
			return (long)i;
	if (o->nsets == o->setcap) {
		size_t cap = o->setcap ? o->setcap * 2 : 4;
		sluice_limit_set_t *ns = realloc(o->sets, cap * sizeof(*ns));

		if (!ns)
			return -1;
		o->sets = ns;
		o->setcap = cap;
	}
	o->sets[o->nsets] = *set;
	o->sets[o->nsets].name = strdup("override");
	if (!o->sets[o->nsets].name)
		return -1;
	return (long)o->nsets++;
}

static uint64_t hash(const sluice_overrides_t *o, const void *key, size_t len)
{
	uint64_t h[2];

	sluice_siphash13_128(o->seed, key, len, h);
	return h[0];
}

/* Reads one mapping of key -> limit list into o. */
static int read_mapping(sluice_yaml_t *y, yaml_node_t *map,
			sluice_overrides_t *o, const char *rule,
			const char *file)
{
	yaml_node_pair_t *p;
	char what[SLUICE_OVERRIDE_KEY_MAX + 160];
	int rc = 0;

	if (sluice_yaml_is_null(map))
		return 0;
	snprintf(what, sizeof(what), "%s: overrides", rule);
	if (sluice_yaml_expect_map(y, map, what) < 0)
		return -1;
	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = sluice_yaml_node(y, p->key);
		sluice_limit_set_t set;
		sluice_override_t *e;
		const char *s;
		long si;

		if (sluice_yaml_string(y, k, "override key", &s) < 0) {
			rc = -1;
			continue;
		}
		if (!*s || strlen(s) > SLUICE_OVERRIDE_KEY_MAX) {
			rc = sluice_yaml_error(
				y, k,
				"%s: key \"%.60s\" is %zu bytes; "
				"expected 1 to %d",
				what, s, strlen(s), SLUICE_OVERRIDE_KEY_MAX);
			continue;
		}
		memset(&set, 0, sizeof(set));
		snprintf(what, sizeof(what), "%s: overrides.\"%s\"", rule, s);
		if (sluice_config_parse_limits(y, sluice_yaml_node(y, p->value),
					       &set, what) < 0) {
			rc = -1;
			snprintf(what, sizeof(what), "%s: overrides", rule);
			continue;
		}
		snprintf(what, sizeof(what), "%s: overrides", rule);
		if (o->n == o->cap) {
			size_t cap = o->cap ? o->cap * 2 : 16;
			sluice_override_t *ne =
				realloc(o->entries, cap * sizeof(*ne));

			if (!ne)
				return sluice_yaml_nomem(y, k);
			o->entries = ne;
			o->cap = cap;
		}
		if ((si = add_set(o, &set)) < 0)
			return sluice_yaml_nomem(y, k);
		e = &o->entries[o->n];
		e->key = strdup(s);
		if (!e->key)
			return sluice_yaml_nomem(y, k);
		e->len = (uint32_t)strlen(s);
		e->set = (uint32_t)si;
		e->line = sluice_yaml_line(k);
		e->file = file;
		e->withhold = y->withhold;
		o->n++;
	}
	return rc;
}

/* Builds the table; a key given twice is an error naming both places. */
static int build(sluice_yaml_t *y, sluice_overrides_t *o, const char *rule)
{
	size_t size = 16, i, j, probe;
	char line[1024];
	int rc = 0;

	while (size < 2 * o->n)
		size *= 2;
	o->slots = calloc(size, sizeof(*o->slots));
	if (!o->slots)
		return sluice_yaml_nomem(y, NULL);
	o->mask = size - 1;
	sluice_random_bytes(o->seed, sizeof(o->seed));
	for (i = 0; i < o->n; i++) {
		const sluice_override_t *e = &o->entries[i];

		j = hash(o, e->key, e->len) & o->mask;
		for (probe = 1; o->slots[j]; probe++) {
			const sluice_override_t *f =
				&o->entries[o->slots[j] - 1];

			if (f->len == e->len &&
			    memcmp(f->key, e->key, e->len) == 0)
				break;
			j = (j + 1) & o->mask;
		}
		if (o->slots[j]) {
			const sluice_override_t *f =
				&o->entries[o->slots[j] - 1];

			snprintf(line, sizeof(line),
				 "%s:%d: %s: override \"%.60s\" is given "
				 "twice (first at %s:%d); expected each key "
				 "once",
				 e->file, e->line, rule,
				 e->withhold || f->withhold ? "(withheld)"
							    : e->key,
				 f->file, f->line);
			sluice_yaml_report(y, line);
			rc = -1;
			continue;
		}
		o->slots[j] = (uint32_t)(i + 1);
		if (probe > o->max_probe)
			o->max_probe = probe;
	}
	return rc;
}

/* overrides_file: a YAML file holding the mapping.  Its errors are
 * reported against it (its name and lines) into the same report. */
static int read_file(sluice_yaml_t *y, yaml_node_t *node, sluice_overrides_t *o,
		     const char *rule)
{
	sluice_yaml_t fy;
	const char *path;
	char *text = NULL, err[1024], first[1024];
	size_t len = 0;
	int rc, quotable = 0;

	if (sluice_yaml_string(y, node, "overrides_file", &path) < 0)
		return -1;
	if (sluice_config_read_file(path, &text, &len, &quotable, err,
				    sizeof(err)) < 0) {
		sluice_yaml_report(y, err);
		return -1;
	}
	/* The same report, another name; the first error comes back to
	 * y->err below. */
	fy = *y;
	memset(&fy.doc, 0, sizeof(fy.doc));
	fy.name = path;
	fy.err = first;
	fy.errlen = sizeof(first);
	fy.withhold = !quotable;
	fy.expect_root = "a mapping of override keys to limits, such as "
			 "\"customer-42\": [{capacity: 2000, rate: 50/s}] "
			 "({} for none)";
	first[0] = '\0';
	if (sluice_yaml_load(&fy, text, len) < 0) {
		free(text);
		sluice_yaml_report(y, first);
		return -1;
	}
	free(text);
	rc = read_mapping(&fy, sluice_yaml_root(&fy), o, rule, path);
	sluice_yaml_free(&fy);
	if (y->nerrors == 0 && fy.nerrors > 0 && y->errlen)
		snprintf(y->err, y->errlen, "%s", first);
	y->nerrors = fy.nerrors;
	y->reportused = fy.reportused;
	return rc;
}

int sluice_config_parse_overrides(sluice_yaml_t *y, yaml_node_t *inline_map,
				  yaml_node_t *file, sluice_rule_t *r,
				  const char *rule)
{
	sluice_overrides_t *o = calloc(1, sizeof(*o));
	size_t i;
	int rc = 0;

	if (!o)
		return sluice_yaml_nomem(y, inline_map ? inline_map : file);
	r->overrides = o;
	if (inline_map && read_mapping(y, inline_map, o, rule, y->name) < 0)
		rc = -1;
	if (file && read_file(y, file, o, rule) < 0)
		rc = -1;
	if (rc == 0 && build(y, o, rule) < 0)
		rc = -1;
	/* The names point into strings freed after loading; the messages
	 * that needed them are written. */
	for (i = 0; i < o->n; i++)
		o->entries[i].file = NULL;
	return rc;
}

const sluice_limit_set_t *sluice_rule_override(const sluice_rule_t *rule,
					       const void *const *bufs,
					       const size_t *lens, size_t nb)
{
	const sluice_overrides_t *o = rule->overrides;
	char key[SLUICE_OVERRIDE_KEY_MAX];
	size_t len = 0, i, j;

	if (!o || !o->n)
		return NULL;
	for (i = 0; i < nb; i++) {
		if (lens[i] > sizeof(key) - len)
			return NULL; /* longer than any override key */
		memcpy(key + len, bufs[i], lens[i]);
		len += lens[i];
	}
	for (j = hash(o, key, len) & o->mask; o->slots[j];
	     j = (j + 1) & o->mask) {
		const sluice_override_t *e = &o->entries[o->slots[j] - 1];

		if (e->len == len && memcmp(e->key, key, len) == 0)
			return &o->sets[e->set];
	}
	return NULL;
}
