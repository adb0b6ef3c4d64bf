#!/usr/bin/env python3
"""`sluice serve` over real sockets: endpoints, headers, bad input,
keep-alive and pipelining, metrics, and rules.  Reloads, drain, idle
connections, a misbehaving client and the command line: test_serve_ops.py.

Every test starts its own `sluice serve` on a free loopback port (see
harness.py) and stops it.  Bounds on counts are exact given the elapsed
time measured around the requests; nothing asserts on speed.
"""
import json
import math
import os
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402
from serve_helpers import check, spend_until_refused, user  # noqa: E402


RATE_LIMIT_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining",
                      "x-ratelimit-reset", "ratelimit-policy", "ratelimit")

TWO_RULES = """
rules:
  - name: tight
    key: ["header:x-user-id"]
    limits: [{capacity: 2, rate: 1/min}]
  - name: loose
    key: ["header:x-user-id"]
    limits: [{capacity: 5, rate: 1/min}]
"""

SHADOW = """
rules:
  - name: enforced
    key: ["header:x-user-id"]
    limits: [{capacity: 100, rate: 1/min}]
  - name: trial
    shadow: true
    key: ["header:x-user-id"]
    limits: [{capacity: 1, rate: 1/min}]
"""

UPLOAD = """
rules:
  - name: upload
    match: {methods: [POST], path: "/api/upload"}
    key: ["header:x-user-id"]
    cost: 10
    tiers:
      header: x-user-tier
      default: anonymous
      limits:
        anonymous: [{capacity: 20, rate: 20/min}]
        paid: [{capacity: 2000, rate: 2000/min}]
"""

FLOOD = """
store: {memory: {max_keys: 500}}
rules:
  - name: per-user
    key: ["header:x-user-id"]
    limits: [{capacity: 10, rate: 1/min}]
"""

UNTRUSTED = """
trusted_proxies: []
"""

