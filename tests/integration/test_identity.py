#!/usr/bin/env python3
"""Whose bucket and which rule, as a client trying to get around them.

Straight to `sluice serve` (the peer, 127.0.0.1, is a trusted proxy as by
default): every spelling of a path meets the path's rule, X-Forwarded-For
lines are one list, and an identity header sent twice picks nothing.  The
same through real nginx is in test_nginx.py.
"""
import hashlib
import math
import os
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

UPLOAD = """
rules:
  - name: upload
    match: {methods: [POST], path: "/api/upload"}
    limits: [{capacity: 2, rate: 1/min}]
  - name: exact
    match: {path: "/v2/Upload", case_sensitive: true, strict_slash: true}
    limits: [{capacity: 2, rate: 1/min}]
"""

PER_IP = """
trusted_proxies: [127.0.0.1/32]
rules:
  - name: per-ip
    key: ip
    limits: [{capacity: 2, rate: 1/min}]
"""

PER_USER = """
rules:
  - name: per-user
    key: ["header:x-user-id", "ip"]
    limits: [{capacity: 2, rate: 1/min}]
"""

# Spellings that nginx, Caddy, Express, Fastify or a Java router hand to
# the handler of /api/upload, and some they do not: one table
# (tests/data/path_spellings.tsv), also read by the matcher's unit test and
# the nginx and Caddy tests.
SPELLINGS = harness.path_spellings()


def raw_check(port, *header_lines):
    """GET /v1/check with header lines given as they go on the wire
    (a name may repeat); returns the response."""
    head = "".join("%s\r\n" % h for h in header_lines)
    out = harness.raw(port, ("GET /v1/check HTTP/1.1\r\nHost: x\r\n%s"
                             "Connection: close\r\n\r\n" % head).encode())
    assert len(out) == 1, out
    return out[0]


class PathSpellings(unittest.TestCase):

    def test_every_spelling_meets_the_rule_once_drained(self):
        with Sluice(UPLOAD) as s:
            c = s.client()

            def upload(path, method="POST"):
                return c.request("GET", "/v1/check", {
                    "x-original-method": method, "x-original-uri": path})
            self.assertEqual([upload("/api/upload").status for _ in
                              range(2)], [200, 200])
            for path, _, _, charged in SPELLINGS:
                r = upload(path)
                self.assertEqual(r.status, 429 if charged else 200, path)
                if charged:
                    self.assertEqual(r.json()["policy"], "upload", path)
            # the path in the check URL itself (Envoy ext_authz prefix)
            r = c.request("POST", "/v1/check/API/upload/")
            self.assertEqual(r.status, 429)
            # not the same handler: not the same rule
            for path in ("/api/uploads", "/api/upload/x", "/api/uploadx.json"):
                self.assertEqual(upload(path).status, 200, path)
            self.assertEqual(upload("/api/upload", "GET").status, 200)
            c.close()

    def test_exact_rules_match_only_their_spelling(self):
        with Sluice(UPLOAD) as s:
            def get(path):
                return s.request("GET", "/v1/check", {"x-original-uri": path})
            self.assertEqual([get("/v2/Upload").status for _ in range(3)],
                             [200, 200, 429])
            for path in ("/v2/upload", "/v2/Upload/", "/V2/UPLOAD"):
                r = get(path)
                self.assertEqual(r.status, 200, path)
                self.assertIsNone(r.header("x-ratelimit-limit"), path)
            # normalisation still applies
            self.assertEqual(get("/x/..//v2/%55pload").status, 429)


class ForwardingHeaders(unittest.TestCase):

    def test_forwarded_for_lines_are_one_list(self):
        """A client's own X-Forwarded-For line, then the proxy's: the
        proxy's entry is the client, whatever the client wrote."""
        with Sluice(PER_IP) as s:
            got = [raw_check(s.port, "X-Forwarded-For: 6.6.6.%d" % i,
                             "X-Forwarded-For: 192.0.2.79").status
                   for i in range(3)]
            self.assertEqual(got, [200, 200, 429])
            # 6.6.6.x were never charged
            r = raw_check(s.port, "X-Forwarded-For: 6.6.6.0")
            self.assertEqual(r.header("x-ratelimit-remaining"), "1")

    def test_two_real_ip_lines_are_refused(self):
        with Sluice(PER_IP) as s:
            # neither line is used: the peer's bucket
            got = [raw_check(s.port, "X-Real-IP: 6.6.6.%d" % i,
                             "X-Real-IP: 192.0.2.80").status
                   for i in range(3)]
            self.assertEqual(got, [200, 200, 429])
            self.assertEqual(raw_check(s.port).status, 429)
            # X-Forwarded-For decides when present
            r = raw_check(s.port, "X-Real-IP: 6.6.6.9", "X-Real-IP: 6.6.6.9",
                          "X-Forwarded-For: 192.0.2.81")
            self.assertEqual(r.header("x-ratelimit-remaining"), "1")
            self.assertEqual(raw_check(s.port, "X-Real-IP: 6.6.6.9")
                             .header("x-ratelimit-remaining"), "1")


