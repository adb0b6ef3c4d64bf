/*
 * config_test.h -- what the config's tests share: a temporary file, a
 * config parsed from text as "t.yaml", and a bad one refused with
 * "t.yaml:LINE: ...; expected".
 */
#ifndef SLUICE_TESTS_CONFIG_TEST_H
#define SLUICE_TESTS_CONFIG_TEST_H

#include "check.h"
#include "policy/config/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes text to a new file named from the template path (which gets its
 * name); the caller unlinks it. */
static inline void write_temp(char *path, const char *text)
{
	int fd = mkstemp(path);
	FILE *f;

	CHECK(fd >= 0);
	f = fdopen(fd, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

static inline sluice_config_t *parse(const char *text, char *err, size_t errlen)
{
	return sluice_config_parse("t.yaml", text, strlen(text), err, errlen);
}

/* One bad config, refused with "t.yaml:LINE: ...what...; expected". */
static inline void expect_bad(const char *text, int line, const char *what)
{
	char err[512], prefix[32];
	sluice_config_t *c = parse(text, err, sizeof(err));

	snprintf(prefix, sizeof(prefix), "t.yaml:%d: ", line);
	if (c || strncmp(err, prefix, strlen(prefix)) != 0 ||
	    !strstr(err, what) || !strstr(err, "; expected"))
		fprintf(stderr, "want \"%s...%s\", got \"%s\"\n", prefix, what,
			c ? "(accepted)" : err);
	sluice_config_free(c);
	CHECK(c == NULL);
	CHECK(strncmp(err, prefix, strlen(prefix)) == 0);
	CHECK(strstr(err, what) != NULL);
}

#endif /* SLUICE_TESTS_CONFIG_TEST_H */
