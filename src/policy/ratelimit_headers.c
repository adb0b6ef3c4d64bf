/*
 * ratelimit_headers.c -- formatting of the rate-limit header fields and 429
 * body.
 */
#include "policy/ratelimit_headers.h"
#include "util/num.h"

#include <string.h>

uint64_t sluice_us_to_s_ceil(uint64_t us)
{
	return sluice_div_ceil(us, 1000000);
}

uint64_t sluice_us_to_ms_ceil(uint64_t us)
{
	return sluice_div_ceil(us, 1000);
}

uint64_t sluice_quota_window_s(const sluice_limit_t *limit,
			       uint64_t reset_after_us, int64_t now_us)
{
	int64_t start = 0, end, t = now_us;

	if (reset_after_us && reset_after_us < (uint64_t)INT64_MAX / 2)
		t = now_us + (int64_t)reset_after_us;
	if (t == now_us) {
		end = sluice_quota_window(limit, 0, now_us, &start);
	} else if (limit->window.align == SLUICE_ALIGN_FIRST_USE) {
		/* The window ends at a whole second: the nearest. */
		int64_t e = (t + 500000) / 1000000 * 1000000;

		end = sluice_quota_window(limit, sluice_quota_state(e, 1),
					  e - 1, &start);
	} else {
		/* The decision's window ends about t (the store's clock
		 * decided: Redis's may be seconds off ours, and the answer
		 * is written a moment after): the calendar boundary nearest
		 * to t is its end. */
		end = sluice_quota_calendar(limit, t, &start);
		if (t - start < end - t) {
			end = start;
			sluice_quota_calendar(limit, start - 1, &start);
		}
	}
	return end > start ? sluice_us_to_s_ceil((uint64_t)(end - start)) : 0;
}

uint64_t sluice_limit_window_s(const sluice_limit_t *limit)
{
	uint32_t per = limit->rate.per ? limit->rate.per : 1;
	uint64_t us;

	if (sluice_limit_is_quota(limit))
		return sluice_quota_window_s(limit, 0, sluice_now_us());
	us = sluice_div_ceil(limit->tau, per);
	return sluice_us_to_s_ceil(us);
}

uint64_t sluice_retry_us(const sluice_limit_t *limit,
			 const sluice_decision_t *d)
{
	if (d->never || d->retry_after_us == UINT64_MAX)
		return sluice_limit_window_s(limit) * 1000000;
	return d->retry_after_us;
}

uint64_t sluice_retry_after_s(uint64_t retry_us)
{
	uint64_t s = sluice_us_to_s_ceil(retry_us);

	return s ? s : 1;
}

void sluice_sf_string(sluice_buf_t *out, const char *name)
{
	const char *p, *run = name;

	sluice_buf_append(out, "\"", 1);
	for (p = name; *p; p++) {
		unsigned char c = (unsigned char)*p;

		if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\')
			continue;
		/* Flush the plain run, then escape or drop this byte (an
		 * sf-string is printable ASCII only). */
		sluice_buf_append(out, run, (size_t)(p - run));
		run = p + 1;
		if (c == '"' || c == '\\') {
			char esc[2] = {'\\', (char)c};

			sluice_buf_append(out, esc, 2);
		}
	}
	sluice_buf_append(out, run, (size_t)(p - run));
	sluice_buf_append(out, "\"", 1);
}

static void header_u64(sluice_buf_t *out, const char *name, uint64_t v)
{
	sluice_buf_puts(out, name);
	sluice_buf_u64(out, v);
	sluice_buf_append(out, "\r\n", 2);
}

/* One RateLimit-Policy item: "name";q=CAPACITY;w=SECONDS, with ".N" after
 * the name for a limit other than the reported one (N: its position in
 * the rule, from 1), so each item has its own name. */
static void policy_item(sluice_buf_t *out, const char *name,
			const sluice_limit_t *limit, size_t pos,
			const sluice_decision_t *d)
{
	char named[300];

	if (pos) {
		size_t n = strlen(name);

		if (n > sizeof(named) - 24)
			n = sizeof(named) - 24;
		memcpy(named, name, n);
		named[n++] = '.';
		n += sluice_u64_dec(named + n, pos);
		named[n] = '\0';
		name = named;
	}
	sluice_sf_string(out, name);
	sluice_buf_puts(out, ";q=");
	sluice_buf_u64(out, limit->capacity);
	sluice_buf_puts(out, ";w=");
	sluice_buf_u64(out,
		       d && sluice_limit_is_quota(limit)
			       ? sluice_quota_window_s(limit, d->reset_after_us,
						       sluice_now_us())
			       : sluice_limit_window_s(limit));
}

void sluice_ratelimit_headers_set(sluice_buf_t *out, const char *name,
				  const sluice_limit_t *limits, size_t n,
				  size_t which, const sluice_decision_t *d,
				  int limited)
{
	const sluice_limit_t *limit = &limits[which];
	uint64_t reset_s = sluice_us_to_s_ceil(d->reset_after_us);
	size_t i;

	header_u64(out, "X-RateLimit-Limit: ", d->limit);
	header_u64(out, "X-RateLimit-Remaining: ", d->remaining);
	header_u64(out, "X-RateLimit-Reset: ", reset_s);

	/* draft-11: a List, one item per limit of the rule; the reported
	 * limit first, under the name RateLimit refers to. */
	sluice_buf_puts(out, "RateLimit-Policy: ");
	policy_item(out, name, limit, 0, d);
	for (i = 0; i < n; i++)
		if (i != which) {
			sluice_buf_puts(out, ", ");
			policy_item(out, name, &limits[i], i + 1, NULL);
		}
	sluice_buf_append(out, "\r\n", 2);

	sluice_buf_puts(out, "RateLimit: ");
	sluice_sf_string(out, name);
	sluice_buf_puts(out, ";r=");
	sluice_buf_u64(out, d->remaining);
	sluice_buf_puts(out, ";t=");
	sluice_buf_u64(out, reset_s);
	sluice_buf_append(out, "\r\n", 2);

	if (limited) {
		uint64_t retry_us = sluice_retry_us(limit, d);

		header_u64(out,
			   "Retry-After: ", sluice_retry_after_s(retry_us));
		header_u64(out, "X-RateLimit-Retry-After-Ms: ",
			   sluice_us_to_ms_ceil(retry_us));
	}
}

void sluice_ratelimit_headers(sluice_buf_t *out, const char *name,
			      const sluice_limit_t *limit,
			      const sluice_decision_t *d, int limited)
{
	sluice_ratelimit_headers_set(out, name, limit, 1, 0, d, limited);
}

void sluice_limited_body(sluice_buf_t *out, const char *name, uint64_t retry_us)
{
	sluice_buf_puts(out, "{\"error\":\"rate_limited\",\"retry_after_ms\":");
	sluice_buf_u64(out, sluice_us_to_ms_ceil(retry_us));
	sluice_buf_puts(out, ",\"policy\":\"");
	sluice_buf_json_str(out, name, strlen(name));
	sluice_buf_puts(out, "\"}");
}
