#!/usr/bin/env python3
"""`sluice_config FILE;`: a `sluice serve` rules file inside nginx.

Debian's real nginx loads this build's ngx_http_sluice_module (started
and stopped by test_nginx_module.NginxDaemon, under the sanitizers when
the build has them), and the same YAML file is given to a real
`sluice serve`.  Each request of a table goes to nginx as it is and to
serve's /v1/check as nginx's auth_request would describe it
(X-Original-Method, X-Original-URI, the request's own header fields):
the allow/deny sequences and the rate-limit headers must be the same.

Rates are one a minute, so nothing refills while a table runs; the only
time-dependent header values (seconds until full or until a retry) may
differ by the one second that can pass between the two answers.
"""
import http.client
import itertools
import os
import re
import signal
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_nginx_module import NginxDaemon, nginx_t  # noqa: E402

RULES = """
store: {memory: {max_keys: 4096}}
rules:
  # tiers chosen by a header, one identity with an override of its own
  - name: plans
    match: {path: "/tier/*"}
    key: ["header:x-user"]
    tiers:
      header: x-plan
      default: free
      limits:
        free: [{capacity: 2, rate: 1/min}]
        paid: [{capacity: 4, rate: 1/min}]
    overrides:
      "vip": [{capacity: 6, rate: 1/min}]
  # a path rule, for one method, per client address
  - name: upload
    match: {methods: [POST], path: "/api/upload"}
    key: ["ip"]
    limits: [{capacity: 2, rate: 1/min}]
  # a composite key: an API key at one address (no key: not limited)
  - name: combo
    match: {path: "/combo"}
    key: ["header:x-api-key+ip"]
    limits: [{capacity: 2, rate: 1/min}, {capacity: 10, rate: 10/day}]
  # a shadow rule: counts, never refuses
  - name: watch
    match: {path: "/shadow"}
    key: ["ip"]
    shadow: true
    limits: [{capacity: 1, rate: 1/min}]
"""

# The header fields that carry a decision (serve's and the module's).
RL_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining",
              "x-ratelimit-reset", "x-ratelimit-retry-after-ms",
              "ratelimit-policy", "ratelimit", "retry-after")
# Their time-dependent parts: seconds (ms) until full or until a retry.
TIMED = {"x-ratelimit-reset": 1, "retry-after": 1,
         "x-ratelimit-retry-after-ms": 1000}


def write_file(text, suffix=".yaml"):
    fd, path = tempfile.mkstemp(prefix="sluice-ngxcfg-", suffix=suffix)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o644)
    return path


def nginx_http(rules_path, extra_loc="", extra_server=""):
    """A server whose every request is decided by the file's rules; a
    POST's answer is the page (error_page turns the static module's 405
    into it, after the rules have decided)."""
    return """
    server { listen 127.0.0.1:@PORT@; %s
        location / { sluice_config %s; %s
            error_page 405 =200 /index.html;
            try_files /index.html =404; }
    }""" % (extra_server, rules_path, extra_loc)


SEQ = itertools.count(1)


def ask(port, method, target, headers):
    """(status, [(lower-case name, value)]) of one request, every header
    line kept (a field sent twice shows twice); headers: a dict or a list
    of (name, value) lines."""
    lines = list(headers.items()) if isinstance(headers, dict) else headers
    # x-seq: NginxDaemon.access_log() gives lines in the order sent (with
    # two workers, a line can be written after the next request's).
    lines = lines + [("x-seq", str(next(SEQ)))]
    body = b"x" if method == "POST" else None
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.putrequest(method, target, skip_accept_encoding=True)
        for k, v in lines:
            c.putheader(k, v)
        if body:
            c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        r.read()
        return r.status, [(k.lower(), v) for k, v in r.getheaders()]
    finally:
        c.close()


def rl(headers):
    """The rate-limit fields of an answer: name -> [values]."""
    out = {}
    for k, v in headers:
        if k in RL_HEADERS:
            out.setdefault(k, []).append(v)
    return out