class ClassicPolicy(unittest.TestCase):
    """No config: capacity 100, refill 2/s, key x-user-id else client IP."""

    @classmethod
    def setUpClass(cls):
        cls.s = Sluice()

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def test_burst_allows_capacity_plus_refill_then_429(self):
        c = self.s.client()
        t0 = time.monotonic()
        statuses = [c.request("GET", "/v1/check",
                              user("burst-user"))
                    for _ in range(150)]
        elapsed = time.monotonic() - t0
        c.close()
        allowed = sum(1 for r in statuses if r.status == 200)
        # 100 at once, plus 2/s refilled while the burst lasted.
        self.assertGreaterEqual(allowed, 100)
        self.assertLessEqual(allowed, 100 + math.floor(elapsed * 2) + 1)
        for r in statuses:
            self.assertIn(r.status, (200, 429))
            for h in RATE_LIMIT_HEADERS:
                self.assertIsNotNone(r.header(h), h)
            if r.status == 429:
                self.assertGreaterEqual(int(r.header("retry-after")), 1)
                self.assertEqual(r.header("content-type"),
                                 "application/json")

    def test_first_answer_headers_exact(self):
        r = check(self.s, "fresh-user")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("x-ratelimit-limit"), "100")
        self.assertEqual(r.header("x-ratelimit-remaining"), "99")
        self.assertEqual(r.header("x-ratelimit-reset"), "1")
        self.assertEqual(r.header("ratelimit-policy"),
                         '"default";q=100;w=50')
        self.assertEqual(r.header("ratelimit"), '"default";r=99;t=1')
        self.assertIsNone(r.header("retry-after"))
        self.assertEqual(r.body, b"")
        self.assertRegex(r.header("date"),
                         r"^[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} "
                         r"\d\d:\d\d:\d\d GMT$")

    def test_limited_answer_headers_and_body(self):
        r = spend_until_refused(self.s, "limited-user")
        self.assertEqual(r.status, 429)
        self.assertEqual(r.header("x-ratelimit-remaining"), "0")
        self.assertEqual(r.header("retry-after"), "1")
        ms = int(r.header("x-ratelimit-retry-after-ms"))
        self.assertTrue(1 <= ms <= 500, ms)
        body = r.json()
        self.assertEqual(body, {"error": "rate_limited",
                                "retry_after_ms": ms, "policy": "default"})
        self.assertEqual(r.header("ratelimit"),
                         '"default";r=0;t=%s' % r.header("x-ratelimit-reset"))

    def test_deny_status_403_for_auth_request(self):
        r = spend_until_refused(self.s, "nginx-user",
                                path="/v1/check?deny_status=403")
        self.assertEqual(r.status, 403)
        self.assertEqual(r.json()["error"], "rate_limited")
        self.assertIsNotNone(r.header("retry-after"))
        r = self.s.request("GET", "/v1/check?deny_status=429",
                           user("nginx-user"))
        self.assertEqual(r.status, 429)

    def test_deny_status_other_values_are_400_naming_it(self):
        r = self.s.request("GET", "/v1/check?deny_status=500")
        self.assertEqual(r.status, 400)
        self.assertEqual(r.json()["field"], "deny_status")

    def test_head_and_any_method_are_checked(self):
        r = check(self.s, "head-user", method="HEAD")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("x-ratelimit-remaining"), "99")
        r = check(self.s, "head-user", method="DELETE")
        self.assertEqual(r.header("x-ratelimit-remaining"), "98")

    def test_client_ip_is_the_key_without_user_header(self):
        # The test's peer is 127.0.0.1, trusted by default, so X-Real-IP
        # picks the bucket.
        a = self.s.request("GET", "/v1/check", {"x-real-ip": "192.0.2.1"})
        b = self.s.request("GET", "/v1/check", {"x-real-ip": "192.0.2.1"})
        c = self.s.request("GET", "/v1/check", {"x-real-ip": "192.0.2.2"})
        self.assertEqual(int(a.header("x-ratelimit-remaining")) - 1,
                         int(b.header("x-ratelimit-remaining")))
        self.assertEqual(c.header("x-ratelimit-remaining"), "99")

    def test_take_adhoc_limit(self):
        body = {"key": "adhoc-1", "capacity": 3, "rate": "1/min"}
        answers = [self.s.request("POST", "/v1/take", {}, json.dumps(body))
                   for _ in range(4)]
        self.assertEqual([a.status for a in answers], [200, 200, 200, 429])
        first = answers[0].json()
        self.assertEqual(first["allowed"], True)
        self.assertEqual(first["limit"], 3)
        self.assertEqual(first["remaining"], 2)
        self.assertEqual(first["retry_after_ms"], 0)
        self.assertTrue(59000 < first["reset_ms"] <= 60000)
        last = answers[3].json()
        self.assertEqual(last["allowed"], False)
        self.assertEqual(last["remaining"], 0)
        self.assertTrue(50000 < last["retry_after_ms"] <= 60000)
        self.assertTrue(170000 < last["reset_ms"] <= 180000)
        self.assertEqual(answers[3].header("ratelimit-policy"),
                         '"adhoc";q=3;w=180')
        self.assertEqual(answers[3].header("retry-after"),
                         str(math.ceil(last["retry_after_ms"] / 1000)))

    def test_take_max_wait_ms_reserves_a_turn(self):
        """max_wait_ms: a request over the limit is given its turn
        (wait_ms) instead of a refusal, one refill after the one before;
        a turn past max_wait_ms is refused and charges nothing."""
        def take(max_wait_ms):
            r = self.s.request("POST", "/v1/take", {}, json.dumps(
                {"key": "queue-1", "capacity": 1, "rate": "1/min",
                 "max_wait_ms": max_wait_ms}))
            return r, r.json()

        waits = []
        for _ in range(3):
            r, body = take(200000)
            self.assertEqual(r.status, 200, body)
            self.assertEqual(body["allowed"], True)
            self.assertEqual(body["retry_after_ms"], 0)
            waits.append(body["wait_ms"])
        # Each turn a minute after the one before (less what elapsed
        # between the requests: a busy machine may take seconds).
        for want, got in zip([0, 60000, 120000], waits):
            self.assertTrue(want - 30000 < got <= want, waits)
        r, body = take(100000)
        self.assertEqual(r.status, 429, body)
        self.assertEqual(body["allowed"], False)
        self.assertTrue(150000 < body["wait_ms"] <= 180000, body)
        self.assertTrue(50000 < body["retry_after_ms"] <= 80000, body)
        self.assertEqual(r.header("retry-after"),
                         str(math.ceil(body["retry_after_ms"] / 1000)))
        # Nothing was charged: the next turn is still three minutes on.
        r, body = take(200000)
        self.assertEqual(r.status, 200, body)
        self.assertTrue(150000 < body["wait_ms"] <= 180000, body)
        # A rule's bucket too, shared with /v1/check: a reservation of
        # what is left waits for nothing.
        r = self.s.request("POST", "/v1/take", {}, json.dumps(
            {"rule": "default", "key": "queue-rule", "cost": 100,
             "max_wait_ms": 0}))
        self.assertEqual((r.status, r.json()["wait_ms"]), (200, 0))
        r = self.s.request("POST", "/v1/take", {}, json.dumps(
            {"rule": "default", "key": "queue-rule", "max_wait_ms": 0}))
        self.assertEqual(r.status, 429)
        self.assertTrue(0 < r.json()["wait_ms"] <= 500, r.json())
        for bad in (-1, "5", 1.5, 2 ** 40):
            r = self.s.request("POST", "/v1/take", {}, json.dumps(
                {"key": "queue-2", "capacity": 1, "rate": "1/s",
                 "max_wait_ms": bad}))
            self.assertEqual(r.status, 400, bad)
            self.assertEqual(r.json()["field"], "max_wait_ms")

    def test_take_numeric_rate_and_cost(self):
        r = self.s.request("POST", "/v1/take", {}, json.dumps(
            {"key": "adhoc-2", "capacity": 10, "rate": 2, "cost": 4}))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["remaining"], 6)

    def test_take_rule_shares_the_bucket_with_check(self):
        r = self.s.request("POST", "/v1/take", {}, json.dumps(
            {"rule": "default", "key": "shared-user", "cost": 5}))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["remaining"], 95)
        r = check(self.s, "shared-user")
        self.assertEqual(r.header("x-ratelimit-remaining"), "94")

    def test_take_long_adhoc_keys_stay_apart(self):
        # 400-byte keys (the most a caller may send) that differ in one
        # byte deep inside are two buckets, not one: the store key of a
        # long key is its hash, never bytes cut or overwritten.
        for at in (150, 272, 399):
            a = "a" * at + "X" + "a" * (399 - at)
            b = "a" * at + "Y" + "a" * (399 - at)
            for key in (a, b):
                r = self.s.request("POST", "/v1/take", {}, json.dumps(
                    {"key": key, "capacity": 1, "rate": "1/h"}))
                self.assertEqual(r.status, 200, (at, key[at]))
            r = self.s.request("POST", "/v1/take", {}, json.dumps(
                {"key": a, "capacity": 1, "rate": "1/h"}))
            self.assertEqual(r.status, 429)
        # A key that looks like a hash is not one.
        for key in ("~" + "0" * 64, "~x"):
            r = self.s.request("POST", "/v1/take", {}, json.dumps(
                {"key": key, "capacity": 1, "rate": "1/h"}))
            self.assertEqual(r.status, 200)

    def test_take_bad_input_names_the_field(self):
        cases = [
            ("{", "body"),
            ("[1]", "body"),
            ('{"capacity": 3, "rate": "1/s"}', "key"),
            ('{"key": 7, "capacity": 3, "rate": "1/s"}', "key"),
            ('{"key": "", "capacity": 3, "rate": "1/s"}', "key"),
            ('{"key": "k", "rate": "1/s"}', "capacity"),
            ('{"key": "k", "capacity": "x", "rate": "1/s"}', "capacity"),
            ('{"key": "k", "capacity": 0, "rate": "1/s"}', "capacity"),
            ('{"key": "k", "capacity": 3}', "rate"),
            ('{"key": "k", "capacity": 3, "rate": "fast"}', "rate"),
            ('{"key": "k", "capacity": 3, "rate": "1/s", "cost": -1}',
             "cost"),
            ('{"key": "k", "capacity": 3, "rate": "1/s", "cost": 4}',
             "cost"),
            ('{"rule": "nope", "key": "k"}', "rule"),
            ('{"rule": 5, "key": "k"}', "rule"),
            # Strict fields: a typo is not a silent default cost of 1,
            # and a rule's limits cannot be swapped for the caller's.
            ('{"key": "k", "capacity": 3, "rate": "1/s", "cots": 10}',
             "cots"),
            ('{"rule": "default", "key": "k", "cots": 10}', "cots"),
            ('{"rule": "default", "key": "k", "capacity": 1000000}',
             "capacity"),
            ('{"rule": "default", "key": "k", "rate": "1000/s"}', "rate"),
            ('{"key": "k", "capacity": 3, "rate": "1/s", "tier": "x"}',
             "tier"),
        ]
        for body, field in cases:
            r = self.s.request("POST", "/v1/take", {}, body)
            self.assertEqual(r.status, 400, body)
            self.assertEqual(r.header("content-type"), "application/json")
            self.assertEqual(r.json()["field"], field, body)

    def test_unknown_path_is_404(self):
        r = self.s.request("GET", "/nope")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json()["error"], "not_found")

    def test_wrong_method_is_405_with_allow(self):
        r = self.s.request("GET", "/v1/take")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("allow"), "POST")
        r = self.s.request("POST", "/metrics", {}, "")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("allow"), "GET, HEAD")

    def test_malformed_request_is_400(self):
        out = harness.raw(self.s.port, b"GARBAGE / HTTP/1.1\r\n\r\n")
        self.assertEqual([r.status for r in out], [400])
        out = harness.raw(self.s.port, b"GET / HTTP/1.1\r\nbad header\r\n\r\n")
        self.assertEqual([r.status for r in out], [400])
        out = harness.raw(self.s.port,
                          b"POST /v1/take HTTP/1.1\r\nContent-Length: x\r\n\r\n")
        self.assertEqual([r.status for r in out], [400])

    def test_what_http11_forbids_is_refused_and_closes(self):
        # Each would be followed by another request on the connection if
        # the server kept it open: one answer means it closed.
        after = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        cases = [
            (b"GET /v1/check HTTP/1.1\r\nx-user-id: nohost\r\n\r\n", 400),
            (b"GET /v1/check HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            (b"GET /v1/check HTTP/1.1\r\nHost: x\r\n"
             b"x-user-id : space\r\n\r\n", 400),
            (b"GET /v1/check HTTP/1.1\r\nHost: x\r\nx-user-id: a\r\n"
             b" b\r\n\r\n", 400),
            (b"POST /v1/take HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
            (b"GET /v1/check HTTP/2.0\r\nHost: x\r\n\r\n", 505),
            (b"GET /v1/check HTTP/1.2\r\nHost: x\r\n\r\n", 505),
            (b"GET /v1/check HTTP/0.9\r\n\r\n", 505),
            (b"GET /v1/check?deny_status=500 HTTP/1.1\r\nHost: x\r\n\r\n",
             400),
            (b"POST /v1/take HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
             b"\r\n{x}", 400),
        ]
        for req, status in cases:
            out = harness.raw(self.s.port, req + after)
            self.assertEqual([r.status for r in out], [status], req)
            self.assertEqual(out[0].header("connection"), "close", req)
        # "x-user-id : v" never became anyone's key.
        self.assertEqual(check(self.s, "space").header(
            "x-ratelimit-remaining"), "99")

    def test_absolute_form_target_is_routed_by_its_path(self):
        out = harness.raw(
            self.s.port,
            b"GET http://127.0.0.1/v1/check?deny_status=403 HTTP/1.1\r\n"
            b"Host: elsewhere\r\nx-user-id: absolute\r\n\r\n"
            b"GET https://h:1/v1/check HTTP/1.1\r\nHost: h\r\n"
            b"x-user-id: absolute\r\nConnection: close\r\n\r\n")
        self.assertEqual([r.status for r in out], [200, 200])
        self.assertEqual([r.header("x-ratelimit-remaining") for r in out],
                         ["99", "98"])

    def test_headers_too_large_is_431(self):
        big = b"x-filler: " + b"a" * 9000 + b"\r\n"
        out = harness.raw(self.s.port,
                          b"GET /v1/check HTTP/1.1\r\n" + big + b"\r\n")
        self.assertEqual([r.status for r in out], [431])
        many = b"".join(b"x-h%d: v\r\n" % i for i in range(100))
        out = harness.raw(self.s.port,
                          b"GET /v1/check HTTP/1.1\r\n" + many + b"\r\n")
        self.assertEqual([r.status for r in out], [431])

    def test_body_too_large_is_413(self):
        body = b"{" + b" " * 20000 + b"}"
        out = harness.raw(self.s.port,
                          b"POST /v1/take HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.assertEqual([r.status for r in out], [413])
        chunk = b"%x\r\n%s\r\n" % (len(body), body)
        out = harness.raw(self.s.port,
                          b"POST /v1/take HTTP/1.1\r\nHost: x\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n" + chunk + b"0\r\n\r\n")
        self.assertEqual([r.status for r in out], [413])

    def test_pipelined_requests_answer_in_order(self):
        reqs = b"".join(
            b"GET /v1/check HTTP/1.1\r\nHost: x\r\nx-user-id: pipe\r\n"
            b"x-real-ip: 10.0.0.9\r\n\r\n"
            for _ in range(3))
        reqs += b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        reqs += (b"POST /v1/take HTTP/1.1\r\nHost: x\r\nContent-Length: 47\r\n"
                 b"Connection: close\r\n\r\n"
                 b'{"rule":"default","key":"pipe","cost":0}       ')
        out = harness.raw(self.s.port, reqs)
        self.assertEqual([r.status for r in out], [200, 200, 200, 200, 200])
        self.assertEqual([r.header("x-ratelimit-remaining") for r in out[:3]],
                         ["99", "98", "97"])
        self.assertEqual(out[3].json(), {"status": "ok"})
        self.assertEqual(out[4].json()["remaining"], 97)

    def test_keep_alive_serves_many_requests_on_one_connection(self):
        s = socket.create_connection(("127.0.0.1", self.s.port), 10)
        f = s.makefile("rb")
        for i in range(20):
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            r = harness.read_response(f)
            self.assertEqual(r.status, 200)
            self.assertIsNone(r.header("connection"))
        s.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        r = harness.read_response(f)
        self.assertEqual(r.header("connection"), "keep-alive")
        s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        r = harness.read_response(f)
        self.assertEqual(r.header("connection"), "close")
        self.assertEqual(f.read(), b"")  # closed after a 1.0 request
        s.close()

    def test_head_limited_answer_has_no_body(self):
        r = spend_until_refused(self.s, "head-429", method="HEAD")
        self.assertEqual(r.status, 429)
        self.assertEqual(r.body, b"")
        self.assertGreater(int(r.header("content-length")), 0)

    def test_take_with_chunked_body_and_expect_continue(self):
        body = b'{"key":"chunky","capacity":2,"rate":"1/min"}'
        out = harness.raw(self.s.port,
                          b"POST /v1/take HTTP/1.1\r\nHost: x\r\n"
                          b"Transfer-Encoding: chunked\r\n"
                          b"Expect: 100-continue\r\n"
                          b"Connection: close\r\n\r\n" +
                          b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        self.assertEqual([r.status for r in out], [100, 200])
        self.assertEqual(out[1].json()["remaining"], 1)

    def test_health_and_readiness(self):
        self.assertEqual(self.s.request("GET", "/healthz").status, 200)
        r = self.s.request("GET", "/readyz")
        self.assertEqual((r.status, r.json()), (200, {"status": "ready"}))

    def test_metrics_content(self):
        check(self.s, "metrics-user")
        m = self.s.metrics()
        self.assertGreaterEqual(
            m['sluice_decisions_total{rule="default",result="allowed"}'], 1)
        self.assertIn('sluice_decisions_total{rule="default",result='
                      '"limited"}', m)
        self.assertIn('sluice_shadow_rejections_total{rule="default"}', m)
        self.assertIn('sluice_store_errors_total{rule="default"}', m)
        self.assertGreaterEqual(m["sluice_memstore_keys"], 1)
        self.assertEqual(m["sluice_memstore_max_keys"], 1000000)
        self.assertIn('sluice_memstore_evictions_total{kind="lossy"}', m)
        self.assertGreaterEqual(m['sluice_request_duration_seconds_bucket'
                                  '{le="+Inf"}'], 1)
        self.assertEqual(m['sluice_request_duration_seconds_bucket'
                           '{le="+Inf"}'],
                         m["sluice_request_duration_seconds_count"])
        self.assertGreaterEqual(m['sluice_http_responses_total{code="200"}'],
                                1)
        r = self.s.request("GET", "/metrics")
        self.assertTrue(r.header("content-type").startswith("text/plain"))

    def test_event_loop_lag_is_measured(self):
        # Each loop thread samples its own lag every 100 ms: the
        # histogram grows while the server idles, and its buckets add up
        # (what tells "Redis slow" from "host busy" on a dashboard).
        def count():
            return self.s.metrics()["sluice_event_loop_lag_seconds_count"]
        first = count()
        self.assertTrue(harness.wait_until(lambda: count() > first, 30, 0.1))
        m = self.s.metrics()
        self.assertEqual(m['sluice_event_loop_lag_seconds_bucket{le="+Inf"}'],
                         m["sluice_event_loop_lag_seconds_count"])
        self.assertGreaterEqual(m["sluice_event_loop_lag_seconds_sum"], 0)


class Rules(unittest.TestCase):

    def test_charged_only_when_every_rule_passes(self):
        with Sluice(TWO_RULES) as s:
            got = [check(s, "u").status for _ in range(3)]
            self.assertEqual(got, [200, 200, 429])
            # The rejected third request charged neither rule: `loose`
            # still has 5 - 2 = 3 tokens.
            r = s.request("POST", "/v1/take", {}, json.dumps(
                {"rule": "loose", "key": "u", "cost": 0}))
            self.assertEqual(r.json()["remaining"], 3)
            # The answer names the most restrictive rule.
            r = check(s, "v")
            self.assertEqual(r.header("ratelimit-policy"),
                             '"tight";q=2;w=120')
            self.assertEqual(r.header("x-ratelimit-remaining"), "1")

    def test_shadow_rule_counts_but_never_rejects(self):
        with Sluice(SHADOW) as s:
            got = [check(s, "sh").status for _ in range(3)]
            self.assertEqual(got, [200, 200, 200])
            m = s.metrics()
            self.assertEqual(m['sluice_shadow_rejections_total'
                               '{rule="trial"}'], 2)
            self.assertEqual(m['sluice_decisions_total{rule="trial",'
                               'result="limited"}'], 2)
            self.assertEqual(m['sluice_decisions_total{rule="enforced",'
                               'result="allowed"}'], 3)

    def test_shadow_only_match_sends_no_ratelimit_headers(self):
        config = """
rules:
  - name: trial
    shadow: true
    match: {path: "/trial"}
    key: ["header:x-user-id"]
    limits: [{capacity: 1, rate: 1/min}]
  - name: enforced
    match: {path: "/api"}
    key: ["header:x-user-id"]
    limits: [{capacity: 100, rate: 1/min}]
"""
        with Sluice(config) as s:
            got = [check(s, "sh", headers={"x-original-uri": "/trial"})
                   for _ in range(3)]
            # The shadow rule is exhausted after one request, and says
            # nothing about it to the client.
            self.assertEqual([r.status for r in got], [200, 200, 200])
            for r in got:
                for h in RATE_LIMIT_HEADERS:
                    self.assertIsNone(r.header(h), h)
            self.assertEqual(s.metrics()['sluice_shadow_rejections_total'
                                         '{rule="trial"}'], 2)
            # An enforcing rule still reports its own.
            r = check(s, "sh", headers={"x-original-uri": "/api"})
            self.assertEqual(r.header("ratelimit-policy"),
                             '"enforced";q=100;w=6000')

    def test_policy_lists_every_limit_of_the_deciding_rule(self):
        config = """
rules:
  - name: api
    key: ["header:x-user-id"]
    limits: [{capacity: 100, rate: 2/s}, {capacity: 5, rate: 5/min}]
"""
        with Sluice(config) as s:
            r = check(s, "pl")
            self.assertEqual(r.header("x-ratelimit-limit"), "5")
            self.assertEqual(r.header("ratelimit-policy"),
                             '"api";q=5;w=60, "api.1";q=100;w=50')
            self.assertEqual(r.header("ratelimit"), '"api";r=4;t=12')

    def test_original_method_uri_cost_and_tier(self):
        with Sluice(UPLOAD) as s:
            hdr = {"x-original-method": "POST",
                   "x-original-uri": "/api/upload?part=1"}
            r = check(s, "up", headers=hdr)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("x-ratelimit-remaining"), "10")
            self.assertEqual(r.header("ratelimit-policy"),
                             '"upload/anonymous";q=20;w=60')
            r = check(s, "up", headers=hdr)
            self.assertEqual(r.header("x-ratelimit-remaining"), "0")
            r = check(s, "up", headers=hdr)
            self.assertEqual(r.status, 429)
            # A GET of the same URI matches no rule: allowed, no headers.
            r = check(s, "up", headers={"x-original-method": "GET",
                                        "x-original-uri": "/api/upload"})
            self.assertEqual(r.status, 200)
            self.assertIsNone(r.header("x-ratelimit-limit"))
            # Envoy ext_authz: the original path after /v1/check.
            r = check(s, "up2", method="POST", path="/v1/check/api/upload")
            self.assertEqual(r.header("x-ratelimit-remaining"), "10")
            # Paid tier.
            hdr["x-user-tier"] = "paid"
            r = check(s, "up3", headers=hdr)
            self.assertEqual(r.header("x-ratelimit-remaining"), "1990")

    def test_only_the_configured_proxy_headers_describe_the_request(self):
        """proxy: names the one pair of headers read; the other proxy
        kind's (which a ForwardAuth proxy passes on from the client) is
        not believed, and the named one on two lines is refused."""
        fwd = {"x-forwarded-method": "POST", "x-forwarded-uri": "/api/upload"}
        orig = {"x-original-method": "GET", "x-original-uri": "/harmless"}
        for kind, charged, ignored in (("nginx", orig, fwd),
                                       ("forward_auth", fwd, orig)):
            with Sluice("proxy: %s\n%s" % (kind, UPLOAD)) as s:
                both = dict(charged, **ignored)
                if kind == "nginx":
                    both.update({"x-original-method": "POST",
                                 "x-original-uri": "/api/upload"})
                r = check(s, "p", headers=both)
                self.assertEqual(r.header("x-ratelimit-remaining"), "10",
                                 kind)
                # The other pair alone picks nothing: no rule applies.
                r = check(s, "p", headers=ignored)
                self.assertEqual(r.status, 200, kind)
                if kind == "nginx":
                    self.assertIsNone(r.header("x-ratelimit-limit"))
                    self.assertTrue(harness.wait_until(
                        lambda: "has x-forwarded-uri but no x-original-uri"
                        in s.log()))
                name = "x-original-uri" if kind == "nginx" else \
                    "x-forwarded-uri"
                line = "%s: /api/upload" % name
                out = harness.raw(s.port, (
                    "GET /v1/check HTTP/1.1\r\nHost: x\r\n"
                    "x-user-id: p\r\n%s\r\n%s: /other\r\n"
                    "Connection: close\r\n\r\n" % (line, name)).encode())
                self.assertEqual(out[0].status, 400, kind)
                self.assertEqual(out[0].json()["field"], name)
        with Sluice("proxy: forward_auth\n" + UPLOAD) as s:
            r = check(s, "q", headers={"x-original-method": "POST",
                                       "x-original-uri": "/api/upload"})
            self.assertIsNone(r.header("x-ratelimit-limit"))
        # Explicit names; envoy reads the check request itself.
        with Sluice("proxy: {method_header: X-M, uri_header: x-u}\n" +
                    UPLOAD) as s:
            r = check(s, "e", headers={"x-m": "POST", "x-u": "/api/upload",
                                       "x-original-uri": "/x"})
            self.assertEqual(r.header("x-ratelimit-remaining"), "10")
        with Sluice("proxy: envoy\n" + UPLOAD) as s:
            r = check(s, "v", method="POST", path="/v1/check/api/upload",
                      headers={"x-original-uri": "/x",
                               "x-forwarded-uri": "/y"})
            self.assertEqual(r.header("x-ratelimit-remaining"), "10")

    def test_spoofed_forwarding_headers_from_untrusted_peer_ignored(self):
        with Sluice(UNTRUSTED) as s:
            a = s.request("GET", "/v1/check", {"x-real-ip": "192.0.2.1"})
            b = s.request("GET", "/v1/check",
                          {"x-forwarded-for": "192.0.2.2"})
            # Both were charged to the TCP peer, 127.0.0.1.
            self.assertEqual(a.header("x-ratelimit-remaining"), "99")
            self.assertEqual(b.header("x-ratelimit-remaining"), "98")

    def test_flood_of_random_keys_stays_within_max_keys(self):
        with Sluice(FLOOD) as s:
            c = s.client()
            for i in range(2000):
                r = c.request("GET", "/v1/check", {"x-user-id": "k%d" % i})
                self.assertEqual(r.status, 200)
            c.close()
            m = s.metrics()
            self.assertLessEqual(m["sluice_memstore_keys"], 500)
            self.assertEqual(m["sluice_memstore_max_keys"], 500)
            self.assertGreaterEqual(
                m['sluice_memstore_evictions_total{kind="lossy"}'] +
                m['sluice_memstore_evictions_total{kind="full"}'], 1500)


if __name__ == "__main__":
    unittest.main(verbosity=2)
