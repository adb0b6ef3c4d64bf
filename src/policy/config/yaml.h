/*
 * yaml.h -- small helpers for walking a libyaml document with
 * precise error messages ("FILE:LINE: what is wrong; what was expected").
 *
 * Internal to the config reader (config.c); nothing here is exported from
 * the program.
 */
#ifndef SLUICE_POLICY_CONFIG_YAML_H
#define SLUICE_POLICY_CONFIG_YAML_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

typedef struct sluice_yaml_s {
	yaml_document_t doc;
	const char *name; /* the file, for messages */
	char *err;	  /* the first error */
	size_t errlen;
	/* Every error, one line each (check-config): the readers go on
	 * after an error where the rest of the file still makes sense.
	 * report may be NULL (the first error is enough); at most
	 * max_errors lines are kept, nerrors counts them all. */
	char *report;
	size_t reportlen, reportused;
	unsigned max_errors, nerrors;
	/* Messages about this file quote none of its content, only its
	 * name and line (a file sluice_file_t says is not quotable: it may
	 * be a link someone made to a file they cannot read). */
	int withhold;
	/* What the file should hold, for the messages about an empty file
	 * or another kind of root; NULL: a config file's settings. */
	const char *expect_root;
} sluice_yaml_t;

/* Lists and mappings nested deeper than this are refused (the deepest
 * setting, a tier's limit, sits at 7). */
#define SLUICE_YAML_MAX_DEPTH 32

/* Nodes that aliases may stand for in one file, in all (each alias
 * counted with the whole tree of its anchor, aliases inside included):
 * every reader walks an aliased node once per reference, so this bounds
 * the walk to the file's own nodes plus this many.  Far more than any
 * config repeats through anchors (a rule or a limit is a few nodes). */
#define SLUICE_YAML_MAX_ALIAS_NODES 100000

/* Parses text into y->doc.  Returns 0, or -1 with a message (syntax
 * errors, nesting deeper than SLUICE_YAML_MAX_DEPTH, aliases standing for
 * more than SLUICE_YAML_MAX_ALIAS_NODES nodes or inside their own anchor's
 * node, an empty file, a root that is not a mapping). */
int sluice_yaml_load(sluice_yaml_t *y, const char *text, size_t len);
void sluice_yaml_free(sluice_yaml_t *y);

/*
 * Walks the file's events once, before any document is built, and
 * refuses:
 *  - nesting deeper than SLUICE_YAML_MAX_DEPTH: libyaml spends time
 *    quadratic in the depth (80,000 "[" took 33 s, and a reload with such
 *    a file delayed SIGTERM), and no setting needs more than a few levels;
 *    an alias counts with the depth of what it stands for;
 *  - aliases that stand for more than SLUICE_YAML_MAX_ALIAS_NODES nodes in
 *    all (each alias counted with its anchor's tree, aliases in that
 *    included): the walk of every reader is then bounded by the file's own
 *    nodes plus that;
 *  - an alias inside the node its anchor names (a cycle no walk ends).
 * Syntax errors and undefined aliases are left to the loader, which
 * reports them.  Returns 0, or -1 with y's message set (yaml_shape.c).
 */
int sluice_yaml_check_shape(sluice_yaml_t *y, const char *text, size_t len);

yaml_node_t *sluice_yaml_root(sluice_yaml_t *y);
yaml_node_t *sluice_yaml_node(sluice_yaml_t *y, int id);

/* "FILE:LINE: out of memory" for the node being read; returns -1. */
int sluice_yaml_nomem(sluice_yaml_t *y, const yaml_node_t *node);

/* 1-based line of a node. */
int sluice_yaml_line(const yaml_node_t *node);

/* Records "NAME:LINE: " and the formatted text: into y->err when it is
 * the first error, and as a line of y->report.  Returns -1. */
/* The same for a line already formatted ("NAME:LINE: ..."). */
void sluice_yaml_report(sluice_yaml_t *y, const char *line);
int sluice_yaml_error(sluice_yaml_t *y, const yaml_node_t *node,
		      const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* "a mapping", "a list", "a string", "nothing" (for messages). */
const char *sluice_yaml_kind(const yaml_node_t *node);

/* 1 when the node is a YAML null (empty, "~", "null"). */
int sluice_yaml_is_null(const yaml_node_t *node);

/* Each checks the node's type and writes a message naming `what` (the
 * path of the field, e.g. "rules[0].cost") when it does not fit. */
int sluice_yaml_expect_map(sluice_yaml_t *y, yaml_node_t *node,
			   const char *what);
int sluice_yaml_expect_seq(sluice_yaml_t *y, yaml_node_t *node,
			   const char *what);
int sluice_yaml_string(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		       const char **out);
int sluice_yaml_uint(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		     uint64_t min, uint64_t max, uint64_t *out);
int sluice_yaml_bool(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		     int *out);

/*
 * Checks every key of a mapping: it must be a string, appear once, and be
 * one of allowed[] (NULL-terminated).  An unknown key is an error that
 * lists the allowed ones (and suggests the closest), so a typo never goes
 * unnoticed.  Every bad key is reported; returns -1 when there was one.
 */
int sluice_yaml_check_keys(sluice_yaml_t *y, yaml_node_t *map, const char *what,
			   const char *const allowed[]);

/* The value of `key` in a mapping, or NULL when absent. */
yaml_node_t *sluice_yaml_get(sluice_yaml_t *y, yaml_node_t *map,
			     const char *key);

/* The key node of `key` (for messages about the key itself). */
yaml_node_t *sluice_yaml_get_key(sluice_yaml_t *y, yaml_node_t *map,
				 const char *key);

/* Items of a sequence: count and the i-th node. */
size_t sluice_yaml_seq_len(const yaml_node_t *seq);
yaml_node_t *sluice_yaml_seq_at(sluice_yaml_t *y, yaml_node_t *seq, size_t i);

#endif /* SLUICE_POLICY_CONFIG_YAML_H */
