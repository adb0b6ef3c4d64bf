#!/usr/bin/env python3
"""Envoy descriptors on the Redis store: several `sluice serve` instances
on one Redis share every bucket exactly, and a request refused for one
descriptor charges none of the others, through POST /json.

- Three instances, one Redis, the same envoyproxy/ratelimit directory:
  a per-user 10/hour limit and a per-route 1000/hour limit on every
  request.  60 requests from 12 threads spread over the instances: exactly
  10 allowed, and the route bucket charged exactly 10 times (the 50
  refused requests charged nothing), read back with hitsAddend 0 (a peek)
  from a fourth view.
- The bucket key is the same from every instance (the key encoding is
  stable), so an instance started later sees the buckets already spent.
"""
import json
import os
import shutil
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import RedisServer, Sluice  # noqa: E402

RATELIMIT = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 1000}
"""


def body(user, route, route_hits=None):
    d2 = {"entries": [{"key": "route", "value": route}]}
    if route_hits is not None:
        d2["hitsAddend"] = route_hits
    return json.dumps({"domain": "api", "descriptors": [
        {"entries": [{"key": "user", "value": user}]}, d2]})


class RedisAndDir(unittest.TestCase):
    """Each test: a redis-server, and a config_dir holding api.yaml."""

    def setUp(self):
        self.redis = RedisServer()
        self.addCleanup(self.redis.stop)
        self.dir = tempfile.mkdtemp(prefix="sluice-envoy-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        with open(os.path.join(self.dir, "api.yaml"), "w") as f:
            f.write(RATELIMIT)


class SharedRedis(RedisAndDir):
    def setUp(self):
        super().setUp()
        self.instances = [self.start() for _ in range(3)]

    def start(self):
        s = Sluice("store: {redis: {url: \"%s\", timeout_ms: 2000}}\n"
                   "envoy:\n  config_dir: %s\n"
                   % (self.redis.url(), self.dir))
        self.addCleanup(s.stop)
        return s

    def post(self, s, text):
        r = harness.request(s.port, "POST", "/json", None, text)
        self.assertIn(r.status, (200, 429), r)
        return r

    def test_refused_request_charges_no_descriptor_anywhere(self):
        results = []
        lock = threading.Lock()

        def worker(k):
            for j in range(5):
                s = self.instances[(k + j) % 3]
                r = self.post(s, body("alice", "/orders"))
                with lock:
                    results.append(r.status)

        threads = [threading.Thread(target=worker, args=(k,))
                   for k in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
            self.assertFalse(t.is_alive())
        self.assertEqual(len(results), 60)
        self.assertEqual(results.count(200), 10)
        self.assertEqual(results.count(429), 50)
        # Peek at the route bucket (hitsAddend 0) from a new instance,
        # with a user who still has tokens.
        late = self.start()
        r = self.post(late, body("bob", "/orders", route_hits=0))
        st = r.json()["statuses"]
        self.assertEqual(st[1]["limitRemaining"], 1000 - 10)
        self.assertEqual(st[0]["limitRemaining"], 9)
        # alice is spent everywhere, the late instance included.
        r = self.post(late, body("alice", "/other"))
        self.assertEqual(r.status, 429)
        self.assertEqual(r.json()["statuses"][1]["code"], "OK")
        self.assertEqual(r.json()["statuses"][1]["limitRemaining"], 1000)

    def test_repeated_descriptor_is_charged_for_each(self):
        """The same descriptor twice in one request, and a descriptor
        with its own limit beside the one the config matches: the Redis
        store charges each (as the memory store does), never answers
        them as a store failure."""
        s = self.instances[0]
        twice = json.dumps({"domain": "api", "descriptors": [
            {"entries": [{"key": "user", "value": "erin"}]}] * 2})
        for i in range(5):
            r = self.post(s, twice)
            self.assertEqual(r.status, 200, r.json())
            st = r.json()["statuses"]
            self.assertEqual([x.get("limitRemaining", 0) for x in st],
                             [9 - 2 * i, 8 - 2 * i])
        r = self.post(self.instances[1], twice)
        self.assertEqual(r.status, 429)
        # The request-supplied limit is a bucket of its own on the same
        # key; both are charged.
        own = json.dumps({"domain": "api", "descriptors": [
            {"entries": [{"key": "user", "value": "fay"}]},
            {"entries": [{"key": "user", "value": "fay"}],
             "limit": {"requestsPerUnit": 3, "unit": "HOUR"}}]})
        for left in (2, 1, 0):
            r = self.post(s, own)
            self.assertEqual(r.status, 200, r.json())
            self.assertEqual(r.json()["statuses"][1].get("limitRemaining", 0),
                             left)
        r = self.post(s, own)
        self.assertEqual(r.status, 429)
        self.assertEqual(r.json()["statuses"][0]["limitRemaining"], 7)

    def test_quota_mode_refused_charges_nothing(self):
        """quota_mode on Redis: every quota descriptor over refuses the
        request and charges no other descriptor; one quota descriptor
        over beside another that passes: allowed, the others charged."""
        with open(os.path.join(self.dir, "quota.yaml"), "w") as f:
            f.write("domain: quota\ndescriptors:\n"
                    "  - key: qa\n    quota_mode: true\n"
                    "    rate_limit: {unit: hour, requests_per_unit: 1}\n"
                    "  - key: qb\n    quota_mode: true\n"
                    "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
                    "  - key: n\n"
                    "    rate_limit: {unit: hour, requests_per_unit: 100}\n")
        s = self.start()

        def req(*pairs):
            descs = [{"entries": [{"key": k, "value": v}]}
                     for k, v in pairs]
            return self.post(s, json.dumps({"domain": "quota",
                                            "descriptors": descs}))

        self.assertEqual(req(("qa", "1"), ("n", "1")).status, 200)
        for _ in range(3):
            r = req(("qa", "1"), ("n", "1"))
            self.assertEqual(r.status, 429)
            self.assertEqual(r.json()["statuses"][1]["limitRemaining"], 99)
        r = req(("qa", "1"), ("qb", "1"), ("n", "1"))
        self.assertEqual(r.status, 200)
        st = r.json()["statuses"]
        self.assertEqual(st[0]["code"], "OVER_LIMIT")
        self.assertEqual([st[1]["limitRemaining"], st[2]["limitRemaining"]],
                         [9, 98])

    def test_huge_hits_addend_is_refused_and_charges_nothing(self):
        s = self.instances[0]
        r = self.post(s, body("carol", "/x", route_hits="18446744073709551615"))
        self.assertEqual(r.status, 429)
        st = r.json()["statuses"]
        self.assertEqual(st[1]["code"], "OVER_LIMIT")
        self.assertEqual(st[1]["limitRemaining"], 1000)
        r = self.post(s, body("carol", "/x"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["statuses"][0]["limitRemaining"], 9)
        self.assertEqual(r.json()["statuses"][1]["limitRemaining"], 999)


class StoreDown(RedisAndDir):
    """Redis gone: envoy.on_store_error decides.  closed: /json answers
    503 (gRPC UNAVAILABLE), so Envoy's failure_mode_deny decides; open:
    OK without a limit; /healthcheck fails while the store cannot
    answer."""

    def start(self, mode):
        # The first answer of the closed instance must be decided: a
        # 200 ms deadline could be missed on a busy machine (a 503), and a
        # killed Redis fails at once whatever the timeout.
        s = Sluice("store: {redis: {url: \"%s\", timeout_ms: 2000}}\n"
                   "envoy:\n  config_dir: %s\n  on_store_error: %s\n"
                   % (self.redis.url(), self.dir, mode))
        self.addCleanup(s.stop)
        return s

    def test_closed_and_open(self):
        closed, opened = self.start("closed"), self.start("open")
        for s in (closed, opened):
            r = harness.request(s.port, "POST", "/json", None,
                                body("dave", "/x"))
            self.assertEqual(r.status, 200)
        self.redis.kill()
        r = harness.request(closed.port, "POST", "/json", None,
                            body("dave", "/x"))
        self.assertEqual(r.status, 503, r)
        r = harness.request(opened.port, "POST", "/json", None,
                            body("dave", "/x"))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["statuses"], [{"code": "OK"}] * 2)
        self.assertTrue(harness.wait_until(
            lambda: harness.request(closed.port, "GET",
                                    "/healthcheck").status == 500, 20))


if __name__ == "__main__":
    unittest.main(verbosity=2)
