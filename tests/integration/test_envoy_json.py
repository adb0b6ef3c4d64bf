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
- response headers (LIMIT_RESPONSE_HEADERS_ENABLED), metrics per domain
  and descriptor path, reloads (SIGHUP and a changed directory, including
  a ConfigMap-style "..data" symlink swap) that keep the buckets, and a
  bad file at reload rejected naming FILE:LINE.

Limits are per hour or per day, so the seconds a test takes refill
nothing a whole token would show.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

EXAMPLES = {
    # Example 1
    "mongo_cps.yaml": """
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: database
    value: default
    rate_limit:
      unit: hour
      requests_per_unit: 3
""",
    # Example 2
    "messaging.yaml": """
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
""",
    # Example 3
    "edge.yaml": """
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
""",
    # Example 4 (the configuration that matches)
    "example4.yaml": """
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
""",
    # Example 5
    "internal.yaml": """
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
""",
    # Example 6 (per hour here, so the test's seconds refill nothing)
    "example6.yaml": """
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: hour
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: hour
""",
    # Example 7 (per hour)
    "example7.yaml": """
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: hour
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: hour
""",
    # Example 8 (per hour)
    "example8.yaml": """
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: hour
      requests_per_unit: 20
""",
    # Example 9
    "example9.yaml": """
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
""",
    # Example 10
    "example10.yaml": """
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
""",
    # Example 11
    "example11.yaml": """
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  # Without share_threshold, each files_no_share/* match has its own
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
""",
}


def desc(*pairs, **extra):
    d = {"entries": [{"key": k, "value": v} for k, v in pairs]}
    d.update(extra)
    return d


def marketing_limit(sluice):
    """The requests_per_unit sluice's messaging.yaml gives marketing."""
    r = harness.request(sluice.port, "POST", "/json", None,
                        json.dumps({"domain": "messaging",
                                    "descriptors": [desc(
                                        ("message_type", "marketing"),
                                        ("to_number", "1"))]}))
    return r.json()["statuses"][0]["currentLimit"]["requestsPerUnit"]


class EnvoyDir:
    """A directory of envoyproxy/ratelimit YAML files."""

    def __init__(self, files):
        self.root = tempfile.mkdtemp(prefix="sluice-envoy-")
        self.dir = os.path.join(self.root, "config")
        os.mkdir(self.dir)
        for name, text in files.items():
            self.write(name, text)

    def write(self, name, text):
        # name may hold folders ("team/a/x.yaml"): made as needed.
        sub, base = os.path.split(name)
        os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        tmp = os.path.join(self.dir, sub, "." + base + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.dir, name))

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)


class Base(unittest.TestCase):
    files = EXAMPLES
    settings = ""

    def setUp(self):
        self.env = EnvoyDir(self.files)
        self.addCleanup(self.env.remove)
        self.sluice = Sluice(self.config())
        self.addCleanup(self.sluice.stop)

    def config(self, extra=""):
        return "envoy:\n  config_dir: %s\n%s%s" % (self.env.dir,
                                                  self.settings, extra)

    def rl(self, domain, *descriptors, **top):
        body = {"domain": domain, "descriptors": list(descriptors)}
        body.update(top)
        r = self.sluice.request("POST", "/json",
                                {"Content-Type": "application/json"},
                                json.dumps(body))
        return r

    def ok(self, domain, *descriptors, **top):
        r = self.rl(domain, *descriptors, **top)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["overallCode"], "OK")
        return r.json()

    def over(self, domain, *descriptors, **top):
        r = self.rl(domain, *descriptors, **top)
        self.assertEqual(r.status, 429, r)
        self.assertEqual(r.json()["overallCode"], "OVER_LIMIT")
        return r.json()


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


