#!/usr/bin/env python3
"""Envoy's rate limit service with `envoy: {windows: calendar}`: descriptors
of `unit: day` (and the others) are calendar quotas, envoyproxy/ratelimit's
fixed windows, over gRPC (grpcio, as test_grpc_rls.py calls it).

- A day quota refused at 23:59 UTC is allowed at 00:00 UTC with
  limit_remaining 2; duration_until_reset is the time to the window's end
  (seconds at 23:59, a whole day after midnight); current_limit unchanged.
- {windows: {calendar: [domain]}}: only those domains; the others keep
  their token buckets (duration_until_reset: a token's refill).
- Without the option, nothing changes; a request's own limit (descriptor
  `limit`) in a calendar domain is a calendar quota too.
- A reload lowering requests_per_unit keeps the count.

The server's clock is set a little before a midnight with
SLUICE_TEST_CLOCK_OFFSET_US; bounds on time come from its answers.
"""
import calendar
import os
import shutil
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

import fixtures  # noqa: E402
import harness  # noqa: E402
from grpc_harness import GrpcSluice, envoy_dir, protos, request  # noqa: E402
from harness import Sluice  # noqa: E402

OK, OVER = 1, 2
SECOND, MINUTE, HOUR, DAY = 1, 2, 3, 4
FEB1 = calendar.timegm((2027, 2, 1, 0, 0, 0))

API = """
domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: day, requests_per_unit: %d}
"""
OTHER = """
domain: other
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
"""


def uniq():
    return uuid.uuid4().hex[:12]


class ClockSluice(GrpcSluice):
    """GrpcSluice whose clock reads `at` (epoch seconds) as it starts."""

    def __init__(self, config, at=None):
        self.env = None
        if at is not None:
            off = int((at - time.time()) * 1e6)
            self.env = {"SLUICE_TEST_CLOCK_OFFSET_US": str(off)}
        self.grpc_port = None

        def argv():
            self.grpc_port = harness.free_port()
            self.grpc_addr = self.grpc_target = "127.0.0.1:%d" % \
                self.grpc_port
            return ["--grpc-listen", self.grpc_addr]
        Sluice.__init__(self, config, None, argv, env=self.env)
        harness.wait_for_port(self.grpc_port, proc=self)


def until_reset_s(st):
    return st.duration_until_reset.ToMilliseconds() / 1000.0


