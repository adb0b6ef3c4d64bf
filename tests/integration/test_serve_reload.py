#!/usr/bin/env python3
"""SIGHUP says what it applied.

- A reload that changes `listen` (and the rules): the rules apply, the
  socket stays where it was, and the log says plainly that `listen` needs a
  restart, field by field and in the summary line; a second reload says it
  again (judged against what runs, not against the last file).
- A reload that changes `store`: not applied, said so, without printing
  the store URL (it may hold a password).
- `threads` has one range in the file and on the command line: 1..64.
- The harness waits for a reload's own summary line, however late the
  server writes it (after the reload metric).
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Proc, Sluice  # noqa: E402

CONFIG = """
listen: "127.0.0.1:%(port)d"
store: %(store)s
rules:
  - name: api
    key: ["header:x-user-id"]
    limits: [{capacity: %(capacity)d, rate: 1/min}]
"""


def config(port, capacity=10, store="{memory: {}}"):
    return CONFIG % {"port": port, "capacity": capacity, "store": store}


class FileServe(Proc):
    """`sluice serve -c FILE` whose listen address comes from the file
    (Sluice passes --listen, which would win over it)."""

    def __init__(self, text):
        fd, self.path = tempfile.mkstemp(prefix="sluice-", suffix=".yaml")
        os.close(fd)

        def init(port):
            self.port = port
            self.write(text % {"port": port} if "%(port)" in text
                       else text)
            Proc.__init__(self, [harness.SLUICE, "serve", "-c", self.path])
        harness.start_listening(self, init)

    def write(self, text):
        with open(self.path + ".tmp", "w") as f:
            f.write(text)
        os.replace(self.path + ".tmp", self.path)

    def reload(self):
        """SIGHUP; true once the reload's last line is in the log and
        says it reloaded (then every line it wrote is there)."""
        return "SIGHUP: reloaded" in harness.reload(self)

    def check(self, user):
        return harness.request(self.port, "GET", "/v1/check",
                               {"x-user-id": user})

    def stop(self, timeout=15):
        rc = super().stop(timeout)
        if os.path.exists(self.path):
            os.unlink(self.path)
        return rc


class Reload(unittest.TestCase):
    def test_listen_change_is_refused_plainly_rules_apply(self):
        s = FileServe(config(0).replace("127.0.0.1:0", "127.0.0.1:%(port)d"))
        try:
            self.assertEqual(s.check("a").header("x-ratelimit-limit"), "10")
            other = harness.free_port()
            s.write(config(other, capacity=20))
            self.assertTrue(s.reload())
            # The rules applied; the socket did not move.
            self.assertEqual(s.check("b").header("x-ratelimit-limit"), "20")
            log = s.log()
            self.assertIn("listen changed to 127.0.0.1:%d: not applied, "
                          "needs a restart; still listening on "
                          "127.0.0.1:%d" % (other, s.port), log)
            self.assertIn("not applied until a restart: listen", log)
            # Said again at the next reload: it is still not applied.
            self.assertTrue(s.reload())
            self.assertEqual(s.log().count("not applied until a restart: "
                                           "listen"), 2)
        finally:
            s.stop()

    def test_store_change_is_refused_without_printing_the_url(self):
        s = FileServe(config(0).replace("127.0.0.1:0", "127.0.0.1:%(port)d"))
        try:
            s.write(config(s.port, store='{redis: {url: '
                           '"redis://:hunter2-secret@127.0.0.1:1"}}'))
            self.assertTrue(s.reload())
            log = s.log()
            self.assertIn("store changed: not applied, needs a restart; "
                          "still on the memory store", log)
            self.assertIn("not applied until a restart: store", log)
            self.assertNotIn("hunter2", log)
            self.assertEqual(harness.request(s.port, "GET",
                                             "/readyz").status, 200)
        finally:
            s.stop()

    def test_reload_without_restart_fields_says_only_reloaded(self):
        s = FileServe(config(0).replace("127.0.0.1:0", "127.0.0.1:%(port)d"))
        try:
            s.write(config(s.port, capacity=3))
            self.assertTrue(s.reload())
            self.assertIn("SIGHUP: reloaded", s.log())
            self.assertNotIn("not applied", s.log())
        finally:
            s.stop()


class BusyMachine(unittest.TestCase):
    """The reload counter is bumped before the reload is logged; on a
    busy machine the line may come much later.  A shim (LD_PRELOAD of
    tests/tools/slow_stderr.c) holds that line back 1.5 s: the harness
    must still read the log only once the line is there."""

    def test_reload_returns_once_its_late_summary_line_is_written(self):
        env = {"LD_PRELOAD": os.path.join(harness.BUILD,
                                          "libslow_stderr.so"),
               "SLOW_STDERR_MATCH": "SIGHUP: reloaded",
               "SLOW_STDERR_MS": "1500",
               # An instrumented sluice accepts a shim loaded before ASan.
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
               ":verify_asan_link_order=0"}
        rules = CONFIG.split("rules:", 1)[1]
        with Sluice("rules:" + rules % {"capacity": 10}, env=env) as s:
            s.write_config("rules:" + rules % {"capacity": 20})
            line = s.reload()
            self.assertIn("SIGHUP: reloaded %s (1 rules)" % s.config_path,
                          line)
            self.assertIn("SIGHUP: reloaded", s.log())
            self.assertEqual(s.metrics().get(
                'sluice_config_reloads_total{result="ok",trigger="sighup"}'), 1)
            self.assertEqual(s.request("GET", "/v1/check", {
                "x-user-id": "late"}).header("x-ratelimit-limit"), "20")


class Threads(unittest.TestCase):
    def run_serve(self, *args):
        return subprocess.run([harness.SLUICE, "serve"] + list(args),
                              capture_output=True, text=True, timeout=30)

    def test_file_and_flag_share_one_range(self):
        fd, path = tempfile.mkstemp(prefix="sluice-", suffix=".yaml")
        os.close(fd)
        try:
            with open(path, "w") as f:
                f.write("threads: 65\n")
            p = self.run_serve("-c", path)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("threads", p.stderr)
            self.assertIn("%s:1" % path, p.stderr)
            p = self.run_serve("--threads", "65")
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("1..64", p.stderr)
        finally:
            os.unlink(path)

    def test_sixty_four_threads_is_accepted_by_the_file(self):
        with Sluice("threads: 64\n") as s:
            self.assertEqual(s.request("GET", "/healthz").status, 200)
            # The line comes once every thread runs.
            self.assertTrue(s.wait_log("64 threads"), s.log())


if __name__ == "__main__":
    unittest.main(verbosity=2)