TIERS = """
rules:
  - name: tiered
    key: ip
    tiers:
      header: x-tier
      default: free
      limits:
        free: [{capacity: 2, rate: 1/min}]
        paid: [{capacity: 50, rate: 1/min}]
"""


def chunked_check(port, trailer_lines, body=b"ab"):
    """POST /v1/check with a chunked body and trailer fields after it."""
    trailers = "".join("%s\r\n" % t for t in trailer_lines)
    data = (b"POST /v1/check HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + b"%x\r\n" % len(body) + body + b"\r\n0\r\n"
            + trailers.encode() + b"\r\n")
    out = harness.raw(port, data)
    assert len(out) == 1, out
    return out[0]


class Trailers(unittest.TestCase):
    """Only the request head decides: trailer fields after a chunked body
    are never read as headers."""

    def test_a_trailer_address_picks_no_bucket(self):
        with Sluice(PER_IP.replace("capacity: 2", "capacity: 3")) as s:
            got = [chunked_check(s.port, ["X-Real-IP: 6.6.6.%d" % i])
                   .status for i in range(6)]
            # all six were the peer's: capacity 3
            self.assertEqual(got, [200, 200, 200, 429, 429, 429])
            r = raw_check(s.port, "X-Real-IP: 6.6.6.0")
            self.assertEqual(r.header("x-ratelimit-remaining"), "2")

    def test_a_trailer_tier_is_not_believed(self):
        with Sluice(TIERS) as s:
            r = chunked_check(s.port, ["x-tier: paid"])
            self.assertEqual(r.header("x-ratelimit-limit"), "2")
            self.assertEqual(r.header("x-ratelimit-remaining"), "1")


class IdentityHeaders(unittest.TestCase):

    def test_a_repeated_identity_header_picks_no_bucket(self):
        with Sluice(PER_USER) as s:
            # two x-user-id lines: neither; the client's address is charged
            got = [raw_check(s.port, "x-user-id: victim",
                             "x-user-id: mine-%d" % i,
                             "X-Real-IP: 192.0.2.5").status
                   for i in range(3)]
            self.assertEqual(got, [200, 200, 429])
            self.assertEqual(raw_check(s.port, "X-Real-IP: 192.0.2.5")
                             .status, 429)
            # the victim's bucket was never touched
            r = raw_check(s.port, "x-user-id: victim",
                          "X-Real-IP: 192.0.2.6")
            self.assertEqual(r.header("x-ratelimit-remaining"), "1")

    def test_no_identity_drains_another(self):
        """"~" and the SHA-256 of a long or binary identity is the store
        key of that identity; sent as an identity itself it gets its own
        bucket (it is hashed too)."""
        with Sluice(PER_USER) as s:
            for victim in ("v" * 300, "a\tb"):
                forged = "~" + hashlib.sha256(victim.encode()).hexdigest()
                got = [raw_check(s.port, "x-user-id: " + forged).status
                       for _ in range(3)]
                self.assertEqual(got, [200, 200, 429])
                r = raw_check(s.port, "x-user-id: " + victim)
                self.assertEqual(r.status, 200, victim)
                self.assertEqual(r.header("x-ratelimit-remaining"), "1")

    def test_default_policy_has_a_per_address_ceiling(self):
        """No config, no proxy clearing headers: 300 requests from one
        address with invented user ids pass the per-address ceiling
        (200 burst, 4/s), not 300."""
        with Sluice() as s:
            c = s.client()
            t0 = time.monotonic()
            got = [c.request("GET", "/v1/check",
                             {"x-user-id": uuid.uuid4().hex})
                   for _ in range(300)]
            elapsed = time.monotonic() - t0
            c.close()
            allowed = sum(1 for r in got if r.status == 200)
            self.assertGreaterEqual(allowed, 200)
            self.assertLessEqual(allowed, 200 + math.ceil(4 * elapsed) + 1)
            limited = [r for r in got if r.status == 429]
            self.assertEqual(allowed + len(limited), 300)
            self.assertEqual(limited[0].json()["policy"], "default-ip")
            self.assertEqual(limited[0].header("ratelimit-policy"),
                             '"default-ip";q=200;w=50')
            print("\n300 invented user ids, no proxy: %d allowed in %.2f s"
                  % (allowed, elapsed), file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
