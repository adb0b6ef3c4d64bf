/*
 * yaml.c -- walking a libyaml document with precise messages.
 *
 * The config reader uses libyaml's document API: the whole file becomes a
 * tree of nodes, each with the position it started at, so every message
 * can name the exact line of the offending value.  Aliases are kept as
 * shared nodes (never copied), and what they stand for once expanded is
 * bounded before the document is built (yaml_shape.c), so a hostile file
 * can blow up neither memory nor the time of a walk.
 * Also the helpers every section reader uses: reading a config or
 * overrides file, copying a string.
 */
#include "policy/config/internal.h"
#include "util/file.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------- loading */

/* "FILE:LINE: YAML syntax error: ..." from the parser's state. */
static int syntax_error(sluice_yaml_t *y, const yaml_parser_t *parser)
{
	const yaml_mark_t *m =
		parser->problem_mark.line || parser->problem_mark.column
			? &parser->problem_mark
			: &parser->context_mark;
	char started[48] = "";

	if (parser->context && m != &parser->context_mark &&
	    parser->context_mark.line != m->line)
		snprintf(started, sizeof(started), " (started on line %zu)",
			 parser->context_mark.line + 1);
	snprintf(y->err, y->errlen,
		 "%s:%zu: YAML syntax error: %s%s%s%s; expected valid YAML "
		 "(check indentation, quotes and colons)",
		 y->name, m->line + 1,
		 parser->problem ? parser->problem : "malformed",
		 parser->context ? " " : "",
		 parser->context ? parser->context : "", started);
	return -1;
}

int sluice_yaml_load(sluice_yaml_t *y, const char *text, size_t len)
{
	yaml_parser_t parser;
	yaml_document_t more;
	yaml_node_t *root;

	memset(&y->doc, 0, sizeof(y->doc));
	if (sluice_yaml_check_shape(y, text, len) < 0)
		return -1;
	if (!yaml_parser_initialize(&parser)) {
		snprintf(y->err, y->errlen, "%s:1: out of memory", y->name);
		return -1;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &y->doc)) {
		syntax_error(y, &parser);
		yaml_parser_delete(&parser);
		memset(&y->doc, 0, sizeof(y->doc));
		return -1;
	}
	/* A second document ("---") would be silently ignored: refuse it,
	 * and read it to the end so a syntax error there is reported too. */
	if (!yaml_parser_load(&parser, &more)) {
		syntax_error(y, &parser);
		yaml_parser_delete(&parser);
		yaml_document_delete(&y->doc);
		return -1;
	}
	root = yaml_document_get_root_node(&more);
	if (root) {
		snprintf(y->err, y->errlen,
			 "%s:%zu: a second YAML document; expected one "
			 "document per file",
			 y->name, root->start_mark.line + 1);
		yaml_document_delete(&more);
		yaml_parser_delete(&parser);
		yaml_document_delete(&y->doc);
		return -1;
	}
	yaml_document_delete(&more);
	yaml_parser_delete(&parser);
	root = yaml_document_get_root_node(&y->doc);
	if (!root || sluice_yaml_is_null(root)) {
		snprintf(y->err, y->errlen,
			 "%s:1: the file is empty; expected %s", y->name,
			 y->expect_root ? y->expect_root
					: "a mapping of settings such as "
					  "\"rules:\"");
		yaml_document_delete(&y->doc);
		return -1;
	}
	if (root->type != YAML_MAPPING_NODE) {
		sluice_yaml_error(y, root, "the file holds %s; expected %s",
				  sluice_yaml_kind(root),
				  y->expect_root ? y->expect_root
						 : "a mapping of settings "
						   "(listen, store, rules, "
						   "...)");
		yaml_document_delete(&y->doc);
		return -1;
	}
	return 0;
}

void sluice_yaml_free(sluice_yaml_t *y)
{
	yaml_document_delete(&y->doc);
}

yaml_node_t *sluice_yaml_root(sluice_yaml_t *y)
{
	return yaml_document_get_root_node(&y->doc);
}

yaml_node_t *sluice_yaml_node(sluice_yaml_t *y, int id)
{
	return yaml_document_get_node(&y->doc, id);
}

int sluice_yaml_line(const yaml_node_t *node)
{
	return node ? (int)node->start_mark.line + 1 : 1;
}

