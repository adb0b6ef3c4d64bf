#!/usr/bin/env python3
"""A failing Redis store is visible: in the log, in /readyz, and to the
Redis server it is not hammering.

- A wrong password: logged once with the server's words (WRONGPASS), never
  the password; the reconnects the server sees are bounded (a handful, then
  at most one every two seconds per connection); /readyz 503; and once the
  server accepts the password, /readyz 200 and a "connected" line.
- A server that accepts and never answers (a fake TCP server), and a real
  Redis frozen with SIGSTOP after it was healthy: /readyz 503 with no
  traffic at all, 200 again after SIGCONT.
- A killed Redis: one "unreachable" line however long it stays away, not
  one per reconnect; /readyz 503, then 200 once it is back.
- /metrics per node: up, breaker open, connections, call latency, errors
  by kind (connection, auth, ...), and sluice_build_info.
- The server's own words, never ours: a server that echoes AUTH's
  arguments back (AUTH renamed away) gets the password into neither the
  log nor /readyz; a server refusing every decision (EVALSHA renamed
  away) is one "refused" line with its words, /readyz 503 with the error
  kind and words, and errors of kind "refused".
- A Redis that may evict buckets (maxmemory with allkeys-lru) is one
  warning in the log and sluice_redis_eviction_policy_unsafe 1.
- Several threads: once /readyz says 200, the one "connected" line is in
  the log, however late the thread that writes it is.

Bounds are generous (the machine is shared): readiness is required within
3 s, the tests allow 8 s and print what they saw.
"""
import os
import signal
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import RedisServer, Sluice  # noqa: E402

PASSWORD = "s3cret-Right-pw"
WRONG = "n0t-The-pw-41"

CONFIG = """
store: {redis: {url: "%(url)s", timeout_ms: %(timeout)d, connections: %(conns)d}}
rules:
  - name: api
    key: ["header:x-user-id"]
    limits: [{capacity: 10, rate: 1/s}]
"""


def config(url, timeout=100, conns=1):
    return CONFIG % {"url": url, "timeout": timeout, "conns": conns}


def ready(sluice):
    return sluice.request("GET", "/readyz").status


def wait_status(sluice, status, timeout=8.0):
    """Seconds until /readyz answers `status`, or None."""
    t0 = time.monotonic()
    if harness.wait_until(lambda: ready(sluice) == status, timeout=timeout,
                          interval=0.05):
        return time.monotonic() - t0
    return None


def redis_lines(log):
    return [ln for ln in log.splitlines() if " redis " in ln]


def connections_received(redis):
    for line in redis.cli("INFO", "stats").splitlines():
        if line.startswith("total_connections_received:"):
            return int(line.split(":")[1])
    raise AssertionError("no total_connections_received in INFO")


