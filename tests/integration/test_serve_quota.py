#!/usr/bin/env python3
"""Calendar quotas through `sluice serve` (issue 31): a count per calendar
window that resets when the calendar says, on every store.

- The issue's Done-when: a {quota: 3, per: day} key refused at 23:59 UTC
  is allowed at 00:00 UTC with remaining 2; the answer says when the
  window ends (X-RateLimit-Reset, RateLimit t=, Retry-After, the JSON
  reset_ms) and how long it is (RateLimit-Policy w=: a day, a month of 31
  then 28 days).
- A zoned quota (Europe/Berlin) resets at Berlin's midnight, 23:00 UTC in
  winter, and not at UTC's.
- A reload lowering a quota keeps the count (the attacker stays limited);
  a bucket becoming a quota, and back, keeps what was used.
- Ad-hoc /v1/take quotas (UTC only: "tz" is refused), the admin verbs on
  quotas, and the ways around: another spelling of the unit, a cost above
  the quota, a quota mixed with capacity.

The server's clock is set with SLUICE_TEST_CLOCK_OFFSET_US to a few
seconds before a chosen midnight; every bound on time is read from the
server's own answers (its Reset), so a slow start on a busy machine only
moves the instants, never the outcome.
"""
import calendar
import json
import os
import shutil
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

TOKEN = "quota-admin-token-0123456789"
AUTH = {"Authorization": "Bearer " + TOKEN}

# 2027-01-31 is a Sunday, the last day of a 31-day month; February 2027
# has 28 days.  Europe/Berlin is UTC+1 then.
FEB1 = calendar.timegm((2027, 2, 1, 0, 0, 0))
DAY = 86400

RULES = """
store: %(store)s
admin: {token: "%(token)s"}
rules:
  - name: daily
    match: {path: /daily}
    key: ["header:x-user-id"]
    limits: [%(daily)s]
  - name: monthly
    match: {path: /monthly}
    key: ["header:x-user-id"]
    limits: [{quota: 3, per: month}]
  - name: berlin
    match: {path: /berlin}
    key: ["header:x-user-id"]
    limits: [{quota: 2, per: day, tz: Europe/Berlin}]
"""


def get(s, path, user):
    return s.request("GET", "/v1/check" + path, {"x-user-id": user})


def take(s, body):
    return s.request("POST", "/v1/take", {}, json.dumps(body))


def admin(s, verb, body):
    return s.request("POST", "/v1/" + verb, AUTH, json.dumps(body))


def reset_s(r):
    return int(r.header("x-ratelimit-reset"))


def policy_w(r):
    """w= of the first RateLimit-Policy item."""
    first = r.header("ratelimit-policy").split(",")[0]
    return int(first.split(";w=")[1].split(";")[0])


