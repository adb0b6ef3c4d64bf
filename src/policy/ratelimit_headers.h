/*
 * ratelimit_headers.h -- the rate-limit answer in HTTP header fields.
 *
 * Two vocabularies, both on every answer that carries a decision:
 *
 *   X-RateLimit-Limit      the capacity of the limit reported
 *   X-RateLimit-Remaining  whole tokens left
 *   X-RateLimit-Reset      seconds until the bucket is full, rounded up
 *                          (a calendar quota: until its window ends)
 *
 *   RateLimit-Policy: "api";q=100;w=50   (draft-ietf-httpapi-ratelimit-
 *   RateLimit: "api";r=42;t=1             headers-11: quota, window = seconds
 *                                          to refill from empty, remaining,
 *                                          seconds until full)
 *
 * and, when the request is limited:
 *
 *   Retry-After                whole seconds, rounded up, at least 1
 *   X-RateLimit-Retry-After-Ms milliseconds, rounded up
 *
 * Everything here is pure formatting, unit-tested in tests/unit, but for
 * a calendar quota's window (w=), which is the window of the clock's now.
 */
#ifndef SLUICE_POLICY_RATELIMIT_HEADERS_H
#define SLUICE_POLICY_RATELIMIT_HEADERS_H

#include "sluice.h"
#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>

/* Microseconds to whole units, rounded up. */
uint64_t sluice_us_to_s_ceil(uint64_t us);
uint64_t sluice_us_to_ms_ceil(uint64_t us);

/* Seconds for `limit` to refill from empty, rounded up (the policy window);
 * for a calendar quota the length of its window a take now would count
 * in (a month: 28 to 31 days; a day: 23 to 25 hours in a zone with DST). */
uint64_t sluice_limit_window_s(const sluice_limit_t *limit);

/* A quota's window length in seconds: the window ending reset_after_us
 * after now_us (a decision's), or with 0 the one a take at now_us would
 * open. */
uint64_t sluice_quota_window_s(const sluice_limit_t *limit,
			       uint64_t reset_after_us, int64_t now_us);

/* The time the caller should wait after a rejection, in microseconds: the
 * decision's retry_after, or for a cost that can never pass the time to
 * refill from empty (there is no better answer to give). */
uint64_t sluice_retry_us(const sluice_limit_t *limit,
			 const sluice_decision_t *d);

/* Retry-After seconds: rounded up and never 0. */
uint64_t sluice_retry_after_s(uint64_t retry_us);

/*
 * Appends the header lines ("Name: value\r\n" each) describing decision d
 * of `limit` under the policy `name` (the rule name, or "rule/tier").
 * `limited` adds Retry-After and X-RateLimit-Retry-After-Ms.
 */
void sluice_ratelimit_headers(sluice_buf_t *out, const char *name,
			      const sluice_limit_t *limit,
			      const sluice_decision_t *d, int limited);

/*
 * The same for a rule with several limits: limits[which] is the one that
 * decided (d), reported as above; RateLimit-Policy lists every limit, the
 * reported one first as "name", each other one as "name.N" (N its
 * position in the rule, counted from 1).
 */
void sluice_ratelimit_headers_set(sluice_buf_t *out, const char *name,
				  const sluice_limit_t *limits, size_t n,
				  size_t which, const sluice_decision_t *d,
				  int limited);

/* Appends `name` as a Structured Field string ("..." with \ and " escaped,
 * non-printable bytes dropped). */
void sluice_sf_string(sluice_buf_t *out, const char *name);

/* The 429 body: {"error":"rate_limited","retry_after_ms":N,"policy":"name"} */
void sluice_limited_body(sluice_buf_t *out, const char *name,
			 uint64_t retry_us);

#endif /* SLUICE_POLICY_RATELIMIT_HEADERS_H */
