#!/usr/bin/env python3
"""envoyproxy/ratelimit's HTTP side on `sluice serve`: POST /json and
GET /healthcheck, over a directory of envoyproxy/ratelimit's own YAML.

- README Examples 1-11 through POST /json, each with the requests and the
  answers the README describes.  Where a token bucket answers otherwise
  than envoyproxy/ratelimit's fixed window, the test says so: a bucket of
  N per unit holds N and refills one token every unit/N, so
  durationUntilReset is the time until the bucket is full again (not
  until the window ends), and a request refused for one descriptor
  charges none of the others.
- proto3 JSON: camelCase answers, both spellings accepted in requests,
  enums as names, Durations as "Ns"; 200 / 429 as envoyproxy/ratelimit,
  400 for what cannot be read.
- response headers (LIMIT_RESPONSE_HEADERS_ENABLED), JSON logs,
  /rlconfig, StatsD, and metrics per domain and descriptor path.
Reloads: test_envoy_reload.py.

Limits are per hour or per day, so the seconds a test takes refill
nothing a whole token would show.
"""
import json
import os
import signal
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from envoy_json_cases import EXAMPLES, Base, desc  # noqa: E402


class ReadmeExamples(Base):
    def test_example1_each_database_its_own_limit(self):
        for i in range(3):
            s = self.ok("mongo_cps", desc(("database", "users")))
            st = s["statuses"][0]
            self.assertEqual(st["code"], "OK")
            self.assertEqual(st["currentLimit"],
                             {"requestsPerUnit": 3, "unit": "HOUR"})
            self.assertEqual(st.get("limitRemaining", 0), 2 - i)
        self.over("mongo_cps", desc(("database", "users")))
        self.ok("mongo_cps", desc(("database", "default")))
        # No rule for this value: OK, no currentLimit.
        s = self.ok("mongo_cps", desc(("database", "other")))
        self.assertEqual(s["statuses"], [{"code": "OK"}])

    def test_example2_several_descriptors_in_one_request(self):
        both = [desc(("message_type", "marketing"),
                     ("to_number", "2061111111")),
                desc(("to_number", "2061111111"))]
        for i in range(5):
            s = self.ok("messaging", *both)
            self.assertEqual(s["statuses"][0].get("limitRemaining", 0),
                             4 - i)
            self.assertEqual(s["statuses"][1]["limitRemaining"], 99 - i)
        s = self.over("messaging", *both)
        self.assertEqual(s["statuses"][0]["code"], "OVER_LIMIT")
        self.assertEqual(s["statuses"][0]["currentLimit"],
                         {"requestsPerUnit": 5, "unit": "DAY"})
        # Token bucket, all or nothing: the 100/day descriptor of the
        # refused request was not charged (the fixed window would have
        # counted it: 94).
        self.assertEqual(s["statuses"][1]["code"], "OK")
        self.assertEqual(s["statuses"][1]["limitRemaining"], 95)
        # Token bucket: empty, a 5/day bucket is full again in a day (the
        # fixed window says "until midnight UTC").
        secs = float(s["statuses"][0]["durationUntilReset"].rstrip("s"))
        self.assertTrue(86390 < secs <= 86400, s)
        # Every number gets its own 5.
        s = self.ok("messaging", desc(("message_type", "marketing"),
                                      ("to_number", "2062222222")))
        self.assertEqual(s["statuses"][0]["limitRemaining"], 4)

    def test_example3_most_specific_match(self):
        s = self.ok("edge_proxy_per_ip", desc(("remote_address",
                                               "50.0.0.1")))
        self.assertEqual(s["statuses"][0]["currentLimit"]["requestsPerUnit"],
                         10)
        s = self.over("edge_proxy_per_ip",
                      desc(("remote_address", "50.0.0.5")))
        # requests_per_unit 0: proto3 JSON leaves the 0 out.
        self.assertEqual(s["statuses"][0]["currentLimit"],
                         {"unit": "SECOND"})

    def test_example4_same_level_only(self):
        two = desc(("key", "value"), ("subkey", "subvalue"))
        s = self.ok("example4", two)
        self.assertEqual(
            s["statuses"][0]["currentLimit"]["requestsPerUnit"], 300)
        s = self.ok("example4", desc(("key", "value")))
        self.assertEqual(s["statuses"], [{"code": "OK"}])

    def test_example5_unlimited(self):
        for _ in range(3):
            s = self.ok("internal", desc(("ldap", "x")))
            self.assertEqual(s["statuses"],
                             [{"code": "OK", "limitRemaining": 4294967295}])
        s = self.ok("internal", desc(("azure", "x")))
        self.assertEqual(s["statuses"][0]["currentLimit"],
                         {"requestsPerUnit": 100, "unit": "MINUTE"})

    def test_example6_shadow_mode(self):
        a = desc(("service", "auth-service"), ("user", "user-a"))
        b = desc(("service", "auth-service"), ("user", "user-b"))
        for _ in range(12):
            s = self.ok("example6", a)
            self.assertEqual(s["statuses"][0]["code"], "OK")
        for _ in range(20):
            self.ok("example6", b)
        self.over("example6", b)
        m = self.sluice.metrics()
        key = 'domain="example6",descriptor="service.user_user-a"'
        self.assertEqual(m["sluice_envoy_shadow_mode_total{%s}" % key], 2)
        self.assertEqual(m["sluice_envoy_total_hits_total{%s}" % key], 12)

    def test_example7_replaces(self):
        k1 = desc(("key_1", "value_1"), ("user", "bkthomps"))
        k2 = desc(("key_2", "value_2"), ("user", "bkthomps"))
        for _ in range(10):
            s = self.ok("example7", k1, k2)
            self.assertEqual(s["statuses"][0], {"code": "OK"})
        self.over("example7", k1, k2)
        # The replaced 5/hour limit was never charged.
        s = self.ok("example7", k1)
        self.assertEqual(s["statuses"][0]["limitRemaining"], 4)
        self.assertEqual(s["statuses"][0]["currentLimit"]["name"],
                         "specific_limit")

    def test_example8_detailed_metric(self):
        self.ok("example8", desc(("key1", "unspecified_value")))
        self.ok("example8", desc(("key1", "unspecified_value2")))
        self.ok("example8", desc(("key1", "value1")))
        m = self.sluice.metrics()
        for path in ("key1_unspecified_value", "key1_unspecified_value2",
                     "key1_value1"):
            self.assertEqual(
                m['sluice_envoy_total_hits_total{domain="example8",'
                  'descriptor="%s"}' % path], 1, path)

    def test_example9_wildcards(self):
        for v in ("value1", "value2", "valueXYZ"):
            s = self.ok("example9", desc(("key1", v)))
            self.assertIn("currentLimit", s["statuses"][0])
        s = self.ok("example9", desc(("path", "/api/123/action")))
        self.assertIn("currentLimit", s["statuses"][0])
        s = self.ok("example9", desc(("path", "/api/123/other")))
        self.assertNotIn("currentLimit", s["statuses"][0])
        s = self.ok("example9",
                    desc(("route", "/api/v1/resource/123/action")))
        self.assertIn("currentLimit", s["statuses"][0])
        # Every matching value has its own bucket (no share_threshold).
        self.assertEqual(s["statuses"][0]["limitRemaining"], 19)

    def test_example10_value_to_metric(self):
        self.ok("example10", desc(("route", "api"), ("http_method", "GET"),
                                  ("subject_id", "123")))
        self.ok("example10", desc(("route", "web"), ("http_method", "POST"),
                                  ("subject_id", "456")))
        m = self.sluice.metrics()
        for path in ("route_api.http_method_GET.subject_id",
                     "route_web.http_method_POST.subject_id"):
            self.assertEqual(
                m['sluice_envoy_total_hits_total{domain="example10",'
                  'descriptor="%s"}' % path], 1, path)

    def test_example11_share_threshold(self):
        for _ in range(5):
            self.ok("example11", desc(("files", "files/a.pdf")))
            self.ok("example11", desc(("files", "files/b.csv")))
        self.over("example11", desc(("files", "files/c.txt")))
        for _ in range(10):
            self.ok("example11",
                    desc(("files_no_share", "files_no_share/a.pdf")))
        self.over("example11", desc(("files_no_share",
                                     "files_no_share/a.pdf")))
        self.ok("example11", desc(("files_no_share",
                                   "files_no_share/b.csv")))


