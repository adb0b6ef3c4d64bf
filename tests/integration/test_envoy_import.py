#!/usr/bin/env python3
"""envoy.import_counters: a cutover from envoyproxy/ratelimit that resets
nobody, on a real redis-server, through gRPC ShouldRateLimit.

The test writes envoyproxy/ratelimit's fixed-window counter as it does
(INCRBY hits, EXPIRE about the window) under its key (CACHE_KEY_PREFIX +
domain + "_" + key_value_... + the window's start), then asks sluice:

- a counter of 7 under a 10/hour limit leaves 3 requests, then
  OVER_LIMIT; a counter above the limit is over at once; no counter is a
  full bucket; other descriptors, values and domains are untouched;
- a bucket sluice already counted is never overwritten by a later import
  (a new instance, whose workers have imported nothing yet);
- a bucket's first take waits for its import: with several connections
  to Redis (connections: 4, so a take sent after the import may still
  reach Redis first were it not held back), every first request sees
  the imported usage, and many concurrent first requests over two
  instances of two workers each get exactly what the counter left;
- descriptor tricks (underscores that spell another descriptor's key, a
  request-supplied limit, hits_addend 0 first) never import less than
  envoyproxy/ratelimit counted for the descriptor;
- POST /json (the same service over HTTP) imports as gRPC does;
- the same with the SLUICE.TAKE module loaded (it reads the state
  import.lua writes), where every EVALSHA is an import: 20 requests on a
  bucket cost at most one import per worker;
- import_counters with a memory store is refused with file:line.

The windows are hours, and each counter is written for the current and
the next window, so crossing an hour while the test runs changes nothing.
"""
import json
import os
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

import fixtures  # noqa: E402
import harness  # noqa: E402
from grpc_harness import (GrpcSluice, envoy_dir, protos,  # noqa: E402
                          request, rls_stub)

OK, OVER = 1, 2
MODULE = os.path.join(harness.BUILD, "sluice-redis.so")

API = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: plan
    value: free
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 20}
"""
OTHER = """
domain: other
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
"""
PREFIX = "rl:"
DIVIDER = {"hour": 3600, "day": 86400}


def uniq():
    return uuid.uuid4().hex[:10]


class Import:
    """The checks, on a Redis given by redis() (with or without the
    module)."""

    def config(self, import_on=True, windows="buckets"):
        d = envoy_dir({"api.yaml": API, "other.yaml": OTHER})
        return ("store: {redis: {url: \"%s\", timeout_ms: 3000, connections: 4}}\n"
                "envoy: {config_dir: %s, import_counters: %s,"
                " cache_key_prefix: \"%s\", windows: %s}\n"
                % (self.redis.url(), d, "true" if import_on else "false",
                   PREFIX, windows))

    def serve(self, import_on=True, windows="buckets"):
        s = GrpcSluice(self.config(import_on, windows), threads=2)
        self.addCleanup(s.stop)
        return s

    def setUp(self):
        protos()
        self.s = self.serve()
        self.ch, self.stub = rls_stub(self, self.s)

    # envoyproxy/ratelimit's side: its key and its INCRBY + EXPIRE.
    def envoy_count(self, domain, entries, hits, unit="hour",
                    prefix=PREFIX):
        div = DIVIDER[unit]
        now = int(time.time())
        for start in ((now // div) * div, (now // div + 1) * div):
            key = prefix + domain + "_" + "".join(
                k + "_" + v + "_" for k, v in entries) + str(start)
            self.redis.cli("INCRBY", key, hits)
            self.redis.cli("EXPIRE", key, div)

    def decide(self, req, stub=None):
        return (stub or self.stub).ShouldRateLimit(req, timeout=30)

    def remaining_after(self, domain, entries, stub=None):
        """One call; its status's limit_remaining (None when over)."""
        r = self.decide(request(domain, entries), stub)
        st = r.statuses[0]
        return st.limit_remaining if st.code == OK else None

    def test_imported_usage_is_charged(self):
        u = [("user", uniq())]
        self.envoy_count("api", u, 7)
        self.assertEqual([self.remaining_after("api", u) for _ in range(4)],
                         [2, 1, 0, None])
        m = self.s.metrics()
        self.assertGreaterEqual(m.get("sluice_envoy_imported_total", 0), 1)

    def test_calendar_windows_import_into_the_quota(self):
        """With envoy.windows: calendar a descriptor is a calendar quota:
        the count goes into the quota's window (its stored state
        end_s*10^9+used), never a bucket's state under a quota's key."""
        s = self.serve(windows="calendar")
        ch = s.channel()
        self.addCleanup(ch.close)
        stub = s.rls(ch)
        user = uniq()
        u = [("user", user)]
        self.envoy_count("api", u, 7)
        self.assertEqual([self.remaining_after("api", u, stub)
                          for _ in range(4)], [2, 1, 0, None])
        # The quota's state, found by Redis itself (its name holds bytes a
        # shell would split): the one key of this user ending "@hour".
        raw = self.redis.cli(
            "EVAL", "local v = {} for _, k in ipairs(redis.call('KEYS', "
            "ARGV[1])) do if string.sub(k, -5) == '@hour' then "
            "v[#v + 1] = redis.call('GET', k) end end return v", 0,
            "*%s*" % user)
        self.assertTrue(raw.isdigit(), raw)
        state = int(raw)
        end_s, used = divmod(state, 10 ** 9)
        self.assertEqual(used, 10)
        self.assertEqual(end_s % 3600, 0)
        self.assertGreater(end_s, time.time() - 5)

    def test_post_json_imports_too(self):
        """The HTTP front end of the same service (POST /json)."""
        u = uniq()
        self.envoy_count("api", [("user", u)], 7)
        body = json.dumps({"domain": "api", "descriptors": [
            {"entries": [{"key": "user", "value": u}]}]})
        left = []
        for _ in range(4):
            r = harness.request(self.s.port, "POST", "/json", None, body)
            self.assertIn(r.status, (200, 429), r)
            st = r.json()["statuses"][0]
            left.append(st.get("limitRemaining", 0)
                        if r.status == 200 else None)
        self.assertEqual(left, [2, 1, 0, None])

    def test_a_count_above_the_limit_is_over_at_once(self):
        u = [("user", uniq())]
        self.envoy_count("api", u, 25)  # refused hits counted too
        r = self.decide(request("api", u))
        self.assertEqual(r.overall_code, OVER)
        self.assertEqual(r.statuses[0].limit_remaining, 0)

    def test_no_counter_is_a_full_bucket(self):
        u = [("user", uniq())]
        self.assertEqual(self.remaining_after("api", u), 9)

    def test_other_descriptors_are_untouched(self):
        u = uniq()
        self.envoy_count("api", [("user", u)], 9)
        # Another value, another domain, a deeper descriptor holding the
        # same user: each its own counter (none), so a full bucket.
        self.assertEqual(self.remaining_after("api", [("user", u + "x")]), 9)
        self.assertEqual(self.remaining_after("other", [("user", u)]), 9)
        self.assertEqual(self.remaining_after(
            "api", [("plan", "free"), ("user", u)]), 19)
        self.assertEqual(self.remaining_after("api", [("user", u)]), 0)

    def test_a_nested_descriptor_and_its_own_unit(self):
        u = uniq()
        ent = [("plan", "free"), ("user", u)]
        self.envoy_count("api", ent, 15, unit="day")
        self.assertEqual(self.remaining_after("api", ent), 4)

    def test_share_threshold_counter_is_the_patterns(self):
        # envoyproxy/ratelimit counts every files/... value under the
        # pattern's key.
        self.redis.cli("DEL", *[PREFIX + "api_files_files/*_%d" % s
                                for s in self.windows("hour")])
        self.envoy_count("api", [("files", "files/*")], 6)
        self.assertEqual(self.remaining_after(
            "api", [("files", "files/%s.pdf" % uniq())]), 3)

    def windows(self, unit):
        div = DIVIDER[unit]
        now = int(time.time())
        return ((now // div) * div, (now // div + 1) * div)

    def test_a_bucket_with_state_is_never_overwritten(self):
        u = [("user", uniq())]
        self.assertEqual(self.remaining_after("api", u), 9)
        # envoyproxy/ratelimit counts afterwards (a mixed rollout); a new
        # instance, whose workers have imported nothing, must not reset
        # the bucket sluice keeps to the counter's usage.
        self.envoy_count("api", u, 1)
        late = self.serve()
        ch = late.channel()
        self.addCleanup(ch.close)
        self.assertEqual(self.remaining_after("api", u, late.rls(ch)), 8)
        self.assertEqual(self.remaining_after("api", u), 7)

    def test_a_full_again_bucket_is_not_imported_twice(self):
        """The mark: a bucket imported once is not charged the same
        window's count again by another instance once it is full again
        (here: made full by deleting its state, as a refill would)."""
        u = uniq()
        self.envoy_count("api", [("user", u)], 5)
        self.assertEqual(self.remaining_after("api", [("user", u)]), 4)
        # (splitlines: a bucket's name holds 0x1f, which split() splits)
        keys = [k for k in self.redis.cli("KEYS", "*%s*" % u).splitlines()
                if not k.startswith(PREFIX) and not k.endswith("#import")]
        self.assertEqual(len(keys), 1, keys)
        self.redis.cli("DEL", keys[0])
        late = self.serve()
        ch = late.channel()
        self.addCleanup(ch.close)
        self.assertEqual(self.remaining_after("api", [("user", u)],
                                              late.rls(ch)), 9)

    def test_concurrent_first_requests_all_see_the_import(self):
        others = [self.serve()]
        chans = [s.channel() for s in [self.s] + others]
        for c in chans:
            self.addCleanup(c.close)
        stubs = [protos().rls_grpc.RateLimitServiceStub(c) for c in chans]
        for _ in range(3):
            u = [("user", uniq())]
            self.envoy_count("api", u, 6)
            futs = [stubs[i % 2].ShouldRateLimit.future(
                request("api", u), timeout=60) for i in range(24)]
            codes = [f.result().overall_code for f in futs]
            self.assertEqual(codes.count(OK), 4, codes)

    def test_descriptor_tricks_import_no_less(self):
        u = uniq()
        # A value holding the separator: its own counter, read whole.
        self.envoy_count("api", [("user", u + "_user_x")], 8)
        self.assertEqual(self.remaining_after(
            "api", [("user", u + "_user_x")]), 1)
        # Two descriptors that spell the same envoyproxy key share one
        # counter there (envoyproxy/ratelimit conflated them): each gets
        # the shared count -- at least its own usage, never less.
        self.envoy_count("api", [("plan", "free"), ("user", u + "p")], 18,
                         unit="day")
        self.assertEqual(self.remaining_after(
            "api", [("plan", "free"), ("user", u + "p")]), 1)
        # A first call that charges nothing (hits_addend 0) still imports.
        v = [("user", uniq())]
        self.envoy_count("api", v, 7)
        r = self.decide(request("api", {"entries": v, "hits": 0}))
        self.assertEqual(r.statuses[0].limit_remaining, 3)
        self.assertEqual([self.remaining_after("api", v) for _ in range(4)],
                         [2, 1, 0, None])
        # The counter under another prefix or domain is not this one's.
        w = [("user", uniq())]
        self.envoy_count("api", w, 9, prefix="")
        self.envoy_count("other", w, 9)
        self.assertEqual(self.remaining_after("api", w), 9)

    def test_garbage_in_the_counter_key_imports_nothing(self):
        for value in ("abc", "-5", "nan"):
            u = [("user", uniq())]
            for start in self.windows("hour"):
                self.redis.cli("SET", PREFIX + "api_user_%s_%d"
                               % (u[0][1], start), value)
            self.assertEqual(self.remaining_after("api", u), 9, value)
        u = [("user", uniq())]
        for start in self.windows("hour"):
            self.redis.cli("HSET", PREFIX + "api_user_%s_%d"
                           % (u[0][1], start), "f", "7")
        self.assertEqual([self.remaining_after("api", u) for _ in range(2)],
                         [9, 8])

    def test_import_off_reads_no_counter(self):
        off = self.serve(import_on=False)
        ch = off.channel()
        self.addCleanup(ch.close)
        u = [("user", uniq())]
        self.envoy_count("api", u, 7)
        self.assertEqual(self.remaining_after("api", u, off.rls(ch)), 9)


class ScriptTest(fixtures.ClassRedis, Import, unittest.TestCase):
    pass


@unittest.skipUnless(os.path.exists(MODULE), "no module built")
class ModuleTest(fixtures.ClassRedis, Import, unittest.TestCase):
    redis_extra = ("--loadmodule", MODULE)

    def test_module_is_loaded(self):
        self.assertIn("sluice", self.redis.cli("MODULE", "LIST").lower())

    def evalsha_calls(self):
        for line in self.redis.cli("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_evalsha:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def test_a_bucket_is_imported_once_per_worker(self):
        """With the module, takes are SLUICE.TAKE: every EVALSHA is an
        import.  20 requests on one bucket, on an instance of two
        workers: at most one import per worker, not one per request."""
        u = [("user", uniq())]
        self.envoy_count("api", u, 3)
        self.remaining_after("api", u)  # the module detected, warmed up
        before = self.evalsha_calls()
        v = [("user", uniq())]
        self.envoy_count("api", v, 3)
        left = [self.remaining_after("api", v) for _ in range(8)]
        self.assertEqual(left, [6, 5, 4, 3, 2, 1, 0, None])
        for _ in range(12):
            self.remaining_after("api", v)
        self.assertIn(self.evalsha_calls() - before, (1, 2))


class Config(unittest.TestCase):
    def test_import_on_a_memory_store_is_refused_with_file_line(self):
        d = envoy_dir({"api.yaml": API})
        path, p = harness.check_config(
            "store: memory\nenvoy:\n  config_dir: %s\n"
            "  import_counters: true\n" % d)
        self.assertNotEqual(p.returncode, 0)
        out = p.stdout + p.stderr
        self.assertIn("%s:4:" % path, out)
        self.assertIn("import_counters", out)


if __name__ == "__main__":
    unittest.main()