class SameAnswersAsServe(unittest.TestCase):
    def setUp(self):
        self.rules = write_file(RULES)
        self.addCleanup(os.unlink, self.rules)

    def both(self, n, s, method, target, headers=None):
        """One request to nginx and its description to serve: the same
        status (200 or 429) and the same rate-limit fields."""
        headers = list((headers or {}).items()) \
            if isinstance(headers, dict) or headers is None else headers
        st_n, h_n = ask(n.port, method, target, headers)
        check = headers + [("X-Original-Method", method),
                           ("X-Original-URI", target)]
        st_s, h_s = ask(s.port, "GET", "/v1/check", check)
        what = "%s %s %r" % (method, target, headers)
        self.assertEqual(st_n, st_s, what)
        a, b = rl(h_n), rl(h_s)
        self.assertEqual(sorted(a), sorted(b), what)
        for name in a:
            self.assertEqual(len(a[name]), 1, (what, name, a[name]))
            x, y = a[name][0], b[name][0]
            if name in TIMED:
                self.assertLessEqual(abs(int(x) - int(y)), TIMED[name],
                                     (what, name, x, y))
            elif name == "ratelimit":
                # '"p";r=R;t=T': r exact, t within a second
                rx, tx = re.fullmatch(r'(.*;r=\d+);t=(\d+)', x).groups()
                ry, ty = re.fullmatch(r'(.*;r=\d+);t=(\d+)', y).groups()
                self.assertEqual(rx, ry, what)
                self.assertLessEqual(abs(int(tx) - int(ty)), 1, what)
            else:
                self.assertEqual(x, y, (what, name))
        return st_n, a

    def test_tiers_override_composite_key_and_shadow_rule(self):
        with NginxDaemon(nginx_http(self.rules)) as n, \
                harness.Sluice(RULES) as s:
            seq = [self.both(n, s, "GET", "/tier/a", {"x-user": "ann"})[0]
                   for _ in range(3)]
            self.assertEqual(seq, [200, 200, 429])
            # the tier named by the header, in any case; an unknown one
            # is the default
            seq = [self.both(n, s, "GET", "/tier/b",
                             {"x-user": "bob", "x-plan": p})[0]
                   for p in ("paid", "PAID", "paid", "paid", "paid")]
            self.assertEqual(seq, [200] * 4 + [429])
            seq = [self.both(n, s, "GET", "/tier/c",
                             {"x-user": "cy", "x-plan": "gold"})[0]
                   for _ in range(3)]
            self.assertEqual(seq, [200, 200, 429])
            # the override beats the tier
            seq = [self.both(n, s, "GET", "/tier/v", {"x-user": "vip"})[0]
                   for _ in range(7)]
            self.assertEqual(seq, [200] * 6 + [429])
            st, h = self.both(n, s, "GET", "/tier/a", {"x-user": "ann"})
            self.assertEqual(h["ratelimit-policy"], ['"plans/free";q=2;w=120'])
            # the identity header on two lines is no identity (a client
            # must not pick its bucket by adding a line): the rule does
            # not apply, as when the header is absent
            self.assertEqual(self.both(n, s, "GET", "/tier/a",
                                       [("x-user", "ann"),
                                        ("x-user", "zed")])[0], 200)
            # composite key: per API key and address, none: not limited
            seq = [self.both(n, s, "GET", "/combo", {"x-api-key": k})[0]
                   for k in ("k1", "k1", "k1", "k2")]
            self.assertEqual(seq, [200, 200, 429, 200])
            seq = [self.both(n, s, "GET", "/combo")[0] for _ in range(4)]
            self.assertEqual(seq, [200] * 4)
            # shadow: never refuses, sends no headers, but counts
            for _ in range(3):
                st, h = self.both(n, s, "GET", "/shadow")
                self.assertEqual((st, h), (200, {}))
            self.assertTrue(harness.wait_until(
                lambda: n.error_log().count('shadow rule "watch"') == 2, 30),
                n.error_log())

    def test_path_rule_sees_through_spellings(self):
        rows = [r for r in harness.path_spellings() if r[1] != "400"]
        with NginxDaemon(nginx_http(self.rules)) as n, \
                harness.Sluice(RULES) as s:
            seq = [self.both(n, s, "POST", "/api/upload")[0]
                   for _ in range(3)]
            self.assertEqual(seq, [200, 200, 429])
            # GET is not this rule's
            self.assertEqual(self.both(n, s, "GET", "/api/upload")[0], 200)
            for target, _, _, charged in rows:
                st, _ = self.both(n, s, "POST", target)
                self.assertEqual(st, 429 if charged else 200, target)


