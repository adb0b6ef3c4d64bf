#!/usr/bin/env python3
"""ngx_http_sluice_module (src/nginx) loaded into Debian's own nginx.

Each test starts the real /usr/sbin/nginx, as a daemon (a binary upgrade
needs one: a master whose parent is still its starter ignores USR2), with
`load_module` of the module this build made, its own prefix and a config
on free loopback ports; the daemon's masters (read from its pid files)
are stopped when the test ends, whatever happened.

The test build's module carries ASan and UBSan (SLUICE_SANITIZE): their
runtimes are preloaded into nginx (LD_PRELOAD, kept across a binary
upgrade by `env`), so every test here runs the module under them; a
sanitizer report in the error log fails the test.

Limits are chosen so that a busy machine cannot change the answers: the
one-instant comparisons use rates of one a minute, the refill test
bounds its counts by the time it measured, and the delay test asserts
only that waits happened (never how short they were).
"""
import concurrent.futures
import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

NGINX = "/usr/sbin/nginx"
BUILD = os.environ.get("SLUICE_BUILD", os.path.join(harness.SRC, "build"))
MODULE = os.path.join(BUILD, "nginx", "ngx_http_sluice_module.so")


def sanitizer_env():
    """The environment nginx needs to load this build's module: the
    sanitizer runtimes first when the module was linked with them."""
    env = dict(os.environ)
    needed = subprocess.run(["readelf", "-d", MODULE], capture_output=True,
                            text=True).stdout
    if "libasan" in needed:
        libs = []
        for lib in ("libasan.so", "libubsan.so"):
            path = subprocess.run(["gcc", "-print-file-name=" + lib],
                                  capture_output=True, text=True).stdout
            libs.append(path.strip())
        env["LD_PRELOAD"] = " ".join(libs)
        # nginx frees its pools at exit, not every allocation: leaks are
        # not the module's; errors are.
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


