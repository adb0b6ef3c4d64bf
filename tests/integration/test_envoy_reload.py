#!/usr/bin/env python3
"""envoyproxy/ratelimit's directory reloaded under `sluice serve`: SIGHUP
and a changed directory (a ConfigMap-style "..data" symlink swap too) keep
the buckets, a change during a reload is not lost, and a bad file is
rejected naming FILE:LINE (--check-config too).

Limits are per hour or per day, so the seconds a test takes refill
nothing a whole token would show.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402
from envoy_json_cases import (EXAMPLES, Base, EnvoyDir, desc,  # noqa: E402
                              marketing_limit)


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