/*
 * A message goes to a log, a terminal, a reload's answer: control bytes
 * (a terminal escape in a quoted key) become '?', and a quoted excerpt of
 * the file ("...") keeps at most QUOTE_MAX bytes.  Quotes pair up as the
 * message's own do; a '"' inside an excerpt only shortens what is shown.
 */
#define QUOTE_MAX 64

static void sanitise(char *out, size_t outlen, const char *in)
{
	size_t o = 0, run = 0;
	int quoted = 0;

	for (; *in && o + 4 < outlen; in++) {
		unsigned char c = (unsigned char)*in;

		if (c == '"') {
			quoted = !quoted;
			run = 0;
		} else if (quoted && ++run > QUOTE_MAX) {
			if (run == QUOTE_MAX + 1) {
				memcpy(out + o, "...", 3);
				o += 3;
			}
			continue;
		}
		out[o++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	out[o] = '\0';
}

void sluice_yaml_report(sluice_yaml_t *y, const char *raw)
{
	char line[1024];
	size_t n;

	sanitise(line, sizeof(line), raw);
	n = strlen(line);
	if (y->nerrors++ == 0 && y->errlen)
		snprintf(y->err, y->errlen, "%s", line);
	if (!y->report || y->nerrors > y->max_errors ||
	    y->reportused + n + 2 > y->reportlen)
		return;
	memcpy(y->report + y->reportused, line, n);
	y->reportused += n;
	y->report[y->reportused++] = '\n';
	y->report[y->reportused] = '\0';
}

int sluice_yaml_error(sluice_yaml_t *y, const yaml_node_t *node,
		      const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "%s:%d: ", y->name,
		     sluice_yaml_line(node));
	if (y->withhold) {
		/* Nothing of the message: it may quote the file. */
		snprintf(line + (n > 0 ? n : 0),
			 sizeof(line) - (size_t)(n > 0 ? n : 0),
			 "not a valid setting (details withheld: the file "
			 "is not readable by every user, nor this user's "
			 "own named directly; a symbolic or hard link may "
			 "lead to a secret)");
	} else if (n >= 0 && (size_t)n < sizeof(line)) {
		va_start(ap, fmt);
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
		va_end(ap);
	}
	sluice_yaml_report(y, line);
	return -1;
}

int sluice_yaml_nomem(sluice_yaml_t *y, const yaml_node_t *node)
{
	return sluice_yaml_error(y, node, "out of memory");
}

/* --------------------------------------------------------------- types */

int sluice_yaml_is_null(const yaml_node_t *node)
{
	const char *v;

	if (!node || node->type != YAML_SCALAR_NODE)
		return 0;
	if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return 0;
	v = (const char *)node->data.scalar.value;
	return node->data.scalar.length == 0 || strcmp(v, "~") == 0 ||
	       strcasecmp(v, "null") == 0;
}

const char *sluice_yaml_kind(const yaml_node_t *node)
{
	if (!node || sluice_yaml_is_null(node))
		return "nothing";
	switch (node->type) {
	case YAML_MAPPING_NODE:
		return "a mapping";
	case YAML_SEQUENCE_NODE:
		return "a list";
	default:
		return "a single value";
	}
}

int sluice_yaml_expect_map(sluice_yaml_t *y, yaml_node_t *node,
			   const char *what)
{
	if (node->type == YAML_MAPPING_NODE)
		return 0;
	return sluice_yaml_error(y, node, "%s is %s; expected a mapping", what,
				 sluice_yaml_kind(node));
}

int sluice_yaml_expect_seq(sluice_yaml_t *y, yaml_node_t *node,
			   const char *what)
{
	if (node->type == YAML_SEQUENCE_NODE)
		return 0;
	return sluice_yaml_error(y, node, "%s is %s; expected a list", what,
				 sluice_yaml_kind(node));
}

int sluice_yaml_string(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		       const char **out)
{
	if (node->type != YAML_SCALAR_NODE || sluice_yaml_is_null(node))
		return sluice_yaml_error(y, node, "%s is %s; expected a string",
					 what, sluice_yaml_kind(node));
	if (strlen((const char *)node->data.scalar.value) !=
	    node->data.scalar.length)
		return sluice_yaml_error(y, node,
					 "%s contains a NUL character; "
					 "expected plain text",
					 what);
	*out = (const char *)node->data.scalar.value;
	return 0;
}

int sluice_yaml_uint(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		     uint64_t min, uint64_t max, uint64_t *out)
{
	const char *s, *p;
	uint64_t v = 0;
	int digits = 0;

	if (node->type != YAML_SCALAR_NODE || sluice_yaml_is_null(node))
		goto bad;
	s = (const char *)node->data.scalar.value;
	for (p = s; *p; p++) {
		if (*p == '_' && digits > 0 && p[1] >= '0' && p[1] <= '9')
			continue; /* 1_000_000 */
		if (*p < '0' || *p > '9')
			goto bad;
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			goto range;
		v = v * 10 + (uint64_t)(*p - '0');
		digits++;
	}
	if (digits == 0)
		goto bad;
	if (v < min || v > max)
		goto range;
	*out = v;
	return 0;
range:
	return sluice_yaml_error(y, node,
				 "%s is %s, out of range; expected a whole "
				 "number from %llu to %llu",
				 what, (const char *)node->data.scalar.value,
				 (unsigned long long)min,
				 (unsigned long long)max);
bad:
	if (node->type == YAML_SCALAR_NODE && !sluice_yaml_is_null(node))
		return sluice_yaml_error(
			y, node,
			"%s is \"%.60s\"; expected a whole number from "
			"%llu to %llu",
			what, (const char *)node->data.scalar.value,
			(unsigned long long)min, (unsigned long long)max);
	return sluice_yaml_error(y, node,
				 "%s is %s; expected a whole number from %llu "
				 "to %llu",
				 what, sluice_yaml_kind(node),
				 (unsigned long long)min,
				 (unsigned long long)max);
}

int sluice_yaml_bool(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		     int *out)
{
	static const char *const yes[] = {"true", "yes", "on", NULL};
	static const char *const no[] = {"false", "no", "off", NULL};
	const char *v;
	int i;

	if (node->type == YAML_SCALAR_NODE && !sluice_yaml_is_null(node)) {
		v = (const char *)node->data.scalar.value;
		for (i = 0; yes[i]; i++)
			if (strcasecmp(v, yes[i]) == 0)
				return *out = 1, 0;
		for (i = 0; no[i]; i++)
			if (strcasecmp(v, no[i]) == 0)
				return *out = 0, 0;
		return sluice_yaml_error(y, node,
					 "%s is \"%.60s\"; expected true or "
					 "false",
					 what, v);
	}
	return sluice_yaml_error(y, node, "%s is %s; expected true or false",
				 what, sluice_yaml_kind(node));
}

/* ------------------------------------------------------------ mappings */

/* Levenshtein distance, capped: only used to suggest a near key. */
static size_t distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j, d[33], prev, tmp;

	if (la > 32 || lb > 32)
		return 99;
	for (j = 0; j <= lb; j++)
		d[j] = j;
	for (i = 1; i <= la; i++) {
		prev = d[0];
		d[0] = i;
		for (j = 1; j <= lb; j++) {
			size_t best = prev + (a[i - 1] != b[j - 1]);

			if (d[j] + 1 < best)
				best = d[j] + 1;
			if (d[j - 1] + 1 < best)
				best = d[j - 1] + 1;
			tmp = d[j];
			d[j] = best;
			prev = tmp;
		}
	}
	return d[lb];
}

