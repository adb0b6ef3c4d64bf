/*
 * test_config_files.c -- the files a config names (itself, overrides_file,
 * admin.token_file, TLS files) as another local user might leave them: a
 * FIFO is refused at once (never waited on), a file another user owns is
 * refused naming the owner, a link to a secret file gets messages that
 * quote none of it, excerpts are short and clean; the documented sizes
 * fit (100,000 overrides), an empty overrides file gets the right
 * message, and a token file's newline is not part of the token.
 *
 * Runs as root (as the test suite does): it chowns files to nobody.
 */
#include "check.h"
#include "policy/config/config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NOBODY 65534

static char dir[] = "/tmp/sluice-test-files-XXXXXX";

/* dir/name, in a static ring (a test holds a few at once). */
static const char *in_dir(const char *name)
{
	static char bufs[8][256];
	static unsigned next;
	char *b = bufs[next++ % 8];

	snprintf(b, 256, "%s/%s", dir, name);
	return b;
}

static const char *write_file(const char *name, const char *text, int mode)
{
	const char *path = in_dir(name);
	FILE *f;

	unlink(path);
	f = fopen(path, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
	CHECK(chmod(path, (mode_t)mode) == 0);
	return path;
}

/* A config with one rule whose overrides come from `overrides`. */
static const char *config_with_overrides(const char *overrides)
{
	static char text[512];

	snprintf(text, sizeof(text),
		 "rules:\n  - name: r\n    limits: [{capacity: 10, rate: "
		 "1/s}]\n    overrides_file: %s\n",
		 overrides);
	return write_file("config.yaml", text, 0600);
}

/* check-config on path: the error count, the report in report. */
static unsigned check(const char *path, char *report, size_t len)
{
	unsigned n;

	/* A FIFO that blocked the open would hang here: fail instead. */
	alarm(20);
	n = sluice_config_check(path, report, len, 20);
	alarm(0);
	return n;
}

static void test_fifo_is_refused_without_waiting(void)
{
	char report[4096], err[1024];
	const char *fifo = in_dir("fifo");

	unlink(fifo);
	CHECK(mkfifo(fifo, 0600) == 0);
	/* as the config itself */
	CHECK(check(fifo, report, sizeof(report)) == 1);
	CHECK(strstr(report, "is a FIFO, not a regular file") != NULL);
	CHECK(sluice_config_load(fifo, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "is a FIFO") != NULL);
	/* as an overrides file */
	CHECK(check(config_with_overrides(fifo), report, sizeof(report)) == 1);
	CHECK(strstr(report, "fifo:1: is a FIFO, not a regular file") != NULL);
	/* as the token file */
	{
		char text[512];

		snprintf(text, sizeof(text), "admin: {token_file: %s}\n", fifo);
		CHECK(check(write_file("c.yaml", text, 0600), report,
			    sizeof(report)) == 1);
		CHECK(strstr(report, "is a FIFO, not a regular file") != NULL);
	}
	unlink(fifo);
}

static void test_file_of_another_user_is_refused_naming_the_owner(void)
{
	char report[4096], text[512];
	const char *ov, *tok, *cfg;

	ov = write_file("ov.yaml", "\"k\": [{capacity: 5, rate: 1/s}]\n", 0644);
	CHECK(check(config_with_overrides(ov), report, sizeof(report)) == 0);
	CHECK(chown(ov, NOBODY, NOBODY) == 0);
	CHECK(check(config_with_overrides(ov), report, sizeof(report)) == 1);
	CHECK(strstr(report, "is owned by uid 65534") != NULL);
	tok = write_file("token", "0123456789abcdef0123\n", 0600);
	CHECK(chown(tok, NOBODY, NOBODY) == 0);
	snprintf(text, sizeof(text), "admin: {token_file: %s}\n", tok);
	CHECK(check(write_file("c.yaml", text, 0600), report, sizeof(report)) ==
	      1);
	CHECK(strstr(report, "is owned by uid 65534") != NULL);
	cfg = write_file("c2.yaml", "threads: 1\n", 0644);
	CHECK(chown(cfg, NOBODY, NOBODY) == 0);
	CHECK(check(cfg, report, sizeof(report)) == 1);
	CHECK(strstr(report, "is owned by uid 65534") != NULL);
	/* writable by everyone: anyone may rewrite it */
	ov = write_file("ov.yaml", "{}\n", 0666);
	CHECK(chmod(ov, 0666) == 0);
	CHECK(check(config_with_overrides(ov), report, sizeof(report)) == 1);
	CHECK(strstr(report, "writable by every user") != NULL);
}

/* An overrides file swapped for a link to a file others cannot read (a
 * stand-in for /etc/shadow): nothing of it reaches the messages. */
static void test_link_to_a_secret_file_is_not_quoted(void)
{
	char report[8192];
	const char *secret, *link, *cfg;

	secret = write_file(
		"shadow",
		"root:$y$j9T$SECRETSALT$SECRETHASH:20228:0:99999:7:::\n"
		"daemon:*:20228:0:99999:7:::\n",
		0640);
	link = in_dir("ov-link.yaml");
	unlink(link);
	CHECK(symlink(secret, link) == 0);
	cfg = config_with_overrides(link);
	CHECK(check(cfg, report, sizeof(report)) == 2);
	CHECK(strstr(report, "SECRET") == NULL);
	CHECK(strstr(report, "root") == NULL);
	CHECK(strstr(report, "ov-link.yaml:1: ") != NULL);
	CHECK(strstr(report, "details withheld") != NULL);
	/* the config itself swapped so */
	unlink(in_dir("config.yaml"));
	CHECK(symlink(secret, in_dir("config.yaml")) == 0);
	CHECK(check(in_dir("config.yaml"), report, sizeof(report)) == 2);
	CHECK(strstr(report, "SECRET") == NULL);
	unlink(in_dir("config.yaml"));
	unlink(link);
}

/* A file we may quote still gets a short, printable excerpt: an override
 * key of 200 bytes with a terminal escape in it. */
static void test_excerpts_are_short_and_printable(void)
{
	char report[8192], text[1024];
	const char *ov;

	snprintf(text, sizeof(text), "\"key\\e[31m%0200d\": 1\n", 7);
	ov = write_file("long.yaml", text, 0644);
	CHECK(check(config_with_overrides(ov), report, sizeof(report)) == 1);
	CHECK(strstr(report, "overrides.\"key?[31m000") != NULL);
	CHECK(strchr(report, '\033') == NULL);
	CHECK(strstr(report,
		     "00000000000000000000000000000000000000000000000000"
		     "0000000000") == NULL);
	CHECK(strstr(report, "000...\"") != NULL);
}

static void test_empty_overrides_file_gets_the_right_message(void)
{
	char report[4096];
	const char *ov = write_file("empty.yaml", "", 0644);

	CHECK(check(config_with_overrides(ov), report, sizeof(report)) == 1);
	CHECK(strstr(report, "the file is empty; expected a mapping of "
			     "override keys to limits") != NULL);
	CHECK(strstr(report, "rules:") == NULL);
	ov = write_file("none.yaml", "{}\n", 0644);
	CHECK(check(config_with_overrides(ov), report, sizeof(report)) == 0);
}

/* The overrides file is read by the same YAML layer: an alias bomb in
 * it is refused at its line, and its count of errors is one. */
static void test_alias_bomb_in_overrides_is_refused(void)
{
	char text[2048], report[4096];
	const char *ov;
	size_t n;
	int k;

	n = (size_t)snprintf(text, sizeof(text), "a0: &a0 [x, x, x]\n");
	for (k = 1; k < 10; k++)
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      "a%d: &a%d [*a%d, *a%d, *a%d]\n", k, k,
				      k - 1, k - 1, k - 1);
	CHECK(n < sizeof(text));
	ov = write_file("bomb.yaml", text, 0644);
	CHECK(check(config_with_overrides(ov), report, sizeof(report)) == 1);
	CHECK(strstr(report, "bomb.yaml:10: aliases stand for more than "
			     "100000 nodes") != NULL);
}

