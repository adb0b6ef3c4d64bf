#!/usr/bin/env python3
"""A changed limit keeps each key's usage (`sluice serve`, SIGHUP).

What was used stays used, in the new limit's terms: an operator who lowers
a limit during an attack has the attacker limited on the very next
request; a raised limit allows the difference; a rate change keeps the
count.  Each story runs on every local store (memory, shared memory) and,
when redis-server is installed, on Redis (the script and, when built, the
module).  Buckets refill at 1/hour or slower, so every count is exact and
nothing depends on timing.
"""
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

RULE = """
store: %(store)s
%(extra)s
rules:
  - name: api
    key: ["header:x-user-id"]
    shadow: %(shadow)s
    limits: [%(limits)s]
    overrides:
      "vip": [%(vip)s]
"""


def check(s, user):
    return s.request("GET", "/v1/check", {"x-user-id": user})


def passes(s, user, most=40):
    n = 0
    while n < most and check(s, user).status == 200:
        n += 1
    return n


class Stores:
    """The stories, over the store self.store() names."""

    extra = ""

    def serve(self, limits, vip="{capacity: 2, rate: 1/h}", shadow="false"):
        self.fields = {"store": self.store(), "extra": self.extra,
                       "shadow": shadow, "limits": limits, "vip": vip}
        s = Sluice(RULE % self.fields)
        self.addCleanup(s.stop)
        return s

    def change(self, s, **fields):
        self.fields.update(fields)
        s.write_config(RULE % self.fields)
        self.assertIn("SIGHUP: reloaded", s.reload())

    def test_drained_key_lowered_stays_drained(self):
        s = self.serve("{capacity: 5, rate: 1/h}")
        self.assertEqual(passes(s, "abuser"), 5)
        self.change(s, limits="{capacity: 3, rate: 1/h}")
        r = check(s, "abuser")
        self.assertEqual(r.status, 429)
        self.assertEqual(r.header("x-ratelimit-limit"), "3")
        self.assertEqual(r.header("x-ratelimit-remaining"), "0")
        # Then the rate: still drained, and the wait is one token at the
        # new rate (2/h: 30 minutes), not the old one.
        self.change(s, limits="{capacity: 3, rate: 2/h}")
        r = check(s, "abuser")
        self.assertEqual(r.status, 429)
        self.assertLessEqual(int(r.header("retry-after")), 1800)
        self.assertGreater(int(r.header("retry-after")), 1700)
        # A client never seen starts full under the new limit.
        self.assertEqual(passes(s, "newcomer"), 3)

    def test_raised_limit_allows_the_difference(self):
        s = self.serve("{capacity: 5, rate: 1/h}")
        self.assertEqual(passes(s, "u"), 5)
        self.change(s, limits="{capacity: 8, rate: 1/h}")
        self.assertEqual(passes(s, "u"), 3)

    def test_half_used_across_a_rate_change(self):
        s = self.serve("{capacity: 10, rate: 1/h}")
        for _ in range(5):
            self.assertEqual(check(s, "h").status, 200)
        self.change(s, limits="{capacity: 10, rate: 1/day}")
        r = check(s, "h")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("x-ratelimit-remaining"), "4")

    def test_override_lowered_and_changed_back(self):
        s = self.serve("{capacity: 5, rate: 1/h}",
                       vip="{capacity: 6, rate: 1/h}")
        for _ in range(4):
            self.assertEqual(check(s, "vip").status, 200)
        # Lowered below what was used: drained at once.
        self.change(s, vip="{capacity: 3, rate: 1/h}")
        self.assertEqual(check(s, "vip").status, 429)
        # Back to 6: 3 used (capped at the lower limit) -- never the
        # stale 4 of before, nor a full bucket.
        self.change(s, vip="{capacity: 6, rate: 1/h}")
        self.assertEqual(passes(s, "vip"), 3)

    def test_shadow_rule_becoming_enforcing_keeps_its_buckets(self):
        s = self.serve("{capacity: 3, rate: 1/h}", shadow="true")
        for _ in range(5):
            self.assertEqual(check(s, "watched").status, 200)
        self.change(s, shadow="false")
        self.assertEqual(check(s, "watched").status, 429)
        # Enforcing and lowered at once: still drained.
        self.change(s, limits="{capacity: 2, rate: 1/h}")
        self.assertEqual(check(s, "watched").status, 429)


class Memory(Stores, unittest.TestCase):
    def store(self):
        return "{memory: {}}"


class Shared(Stores, unittest.TestCase):
    def store(self):
        return fixtures.shm_store(self, "carry")


REDIS = shutil.which("redis-server")
MODULE = os.path.join(harness.BUILD, "sluice-redis.so")


@unittest.skipUnless(REDIS, "redis-server is not installed")
class RedisScript(Stores, unittest.TestCase):
    extra_redis = ()

    def store(self):
        redis = harness.RedisServer(extra=self.extra_redis)
        self.addCleanup(redis.stop)
        return '{redis: {url: "%s", timeout_ms: 2000}}' % redis.url()


@unittest.skipUnless(REDIS and os.path.exists(MODULE),
                     "redis-server or the module is missing")
class RedisModule(RedisScript):
    """Takes go through SLUICE.TAKE; the carry through carry.lua, on the
    same state."""
    extra_redis = ("--loadmodule", MODULE)

    def test_carry_command_agrees_with_the_script(self):
        """SLUICE.CARRY (for clients naming their own buckets) and
        carry.lua leave the same bucket: drained on 5 at 1/h, carried
        to 3 at 2/h, then a half-used 10 at 1/h carried to 10 at 1/day;
        the earlier keys are gone either way."""
        redis = harness.RedisServer(extra=self.extra_redis)
        self.addCleanup(redis.stop)
        # carry.lua as the build expands it (src/store/redis/lib/).
        with open(os.path.join(harness.BUILD, "generated", "lua",
                               "carry.lua")) as f:
            script = f.read()
        h, day = 3600 * 10**6, 86400 * 10**6
        for cost, old, new, args in (
                (5, ("5", "1/h"), ("3", "2/h"),
                 [h // 2, 3 * h // 2, 1, h, 1]),
                (5, ("10", "1/h"), ("10", "1/day"),
                 [day, 10 * day, 1, h, 1])):
            for side in ("m", "s"):
                reply = redis.cli("SLUICE.TAKE", "%s{u}:old" % side,
                                  old[0], old[1], "COST", cost)
                self.assertTrue(reply.startswith("1"), reply)
            self.assertEqual(redis.cli("SLUICE.CARRY", "m{u}:new", new[0],
                                       new[1], "m{u}:old", old[0],
                                       old[1]), "1")
            self.assertEqual(redis.cli("EVAL", script, 2, "s{u}:new",
                                       "s{u}:old", *args), "1")
            got = [redis.cli("SLUICE.TAKE", "%s{u}:new" % side, new[0],
                             new[1], "COST", 0).split("\n")
                   for side in ("m", "s")]
            self.assertEqual(got[0][:3], got[1][:3])  # allowed, limit, left
            self.assertLess(abs(int(got[0][4]) - int(got[1][4])), 1000)
            self.assertEqual(redis.cli("EXISTS", "m{u}:old", "s{u}:old"),
                             "0")
            redis.cli("DEL", "m{u}:new", "s{u}:new")


if __name__ == "__main__":
    unittest.main()
