/*
 * yaml_shape.c -- a YAML file's shape bounded before libyaml builds its
 * document (sluice_yaml_check_shape(), called by sluice_yaml_load()): how
 * deep its lists and mappings nest, and how many nodes its aliases stand
 * for once expanded.  One pass over the parser's events, with a table of
 * the anchors seen.
 */
#include "policy/config/yaml.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ anchors, aliases */

/*
 * What an anchor stands for once its aliases are expanded: the nodes of
 * its tree counted with every alias inside it expanded, and its height
 * (levels of lists and mappings).  libyaml shares an aliased node rather
 * than copying it, but every reader walks the tree, and a walk visits a
 * shared node once per reference: nine anchors of three aliases each are
 * 3^9 nodes to walk from a few hundred bytes.  So the walk is bounded
 * here, before any document is built.
 */
typedef struct anchor_s {
	uint64_t size;
	int height;
	int open; /* its node is still being read: an alias to it is a
		     cycle */
	char name[];
} anchor_t;

/* Open addressing; an anchor stays where it was allocated (the nodes
 * being read point at theirs while the table grows). */
typedef struct anchors_s {
	anchor_t **slot;
	size_t cap, n; /* cap a power of two, n <= cap / 2 */
} anchors_t;

static size_t anchor_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (size_t)h;
}

static anchor_t **anchor_slot(anchor_t **slot, size_t cap, const char *name)
{
	size_t i;

	for (i = anchor_hash(name) & (cap - 1);
	     slot[i] && strcmp(slot[i]->name, name) != 0;
	     i = (i + 1) & (cap - 1))
		;
	return &slot[i];
}

static anchor_t *anchor_find(anchors_t *t, const char *name)
{
	return t->cap ? *anchor_slot(t->slot, t->cap, name) : NULL;
}

/* The entry of name, made when new (a redefined anchor replaces the
 * old one from here on, as libyaml does).  NULL when out of memory. */
static anchor_t *anchor_put(anchors_t *t, const char *name)
{
	anchor_t *a = anchor_find(t, name);
	size_t i, len = strlen(name);

	if (a)
		return a;
	if (2 * (t->n + 1) > t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 16;
		anchor_t **slot = calloc(cap, sizeof(*slot));

		if (!slot)
			return NULL;
		for (i = 0; i < t->cap; i++)
			if (t->slot[i])
				*anchor_slot(slot, cap, t->slot[i]->name) =
					t->slot[i];
		free(t->slot);
		t->slot = slot;
		t->cap = cap;
	}
	a = calloc(1, sizeof(*a) + len + 1);
	if (!a)
		return NULL;
	memcpy(a->name, name, len + 1);
	*anchor_slot(t->slot, t->cap, name) = a;
	t->n++;
	return a;
}

static void anchors_free(anchors_t *t)
{
	size_t i;

	for (i = 0; i < t->cap; i++)
		free(t->slot[i]);
	free(t->slot);
}

/* The anchor a node event carries, or NULL. */
static const char *event_anchor(const yaml_event_t *ev)
{
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		return (const char *)ev->data.scalar.anchor;
	case YAML_SEQUENCE_START_EVENT:
		return (const char *)ev->data.sequence_start.anchor;
	case YAML_MAPPING_START_EVENT:
		return (const char *)ev->data.mapping_start.anchor;
	default:
		return NULL;
	}
}

/* A list or mapping being read: where its count started, its anchor,
 * the height of its deepest child so far. */
typedef struct open_node_s {
	uint64_t start;
	anchor_t *anchor;
	int height;
} open_node_t;

/* check_shape()'s walk: the lists and mappings open around the event
 * being read, the anchors seen, the nodes counted so far (aliases
 * counted with what they stand for) and those that came through aliases. */
typedef struct shape_s {
	sluice_yaml_t *y;
	open_node_t open[SLUICE_YAML_MAX_DEPTH + 1];
	int depth;
	anchors_t anchors;
	uint64_t total, aliased;
} shape_t;

/* A list or mapping starts (anchored by a, or not): -1 with the message
 * set when it nests too deep. */
static int shape_open(shape_t *sh, anchor_t *a, size_t line)
{
	sluice_yaml_t *y = sh->y;

	if (sh->depth == SLUICE_YAML_MAX_DEPTH) {
		snprintf(y->err, y->errlen,
			 "%s:%zu: nesting deeper than %d "
			 "levels; expected at most %d nested "
			 "lists and mappings",
			 y->name, line, SLUICE_YAML_MAX_DEPTH,
			 SLUICE_YAML_MAX_DEPTH);
		return -1;
	}
	sh->open[sh->depth].start = sh->total++;
	sh->open[sh->depth].anchor = a;
	sh->open[sh->depth].height = 0;
	if (a)
		a->open = 1;
	sh->depth++;
	return 0;
}

