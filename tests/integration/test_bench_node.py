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

    def test_floor_apps_send_what_they_stand_for(self):
        # bench/node/floor.py's controls: five-headers.js sets the five
        # headers sluice's middleware sends, with values of their form;
        # the others send none.  Only sluice's apps limit.
        with harness.RedisServer() as redis, \
                App("sluice-memory.js", redis) as sluice, \
                App("five-headers.js", redis) as five, \
                App("sluice-memory-no-headers.js", redis) as quiet, \
                App("noop.js", redis) as noop, \
                App("key-only.js", redis) as key:
            a = sluice.get("floor-a")
            b = five.get("floor-b")
            self.assertEqual(sorted(limit_headers(b)), sorted(FIVE), b)
            ha, hb = limit_headers(a), limit_headers(b)
            for name in ("ratelimit-policy", "x-ratelimit-limit",
                         "x-ratelimit-remaining", "ratelimit"):
                self.assertEqual(hb[name], ha[name], (a, b))
            for app in (quiet, noop, key):
                r = app.get("floor-c")
                self.assertEqual(r.status, 200, r)
                self.assertEqual(limit_headers(r), {}, r)
            # A fresh bucket of 100: the first 100 pass, and the refill
            # (2/s) cannot keep up with requests sent back to back.
            statuses = []
            while 429 not in statuses and len(statuses) < 300:
                statuses.append(quiet.get("floor-d").status)
            self.assertEqual(statuses[:100], [200] * 100, statuses)
            self.assertIn(429, statuses)
            passed = [noop.get("floor-d").status for _ in range(105)]
            self.assertEqual(set(passed), {200}, passed)

    def test_floor_script_reports_every_app(self):
        if shutil.which("wrk") is None:
            self.skipTest("wrk is not installed (scripts/deps installs it)")
        out = subprocess.run(
            [sys.executable, "floor.py", "2", "1"], cwd=BENCH,
            capture_output=True, text=True, timeout=300, env=node_env())
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        rows = [l.split("|") for l in out.stdout.splitlines()
                if l.startswith("| ") and "#" in l]
        self.assertEqual([r[1].strip().split("#")[0] for r in rows],
                         ["bare", "bare", "noop", "key-only", "five-headers",
                          "sluice-memory-no-headers", "sluice-memory"], out)
        # The first bare is the reference: its own ratios are 1.
        self.assertEqual(rows[0][4].strip(), "1.000 (1.000-1.000)", out)
        for r in rows:
            self.assertGreater(float(r[2]), 0, r)
            self.assertGreater(float(r[3]), 0, r)
        self.assertIn("2 windows of 1 s, 7 apps at once", out.stdout)

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


