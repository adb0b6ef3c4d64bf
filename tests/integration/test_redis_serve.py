#!/usr/bin/env python3
"""`sluice serve` on the Redis store: several instances share one bucket.

- Four instances on one Redis, 200 concurrent clients on one key spread
  over all four: the total allowed is capacity + rate x duration (within
  +-2), as if there were one instance.  The same run on the memory store
  shows the overrun that the Redis store exists to prevent.
- Instances whose clocks are shifted by +-30 s decide the same (Redis's
  clock is the only one used).
- Redis killed with SIGKILL mid-load and restarted: no crash, no request
  waits much longer than timeout_ms, each on_store_error mode does what it
  says while Redis is away, and Redis decides again within 1 s of its
  return.
- A bad Redis URL (port 99999, db "abc", no host, something after the db)
  is refused alike by `check-config` (naming file:line) and `serve`, and
  neither prints the password: URLs are shown as redis://user:***@host.

Counts are exact given the elapsed time measured around the requests;
nothing asserts on speed.
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import RedisServer, Sluice  # noqa: E402

CAPACITY = 50
RATE = 5  # tokens per second

CONFIG = """
store: %(store)s
rules:
  - name: shared
    key: ["header:x-user-id"]
    limits: [{capacity: %(capacity)d, rate: %(rate)s}]
    on_store_error: %(mode)s
