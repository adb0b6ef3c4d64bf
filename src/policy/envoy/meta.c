/*
 * meta.c -- a descriptor's config `metadata:` read into a tree, and
 * the RateLimitResponse's dynamic_metadata built from the request and the
 * descriptors that passed, as envoyproxy/ratelimit's ratelimitToMetadata()
 * (src/service/ratelimit.go) builds it.
 */
#include "policy/envoy/meta.h"
#include "policy/envoy/config.h"
#include "policy/envoy/rls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------- the tree */

static void meta_clear(sluice_meta_t *m)
{
	size_t i;

	for (i = 0; i < m->n; i++) {
		meta_clear(&m->items[i]);
		if (m->keys)
			free(m->keys[i]);
	}
	free(m->keys);
	free(m->items);
	free(m->string);
	memset(m, 0, sizeof(*m));
}

void sluice_meta_free(sluice_meta_t *m)
{
	if (!m)
		return;
	meta_clear(m);
	free(m);
}

/* A new item at the end of a STRUCT (key) or LIST (key NULL); NULL when
 * out of memory. */
static sluice_meta_t *meta_add(sluice_meta_t *m, const char *key)
{
	sluice_meta_t *items = realloc(m->items, (m->n + 1) * sizeof(*items));
	char **keys;

	if (!items)
		return NULL;
	m->items = items;
	memset(&items[m->n], 0, sizeof(*items));
	if (m->kind == SLUICE_META_STRUCT) {
		if (!(keys = realloc(m->keys, (m->n + 1) * sizeof(*keys))))
			return NULL;
		m->keys = keys;
		if (!(keys[m->n] = strdup(key ? key : "")))
			return NULL;
	}
	return &items[m->n++];
}

static sluice_meta_t *meta_string(sluice_meta_t *m, const char *key,
				  const char *s)
{
	sluice_meta_t *v = meta_add(m, key);

	if (!v || !(v->string = strdup(s)))
		return NULL;
	v->kind = SLUICE_META_STRING;
	return v;
}

static sluice_meta_t *meta_number(sluice_meta_t *m, const char *key, double d)
{
	sluice_meta_t *v = meta_add(m, key);

	if (v) {
		v->kind = SLUICE_META_NUMBER;
		v->number = d;
	}
	return v;
}

static int meta_copy(sluice_meta_t *dst, const sluice_meta_t *src)
{
	size_t i;

	dst->kind = src->kind;
	dst->number = src->number;
	dst->boolean = src->boolean;
	if (src->string && !(dst->string = strdup(src->string)))
		return -1;
	for (i = 0; i < src->n; i++) {
		sluice_meta_t *v =
			meta_add(dst, src->keys ? src->keys[i] : NULL);

		if (!v || meta_copy(v, &src->items[i]) < 0)
			return -1;
	}
	return 0;
}

/* envoyproxy/ratelimit's mergeMetadata(): a key dst lacks is added, two
 * STRUCTs under one key are merged, anything else keeps dst's (the first
 * descriptor's) value. */
