/*
 * test_reserve.c -- reservations (sluice_reserve_all()) and
 * sluice_set_remaining(), pure: turns exactly one refill apart whenever
 * they come, a refused reservation charges nothing, never a turn before a
 * take would pass, several limits charged at the common turn, the wait
 * cap, and set as the tokens a take then finds; the conditional refund
 * (sluice_refund_if()) and the states' text.
 */
#include "check.h"
#include "sluice.h"
#include "stores.h"

#include <string.h>

#define T0 INT64_C(1700000000000000)

/* Reservations arriving at random moments: each turn is exactly one
 * refill after the one before while both waited (the queue lasts) (here: 3/s, a
 * third of a microsecond per token, turns rounded up to a whole us), and a take
 * at the turn's instant (without the reservation) would have passed, one
 * microsecond before it not. */
static void test_turns_one_refill_apart_at_any_arrival(void)
{
	sluice_limit_t l = lim(2, "3/s");
	sluice_state_t s = 0, next, probe;
	sluice_decision_t d, td;
	uint64_t seed = 7, wait, prev_wait = 0;
	int64_t now = T0, prev_turn = 0;
	int i, queued = 0;

	for (i = 0; i < 2000; i++) {
		int64_t turn;

		now += (int64_t)(test_rand(&seed) % 600000);
		CHECK(sluice_reserve_all(&l, &s, 1, now, 1, 1000000000, &next,
					 &d, &wait) == 1);
		turn = now + (int64_t)wait;
		/* A take on the old state passes at the turn, not before. */
		sluice_eval(&l, s, turn, 1, &probe, &td);
		CHECK(td.allowed);
		if (wait > 0) {
			sluice_eval(&l, s, turn - 1, 1, &probe, &td);
			CHECK(!td.allowed);
		}
		if (wait > 0 && prev_wait > 0) {
			/* Both queued: one refill (333333.3 us) apart. */
			CHECK(turn - prev_turn == 333333 ||
			      turn - prev_turn == 333334);
			queued++;
		}
		CHECK(d.allowed && d.retry_after_us == wait);
		s = next;
		prev_turn = turn;
		prev_wait = wait;
	}
	CHECK(queued > 100);
}

/* Refused past max_wait: nothing charged, and retry_after says when the
 * same max_wait would pass; a cost beyond the capacity never. */
static void test_refused_charges_nothing(void)
{
	sluice_limit_t l = lim(1, "1/s");
	sluice_state_t s = 0, next;
	sluice_decision_t d;
	uint64_t wait;

	CHECK(sluice_reserve_all(&l, &s, 1, T0, 1, 0, &next, &d, &wait) == 1);
	s = next;
	CHECK(sluice_reserve_all(&l, &s, 1, T0, 1, 999999, &next, &d, &wait) ==
	      0);
	CHECK(next == s && !d.allowed);
	CHECK_EQ_U64(wait, 1000000);
	CHECK_EQ_U64(d.retry_after_us, 1);
	CHECK(sluice_reserve_all(&l, &s, 1, T0, 1, 1000000, &next, &d, &wait) ==
	      1);
	CHECK_EQ_U64(wait, 1000000);
	CHECK(sluice_reserve_all(&l, &s, 1, T0, 2, UINT64_MAX, &next, &d,
				 &wait) == 0);
	CHECK(d.never && wait == UINT64_MAX && d.retry_after_us == UINT64_MAX);
	/* A max_wait beyond the cap is the cap: a debt past it refused. */
	l = lim(1, "1/day");
	s = 0;
	CHECK(sluice_reserve_all(&l, &s, 1, T0, 1, UINT64_MAX, &next, &d,
				 &wait) == 1);
	s = next;
	while (sluice_reserve_all(&l, &s, 1, T0, 1, UINT64_MAX, &next, &d,
				  &wait) == 1)
		s = next;
	CHECK(wait > SLUICE_WAIT_MAX_US &&
	      wait <= SLUICE_WAIT_MAX_US + 86400000000ULL);
}