"""


def config(store, capacity=CAPACITY, rate="%d/s" % RATE, mode="open"):
    return CONFIG % {"store": store, "capacity": capacity, "rate": rate,
                     "mode": mode}


def redis_store(redis, timeout_ms=50):
    return '{redis: {url: "%s", timeout_ms: %d}}' % (redis.url(),
                                                      timeout_ms)


class Load:
    """`clients` threads, each with a keep-alive connection to one of the
    instances (round robin), sending requests for one key until stopped.
    Every answer is recorded as (sent, latency, status)."""

    def __init__(self, ports, clients, key="k"):
        self.ports = ports
        self.clients = clients
        self.key = key
        self.stop_at = None
        self.records = [[] for _ in range(clients)]
        self.errors = []
        self.threads = [threading.Thread(target=self.run, args=(i,))
                        for i in range(clients)]

    def run(self, i):
        port = self.ports[i % len(self.ports)]
        out = self.records[i]
        # A dead connection is counted and opened again.
        for t0, t1, r in harness.keep_alive_checks(
                port, {"x-user-id": self.key},
                lambda: time.monotonic() < self.stop_at, self.errors):
            out.append((t0, t1 - t0, r.status))

    def start(self, seconds):
        self.stop_at = time.monotonic() + seconds
        for t in self.threads:
            t.start()

    def join(self):
        for t in self.threads:
            t.join()
        self.all = sorted(r for rs in self.records for r in rs)
        return self.all

    def window(self):
        """First send to last answer."""
        return self.all[0][0], max(t + d for t, d, _ in self.all)

    def count(self, status, t0=None, t1=None):
        """Answers of `status` sent at t0 or later and answered before t1
        (so that a request sent during an outage but decided after it
        does not count as decided during it)."""
        return sum(1 for t, d, s in self.all if s == status and
                   (t0 is None or t >= t0) and (t1 is None or t + d < t1))


def run_load(ports, seconds, clients=200):
    load = Load(ports, clients)
    load.start(seconds)
    load.join()
    return load


class RedisServeTest(unittest.TestCase):
    def setUp(self):
        harness.raise_nofile(4096)
        self.redis = RedisServer()
        self.procs = [self.redis]

    def tearDown(self):
        for p in self.procs:
            p.stop()

    def serve(self, text, env=None, n=1):
        out = []
        for _ in range(n):
            s = Sluice(text, env=env)
            self.procs.append(s)
            out.append(s)
        return out

    def exact(self, load, label):
        # Every decision was made between the first send and the last
        # answer, and the decisions spanned at least from the first
        # answer to the last send. On a busy machine an answer can sit
        # for hundreds of ms before the client reads it, so the bounds
        # come from these measured instants rather than from one
        # window: the limit is exact if the count lies between what
        # the shortest and the longest span can have refilled.
        t0, t1 = load.window()
        inner = (max(t for t, _, _ in load.all) -
                 min(t + d for t, d, _ in load.all))
        most = CAPACITY + RATE * (t1 - t0)
        least = CAPACITY + RATE * max(inner, 0)
        allowed = load.count(200)
        print("%s: %d requests in %.2f s, %d allowed, expected %.1f..%.1f "
              "(capacity %d + %d/s x duration)" %
              (label, len(load.all), t1 - t0, allowed, least, most,
               CAPACITY, RATE), flush=True)
        self.assertEqual(load.errors, [])
        self.assertEqual(len(load.all), allowed + load.count(429))
        self.assertLessEqual(allowed, most + 1)
        self.assertGreaterEqual(allowed, least - 2)

    def test_four_instances_share_one_bucket(self):
        # Fail closed with a generous timeout: a store failure would show
        # as a 503 here, never as an extra allowed request.
        instances = self.serve(config(redis_store(self.redis, 1000),
                                      mode="closed"), n=4)
        load = run_load([s.port for s in instances], 10)
        self.exact(load, "4 instances on one Redis, 200 clients")
        for s in instances:
            self.assertIsNone(s.poll())

    def test_memory_store_overruns(self):
        """Why the Redis store exists: four instances with their own
        memory stores grant about four times the limit."""
        instances = self.serve(config("memory"), n=4)
        load = run_load([s.port for s in instances], 10)
        t0, t1 = load.window()
        one = CAPACITY + RATE * (t1 - t0)
        allowed = load.count(200)
        print("4 instances on memory stores: %d allowed where one bucket "
              "allows %.1f (%.1fx)" % (allowed, one, allowed / one),
              flush=True)
        self.assertGreater(allowed, 3 * one)

    def test_clock_skew_changes_nothing(self):
        text = config(redis_store(self.redis, 1000), mode="closed")
        instances = []
        for off in (30000000, -30000000, 30000000, -30000000):
            instances += self.serve(text, env={
                "SLUICE_TEST_CLOCK_OFFSET_US": str(off)})
        load = run_load([s.port for s in instances], 5)
        self.exact(load, "clocks shifted +-30 s")

    # ------------------------------------------------ Redis killed -9

    def kill_and_restart(self, mode):
        """20 clients on one over-limit key (capacity 5, 1/s) on two
        instances; Redis is SIGKILLed at 1.5 s and restarted at 3 s."""
        # Short enough to matter, long enough that a call on a machine
        # oversubscribed several times over does not time out once Redis
        # is back (closed mode would answer those 503).
        timeout_ms = 250
        text = config(redis_store(self.redis, timeout_ms), capacity=5,
                      rate="1/s", mode=mode)
        instances = self.serve(text, n=2)
        load = Load([s.port for s in instances], 20)
        # The load runs until 1.5 s after every instance is back on Redis
        # (set below), however long the restart takes on a busy machine;
        # 60 s bounds it should the test stop before.
        began = time.monotonic()
        load.start(60.0)
        try:
            return self.outage(load, instances, timeout_ms, mode, began)
        finally:
            load.stop_at = 0
            load.join()

    def outage(self, load, instances, timeout_ms, mode, began):
        time.sleep(1.5)
        self.redis.kill()
        # Measured once the process is gone (kill() waits for it), so
        # that a slow machine cannot stretch Redis's last answers into
        # the window counted as the outage.
        killed = time.monotonic()
        # /readyz says so while Redis is away.
        for s in instances:
            self.assertTrue(harness.wait_until(
                lambda: s.request("GET", "/readyz").status == 503, 3.0,
                0.01))
        time.sleep(max(0.0, killed + 1.5 - time.monotonic()))
        # The outage ends when the restart begins: start() returns only
        # once redis-cli got its PONG, and on a loaded machine sluice may
        # be deciding on the new server well before that.
        restarting = time.monotonic()
        self.redis.start()
        back = time.monotonic()
        # Redis decides again: the restarted server gets the key, and
        # every instance is ready.
        self.assertTrue(harness.wait_until(
            lambda: self.redis.cli("DBSIZE") not in ("", "0"), 5, 0.005))
        stored = time.monotonic()
        for s in instances:
            self.assertTrue(harness.wait_until(
                lambda: s.request("GET", "/readyz").status == 200, 5, 0.01))
        ready = time.monotonic()
        settled = max(back + 1.0, ready + 0.5)
        # At least 5.5 s in all, and answers decided once back on Redis.
        load.stop_at = max(began + 5.5, settled + 1.5)
        load.join()
        worst = max(d for _, d, _ in load.all)
        outage = (killed + 0.1, restarting)
        during = {st: load.count(st, *outage) for st in (200, 429, 503)}
        after = {st: load.count(st, settled) for st in (200, 429, 503)}
        print("on_store_error %s: %d requests, slowest %.0f ms (timeout "
              "%d ms); while Redis was down %s; Redis deciding again "
              "%.0f ms and every instance ready %.0f ms after its "
              "restart; afterwards %s" %
              (mode, len(load.all), worst * 1000, timeout_ms, during,
               (stored - back) * 1000, (ready - back) * 1000, after),
              flush=True)
        for s in instances:
            self.assertIsNone(s.poll(), "an instance died")
        self.assertEqual(load.errors, [])
        # Bounds that hold on a machine oversubscribed several times over:
        # a stalled client thread may see one answer late, but requests
        # that waited for Redis to come back would be slow by the
        # hundreds (the outage lasts 1.5 s).
        slow = [d for _, d, _ in load.all if d > (timeout_ms + 1000) / 1000.0]
        self.assertLessEqual(len(slow), max(3, len(load.all) // 100),
                             sorted(slow)[-10:])
        self.assertLessEqual(stored - back, 3.0)
        self.assertLessEqual(ready - back, 3.0)
        # Back on Redis: one shared bucket again.  A client still failing
        # would answer 503 to nearly every call; what a healthy one may
        # show on a machine oversubscribed several times over is the rare
        # call that missed its 250 ms deadline (round trips to an ASan
        # sluice on Redis beside 4 CPU-bound loops reached 224 ms), 503
        # in closed mode: at most 1%.
        self.assertLessEqual(after[503], max(2, sum(after.values()) // 100),
                             after)
        self.assertGreater(after[429], 0)
        return during

    def test_kill9_fail_open(self):
        during = self.kill_and_restart("open")
        self.assertEqual(during[503], 0)
        self.assertEqual(during[429], 0)  # everything allowed
        self.assertGreater(during[200], 0)

    def test_kill9_fail_closed(self):
        during = self.kill_and_restart("closed")
        self.assertEqual(during[200], 0)
        self.assertEqual(during[429], 0)
        self.assertGreater(during[503], 0)

    def test_kill9_fail_local(self):
        during = self.kill_and_restart("local")
        self.assertEqual(during[503], 0)
        self.assertGreater(during[429], 0)
        # Each of the two instances enforces the policy on its own:
        # capacity 5 + 1/s over the 1.5 s outage, and a little slack for
        # the requests straddling its edges.
        self.assertLessEqual(during[200], 2 * (5 + 2) + 2)



class BadUrls(unittest.TestCase):
    SECRET = "S3CRETpw-77"

    def run_sluice(self, *args):
        return subprocess.run([harness.SLUICE] + list(args),
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=60,
                              universal_newlines=True)

    def test_check_config_and_serve_agree_and_mask_the_password(self):
        bad = ["redis://app:%s@127.0.0.1:99999",
               "redis://app:%s@127.0.0.1:6379/abc",
               "redis://app:%s@:6379",
               "redis://app:%s@127.0.0.1:6379/0?x=1",
               "redis://app:%s@127.0.0.1:6379/0/junk"]
        for url in bad:
            url = url % self.SECRET
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                f.write(CONFIG % {"store": '{redis: {url: "%s"}}' % url,
                                  "capacity": 5, "rate": "1/s",
                                  "mode": "open"})
                f.flush()
                check = self.run_sluice("check-config", f.name)
                serve = self.run_sluice(
                    "serve", "-c", f.name, "--listen",
                    "127.0.0.1:%d" % harness.free_port())
            print("%s -> %s" % (url.replace(self.SECRET, "***"),
                                check.stdout.strip().splitlines()[0]))
            self.assertNotEqual(check.returncode, 0, check.stdout)
            self.assertNotEqual(serve.returncode, 0, serve.stdout)
            self.assertIn(f.name + ":2:", check.stdout)  # store: ...
            self.assertIn("app:***@", check.stdout)
            self.assertIn("app:***@", serve.stdout)
            self.assertNotIn(self.SECRET, check.stdout + serve.stdout)

    def test_a_good_url_with_a_password_is_never_printed(self):
        port = harness.free_port()  # nobody listens: it fails, and says so
        url = "redis://app:%s@127.0.0.1:%d" % (self.SECRET, port)
        s = Sluice(CONFIG % {"store": '{redis: {url: "%s"}}' % url,
                             "capacity": 5, "rate": "1/s", "mode": "open"})
        try:
            self.assertTrue(harness.wait_until(
                lambda: "unreachable" in s.log(), timeout=10), s.log())
            s.request("GET", "/v1/check", headers={"x-user-id": "a"})
            s.request("GET", "/readyz")
            self.assertNotIn(self.SECRET, s.log())
        finally:
            s.stop()


class DroppedBeforeTheHandshake(unittest.TestCase):
    """A server that accepts the connection and drops it before answering
    the handshake (as Redis refusing a client certificate may, with a
    reset on the first write) is retried with the handshake backoff,
    about once in two seconds, not hammered every 200 ms."""

    def test_a_server_that_drops_us_is_not_hammered(self):
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(64)
        lsock.settimeout(0.2)
        port = lsock.getsockname()[1]
        accepts = []
        stop = threading.Event()

        def accept_and_drop():
            while not stop.is_set():
                try:
                    c, _ = lsock.accept()
                except socket.timeout:
                    continue
                accepts.append(time.monotonic())
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, 0))  # a reset
                c.close()

        t = threading.Thread(target=accept_and_drop)
        t.start()
        s = None
        try:
            s = Sluice("threads: 1\n" + CONFIG % {
                "store": '{redis: {url: "redis://127.0.0.1:%d", '
                         'connections: 1}}' % port,
                "capacity": 5, "rate": "1/s", "mode": "open"})
            # Past the first quick retries (10 ms, doubling).
            self.assertTrue(harness.wait_until(lambda: len(accepts) >= 10,
                                               timeout=60), s.log())
            window = 8.0
            first = len(accepts)
            time.sleep(window)
            seen = len(accepts) - first
            print("accepted %d connections in %.0f s" % (seen, window),
                  flush=True)
            self.assertIsNone(s.poll(), s.log())
            # 200 ms apart would be 40; the handshake backoff (2 s at
            # most) makes 4 or 5.
            self.assertLessEqual(seen, int(window / 2) + 2)
        finally:
            stop.set()
            t.join()
            lsock.close()
            if s is not None:
                s.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
