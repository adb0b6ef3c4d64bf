#!/usr/bin/env python3
"""nginx + sluice, and the rules a deployment relies on.

The nginx tests run examples/nginx/nginx.conf.in unchanged except for the
ports, an access log the assertions read, a second server block that
plays the upstream app and, for tests that need users, the example's own
recipe for a verified identity: HTTP basic auth, x-user-id from
$remote_user and a tier mapped from the user.  nginx and sluice are real processes on free
loopback ports, started and always stopped by harness.py.

Tests that nginx adds nothing to (composite keys, X-Forwarded-For from an
untrusted peer, IPv6 grouping) talk to sluice directly.
"""
import http.client
import base64
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

TEMPLATE = os.path.join(harness.SRC, "examples", "nginx", "nginx.conf.in")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
AB = shutil.which("ab")

# One access-log line per client answer: what the client got.
LOG_FORMAT = r"""log_format rl escape=none '$msec $request_time $status '
                  'ra=$sent_http_retry_after '
                  'lim=$sent_http_x_ratelimit_limit '
                  'rem=$sent_http_x_ratelimit_remaining '
                  'pol=$sent_http_ratelimit_policy '
                  'rl=$sent_http_ratelimit '
                  'uri=[$uri]';
    access_log logs/access.log rl;"""

UPSTREAM = """
    server {
        listen 127.0.0.1:%d;
        access_log off;
        location / { return 200 "app\\n"; }
        location /whoami { return 200 "[$http_x_user_id|$http_x_user_tier]"; }
        location /forbidden { return 403 "app says no\\n"; }
    }
}
"""

RATE_LIMIT_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining",
                      "x-ratelimit-reset", "ratelimit-policy", "ratelimit")


def as_user(name, headers=None):
    """Headers of a request authenticated (HTTP basic) as `name`."""
    h = {"Authorization": "Basic " + base64.b64encode(
        ("%s:pw-%s" % (name, name)).encode()).decode()}
    h.update(headers or {})
    return h


