#!/usr/bin/env python3
"""examples/express: the app limited in process by the `sluice` package
(memory store, then two instances sharing one real Redis), and the HTTP
variant asking a real `sluice serve`.

Installs the example's dependencies with `npm ci` (express from the npm
registry, the package from bindings/node) when node_modules is missing.
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
    """npm ci, unless express and the package are already installed; the
    addon built once (npm ci's install script builds it)."""
    built = harness.node_addon_mtime()
    if not (os.path.exists(os.path.join(EXAMPLE, "node_modules", "express",
                                        "package.json")) and
            os.path.exists(os.path.join(EXAMPLE, "node_modules", "sluice"))):
        npm = shutil.which("npm")
        if not npm or not shutil.which("node"):
            raise AssertionError("node and npm are required (scripts/deps)")
        out = subprocess.run([npm, "ci", "--prefer-offline", "--no-audit",
                              "--no-fund"],
                             cwd=EXAMPLE, capture_output=True, text=True,
                             timeout=600)
        if out.returncode != 0:
            raise AssertionError("npm ci failed:\n" + out.stdout + out.stderr)
    elif built is not None:
        return
    # npm may hold the package's install script back: build the addon now
    # rather than on the app's first require (within its start-up bound).
    harness.build_node_addon(unless_built_since=built)


class App(harness.Proc):
    def __init__(self, script="app.js", **env):
        full = {k: v for k, v in os.environ.items()
                if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS")}

        def init(port):
            self.port = port
            full.update(env, PORT=str(port))
            harness.Proc.__init__(self, [shutil.which("node"), script],
                                  env=full, cwd=EXAMPLE)
        harness.start_on_free_ports(self, init)

    def request(self, method, path, headers=None, body=None):
        return harness.request(self.port, method, path, headers, body)


# The apps' store timeouts (50 ms to Redis, 200 ms to sluice serve) are
# their production defaults; a test that counts decided answers cannot
# have one of them undecided because the machine is busy (CI runs the
# suite beside CPU-bound loops: a wait of a few hundred ms is ordinary
# there, and a late answer fails open or closed).  A store that is down
# still fails at once: its connection is refused.
DECIDE_TIMEOUT_MS = "5000"


def HttpApp(sluice_port, rule="api"):
    return App("app-http.js", SLUICE_RULE=rule,
               SLUICE_URL="http://127.0.0.1:%d" % sluice_port,
               SLUICE_TIMEOUT_MS=DECIDE_TIMEOUT_MS)


class Express(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        install()

    def test_in_process_memory_store(self):
        with App() as app:
            alice = {"x-user-id": "alice"}
            r = app.request("GET", "/", alice)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json(), {"hello": "alice"})
            self.assertEqual(r.header("x-ratelimit-limit"), "100")
            self.assertEqual(r.header("ratelimit-policy"),
                             '"api";q=100;w=50, "api.2";q=10000;w=86400')
            got = [app.request("POST", "/api/upload", alice, "x").status
                   for _ in range(6)]
            self.assertEqual(got, [201] * 5 + [429])
            r = app.request("POST", "/api/upload", alice, "x")
            self.assertEqual(r.json()["policy"], "upload")
            self.assertGreaterEqual(int(r.header("retry-after")), 1)
            # the api bucket is its own
            self.assertEqual(app.request("GET", "/", alice).status, 200)

    def test_two_instances_share_buckets_through_redis(self):
        with harness.RedisServer() as redis, \
                App(REDIS_URL=redis.url(),
                    REDIS_TIMEOUT_MS=DECIDE_TIMEOUT_MS) as a, \
                App(REDIS_URL=redis.url(),
                    REDIS_TIMEOUT_MS=DECIDE_TIMEOUT_MS) as b:
            carol = {"x-user-id": "carol"}
            got = []
            for i in range(6):
                got.append((a if i % 2 else b).request(
                    "POST", "/api/upload", carol, "x").status)
            self.assertEqual(got, [201] * 5 + [429])
            self.assertEqual(a.request("POST", "/api/upload", carol,
                                       "x").status, 429)
            # the upload rule fails closed when Redis is gone: no upload
            # headers (the api rule's, decided locally, may come first)
            redis.kill()
            r = b.request("POST", "/api/upload", {"x-user-id": "dan"}, "x")
            self.assertEqual(r.status, 503)
            self.assertIn(r.header("x-ratelimit-limit"), (None, "100"))
            # the api rule falls back to a local limiter on the same
            # policy (onStoreError 'local', the default): still limited,
            # headers and all
            r = b.request("GET", "/", {"x-user-id": "dan"})
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("x-ratelimit-limit"), "100")

    def test_http_variant_limits_and_answers_429(self):
        with Sluice(CONFIG) as s, HttpApp(s.port) as app:
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

    def test_http_variant_fails_open_without_headers(self):
        s = Sluice(CONFIG)
        try:
            app = HttpApp(s.port)
        finally:
            s.stop()
        with app:
            r = app.request("GET", "/", {"x-user-id": "carol"})
            self.assertEqual(r.status, 200)
            self.assertIsNone(r.header("x-ratelimit-limit"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
