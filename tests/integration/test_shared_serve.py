#!/usr/bin/env python3
"""`sluice serve` on the host's shared-memory store (store: {shared: ...}).

- two `sluice serve` processes on one file share every bucket exactly: a
  client alternating between them gets the limit once, not twice;
- a `sluice serve` stopped (SIGTERM or SIGKILL) and started again finds a
  drained bucket drained;
- a file it cannot use (another layout version, made for another
  max_keys, not a store, no directory, owned by another user) stops it
  with exit status 2 and a message naming the file (and the owner);
- a file truncated or damaged under running servers crashes none of them:
  decisions follow on_store_error, the log says why, and a restart refuses
  the file.

Limits refill at most one token an hour, so every count is exact.
"""
import os
import signal
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

CONFIG = """
store: {shared: {path: %(path)s, max_keys: %(max_keys)d}}
rules:
  - name: api
    key: ["header:x-user-id"]
    limits: [{capacity: 10, rate: 1/h}]
"""


def check(s, user):
    return s.request("GET", "/v1/check", {"x-user-id": user})


class SharedServe(unittest.TestCase):
    def setUp(self):
        self.path = "/dev/shm/sluice-it-%d-%s" % (os.getpid(), self.id()
                                                  .rsplit(".", 1)[-1])
        self.addCleanup(self.remove)
        self.remove()

    def remove(self):
        if os.path.exists(self.path):
            os.unlink(self.path)

    def config(self, max_keys=10000):
        return CONFIG % {"path": self.path, "max_keys": max_keys}

    def test_two_servers_share_buckets_exactly(self):
        with Sluice(self.config()) as a, Sluice(self.config()) as b:
            codes = [check((a, b)[i % 2], "alice").status for i in range(30)]
            self.assertEqual(codes.count(200), 10)
            self.assertEqual(codes[:10], [200] * 10)
            self.assertEqual(check(a, "alice").status, 429)
            self.assertEqual(check(b, "alice").status, 429)
            self.assertEqual(check(b, "bob").status, 200)
            # One table: both report its two buckets.
            for s in (a, b):
                m = s.metrics()
                self.assertEqual(m.get("sluice_memstore_keys"), 2)
                self.assertEqual(m.get("sluice_memstore_recovered_total"), 0)
            self.assertEqual(os.stat(self.path).st_mode & 0o777, 0o600)

    def test_restarted_server_keeps_a_drained_bucket(self):
        for how in (signal.SIGTERM, signal.SIGKILL):
            user = "drained-%d" % how
            s = Sluice(self.config())
            for _ in range(10):
                self.assertEqual(check(s, user).status, 200)
            self.assertEqual(check(s, user).status, 429)
            s.signal(how)
            s.wait(30)
            s.stop()
            with Sluice(self.config()) as again:
                r = check(again, user)
                self.assertEqual(r.status, 429)
                self.assertEqual(r.header("x-ratelimit-remaining"), "0")

    def refused(self, config):
        fd, cfg = harness.tempfile.mkstemp(suffix=".yaml")
        os.write(fd, config.encode())
        os.close(fd)
        try:
            p = subprocess.run(
                [harness.SLUICE, "serve", "--listen",
                 "127.0.0.1:%d" % harness.free_port(), "-c", cfg],
                capture_output=True, text=True, timeout=60)
        finally:
            os.unlink(cfg)
        self.assertEqual(p.returncode, 2, p.stderr)
        return p.stderr

    def test_unusable_files_are_refused_with_exit_2(self):
        with Sluice(self.config()) as s:
            self.assertEqual(check(s, "x").status, 200)
        err = self.refused(self.config(max_keys=20000))
        self.assertIn(self.path, err)
        self.assertIn("max_keys 10000", err)
        with open(self.path, "r+b") as f:
            f.seek(8)
            f.write(struct.pack("<I", 999))
        err = self.refused(self.config())
        self.assertIn("layout version 999", err)
        with open(self.path, "wb") as f:
            f.write(b"not a sluice store at all" * 200)
        self.assertIn("not a sluice shared store", self.refused(self.config()))
        self.remove()
        missing = CONFIG % {"path": "/nonexistent-dir/sluice",
                            "max_keys": 10}
        self.assertIn("/nonexistent-dir/sluice", self.refused(missing))

    def test_file_of_another_user_is_refused_naming_the_owner(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to chown to nobody")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.fchown(fd, 65534, 65534)
        os.close(fd)
        err = self.refused(self.config())
        self.assertIn(self.path, err)
        self.assertIn("owned by uid 65534", err)
        # With the group configured, its members' file is shared.
        group = "%d" % 65534
        cfg = (CONFIG.replace("max_keys: %(max_keys)d}",
                              "max_keys: %(max_keys)d, group: '" + group +
                              "'}") % {"path": self.path, "max_keys": 10000})
        self.remove()
        with Sluice(cfg) as s:
            self.assertEqual(check(s, "x").status, 200)
            st = os.stat(self.path)
            self.assertEqual((st.st_gid, st.st_mode & 0o777), (65534, 0o660))

    def test_truncated_file_fails_decisions_not_the_servers(self):
        cfg = self.config() + \
            "    on_store_error: closed\n"
        with Sluice(cfg) as a, Sluice(cfg) as b:
            for s in (a, b):
                self.assertEqual(check(s, "alice").status, 200)
            os.truncate(self.path, 4096)
            for s in (a, b):
                for i in range(20):
                    r = check(s, "user-%d" % i)
                    self.assertEqual(r.status, 503)
                self.assertIsNone(s.poll())
                self.assertTrue(harness.wait_until(
                    lambda: "the file shrank" in s.log(), timeout=30))
        err = self.refused(self.config())
        self.assertIn("truncated", err)

    def test_damaged_mask_crashes_nothing_and_is_refused(self):
        with Sluice(self.config()) as s:
            self.assertEqual(check(s, "alice").status, 200)
            with open(self.path, "r+b") as f:
                for shard in range(64):
                    f.seek(4096 + shard * 128 + 40)  # its table's mask
                    f.write(struct.pack("<Q", 1 << 62))
            for i in range(50):
                self.assertIn(check(s, "user-%d" % i).status, (200, 429))
            self.assertIsNone(s.poll())
        err = self.refused(self.config())
        self.assertIn("is damaged", err)

    def test_config_errors_name_the_line(self):
        err = self.refused("store: {shared: {max_keys: 10}}\n")
        self.assertIn("store.shared has no path", err)
        err = self.refused("store: {shared: {path: relative/file}}\n")
        self.assertIn("not an absolute path", err)
        self.assertIn(":1", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