/* 100,000 overrides in the documented form ("customer-42": [{capacity:
 * 2000, rate: 50/s}]), 4.8 MB, load. */
static void test_hundred_thousand_overrides_fit(void)
{
	const char *ov = in_dir("many.yaml");
	char err[1024];
	sluice_config_t *c;
	struct stat st;
	FILE *f;
	int i;

	f = fopen(ov, "w");
	CHECK(f != NULL);
	for (i = 0; i < 100000; i++)
		fprintf(f,
			"\"customer-%06d\": [{capacity: 2000, rate: 50/s}]\n",
			i);
	fclose(f);
	CHECK(stat(ov, &st) == 0 && st.st_size > 4 * 1024 * 1024);
	c = sluice_config_load(config_with_overrides(ov), err, sizeof(err));
	if (!c)
		fprintf(stderr, "%s\n", err);
	CHECK(c != NULL);
	CHECK(c && c->nrules == 1 && c->rules[0].overrides &&
	      c->rules[0].overrides->n == 100000);
	sluice_config_free(c);
	unlink(ov);
}

static void test_token_file_newline_is_not_part_of_the_token(void)
{
	char text[512], err[1024], report[4096];
	sluice_config_t *c;
	const char *tok, *cfg;

	tok = write_file("token", "0123456789abcdef0123\r\n \n", 0600);
	snprintf(text, sizeof(text), "admin: {token_file: %s}\n", tok);
	cfg = write_file("c.yaml", text, 0600);
	c = sluice_config_load(cfg, err, sizeof(err));
	CHECK(c != NULL);
	CHECK(c && strcmp(c->admin_token, "0123456789abcdef0123") == 0);
	sluice_config_free(c);
	write_file("token", " \n\n", 0600);
	CHECK(check(cfg, report, sizeof(report)) == 1);
	CHECK(strstr(report, "holds no token") != NULL);
}

