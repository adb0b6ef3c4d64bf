#!/usr/bin/env python3
"""ngx_http_sluice_module's calendar quotas: `sluice_limit zone=NAME
quota=N/UNIT [tz=ZONE] [align=calendar|first_use] [cost=]` on a zone
declared without rate=.

Debian's real nginx loads the module this build made (with ASan and
UBSan in the test build: test_nginx_module.NginxDaemon preloads their
runtimes, and a sanitizer report in the error log fails the test).

- The day boundary (issue 31): nginx's wall clock frozen (the
  frozen_clock shim of the Redis tests, tests/tools/frozen_clock.c) at
  2026-12-07T23:59:59Z: a {quota 3, per day} key is refused after three
  requests, spread over both workers at once; nginx started again on the
  same store file at 2026-12-08T00:00:00Z allows it with remaining 2.
  The same instants on a Berlin day (its day ends at 23:00Z, so still
  refused), a first-use hour (refused until an hour after the first
  request), and a quota beside a rate limit (all-or-nothing: the requests
  the quota refused charged the bucket nothing).
- Headers as `sluice serve` sends them: X-RateLimit-* and RateLimit with
  the time to the window's end, RateLimit-Policy with w=86400 for a day,
  Retry-After on a refusal.
- Two nginx on one real redis-server enforce one quota, and the key in
  Redis expires at the window's end.
- nginx -t refuses bad units, counts, zones, alignments and mixes with
  FILE:LINE.

No test depends on the real calendar: the boundary runs on the frozen
clock, and the Redis test uses first-use windows (which open at the
first request), so a run across a real midnight answers the same.
"""
import calendar
import concurrent.futures
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RedisServer  # noqa: E402
from test_nginx_module import BUILD, NginxDaemon, loc, nginx_t  # noqa: E402

FROZEN = os.path.join(BUILD, "libfrozen_clock.so")


def iso_us(text):
    """Microseconds since the epoch of an ISO 8601 UTC instant."""
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")) \
        * 1000000


def frozen(http, instant):
    """nginx whose wall clock stands at `instant` (ISO 8601, UTC)."""
    if not os.path.exists(FROZEN):
        raise AssertionError("%s is built with the tests" % FROZEN)
    return NginxDaemon(http, env={"LD_PRELOAD": FROZEN,
                                  "FROZEN_CLOCK_US": str(iso_us(instant))})


def server(body):
    return ("server { listen 127.0.0.1:@PORT@; sluice_limit_status 429; "
            "sluice_limit_headers on; %s }" % body)


