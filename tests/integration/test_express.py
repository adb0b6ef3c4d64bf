#!/usr/bin/env python3
"""examples/express: the Express middleware calling sluice's /v1/take.

Installs the example's dependencies with `npm ci` when node_modules is
missing (skipped, with a message, only when the npm registry cannot be
reached), then runs the real app against a real `sluice serve`.
"""
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

EXAMPLE = os.path.join(harness.SRC, "examples", "express")

CONFIG = """
rules:
  - name: api
    key: ["header:x-user-id", "ip"]
    limits: [{capacity: 3, rate: 1/min}]
"""

NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT",
                  "ECONNRESET", "ENETUNREACH", "EHOSTUNREACH",
                  "network", "socket hang up")


def install():
    """npm ci, unless express is already installed."""
    if os.path.exists(os.path.join(EXAMPLE, "node_modules", "express",
                                   "package.json")):
        return
    npm = shutil.which("npm")
    if not npm or not shutil.which("node"):
        raise AssertionError("node and npm are required (scripts/deps)")
    try:
        out = subprocess.run([npm, "ci", "--no-audit", "--no-fund"],
                             cwd=EXAMPLE, capture_output=True, text=True,
                             timeout=300)
    except subprocess.TimeoutExpired:
        raise unittest.SkipTest("npm ci timed out: the npm registry "
                                "cannot be reached")
    if out.returncode != 0:
        text = out.stdout + out.stderr
        if any(e in text for e in NETWORK_ERRORS):
            raise unittest.SkipTest("npm cannot reach the registry; "
                                    "skipping the Express example:\n"
                                    + text[-500:])
        raise AssertionError("npm ci failed:\n" + text)


class App(harness.Proc):
    def __init__(self, sluice_port, rule="api"):
        self.port = harness.free_port()
        env = dict(os.environ, PORT=str(self.port), SLUICE_RULE=rule,
                   SLUICE_URL="http://127.0.0.1:%d" % sluice_port)
        super().__init__([shutil.which("node"), "app.js"], env=env,
                         cwd=EXAMPLE)
        harness.wait_for_port(self.port, proc=self)

    def request(self, method, path, headers=None, body=None):
        return harness.request(self.port, method, path, headers, body)


class Express(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        install()

    def test_middleware_limits_and_answers_429(self):
        with Sluice(CONFIG) as s, App(s.port) as app:
            alice = {"x-user-id": "alice"}
            for remaining in ("2", "1", "0"):
                r = app.request("GET", "/", alice)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json(), {"hello": "alice"})
                self.assertEqual(r.header("x-ratelimit-limit"), "3")
                self.assertEqual(r.header("x-ratelimit-remaining"),
                                 remaining)
                self.assertEqual(r.header("ratelimit-policy"),
                                 '"api";q=3;w=180')
            r = app.request("GET", "/", alice)
            self.assertEqual(r.status, 429)
            self.assertTrue(r.header("content-type")
                            .startswith("application/json"))
            body = r.json()
            self.assertEqual(body["error"], "rate_limited")
            self.assertEqual(body["policy"], "api")
            self.assertTrue(0 < body["retry_after_ms"] <= 60000)
            self.assertEqual(r.header("retry-after"), "60")
            self.assertEqual(r.header("x-ratelimit-remaining"), "0")
            self.assertIsNotNone(r.header("ratelimit"))
            # the app's routes are not reached when limited
            r = app.request("POST", "/api/upload", alice, "x")
            self.assertEqual(r.status, 429)
            # another user has a bucket of their own
            r = app.request("POST", "/api/upload", {"x-user-id": "bob"}, "x")
            self.assertEqual(r.status, 201)
            # /v1/take shares its buckets with /v1/check: alice is
            # limited there too
            r = s.request("GET", "/v1/check", alice)
            self.assertEqual(r.status, 429)

    def test_fails_open_when_sluice_is_down(self):
        s = Sluice(CONFIG)
        try:
            app = App(s.port)
        finally:
            s.stop()
        with app:
            r = app.request("GET", "/", {"x-user-id": "carol"})
            self.assertEqual(r.status, 200)
            self.assertIsNone(r.header("x-ratelimit-limit"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