class Reload(Base):
    files = {"messaging.yaml": EXAMPLES["messaging.yaml"]}

    def remaining(self):
        s = self.ok("messaging", desc(("to_number", "1")))
        return s["statuses"][0].get("limitRemaining", 0)

    def reloads(self, result, trigger="config_dir"):
        return self.sluice.metrics().get(
            'sluice_config_reloads_total{result="%s",trigger="%s"}'
            % (result, trigger), 0)

    def test_sighup_keeps_buckets(self):
        self.assertEqual(self.remaining(), 99)
        self.env.write("messaging.yaml", EXAMPLES["messaging.yaml"].replace(
            "requests_per_unit: 5", "requests_per_unit: 6"))
        before = self.reloads("ok", "sighup")
        self.sluice.signal(signal.SIGHUP)
        self.assertTrue(harness.wait_until(
            lambda: self.reloads("ok", "sighup") > before, 20))
        self.assertEqual(self.remaining(), 98)

    def test_changed_directory_reloads_and_keeps_buckets(self):
        self.assertEqual(self.remaining(), 99)
        before = self.reloads("ok")
        self.env.write("more.yaml", "domain: more\ndescriptors:\n"
                       "  - key: k\n    rate_limit: {unit: hour, "
                       "requests_per_unit: 1}\n")
        self.assertTrue(harness.wait_until(
            lambda: self.reloads("ok") > before, 30))
        self.ok("more", desc(("k", "v")))
        self.over("more", desc(("k", "v")))
        self.assertEqual(self.remaining(), 98)
        # The log and the metric say the directory started it, not a
        # SIGHUP.
        self.assertIn("envoy.config_dir changed: reloaded", self.sluice.log())
        self.assertNotIn("SIGHUP", self.sluice.log())
        self.assertEqual(self.reloads("ok", "sighup"), 0)

    def test_nested_folders_are_read_and_skipped_files_named(self):
        # RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/ with folders below,
        # as envoyproxy/ratelimit reads them.
        before = self.reloads("ok")
        self.env.write("team/a/more.yaml", "domain: more\ndescriptors:\n"
                       "  - key: k\n    rate_limit: {unit: hour, "
                       "requests_per_unit: 1}\n")
        self.env.write("team/notes.txt", "not a config\n")
        self.assertTrue(harness.wait_until(
            lambda: self.reloads("ok") > before, 30))
        self.ok("more", desc(("k", "v")))
        self.over("more", desc(("k", "v")))
        self.assertIn("envoy.config_dir: skipped %s: not a .yaml or .yml "
                      "file" % os.path.join(self.env.dir, "team/notes.txt"),
                      self.sluice.log())

    def test_a_file_of_a_trusted_uid_loads(self):
        if os.geteuid() != 0:
            self.skipTest("chown needs root")
        before = self.reloads("error")
        self.env.write("sidecar.yaml", "domain: sidecar\ndescriptors:\n"
                       "  - key: k\n    rate_limit: {unit: hour, "
                       "requests_per_unit: 1}\n")
        os.chown(os.path.join(self.env.dir, "sidecar.yaml"), 65533, 65533)
        # Another user's file is refused (it could rewrite the limits)...
        self.assertTrue(harness.wait_until(
            lambda: self.reloads("error") > before, 30))
        self.assertIn("is owned by uid 65533", self.sluice.log())
        # ... unless that uid is trusted.
        self.sluice.write_config(self.config(
            "  files: {trusted_uids: [65533]}\n"))
        self.assertIn("SIGHUP: reloaded", self.sluice.reload())
        self.ok("sidecar", desc(("k", "v")))
        self.over("sidecar", desc(("k", "v")))

    def test_bad_file_is_rejected_naming_file_and_line(self):
        before = self.reloads("error")
        self.env.write("bad.yaml", "domain: bad\ndescriptors:\n"
                       "  - key: k\n    rate_limit: {unit: fortnight}\n")
        self.assertTrue(harness.wait_until(
            lambda: self.reloads("error") > before, 30))
        path = os.path.join(self.env.dir, "bad.yaml")
        self.assertTrue(harness.wait_until(
            lambda: "%s:4: invalid rate limit unit 'fortnight'" % path
            in self.sluice.log(), 10), self.sluice.log())
        # The running config stays.
        self.assertEqual(self.remaining(), 99)