class ClientAddress(unittest.TestCase):
    IP_RULE = """
rules:
  - name: perip
    match: {path: "/ip"}
    key: ["ip"]
    limits: [{capacity: 2, rate: 1/min}]
"""

    def test_forwarded_headers_name_no_fresh_bucket(self):
        # The file trusts loopback (serve's default trusted_proxies) and
        # the client is on loopback: nginx's address is still the one.
        rules = write_file(self.IP_RULE)
        self.addCleanup(os.unlink, rules)
        with NginxDaemon(nginx_http(rules)) as n:
            got = [ask(n.port, "GET", "/ip", {
                "X-Forwarded-For": "198.51.100.%d" % i,
                "X-Real-IP": "203.0.113.%d" % i})[0] for i in range(4)]
            self.assertEqual(got, [200, 200, 429, 429])

    def test_the_address_is_remote_addr_after_realip(self):
        rules = write_file(self.IP_RULE)
        self.addCleanup(os.unlink, rules)
        http = nginx_http(rules, extra_server="set_real_ip_from 127.0.0.1;"
                          " real_ip_header X-Real-IP;")
        with NginxDaemon(http) as n:
            a = [ask(n.port, "GET", "/ip", {"X-Real-IP": "203.0.113.1"})[0]
                 for _ in range(3)]
            b = [ask(n.port, "GET", "/ip", {"X-Real-IP": "203.0.113.2"})[0]
                 for _ in range(3)]
            self.assertEqual(a, [200, 200, 429])
            self.assertEqual(b, [200, 200, 429])


class TheRequestItself(unittest.TestCase):
    def test_a_clients_original_uri_picks_no_path(self):
        # proxy: nginx names X-Original-* for serve's /v1/check; inside
        # nginx the request itself is decided, so a client's own
        # X-Original-URI (one line or two) neither escapes nor aims a
        # rule.
        rules = write_file(ClientAddress.IP_RULE + "proxy: nginx\n")
        self.addCleanup(os.unlink, rules)
        with NginxDaemon(nginx_http(rules)) as n:
            got = [ask(n.port, "GET", "/ip?x=%d" % i,
                       [("X-Original-URI", "/free"),
                        ("X-Original-URI", "/elsewhere")][:1 + i % 2])[0]
                   for i in range(4)]
            self.assertEqual(got, [200, 200, 429, 429])
            got = [ask(n.port, "GET", "/free", {
                "X-Original-URI": "/ip"})[0] for _ in range(3)]
            self.assertEqual(got, [200, 200, 200])