class EnvoyQuota:
    """The stories, over the store self.store() names."""

    def setUp(self):
        protos()

    def advance(self, at):
        """Lets the store's clock pass `at` (the memory store: sluice's
        own clock runs there by itself)."""

    def serve(self, windows, at=None, rpu=3, extra=""):
        self.dir = envoy_dir({"api.yaml": API % rpu, "other.yaml": OTHER})
        opt = ", windows: %s" % windows if windows else ""
        self.frozen_at = None if at is None else at - 3
        self.text = ("store: %s\nenvoy: {config_dir: %s%s}\n%s"
                     % (self.store(), self.dir, opt, extra))
        s = ClockSluice(self.text, at)
        self.addCleanup(s.stop)
        ch = s.channel()
        self.addCleanup(ch.close)
        self.stub = s.rls(ch)
        return s

    def decide(self, *descriptors):
        return self.stub.ShouldRateLimit(request(*descriptors), timeout=30)

    def test_day_refused_at_2359_allowed_at_midnight(self):
        margin = 20
        for _ in range(4):
            s = self.serve("{calendar: [api]}", FEB1 - margin)
            u = uniq()
            r = self.decide("api", [("user", u)])
            if until_reset_s(r.statuses[0]) <= 3600:
                break
            s.stop()  # started past midnight: again, earlier
            margin *= 2
        st = r.statuses[0]
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(st.limit_remaining, 2)
        self.assertEqual((st.current_limit.name,
                          st.current_limit.requests_per_unit,
                          st.current_limit.unit), ("per-user", 3, DAY))
        self.assertGreater(until_reset_s(st), 0)
        for left in (1, 0):
            st = self.decide("api", [("user", u)]).statuses[0]
            self.assertEqual((st.code, st.limit_remaining), (OK, left))
        r = self.decide("api", [("user", u)])
        self.assertEqual(r.overall_code, OVER)
        wait = until_reset_s(r.statuses[0])
        self.assertLessEqual(wait, 3600)
        self.assertGreater(wait, 0)
        # The domain left out keeps its token bucket: one request leaves
        # a refill of a third of a day.
        st = self.decide("other", [("user", u)]).statuses[0]
        self.assertEqual(st.limit_remaining, 2)
        self.assertGreater(until_reset_s(st), 8 * 3600 - 60)
        self.advance(FEB1)
        deadline = time.monotonic() + 300
        while r.overall_code == OVER and time.monotonic() < deadline:
            time.sleep(0.2)
            r = self.decide("api", [("user", u)])
        self.assertEqual(r.overall_code, OK)
        st = r.statuses[0]
        self.assertEqual(st.limit_remaining, 2)
        self.assertEqual(st.current_limit.requests_per_unit, 3)
        self.assertGreater(until_reset_s(st), 86400 - 120)
        self.assertLessEqual(until_reset_s(st), 86400)

    def test_calendar_everywhere_and_request_limits(self):
        self.serve("calendar")
        u = uniq()
        now = time.time()
        to_midnight = 86400 - now % 86400
        for dom in ("api", "other"):
            st = self.decide(dom, [("user", u)]).statuses[0]
            self.assertEqual(st.limit_remaining, 2)
            # The window's end, from the server's clock: at most a day.
            self.assertLessEqual(until_reset_s(st), to_midnight + 1)
        # A request's own limit: 2 an hour, a calendar hour.
        d = {"entries": [("user", u)], "limit": (2, HOUR)}
        st = self.decide("api", d).statuses[0]
        self.assertEqual(st.limit_remaining, 1)
        self.assertLessEqual(until_reset_s(st), 3600 - now % 3600 + 1)
        self.assertEqual(self.decide("api", d).statuses[0].limit_remaining,
                         0)
        self.assertEqual(self.decide("api", d).overall_code, OVER)

    def test_without_the_option_descriptors_stay_buckets(self):
        self.serve(None)
        u = uniq()
        st = self.decide("api", [("user", u)]).statuses[0]
        self.assertEqual(st.limit_remaining, 2)
        # A bucket: full again a token's refill (8 hours) later,
        # whatever the calendar says.
        self.assertGreater(until_reset_s(st), 8 * 3600 - 60)
        self.assertLessEqual(until_reset_s(st), 8 * 3600 + 1)

    def test_reload_lowering_keeps_the_count(self):
        s = self.serve("calendar", rpu=5)
        u = uniq()
        for _ in range(4):
            self.assertEqual(self.decide("api", [("user", u)]).overall_code,
                             OK)
        with open(os.path.join(self.dir, "api.yaml"), "w") as f:
            f.write(API % 3)
        self.assertIn("SIGHUP: reloaded", s.reload())
        r = self.decide("api", [("user", u)])
        self.assertEqual(r.overall_code, OVER)
        self.assertEqual(r.statuses[0].current_limit.requests_per_unit, 3)
        # A newcomer has the lowered quota whole.
        st = self.decide("api", [("user", uniq())]).statuses[0]
        self.assertEqual(st.limit_remaining, 2)

    def test_turning_calendar_on_keeps_the_usage(self):
        s = self.serve(None)
        u = uniq()
        for _ in range(2):
            self.assertEqual(self.decide("api", [("user", u)]).overall_code,
                             OK)
        s.write_config(self.text.replace(
            "config_dir: %s}" % self.dir,
            "config_dir: %s, windows: calendar}" % self.dir))
        self.assertIn("SIGHUP: reloaded", s.reload())
        # 2 used of the bucket are 2 counted in today's window.
        st = self.decide("api", [("user", u)]).statuses[0]
        self.assertEqual((st.code, st.limit_remaining), (OK, 0))
        self.assertEqual(self.decide("api", [("user", u)]).overall_code,
                         OVER)

    def test_bad_windows_option_is_refused(self):
        d = envoy_dir({"api.yaml": API % 3})
        for opt in ("fixed", "{calendar: api}", "{fixed: [api]}"):
            path, p = harness.check_config(
                "envoy: {config_dir: %s, windows: %s}\n" % (d, opt))
            out = p.stdout + p.stderr
            self.assertEqual(p.returncode, 2, out)
            self.assertIn("%s:1:" % path, out)
            self.assertIn("windows", out)


class Memory(EnvoyQuota, unittest.TestCase):
    def store(self):
        return "{memory: {}}"


REDIS = shutil.which("redis-server")
MODULE = os.path.join(harness.BUILD, "sluice-redis.so")
REDIS_QUOTAS = os.path.exists(
    os.path.join(harness.SRC, "src", "store", "redis", "quota.lua"))


@unittest.skipUnless(REDIS and REDIS_QUOTAS and os.path.exists(MODULE) and
                     os.path.exists(fixtures.FROZEN),
                     "redis-server, the module or Redis quotas missing")
class RedisModule(fixtures.FrozenRedisStore, EnvoyQuota,
                  unittest.TestCase):
    """On Redis (the module: quota.lua's failures are noted in
    test_serve_quota.py), its clock frozen a little before the midnight
    and stepped past it by advance()."""

    extra_redis = ("--loadmodule", MODULE)


if __name__ == "__main__":
    unittest.main()