class Stores:
    """The stories, over the store self.store() names."""

    def serve(self, at=None, margin=0, daily="{quota: 3, per: day}"):
        """A server whose clock reads `at - margin` (epoch seconds) as it
        starts; None: the real clock."""
        # A Redis store decides on the Redis server's clock: frozen a
        # few seconds before `at` (see RedisScript).
        self.frozen_at = None if at is None else at - 5
        self.fields = {"store": self.store(), "token": TOKEN,
                       "daily": daily}
        env = None
        if at is not None:
            off = int((at - margin - time.time()) * 1e6)
            env = {"SLUICE_TEST_CLOCK_OFFSET_US": str(off)}
        s = Sluice(RULES % self.fields, env=env)
        self.addCleanup(s.stop)
        return s

    def change(self, s, **fields):
        self.fields.update(fields)
        s.write_config(RULES % self.fields)
        self.assertIn("SIGHUP: reloaded", s.reload())

    def before(self, at, check, margin=20):
        """A server a little before `at`, and check(s) run on it; started
        again (with more time to spare) when the start took so long that
        `at` had passed before check() could see the last seconds before
        it.  check() returns False in that case."""
        for _ in range(4):
            s = self.serve(at, margin)
            if check(s):
                return s
            s.stop()
            margin *= 2
        self.fail("the server never answered before the boundary")

    def advance(self, at):
        """Lets the store's clock pass `at`: the server's own clock runs
        there by itself (the memory and shared stores)."""

    def wait_past(self, s, path, user, at=FEB1, most_s=300):
        """Lets the clock pass `at`, then asks until a request passes (a
        refused one charges nothing), at most most_s seconds; returns the
        answer."""
        self.advance(at)
        deadline = time.monotonic() + most_s
        while True:
            r = get(s, path, user)
            if r.status == 200 or time.monotonic() > deadline:
                return r
            time.sleep(0.2)

    # ------------------------------------------------------ Done when

    def test_refused_at_2359_allowed_at_midnight_with_remaining_2(self):
        first = {}

        def three(s):
            r = get(s, "/daily", "late")
            if r.status != 200 or reset_s(r) > 3600:
                return False  # started past midnight: again, earlier
            first["r"] = r
            return True

        s = self.before(FEB1, three)
        r = first["r"]
        self.assertEqual(r.header("x-ratelimit-limit"), "3")
        self.assertEqual(r.header("x-ratelimit-remaining"), "2")
        self.assertEqual(policy_w(r), DAY)
        self.assertIn(";t=%d" % reset_s(r), r.header("ratelimit"))
        for left in ("1", "0"):
            r = get(s, "/daily", "late")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("x-ratelimit-remaining"), left)
        r = get(s, "/daily", "late")
        self.assertEqual(r.status, 429)
        # Refused at 23:59: the window ends within the minute, and the
        # wait is the time to it, not a refill of 8 hours a token.
        wait = int(r.header("retry-after"))
        self.assertLessEqual(wait, 60)
        self.assertLessEqual(abs(wait - reset_s(r)), 1)
        self.assertLessEqual(
            int(r.header("x-ratelimit-retry-after-ms")), wait * 1000)
        # Another key is not touched.
        self.assertEqual(get(s, "/daily", "other").status, 200)
        r = self.wait_past(s, "/daily", "late")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("x-ratelimit-remaining"), "2")
        # The new window is the whole of Feb 1.
        self.assertGreater(reset_s(r), DAY - 120)
        self.assertLessEqual(reset_s(r), DAY)

    def test_month_window_is_31_days_then_28(self):
        first = {}

        def one(s):
            r = get(s, "/monthly", "m")
            first["r"] = r
            return r.status == 200 and reset_s(r) <= 3600

        s = self.before(FEB1, one)
        self.assertEqual(policy_w(first["r"]), 31 * DAY)
        for _ in range(2):
            self.assertEqual(get(s, "/monthly", "m").status, 200)
        self.assertEqual(get(s, "/monthly", "m").status, 429)
        r = self.wait_past(s, "/monthly", "m")
        self.assertEqual(r.header("x-ratelimit-remaining"), "2")
        self.assertEqual(policy_w(r), 28 * DAY)
        self.assertGreater(reset_s(r), 28 * DAY - 120)

    def test_berlin_quota_resets_at_berlin_midnight(self):
        at = FEB1 - 3600  # 23:00 UTC = 00:00 in Berlin (CET)
        first = {}

        def two(s):
            r = get(s, "/berlin", "b")
            first["r"] = r
            return r.status == 200 and reset_s(r) <= 3600

        s = self.before(at, two)
        # A UTC day would end an hour later.
        self.assertLess(reset_s(first["r"]), 3600)
        self.assertEqual(policy_w(first["r"]), DAY)
        self.assertEqual(get(s, "/berlin", "b").status, 200)
        r = get(s, "/berlin", "b")
        self.assertEqual(r.status, 429)
        self.assertLessEqual(int(r.header("retry-after")), 3600)
        r = self.wait_past(s, "/berlin", "b", at)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("x-ratelimit-remaining"), "1")
        # Berlin's Feb 1 ends at 23:00 UTC on Feb 1.
        self.assertGreater(reset_s(r), DAY - 120)
        self.assertLessEqual(reset_s(r), DAY)

    # ----------------------------------------------------- reload

    def test_reload_lowering_a_quota_keeps_the_count(self):
        s = self.serve(daily="{quota: 5, per: day}")
        for _ in range(4):
            self.assertEqual(get(s, "/daily", "abuser").status, 200)
        self.change(s, daily="{quota: 3, per: day}")
        r = get(s, "/daily", "abuser")
        self.assertEqual(r.status, 429)
        self.assertEqual(r.header("x-ratelimit-limit"), "3")
        self.assertEqual(r.header("x-ratelimit-remaining"), "0")
        # A newcomer has the new quota whole.
        for left in ("2", "1", "0"):
            r = get(s, "/daily", "newcomer")
            self.assertEqual(r.header("x-ratelimit-remaining"), left)
        # Raised: what was used (3 in the lowered window) stays used.
        self.change(s, daily="{quota: 6, per: day}")
        n = 0
        while n < 10 and get(s, "/daily", "abuser").status == 200:
            n += 1
        self.assertEqual(n, 3)

    def test_bucket_to_quota_and_back_keeps_the_usage(self):
        s = self.serve(daily="{capacity: 5, rate: 1/h}")
        for _ in range(5):
            self.assertEqual(get(s, "/daily", "u").status, 200)
        self.change(s, daily="{quota: 5, per: day}")
        self.assertEqual(get(s, "/daily", "u").status, 429)
        self.change(s, daily="{quota: 8, per: day}")
        for left in ("2", "1", "0"):
            r = get(s, "/daily", "u")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("x-ratelimit-remaining"), left)
        self.change(s, daily="{capacity: 8, rate: 1/h}")
        self.assertEqual(get(s, "/daily", "u").status, 429)

    # ------------------------------------------------ mixed, admin

    def test_mixed_rule_is_all_or_nothing(self):
        s = self.serve(daily="{capacity: 2, rate: 1/day}, "
                             "{quota: 3, per: day}")
        for _ in range(2):
            self.assertEqual(get(s, "/daily", "x").status, 200)
        # The bucket refuses: the quota is not charged by the refusals.
        for _ in range(5):
            self.assertEqual(get(s, "/daily", "x").status, 429)
        # A roomier bucket (2 used stay used): the quota has 1 left, as
        # it would had the refusals never come.
        self.change(s, daily="{capacity: 10, rate: 1/day}, "
                             "{quota: 3, per: day}")
        r = get(s, "/daily", "x")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("x-ratelimit-remaining"), "0")
        self.assertEqual(r.header("x-ratelimit-limit"), "3")
        self.assertEqual(get(s, "/daily", "x").status, 429)

    def test_admin_verbs_on_quotas(self):
        s = self.serve()
        rule = {"rule": "daily", "key": "a"}
        self.assertEqual(admin(s, "reset", rule).status, 404)
        for _ in range(3):
            self.assertEqual(get(s, "/daily", "a").status, 200)
        self.assertEqual(get(s, "/daily", "a").status, 429)
        self.assertEqual(admin(s, "refund", dict(rule, cost=1)).status, 200)
        r = get(s, "/daily", "a")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("x-ratelimit-remaining"), "0")
        self.assertEqual(admin(s, "set", dict(rule, remaining=2)).status,
                         200)
        self.assertEqual(get(s, "/daily", "a")
                         .header("x-ratelimit-remaining"), "1")
        self.assertEqual(admin(s, "reset", rule).status, 200)
        self.assertEqual(get(s, "/daily", "a")
                         .header("x-ratelimit-remaining"), "2")
        # Ad-hoc quotas too.
        q = {"key": "h", "quota": 2, "per": "day"}
        self.assertEqual(take(s, q).status, 200)
        self.assertEqual(take(s, q).status, 200)
        self.assertEqual(take(s, q).status, 429)
        self.assertEqual(admin(s, "refund", dict(q, cost=1)).status, 200)
        self.assertEqual(take(s, q).status, 200)
        self.assertEqual(admin(s, "reset", q).status, 200)
        self.assertEqual(take(s, q).json()["remaining"], 1)

    # ------------------------------------------------------ ad hoc

    def test_adhoc_quota_answers_its_window(self):
        first = {}

        def one(s):
            r = take(s, {"key": "k", "quota": 2, "per": "day"})
            first["r"] = r
            return r.status == 200 and r.json()["reset_ms"] <= 3600 * 1000

        s = self.before(FEB1, one)
        body = first["r"].json()
        self.assertEqual((body["allowed"], body["limit"], body["remaining"]),
                         (True, 2, 1))
        self.assertGreater(body["reset_ms"], 0)
        # "days" is the same quota: no second counter by respelling it.
        r = take(s, {"key": "k", "quota": 2, "per": "days"})
        self.assertEqual(r.json()["remaining"], 0)
        r = take(s, {"key": "k", "quota": 2, "per": "day"})
        self.assertEqual(r.status, 429)
        body = r.json()
        self.assertFalse(body["allowed"])
        self.assertLessEqual(body["retry_after_ms"], 3600 * 1000)
        self.assertLessEqual(abs(body["retry_after_ms"] - body["reset_ms"]),
                             1000)
        self.advance(FEB1)
        deadline = time.monotonic() + 300
        while r.status == 429 and time.monotonic() < deadline:
            time.sleep(0.2)
            r = take(s, {"key": "k", "quota": 2, "per": "day"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["remaining"], 1)
        self.assertGreater(r.json()["reset_ms"], (DAY - 120) * 1000)

    def test_reservation_never_waits_past_a_window(self):
        """max_wait_ms on a quota: reserved at once while the window has
        room; then refused, charging nothing, whatever the caller would
        wait (short of the window's end)."""
        s = self.serve()
        q = {"key": "r", "quota": 1, "per": "day", "max_wait_ms": 60000}
        r = take(s, q)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["wait_ms"], 0)
        for _ in range(3):
            r = take(s, q)
            self.assertEqual(r.status, 429)
            self.assertGreater(r.json()["retry_after_ms"], 0)
        # The refusals charged nothing: a refund of the one take empties
        # the window again.
        body = {"key": "r", "quota": 1, "per": "day", "cost": 1}
        self.assertEqual(admin(s, "refund", body).status, 200)
        self.assertEqual(take(s, q).status, 200)

    def test_adhoc_quota_refusals(self):
        s = self.serve()
        for body, field in (
                ({"key": "k", "quota": 2, "per": "day",
                  "tz": "Europe/Berlin"}, "tz"),
                ({"key": "k", "quota": 2, "per": "fortnight"}, "per"),
                ({"key": "k", "quota": 2}, "per"),
                ({"key": "k", "quota": 0, "per": "day"}, "quota"),
                ({"key": "k", "quota": 10**9, "per": "day"}, "quota"),
                ({"key": "k", "quota": 2, "per": "day", "capacity": 5},
                 "capacity"),
                ({"key": "k", "quota": 2, "per": "day", "rate": "1/s"},
                 "rate"),
                ({"key": "k", "per": "day", "capacity": 5, "rate": "1/s"},
                 "per"),
                ({"key": "k", "quota": 2, "per": "day", "align": "noon"},
                 "align"),
                ({"key": "k", "quota": 2, "per": 7}, "per"),
                ({"key": "k", "quota": 2, "per": "day", "cost": 3}, "cost"),
                ({"rule": "daily", "key": "k", "quota": 9, "per": "day"},
                 "quota")):
            r = take(s, body)
            self.assertEqual(r.status, 400, body)
            self.assertEqual(r.json()["field"], field, (body, r.body))
        r = take(s, {"key": "k", "quota": 2, "per": "day", "tz": "UTC"})
        self.assertIn("UTC", r.json()["message"])


