/*
 * loop_lag.h -- how late an event loop runs what is due: a timer that
 * repeats every interval and compares when it fires with when it was due.
 *
 * The lag is what every callback of the loop waits beyond its own time:
 * the other callbacks of the same turn, and the time the thread was not
 * given a CPU.  A store timeout answered 300 ms after its deadline with a
 * lag of 250 ms is a busy host (or a long turn), not a slow store; the
 * same wait with no lag is the store's client being late.  `sluice serve`
 * exposes it per loop thread as sluice_event_loop_lag_seconds; the tests
 * bound their waits with it.
 */
#ifndef SLUICE_UTIL_LOOP_LAG_H
#define SLUICE_UTIL_LOOP_LAG_H

#include <stdint.h>
#include <uv.h>

/* Told of each measurement (on the loop's thread): lag_ns is how long
 * after its due time the timer ran (0 when on time). */
typedef void (*sluice_loop_lag_cb)(void *arg, uint64_t lag_ns);

typedef struct sluice_loop_lag_s {
	uv_timer_t timer;     /* data: the meter */
	unsigned interval_ms; /* between two measurements */
	uint64_t due_ns;      /* when libuv holds the next firing due, on
				 uv_hrtime()'s clock */
	uint64_t max_ns;      /* the largest lag measured so far */
	uint64_t samples;     /* measurements so far */
	sluice_loop_lag_cb cb;
	void *arg;
} sluice_loop_lag_t;

/* Starts measuring on loop every interval_ms (>= 1); cb may be NULL.  The
 * timer is unreferenced: it never keeps the loop alive by itself.  0, or
 * a negative libuv error. */
int sluice_loop_lag_start(sluice_loop_lag_t *m, uv_loop_t *loop,
			  unsigned interval_ms, sluice_loop_lag_cb cb,
			  void *arg);
/* The largest lag so far, in ns, counting a firing that is due and has
 * not run yet (the loop is late with it right now). */
uint64_t sluice_loop_lag_max(const sluice_loop_lag_t *m);
/* Stops and closes the timer; on_closed (may be NULL) as uv_close's. */
void sluice_loop_lag_close(sluice_loop_lag_t *m, uv_close_cb on_closed);

#endif /* SLUICE_UTIL_LOOP_LAG_H */