/* store.shared.group is read (the store resolves it when it opens). */
static void test_shared_store_group_is_read(void)
{
	char err[1024];
	const char *text =
		"store: {shared: {path: /dev/shm/x, group: sluice}}\n";
	sluice_config_t *c = sluice_config_parse("t.yaml", text, strlen(text),
						 err, sizeof(err));

	CHECK(c != NULL);
	CHECK(c && c->store.shm_group &&
	      strcmp(c->store.shm_group, "sluice") == 0);
	sluice_config_free(c);
	text = "store: {shared: {path: /dev/shm/x, group: \"\"}}\n";
	c = sluice_config_parse("t.yaml", text, strlen(text), err, sizeof(err));
	CHECK(c == NULL && strstr(err, "t.yaml:1: store.shared.group") != NULL);
}

static void cleanup(void)
{
	const char *names[] = {"config.yaml", "c.yaml",	    "c2.yaml",
			       "ov.yaml",     "token",	    "shadow",
			       "long.yaml",   "empty.yaml", "none.yaml",
			       "many.yaml",   "fifo",	    "ov-link.yaml"};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		unlink(in_dir(names[i]));
	rmdir(dir);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("skipped: needs root (chowns files to nobody)\n");
		return 0;
	}
	CHECK(mkdtemp(dir) != NULL);
	RUN(test_fifo_is_refused_without_waiting);
	RUN(test_file_of_another_user_is_refused_naming_the_owner);
	RUN(test_link_to_a_secret_file_is_not_quoted);
	RUN(test_excerpts_are_short_and_printable);
	RUN(test_empty_overrides_file_gets_the_right_message);
	RUN(test_alias_bomb_in_overrides_is_refused);
	RUN(test_hundred_thousand_overrides_fit);
	RUN(test_token_file_newline_is_not_part_of_the_token);
	RUN(test_shared_store_group_is_read);
	cleanup();
	TESTS_DONE();
}