class DayBoundary(unittest.TestCase):
    NAMES = ("day", "berlin", "first", "mq", "mr")

    def setUp(self):
        # Store files of their own, kept from one nginx to the next
        # (/dev/shm: sticky, as a shared store's directory must be).
        self.prefix = "/dev/shm/sluice-ngx-quota-%d-" % os.getpid()
        self.tearDown()

    def tearDown(self):
        for name in self.NAMES:
            for suffix in ("", ".lock"):
                try:
                    os.unlink(self.prefix + name + suffix)
                except OSError:
                    pass

    def http(self):
        def z(name, rate=""):
            return ("sluice_limit_zone $http_x_user zone=%s:1m %s "
                    "store=shared:%s%s;" % (name, rate, self.prefix, name))
        return (z("day") + z("berlin") + z("first") + z("mq") +
                z("mr", "rate=1r/m") + server(
                    loc("/day", "sluice_limit zone=day quota=3/day;") +
                    loc("/berlin", "sluice_limit zone=berlin quota=1/day "
                        "tz=Europe/Berlin;") +
                    loc("/first", "sluice_limit zone=first quota=2/hour "
                        "align=first_use;") +
                    loc("/mixed", "sluice_limit zone=mr burst=4 nodelay; "
                        "sluice_limit zone=mq quota=2/day;") +
                    loc("/cost", "sluice_limit zone=day quota=10/day "
                        "cost=4;")))

    def test_refused_at_235959_allowed_at_midnight_with_remaining_2(self):
        with frozen(self.http(), "2026-12-07T23:59:59Z") as n:
            # Twelve at once over fresh connections (both workers):
            # exactly three pass.
            with concurrent.futures.ThreadPoolExecutor(6) as ex:
                got = list(ex.map(lambda _: n.get("/day", {"x-user": "u"}),
                                  range(12)))
            st = [g[0] for g in got]
            self.assertEqual(st.count(200), 3, st)
            self.assertEqual(st.count(429), 9, st)
            ok = sorted((g[1] for g in got if g[0] == 200),
                        key=lambda h: -int(h["x-ratelimit-remaining"]))
            self.assertEqual([h["x-ratelimit-remaining"] for h in ok],
                             ["2", "1", "0"])
            h = ok[0]
            self.assertEqual(h["x-ratelimit-limit"], "3")
            self.assertEqual(h["ratelimit-policy"], '"day";q=3;w=86400')
            self.assertEqual(h["ratelimit"], '"day";r=2;t=1')
            self.assertEqual(h["x-ratelimit-reset"], "1")
            no = next(g[1] for g in got if g[0] == 429)
            self.assertEqual(no["retry-after"], "1")
            self.assertEqual(no["x-ratelimit-remaining"], "0")
            # Another key is its own count.
            self.assertEqual(n.get("/day", {"x-user": "v"})[0], 200)

            # A Berlin day: one passes; a first-use hour: two pass.
            self.assertEqual(n.statuses("/berlin", "u", 2), [200, 429])
            self.assertEqual(n.statuses("/first", "u", 3), [200, 200, 429])
            st, h = n.get("/first", {"x-user": "u"})
            self.assertEqual(h["retry-after"], "3600")
            # Quota and bucket together: the quota refuses the third (the
            # bucket, capacity 5, keeps 3 tokens).
            self.assertEqual(n.statuses("/mixed", "u", 5),
                             [200, 200, 429, 429, 429])
            # A cost above the remaining count is refused whole (10/day
            # at 4 a request on a zone's own limit id).
            self.assertEqual(n.statuses("/cost", "c", 4),
                             [200, 200, 429, 429])

        with frozen(self.http(), "2026-12-08T00:00:00Z") as n:
            st, h = n.get("/day", {"x-user": "u"})
            self.assertEqual(st, 200)
            self.assertEqual(h["x-ratelimit-remaining"], "2")
            self.assertEqual(h["ratelimit"], '"day";r=2;t=86400')
            self.assertEqual(h["x-ratelimit-reset"], "86400")
            self.assertEqual(n.statuses("/day", "u", 3), [200, 200, 429])
            # Berlin's day runs to 23:00Z: still refused, for 23 hours.
            st, h = n.get("/berlin", {"x-user": "u"})
            self.assertEqual(st, 429)
            self.assertEqual(h["retry-after"], str(23 * 3600))
            # The first-use hour opened at 23:59:59: a second of it gone.
            st, h = n.get("/first", {"x-user": "u"})
            self.assertEqual(st, 429)
            self.assertEqual(h["retry-after"], "3599")
            # A new day for the quota; two pass again only if the three
            # refusals charged the bucket nothing (3 tokens left, a
            # second of 1r/m refilled no whole one).
            self.assertEqual(n.statuses("/mixed", "u", 3), [200, 200, 429])


