/*
 * test_metrics_redis.c -- the per-node Redis series, fed with reports as
 * a client sends them (no server needed).
 */
#include "check.h"
#include "serve/metrics_redis.h"

#include <string.h>

static void report(sluice_redis_metrics_t *m, sluice_redis_report_t what,
		   const char *node, size_t index, int up,
		   sluice_redis_error_t error, const char *last_error)
{
	sluice_redis_node_report_t rep;

	memset(&rep, 0, sizeof(rep));
	rep.what = what;
	rep.node = node;
	rep.index = index;
	rep.up = up;
	rep.connections = up ? 1 : 0;
	rep.error = error;
	rep.last_error = last_error;
	sluice_redis_metrics_report(m, &rep);
}

static char *render(void)
{
	static char text[65536];
	sluice_buf_t b = {0};

	sluice_redis_metrics_render(&b);
	CHECK(!b.oom && b.len < sizeof(text));
	memcpy(text, b.data, b.len);
	text[b.len] = '\0';
	sluice_buf_free(&b);
	return text;
}

/* Every error kind has its own label value; none prints as "(null)". */
static void test_every_error_kind_is_named(void)
{
	sluice_redis_metrics_t *m = sluice_redis_metrics_new();
	const char *text;

	CHECK(m != NULL);
	report(m, SLUICE_REDIS_REPORT_ERROR, "10.0.0.1:6380", 0, 0,
	       SLUICE_REDIS_ERR_TLS, NULL);
	report(m, SLUICE_REDIS_REPORT_ERROR, "10.0.0.1:6380", 0, 0,
	       SLUICE_REDIS_ERR_NO_MASTER, NULL);
	report(m, SLUICE_REDIS_REPORT_ERROR, "10.0.0.1:6380", 0, 0,
	       SLUICE_REDIS_ERR_NO_MASTER, NULL);
	text = render();
	CHECK(strstr(text, "sluice_redis_errors_total{node=\"10.0.0.1:6380\","
			   "kind=\"tls\"} 1\n") != NULL);
	CHECK(strstr(text, "sluice_redis_errors_total{node=\"10.0.0.1:6380\","
			   "kind=\"no_master\"} 2\n") != NULL);
	CHECK(strstr(text, "kind=\"timeout\"} 0\n") != NULL);
	CHECK(strstr(text, "(null)") == NULL);
	CHECK(strstr(text, "kind=\"\"") == NULL);
	sluice_redis_metrics_retire(m);
}

int main(void)
{
	RUN(test_every_error_kind_is_named);
	TESTS_DONE();
}