class Protocol(Base):
    def test_answer_is_proto3_json(self):
        r = self.rl("messaging", desc(("to_number", "1")))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-type"), "application/json")
        self.assertEqual(r.json(), {
            "overallCode": "OK",
            "statuses": [{"code": "OK",
                          "currentLimit": {"requestsPerUnit": 100,
                                           "unit": "DAY"},
                          "limitRemaining": 99,
                          # 1 token of a 100/day bucket: 864 s.
                          "durationUntilReset": "864s"}]})

    def test_original_field_names_and_string_integers(self):
        s = self.ok("messaging", desc(("to_number", "2"), hits_addend="3"),
                    hits_addend=1)
        self.assertEqual(s["statuses"][0]["limitRemaining"], 97)
        s = self.ok("messaging", desc(("to_number", "2"), hitsAddend=2))
        self.assertEqual(s["statuses"][0]["limitRemaining"], 95)
        s = self.ok("messaging", desc(("to_number", "2")), hitsAddend=5)
        self.assertEqual(s["statuses"][0]["limitRemaining"], 90)

    def test_request_supplied_limit(self):
        d = desc(("anything", "x"),
                 limit={"requests_per_unit": 2, "unit": "HOUR"})
        self.ok("messaging", d)
        s = self.ok("messaging", d)
        self.assertEqual(s["statuses"][0]["currentLimit"],
                         {"requestsPerUnit": 2, "unit": "HOUR"})
        self.over("messaging", d)

    def test_unknown_domain_is_ok(self):
        s = self.ok("nobody", desc(("to_number", "1")))
        self.assertEqual(s["statuses"], [{"code": "OK"}])

    def test_bad_requests_get_400(self):
        bad = [
            "not json",
            "[]",
            '{"domain": "messaging"}',
            '{"domain": "", "descriptors": [{"entries": []}]}',
            '{"domain": "messaging", "descriptors": [{"entries": []}],'
            ' "colour": 1}',
            '{"domain": "messaging", "descriptors": [{"entries": []}],'
            ' "hitsAddend": 1, "hits_addend": 2}',
            '{"domain": "messaging", "descriptors": [{"entries":'
            ' [{"key": 1, "value": "x"}]}]}',
            '{"domain": "messaging", "descriptors": [{"entries": [],'
            ' "limit": {"requestsPerUnit": 1, "unit": "FORTNIGHT"}}]}',
            '{"domain": "messaging", "descriptors": [{"entries": []}],'
            ' "hitsAddend": -1}',
        ]
        for body in bad:
            r = self.sluice.request("POST", "/json", None, body)
            self.assertEqual(r.status, 400, body)
        # Any method, as envoyproxy/ratelimit: the body decides.
        r = self.sluice.request("GET", "/json")
        self.assertEqual(r.status, 400)
        r = self.sluice.request("GET", "/json", None,
                                '{"domain": "messaging", "descriptors":'
                                ' [{"entries": [{"key": "to_number",'
                                ' "value": "9"}]}]}')
        self.assertEqual(r.status, 200)
        # Still answering.
        self.ok("messaging", desc(("to_number", "1")))

    def test_a_nul_in_a_value_is_refused(self):
        # "a\u0000x" and "a\u0000y" must not both be read as "a".
        for body in [
                '{"domain": "messaging", "descriptors": [{"entries":'
                ' [{"key": "to_number", "value": "1\\u0000x"}]}]}',
                '{"domain": "messaging", "descriptors": [{"entries":'
                ' [{"key": "to\\u0000number", "value": "1"}]}]}',
                '{"domain": "mess\\u0000aging", "descriptors":'
                ' [{"entries": [{"key": "to_number", "value": "1"}]}]}']:
            r = self.sluice.request("POST", "/json", None, body)
            self.assertEqual(r.status, 400, body)
        self.ok("messaging", desc(("to_number", "1")))

    def test_the_descriptor_cap_is_the_engines_and_named(self):
        many = [desc(("k", str(i))) for i in range(257)]
        r = self.rl("nowhere", *many)
        self.assertEqual(r.status, 400, r)
        self.assertIn(b"257 descriptors in one request; at most 256", r.body)
        self.assertEqual(self.rl("nowhere", *many[:256]).status, 200)
        wide = desc(*[("k%d" % i, "v") for i in range(65)])
        r = self.rl("nowhere", wide)
        self.assertEqual(r.status, 400, r)
        self.assertIn(b"descriptor 0 has 65 entries; at most 64", r.body)

    def test_healthcheck(self):
        r = self.sluice.request("GET", "/healthcheck")
        self.assertEqual((r.status, r.body), (200, b"OK"))