int sluice_yaml_check_keys(sluice_yaml_t *y, yaml_node_t *map, const char *what,
			   const char *const allowed[])
{
	yaml_node_pair_t *p, *q;
	char list[256];
	size_t i, off;
	int rc = 0;

	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = sluice_yaml_node(y, p->key);
		const char *name, *near = NULL;

		if (!k || k->type != YAML_SCALAR_NODE) {
			rc = sluice_yaml_error(y, k,
					       "%s has a key that is %s; "
					       "expected a plain name",
					       what, sluice_yaml_kind(k));
			continue;
		}
		name = (const char *)k->data.scalar.value;
		for (q = map->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *k2 = sluice_yaml_node(y, q->key);

			if (k2 && k2->type == YAML_SCALAR_NODE &&
			    strcmp((const char *)k2->data.scalar.value, name) ==
				    0)
				break;
		}
		if (q < p) {
			rc = sluice_yaml_error(
				y, k,
				"%s: duplicate key \"%.60s\" (first on line "
				"%d); expected each key once",
				what, name,
				sluice_yaml_line(sluice_yaml_node(y, q->key)));
			continue;
		}
		for (i = 0; allowed[i]; i++) {
			if (strcmp(allowed[i], name) == 0)
				break;
			if (!near && distance(allowed[i], name) <= 2)
				near = allowed[i];
		}
		if (allowed[i])
			continue;
		off = 0;
		list[0] = '\0';
		for (i = 0; allowed[i] && off < sizeof(list); i++)
			off += (size_t)snprintf(list + off, sizeof(list) - off,
						"%s%s", i ? ", " : "",
						allowed[i]);
		if (near)
			rc = sluice_yaml_error(y, k,
					       "%s: unknown key \"%.60s\" (did "
					       "you mean \"%s\"?); expected "
					       "one of: %s",
					       what, name, near, list);
		else
			rc = sluice_yaml_error(y, k,
					       "%s: unknown key \"%.60s\"; "
					       "expected one of: %s",
					       what, name, list);
	}
	return rc;
}

