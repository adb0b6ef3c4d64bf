#!/usr/bin/env python3
"""Per-key overrides of `sluice serve` rules: inline `overrides:` and
`overrides_file:` (reloaded on SIGHUP), beating tiers, on /v1/check and
/v1/take; a file of 100,000 overrides loads and answers; errors in the
overrides file name that file and line.  An overrides file swapped for a
FIFO or for a link to a secret file, then SIGHUP: the reload is refused at
once (SIGTERM still stops the server) and nothing of the secret is logged.

Buckets refill at 1/hour, so every count is exact and nothing depends on
timing.
"""
import json
import os
import signal
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

CONFIG = """
rules:
  - name: api
    key: ["header:x-api-key", "ip"]
    tiers:
      header: x-tier
      default: free
      limits:
        free: [{capacity: 2, rate: 1/h}]
        paid: [{capacity: 3, rate: 1/h}]
    overrides:
      "customer-42": [{capacity: 5, rate: 1/h}]
    overrides_file: %s
"""


def passes(s, key, tier=None, most=30):
    """How many /v1/check requests for key pass before the first 429."""
    headers = {"x-api-key": key}
    if tier:
        headers["x-tier"] = tier
    n = 0
    while n < most and s.request("GET", "/v1/check", headers).status == 200:
        n += 1
    return n


class Overrides(unittest.TestCase):

    def setUp(self):
        fd, self.file = tempfile.mkstemp(suffix=".yaml")
        os.close(fd)
        self.write('"customer-7": [{capacity: 1, rate: 1/h}]\n')

    def tearDown(self):
        os.unlink(self.file)

    def write(self, text):
        tmp = self.file + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.file)

    def test_inline_and_file_overrides_beat_tiers(self):
        with Sluice(CONFIG % self.file) as s:
            self.assertEqual(passes(s, "someone"), 2)
            self.assertEqual(passes(s, "someone-paid", "paid"), 3)
            # The override wins whatever tier the request names.
            self.assertEqual(passes(s, "customer-42", "paid"), 5)
            self.assertEqual(passes(s, "customer-7"), 1)
            # /v1/take with the rule meets the same override.
            r = s.request("POST", "/v1/take", {}, json.dumps(
                {"rule": "api", "key": "customer-42", "cost": 0}))
            self.assertEqual(r.json()["limit"], 5)

    def test_sighup_reloads_the_file(self):
        with Sluice(CONFIG % self.file) as s:
            self.assertEqual(passes(s, "customer-9"), 2)
            self.write('"customer-7": [{capacity: 1, rate: 1/h}]\n'
                       '"customer-9": [{capacity: 4, rate: 1/h}]\n')
            self.assertIn("SIGHUP: reloaded", s.reload())
            harness.wait_until(
                lambda: s.request("POST", "/v1/take", {}, json.dumps(
                    {"rule": "api", "key": "customer-9", "cost": 0}))
                .json()["limit"] == 4, timeout=30)
            # The raised limit keeps what was used (2 of 4): the
            # difference passes, no more.
            self.assertEqual(passes(s, "customer-9"), 2)

    def test_a_hundred_thousand_overrides(self):
        lines = ['"k%d": [{capacity: %d, rate: 1/h}]\n' % (i, 1 + i % 7)
                 for i in range(100000)]
        self.write("".join(lines))
        with Sluice(CONFIG % self.file) as s:
            for i in (0, 1, 54321, 99999):
                r = s.request("POST", "/v1/take", {}, json.dumps(
                    {"rule": "api", "key": "k%d" % i, "cost": 0}))
                self.assertEqual(r.json()["limit"], 1 + i % 7, i)
            self.assertEqual(passes(s, "k100000"), 2)  # no override

    def test_errors_in_the_file_name_it(self):
        self.write('"a": [{capacity: 1, rate: 1/h}]\n'
                   '"b": [{capacity: 1, rate: 1/fortnight}]\n')
        _, p = harness.check_config(CONFIG % self.file)
        self.assertEqual(p.returncode, 2)
        self.assertIn(self.file + ":2: ", p.stderr)
        self.assertIn("fortnight", p.stderr)

    def swap(self, make):
        """Replaces the overrides file by what make(tmp_path) creates."""
        tmp = self.file + ".swap"
        make(tmp)
        os.replace(tmp, self.file)

    def rejected(self, s, n=1):
        return harness.wait_until(
            lambda: s.log().count("reload rejected") >= n, timeout=30)

    def test_fifo_on_sighup_is_refused_and_sigterm_still_stops(self):
        with Sluice(CONFIG % self.file) as s:
            self.assertEqual(passes(s, "customer-7"), 1)
            self.swap(lambda p: os.mkfifo(p, 0o600))
            s.signal(signal.SIGHUP)
            self.assertTrue(self.rejected(s), s.log())
            self.assertIn("is a FIFO, not a regular file", s.log())
            # The old overrides still apply; the server still answers.
            self.assertEqual(passes(s, "customer-7b"), 2)
            s.signal(signal.SIGTERM)
            self.assertEqual(s.wait(30), 0)

    def test_link_to_a_secret_file_is_not_quoted(self):
        fd, secret = tempfile.mkstemp(suffix=".shadow")
        os.write(fd, b"root:$y$j9T$SECRETSALT$SECRETHASH:20228:0:99999:7:::\n")
        os.close(fd)
        os.chmod(secret, 0o640)
        self.addCleanup(os.unlink, secret)
        with Sluice(CONFIG % self.file) as s:
            self.swap(lambda p: os.symlink(secret, p))
            s.signal(signal.SIGHUP)
            self.assertTrue(self.rejected(s), s.log())
            self.assertNotIn("SECRET", s.log())
            self.assertIn(self.file + ":1: ", s.log())
        _, p = harness.check_config(CONFIG % self.file)
        self.assertEqual(p.returncode, 2)
        self.assertNotIn("SECRET", p.stdout + p.stderr)
        self.assertIn("details withheld", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
