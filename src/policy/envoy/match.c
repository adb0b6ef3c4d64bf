/*
 * match.c -- which limit a descriptor gets, its bucket key and its
 * metrics series.
 */
#include "policy/envoy/config.h"
#include "policy/envoy/metrics.h"
#include "util/buf.h"

#include <stdio.h>
#include <string.h>

int sluice_envoy_wildcard_match(char *const *parts, size_t nparts,
				const char *value)
{
	size_t len = strlen(value), first, last, i;
	const char *p, *end;

	if (nparts == 1)
		return strcmp(parts[0], value) == 0;
	first = strlen(parts[0]);
	last = strlen(parts[nparts - 1]);
	/* The fixed ends must fit without overlapping. */
	if (len < first + last || memcmp(value, parts[0], first) != 0 ||
	    memcmp(value + len - last, parts[nparts - 1], last) != 0)
		return 0;
	/* Each middle part, in order, leftmost, between the ends. */
	p = value + first;
	end = value + len - last;
	for (i = 1; i + 1 < nparts; i++) {
		size_t n = strlen(parts[i]);
		const char *hit = NULL, *q;

		for (q = p; q + n <= end; q++)
			if (memcmp(q, parts[i], n) == 0) {
				hit = q;
				break;
			}
		if (!hit)
			return 0;
		p = hit + n;
	}
	return 1;
}

/* The child of `level` an entry matches: exact value, else the first
 * wildcard (in file order), else the key alone. */
static const sluice_envoy_node_t *find(const sluice_envoy_node_t *level,
				       size_t n, const sluice_rls_entry_t *e,
				       unsigned char *how)
{
	const char *v = e->value ? e->value : "";
	size_t i;

	for (i = 0; i < n; i++)
		if (level[i].value && !level[i].nparts &&
		    strcmp(level[i].key, e->key) == 0 &&
		    strcmp(level[i].value, v) == 0)
			return *how = SLUICE_ENVOY_BY_VALUE, &level[i];
	for (i = 0; i < n; i++)
		if (level[i].nparts && strcmp(level[i].key, e->key) == 0 &&
		    sluice_envoy_wildcard_match(level[i].parts, level[i].nparts,
						v))
			return *how = SLUICE_ENVOY_BY_WILDCARD, &level[i];
	for (i = 0; i < n; i++)
		if (!level[i].value && strcmp(level[i].key, e->key) == 0)
			return *how = SLUICE_ENVOY_BY_KEY, &level[i];
	return NULL;
}

void sluice_envoy_match(const sluice_envoy_domain_t *domain,
			const sluice_rls_entry_t *entries, size_t n,
			sluice_envoy_match_t *m)
{
	const sluice_envoy_node_t *level, *next;
	size_t nlevel, i;

	m->node = NULL;
	m->depth = 0;
	if (!domain || n > SLUICE_ENVOY_MAX_ENTRIES)
		return;
	level = domain->children;
	nlevel = domain->nchildren;
	for (i = 0; i < n; i++) {
		unsigned char how = 0;

		m->shared[i] = NULL;
		next = find(level, nlevel, &entries[i], &how);
		if (!next)
			break;
		m->path[i] = next;
		m->how[i] = how;
		m->depth = i + 1;
		if (how == SLUICE_ENVOY_BY_WILDCARD && next->share_threshold)
			m->shared[i] = next->value;
		/* Only the descriptor's last entry takes a limit: a shorter
		 * or longer descriptor than the config's path gets none. */
		if (next->limit && i == n - 1)
			m->node = next;
		if (!next->nchildren)
			break;
		level = next->children;
		nlevel = next->nchildren;
	}
	for (i = m->depth; i < n; i++)
		m->shared[i] = NULL;
}

/* Appends "<len>:<bytes>" (or "<len>*<pattern>" for a shared value) as
 * two parts of a key. */
static size_t field(const char *s, int shared, char *prefix, const void **parts,
		    size_t *lens, size_t k)
{
	size_t n = strlen(s);

	lens[k] = (size_t)snprintf(prefix, 24, "%zu%c", n, shared ? '*' : ':');
	parts[k] = prefix;
	parts[k + 1] = s;
	lens[k + 1] = n;
	return k + 2;
}

size_t sluice_envoy_key(const char *domain, const sluice_rls_entry_t *entries,
			size_t n, const sluice_envoy_match_t *m,
			char out[SLUICE_KEY_MAX])
{
	enum { MAXF = 1 + 2 * SLUICE_ENVOY_MAX_ENTRIES };
	char prefix[MAXF][24];
	const void *parts[2 * MAXF];
	size_t lens[2 * MAXF], k = 0, f = 0, i;

	if (n > SLUICE_ENVOY_MAX_ENTRIES)
		n = SLUICE_ENVOY_MAX_ENTRIES;
	k = field(domain, 0, prefix[f++], parts, lens, k);
	for (i = 0; i < n; i++) {
		const char *v = entries[i].value ? entries[i].value : "";
		const char *shared = m ? m->shared[i] : NULL;

		k = field(entries[i].key, 0, prefix[f++], parts, lens, k);
		k = field(shared ? shared : v, shared != NULL, prefix[f++],
			  parts, lens, k);
	}
	return sluice_key_make("envoy:", parts, lens, k, out);
}

/* ------------------------------------------------------------- metrics */

/* One level of a metrics path: "key", or "key_value". */
static void level_name(sluice_buf_t *b, const char *key, const char *value)
{
	if (b->len)
		sluice_buf_append(b, ".", 1);
	sluice_buf_puts(b, key);
	if (value && *value) {
		sluice_buf_append(b, "_", 1);
		sluice_buf_puts(b, value);
	}
}

struct sluice_envoy_series_s *
sluice_envoy_match_series(const char *domain, const sluice_rls_entry_t *entries,
			  size_t n, const sluice_envoy_match_t *m)
{
	const sluice_envoy_node_t *node = m->node;
	sluice_buf_t b = {0};
	struct sluice_envoy_series_s *s;
	int any = 0;
	size_t i;

	if (!node)
		return NULL;
	if (node->detailed_metric) {
		/* Every entry with the request's value (a shared value as
		 * its pattern). */
		for (i = 0; i < n; i++)
			level_name(&b, entries[i].key,
				   m->shared[i] ? m->shared[i]
						: entries[i].value);
	} else {
		/* value_to_metric: the request's value where the config
		 * gives none (or a pattern), unless the value is shared. */
		for (i = 0; i < n && i < m->depth; i++) {
			const sluice_envoy_node_t *p = m->path[i];
			const char *v = NULL;

			if (m->how[i] == SLUICE_ENVOY_BY_VALUE)
				v = p->value;
			else if (m->shared[i])
				v = p->value;
			else if (p->value_to_metric)
				v = entries[i].value, any = 1;
			else
				v = p->value;
			level_name(&b, entries[i].key, v);
		}
		if (!any) {
			sluice_buf_free(&b);
			return node->series;
		}
	}
	if (b.oom) {
		sluice_buf_free(&b);
		return node->series;
	}
	sluice_buf_append(&b, "", 1);
	s = sluice_envoy_series(domain, b.data);
	sluice_buf_free(&b);
	return s;
}
