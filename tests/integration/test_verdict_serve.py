#!/usr/bin/env python3
"""`sluice serve` decides every matching rule, all or nothing, under load.

- 16 rules keyed on headers x-h0..x-h15, then `upload` on /api/upload at
  2/min: a client sending the 16 headers gets 2 of 10 uploads through
  (every matching rule counts, however many match).
- Rules `wide` (key ip, 1000/day) and `narrow` (key x-user-id, 20/day):
  200 concurrent requests from one user get 20 through, and `wide` is
  charged for those 20 alone -- on the memory store with 4 threads and
  on a Redis store.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import RedisServer, Sluice, request  # noqa: E402

MANY_RULES = "rules:\n" + "".join(
    "  - name: h%d\n"
    "    key: [\"header:x-h%d\"]\n"
    "    limits: [{capacity: 1000, rate: 1000/day}]\n" % (i, i)
    for i in range(16)) + """  - name: upload
    match: {path: "/api/upload"}
    key: [ip]
    limits: [{capacity: 2, rate: 2/min}]
"""

WIDE_NARROW = """store: %s
rules:
  - name: wide
    key: [ip]
    limits: [{capacity: 1000, rate: 1000/day}]
  - name: narrow
    key: ["header:x-user-id"]
    limits: [{capacity: 20, rate: 20/day}]
"""

RACERS = 200


def race(port):
    """RACERS requests from one user, all released at once; the statuses."""
    return harness.race(port, RACERS, "/v1/check", {"x-user-id": "mallory"})


def wide_remaining(port):
    r = request(port, "POST", "/v1/take",
                body=json.dumps({"key": "127.0.0.1", "rule": "wide",
                                 "cost": 0}))
    assert r.status == 200, r
    return r.json()["remaining"]


class VerdictServeTest(unittest.TestCase):
    def test_a_rule_after_sixteen_matching_ones_counts(self):
        s = Sluice(MANY_RULES)
        try:
            headers = {"x-h%d" % i: "v" for i in range(16)}
            headers.update({"x-original-method": "POST",
                            "x-original-uri": "/api/upload"})
            got = [request(s.port, "GET", "/v1/check", headers).status
                   for _ in range(10)]
        finally:
            s.stop()
        self.assertEqual(got.count(200), 2, got)
        self.assertEqual(got.count(429), 8, got)

    def check_wide_narrow(self, store, threads):
        s = Sluice(WIDE_NARROW % store, threads=threads)
        try:
            statuses = race(s.port)
            remaining = wide_remaining(s.port)
        finally:
            s.stop()
        print("%s: %d concurrent requests, %d allowed, wide charged %d"
              % (store, RACERS, statuses.count(200), 1000 - remaining))
        self.assertEqual(len(statuses), RACERS)
        self.assertEqual(statuses.count(200), 20)
        self.assertEqual(statuses.count(429), RACERS - 20)
        self.assertEqual(remaining, 980)

    def test_wide_is_charged_only_for_the_allowed_on_memory(self):
        self.check_wide_narrow("memory", 4)

    def test_wide_is_charged_only_for_the_allowed_on_redis(self):
        redis = RedisServer()
        try:
            self.check_wide_narrow(
                '{redis: {url: "%s", timeout_ms: 2000}}' % redis.url(), 2)
        finally:
            redis.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