static int meta_merge(sluice_meta_t *dst, const sluice_meta_t *src)
{
	size_t i, j;

	for (i = 0; i < src->n; i++) {
		for (j = 0; j < dst->n; j++)
			if (strcmp(dst->keys[j], src->keys[i]) == 0)
				break;
		if (j == dst->n) {
			sluice_meta_t *v = meta_add(dst, src->keys[i]);

			if (!v || meta_copy(v, &src->items[i]) < 0)
				return -1;
		} else if (dst->items[j].kind == SLUICE_META_STRUCT &&
			   src->items[i].kind == SLUICE_META_STRUCT &&
			   meta_merge(&dst->items[j], &src->items[i]) < 0) {
			return -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ from YAML */

/* A plain scalar that reads as a decimal number (YAML's int and float;
 * what go-yaml gives envoyproxy/ratelimit as a number). */
static int number_of(const char *s, double *out)
{
	const char *p = s + (*s == '-' || *s == '+');
	char *end;

	if (!(*p >= '0' && *p <= '9') &&
	    !(*p == '.' && p[1] >= '0' && p[1] <= '9'))
		return -1;
	errno = 0;
	*out = strtod(s, &end);
	return *end || errno || strchr(s, 'x') || strchr(s, 'X') ? -1 : 0;
}

static int from_yaml(sluice_yaml_t *y, yaml_node_t *node, sluice_meta_t *m)
{
	const char *s;
	size_t i;

	if (node->type == YAML_MAPPING_NODE) {
		yaml_node_pair_t *p;

		m->kind = SLUICE_META_STRUCT;
		for (p = node->data.mapping.pairs.start;
		     p < node->data.mapping.pairs.top; p++) {
			yaml_node_t *k = sluice_yaml_node(y, p->key);
			sluice_meta_t *v;

			if (sluice_yaml_string(y, k, "metadata key", &s) < 0)
				return -1;
			for (i = 0; i < m->n; i++)
				if (strcmp(m->keys[i], s) == 0)
					return sluice_yaml_error(
						y, k,
						"metadata key '%.100s' given "
						"twice; expected each once",
						s);
			if (!(v = meta_add(m, s)))
				return sluice_yaml_nomem(y, k);
			if (from_yaml(y, sluice_yaml_node(y, p->value), v) < 0)
				return -1;
		}
		return 0;
	}
	if (node->type == YAML_SEQUENCE_NODE) {
		m->kind = SLUICE_META_LIST;
		for (i = 0; i < sluice_yaml_seq_len(node); i++) {
			sluice_meta_t *v = meta_add(m, NULL);

			if (!v)
				return sluice_yaml_nomem(y, node);
			if (from_yaml(y, sluice_yaml_seq_at(y, node, i), v) < 0)
				return -1;
		}
		return 0;
	}
	if (sluice_yaml_is_null(node))
		return 0;
	s = (const char *)node->data.scalar.value;
	if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
		if (!strcasecmp(s, "true") || !strcasecmp(s, "false")) {
			m->kind = SLUICE_META_BOOL;
			m->boolean = !strcasecmp(s, "true");
			return 0;
		}
		if (number_of(s, &m->number) == 0) {
			m->kind = SLUICE_META_NUMBER;
			return 0;
		}
	}
	m->kind = SLUICE_META_STRING;
	if (!(m->string = strdup(s)))
		return sluice_yaml_nomem(y, node);
	return 0;
}

int sluice_meta_from_yaml(sluice_yaml_t *y, yaml_node_t *node,
			  sluice_meta_t **out)
{
	sluice_meta_t *m;

	*out = NULL;
	if (sluice_yaml_is_null(node))
		return 0;
	if (sluice_yaml_expect_map(y, node, "metadata") < 0)
		return -1;
	if (!(m = calloc(1, sizeof(*m))))
		return sluice_yaml_nomem(y, node);
	if (from_yaml(y, node, m) < 0) {
		sluice_meta_free(m);
		return -1;
	}
	*out = m;
	return 0;
}

/* ---------------------------------------------------------- the answer */

/* envoyproxy/ratelimit's descriptorToStruct(): entries as "KEY=VALUE",
 * the request's limit as Go prints the message (prototext), hitsAddend
 * when the descriptor has one. */
static int descriptor(sluice_meta_t *list, const sluice_rls_descriptor_t *d)
{
	sluice_meta_t *s = meta_add(list, NULL), *entries;
	char buf[96];
	size_t i;

	if (!s)
		return -1;
	s->kind = SLUICE_META_STRUCT;
	if (!(entries = meta_add(s, "entries")))
		return -1;
	entries->kind = SLUICE_META_LIST;
	for (i = 0; i < d->nentries; i++) {
		const sluice_rls_entry_t *e = &d->entries[i];
		char *kv;

		if (asprintf(&kv, "%s=%s", e->key, e->value ? e->value : "") <
		    0)
			return -1;
		if (!meta_string(entries, NULL, kv)) {
			free(kv);
			return -1;
		}
		free(kv);
	}
	if (d->has_limit) {
		/* Fields at their zero value are not printed. */
		buf[0] = 0;
		if (d->limit_requests_per_unit)
			snprintf(buf, sizeof(buf), "requests_per_unit:%u",
				 (unsigned)d->limit_requests_per_unit);
		if (d->limit_unit)
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf),
				 "%sunit:%s", buf[0] ? " " : "",
				 sluice_envoy_unit_name(d->limit_unit));
		if (!meta_string(s, "limit", buf))
			return -1;
	}
	if (d->has_hits_addend &&
	    !meta_number(s, "hitsAddend", (double)d->hits_addend))
		return -1;
	return 0;
}