/* A list or mapping ends: its height, recorded in its anchor; -1 for an
 * end with nothing open (the loader reports the file). */
static int shape_close(shape_t *sh)
{
	open_node_t *o;
	int height;

	if (sh->depth == 0)
		return -1;
	o = &sh->open[--sh->depth];
	height = o->height + 1;
	if (o->anchor) {
		o->anchor->size = sh->total - o->start;
		o->anchor->height = height;
		o->anchor->open = 0;
	}
	return height;
}

/* A scalar (anchored by a, or not): height 0. */
static int shape_scalar(shape_t *sh, anchor_t *a)
{
	sh->total++;
	if (a) {
		a->size = 1;
		a->height = 0;
		a->open = 0;
	}
	return 0;
}

/* An alias, counted with what its anchor stands for: *height is that
 * node's (left alone for an undefined anchor, which the loader reports);
 * -1 with the message set for a cycle, nesting too deep through it, or
 * aliases past the bound. */
static int shape_alias(shape_t *sh, const yaml_event_t *ev, size_t line,
		       int *height)
{
	sluice_yaml_t *y = sh->y;
	const char *name = (const char *)ev->data.alias.anchor;
	anchor_t *target = anchor_find(&sh->anchors, name);

	if (!target)
		return 0;
	if (target->open) {
		snprintf(y->err, y->errlen,
			 "%s:%zu: the alias *%.64s is inside "
			 "the node it names (a cycle); "
			 "expected an alias to a node that "
			 "ends before it",
			 y->name, line, name);
		return -1;
	}
	if (sh->depth + target->height > SLUICE_YAML_MAX_DEPTH) {
		snprintf(y->err, y->errlen,
			 "%s:%zu: nesting deeper than %d "
			 "levels (through the alias "
			 "*%.64s); expected at most %d nested "
			 "lists and mappings",
			 y->name, line, SLUICE_YAML_MAX_DEPTH, name,
			 SLUICE_YAML_MAX_DEPTH);
		return -1;
	}
	sh->aliased += target->size;
	sh->total += target->size;
	*height = target->height;
	if (sh->aliased > SLUICE_YAML_MAX_ALIAS_NODES) {
		snprintf(y->err, y->errlen,
			 "%s:%zu: aliases stand for more than "
			 "%d nodes (the alias *%.64s passes "
			 "the bound); expected at most %d "
			 "nodes repeated through aliases in "
			 "one file",
			 y->name, line, SLUICE_YAML_MAX_ALIAS_NODES, name,
			 SLUICE_YAML_MAX_ALIAS_NODES);
		return -1;
	}
	return 0;
}

int sluice_yaml_check_shape(sluice_yaml_t *y, const char *text, size_t len)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	shape_t sh = {.y = y};
	int r = 0, done = 0;

	if (!yaml_parser_initialize(&parser)) {
		snprintf(y->err, y->errlen, "%s:1: out of memory", y->name);
		return -1;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	while (!done && yaml_parser_parse(&parser, &ev)) {
		size_t line = ev.start_mark.line + 1;
		const char *aname = event_anchor(&ev);
		anchor_t *a = NULL;
		int height = -1; /* of a node just read whole */

		if (aname && !(a = anchor_put(&sh.anchors, aname))) {
			snprintf(y->err, y->errlen, "%s:%zu: out of memory",
				 y->name, line);
			r = -1;
			done = 1;
		}
		switch (done ? YAML_NO_EVENT : ev.type) {
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (shape_open(&sh, a, line) < 0)
				r = -1;
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			height = shape_close(&sh);
			break;
		case YAML_SCALAR_EVENT:
			height = shape_scalar(&sh, a);
			break;
		case YAML_ALIAS_EVENT:
			if (shape_alias(&sh, &ev, line, &height) < 0)
				r = -1;
			break;
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		default:
			break;
		}
		if (r < 0)
			done = 1;
		/* A node read whole raises the height of the one around it. */
		if (height >= 0 && sh.depth > 0 &&
		    height > sh.open[sh.depth - 1].height)
			sh.open[sh.depth - 1].height = height;
		yaml_event_delete(&ev);
	}
	anchors_free(&sh.anchors);
	yaml_parser_delete(&parser);
	return r;
}
