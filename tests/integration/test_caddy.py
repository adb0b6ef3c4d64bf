#!/usr/bin/env python3
"""Caddy (forward_auth) + sluice: examples/caddy run as shipped.

Caddy's forward_auth tells sluice the original request in
X-Forwarded-Method / X-Forwarded-Uri and passes the client's own headers
on with them.  With the example's `proxy: forward_auth` sluice reads only
those, so a client that adds its own X-Original-URI (or X-Real-IP, or
x-user-id) cannot pick the path, the address or the bucket its rules see.

Caddy, sluice and the app (a second Caddy site) are real processes on
free loopback ports, started and always stopped by harness.py; Caddy's
admin API is off and it keeps no state outside a temporary directory.
"""
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

EXAMPLE = os.path.join(harness.SRC, "examples", "caddy")
CADDY = shutil.which("caddy") or "/usr/bin/caddy"

# The app behind Caddy: says what reached it, and whether Caddy's own path
# matcher takes the path to /api/upload (Caddy's reading of a target).
UPSTREAM = """
http://127.0.0.1:%d {
	@upload path /api/upload
	handle @upload {
		respond "upload [{http.request.header.X-User-Id}]"
	}
	handle {
		respond "app [{http.request.header.X-User-Id}]"
	}
}
"""


class Caddy(harness.Proc):
    """examples/caddy/Caddyfile.in with its ports filled, plus the app."""

    def __init__(self, sluice_port):
        if not os.path.exists(CADDY):
            raise unittest.SkipTest("caddy is not installed (scripts/deps)")
        self.dir = tempfile.mkdtemp(prefix="sluice-caddy-")
        self.conf = os.path.join(self.dir, "Caddyfile")
        # Caddy's data and config directories: inside ours.
        env = dict(os.environ, HOME=self.dir,
                   XDG_DATA_HOME=os.path.join(self.dir, "data"),
                   XDG_CONFIG_HOME=os.path.join(self.dir, "config"))

        def init(port, upstream_port):
            # Written again at each attempt: its ports are chosen again.
            self.port, self.upstream_port = port, upstream_port
            with open(os.path.join(EXAMPLE, "Caddyfile.in")) as f:
                text = f.read()
            text = (text.replace("@LISTEN_PORT@", str(port))
                    .replace("@SLUICE_PORT@", str(sluice_port))
                    .replace("@UPSTREAM_PORT@", str(upstream_port)))
            assert not re.search(r"@[A-Z_]+@", text), "unfilled placeholder"
            with open(self.conf, "w") as f:
                f.write(text + UPSTREAM % upstream_port)
            harness.Proc.__init__(self, [CADDY, "run", "--config", self.conf,
                                         "--adapter", "caddyfile"], env=env)
        try:
            harness.start_on_free_ports(self, init, 2)
        except BaseException:
            shutil.rmtree(self.dir, True)
            raise

    def stop(self, timeout=15):
        rc = super().stop(timeout)
        shutil.rmtree(self.dir, True)
        return rc

    def request(self, method, path, headers=None, body=None):
        return harness.request(self.port, method, path, headers, body)


def example_config():
    with open(os.path.join(EXAMPLE, "sluice.yaml")) as f:
        return f.read()


class CaddyForwardAuth(unittest.TestCase):

    def test_a_client_cannot_pick_the_path_its_rules_see(self):
        with Sluice(example_config()) as s, Caddy(s.port) as caddy:
            dodge = {"X-Original-URI": "/harmless",
                     "X-Original-Method": "GET"}
            got = []
            for i in range(7):
                h = dict(dodge, **{"X-Real-IP": "198.51.100.%d" % i,
                                   "X-Forwarded-For": "198.51.100.%d" % i})
                got.append(caddy.request("POST", "/api/upload", h, "x"))
            # upload: capacity 5 per address, whatever the client wrote
            self.assertEqual([r.status for r in got],
                             [200] * 5 + [429] * 2)
            self.assertEqual(got[0].body, b"upload []")
            limited = got[5]
            self.assertEqual(limited.json()["policy"], "upload")
            self.assertGreaterEqual(int(limited.header("retry-after")), 1)
            self.assertEqual(limited.header("x-ratelimit-remaining"), "0")
            # other spellings of the same handler meet the same rule
            for path in ("/api/upload;jsessionid=1", "/API/upload/",
                         "/x/../api/upload"):
                r = caddy.request("POST", path, dodge, "x")
                self.assertEqual(r.status, 429, path)
            # another path is not that rule: the api rule answers, and
            # its headers reach the client on the app's answer
            r = caddy.request("GET", "/", {"X-Original-URI": "/api/upload",
                                           "X-Original-Method": "POST"})
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("x-ratelimit-limit"), "100")
            self.assertEqual(r.header("ratelimit-policy"),
                             '"api";q=100;w=50')

    def test_every_spelling_caddy_routes_meets_its_rule(self):
        """tests/data/path_spellings.tsv through the example: Caddy's path
        matcher takes the table's targets where the table says, and every
        target some router takes to /api/upload is limited once
        /api/upload is drained (the example's upload rule, 5 per
        address); the others are not."""
        rows = [r for r in harness.path_spellings() if r[2] != "-"]
        with Sluice(example_config()) as s, Caddy(s.port) as caddy:
            # GET: the upload rule is POST only, so each reaches the app
            for target, _, routed, _ in rows:
                r = caddy.request("GET", target)
                self.assertEqual(r.status, 200, target)
                self.assertEqual(r.body.split(b" ")[0].decode(), routed
                                 .replace("other", "app"), target)
            got = [caddy.request("POST", "/api/upload", {}, "x").status
                   for _ in range(5)]
            self.assertEqual(got, [200] * 5)
            for target, _, _, charged in rows:
                r = caddy.request("POST", target, {}, "x")
                self.assertEqual(r.status, 429 if charged else 200, target)
                if charged:
                    self.assertEqual(r.json()["policy"], "upload", target)

    def test_client_identity_headers_do_not_reach_sluice(self):
        user_rule = example_config().replace(
            "    key: ip\n    limits: [{capacity: 100, rate: 2/s}]",
            "    key: [\"header:x-user-id\", ip]\n"
            "    limits: [{capacity: 3, rate: 1/min}]")
        self.assertIn("header:x-user-id", user_rule)
        with Sluice(user_rule) as s, Caddy(s.port) as caddy:
            got = [caddy.request("GET", "/", {"X-User-Id": "u%d" % i})
                   for i in range(4)]
            # one address, four invented users: one bucket
            self.assertEqual([r.status for r in got], [200] * 3 + [429])
            self.assertEqual(json.loads(got[3].body)["policy"], "api")


if __name__ == "__main__":
    unittest.main(verbosity=2)