class Headers(Base):
    settings = ("  response_headers: true\n"
                "  header_names: {limit: X-RateLimit-Limit, remaining: "
                "X-RateLimit-Remaining, reset: X-RateLimit-Reset}\n")

    def test_headers_of_the_nearest_limit(self):
        s = self.ok("messaging", desc(("message_type", "marketing"),
                                      ("to_number", "1")),
                    desc(("to_number", "1")))
        h = {x["key"]: x["value"] for x in s["responseHeadersToAdd"]}
        self.assertEqual(h["X-RateLimit-Limit"], "5")
        self.assertEqual(h["X-RateLimit-Remaining"], "4")
        # One token of a 5/day bucket: 17280 s until full.
        self.assertEqual(h["X-RateLimit-Reset"], "17280")
        # The three, as envoyproxy/ratelimit: no config name leaks.
        self.assertEqual(len(h), 3)


class JsonLog(Base):
    """log: {format: json, level}: every line one JSON object with
    envoyproxy/ratelimit's fields (LOG_FORMAT=json); lines below the level
    are not written, and a reload changes both."""
    files = {"messaging.yaml": EXAMPLES["messaging.yaml"],
             "notes.txt": "not a config\n"}
    settings = ""

    def config(self, extra=""):
        return Base.config(self, extra) + "log: {format: json}\n"

    def lines(self):
        return [json.loads(ln) for ln in self.sluice.log().splitlines()
                if ln.strip()]

    def test_every_line_is_json_and_the_level_filters(self):
        ls = self.lines()  # each parses, or this fails
        self.assertTrue(ls)
        for ln in ls:
            self.assertEqual(set(ln), {"@timestamp", "level", "@message"})
        self.assertIn({"level": "info", "@message":
                       "envoy.config_dir: skipped %s: not a .yaml or .yml "
                       "file" % os.path.join(self.env.dir, "notes.txt")},
                      [{"level": ln["level"], "@message": ln["@message"]}
                       for ln in ls])
        # level: warn -- an info line (a skipped file) is no longer written.
        self.sluice.write_config(self.config().replace(
            "log: {format: json}", "log: {format: json, level: warn}"))
        before = self.sluice.metrics().get(
            'sluice_config_reloads_total{result="ok",trigger="sighup"}', 0)
        self.sluice.signal(signal.SIGHUP)
        self.assertTrue(harness.wait_until(lambda: self.sluice.metrics().get(
            'sluice_config_reloads_total{result="ok",trigger="sighup"}',
            0) > before, 20))
        n = len(self.lines())
        self.env.write("more.txt", "not a config either\n")
        self.env.write("more.yaml", "domain: more\ndescriptors:\n"
                       "  - key: k\n    rate_limit: {unit: hour, "
                       "requests_per_unit: 1}\n")
        self.assertTrue(harness.wait_until(
            lambda: self.rl("more", desc(("k", "v"))).json().get(
                "statuses", [{}])[0].get("currentLimit"), 30))
        later = self.lines()[n:]
        self.assertEqual([ln for ln in later if ln["level"] == "info"], [])


