/*
 * test_metrics_redis.c -- the per-node Redis series and the /readyz node
 * list, fed with reports as a client sends them (no server needed).
 */
#include "check.h"
#include "store/store_redis_metrics.h"

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

static char *unready(void)
{
	static char text[4096];
	sluice_buf_t b = {0};

	sluice_redis_metrics_unready(&b);
	CHECK(!b.oom && b.len < sizeof(text));
	if (b.len)
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
	/* The server's refusals have kinds of their own. */
	report(m, SLUICE_REDIS_REPORT_CALL, "10.0.0.1:6380", 0, 0,
	       SLUICE_REDIS_ERR_REFUSED, NULL);
	report(m, SLUICE_REDIS_REPORT_CALL, "10.0.0.1:6380", 0, 0,
	       SLUICE_REDIS_ERR_NOPERM, NULL);
	report(m, SLUICE_REDIS_REPORT_CALL, "10.0.0.1:6380", 0, 0,
	       SLUICE_REDIS_ERR_OOM, NULL);
	text = render();
	CHECK(strstr(text, "kind=\"refused\"} 1\n") != NULL);
	CHECK(strstr(text, "kind=\"noperm\"} 1\n") != NULL);
	CHECK(strstr(text, "kind=\"oom\"} 1\n") != NULL);
	/* So has a call refused because every connection was full. */
	report(m, SLUICE_REDIS_REPORT_CALL, "10.0.0.1:6380", 0, 0,
	       SLUICE_REDIS_ERR_SATURATED, NULL);
	CHECK(strstr(render(), "kind=\"saturated\"} 1\n") != NULL);
	{
		/* One series per kind, NONE aside. */
		const char *p = text;
		int n = 0;

		while ((p = strstr(p, "sluice_redis_errors_total{node=\"10.0."
				      "0.1:6380\",kind="))) {
			n++;
			p++;
		}
		CHECK(n == SLUICE_REDIS_ERRORS - 1);
	}
	sluice_redis_metrics_retire(m);
}

/* The eviction gauge: the worst verdict any running client reported. */
static void test_eviction_policy_gauge(void)
{
	sluice_redis_metrics_t *a = sluice_redis_metrics_new();
	sluice_redis_metrics_t *b = sluice_redis_metrics_new();
	sluice_redis_node_report_t rep;

	CHECK(a && b);
	memset(&rep, 0, sizeof(rep));
	rep.what = SLUICE_REDIS_REPORT_GAUGES;
	rep.node = "10.0.0.9:6379";
	rep.eviction_unsafe = 0;
	sluice_redis_metrics_report(a, &rep);
	CHECK(strstr(render(), "sluice_redis_eviction_policy_unsafe{node=\"10."
			       "0.0.9:6379\"} 0\n") != NULL);
	rep.eviction_unsafe = -1;
	sluice_redis_metrics_report(b, &rep);
	CHECK(strstr(render(), "sluice_redis_eviction_policy_unsafe{node=\"10."
			       "0.0.9:6379\"} -1\n") != NULL);
	rep.eviction_unsafe = 1;
	sluice_redis_metrics_report(b, &rep);
	CHECK(strstr(render(), "sluice_redis_eviction_policy_unsafe{node=\"10."
			       "0.0.9:6379\"} 1\n") != NULL);
	sluice_redis_metrics_retire(b);
	CHECK(strstr(render(), "sluice_redis_eviction_policy_unsafe{node=\"10."
			       "0.0.9:6379\"} 0\n") != NULL);
	sluice_redis_metrics_retire(a);
}

/* A node name (a Unix socket path may hold any byte) is escaped in every
 * series, the latency sum included. */
static void test_node_names_escaped_in_every_series(void)
{
	sluice_redis_metrics_t *m = sluice_redis_metrics_new();
	const char *text, *p;
	size_t lines = 0;

	CHECK(m != NULL);
	report(m, SLUICE_REDIS_REPORT_CALL, "/run/a\"b.sock", 0, 1,
	       SLUICE_REDIS_ERR_NONE, NULL);
	text = render();
	for (p = text; (p = strstr(p, "node=\"/run/a")); p++) {
		CHECK(strncmp(p, "node=\"/run/a\\\"b.sock\"", 20) == 0);
		lines++;
	}
	CHECK(strstr(text, "sluice_redis_call_duration_seconds_sum{node=\"/"
			   "run/a\\\"b.sock\"} ") != NULL);
	CHECK(lines > 3);
	sluice_redis_metrics_retire(m);
}

/* A node some client cannot use is listed with its last error (escaped
 * for JSON); the error's words never reach /metrics. */
static void test_unready_nodes_carry_their_last_error(void)
{
	sluice_redis_metrics_t *m = sluice_redis_metrics_new();
	const char *text;

	CHECK(m != NULL);
	report(m, SLUICE_REDIS_REPORT_GAUGES, "10.0.0.2:6380", 0, 0,
	       SLUICE_REDIS_ERR_NONE,
	       "certificate verify failed: \"self-signed\"\n");
	report(m, SLUICE_REDIS_REPORT_GAUGES, "10.0.0.3:6380", 1, 1,
	       SLUICE_REDIS_ERR_NONE, "");
	text = unready();
	CHECK(strstr(text, ",\"nodes\":[") == text);
	CHECK(strstr(text, "{\"node\":\"10.0.0.2:6380\",\"error\":\"\","
			   "\"last_error\":"
			   "\"certificate verify failed: \\\"self-signed\\\""
			   "\\u000a\"}") != NULL);
	CHECK(strstr(text, "10.0.0.3:6380") == NULL);
	CHECK(text[strlen(text) - 1] == ']');
	CHECK(strstr(render(), "certificate verify") == NULL);
	/* A later report without words keeps the last error; once the
	 * node answers it is no longer listed. */
	report(m, SLUICE_REDIS_REPORT_GAUGES, "10.0.0.2:6380", 0, 0,
	       SLUICE_REDIS_ERR_NONE, "");
	CHECK(strstr(unready(), "certificate verify failed") != NULL);
	report(m, SLUICE_REDIS_REPORT_GAUGES, "10.0.0.2:6380", 0, 1,
	       SLUICE_REDIS_ERR_NONE, NULL);
	CHECK(strstr(unready(), "10.0.0.2:6380") == NULL);
	/* A retired client's nodes are not listed. */
	report(m, SLUICE_REDIS_REPORT_GAUGES, "10.0.0.2:6380", 0, 0,
	       SLUICE_REDIS_ERR_NONE, NULL);
	CHECK(strstr(unready(), "10.0.0.2:6380") != NULL);
	/* The kind of its last failure comes with it. */
	report(m, SLUICE_REDIS_REPORT_CALL, "10.0.0.2:6380", 0, 0,
	       SLUICE_REDIS_ERR_NOPERM, NULL);
	CHECK(strstr(unready(), "\"error\":\"noperm\"") != NULL);
	sluice_redis_metrics_retire(m);
	CHECK(unready()[0] == '\0');
}

int main(void)
{
	RUN(test_every_error_kind_is_named);
	RUN(test_unready_nodes_carry_their_last_error);
	RUN(test_eviction_policy_gauge);
	RUN(test_node_names_escaped_in_every_series);
	TESTS_DONE();
}