class Nginx(harness.Proc):
    """examples/nginx/nginx.conf.in in front of sluice and a stub app.

    users: {name: tier or None} turns on the example's identity recipe:
    basic auth with these users (password "pw-NAME"), x-user-id the
    verified user name, x-user-tier the tier mapped from it."""

    def __init__(self, sluice_port, users=None):
        if not os.path.exists(NGINX):
            raise unittest.SkipTest("nginx is not installed (scripts/deps)")
        self.dir = tempfile.mkdtemp(prefix="sluice-nginx-")
        os.makedirs(os.path.join(self.dir, "logs"))
        os.makedirs(os.path.join(self.dir, "tmp"))
        self.conf = os.path.join(self.dir, "nginx.conf")
        harness.raise_nofile(8192)

        def init(port, upstream_port):
            # Written again at each attempt: its ports are chosen again.
            self.port, self.upstream_port = port, upstream_port
            for name in ("access.log", "error.log"):  # an attempt's own
                try:
                    os.unlink(os.path.join(self.dir, "logs", name))
                except OSError:
                    pass
            with open(self.conf, "w") as f:
                f.write(self._config(sluice_port, users))
            harness.Proc.__init__(self, [NGINX, "-p", self.dir + "/", "-c",
                                         self.conf, "-g", "daemon off;"])
        try:
            harness.start_on_free_ports(self, init, 2)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _config(self, sluice_port, users):
        with open(TEMPLATE) as f:
            text = f.read()
        text = (text.replace("@LISTEN_PORT@", str(self.port))
                .replace("@SLUICE_PORT@", str(sluice_port))
                .replace("@UPSTREAM_PORT@", str(self.upstream_port)))
        assert not re.search(r"@[A-Z_]+@", text), "unfilled placeholder"
        assert "access_log off;" in text
        text = text.replace("access_log off;", LOG_FORMAT)
        if users is not None:
            text = self._with_users(text, users)
        end = text.rstrip().rindex("}")
        return text[:end] + UPSTREAM % self.upstream_port

    def _with_users(self, text, users):
        path = os.path.join(self.dir, "users")
        with open(path, "w") as f:
            for name in users:
                f.write("%s:{PLAIN}pw-%s\n" % (name, name))
        # nginx's workers (user nobody when started as root) read it
        os.chmod(self.dir, 0o755)
        os.chmod(path, 0o644)
        tiers = "".join("        %s %s;\n" % (name, tier)
                        for name, tier in users.items() if tier)
        for old, new in (
                ('set $sluice_user_id "";',
                 'auth_basic "api";\n        auth_basic_user_file %s;\n'
                 '        set $sluice_user_id $remote_user;' % path),
                ('set $sluice_user_tier "";',
                 'set $sluice_user_tier $test_user_tier;'),
                ("http {\n", "http {\n    map $remote_user $test_user_tier"
                 " {\n        default \"\";\n%s    }\n" % tiers)):
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        return text

    def request(self, method, path, headers=None, body=None):
        return harness.request(self.port, method, path, headers, body)

    def access_log(self, lines=0):
        """[(msec, request_time, status, {field: value})] per answer.
        nginx writes a request's line after its answer is sent, so a
        client can read its answer before the line is there: with
        `lines`, waits (bounded) until at least that many are written."""
        if lines:
            harness.wait_until(lambda: self._log_lines() >= lines, 30)
        out = []
        with open(os.path.join(self.dir, "logs", "access.log")) as f:
            for line in f:
                parts = line.split(" ", 3)
                fields = dict(re.findall(r"(\w+)=(\S*)", parts[3]))
                out.append((float(parts[0]), float(parts[1]),
                            int(parts[2]), fields))
        return out

    def _log_lines(self):
        try:
            with open(os.path.join(self.dir, "logs", "access.log")) as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    def error_log(self):
        try:
            with open(os.path.join(self.dir, "logs", "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, timeout=15):
        rc = super().stop(timeout)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def assert_limited(t, r, policy, limit):
    """A real 429 as the client sees it: headers and JSON body."""
    t.assertEqual(r.status, 429, r)
    t.assertEqual(r.header("content-type"), "application/json")
    body = r.json()
    t.assertEqual(set(body), {"error", "retry_after_ms", "policy"})
    t.assertEqual(body["error"], "rate_limited")
    t.assertEqual(body["policy"], policy)
    t.assertGreater(body["retry_after_ms"], 0)
    retry_after = int(r.header("retry-after"))
    t.assertGreaterEqual(retry_after, 1)
    t.assertEqual(retry_after, max(1, math.ceil(body["retry_after_ms"] / 1000)))
    for h in RATE_LIMIT_HEADERS:
        t.assertIsNotNone(r.header(h), h)
    t.assertEqual(r.header("x-ratelimit-limit"), str(limit))
    t.assertEqual(r.header("x-ratelimit-remaining"), "0")
    t.assertTrue(r.header("ratelimit-policy").startswith('"%s";q=' % policy))


class ThroughNginx(unittest.TestCase):

    def test_classic_ab_run(self):
        """ab -n 1000 -c 200: 100 + what refilled pass, the rest get 429."""
        self.assertTrue(AB, "ab (apache2-utils) is not installed: run "
                        "scripts/deps")
        with Sluice() as s, Nginx(s.port) as n:
            t0 = time.time()
            out = subprocess.run(
                [AB, "-q", "-n", "1000", "-c", "200", "-H",
                 "x-user-id: test-user", "http://127.0.0.1:%d/" % n.port],
                capture_output=True, text=True, timeout=300)
            t1 = time.time()
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("Complete requests:      1000", out.stdout)
            # ab counts a 429 body of another length as a "failure";
            # connection errors are what must not happen
            if "Failed requests:        0" not in out.stdout:
                self.assertRegex(out.stdout, r"\(Connect: 0, Receive: 0, "
                                 r"Length: \d+, Exceptions: 0\)")

            log = n.access_log(1000)
            self.assertEqual(len(log), 1000)
            ok = [x for x in log if x[2] == 200]
            limited = [x for x in log if x[2] == 429]
            self.assertEqual(len(ok) + len(limited), 1000,
                             "every answer is 200 or 429")
            # The bucket starts full at the first decision and keeps being
            # drained.  Elapsed time between the first and the last
            # decision: at least (start of the last request) - (end of
            # the first), at most the wall time around ab.
            first_end = min(x[0] for x in log)
            last_start = max(x[0] - x[1] for x in log)
            elapsed_min = max(0.0, last_start - first_end)
            elapsed_max = t1 - t0
            lo = 100 + math.floor(2 * elapsed_min)
            hi = 100 + math.ceil(2 * elapsed_max) + 1
            self.assertTrue(lo <= len(ok) <= hi,
                            "allowed %d not in [%d, %d] (elapsed %.3f..%.3f s)"
                            % (len(ok), lo, hi, elapsed_min, elapsed_max))
            for _, _, _, f in limited:
                self.assertGreaterEqual(int(f["ra"]), 1)
                self.assertEqual(f["lim"], "100")
                self.assertEqual(f["rem"], "0")
                self.assertEqual(f["pol"], '"default";q=100;w=50')
                self.assertTrue(f["rl"].startswith('"default";r=0;t='))
            for _, _, _, f in ok:
                self.assertIn(f["ra"], ("", "-"))  # no Retry-After
                self.assertEqual(f["lim"], "100")
                self.assertEqual(f["pol"], '"default";q=100;w=50')
            # sluice saw the same split.
            m = s.metrics()
            self.assertEqual(m['sluice_decisions_total{rule="default",'
                               'result="allowed"}'], len(ok))
            self.assertEqual(m['sluice_decisions_total{rule="default",'
                               'result="limited"}'], len(limited))
            print("\nab through nginx: %d allowed, %d limited in %.2f s"
                  % (len(ok), len(limited), elapsed_max), file=sys.stderr)

    def test_limited_answer_is_a_real_429(self):
        config = """
rules:
  - name: api
    key: ["header:x-user-id", "ip"]
    limits: [{capacity: 2, rate: 1/min}]
"""
        with Sluice(config) as s, Nginx(s.port, {"alice": None, "bob": None,
                                                 "carol": None}) as n:
            h = as_user("alice")
            r = n.request("GET", "/some/page?q=1", h)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, b"app\n")
            self.assertEqual(r.header("x-ratelimit-limit"), "2")
            self.assertEqual(r.header("x-ratelimit-remaining"), "1")
            self.assertEqual(r.header("ratelimit-policy"), '"api";q=2;w=120')
            self.assertIsNone(r.header("retry-after"))
            self.assertEqual(n.request("GET", "/", h).status, 200)
            r = n.request("GET", "/", h)
            assert_limited(self, r, "api", 2)
            # the next token comes a minute after the first request
            self.assertEqual(r.header("retry-after"), "60")
            self.assertTrue(50000 < r.json()["retry_after_ms"] <= 60000)
            # another user is not affected
            self.assertEqual(n.request("GET", "/", as_user("bob"))
                             .status, 200)
            # an app answering 403 itself is passed through untouched
            r = n.request("GET", "/forbidden", as_user("carol"))
            self.assertEqual(r.status, 403)
            self.assertEqual(r.body, b"app says no\n")
            self.assertEqual(r.header("x-ratelimit-remaining"), "1")
            self.assertNotIn("[error]", n.error_log())

    def test_tiers_and_costs(self):
        config = """
rules:
  - name: upload
    match: {methods: [POST], path: "/api/upload"}
    key: ["header:x-user-id"]
    cost: 10
    tiers:
      header: x-user-tier
      default: anonymous
      limits:
        anonymous: [{capacity: 20, rate: 20/hour}]
        paid: [{capacity: 2000, rate: 2000/day}]
"""
        # Slow refills (a token every 3 min, every 43 s): the exact
        # remaining counts below hold however slowly a busy machine
        # runs these requests.
        users = {"u1": None, "u2": "paid", "u3": "platinum"}
        with Sluice(config) as s, Nginx(s.port, users) as n:
            anon = as_user("u1")
            got = [n.request("POST", "/api/upload", anon, "x")
                   for _ in range(3)]
            self.assertEqual([r.status for r in got], [200, 200, 429])
            self.assertEqual(got[0].header("x-ratelimit-remaining"), "10")
            self.assertEqual(got[1].header("x-ratelimit-remaining"), "0")
            assert_limited(self, got[2], "upload/anonymous", 20)
            # GETs and other paths are not limited by this rule
            for _ in range(3):
                r = n.request("GET", "/api/upload", anon)
                self.assertEqual(r.status, 200)
                self.assertIsNone(r.header("x-ratelimit-limit"))
            # the paid tier has its own limits; unknown tiers get default
            paid = as_user("u2")
            for i in range(5):
                r = n.request("POST", "/api/upload", paid, "x")
                self.assertEqual(r.status, 200)
            self.assertEqual(r.header("x-ratelimit-remaining"), "1950")
            self.assertEqual(r.header("ratelimit-policy"),
                             '"upload/paid";q=2000;w=86400')
            odd = as_user("u3")
            r = n.request("POST", "/api/upload", odd, "x")
            self.assertEqual(r.header("x-ratelimit-limit"), "20")

    def test_multiple_limits_all_must_pass(self):
        config = """
rules:
  - name: api
    key: ["header:x-user-id"]
    limits:
      - {capacity: 5, rate: 1/min}
      - {capacity: 3, rate: 3/day}
"""
        with Sluice(config) as s, Nginx(s.port, {"m": None}) as n:
            h = as_user("m")
            got = [n.request("GET", "/", h) for _ in range(4)]
            self.assertEqual([r.status for r in got], [200, 200, 200, 429])
            # the answer reports the tighter limit
            self.assertEqual(got[0].header("x-ratelimit-remaining"), "2")
            self.assertEqual(got[0].header("x-ratelimit-limit"), "3")
            assert_limited(self, got[3], "api", 3)
            # every limit of the rule, the deciding one first
            self.assertEqual(got[3].header("ratelimit-policy"),
                             '"api";q=3;w=86400, "api.1";q=5;w=300')
            self.assertEqual(got[3].header("retry-after"), "28800")
            # the rejected request charged neither limit: the per-minute
            # bucket still has 5 - 3 = 2 tokens
            r = s.request("POST", "/v1/take", {}, json.dumps(
                {"rule": "api", "key": "m", "cost": 0}))
            self.assertEqual(r.json()["allowed"], True)

    def test_shadow_rule_never_rejects(self):
        config = """
rules:
  - name: trial
    shadow: true
    key: ["header:x-user-id"]
    limits: [{capacity: 1, rate: 1/min}]
"""
        with Sluice(config) as s, Nginx(s.port, {"sh": None}) as n:
            got = [n.request("GET", "/", as_user("sh")).status
                   for _ in range(4)]
            self.assertEqual(got, [200] * 4)
            m = s.metrics()
            self.assertEqual(m['sluice_shadow_rejections_total'
                               '{rule="trial"}'], 3)

    def test_client_cannot_spoof_its_address_through_nginx(self):
        config = """
rules:
  - name: per-ip
    key: ["ip"]
    limits: [{capacity: 2, rate: 1/min}]
"""
        with Sluice(config) as s, Nginx(s.port) as n:
            # nginx overwrites X-Real-IP with the TCP peer and appends it
            # to X-Forwarded-For: every spoofed value lands in one bucket
            got = [n.request("GET", "/", {
                "X-Real-IP": "203.0.113.%d" % i,
                "X-Forwarded-For": "198.51.100.%d" % i}).status
                for i in range(3)]
            self.assertEqual(got, [200, 200, 429])


    def test_invented_user_ids_get_no_fresh_buckets(self):
        """The default policy behind the example: one address sending 300
        requests, each with a fresh x-user-id (and a tier), gets at most
        200 through -- nginx does not pass the client's headers on, and
        the policy has a per-address ceiling besides."""
        with Sluice() as s, Nginx(s.port) as n:
            c = harness.Client(n.port)
            t0 = time.monotonic()
            got = [c.request("GET", "/", {"x-user-id": uuid.uuid4().hex,
                                          "x-user-tier": "paid"}).status
                   for _ in range(300)]
            elapsed = time.monotonic() - t0
            c.close()
            allowed = got.count(200)
            self.assertEqual(allowed + got.count(429), 300)
            # keyed by address: 100 plus the 2/s refilled meanwhile
            self.assertGreaterEqual(allowed, 100)
            self.assertLessEqual(allowed, 100 + math.ceil(2 * elapsed) + 1)
            self.assertLessEqual(allowed, 200)
            # and the app behind does not see the invented identity
            r = n.request("GET", "/whoami", {"x-user-id": "root",
                                             "x-user-tier": "paid"})
            self.assertIn(r.status, (200, 429))
            if r.status == 200:
                self.assertEqual(r.body, b"[|]")
            print("\n300 invented user ids through nginx: %d allowed in "
                  "%.2f s" % (allowed, elapsed), file=sys.stderr)

    def test_verified_user_is_the_only_identity(self):
        config = """
rules:
  - name: api
    key: ["header:x-user-id", "ip"]
    limits: [{capacity: 2, rate: 1/min}]
"""
        users = {"alice": "paid", "bob": None}
        with Sluice(config) as s, Nginx(s.port, users) as n:
            # alice claims to be someone new each time: charged as alice
            got = [n.request("GET", "/", as_user("alice", {
                "x-user-id": "not-alice-%d" % i})).status for i in range(3)]
            self.assertEqual(got, [200, 200, 429])
            self.assertEqual(n.request("GET", "/whoami", as_user("bob", {
                "x-user-id": "alice", "x-user-tier": "gold"})).body,
                b"[bob|]")
            self.assertEqual(n.request("GET", "/whoami", as_user("alice"))
                             .status, 429)
            # no valid credentials: nginx answers 401, sluice is not asked
            r = n.request("GET", "/", {"x-user-id": "bob"})
            self.assertEqual(r.status, 401)
            r = n.request("GET", "/", {"Authorization": "Basic " +
                                       base64.b64encode(b"bob:wrong")
                                       .decode()})
            self.assertEqual(r.status, 401)
            # 5 requests asked sluice: 3 + whoami bob + whoami alice
            m = s.metrics()
            self.assertEqual(m['sluice_decisions_total{rule="api",'
                               'result="allowed"}'], 3)
            self.assertEqual(m['sluice_decisions_total{rule="api",'
                               'result="limited"}'], 2)

    def test_every_spelling_nginx_routes_meets_its_rule(self):
        """tests/data/path_spellings.tsv through the example: nginx's own
        $uri for each target is the table's, and every target that nginx,
        Caddy or an app behind them routes to /api/upload is limited once
        /api/upload is drained; the others are not this rule's."""
        config = """
rules:
  - name: upload
    match: {methods: [POST], path: "/api/upload"}
    limits: [{capacity: 2, rate: 1/min}]
"""
        rows = harness.path_spellings()
        # the table is consistent: what a router takes to /api/upload is
        # charged (nginx by its $uri, Caddy by its own matcher)
        for target, uri, caddy, charged in rows:
            if (uri != "400" and harness.routes_to(uri)) or caddy == "upload":
                self.assertTrue(charged, target)
        with Sluice(config) as s, Nginx(s.port) as n:
            got = [n.request("POST", "/api/upload", {}, "x").status
                   for _ in range(2)]
            self.assertEqual(got, [200, 200])
            for target, uri, _, charged in rows:
                r = n.request("POST", target, {}, "x")
                want = 400 if uri == "400" else 429 if charged else 200
                self.assertEqual(r.status, want, target)
                if want == 429:
                    self.assertEqual(r.json()["policy"], "upload", target)
            log = n.access_log(len(rows) + 2)[2:]
            self.assertEqual(len(log), len(rows))
            with open(os.path.join(n.dir, "logs", "access.log")) as f:
                uris = [re.search(r" uri=\[(.*)\]$", line).group(1)
                        for line in f.read().splitlines()[2:]]
            for (target, uri, _, _), seen in zip(rows, uris):
                if uri != "400":
                    self.assertEqual(seen, uri, target)
            # another method is not this rule's
            self.assertEqual(n.request("GET", "/api/upload").status, 200)


class Direct(unittest.TestCase):
    """Rules where nginx adds nothing: requests go straight to sluice."""

    def test_composite_keys(self):
        config = """
rules:
  - name: partner
    key: ["header:x-api-key+ip"]
    limits: [{capacity: 2, rate: 1/min}]
"""
        with Sluice(config) as s:
            def check(key, ip):
                h = {"X-Real-IP": ip}
                if key:
                    h["x-api-key"] = key
                return s.request("GET", "/v1/check", h)
            self.assertEqual([check("k1", "192.0.2.1").status
                              for _ in range(3)], [200, 200, 429])
            # the same key from another address is another bucket
            self.assertEqual(check("k1", "192.0.2.2").status, 200)
            # another key from the first address too
            self.assertEqual(check("k2", "192.0.2.1").status, 200)
            # without the key the composite is empty: nothing to charge
            for _ in range(3):
                r = check(None, "192.0.2.1")
                self.assertEqual(r.status, 200)
                self.assertIsNone(r.header("x-ratelimit-limit"))

    def test_forwarded_for_from_untrusted_peer_is_ignored(self):
        config = """
trusted_proxies: [127.0.0.1/32]
rules:
  - name: per-ip
    key: ["ip"]
    limits: [{capacity: 2, rate: 1/min}]
"""
        with Sluice(config) as s:
            def check(source, i):
                c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10,
                                               source_address=(source, 0))
                try:
                    c.request("GET", "/v1/check", headers={
                        "X-Forwarded-For": "203.0.113.%d" % i,
                        "X-Real-IP": "198.51.100.%d" % i})
                    r = c.getresponse()
                    r.read()
                    return r.status
                finally:
                    c.close()
            # 127.0.0.2 is not a trusted proxy: its headers are ignored
            # and all its requests share the bucket of 127.0.0.2
            self.assertEqual([check("127.0.0.2", i) for i in range(3)],
                             [200, 200, 429])
            # 127.0.0.1 is trusted: X-Real-IP names the client
            self.assertEqual([check("127.0.0.1", i) for i in range(3)],
                             [200, 200, 200])

    def test_ipv6_clients_are_grouped_by_64(self):
        if not socket.has_ipv6:
            self.skipTest("no IPv6")
        try:
            probe = socket.socket(socket.AF_INET6)
            probe.bind(("::1", 0))
            probe.close()
        except OSError:
            self.skipTest("no IPv6 loopback")
        config = """
trusted_proxies: ["::1/128"]
rules:
  - name: per-ip
    key: ["ip"]
    limits: [{capacity: 2, rate: 1/min}]
"""
        with Sluice(config, host="::1") as s:
            port = s.port

            def check(ip):
                c = http.client.HTTPConnection("::1", port, timeout=10)
                try:
                    c.request("GET", "/v1/check", headers={"X-Real-IP": ip})
                    r = c.getresponse()
                    r.read()
                    return r.status
                finally:
                    c.close()
            # three addresses of 2001:db8:1:2::/64 share one bucket
            self.assertEqual([check("2001:db8:1:2::1"),
                              check("2001:db8:1:2:ffff::9"),
                              check("2001:db8:1:2:aaaa:bbbb:cccc:dddd")],
                             [200, 200, 429])
            # the next /64 is someone else
            self.assertEqual(check("2001:db8:1:3::1"), 200)
            # an IPv4-mapped address is that IPv4 client
            self.assertEqual([check("::ffff:192.0.2.9"), check("192.0.2.9"),
                              check("::ffff:192.0.2.9")], [200, 200, 429])


if __name__ == "__main__":
    unittest.main(verbosity=2)