class RlConfig(Base):
    """GET /rlconfig, an admin endpoint: the loaded limits, one line each,
    as envoyproxy/ratelimit's debug page lists them."""
    files = {"messaging.yaml": EXAMPLES["messaging.yaml"]}

    def config(self, extra=""):
        return Base.config(self, extra) + "admin: {token: \"%s\"}\n" % (
            "t" * 32)

    def test_lists_each_limit_behind_the_admin_token(self):
        r = self.sluice.request("GET", "/rlconfig")
        self.assertEqual(r.status, 401)
        r = self.sluice.request("GET", "/rlconfig",
                                {"Authorization": "Bearer " + "t" * 32})
        self.assertEqual(r.status, 200)
        self.assertEqual(
            r.body.decode().splitlines(),
            ["messaging.message_type_marketing.to_number: unit=DAY "
             "requests_per_unit=5, shadow_mode: false, quota_mode: false",
             "messaging.to_number: unit=DAY requests_per_unit=100, "
             "shadow_mode: false, quota_mode: false"])


class StatsD(Base):
    """envoy.statsd: the counts, in envoyproxy/ratelimit's StatsD names,
    sent as deltas over UDP to an agent (here a socket of the test's own
    on loopback), DogStatsD tags appended."""
    files = {"messaging.yaml": EXAMPLES["messaging.yaml"]}

    def setUp(self):
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.addCleanup(self.udp.close)
        Base.setUp(self)

    def config(self, extra=""):
        return Base.config(self, extra) + (
            "  statsd: {addr: \"127.0.0.1:%d\", prefix: \"prod.\", "
            "flush_ms: 200, dogstatsd: true, tags: {env: test}}\n"
            % self.udp.getsockname()[1])

    def received(self, want, timeout=30):
        """The counter lines received until `want` (a dict name -> total)
        is reached; the totals."""
        got = {}
        deadline = time.monotonic() + timeout
        while any(got.get(k, 0) < v for k, v in want.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.udp.settimeout(left)
            try:
                data = self.udp.recv(65536).decode()
            except socket.timeout:
                break
            for line in data.splitlines():
                name, rest = line.split(":", 1)
                n, kind, tags = rest.split("|")
                self.assertEqual((kind, tags), ("c", "#env:test"))
                got[name] = got.get(name, 0) + int(n)
        return got

    def test_counts_arrive_as_deltas_in_ratelimit_names(self):
        for _ in range(3):
            self.ok("messaging", desc(("to_number", "1")))
        self.ok("nowhere", desc(("k", "v")))
        want = {"prod.ratelimit.service.rate_limit.messaging.to_number."
                "total_hits": 3,
                "prod.ratelimit.service.rate_limit.messaging.to_number."
                "within_limit": 3,
                "prod.ratelimit.service.rate_limit.nowhere."
                "domain_not_found": 1}
        got = self.received(want)
        for k, v in want.items():
            self.assertEqual(got.get(k), v, got)
        # Deltas: two more hits arrive as 2, not as the total of 5.
        self.ok("messaging", desc(("to_number", "1")))
        self.ok("messaging", desc(("to_number", "1")))
        k = ("prod.ratelimit.service.rate_limit.messaging.to_number."
             "total_hits")
        self.assertEqual(self.received({k: 2}).get(k), 2)


class IetfHeaders(Base):
    settings = "  ietf_headers: true\n"

    def test_policy_named_without_descriptor_values(self):
        s = self.ok("messaging", desc(("message_type", "marketing"),
                                      ("to_number", "1")))
        h = {x["key"]: x["value"] for x in s["responseHeadersToAdd"]}
        self.assertEqual(h, {"RateLimit-Policy": '"default";q=5;w=86400',
                             "RateLimit": '"default";r=4;t=17280'})


if __name__ == "__main__":
    unittest.main(verbosity=2)