class Memory(Stores, unittest.TestCase):
    def store(self):
        return "{memory: {}}"


class Shared(Stores, unittest.TestCase):
    n = 0

    def store(self):
        # A file of its own for each server: a server started again
        # earlier (see before()) must not find the later one's counts.
        Shared.n += 1
        return fixtures.shm_store(self, "quota-%d" % Shared.n)


REDIS = shutil.which("redis-server")
MODULE = os.path.join(harness.BUILD, "sluice-redis.so")
# The Redis store's quotas (quota.lua).
REDIS_QUOTAS = os.path.exists(
    os.path.join(harness.SRC, "src", "store", "redis", "quota.lua"))


@unittest.skipUnless(REDIS and REDIS_QUOTAS and
                     os.path.exists(fixtures.FROZEN),
                     "redis-server is missing or the Redis store has no "
                     "quotas yet")
class RedisScript(fixtures.FrozenRedisStore, Stores, unittest.TestCase):
    """Redis decides on its own clock (TIME): for the stories at a
    midnight, redis-server runs with tests/tools/frozen_clock.c, its wall
    clock standing at self.frozen_at until advance() steps it past the
    boundary; sluice's own clock runs from a little before (the windows
    it sends hold Redis's instant either way)."""
    pass


@unittest.skipUnless(REDIS and REDIS_QUOTAS and os.path.exists(MODULE),
                     "redis-server or the module is missing")
class RedisModule(RedisScript):
    extra_redis = ("--loadmodule", MODULE)

    def test_berlin_quota_resets_at_berlin_midnight(self):
        Stores.test_berlin_quota_resets_at_berlin_midnight(self)

    def test_month_window_is_31_days_then_28(self):
        Stores.test_month_window_is_31_days_then_28(self)


if __name__ == "__main__":
    unittest.main()
