#!/usr/bin/env python3
"""ngx_http_sluice_module on the Redis store (store=redis://...).

Debian's real nginx loads the module this build made (with ASan and
UBSan in the test build: test_nginx_module.NginxDaemon preloads their
runtimes, and a sanitizer report in the error log fails the test), and
a real redis-server is started by the harness on a free loopback port.

- Two nginx on one Redis enforce one limit: a key's capacity is spent
  once, whichever nginx and worker the requests reach.
- Delay mode works on Redis decisions: requests over the rate wait for
  their turn (the instant Redis gave back) instead of being refused.
- Redis Sentinel (the master's password from the URL) and Redis Cluster
  (each key on its own master) decide as one Redis does; a reload keeps
  deciding, and the old workers exit (their Redis connections and
  timers hold none of them).
- Redis killed, paused (SIGSTOP: it holds its connections and answers
  nothing) and brought back under a bounded load: fail=open lets
  requests through, fail=closed refuses them, fail=local decides on the
  worker's own buckets of the same limit; an unlimited location answers
  throughout (no worker waits on Redis); decisions come back once Redis
  does.
- A request parked on a Redis answer whose client goes away, and one
  parked while the worker is told to quit, are finalized correctly: no
  sanitizer report, the quitting worker answers before it exits.
- A wrong password: fail mode applies, and the refusal is logged once
  per worker (never the password), not once per request.
- nginx -t refuses bad store URLs, fail= and timeout= with FILE:LINE and
  never prints a password.

Bounds allow a machine oversubscribed several times over: counts are
exact where the rate is one a minute, waits are bounded in seconds where
a stalled worker would exceed them by far (Redis stays away for longer
than the bound), never tight.
"""
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import RedisServer, TlsFiles  # noqa: E402
from sentinel_harness import Sentinel  # noqa: E402
from test_nginx_module import NginxDaemon, nginx_t, loc  # noqa: E402

# A stalled worker would hold /healthz for as long as Redis stays away
# (at least PAUSE_S); a busy machine answers it far sooner.
PAUSE_S = 6.0
HEALTHZ_BOUND_S = 3.0


# A zone on a Redis that is up: the tests that count its answers give a
# deadline no busy machine misses (a worker's first request waits for its
# connection, through Sentinel or Cluster's discovery and AUTH); the
# timeout's own effect is FailModes'.
HEALTHY = "timeout=5000"


def zone(name, redis, rate="1r/m", extra=""):
    return ("sluice_limit_zone $http_x_user zone=%s:1m rate=%s "
            "store=%s %s;" % (name, rate, redis, extra))


def redis_url(r, password=None):
    if password is not None:
        return "redis://:%s@127.0.0.1:%d" % (password, r.port)
    return "redis://127.0.0.1:%d" % r.port


def server(body):
    return "server { listen 127.0.0.1:@PORT@; sluice_limit_status 429; " \
           "location = /healthz { return 200 ok; } %s }" % body


class Healthz:
    """A thread asking /healthz over and over (bounded in count and
    time), keeping the slowest answer and any failure."""

    def __init__(self, n, limit_s=120):
        self.n, self.worst, self.errors, self.count = n, 0.0, [], 0
        self.stopped = threading.Event()
        self.deadline = time.monotonic() + limit_s
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stopped.is_set() and time.monotonic() < self.deadline \
                and self.count < 5000:
            t0 = time.monotonic()
            try:
                st, _ = self.n.get("/healthz", {})
                if st != 200:
                    self.errors.append(st)
            except OSError as e:
                self.errors.append(repr(e))
            self.worst = max(self.worst, time.monotonic() - t0)
            self.count += 1
            time.sleep(0.02)

    def stop(self):
        self.stopped.set()
        self.t.join(60)


