/*
 * test_config_grpc.c -- the `grpc:` section and --grpc-listen's address
 * forms: accepted forms are stored as written, everything else is refused
 * with FILE:LINE and what was expected.
 */
#include "check.h"
#include "policy/config/config.h"

#include <string.h>

static sluice_config_t *parse(const char *text, char *err, size_t errlen)
{
	return sluice_config_parse("g.yaml", text, strlen(text), err, errlen);
}

static void test_no_section_means_no_listener(void)
{
	char err[512];
	sluice_config_t *cfg =
		parse("listen: 127.0.0.1:9000\n", err, sizeof(err));

	CHECK(cfg);
	CHECK(cfg->grpc.listen == NULL);
	CHECK(cfg->grpc.max_message_bytes == 0);
	sluice_config_free(cfg);
}

static void test_every_address_form(void)
{
	static const char *const ok[] = {
		"127.0.0.1:8081",
		"[::1]:8081",
		"unix:/run/sluice/grpc.sock",
	};
	char err[512], text[256];
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		sluice_config_t *cfg;

		CHECK(sluice_grpc_listen_parse(ok[i], err, sizeof(err)) == 0);
		snprintf(text, sizeof(text),
			 "grpc: {listen: \"%s\", max_message_bytes: 2048}\n",
			 ok[i]);
		cfg = parse(text, err, sizeof(err));
		CHECK(cfg);
		CHECK(strcmp(cfg->grpc.listen, ok[i]) == 0);
		CHECK_EQ_U64(cfg->grpc.max_message_bytes, 2048);
		sluice_config_free(cfg);
	}
}

static void test_bad_addresses_are_refused(void)
{
	static const char *const bad[] = {
		"8081",
		"localhost:8081",
		"unix:relative.sock",
		"unix:",
		"unix:/"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		".sock",
	};
	char err[512], text[512];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(sluice_grpc_listen_parse(bad[i], err, sizeof(err)) < 0);
		snprintf(text, sizeof(text),
			 "threads: 1\ngrpc:\n  listen: \"%s\"\n", bad[i]);
		CHECK(parse(text, err, sizeof(err)) == NULL);
		CHECK(strstr(err, "g.yaml:3:"));
		CHECK(strstr(err, "grpc.listen"));
	}
}

static void test_bad_fields_are_refused(void)
{
	char err[512];

	CHECK(parse("grpc: {listen: 127.0.0.1:1, max_message_bytes: 10}\n", err,
		    sizeof(err)) == NULL);
	CHECK(strstr(err, "max_message_bytes"));
	CHECK(parse("grpc: {listen: 127.0.0.1:1, max_message_bytes: "
		    "99999999}\n",
		    err, sizeof(err)) == NULL);
	CHECK(parse("grpc: {lisen: 127.0.0.1:1}\n", err, sizeof(err)) == NULL);
	CHECK(strstr(err, "lisen"));
	CHECK(parse("grpc: 127.0.0.1:1\n", err, sizeof(err)) == NULL);
}

/* grpc.max_message_bytes as the front end reads it: the default lives in
 * the config code (64 KiB), a value set is taken as it is. */
static void test_max_message_default_and_set(void)
{
	char err[512];
	sluice_config_t *d =
		parse("listen: 127.0.0.1:9000\n", err, sizeof(err));
	sluice_config_t *set =
		parse("grpc: {max_message_bytes: 2048}\n", err, sizeof(err));

	CHECK(d && set);
	CHECK(sluice_config_grpc_max_message(d) == 65536);
	CHECK(sluice_config_grpc_max_message(set) == 2048);
	sluice_config_free(d);
	sluice_config_free(set);
}

int main(void)
{
	RUN(test_no_section_means_no_listener);
	RUN(test_every_address_form);
	RUN(test_bad_addresses_are_refused);
	RUN(test_bad_fields_are_refused);
	RUN(test_max_message_default_and_set);
	TESTS_DONE();
}