def bench_module(name, path):
    """bench/run or bench/report.py, loaded as a module (no bytecode),
    with bench/'s own harness (this directory's goes back afterwards)."""
    from importlib.machinery import SourceFileLoader
    import importlib.util
    sys.dont_write_bytecode = True
    bench = os.path.join(harness.SRC, "bench")
    ours = sys.modules.pop("harness", None)
    sys.path.insert(0, bench)
    try:
        loader = SourceFileLoader(name, os.path.join(bench, path))
        spec = importlib.util.spec_from_loader(name, loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    finally:
        sys.path.remove(bench)
        if ours is not None:
            sys.modules["harness"] = ours
    return mod


def node_section_text(report, nd):
    """The report's node section for the figures nd, as text (no plots)."""
    out = []

    class Plots:
        ok = True

        def grouped(self, *args):
            return None
    report.node_section(out.append, Plots(), nd)
    return "".join(out)


class SideBySide(unittest.TestCase):
    """The saturated side-by-side windows: their ratios, and the report's
    table of them.  No process is started."""

    # Three windows: {app: (node CPU us/request, req/s, p99 ms)}.
    RUNS = [
        {"bare": (100.0, 1000, 10.0), "bare_again": (110.0, 900, 12.0),
         "sluice_memory": (125.0, 800, 20.0),
         "classic": (150.0, 600, 30.0), "sluice_redis": (120.0, 750, 15.0)},
        {"bare": (100.0, 1000, 10.0), "bare_again": (90.0, 1100, 8.0),
         "sluice_memory": (110.0, 950, 11.0),
         "classic": (150.0, 600, 30.0), "sluice_redis": (100.0, 900, 30.0)},
        # A window without the classic (its wrk said nothing readable).
        {"bare": (200.0, 500, 10.0), "bare_again": (200.0, 500, 10.0),
         "sluice_memory": (250.0, 400, None)},
    ]

    def test_ratios_window_by_window(self):
        run = bench_module("bench_run", "run")
        res = {}
        run.side_ratios(res, self.RUNS)
        # sluice Redis against the classic: two windows only.
        self.assertEqual(res["side_redis_rps_ratio"], 1.375)  # 1.25, 1.5
        self.assertEqual(res["side_redis_rps_ratio_range"], [1.25, 1.5])
        self.assertEqual(res["side_redis_capacity_ratio"], 1.375)
        self.assertEqual(res["side_redis_p99_ratio"], 0.75)  # 0.5, 1.0
        # sluice memory against bare: the p99 of None leaves window 3 out
        # of the p99 ratio only.
        self.assertEqual(res["side_memory_rps_ratio_range"], [0.8, 0.95])
        self.assertEqual(res["side_memory_rps_ratio"], 0.8)
        self.assertEqual(res["side_memory_capacity_ratio"], 0.8)
        self.assertEqual(res["side_memory_capacity_ratio_range"],
                         [0.8, 0.909])
        self.assertEqual(res["side_memory_p99_ratio"], 1.55)
        # The same app twice.
        self.assertEqual(res["side_bare_again_rps_ratio"], 1.0)
        self.assertEqual(res["side_bare_again_rps_ratio_range"], [0.9, 1.1])
        for k, v in res.items():
            if k.endswith("_iqr"):
                mn, mx = res[k[:-4] + "_range"]
                self.assertTrue(mn <= v[0] <= res[k[:-4]] <= v[1] <= mx,
                                (k, res))

    def test_no_window_gives_none(self):
        run = bench_module("bench_run", "run")
        res = {"side_redis_rps_ratio_iqr": [1, 2]}
        run.side_ratios(res, [{"bare": (100.0, 1000, 10.0)}])
        self.assertIsNone(res["side_redis_rps_ratio"])
        self.assertNotIn("side_redis_rps_ratio_iqr", res)

    def test_report_table(self):
        run = bench_module("bench_run", "run")
        report = bench_module("bench_report", "report.py")
        nd = {"side_wrk": "-t1 -c50 -d3s --latency", "side_windows": 3,
              "side_apps": 5, "side_loadavg_1m": [1.5, 2.5]}
        for a in ("bare", "bare_again", "sluice_memory", "sluice_redis",
                  "classic"):
            nd[a + "_side_cpu_us_per_req"] = self.RUNS[0][a][0]
            nd[a + "_side_rps"] = self.RUNS[0][a][1]
            nd[a + "_side_p99_ms"] = self.RUNS[0][a][2]
        run.side_ratios(nd, self.RUNS)
        text = node_section_text(report, nd)
        self.assertIn("**Saturated, side by side**", text)
        self.assertIn("(load average 1.5 and 2.5 before and after)", text)
        self.assertIn("| Express + sluice, Redis store | 750 | 15 | 120 |",
                      text)
        self.assertIn("| classic: ioredis + Lua hash bucket (EVALSHA) | 600 "
                      "| 30 | 150 |", text)
        self.assertIn("| bare Express again (a second instance of the same "
                      "app) | 900 | 12 | 110 |", text)
        self.assertIn("sluice Redis serves **1.38** (IQR 1.31 to 1.44, "
                      "range 1.25 to 1.5) of the classic's req/s", text)
        self.assertIn("the second bare Express serves **1** (IQR 0.95 to "
                      "1.05, range 0.9 to 1.1) of the first's", text)

    def test_report_rounds_of_the_same_app(self):
        report = bench_module("bench_report", "report.py")
        nd = {"rounds": 2, "round_s": 3, "wrk": "-t1 -c50 -d5s",
              "redis_rps_vs_classic_paired": 1.0,
              "bare_runs": [{"rps": 1000, "p99_ms": 10.0,
                             "cpu_us_per_req": 150.0},
                            {"rps": 900, "p99_ms": 12.0,
                             "cpu_us_per_req": 160.0}],
              "bare_again_runs": [{"rps": 950, "p99_ms": 11.0,
                                   "cpu_us_per_req": 155.0},
                                  {"rps": 990, "p99_ms": 9.0,
                                   "cpu_us_per_req": 151.0}],
              "bare_again_rps_vs_bare_paired": 1.025,
              "bare_again_rps_vs_bare_paired_range": [0.95, 1.1],
              "bare_again_cpu_vs_bare_paired": 0.989,
              "bare_again_cpu_vs_bare_paired_range": [0.944, 1.033]}
        text = node_section_text(report, nd)
        self.assertIn("| bare Express again (a second instance of the same "
                      "app) | 950, 990 | 11, 9 | 155, 151 |", text)
        self.assertIn("the second bare Express's req/s **1.02** of the "
                      "first's (0.95 to 1.1), its node CPU per request "
                      "**0.989** of the first's (0.944 to 1.03)", text)

    def test_report_without_side_by_side(self):
        report = bench_module("bench_report", "report.py")
        self.assertNotIn("side by side**", node_section_text(report, {}))


class Paired(unittest.TestCase):
    """The paired runs of a fixed request count: wrk ends once the count
    is answered (not at its -d), and the report says the rounds'
    ratios."""

    def test_wrk_stops_at_the_count(self):
        if shutil.which("wrk") is None:
            self.skipTest("wrk is not installed (scripts/deps installs it)")
        import http.server
        import tempfile
        import threading
        run = bench_module("bench_run", "run")
        seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                seen.append(self.headers.get("x-user-id"))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # wrk resets the connections it drops at the count.
        srv.handle_error = lambda *args: None
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        try:
            with tempfile.TemporaryDirectory() as d:
                script = os.path.join(d, "count.lua")
                with open(script, "w") as f:
                    f.write(run.COUNT_LUA % {"keys": 10, "count": 300})
                out = run.wrk_count(script, "http://127.0.0.1:%d/"
                                    % srv.server_address[1], bound_s=600)
        finally:
            srv.shutdown()
            srv.server_close()
        m = __import__("re").search(r"(\d+) requests in ([0-9.]+)(m?s)",
                                    out)
        self.assertIsNotNone(m, out)
        # The thread stops at the 300th answer, after the loop's current
        # pass: answers read in that pass count too, at most one per
        # connection (50); the rest are dropped.
        self.assertGreaterEqual(int(m.group(1)), 300, out)
        self.assertLess(int(m.group(1)), 350, out)
        # Ended by the count, not by -d600s (a wrk that ran its full -d
        # reports 10.00m).
        secs = float(m.group(2)) * (60 if m.group(3) == "m" else 1)
        self.assertLess(secs, 600, out)
        self.assertGreaterEqual(len(seen), 300)
        self.assertTrue(all(k and k.startswith("user-") for k in seen))

    def test_report(self):
        report = bench_module("bench_report", "report.py")
        nd = {"paired_requests": 20000, "paired_wrk": "-t1 -c50",
              "paired_rounds": 10, "paired_loadavg_1m": [3.5, 4.25],
              "bare_paired_rps": 7000, "bare_paired_cpu_us_per_req": 140.0,
              "sluice_memory_paired_rps": 6800,
              "sluice_memory_paired_cpu_us_per_req": 144.2,
              "paired_memory_cpu_ratio": 1.03,
              "paired_memory_cpu_ratio_iqr": [1.01, 1.05],
              "paired_memory_cpu_ratio_range": [0.95, 1.2],
              "paired_memory_rps_ratio": 0.97,
              "paired_memory_rps_ratio_iqr": [0.95, 0.99],
              "paired_memory_rps_ratio_range": [0.8, 1.1]}
        text = node_section_text(report, nd)
        self.assertIn("each sent 20,000 requests by `wrk -t1 -c50`", text)
        self.assertIn("| Express + sluice, memory store | 6,800 | 144 |",
                      text)
        self.assertIn("sluice memory's node CPU per request **1.03** (IQR "
                      "1.01 to 1.05, range 0.95 to 1.2) of bare Express's, "
                      "its req/s **0.97** (IQR 0.95 to 0.99, range 0.8 to "
                      "1.1) of bare's", text)
        self.assertNotIn("Paired runs", node_section_text(report, {}))


if __name__ == "__main__":
    unittest.main()
