/*
 * calendar.h -- the windows of calendar quotas (calendar.c) and the quota
 * arithmetic every verb runs (quota.c), for decide.h and the other files
 * of the core.  Times here are whole seconds since the epoch unless a name
 * says _us.
 */
#ifndef SLUICE_CORE_CALENDAR_H
#define SLUICE_CORE_CALENDAR_H

#include "core/zone.h"
#include "sluice.h"

/* The calendar window of unit `per` (SLUICE_PER_*) in zone z (NULL: UTC)
 * holding instant t: returns its end, writes its start. */
int64_t sluice_calendar_window(const sluice_zone_t *z, uint8_t per, int64_t t,
			       int64_t *start);

/* The end of a first-use window opening at `start` (UTC: one unit on; a
 * month or a year from a day the target lacks ends on its last day). */
int64_t sluice_first_use_end(uint8_t per, int64_t start);

/* The start of a first-use window ending at `end`, one unit back (a month
 * back from the 28th is the 28th: where the window opened on the 29th to
 * 31st is not kept in the state). */
int64_t sluice_first_use_start(uint8_t per, int64_t end);

/* quota.c: a valid quota (sluice_limit_valid() for window.per != 0). */
int sluice_quota_valid(const sluice_limit_t *l);

/* The count of the window W a take at now_us counts in (the state's live
 * window, else the one holding now_us), W's end in *end_us. */
uint64_t sluice_quota_live(const sluice_limit_t *l, sluice_state_t state,
			   int64_t now_us, int64_t *end_us);

/* The verbs of sluice.h on a quota (sluice_quota.h says what each does);
 * now_us is clamped as sluice_eval() clamps it. */
void sluice_quota_eval(const sluice_limit_t *l, sluice_state_t state,
		       int64_t now_us, uint64_t cost, sluice_state_t *next,
		       sluice_decision_t *d);
sluice_state_t sluice_quota_refund(const sluice_limit_t *l,
				   sluice_state_t state, int64_t now_us,
				   uint64_t cost);
sluice_state_t sluice_quota_penalize(const sluice_limit_t *l,
				     sluice_state_t state, int64_t now_us,
				     uint64_t cost);
sluice_state_t sluice_quota_block(const sluice_limit_t *l, sluice_state_t state,
				  int64_t now_us, uint64_t ms);
sluice_state_t sluice_quota_set(const sluice_limit_t *l, int64_t now_us,
				sluice_state_t state, uint64_t remaining);

#endif
