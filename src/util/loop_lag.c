/*
 * loop_lag.c -- the event loop's own lag (loop_lag.h).
 *
 * The timer is one-shot, re-armed at each firing, and each firing knows
 * the instant libuv considers it due: the loop's time when it was armed
 * (uv_now(), the start of that turn) plus the interval.  The firing reads
 * the monotonic clock itself (uv_hrtime(), the clock uv_now() is taken
 * from) rather than uv_now(), which is the start of the turn it runs in
 * and would hide what the callbacks before it took.
 */
#include "util/loop_lag.h"
#include "util/invariant.h"

static void on_fire(uv_timer_t *t);

static void arm(sluice_loop_lag_t *m)
{
	m->due_ns = (uv_now(m->timer.loop) + m->interval_ms) * 1000000ull;
	uv_timer_start(&m->timer, on_fire, m->interval_ms, 0);
}

static void on_fire(uv_timer_t *t)
{
	sluice_loop_lag_t *m = t->data;
	uint64_t now = uv_hrtime();
	uint64_t lag = now > m->due_ns ? now - m->due_ns : 0;

	if (lag > m->max_ns)
		m->max_ns = lag;
	m->samples++;
	if (m->cb)
		m->cb(m->arg, lag);
	arm(m);
}

int sluice_loop_lag_start(sluice_loop_lag_t *m, uv_loop_t *loop,
			  unsigned interval_ms, sluice_loop_lag_cb cb,
			  void *arg)
{
	int rc;

	SLUICE_ASSERT(interval_ms >= 1);
	m->interval_ms = interval_ms;
	m->max_ns = m->samples = 0;
	m->cb = cb;
	m->arg = arg;
	if ((rc = uv_timer_init(loop, &m->timer)) < 0)
		return rc;
	m->timer.data = m;
	uv_unref((uv_handle_t *)&m->timer);
	/* A loop not run for a while holds an old time: the first firing
	 * would be due in the past and read as late by all of it. */
	uv_update_time(loop);
	arm(m);
	return 0;
}

uint64_t sluice_loop_lag_max(const sluice_loop_lag_t *m)
{
	uint64_t now = uv_hrtime();

	/* Due and not run yet: late by that much already. */
	if (uv_is_active((const uv_handle_t *)&m->timer) && now > m->due_ns &&
	    now - m->due_ns > m->max_ns)
		return now - m->due_ns;
	return m->max_ns;
}

void sluice_loop_lag_close(sluice_loop_lag_t *m, uv_close_cb on_closed)
{
	if (!uv_is_closing((uv_handle_t *)&m->timer))
		uv_close((uv_handle_t *)&m->timer, on_closed);
}