/* Several limits: the latest turn wins, and every limit is charged at
 * that turn -- a later reservation on the other limit alone is not given
 * a turn before the request actually runs. */
static void test_several_limits_charged_at_the_turn(void)
{
	sluice_limit_t ls[2] = {lim(10, "10/s"), lim(1, "1/s")};
	sluice_state_t s[2] = {0, 0}, next[2], one;
	sluice_decision_t d;
	uint64_t wait;

	CHECK(sluice_reserve_all(ls, s, 2, T0, 1, 5000000, next, &d, &wait));
	CHECK(wait == 0);
	s[0] = next[0];
	s[1] = next[1];
	CHECK(sluice_reserve_all(ls, s, 2, T0, 1, 5000000, next, &d, &wait));
	CHECK_EQ_U64(wait, 1000000);
	CHECK(d.which == 1);
	/* The 10/s bucket counts the request at T0 + 1 s: ten more
	 * reservations of it alone find it full then less that one, so the
	 * tenth comes at 1.1 s (charged at T0 instead, the bucket would have
	 * given the tenth a turn at 0.2 s, before the request ran). */
	one = next[0];
	{
		int i;

		for (i = 0; i < 10; i++) {
			sluice_state_t n1;

			CHECK(sluice_reserve_all(&ls[0], &one, 1, T0, 1,
						 5000000, &n1, &d, &wait));
			one = n1;
		}
	}
	CHECK_EQ_U64(wait, 1100000);
	/* Cost 0 charges nothing and waits until no bucket is in debt. */
	CHECK(sluice_reserve_all(ls, next, 2, T0, 0, 5000000, s, &d, &wait));
	CHECK(s[0] == next[0] && s[1] == next[1]);
}

/* set: a take then finds exactly that many tokens. */
static void test_set_remaining_is_what_a_take_finds(void)
{
	sluice_limit_t l = lim(5, "5/min");
	sluice_state_t s, next;
	sluice_decision_t d;
	uint64_t r;

	for (r = 0; r <= 5; r++) {
		s = sluice_set_remaining(&l, T0, r);
		sluice_eval(&l, s, T0, 0, &next, &d);
		CHECK_EQ_U64(d.remaining, r);
	}
	CHECK(sluice_set_remaining(&l, T0, 5) == 0);
	CHECK(sluice_set_remaining(&l, T0, UINT64_MAX) == 0);
}

/* A reservation nobody followed is undone exactly (the bucket as before
 * it); one that was followed is not refunded at all, and the state is
 * left as it was. */
static void test_refund_if_only_while_nothing_followed(void)
{
	sluice_limit_t l = lim(1, "1/s");
	sluice_state_t s0 = 0, a, b, next;
	sluice_decision_t d;
	uint64_t wait;

	CHECK(sluice_reserve_all(&l, &s0, 1, T0, 1, 10000000, &a, &d, &wait));
	CHECK(sluice_reserve_all(&l, &a, 1, T0, 1, 10000000, &b, &d, &wait));
	CHECK_EQ_U64(wait, 1000000);
	/* a was followed by b: nothing back, the state untouched. */
	CHECK(sluice_refund_if(&l, &b, &a, 1, T0 + 10, 1, &next) == 0);
	CHECK(next == b);
	/* b is last: back to exactly what a left. */
	CHECK(sluice_refund_if(&l, &b, &b, 1, T0 + 10, 1, &next) == 1);
	CHECK(next == a);
	/* An expected 0 (no reservation's) and no limits match nothing. */
	CHECK(sluice_refund_if(&l, &s0, &s0, 1, T0, 1, &next) == 0);
	CHECK(sluice_refund_if(&l, &b, &b, 0, T0, 1, &next) == 0);
}

