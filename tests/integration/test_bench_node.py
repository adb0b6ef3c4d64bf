#!/usr/bin/env python3
"""bench/node: the apps and overhead.js that `make bench ONLY=node`
measures.  The classic bucket sending sluice's five headers sends exactly
what sluice's middleware sends (so that the in-process comparison is of
the same work), the classic app as the blog posts write it sends two of
them, and overhead.js runs under its garbage-collector flags and prints
each middleware's median with its interquartile range and range.  Nothing
here is timed: the figures are only checked to be what they claim (a
median inside its quartiles, the quartiles inside the range).

Installs bench/node's dependencies with `npm ci` and the sluice package
from bindings/node (as bench/run does) when they are missing.  A real
redis-server serves the Redis apps.
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

BENCH = os.path.join(harness.SRC, "bench", "node")
FIVE = ("ratelimit-policy", "ratelimit", "x-ratelimit-limit",
        "x-ratelimit-remaining", "x-ratelimit-reset")


def npm(*args):
    out = subprocess.run([shutil.which("npm")] + list(args) +
                         ["--no-audit", "--no-fund"], cwd=BENCH,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise AssertionError("npm %s failed:\n%s%s" % (args[0], out.stdout,
                                                       out.stderr))


def install():
    """npm ci and the package from the checkout, unless already there."""
    if not shutil.which("npm") or not shutil.which("node"):
        raise AssertionError("node and npm are required (scripts/deps)")
    mods = os.path.join(BENCH, "node_modules")
    if not os.path.exists(os.path.join(mods, "express", "package.json")):
        npm("ci", "--prefer-offline")
    if not os.path.exists(os.path.join(mods, "sluice", "package.json")):
        npm("install", "--no-save", "--prefer-offline",
            os.path.relpath(os.path.join(harness.SRC, "bindings", "node"),
                            BENCH))


def node_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS")}
    env.update(extra)
    return env


class App(harness.Proc):
    def __init__(self, script, redis):
        env = node_env(REDIS_URL=redis.url(), NODE_ENV="production")

        def init(port):
            self.port = port
            env["PORT"] = str(port)
            harness.Proc.__init__(self, [shutil.which("node"), script],
                                  env=env, cwd=BENCH)
        harness.start_on_free_ports(self, init)

    def get(self, user):
        return harness.request(self.port, "GET", "/", {"x-user-id": user})


def limit_headers(r):
    return {k: r.header(k) for k in FIVE if r.header(k) is not None}


class BenchNode(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        install()

    def test_classic_headers_sends_what_sluice_sends(self):
        with harness.RedisServer() as redis, \
                App("sluice-redis.js", redis) as sluice, \
                App("classic-headers.js", redis) as five, \
                App("classic.js", redis) as classic:
            # A fresh bucket each (100 tokens, 2/s): the first request
            # leaves 99, a full bucket again in 1 s.
            a = sluice.get("bench-test-a")
            b = five.get("bench-test-b")
            c = classic.get("bench-test-c")
            for r in (a, b, c):
                self.assertEqual(r.status, 200, r)
            self.assertEqual(sorted(limit_headers(a)), sorted(FIVE), a)
            self.assertEqual(limit_headers(b), limit_headers(a))
            self.assertEqual(limit_headers(b)["ratelimit"],
                             '"api";r=99;t=1')
            # The classic as written: the limit and what remains, no more.
            self.assertEqual(limit_headers(c),
                             {"x-ratelimit-limit": "100",
                              "x-ratelimit-remaining": "99"})

    def test_overhead_medians_inside_their_spreads(self):
        names = ["sluice_memory", "flexible_memory", "classic_headers"]
        with harness.RedisServer() as redis:
            out = subprocess.run(
                [shutil.which("node"), "overhead.js", "200"] + names,
                cwd=BENCH, capture_output=True, text=True, timeout=600,
                env=node_env(REDIS_URL=redis.url(), OVERHEAD_PASSES="3",
                             OVERHEAD_WARMUP="200"))
        self.assertEqual(out.returncode, 0, out.stderr)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(res["passes"], 3)
        self.assertEqual(res["calls"], 200)
        self.assertIn("--expose-gc", res["flags"])
        self.assertIn("--single-threaded-gc", res["flags"])
        for n in names:
            lo, hi = res["iqr"][n]
            mn, mx = res["range"][n]
            self.assertTrue(mn <= lo <= res[n] <= hi <= mx, (n, res))
            self.assertGreater(res["cpu_us_per_call"][n], 0)
        lo, hi = res["noop_iqr"]
        self.assertTrue(0 < lo <= res["noop_us_per_call"] <= hi, res)

    def test_overhead_without_gc_flag_says_so(self):
        out = subprocess.run(
            [shutil.which("node"), "overhead.js", "10", "sluice_memory"],
            cwd=BENCH, capture_output=True, text=True, timeout=120,
            env=node_env(OVERHEAD_FLAGS="--single-threaded-gc"))
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("needs --expose-gc", out.stderr)


if __name__ == "__main__":
    unittest.main()
