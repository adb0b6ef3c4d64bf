#!/usr/bin/env python3
"""`sluice simulate` and `sluice replay` as a user runs them.

The program's output for a seed is fixed, its JSON is complete, a log it
writes replays line for line, and bad input gets exit status 2 and a
message that names the problem (file:line for configs).  No servers are
involved.

Environment: SLUICE_BUILD (build dir with the sluice program), set by
CTest.  Standard library only.
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))
BUILD = os.environ.get("SLUICE_BUILD", os.path.join(SRC, "build"))
SLUICE = os.path.join(BUILD, "sluice")

CONFIG = """rules:
  - name: api
    key: ["header:x-user-id", ip]
    limits:
      - {capacity: 100, rate: 2/s}
  - name: login
    match: {methods: [POST], path: /v1/login}
    key: ip
    limits: [{capacity: 5, rate: 10/min}]
"""


def sluice(*args, input=None):
    return subprocess.run([SLUICE] + list(args), input=input,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120)


class SimCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sluice-sim-")
        cls.config = os.path.join(cls.tmp, "sluice.yaml")
        with open(cls.config, "w") as f:
            f.write(CONFIG)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ------------------------------------------------------------ simulate

    def test_same_seed_prints_the_same_report(self):
        a = sluice("simulate", "--seed", "5", "--duration", "120")
        b = sluice("simulate", "--seed", "5", "--duration", "120")
        c = sluice("simulate", "--seed", "6", "--duration", "120")
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(a.stdout, b.stdout)
        self.assertNotEqual(a.stdout, c.stdout)
        self.assertIn("fixed window, 100/min", a.stdout)
        self.assertIn("sluice token bucket, 100 + 2/s", a.stdout)

    def test_json_reports_every_policy_and_the_boundary_spike(self):
        r = sluice("simulate", "--seed", "1", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        names = [p["name"] for p in out["policies"]]
        self.assertEqual(names, ["fixed_window", "sliding_log",
                                 "sliding_counter", "sluice_token_bucket"])
        p = {p["name"]: p for p in out["policies"]}
        # The window-aware abuser gets twice the limit through the fixed
        # window; the bucket stays within capacity + 2/s x 2 s.
        self.assertEqual(p["fixed_window"]["spike_2s"], 200)
        self.assertLessEqual(p["sluice_token_bucket"]["spike_2s"], 104)
        self.assertLessEqual(p["sliding_log"]["spike_2s"], 100)
        for q in out["policies"]:
            self.assertEqual(q["legit_requests"] + q["abuse_requests"],
                             out["requests"])
            self.assertEqual(len(q["abuse_passed_per_s"]),
                             out["duration_s"] + 1)
            self.assertGreater(q["abuse_blocked_share"], 0.9)

    def test_config_rules_run_as_a_fifth_policy(self):
        r = sluice("simulate", "--duration", "60", "--json", "--config",
                   self.config)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["policies"][-1]["name"],
                         "config:" + self.config)
        # The config's api rule is the built-in bucket, and login adds a
        # stricter limit on one route: at least as much abuse is blocked.
        p = {q["name"]: q for q in out["policies"]}
        self.assertGreaterEqual(out["policies"][-1]["abuse_blocked"],
                                p["sluice_token_bucket"]["abuse_blocked"])

    def test_bad_arguments_exit_2_with_a_message(self):
        for args, words in [
                (["--seed", "abc"], "--seed"),
                (["--duration", "0"], "--duration"),
                (["--bogus"], "usage"),
                (["extra"], "unexpected argument")]:
            r = sluice("simulate", *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(words, r.stderr)

    def test_a_bad_config_is_named_with_its_line(self):
        bad = os.path.join(self.tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write("rules:\n  - name: x\n    limits: [{capacity: 0, "
                    "rate: 2/s}]\n")
        for cmd in (["simulate", "--config", bad],
                    ["replay", "--config", bad, "/dev/null"]):
            r = sluice(*cmd)
            self.assertEqual(r.returncode, 2)
            self.assertIn("bad.yaml:3", r.stderr)

    # -------------------------------------------------------------- replay

    def test_a_simulated_log_replays_line_for_line(self):
        log = os.path.join(self.tmp, "traffic.log")
        r = sluice("simulate", "--duration", "120", "--json", "--access-log",
                   log)
        self.assertEqual(r.returncode, 0, r.stderr)
        requests = json.loads(r.stdout)["requests"]
        r = sluice("replay", "--config", self.config, "--json", log)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["lines"], requests)
        self.assertEqual(out["replayed"], requests)
        self.assertEqual(out["malformed"], 0)
        api, login = out["rules"]
        self.assertEqual(api["requests"], requests)
        self.assertIn("x-user-id", api["note"])
        self.assertGreater(login["limited"], 0)
        self.assertEqual(login["top_limited"][0]["key"], "192.0.2.2")

    def test_malformed_lines_are_counted_not_fatal(self):
        log = ("10.0.0.1 - - [30/Nov/2026:10:00:00 +0000] \"GET /a HTTP/1.1\""
               " 200 1 \"-\" \"t\"\n"
               "\x00\x01 binary junk\n"
               "10.0.0.1 - - [30/Nov/2026:10:00:01 +0000] \"GET /a HTTP/1.1\""
               " 200 1\n"
               "10.0.0.2 - - [99/Nov/2026:10:00:01 +0000] \"GET /a HTTP/1.1\""
               " 200 1\n")
        r = sluice("replay", "--config", self.config, "-", input=log)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("replayed 2, malformed 2 (first: line 2", r.stdout)

    def test_replay_usage_errors(self):
        r = sluice("replay", os.path.join(self.tmp, "x.log"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("--config FILE is required", r.stderr)
        r = sluice("replay", "--config", self.config,
                   os.path.join(self.tmp, "missing.log"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing.log", r.stderr)
        r = sluice("replay", "--config", self.config, "--top", "0", "-")
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    if not os.access(SLUICE, os.X_OK):
        raise SystemExit("test_sim_cli: %s is not built" % SLUICE)
    unittest.main(verbosity=2)