class OnRedis(unittest.TestCase):
    def test_two_nginx_on_one_redis_enforce_one_quota(self):
        with RedisServer() as r:
            url = "redis://127.0.0.1:%d" % r.port
            # timeout=5000: a worker's first request waits for its
            # connection, which a busy machine can make late.
            http = ("sluice_limit_zone $http_x_user zone=rq:1m store=%s "
                    "timeout=5000;" % url) + server(loc("/", "sluice_limit zone=rq "
                                        "quota=4/day align=first_use;"))
            with NginxDaemon(http) as a, NginxDaemon(http) as b:
                t0 = time.monotonic()
                got = [(a if i % 2 else b).get("/", {"x-user": "u1"})
                       for i in range(10)]
                st = [g[0] for g in got]
                self.assertEqual(st, [200] * 4 + [429] * 6, st)
                h = got[0][1]
                self.assertEqual(h["ratelimit-policy"], '"rq";q=4;w=86400')
                self.assertEqual(h["x-ratelimit-remaining"], "3")
                reset = int(h["x-ratelimit-reset"])
                self.assertTrue(86399 <= reset <= 86400, h)
                retry = int(got[-1][1]["retry-after"])
                self.assertTrue(0 < retry <= 86400, got[-1][1])
                self.assertEqual(a.get("/", {"x-user": "u2"})[0], 200)
                # The count is in Redis under the quota's id, expiring at
                # the window's end.
                # (split on newlines only: the key holds a \x1f, which
                # str.split() takes for whitespace)
                keys = [k for k in r.cli("KEYS", "sluice:{rq*").split("\n")
                        if "u1" in k]
                self.assertEqual(len(keys), 1, keys)
                self.assertTrue(keys[0].endswith(":4@day:first_use"), keys)
                ttl = int(r.cli("PTTL", keys[0]).strip())
                # The window opened at the first request: since then at
                # most the time measured here has passed.
                gone_ms = (time.monotonic() - t0) * 1000
                self.assertTrue(86400000 - gone_ms - 2000 <= ttl <= 86401000,
                                (ttl, gone_ms))


class BadConfig(unittest.TestCase):
    ZONES = ("sluice_limit_zone $remote_addr zone=q:1m;\n"
             "    sluice_limit_zone $remote_addr zone=r:1m rate=1r/s;\n")
    CASES = [
        ("quota=0/day", r'invalid quota "0/day" \(N/UNIT'),
        ("quota=1000000000/day", r'invalid quota "1000000000/day"'),
        ("quota=5", r'invalid quota "5"'),
        ("quota=x/day", r'invalid quota "x/day"'),
        ("quota=5/fortnight", r'invalid quota "5/fortnight": .*day'),
        ("quota=5/", r'invalid quota "5/"'),
        ("quota=5/day tz=Mars/Olympus_Mons",
         r'invalid tz "Mars/Olympus_Mons": .*Mars/Olympus_Mons'),
        ("quota=5/day tz=../../etc/passwd", r'invalid tz "../../etc/passwd"'),
        ("quota=5/day tz=", r'invalid tz ""'),
        ("quota=5/day align=", r'invalid align ""'),
        ("quota=", r'invalid quota ""'),
        ("quota=5/day align=midnight",
         r'invalid align "midnight" \(calendar or first_use\)'),
        ("quota=5/day align=first_use tz=Europe/Berlin",
         r'"tz=Europe/Berlin" with "align=first_use"'),
        ("quota=5/day burst=3", r'"quota" with "burst"'),
        ("quota=5/day nodelay", r'"quota" with "nodelay"'),
        ("quota=5/day delay=1", r'"quota" with "delay"'),
        ("tz=UTC", r'"tz" without "quota"'),
        ("align=first_use", r'"align" without "quota"'),
    ]

    def test_each_bad_quota_is_refused_with_file_and_line(self):
        for args, message in self.CASES:
            with self.subTest(args=args):
                rc, out = nginx_t(self.ZONES + "    server { location / { "
                                  "sluice_limit zone=q %s; } }" % args)
                self.assertNotEqual(rc, 0, out)
                self.assertRegex(out, message + r".* in CONF:\d+", out)
        for text, message in [
                ("sluice_limit zone=r quota=5/day;",
                 r'"quota" on zone "r", which has a rate'),
                ("sluice_limit zone=q;", r'zone "q" has no rate: give it '
                 r'rate= or this sluice_limit a quota=N/UNIT')]:
            with self.subTest(text=text):
                rc, out = nginx_t(self.ZONES + "    server { location / { "
                                  "%s } }" % text)
                self.assertNotEqual(rc, 0, out)
                self.assertRegex(out, message + r".* in CONF:\d+", out)

    def test_good_quotas_pass(self):
        rc, out = nginx_t(
            self.ZONES + "    server { location / { "
            "sluice_limit zone=q quota=10000/month tz=Europe/Berlin; "
            "sluice_limit zone=r burst=5; } location /a { "
            "sluice_limit zone=q quota=5/days align=first_use cost=2; } "
            "location /b { sluice_limit zone=q quota=1/week "
            "align=calendar tz=UTC cost=$arg_n; } }")
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
