#!/usr/bin/env python3
"""`sluice serve`: nothing a client sends resets or poisons another bucket.

On the memory store and on the Redis store alike:
- a user drained on tier `free` who sends one request as tier `paid` is
  still drained on `free` (a bucket is its key and its limit, not the
  limit's position or the number of limits);
- a user of `paid` who switches to `free` meets a fresh `free` bucket, not
  one re-measured from `paid`'s state;
- a reload that gives a rule one more limit keeps the state of the limit
  it already had;
- an ad-hoc `POST /v1/take` with other limits on the same key never
  touches the bucket of a caller with different limits (an attacker's
  capacity 2 at one token per 4.46 years once made a victim with capacity
  10 at 1/s wait 4.46 years);
- a flood of ad-hoc `POST /v1/take` buckets of a caller's choosing (6,000
  fresh keys of capacity 1 at 1/day, a day of debt each, on a store of
  2,000 buckets) never makes a drained rule bucket fresh (the local
  stores evict ad-hoc buckets among themselves; Redis evicts nothing).

Every count is exact: the limits refill at most one token an hour, far
slower than the test runs.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

TIERS = """
store: %(store)s
rules:
  - name: api
    key: ["header:x-user-id"]
    tiers:
      header: x-user-tier
      default: free
      limits:
        free: [{capacity: 5, rate: 1/h}]
        paid: [{capacity: 100, rate: 100/h}, {capacity: 1000, rate: 1000/day}]
"""

ONE_LIMIT = """
store: %(store)s
rules:
  - name: api
    key: ["header:x-user-id"]
    limits: [{capacity: 5, rate: 1/h}]
"""

TWO_LIMITS = """
store: %(store)s
rules:
  - name: api
    key: ["header:x-user-id"]
    limits: [{capacity: 1000, rate: 1000/day}, {capacity: 5, rate: 1/h}]
"""

CHECK_5 = """
store: %(store)s
rules:
  - name: check
    key: ["header:x-user-id"]
    limits: [{capacity: 5, rate: 5/h}]
"""


def check(s, user, tier=None):
    headers = {"x-user-id": user}
    if tier:
        headers["x-user-tier"] = tier
    return s.request("GET", "/v1/check", headers)


def take(s, body):
    return s.request("POST", "/v1/take", {}, json.dumps(body))


class Buckets:
    """The scenarios, run by a subclass for each store."""

    def store(self):
        raise NotImplementedError

    def config(self, text):
        return text % {"store": self.store()}

    def test_switching_tier_does_not_refill_the_drained_one(self):
        with Sluice(self.config(TIERS)) as s:
            for _ in range(5):
                self.assertEqual(check(s, "drained", "free").status, 200)
            self.assertEqual(check(s, "drained", "free").status, 429)
            r = check(s, "drained", "paid")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("x-ratelimit-remaining"), "99")
            r = check(s, "drained", "free")
            self.assertEqual(r.status, 429)
            self.assertEqual(r.header("x-ratelimit-remaining"), "0")

    def test_switching_tier_starts_from_that_tiers_own_bucket(self):
        with Sluice(self.config(TIERS)) as s:
            for _ in range(10):
                self.assertEqual(check(s, "upgraded", "paid").status, 200)
            r = check(s, "upgraded", "free")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("x-ratelimit-remaining"), "4")

    def test_reload_adding_a_limit_keeps_the_other(self):
        with Sluice(self.config(ONE_LIMIT), threads=1) as s:
            for _ in range(5):
                self.assertEqual(check(s, "kept").status, 200)
            self.assertEqual(check(s, "kept").status, 429)
            s.write_config(self.config(TWO_LIMITS))
            self.assertIn("SIGHUP: reloaded", s.reload())
            r = check(s, "kept")
            self.assertEqual(r.status, 429)
            self.assertEqual(r.header("x-ratelimit-remaining"), "0")

    def test_adhoc_limits_of_another_caller_never_poison_a_bucket(self):
        with Sluice(self.config(ONE_LIMIT)) as s:
            attacker = {"key": "alice", "capacity": 2,
                        "rate": "1/140737488355328us"}
            victim = {"key": "alice", "capacity": 10, "rate": "1/s"}
            self.assertEqual(take(s, attacker).status, 200)
            self.assertEqual(take(s, attacker).status, 200)
            self.assertEqual(take(s, attacker).status, 429)
            r = take(s, victim)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.json()["remaining"], 9)
            self.assertEqual(r.json()["retry_after_ms"], 0)
            # And the other way round: the victim's use leaves the
            # attacker's bucket as it was.
            self.assertEqual(take(s, attacker).status, 429)

    def test_flood_of_slow_adhoc_buckets_resets_no_rule_bucket(self):
        with Sluice(self.config(CHECK_5), threads=1) as s:
            c = s.client()
            try:
                who = {"x-user-id": "mallory"}
                for _ in range(5):
                    self.assertEqual(
                        c.request("GET", "/v1/check", who).status, 200)
                self.assertEqual(c.request("GET", "/v1/check", who).status,
                                 429)
                for i in range(6000):
                    r = c.request("POST", "/v1/take", {},
                                  {"key": "flood-%d" % i, "capacity": 1,
                                   "rate": "1/day"})
                    self.assertEqual(r.status, 200, r)
                passed = sum(
                    c.request("GET", "/v1/check", who).status == 200
                    for _ in range(5))
                self.assertEqual(passed, 0)
            finally:
                c.close()


class MemoryStore(Buckets, unittest.TestCase):
    def store(self):
        return "{memory: {max_keys: 2000}}"


class SharedStore(Buckets, unittest.TestCase):
    def setUp(self):
        self.path = "/dev/shm/sluice-it-%d-buckets" % os.getpid()
        self.addCleanup(lambda: os.path.exists(self.path)
                        and os.unlink(self.path))
        if os.path.exists(self.path):
            os.unlink(self.path)

    def store(self):
        return "{shared: {path: %s, max_keys: 2000}}" % self.path


class RedisStore(fixtures.ClassRedisStore, Buckets, unittest.TestCase):
    redis_timeout_ms = 1000

    def setUp(self):
        self.redis.cli("FLUSHALL")


if __name__ == "__main__":
    unittest.main(verbosity=2)