class TwoHosts(unittest.TestCase):
    def test_two_nginx_on_one_redis_enforce_one_limit(self):
        with RedisServer() as r:
            http = zone("shared", redis_url(r), extra=HEALTHY) + server(
                loc("/", "sluice_limit zone=shared burst=4 nodelay;"))
            with NginxDaemon(http) as a, NginxDaemon(http) as b:
                # Capacity 5 at one a minute: 12 requests alternating
                # between the two hosts pass exactly 5 times.
                got = [(a if i % 2 else b).get("/", {"x-user": "u1"})[0]
                       for i in range(12)]
                self.assertEqual(got.count(200), 5, got)
                self.assertEqual(got.count(429), 7, got)
                self.assertEqual(got[:5], [200] * 5, got)
                # Another key is its own bucket, on both.
                self.assertEqual(a.get("/", {"x-user": "u2"})[0], 200)
                self.assertEqual(b.get("/", {"x-user": "u2"})[0], 200)
                # The bucket is in Redis, named as sluice serve names it.
                keys = r.cli("KEYS", "sluice:{shared*")
                self.assertIn("u1", keys)

    def test_delay_mode_waits_for_the_turn_redis_gives(self):
        with RedisServer() as r:
            http = zone("slow", redis_url(r), rate="10r/s",
                        extra=HEALTHY) + server(
                loc("/", "sluice_limit zone=slow burst=10;"))
            with NginxDaemon(http) as n:
                out = []

                def one():
                    out.append(n.get("/", {"x-user": "d"})[0])
                ts = [threading.Thread(target=one) for _ in range(10)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join(120)
                self.assertEqual(out, [200] * 10)
                # (nginx writes a request's line after its answer)
                harness.wait_until(lambda: len(
                    [f for f in n.access_log() if f[0] == "d"]) >= 10, 30)
                st = [f[2] for f in n.access_log() if f[0] == "d"]
                self.assertEqual(len(st), 10, st)
                # Ten at once at 10 r/s: only the first is on time.
                self.assertGreaterEqual(st.count("DELAYED"), 5, st)
                self.assertNotIn("REJECTED", st)

    def test_sentinel_names_the_master_and_its_password_is_used(self):
        with RedisServer(password="m-pw") as m, Sentinel(m, quorum=1) as s:
            url = "sentinel://:m-pw@127.0.0.1:%d/mymaster" % s.port
            http = zone("sen", url, extra="fail=closed " + HEALTHY) + server(
                loc("/", "sluice_limit zone=sen burst=2 nodelay;"))
            with NginxDaemon(http) as n:
                self.assertEqual(n.statuses("/", "s1", 5),
                                 [200, 200, 200, 429, 429])
                self.assertIn("s1", m.cli("KEYS", "sluice:*"))
                self.assertNotIn("m-pw", n.error_log())

    def test_a_cluster_decides_each_key_on_its_own_master(self):
        nodes = []
        try:
            nodes = [RedisServer(cluster=True) for _ in range(3)]
            p = subprocess.run(["redis-cli", "--cluster", "create"] +
                               [x.seed() for x in nodes] + ["--cluster-yes"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            for x in nodes:
                self.assertTrue(harness.wait_until(
                    lambda: "cluster_state:ok" in x.cli("CLUSTER", "INFO"),
                    30))
            http = zone("cl", "cluster:" + nodes[0].seed(),
                        extra="fail=closed " + HEALTHY) + server(
                loc("/", "sluice_limit zone=cl burst=1 nodelay;"))
            with NginxDaemon(http) as n:
                users = ["c%d" % i for i in range(8)]
                for u in users:
                    self.assertEqual(n.statuses("/", u, 3), [200, 200, 429],
                                     u)
                # The keys landed on several masters.
                held = [x for x in nodes if x.cli("DBSIZE") != "0"]
                self.assertGreaterEqual(len(held), 2)
        finally:
            for x in nodes:
                x.stop()

    def test_a_reload_keeps_deciding_and_the_old_workers_exit(self):
        with RedisServer() as r:
            http = zone("rl", redis_url(r), extra=HEALTHY) + server(
                loc("/", "sluice_limit zone=rl burst=1 nodelay;"))
            with NginxDaemon(http) as n:
                self.assertEqual(n.statuses("/", "k", 3), [200, 200, 429])
                old = set(re.findall(r"start worker process (\d+)",
                                     n.error_log()))
                n.signal(signal.SIGHUP)
                # The old workers hold no request: their Redis
                # connections and timers keep none of them.
                self.assertTrue(harness.wait_until(
                    lambda: not any(os.path.exists("/proc/%s" % p)
                                    for p in old), 60), n.error_log())
                self.assertEqual(n.statuses("/", "k", 2), [429, 429])
                log = n.error_log()
                self.assertNotIn("[alert]", log)
                self.assertNotIn("open socket", log)


class FailModes(unittest.TestCase):
    def config(self, r, timeout=50):
        url = redis_url(r)
        t = "timeout=%d" % timeout
        return (zone("zopen", url, extra="fail=open " + t) +
                zone("zclosed", url, extra="fail=closed") +
                zone("zlocal", url, extra="fail=local") +
                server(loc("/open", "sluice_limit zone=zopen burst=1 "
                           "nodelay;") +
                       loc("/closed", "sluice_limit zone=zclosed burst=100 "
                           "nodelay;") +
                       loc("/local", "sluice_limit zone=zlocal burst=1 "
                           "nodelay;")))

    def away(self, n, r, how):
        """Redis away (killed or paused) for at least PAUSE_S while each
        mode is asked; /healthz asked throughout."""
        hz = Healthz(n)
        try:
            if how == "kill":
                r.kill()
            else:
                r.signal(signal.SIGSTOP)
            t0 = time.monotonic()
            opened = [n.get("/open", {"x-user": "o"})[0] for _ in range(6)]
            closed = [n.get("/closed", {"x-user": "c"})[0]
                      for _ in range(6)]
            local = [n.get("/local", {"x-user": "l%s" % how})[0]
                     for _ in range(12)]
            while time.monotonic() - t0 < PAUSE_S:
                time.sleep(0.1)
        finally:
            if how == "kill":
                r.start()
            else:
                r.signal(signal.SIGCONT)
            hz.stop()
        return opened, closed, local, hz

    def check(self, n, r, how):
        # Redis decides: /open's bucket (capacity 2) drains.
        self.assertEqual([n.get("/open", {"x-user": "o"})[0]
                          for _ in range(3)], [200, 200, 429])
        opened, closed, local, hz = self.away(n, r, how)
        self.assertEqual(opened, [200] * 6, "fail=open lets all through")
        self.assertEqual(closed, [429] * 6, "fail=closed refuses")
        # fail=local: the same limit (capacity 2) on each worker's own
        # buckets: two workers pass at most 2 each.
        self.assertGreaterEqual(local.count(200), 2, local)
        self.assertLessEqual(local.count(200), 4, local)
        self.assertEqual(local[:2], [200, 200], local)
        self.assertEqual(hz.errors, [])
        self.assertGreater(hz.count, 5)
        self.assertLess(hz.worst, HEALTHZ_BOUND_S,
                        "an unlimited location waited on Redis")
        # Redis back (empty after a kill): decisions again, bounded.
        self.assertTrue(harness.wait_until(
            lambda: n.get("/closed", {"x-user": "back-%s" % how})[0] == 200,
            60), n.error_log())

    def test_redis_killed_and_restarted(self):
        with RedisServer() as r:
            with NginxDaemon(self.config(r)) as n:
                self.check(n, r, "kill")
                log = n.error_log()
                self.assertRegex(log, r"redis 127\.0\.0\.1:\d+ unreachable")
                self.assertRegex(log, r"redis 127\.0\.0\.1:\d+ connected")

    def test_redis_paused_answers_nothing(self):
        with RedisServer() as r:
            with NginxDaemon(self.config(r)) as n:
                self.check(n, r, "pause")


class Parked(unittest.TestCase):
    """Requests waiting for Redis (paused) when their end comes first."""

    def config(self, r, timeout):
        return zone("p", redis_url(r), extra="fail=open timeout=%d"
                    % timeout) + server(loc("/", "sluice_limit zone=p "
                                            "burst=100 nodelay;"))

    def test_a_client_leaving_while_parked_frees_its_request(self):
        with RedisServer() as r:
            with NginxDaemon(self.config(r, 3000)) as n:
                self.assertEqual(n.get("/", {"x-user": "p"})[0], 200)
                r.signal(signal.SIGSTOP)
                try:
                    for i in range(20):
                        s = socket.create_connection(("127.0.0.1", n.port))
                        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n"
                                  b"X-User: gone%d\r\n\r\n" % i)
                        time.sleep(0.02)
                        s.close()
                    time.sleep(0.5)
                finally:
                    r.signal(signal.SIGCONT)
                # Their calls answered (or timed out) after they left:
                # the worker goes on deciding.
                self.assertTrue(harness.wait_until(
                    lambda: n.get("/", {"x-user": "p2"})[0] == 200, 60))
                time.sleep(3.5)  # past the timeout of every call
                self.assertEqual(n.get("/", {"x-user": "p3"})[0], 200)
                self.assertNotIn("[alert]", n.error_log())

    def test_a_worker_told_to_quit_answers_its_parked_request(self):
        with RedisServer() as r:
            with NginxDaemon(self.config(r, 2000)) as n:
                self.assertEqual(n.get("/", {"x-user": "q"})[0], 200)
                r.signal(signal.SIGSTOP)
                got = []
                try:
                    c = http.client.HTTPConnection("127.0.0.1", n.port,
                                                   timeout=60)
                    c.request("GET", "/", headers={"x-user": "q2"})
                    time.sleep(0.3)  # parked on Redis
                    n.signal(signal.SIGQUIT)
                    resp = c.getresponse()
                    got.append(resp.status)
                    resp.read()
                finally:
                    r.signal(signal.SIGCONT)
                # fail=open after timeout=2000: answered, not dropped.
                self.assertEqual(got, [200])
                master = n.masters()[0] if n.masters() else None
                if master:
                    harness.wait_until(
                        lambda: not os.path.exists("/proc/%d" % master), 60)
                log = n.error_log()
                self.assertNotIn("open socket", log)
                self.assertNotIn("[alert]", log)


class Password(unittest.TestCase):
    def test_wrong_password_fails_closed_and_is_logged_once_per_worker(self):
        with RedisServer(password="right-pw") as r:
            http = zone("pw", redis_url(r, "wr0ng-pw"),
                        extra="fail=closed") + zone(
                "ok", redis_url(r, "right-pw"),
                extra="fail=closed " + HEALTHY) + \
                server(loc("/", "sluice_limit zone=pw burst=100 nodelay;") +
                       loc("/ok", "sluice_limit zone=ok burst=100 nodelay;"))
            with NginxDaemon(http) as n:
                got = []
                t0 = time.monotonic()
                # Several of the client's reconnection attempts (backing
                # off up to 2 s) and many requests.
                while time.monotonic() - t0 < 5 and len(got) < 400:
                    got.append(n.get("/", {"x-user": "w"})[0])
                    time.sleep(0.01)
                self.assertEqual(set(got), {429})
                self.assertEqual(n.get("/ok", {"x-user": "w"})[0], 200)
                log = n.error_log()
                self.assertNotIn("wr0ng-pw", log)
                self.assertNotIn("right-pw", log)
                lines = [ln for ln in log.splitlines() if "auth_failed" in ln]
                pids = [re.search(r"\] (\d+)#", ln).group(1) for ln in lines]
                self.assertGreaterEqual(len(pids), 1, log)
                self.assertEqual(len(pids), len(set(pids)),
                                 "logged more than once by a worker:\n"
                                 + "\n".join(lines))
                self.assertIn(":***@", lines[0])

    def test_a_certificate_that_does_not_verify_is_logged_once(self):
        # rediss:// verifies against the system's CAs: the test CA is not
        # one of them, so every handshake fails, the zone fails closed,
        # and each worker says so once.
        with RedisServer(tls=TlsFiles()) as r:
            http = zone("tls", "rediss://127.0.0.1:%d" % r.port,
                        extra="fail=closed") + server(
                loc("/", "sluice_limit zone=tls burst=100 nodelay;"))
            with NginxDaemon(http) as n:
                got = []
                t0 = time.monotonic()
                while time.monotonic() - t0 < 4 and len(got) < 300:
                    got.append(n.get("/", {"x-user": "t"})[0])
                    time.sleep(0.01)
                self.assertEqual(set(got), {429})
                lines = [ln for ln in n.error_log().splitlines()
                         if "tls_failed" in ln]
                pids = [re.search(r"\] (\d+)#", ln).group(1) for ln in lines]
                self.assertGreaterEqual(len(pids), 1, n.error_log())
                self.assertEqual(len(pids), len(set(pids)),
                                 "\n".join(lines))
                self.assertNotIn(" connected", n.error_log())


class BadStore(unittest.TestCase):
    CASES = [
        ("store=redis://u:hunter2@127.0.0.1:99999",
         r'store="redis://u:\*\*\*@127.0.0.1:99999": .*port'),
        ("store=rediss://:hunter2@/0", r'store="rediss://:?\*\*\*@/0"'),
        ("store=cluster:127.0.0.1", r'cluster seed "127.0.0.1" is not '
         r'host:port'),
        ("store=sentinel://:hunter2@127.0.0.1:26379",
         r'store="sentinel://:?\*\*\*@127.0.0.1:26379": no master name'),
        ("store=sentinel://127.0.0.1/m", r'sentinel address "127.0.0.1" '
         r'is not host:port'),
        ("store=redis://127.0.0.1:6379 fail=sometimes",
         r'invalid "fail=sometimes"'),
        ("store=redis://127.0.0.1:6379 timeout=0", r'invalid "timeout=0"'),
        ("fail=closed", r'"fail=closed" is for a Redis store'),
    ]

    def test_bad_store_urls_and_options_are_refused_masked(self):
        for text, message in self.CASES:
            with self.subTest(text=text):
                rc, out = nginx_t("sluice_limit_zone $a zone=z:1m "
                                  "rate=1r/s %s;" % text)
                self.assertNotEqual(rc, 0, out)
                self.assertRegex(out, message + r".* in CONF:\d+", out)
                self.assertNotIn("hunter2", out)

    def test_zones_on_one_store_agree_on_its_timeout(self):
        rc, out = nginx_t(
            "sluice_limit_zone $a zone=a:1m rate=1r/s "
            "store=redis://127.0.0.1:6379 timeout=50;\n"
            "    sluice_limit_zone $a zone=b:1m rate=1r/s "
            "store=redis://127.0.0.1:6379 timeout=80;")
        self.assertNotEqual(rc, 0, out)
        self.assertRegex(out, r'"timeout=80" differs from timeout=50 given '
                         r'for the same store in CONF:\d+ in CONF:\d+')

    def test_every_redis_form_is_accepted(self):
        for store in ("redis://127.0.0.1:6379/2", "rediss://u:p@h:6380",
                      "unix:///run/redis.sock",
                      "cluster:127.0.0.1:7000,redis://127.0.0.1:7001",
                      "sentinel://u:p@127.0.0.1:26379,127.0.0.1:26380/m/1",
                      "sentinels://127.0.0.1:26379/m"):
            with self.subTest(store=store):
                rc, out = nginx_t(
                    "sluice_limit_zone $http_a zone=z:1m rate=1r/s store=%s "
                    "fail=local timeout=20;\n"
                    "    server { location / { sluice_limit zone=z; } }"
                    % store)
                self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