class NginxDaemon:
    """Debian's nginx with the module, on free ports: http(s) the config's
    `http {}` body with @PORT@ for the listening port."""

    def __init__(self, http, store_dir=None, env=None):
        if not os.path.exists(NGINX):
            raise unittest.SkipTest("nginx is not installed (scripts/deps)")
        if not os.path.exists(MODULE):
            raise unittest.SkipTest("the module was not built (nginx-dev)")
        self.dir = tempfile.mkdtemp(prefix="sluice-ngxmod-")
        os.chmod(self.dir, 0o755)  # the workers (nobody) read the files
        with open(os.path.join(self.dir, "index.html"), "w") as f:
            f.write("hello\n")
        os.chmod(os.path.join(self.dir, "index.html"), 0o644)
        os.makedirs(os.path.join(self.dir, "logs"))
        self.env = sanitizer_env()
        # More for nginx and its workers (each passed on by `env`);
        # LD_PRELOAD's libraries go after the sanitizers'.
        self.extra_env = dict(env or {})
        for k, v in self.extra_env.items():
            if k == "LD_PRELOAD":
                v = (self.env.get("LD_PRELOAD", "") + " " + v).strip()
            self.env[k] = v
        self.http = http
        self.conf = os.path.join(self.dir, "nginx.conf")
        for _ in range(5):
            self.port = harness.free_port()
            self.write()
            p = subprocess.run([NGINX, "-p", self.dir + "/", "-c", self.conf],
                               env=self.env, capture_output=True, text=True,
                               timeout=120)
            if p.returncode == 0:
                break
            if not harness.in_use(p.stderr + self.error_log()):
                self.stop()
                raise RuntimeError("nginx did not start:\n%s\n%s"
                                   % (p.stderr, self.error_log()))
        else:
            self.stop()
            raise RuntimeError("no free port")
        if not harness.wait_until(self.answers, 60):
            self.stop()
            raise RuntimeError("nginx never answered:\n" + self.error_log())

    def config_text(self, http):
        extra = "".join(" env %s;" % k
                        for k in getattr(self, "extra_env", {})
                        if k != "LD_PRELOAD")
        return ("""load_module %s;
env LD_PRELOAD; env ASAN_OPTIONS; env UBSAN_OPTIONS;""" + extra + """
worker_processes 2;
pid %s/nginx.pid;
error_log %s/logs/error.log info;
events { worker_connections 512; }
http {
    log_format st '$http_x_user $status $sluice_limit_status $http_x_seq';
    access_log %s/logs/access.log st;
    client_body_temp_path %s/body; proxy_temp_path %s/proxy;
    fastcgi_temp_path %s/fcgi; uwsgi_temp_path %s/uwsgi;
    scgi_temp_path %s/scgi;
    sluice_limit_store_dir %s;
    root %s;
%s
}
""") % ((MODULE,) + (self.dir,) * 10 + (http.replace("@PORT@",
                                                      str(self.port)),))

    def write(self):
        with open(self.conf, "w") as f:
            f.write(self.config_text(self.http))

    def answers(self):
        try:
            self.get("/", {})
            return True
        except OSError:
            return False

    def get(self, path, headers):
        # x-seq numbers the requests so that access_log() can give their
        # lines in the order they were sent: with two workers, a request's
        # line can be written after the next request's (nginx logs once
        # the answer has left, and the next one may be served meanwhile).
        self.seq = getattr(self, "seq", 0) + 1
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            c.request("GET", path, headers=dict(headers, **{"x-seq":
                                                            str(self.seq)}))
            r = c.getresponse()
            r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()

    def statuses(self, path, user, n):
        return [self.get(path, {"x-user": user} if user else {})[0]
                for _ in range(n)]

    def masters(self):
        pids = []
        for name in ("nginx.pid", "nginx.pid.oldbin"):
            try:
                with open(os.path.join(self.dir, name)) as f:
                    pids.append(int(f.read().strip()))
            except (OSError, ValueError):
                pass
        return pids

    def error_log(self):
        try:
            with open(os.path.join(self.dir, "logs", "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def access_log(self):
        with open(os.path.join(self.dir, "logs", "access.log")) as f:
            lines = [line.split() for line in f]
        # In the order the requests were sent (lines of requests sent
        # without x-seq, such as another client's, first, as written).
        return sorted(lines, key=lambda f: int(f[3]) if len(f) > 3
                      and f[3].isdigit() else 0)

    def access_log_lines(self, user):
        try:
            return len([f for f in self.access_log() if f[0] == user])
        except OSError:
            return 0

    def signal(self, sig, pid=None):
        os.kill(pid or self.masters()[0], sig)

    def upgrade(self):
        """A binary upgrade (USR2, WINCH, QUIT) onto the same binary; returns
        the new master once the old one has gone. nginx renames nginx.pid to
        nginx.pid.oldbin before the new master writes its own, so both files
        can name the old master for a moment: wait for two distinct pids."""
        master = self.masters()[0]
        self.signal(signal.SIGUSR2, master)

        def both():
            pids = self.masters()
            return len(set(pids)) == 2 and master in pids

        if not harness.wait_until(both, 60):
            raise AssertionError("no new master after USR2:\n" +
                                 self.error_log())
        new = [p for p in self.masters() if p != master][0]
        os.kill(master, signal.SIGWINCH)
        os.kill(master, signal.SIGQUIT)
        if not harness.wait_until(
                lambda: not os.path.exists("/proc/%d" % master), 60):
            raise AssertionError("the old master %d did not leave" % master)
        return new

    def stop(self):
        for pid in self.masters():
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        for pid in self.masters():
            harness.wait_until(lambda: not os.path.exists("/proc/%d" % pid),
                               30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        log = self.error_log()
        self.stop()
        assert "ERROR: AddressSanitizer" not in log and \
            "runtime error:" not in log, log


def nginx_t(http, **kw):
    """`nginx -t` on a config holding `http`; (exit code, its output)."""
    d = tempfile.mkdtemp(prefix="sluice-ngxmod-t-")
    try:
        n = NginxDaemon.__new__(NginxDaemon)
        n.dir, n.port, n.http = d, 1, http
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(n.config_text(http))
        os.makedirs(os.path.join(d, "logs"))
        p = subprocess.run([NGINX, "-t", "-p", d + "/", "-c", conf],
                           env=sanitizer_env(), capture_output=True,
                           text=True, timeout=120)
        return p.returncode, p.stderr.replace(conf, "CONF")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def loc(name, body):
    return "location %s { %s try_files /index.html =404; }" % (name, body)


class NoDelayAsLimitReq(unittest.TestCase):
    def test_burst_nodelay_passes_what_limit_req_passes_at_one_instant(self):
        # One a minute: nothing refills while the requests are made.
        http = """
    sluice_limit_zone $http_x_user zone=s:1m rate=1r/m;
    limit_req_zone $http_x_user zone=l:1m rate=1r/m;
    server { listen 127.0.0.1:@PORT@;
        sluice_limit_status 429; limit_req_status 429;
        %s %s %s %s }""" % (
            loc("/s5", "sluice_limit zone=s burst=5 nodelay;"),
            loc("/l5", "limit_req zone=l burst=5 nodelay;"),
            loc("/s0", "sluice_limit zone=s nodelay;"),
            loc("/l0", "limit_req zone=l nodelay;"))
        with NginxDaemon(http) as n:
            for burst in ("5", "0"):
                for user in ("alice", "bob"):
                    s = n.statuses("/s" + burst, burst + user, 10)
                    lr = n.statuses("/l" + burst, burst + user, 10)
                    self.assertEqual(s, lr)
                    self.assertEqual(s.count(200), int(burst) + 1, s)
            harness.wait_until(lambda: len([f for f in n.access_log()
                                            if f[0] == "5alice"]) == 10, 30)
            status = [f[2] for f in n.access_log() if f[0] == "5alice"]
            self.assertEqual(status.count("PASSED"), 6)
            self.assertEqual(status.count("REJECTED"), 4)

    def test_an_internal_redirect_is_not_charged_twice(self):
        # try_files falls back to a named location that is limited by the
        # same zone: limit_req decides once per request, so must sluice.
        http = """
    sluice_limit_zone $http_x_user zone=s:1m rate=1r/m;
    limit_req_zone $http_x_user zone=l:1m rate=1r/m;
    server { listen 127.0.0.1:@PORT@;
        sluice_limit_status 429; limit_req_status 429;
        location /s { sluice_limit zone=s burst=2 nodelay;
                      try_files /missing @s; }
        location @s { sluice_limit zone=s burst=2 nodelay;
                      try_files /index.html =404; }
        location /l { limit_req zone=l burst=2 nodelay;
                      try_files /missing @l; }
        location @l { limit_req zone=l burst=2 nodelay;
                      try_files /index.html =404; }
    }"""
        with NginxDaemon(http) as n:
            s = n.statuses("/s", "r", 5)
            self.assertEqual(s, n.statuses("/l", "r", 5))
            self.assertEqual(s, [200, 200, 200, 429, 429])

    def test_refill_is_the_zone_rate(self):
        http = """
    sluice_limit_zone $http_x_user zone=r:1m rate=2r/s;
    server { listen 127.0.0.1:@PORT@; sluice_limit_status 429;
        %s }""" % loc("/", "sluice_limit zone=r burst=3 nodelay;")
        with NginxDaemon(http) as n:
            # Drain: at most 4 pass, then refusals.
            t_drained = None
            for _ in range(50):
                if n.get("/", {"x-user": "k"})[0] == 429:
                    t_drained = time.monotonic()
                    break
            self.assertIsNotNone(t_drained)
            time.sleep(1.5)
            passed, t_end = 0, None
            for _ in range(50):
                if n.get("/", {"x-user": "k"})[0] == 429:
                    t_end = time.monotonic()
                    break
                passed += 1
            self.assertIsNotNone(t_end)
            # 2 tokens a second since the bucket was empty (at most
            # t_end - (t_drained - a request's time) ago, at least 1.5 s).
            self.assertGreaterEqual(passed, 3 - 1)  # floor(2 * 1.5) - 1 ms
            self.assertLessEqual(passed, min(4, int(2 * (t_end - t_drained
                                                         + 1)) + 1))


class Delay(unittest.TestCase):
    def test_ten_at_once_at_10rps_burst_10_are_spread_not_refused(self):
        http = """
    sluice_limit_zone $http_x_user zone=d:1m rate=10r/s;
    server { listen 127.0.0.1:@PORT@; %s }""" % loc(
            "/", "sluice_limit zone=d burst=10;")
        with NginxDaemon(http) as n:
            start = time.monotonic()

            def one(_):
                status = n.get("/", {"x-user": "spread"})[0]
                return status, time.monotonic() - start
            with concurrent.futures.ThreadPoolExecutor(10) as ex:
                got = list(ex.map(one, range(10)))
            self.assertEqual([s for s, _ in got], [200] * 10)
            done = sorted(t for _, t in got)
            # The last waited for its turn 0.9 s after the first.
            self.assertGreaterEqual(done[-1], 0.85)
            harness.wait_until(lambda: len([f for f in n.access_log()
                                            if f[0] == "spread"]) == 10, 30)
            status = [f[2] for f in n.access_log() if f[0] == "spread"]
            self.assertEqual(status.count("PASSED"), 1, status)
            self.assertEqual(status.count("DELAYED"), 9, status)


    def test_a_client_leaving_while_delayed_frees_its_request(self):
        # One a minute, burst 5: the second request waits a minute; its
        # client leaves, and the worker goes on (no stall, no crash under
        # the sanitizers, the request closed as a client-closed one).
        conf = """
    sluice_limit_zone $http_x_user zone=w:1m rate=1r/m;
    server { listen 127.0.0.1:@PORT@; %s }""" % loc(
            "/", "sluice_limit zone=w burst=5;")
        with NginxDaemon(conf) as n:
            self.assertEqual(n.get("/", {"x-user": "w"})[0], 200)
            socks = []
            for _ in range(3):
                c = http.client.HTTPConnection("127.0.0.1", n.port,
                                               timeout=60)
                c.request("GET", "/", headers={"x-user": "w"})
                socks.append(c)
            self.assertTrue(harness.wait_until(
                lambda: n.error_log().count("delaying request") == 3, 30))
            for c in socks:
                c.close()
            self.assertTrue(harness.wait_until(
                lambda: n.access_log_lines("w") == 4, 30))
            self.assertIn(" 499 ", " ".join(
                " ".join(f) + " " for f in n.access_log()))
            self.assertEqual(n.get("/", {"x-user": "other"})[0], 200)


class AllOrNothing(unittest.TestCase):
    def check(self, http):
        with NginxDaemon(http) as n:
            # b (capacity 2) passes two, then refuses: a (capacity 5)
            # must not be charged for the refused ones.
            self.assertEqual(n.statuses("/ab", "u", 6),
                             [200, 200, 429, 429, 429, 429])
            self.assertEqual(n.statuses("/a", "u", 5),
                             [200, 200, 200, 429, 429])

    def test_refused_request_charges_no_zone_on_separate_files(self):
        self.check("""
    sluice_limit_zone $http_x_user zone=a:1m rate=1r/m;
    sluice_limit_zone $http_x_user zone=b:1m rate=1r/m;
    server { listen 127.0.0.1:@PORT@; sluice_limit_status 429; %s %s }""" % (
            loc("/ab", "sluice_limit zone=a burst=4 nodelay;"
                " sluice_limit zone=b burst=1 nodelay;"),
            loc("/a", "sluice_limit zone=a burst=4 nodelay;")))

    def test_refused_request_charges_no_zone_on_one_store(self):
        one = os.path.join(tempfile.gettempdir(),
                           "sluice-ngxmod-one-%d" % os.getpid())
        self.addCleanup(lambda: os.path.exists(one) and os.unlink(one))
        self.check(("""
    sluice_limit_zone $http_x_user zone=a:1m rate=1r/m store=shared:@DIR@/one;
    sluice_limit_zone $http_x_user zone=b:1m rate=1r/m store=shared:@DIR@/one;
    server { listen 127.0.0.1:@PORT@; sluice_limit_status 429; %s %s }""" % (
            loc("/ab", "sluice_limit zone=a burst=4 nodelay;"
                " sluice_limit zone=b burst=1 nodelay;"),
            loc("/a", "sluice_limit zone=a burst=4 nodelay;"))).replace(
                "@DIR@/one", one))


class Keys(unittest.TestCase):
    def test_empty_key_is_not_limited_and_a_key_flood_keeps_a_drained_key(
            self):
        conf = """
    sluice_limit_zone $http_x_user zone=k:32k rate=1r/m;
    server { listen 127.0.0.1:@PORT@; sluice_limit_status 429; %s }""" % loc(
            "/", "sluice_limit zone=k burst=1 nodelay;")
        with NginxDaemon(conf) as n:
            self.assertEqual(n.statuses("/", None, 8), [200] * 8)
            self.assertEqual(n.statuses("/", "drained", 3), [200, 200, 429])
            # 32k holds 512 buckets: four times as many fresh keys.
            c = http.client.HTTPConnection("127.0.0.1", n.port, timeout=60)
            for i in range(2048):
                c.request("GET", "/", headers={"x-user": "flood%d" % i})
                c.getresponse().read()
            c.close()
            self.assertEqual(n.statuses("/", "drained", 2), [429, 429])


class Headers(unittest.TestCase):
    def test_headers_on_allowed_and_refused_answers_by_mode(self):
        http = """
    sluice_limit_zone $http_x_user zone=h:1m rate=1r/m;
    server { listen 127.0.0.1:@PORT@; sluice_limit_status 429;
        %s %s %s }""" % (
            loc("/on", "sluice_limit zone=h burst=1 nodelay;"
                " sluice_limit_headers on;"),
            loc("/legacy", "sluice_limit zone=h burst=1 nodelay;"
                " sluice_limit_headers legacy;"),
            loc("/draft", "sluice_limit zone=h burst=1 nodelay;"
                " sluice_limit_headers draft-11;"))
        with NginxDaemon(http) as n:
            st, h = n.get("/on", {"x-user": "a"})
            self.assertEqual(st, 200)
            self.assertEqual(h["x-ratelimit-limit"], "2")
            self.assertEqual(h["x-ratelimit-remaining"], "1")
            self.assertEqual(h["ratelimit-policy"], '"h";q=2;w=120')
            self.assertEqual(h["ratelimit"], '"h";r=1;t=60')
            self.assertNotIn("retry-after", h)
            n.get("/on", {"x-user": "a"})
            st, h = n.get("/on", {"x-user": "a"})
            self.assertEqual(st, 429)
            self.assertEqual(h["x-ratelimit-remaining"], "0")
            self.assertTrue(1 <= int(h["retry-after"]) <= 60, h)
            st, h = n.get("/legacy", {"x-user": "b"})
            self.assertIn("x-ratelimit-limit", h)
            self.assertNotIn("ratelimit-policy", h)
            st, h = n.get("/draft", {"x-user": "c"})
            self.assertIn("ratelimit-policy", h)
            self.assertNotIn("x-ratelimit-limit", h)


class DryRun(unittest.TestCase):
    def test_dry_run_refuses_nothing_and_says_what_it_would_do(self):
        http = """
    sluice_limit_zone $http_x_user zone=y:1m rate=1r/m;
    server { listen 127.0.0.1:@PORT@; sluice_limit_dry_run on; %s %s }""" % (
            loc("/", "sluice_limit zone=y burst=1 nodelay;"),
            loc("/d", "sluice_limit zone=y burst=1;"))
        with NginxDaemon(http) as n:
            self.assertEqual(n.statuses("/", "dry", 4), [200] * 4)
            self.assertEqual(n.statuses("/d", "dry2", 2), [200] * 2)
            # (nginx logs a request once its answer is sent)
            def st():
                return [f[2] for f in n.access_log()
                        if f[0] in ("dry", "dry2")]
            harness.wait_until(lambda: len(st()) == 6, 30)
            st = st()
            self.assertEqual(st[:4], ["PASSED", "PASSED", "REJECTED_DRY_RUN",
                                      "REJECTED_DRY_RUN"])
            self.assertEqual(st[4:], ["PASSED", "DELAYED_DRY_RUN"])
            self.assertIn("limiting requests, dry run", n.error_log())


class Lifecycle(unittest.TestCase):
    def test_reload_and_binary_upgrade_keep_a_drained_key_drained(self):
        http = """
    sluice_limit_zone $http_x_user zone=keep:1m rate=1r/m;
    server { listen 127.0.0.1:@PORT@; sluice_limit_status 429; %s }""" % loc(
            "/", "sluice_limit zone=keep burst=2 nodelay;")
        with NginxDaemon(http) as n:
            self.assertEqual(n.statuses("/", "k", 4), [200, 200, 200, 429])
            n.signal(signal.SIGHUP)
            self.assertTrue(harness.wait_until(
                lambda: "reconfiguring" in n.error_log(), 60))
            self.assertEqual(n.statuses("/", "k", 2), [429, 429])
            self.assertEqual(n.statuses("/", "k2", 1), [200])
            # Binary upgrade: a new master on the same binary; the old
            # one's workers leave, then it does.
            master = n.masters()[0]
            self.assertNotEqual(n.upgrade(), master)
            self.assertEqual(n.statuses("/", "k", 2), [429, 429])
            self.assertEqual(n.statuses("/", "k2", 3), [200, 200, 429])


class SharedWithServe(unittest.TestCase):
    def test_nginx_and_sluice_serve_on_one_file_enforce_one_limit(self):
        path = os.path.join(tempfile.mkdtemp(prefix="sluice-ngxmod-shm-"),
                            "buckets")
        # 64k is 1024 buckets; serve opens the file for as many.
        http = """
    sluice_limit_zone $http_x_user zone=api:64k rate=1r/m store=shared:%s;
    server { listen 127.0.0.1:@PORT@; sluice_limit_status 429; %s }""" % (
            path, loc("/", "sluice_limit zone=api burst=4 nodelay;"))
        serve_conf = """
store: {shared: {path: %s, max_keys: 1024}}
rules:
  - name: api
    key: ["header:x-user"]
    limits: [{capacity: 5, rate: 1/min}]
""" % path
        try:
            with NginxDaemon(http) as n, \
                    harness.Sluice(serve_conf) as s:
                self.assertEqual(n.statuses("/", "both", 3), [200] * 3)
                got = [s.request("GET", "/v1/check",
                                 {"x-user": "both"}).status
                       for _ in range(3)]
                self.assertEqual(got, [200, 200, 429])
                self.assertEqual(n.statuses("/", "both", 1), [429])
        finally:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)


class BadConfig(unittest.TestCase):
    CASES = [
        ("sluice_limit_zone $a zone=z:1m rate=fast;",
         r'invalid rate "fast"'),
        ("sluice_limit_zone $a zone=z:1m rate=0r/s;", r'invalid rate "0r/s"'),
        ("sluice_limit_zone $a zone=z:8k rate=1r/s;", r'zone "zone=z:8k" is '
         r'too small'),
        ("sluice_limit_zone $a zone=z:1m rate=1r/s;\n"
         "    sluice_limit_zone $a zone=z:1m rate=1r/s;",
         r'duplicate zone "z"'),
        ("sluice_limit_zone $a zone=z:1m rate=1r/s "
         "store=redis://u:hunter2@127.0.0.1:99999;",
         r'store="redis://u:\*\*\*@127.0.0.1:99999": '),
        ("sluice_limit_zone $a zone=z:1m rate=1r/s store=memcached://x;",
         r'unknown store'),
        ("sluice_limit_zone $a zone=z:1m rate=1r/s store=shared:rel;",
         r'must be an absolute path'),
        ("sluice_limit_zone $a zone=z rate=1r/s;", r'invalid zone size'),
        ("sluice_limit_zone $a rate=1r/s store=shared:/x;",
         r'must have "zone" parameter'),
        ("server { location / { sluice_limit zone=nope; } }",
         r'unknown sluice_limit_zone "nope"'),
        ("sluice_limit_zone $a zone=z:1m rate=1r/s;\n"
         "    server { location / { sluice_limit zone=z burst=5 nodelay "
         "delay=2; } }", r'"nodelay" and "delay" are mutually exclusive'),
        ("sluice_limit_zone $a zone=z:1m rate=1r/s;\n"
         "    server { location / { sluice_limit zone=z burst=2 delay=3; } }",
         r'"delay=3" is more than "burst=2"'),
        ("sluice_limit_zone $a zone=z:1m rate=1r/s;\n"
         "    server { location / { sluice_limit zone=z burst=x; } }",
         r'invalid burst value "burst=x"'),
        ("sluice_limit_zone $a zone=z:1m rate=1r/s;\n"
         "    server { location / { sluice_limit zone=z cost=0; } }",
         r'invalid cost value "cost=0"'),
        ("server { sluice_limit_headers sometimes; }",
         r'invalid value "sometimes"'),
    ]

    def test_each_bad_directive_is_refused_with_file_and_line(self):
        for text, message in self.CASES:
            with self.subTest(text=text):
                rc, out = nginx_t(text)
                self.assertNotEqual(rc, 0, out)
                self.assertRegex(out, message + r".* in CONF:\d+", out)
                self.assertNotIn("hunter2", out)


if __name__ == "__main__":
    unittest.main()