static yaml_node_pair_t *find(sluice_yaml_t *y, yaml_node_t *map,
			      const char *key)
{
	yaml_node_pair_t *p;

	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = sluice_yaml_node(y, p->key);

		if (k && k->type == YAML_SCALAR_NODE &&
		    strcmp((const char *)k->data.scalar.value, key) == 0)
			return p;
	}
	return NULL;
}

yaml_node_t *sluice_yaml_get(sluice_yaml_t *y, yaml_node_t *map,
			     const char *key)
{
	yaml_node_pair_t *p = find(y, map, key);

	return p ? sluice_yaml_node(y, p->value) : NULL;
}

yaml_node_t *sluice_yaml_get_key(sluice_yaml_t *y, yaml_node_t *map,
				 const char *key)
{
	yaml_node_pair_t *p = find(y, map, key);

	return p ? sluice_yaml_node(y, p->key) : NULL;
}

size_t sluice_yaml_seq_len(const yaml_node_t *seq)
{
	return (size_t)(seq->data.sequence.items.top -
			seq->data.sequence.items.start);
}

yaml_node_t *sluice_yaml_seq_at(sluice_yaml_t *y, yaml_node_t *seq, size_t i)
{
	return sluice_yaml_node(y, seq->data.sequence.items.start[i]);
}

/* ------------------------------------------------ files and strings */

/* Reads a whole config or overrides file (at most SLUICE_CONFIG_MAX_BYTES)
 * into *out, NUL terminated, through sluice_file_read(): a regular file,
 * owned by the user sluice runs as or root, opened without blocking (a
 * FIFO is refused, not waited on).  *quotable (may be NULL) says whether
 * messages may quote its content.  Returns 0, or -1 with "FILE:1: ..." in
 * err. */
int sluice_config_read_file(const char *path, char **out, size_t *outlen,
			    int *quotable, char *err, size_t errlen)
{
	return sluice_config_read_file_trusted(path, NULL, out, outlen,
					       quotable, err, errlen);
}

int sluice_config_read_file_trusted(const char *path,
				    const sluice_file_trust_t *trust,
				    char **out, size_t *outlen, int *quotable,
				    char *err, size_t errlen)
{
	static const sluice_file_trust_t none = {.group = (gid_t)-1};
	char why[256];

	if (sluice_file_read_trusted(path, SLUICE_CONFIG_MAX_BYTES,
				     SLUICE_FILE_OWNED, trust ? trust : &none,
				     out, outlen, quotable, why,
				     sizeof(why)) == 0)
		return 0;
	snprintf(err, errlen,
		 "%s:1: %s; expected a regular YAML file (at most %d MiB) "
		 "owned by the user sluice runs as or root%s",
		 path, why, SLUICE_CONFIG_MAX_BYTES >> 20,
		 trust ? " (or a trusted owner: envoy.files)" : "");
	return -1;
}

int sluice_config_set_string(char **dst, const char *src)
{
	char *s = strdup(src);

	if (!s)
		return -1;
	free(*dst);
	*dst = s;
	return 0;
}