sluice_meta_t *sluice_meta_response(const sluice_rls_request_t *req,
				    const sluice_rls_status_t *st)
{
	sluice_meta_t *m = calloc(1, sizeof(*m)), *list, *merged = NULL;
	size_t i;

	if (!m)
		return NULL;
	m->kind = SLUICE_META_STRUCT;
	if (!meta_string(m, "domain", req->domain) ||
	    !(list = meta_add(m, "descriptors")))
		goto fail;
	list->kind = SLUICE_META_LIST;
	for (i = 0; i < req->ndescriptors; i++)
		if (descriptor(list, &req->descriptors[i]) < 0)
			goto fail;
	if (req->hits_addend &&
	    !meta_number(m, "hitsAddend", (double)req->hits_addend))
		goto fail;
	/* The metadata of each descriptor that passed, in request order. */
	for (i = 0; i < req->ndescriptors; i++) {
		if (!st[i].config_metadata ||
		    st[i].code == SLUICE_RLS_CODE_OVER_LIMIT ||
		    !st[i].config_metadata->n)
			continue;
		if (!merged && !(merged = meta_add(m, "metadata")))
			goto fail;
		merged->kind = SLUICE_META_STRUCT;
		if (meta_merge(merged, st[i].config_metadata) < 0)
			goto fail;
	}
	return m;
fail:
	sluice_meta_free(m);
	return NULL;
}

/* ---------------------------------------------------------------- JSON */

void sluice_meta_json(sluice_buf_t *b, const sluice_meta_t *m)
{
	char num[40];
	size_t i;

	switch (m->kind) {
	case SLUICE_META_NULL:
		sluice_buf_puts(b, "null");
		return;
	case SLUICE_META_BOOL:
		sluice_buf_puts(b, m->boolean ? "true" : "false");
		return;
	case SLUICE_META_NUMBER:
		/* The shortest text that reads back as the same double. */
		snprintf(num, sizeof(num), "%.15g", m->number);
		if (strtod(num, NULL) != m->number)
			snprintf(num, sizeof(num), "%.17g", m->number);
		sluice_buf_puts(b, num);
		return;
	case SLUICE_META_STRING:
		sluice_buf_puts(b, "\"");
		sluice_buf_json_str(b, m->string, strlen(m->string));
		sluice_buf_puts(b, "\"");
		return;
	case SLUICE_META_STRUCT:
	case SLUICE_META_LIST:
		sluice_buf_puts(b, m->kind == SLUICE_META_STRUCT ? "{" : "[");
		for (i = 0; i < m->n; i++) {
			if (i)
				sluice_buf_puts(b, ",");
			if (m->kind == SLUICE_META_STRUCT) {
				sluice_buf_puts(b, "\"");
				sluice_buf_json_str(b, m->keys[i],
						    strlen(m->keys[i]));
				sluice_buf_puts(b, "\":");
			}
			sluice_meta_json(b, &m->items[i]);
		}
		sluice_buf_puts(b, m->kind == SLUICE_META_STRUCT ? "}" : "]");
		return;
	}
}