/* Two limits: refunded only when both still hold their states. */
static void test_refund_if_needs_every_limit(void)
{
	sluice_limit_t ls[2] = {lim(1, "1/s"), lim(5, "5/s")};
	sluice_state_t s[2] = {0, 0}, left[2], moved[2], next[2];
	sluice_decision_t d;
	uint64_t wait;

	CHECK(sluice_reserve_all(ls, s, 2, T0, 1, 0, left, &d, &wait));
	moved[0] = left[0];
	moved[1] = sluice_penalize(&ls[1], left[1], T0, 1);
	CHECK(sluice_refund_if(ls, moved, left, 2, T0, 1, next) == 0);
	CHECK(next[0] == moved[0] && next[1] == moved[1]);
	CHECK(sluice_refund_if(ls, left, left, 2, T0, 1, next) == 1);
	CHECK(next[0] == 0 && next[1] == 0); /* full again */
}

/* A calendar quota reserved beside a bucket: the same rule, on its own
 * state (the window's count). */
static void test_refund_if_on_a_quota(void)
{
	sluice_limit_t ls[2] = {lim(10, "1/s")};
	sluice_state_t s[2] = {0, 0}, a[2], b[2], next[2];
	sluice_decision_t d;
	uint64_t wait;
	char err[160];

	CHECK(sluice_quota_init(&ls[1], 5, SLUICE_PER_DAY,
				SLUICE_ALIGN_CALENDAR, 0, err,
				sizeof(err)) == 0);
	CHECK(sluice_reserve_all(ls, s, 2, T0, 1, 0, a, &d, &wait));
	CHECK(sluice_reserve_all(ls, a, 2, T0, 1, 0, b, &d, &wait));
	CHECK(sluice_refund_if(ls, b, a, 2, T0, 1, next) == 0);
	CHECK(sluice_refund_if(ls, b, b, 2, T0, 1, next) == 1);
	/* The quota's count is back to one: what a left. */
	CHECK(next[1] == a[1]);
}

/* The states as text: decimal joined by '.', read back exactly; anything
 * else refused. */
static void test_states_text(void)
{
	sluice_state_t in[3] = {INT64_C(1733451234567890123), 0, INT64_MAX};
	sluice_state_t out[3];
	char text[SLUICE_STATES_TEXT_MAX], small[8];
	static const char *const bad[] = {
		"",
		".",
		"1.",
		".1",
		"1..2",
		"+1",
		" 1",
		"1 ",
		"-1",
		"1.2.3",
		"a",
		"1e3",
		"9223372036854775808",
		"00000000000000000001",
	};
	size_t i, len = sluice_states_format(in, 3, text, sizeof(text));

	CHECK(strcmp(text, "1733451234567890123.0.9223372036854775807") == 0);
	CHECK(len == strlen(text));
	CHECK(sluice_states_parse(text, len, 3, out) == 0);
	CHECK(out[0] == in[0] && out[1] == in[1] && out[2] == in[2]);
	/* The count is the caller's: two states are not three. */
	CHECK(sluice_states_parse(text, len, 2, out) == SLUICE_EINVAL);
	CHECK(sluice_states_format(in, 3, small, sizeof(small)) == 0);
	CHECK(small[0] == '\0');
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(sluice_states_parse(bad[i], strlen(bad[i]), 1, out) ==
		      SLUICE_EINVAL);
	CHECK(sluice_states_parse("7", 1, 1, out) == 0 && out[0] == 7);
}

int main(void)
{
	RUN(test_turns_one_refill_apart_at_any_arrival);
	RUN(test_refused_charges_nothing);
	RUN(test_several_limits_charged_at_the_turn);
	RUN(test_set_remaining_is_what_a_take_finds);
	RUN(test_refund_if_only_while_nothing_followed);
	RUN(test_refund_if_needs_every_limit);
	RUN(test_refund_if_on_a_quota);
	RUN(test_states_text);
	TESTS_DONE();
}