class Silent:
    """A TCP server that accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(0.2)
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                continue

    def close(self):
        self.stopping = True
        self.thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()


class WrongPassword(unittest.TestCase):
    def test_refused_auth_is_logged_once_bounded_and_not_ready(self):
        redis = RedisServer(password=PASSWORD)
        sluice = None
        try:
            url = "redis://:%s@127.0.0.1:%d" % (WRONG, redis.port)
            sluice = Sluice(config(url, conns=2))
            took = wait_status(sluice, 503)
            self.assertIsNotNone(took, "/readyz never said 503")
            time.sleep(1.0)  # past the first few quick retries
            before = connections_received(redis)
            window = 4.0
            time.sleep(window)
            # The cli's own connection counts once.
            seen = connections_received(redis) - before - 1
            print("wrong password: %d connections in %.0f s over 2 "
                  "connections" % (seen, window))
            # At most one attempt per second per connection (the old
            # code made ~90 a second each).
            self.assertLessEqual(seen, int(window) * 2 + 2)
            self.assertEqual(ready(sluice), 503)

            log = sluice.log()
            lines = redis_lines(log)
            self.assertNotIn(WRONG, log)
            self.assertNotIn(PASSWORD, log)
            auth = [ln for ln in lines if "auth_failed" in ln]
            self.assertEqual(len(auth), 1, log)
            self.assertIn("WRONGPASS", auth[0])
            self.assertIn("127.0.0.1:%d" % redis.port, auth[0])
            self.assertLessEqual(len(lines), 5, log)

            # The operator fixes the server side: sluice gets in.
            redis.cli("CONFIG", "SET", "requirepass", WRONG)
            redis.password = WRONG
            took = wait_status(sluice, 200, timeout=10)
            self.assertIsNotNone(took, sluice.log())
            self.assertTrue(any("connected" in ln
                                for ln in redis_lines(sluice.log())))
            r = sluice.request("GET", "/v1/check",
                               headers={"x-user-id": "a"})
            self.assertEqual(r.status, 200)
        finally:
            if sluice:
                sluice.stop()
            redis.stop()


class ServerWords(unittest.TestCase):
    def serve(self, redis, url=None, mode="open"):
        text = config(url or redis.url(), timeout=200).replace(
            "limits: [{capacity: 10, rate: 1/s}]",
            "limits: [{capacity: 10, rate: 1/s}]\n"
            "    on_store_error: %s" % mode)
        return Sluice(text)

    def readyz_node(self, sluice):
        r = sluice.request("GET", "/readyz")
        self.assertEqual(r.status, 503, r)
        body = r.json()
        self.assertEqual(len(body.get("nodes", [])), 1, body)
        return r.body.decode(), body["nodes"][0]

    def test_auth_echoed_back_reaches_neither_log_nor_readyz(self):
        redis = RedisServer(extra=["--rename-command", "AUTH", ""])
        sluice = None
        try:
            url = "redis://appuser:%s@127.0.0.1:%d" % (PASSWORD, redis.port)
            sluice = self.serve(redis, url)
            self.assertIsNotNone(wait_status(sluice, 503))
            self.assertTrue(harness.wait_until(
                lambda: "auth_failed" in sluice.log(), timeout=10))
            text, node = self.readyz_node(sluice)
            print("readyz: %s" % text)
            for where in (text, sluice.log(), sluice.request(
                    "GET", "/metrics").body.decode()):
                self.assertNotIn(PASSWORD, where)
                self.assertNotIn("appuser", where)
            self.assertIn("unknown command", node["last_error"])
            self.assertEqual(node.get("error"), "auth")
        finally:
            if sluice:
                sluice.stop()
            redis.stop()

    def test_refused_decisions_are_said_with_the_servers_words(self):
        redis = RedisServer(extra=["--rename-command", "EVALSHA", ""])
        sluice = None
        try:
            sluice = self.serve(redis)
            self.assertIsNotNone(wait_status(sluice, 200))

            def refused():
                r = sluice.request("GET", "/v1/check",
                                   headers={"x-user-id": "a"})
                self.assertEqual(r.status, 200)  # on_store_error: open
                return ready(sluice) == 503
            self.assertTrue(harness.wait_until(refused, timeout=10),
                            sluice.log())
            text, node = self.readyz_node(sluice)
            print("readyz: %s" % text)
            self.assertIn("unknown command 'EVALSHA'", node["last_error"])
            self.assertEqual(node.get("error"), "refused")
            for _ in range(20):
                sluice.request("GET", "/v1/check",
                               headers={"x-user-id": "a"})
            lines = [ln for ln in redis_lines(sluice.log())
                     if "refused" in ln]
            self.assertEqual(len(lines), 1, sluice.log())
            self.assertIn("unknown command 'EVALSHA'", lines[0])
            m = sluice.metrics()
            self.assertGreater(m['sluice_redis_errors_total{node="127.0.0.1'
                                 ':%d",kind="refused"}' % redis.port], 0)
        finally:
            if sluice:
                sluice.stop()
            redis.stop()

    def test_a_redis_that_may_evict_buckets_is_warned_of(self):
        redis = RedisServer(extra=["--maxmemory", "64mb",
                                   "--maxmemory-policy", "allkeys-lru"])
        sluice = None
        try:
            sluice = self.serve(redis)
            self.assertIsNotNone(wait_status(sluice, 200))
            key = ('sluice_redis_eviction_policy_unsafe{node="127.0.0.1:%d"}'
                   % redis.port)
            self.assertTrue(harness.wait_until(
                lambda: sluice.metrics().get(key) == 1, timeout=10),
                sluice.request("GET", "/metrics").body.decode())
            lines = [ln for ln in redis_lines(sluice.log())
                     if "eviction_policy" in ln]
            self.assertEqual(len(lines), 1, sluice.log())
            self.assertIn("allkeys-lru", lines[0])
            print(lines[0])
        finally:
            if sluice:
                sluice.stop()
            redis.stop()


class Hung(unittest.TestCase):
    def test_server_that_never_answers_is_not_ready_when_idle(self):
        silent = Silent()
        sluice = None
        try:
            sluice = Sluice(config("redis://127.0.0.1:%d" % silent.port))
            took = wait_status(sluice, 503)
            self.assertIsNotNone(took, "/readyz stayed 200 on a hung store")
            time.sleep(2.5)  # stays unready across reconnects
            self.assertEqual(ready(sluice), 503)
            lines = redis_lines(sluice.log())
            self.assertTrue(any("timeout" in ln for ln in lines), lines)
            self.assertLessEqual(len(lines), 5, lines)
        finally:
            if sluice:
                sluice.stop()
            silent.close()

    def test_frozen_redis_turns_readyz_503_without_traffic(self):
        redis = RedisServer()
        sluice = None
        frozen = False
        try:
            sluice = Sluice(config(redis.url()))
            self.assertIsNotNone(wait_status(sluice, 200), sluice.log())
            redis.signal(signal.SIGSTOP)
            frozen = True
            took = wait_status(sluice, 503)
            print("frozen redis: /readyz 503 after %s s" % took)
            self.assertIsNotNone(took, "/readyz stayed 200, idle, frozen")
            time.sleep(1.5)  # frozen a while: the log says so
            self.assertEqual(ready(sluice), 503)
            redis.signal(signal.SIGCONT)
            frozen = False
            took = wait_status(sluice, 200, timeout=10)
            print("thawed redis: /readyz 200 after %s s" % took)
            self.assertIsNotNone(took, sluice.log())
            self.assertTrue(any("timeout" in ln
                                for ln in redis_lines(sluice.log())))
        finally:
            if frozen:
                redis.signal(signal.SIGCONT)
            if sluice:
                sluice.stop()
            redis.stop()


class Events(unittest.TestCase):
    def test_flushed_scripts_are_reloaded_and_said_once(self):
        redis = RedisServer()
        sluice = None
        try:
            sluice = Sluice(config(redis.url(), timeout=1000))
            self.assertIsNotNone(wait_status(sluice, 200), sluice.log())
            self.assertEqual(sluice.request(
                "GET", "/v1/check", headers={"x-user-id": "f"}).status, 200)
            self.assertEqual(redis.cli("SCRIPT", "FLUSH"), "OK")
            for i in range(5):
                r = sluice.request("GET", "/v1/check",
                                   headers={"x-user-id": "f"})
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("x-ratelimit-remaining"),
                                 str(8 - i))
            lines = [ln for ln in redis_lines(sluice.log())
                     if "script_reloaded" in ln]
            self.assertEqual(len(lines), 1, sluice.log())
            self.assertIn("127.0.0.1:%d" % redis.port, lines[0])
        finally:
            if sluice:
                sluice.stop()
            redis.stop()


class Metrics(unittest.TestCase):
    def test_node_series_count_calls_errors_and_state(self):
        redis = RedisServer()
        sluice = None
        try:
            # No call may time out below (the timeout counter stays 0):
            # a 100 ms deadline can be missed on a busy machine; a killed
            # Redis still fails at once.
            sluice = Sluice(config(redis.url(), timeout=2000, conns=2))
            self.assertIsNotNone(wait_status(sluice, 200), sluice.log())
            for i in range(20):
                r = sluice.request("GET", "/v1/check",
                                   headers={"x-user-id": "m%d" % i})
                self.assertEqual(r.status, 200)
            node = 'node="127.0.0.1:%d"' % redis.port
            m = sluice.metrics()
            build = 'sluice_build_info{version="%s"}' % sluice_version()
            self.assertEqual(m[build], 1)
            count = m["sluice_redis_call_duration_seconds_count{%s}" % node]
            self.assertGreaterEqual(count, 20)
            self.assertEqual(m['sluice_redis_call_duration_seconds_bucket'
                               '{%s,le="+Inf"}' % node], count)
            # Gauges are refreshed every 500 ms.
            self.assertTrue(harness.wait_until(
                lambda: sluice.metrics().get(
                    "sluice_redis_connections{%s}" % node) == 2, 5))
            self.assertEqual(m["sluice_redis_up{%s}" % node], 1)
            self.assertEqual(m["sluice_redis_breaker_open{%s}" % node], 0)
            self.assertEqual(
                m['sluice_redis_errors_total{%s,kind="timeout"}' % node], 0)

            redis.kill()
            self.assertIsNotNone(wait_status(sluice, 503))
            for i in range(10):
                sluice.request("GET", "/v1/check",
                               headers={"x-user-id": "m%d" % i})
            self.assertTrue(harness.wait_until(
                lambda: sluice.metrics().get(
                    "sluice_redis_up{%s}" % node) == 0, 5))
            self.assertTrue(harness.wait_until(
                lambda: sluice.metrics().get(
                    "sluice_redis_breaker_open{%s}" % node) == 1, 5))
            m = sluice.metrics()
            self.assertEqual(m["sluice_redis_connections{%s}" % node], 0)
            self.assertGreaterEqual(
                m['sluice_redis_errors_total{%s,kind="connection"}' % node],
                5)
        finally:
            if sluice:
                sluice.stop()
            redis.stop()

    def test_refused_password_counts_auth_errors(self):
        redis = RedisServer(password=PASSWORD)
        sluice = None
        try:
            url = "redis://:%s@127.0.0.1:%d" % (WRONG, redis.port)
            sluice = Sluice(config(url))
            node = 'node="127.0.0.1:%d"' % redis.port
            self.assertTrue(harness.wait_until(
                lambda: sluice.metrics().get(
                    'sluice_redis_errors_total{%s,kind="auth"}' % node,
                    0) >= 1, 5))
            self.assertEqual(sluice.metrics()["sluice_redis_up{%s}" % node],
                             0)
        finally:
            if sluice:
                sluice.stop()
            redis.stop()


def sluice_version():
    import subprocess
    out = subprocess.run([harness.SLUICE, "--version"], capture_output=True,
                         text=True).stdout.split()
    return out[-1] if out else ""


class Unreachable(unittest.TestCase):
    def test_killed_redis_is_one_line_and_503_until_back(self):
        redis = RedisServer()
        sluice = None
        try:
            sluice = Sluice(config(redis.url()))
            self.assertIsNotNone(wait_status(sluice, 200), sluice.log())
            redis.kill()
            took = wait_status(sluice, 503)
            print("killed redis: /readyz 503 after %s s" % took)
            self.assertIsNotNone(took)
            # Requests meanwhile (on_store_error open: they pass) add no
            # line each.
            for i in range(50):
                sluice.request("GET", "/v1/check",
                               headers={"x-user-id": "u%d" % i})
            time.sleep(2.0)
            lines = redis_lines(sluice.log())
            down = [ln for ln in lines if "unreachable" in ln]
            self.assertEqual(len(down), 1, lines)
            self.assertLessEqual(len(lines), 6, lines)
            redis.start()
            took = wait_status(sluice, 200, timeout=10)
            print("restarted redis: /readyz 200 after %s s" % took)
            self.assertIsNotNone(took, sluice.log())
        finally:
            if sluice:
                sluice.stop()
            redis.stop()


class Threads(unittest.TestCase):
    def test_connected_is_in_the_log_once_any_thread_is_ready(self):
        """Every thread's client reports "connected"; one line says it.
        A shim (LD_PRELOAD of tests/tools/slow_stderr.c) holds that line
        back 1.5 s, as a busy machine may preempt the thread writing it:
        the other threads, told it is said already, wait for it, so no
        /readyz 200 comes before the line is in the log."""
        env = {"LD_PRELOAD": os.path.join(harness.BUILD,
                                          "libslow_stderr.so"),
               "SLOW_STDERR_MATCH": ": connected",
               "SLOW_STDERR_MS": "1500",
               # An instrumented sluice accepts a shim loaded before ASan.
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
               ":verify_asan_link_order=0"}
        redis = RedisServer()
        sluice = None
        try:
            sluice = Sluice(config(redis.url()), threads=4, env=env)
            self.assertIsNotNone(wait_status(sluice, 200), sluice.log())
            lines = redis_lines(sluice.log())
            self.assertEqual(len([ln for ln in lines
                                  if ": connected" in ln]), 1, lines)
        finally:
            if sluice:
                sluice.stop()
            redis.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
