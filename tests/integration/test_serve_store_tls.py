#!/usr/bin/env python3
"""The store's tls: and sentinel: settings, as `sluice serve` treats them
(what the file says; connecting over TLS is the Redis client's part).

- `tls: {verify: false}` is warned about once at start, however many
  threads; a tls: block that checks certificates is not.
- A reload that adds or changes tls: or sentinel: is a store change: not
  applied, said so, without printing the Sentinels' password.
- A reload whose tls: names a file that cannot be read is rejected with
  FILE:LINE, and the running config stays.
- `check-config` names every bad tls: and sentinel: field by its line.
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

RULES = """
rules:
  - name: api
    key: ["header:x-user-id"]
    limits: [{capacity: 10, rate: 1/min}]
"""


def redis_config(port, extra=""):
    """A Redis store on a port nothing listens on (the store is down, the
    server runs) with `extra` lines under store.redis."""
    return ("store:\n  redis:\n    url: \"redis://127.0.0.1:%d\"\n%s%s"
            % (port, extra, RULES))


def reloads(s, result):
    return s.metrics().get('sluice_config_reloads_total{result="%s",trigger="sighup"}'
                           % result)


class StoreTls(unittest.TestCase):
    def test_verify_false_is_warned_once_at_start(self):
        port = harness.free_port()
        with Sluice(redis_config(port, "    tls: {verify: false}\n"),
                    threads=2) as s:
            self.assertEqual(s.log().count("tls.verify is false"), 1,
                             s.log())
        with Sluice(redis_config(port, "    tls: {}\n")) as s:
            self.assertNotIn("tls.verify", s.log())

    def test_tls_added_by_a_reload_needs_a_restart(self):
        port = harness.free_port()
        with Sluice(redis_config(port)) as s:
            s.write_config(redis_config(
                port, "    tls: {server_name: redis.internal}\n"))
            self.assertIn("SIGHUP: reloaded", s.reload())
            self.assertEqual(reloads(s, "ok"), 1)
            self.assertIn("store changed: not applied, needs a restart; "
                          "still on the redis store", s.log())

    def test_sentinel_added_by_a_reload_needs_a_restart_unprinted(self):
        port = harness.free_port()
        with Sluice(redis_config(port)) as s:
            s.write_config(redis_config(
                port, "    sentinel:\n      master: mymaster\n"
                      "      addrs: [\"127.0.0.1:%d\"]\n"
                      "      password: hunter2-sentinel\n"
                % harness.free_port()))
            self.assertIn("SIGHUP: reloaded", s.reload())
            self.assertEqual(reloads(s, "ok"), 1)
            self.assertIn("store changed: not applied", s.log())
            self.assertNotIn("hunter2", s.log())

    def test_reload_naming_a_missing_ca_file_is_rejected(self):
        port = harness.free_port()
        with Sluice(redis_config(port)) as s:
            missing = os.path.join(tempfile.gettempdir(),
                                   "sluice-no-such-dir-%d" % os.getpid(),
                                   "ca.pem")
            s.write_config(redis_config(
                port, "    tls:\n      ca_file: %s\n" % missing))
            self.assertIn("SIGHUP: reload rejected", s.reload())
            self.assertEqual(reloads(s, "error"), 1)
            self.assertIn("%s:5: store.redis.tls.ca_file \"%s\" cannot be "
                          "opened: No such file or directory"
                          % (s.config_path, missing), s.log())
            # The running config stays: the rule still answers.
            r = s.request("GET", "/healthz")
            self.assertEqual(r.status, 200)

    def test_check_config_names_each_bad_field(self):
        path, p = harness.check_config(
            "store:\n"                                 # 1
            "  redis:\n"                               # 2
            "    url: \"rediss://10.0.0.5:6380\"\n"    # 3
            "    tls:\n"                               # 4
            "      key_file: /nonexistent/k.pem\n"     # 5
            "      verify: maybe\n"                    # 6
            "    sentinel:\n"                          # 7
            "      master: mymaster\n"                 # 8
            "      addrs: [\"10.0.0.1\"]\n")           # 9
        out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 2, out)
        self.assertIn("%s:5: store.redis.tls.key_file" % path, out)
        self.assertIn("%s:6: store.redis.tls.verify" % path, out)
        self.assertIn("%s:9: sentinel address \"10.0.0.1\"" % path, out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