class ConfigMapSwap(unittest.TestCase):
    """A Kubernetes ConfigMap volume: each file is a symlink through
    "..data", a symlink to a timestamped directory swapped atomically."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="sluice-cm-")
        self.addCleanup(shutil.rmtree, self.root, True)
        self.version(1, "requests_per_unit: 5")
        os.symlink("..v1", os.path.join(self.root, "..data"))
        os.symlink("..data/messaging.yaml",
                   os.path.join(self.root, "messaging.yaml"))
        self.sluice = Sluice("envoy:\n  config_dir: %s\n  watch_ms: 200\n"
                             % self.root)
        self.addCleanup(self.sluice.stop)

    def version(self, n, limit):
        d = os.path.join(self.root, "..v%d" % n)
        os.mkdir(d)
        with open(os.path.join(d, "messaging.yaml"), "w") as f:
            f.write(EXAMPLES["messaging.yaml"].replace(
                "requests_per_unit: 5", limit))

    def limit(self):
        return marketing_limit(self.sluice)

    def test_data_symlink_swap_reloads(self):
        self.assertEqual(self.limit(), 5)
        self.version(2, "requests_per_unit: 7")
        tmp = os.path.join(self.root, "..data_tmp")
        os.symlink("..v2", tmp)
        os.replace(tmp, os.path.join(self.root, "..data"))
        self.assertTrue(harness.wait_until(lambda: self.limit() == 7, 30))


class ChangeDuringReload(unittest.TestCase):
    """A file rewritten while a reload runs is reloaded at the next poll:
    the watcher keeps the stamp taken before the loader read the
    directory, never one taken after (which would describe the new file
    as loaded).  A shim (LD_PRELOAD of tests/tools/slow_stderr.c) holds
    the reload's summary line back 5 s -- the server is then still inside
    the reload, past reading -- and the file is rewritten meanwhile."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-race-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.write(5)
        env = {"LD_PRELOAD": os.path.join(harness.BUILD,
                                          "libslow_stderr.so"),
               "SLOW_STDERR_MATCH": "config_dir changed: reloaded",
               "SLOW_STDERR_MS": "5000",
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
               ":verify_asan_link_order=0"}
        self.sluice = Sluice("envoy:\n  config_dir: %s\n  watch_ms: 100\n"
                             % self.dir, env=env)
        self.addCleanup(self.sluice.stop)

    def write(self, n):
        # A new file swapped in (a new inode, whatever the clock's grain).
        tmp = os.path.join(self.dir, ".messaging.tmp")
        with open(tmp, "w") as f:
            f.write(EXAMPLES["messaging.yaml"].replace(
                "requests_per_unit: 5", "requests_per_unit: %d" % n))
        os.replace(tmp, os.path.join(self.dir, "messaging.yaml"))

    def limit(self):
        return marketing_limit(self.sluice)

    def reloads(self):
        return self.sluice.metrics().get(
            'sluice_config_reloads_total{result="ok",trigger="config_dir"}',
            0)

    def test_file_rewritten_during_a_reload_is_reloaded(self):
        self.assertEqual(self.limit(), 5)
        self.write(7)
        # The reload has read the directory and counted itself; its
        # summary line is held back, so it has not returned yet.
        self.assertTrue(harness.wait_until(lambda: self.reloads() >= 1, 30))
        self.write(9)
        self.assertTrue(harness.wait_until(lambda: self.limit() == 9, 60),
                        self.limit())


class CheckConfig(unittest.TestCase):
    """`sluice check-config DIR` and a config naming a bad directory:
    every error, each FILE:LINE; `sluice serve` refuses to start."""

    def setUp(self):
        self.env = EnvoyDir({
            "a.yaml": "domain: a\ndescriptors:\n  - key: k\n"
                      "    rate_limit: {unit: foo, requests_per_unit: 1}\n",
            "b.yaml": "domain: a\n",
            "c.yaml": "domain: c\ndescriptors:\n  - key: k\n"
                      "    value: v\n  - key: k\n    value: v\n"})
        self.addCleanup(self.env.remove)

    def run_sluice(self, *args):
        return subprocess.run([harness.SLUICE] + list(args),
                              capture_output=True, text=True, timeout=60)

    def test_directory(self):
        r = self.run_sluice("check-config", self.env.dir)
        self.assertEqual(r.returncode, 2)
        d = self.env.dir
        self.assertIn("%s/a.yaml:4: invalid rate limit unit 'foo'" % d,
                      r.stderr)
        self.assertIn("%s/b.yaml:1: duplicate domain 'a'" % d, r.stderr)
        self.assertIn("%s/c.yaml:5: duplicate descriptor composite key "
                      "'c.k_v'" % d, r.stderr)
        self.assertIn("3 errors", r.stderr)
        os.unlink(os.path.join(d, "a.yaml"))
        os.unlink(os.path.join(d, "c.yaml"))
        r = self.run_sluice("check-config", d)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ok (1 domain in 1 file)", r.stdout)

    def test_config_naming_a_bad_directory(self):
        cfg = os.path.join(self.env.root, "sluice.yaml")
        with open(cfg, "w") as f:
            f.write("envoy:\n  config_dir: config\n")  # relative
        r = self.run_sluice("check-config", cfg)
        self.assertEqual(r.returncode, 2)
        self.assertIn("%s/a.yaml:4: " % self.env.dir, r.stderr)
        r = self.run_sluice("serve", "-c", cfg, "--listen",
                            "127.0.0.1:%d" % harness.free_port())
        self.assertEqual(r.returncode, 2)
        self.assertIn("%s/a.yaml:4: " % self.env.dir, r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