class WithSluiceLimit(unittest.TestCase):
    RULES = """
rules:
  - name: cfg
    key: ["header:x-user"]
    limits: [{capacity: 5, rate: 1/min}]
"""

    def test_both_apply_and_a_refused_request_charges_neither(self):
        rules = write_file(self.RULES)
        self.addCleanup(os.unlink, rules)
        http = """
    sluice_limit_zone $http_x_user zone=z:1m rate=1r/m;
    server { listen 127.0.0.1:@PORT@; sluice_limit_status 429;
        sluice_limit_headers on;
        location /both { sluice_config %s;
            sluice_limit zone=z burst=1 nodelay;
            try_files /index.html =404; }
        location /cfg { sluice_config %s; try_files /index.html =404; }
        location /lim { sluice_limit zone=z burst=1 nodelay;
            try_files /index.html =404; }
    }""" % (rules, rules)
        with NginxDaemon(http) as n:
            got = [ask(n.port, "GET", "/both", {"x-user": "u"})
                   for _ in range(4)]
            self.assertEqual([st for st, _ in got], [200, 200, 429, 429])
            # one decision reported per answer: the most restrictive
            for st, h in got:
                h = rl(h)
                self.assertEqual(len(h["x-ratelimit-limit"]), 1, h)
            self.assertEqual(rl(got[1][1])["x-ratelimit-limit"], ["2"])
            self.assertEqual(rl(got[2][1])["ratelimit-policy"],
                             ['"z";q=2;w=120'])
            # the refused ones took nothing from the file's rule (5)
            self.assertEqual([ask(n.port, "GET", "/cfg", {"x-user": "u"})[0]
                              for _ in range(4)], [200, 200, 200, 429])
            # ...and the rule refusing takes nothing from the zone
            self.assertEqual([ask(n.port, "GET", "/cfg", {"x-user": "w"})[0]
                              for _ in range(6)], [200] * 5 + [429])
            self.assertEqual(ask(n.port, "GET", "/both", {"x-user": "w"})[0],
                             429)
            self.assertEqual([ask(n.port, "GET", "/lim", {"x-user": "w"})[0]
                              for _ in range(3)], [200, 200, 429])


class Settings(unittest.TestCase):
    RULES = """
rules:
  - name: one
    key: ["header:x-user"]
    limits: [{capacity: 1, rate: 1/min}]
"""

    def test_status_headers_and_dry_run_follow_the_levels_that_set_them(
            self):
        rules = write_file(self.RULES)
        self.addCleanup(os.unlink, rules)
        # http{} sets the headers, one location the status and no
        # headers, one dry run; the refusals answer accordingly, and
        # $sluice_limit_status says what the rules decided.
        http = """
    sluice_limit_headers draft-11;
    sluice_config %s;
    server { listen 127.0.0.1:@PORT@;
        location /a { try_files /index.html =404; }
        location /b { sluice_limit_status 503; sluice_limit_headers off;
            try_files /index.html =404; }
        location /c { sluice_limit_dry_run on; try_files /index.html =404; }
        location /d { sluice_config off; try_files /index.html =404; }
    }""" % rules
        with NginxDaemon(http) as n:
            a = [ask(n.port, "GET", "/a", {"x-user": "a"}) for _ in range(2)]
            self.assertEqual([st for st, _ in a], [200, 429])
            self.assertEqual(rl(a[1][1])["ratelimit-policy"],
                             ['"one";q=1;w=60'])
            self.assertNotIn("x-ratelimit-limit", rl(a[1][1]))
            self.assertIn("retry-after", rl(a[1][1]))
            b = [ask(n.port, "GET", "/b", {"x-user": "b"}) for _ in range(2)]
            self.assertEqual([st for st, _ in b], [200, 503])
            self.assertEqual(rl(b[1][1]), {})
            c = [ask(n.port, "GET", "/c", {"x-user": "c"})[0]
                 for _ in range(3)]
            self.assertEqual(c, [200, 200, 200])
            d = [ask(n.port, "GET", "/d", {"x-user": "d"})[0]
                 for _ in range(3)]
            self.assertEqual(d, [200, 200, 200])
            self.assertIn('limiting requests, dry run, retry after',
                          n.error_log())

            def st(user):
                return [f[2] for f in n.access_log() if f[0] == user]
            self.assertTrue(harness.wait_until(
                lambda: len(st("c")) == 3 and len(st("d")) == 3, 30))
            self.assertEqual(st("c"), ["PASSED", "REJECTED_DRY_RUN",
                                       "REJECTED_DRY_RUN"])
            self.assertEqual(st("d"), ["-"] * 3)


def workers(master):
    """The pids of nginx master's worker processes now."""
    try:
        with open("/proc/%d/task/%d/children" % (master, master)) as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


class Lifecycle(unittest.TestCase):
    def rules(self, capacity):
        return """
store: {memory: {max_keys: 1024}}
rules:
  - name: kept
    match: {path: "/kept"}
    key: ["header:x-user"]
    limits: [{capacity: 2, rate: 1/min}]
  - name: changed
    match: {path: "/changed"}
    key: ["header:x-user"]
    limits: [{capacity: %d, rate: 1/min}]
""" % capacity

    def test_reload_reads_the_file_again_and_the_buckets_stay(self):
        rules = write_file(self.rules(2))
        self.addCleanup(os.unlink, rules)
        with NginxDaemon(nginx_http(rules)) as n:
            self.assertEqual([ask(n.port, "GET", "/kept", {"x-user": "k"})[0]
                              for _ in range(3)], [200, 200, 429])
            self.assertEqual([ask(n.port, "GET", "/changed",
                                  {"x-user": "a"})[0] for _ in range(3)],
                             [200, 200, 429])
            with open(rules, "w") as f:
                f.write(self.rules(5))
            master = n.masters()[0]
            old = workers(master)
            n.signal(signal.SIGHUP)
            # The old workers answer (with the old rules) until they have
            # left: one answer with the new limit does not mean the next
            # goes to a new worker on a loaded host.
            self.assertTrue(harness.wait_until(
                lambda: not old & workers(master), 60), n.error_log())
            h = dict(ask(n.port, "GET", "/changed", {"x-user": "probe"})[1])
            self.assertEqual(h.get("x-ratelimit-limit"), "5")
            # the new limit for a new key; the drained key stays drained
            self.assertEqual([ask(n.port, "GET", "/changed",
                                  {"x-user": "b"})[0] for _ in range(6)],
                             [200] * 5 + [429])
            self.assertEqual(ask(n.port, "GET", "/kept", {"x-user": "k"})[0],
                             429)
            # a binary upgrade (USR2, WINCH, QUIT) keeps them too
            n.upgrade()
            self.assertEqual(ask(n.port, "GET", "/kept", {"x-user": "k"})[0],
                             429)
            self.assertEqual(ask(n.port, "GET", "/changed",
                                 {"x-user": "b"})[0], 429)

    def test_a_bad_file_is_refused_at_reload_and_the_old_rules_stay(self):
        rules = write_file(self.rules(2))
        self.addCleanup(os.unlink, rules)
        with NginxDaemon(nginx_http(rules)) as n:
            with open(rules, "w") as f:
                f.write(self.rules(2).replace("capacity: 2", "capacity: two"))
            n.signal(signal.SIGHUP)
            self.assertTrue(harness.wait_until(
                lambda: "sluice_config: %s:" % rules in n.error_log(), 60),
                n.error_log())
            self.assertEqual([ask(n.port, "GET", "/kept", {"x-user": "k"})[0]
                              for _ in range(3)], [200, 200, 429])


class BadFile(unittest.TestCase):
    def t(self, text):
        path = write_file(text)
        self.addCleanup(os.unlink, path)
        rc, out = nginx_t("server { location / { sluice_config %s; } }"
                          % path)
        self.assertNotEqual(rc, 0, out)
        return path, out

    def test_a_yaml_error_names_the_file_and_line(self):
        path, out = self.t("rules:\n  - name: a\n    limits:"
                           " [{capacity: 2, rate: 1/fortnight}]\n")
        self.assertRegex(out, r"sluice_config: %s:3: .*rate.* in CONF:\d+"
                         % re.escape(path))

    def test_a_redis_store_is_refused_with_the_file_and_line(self):
        path, out = self.t("# sluice\nstore: {redis: {url: "
                           "\"redis://u:hunter2@127.0.0.1:6379\"}}\n"
                           "rules:\n  - name: a\n    limits:"
                           " [{capacity: 2, rate: 1/min}]\n")
        self.assertRegex(out, r"sluice_config: %s:2: store: a redis store is"
                         r" not available to sluice_config" %
                         re.escape(path))
        self.assertNotIn("hunter2", out)

    def test_a_missing_file_is_refused(self):
        rc, out = nginx_t("server { location / { sluice_config "
                          "/nonexistent/sluice.yaml; } }")
        self.assertNotEqual(rc, 0)
        self.assertRegex(out, r"sluice_config: /nonexistent/sluice.yaml.*"
                         r" in CONF:\d+")


if __name__ == "__main__":
    unittest.main()
