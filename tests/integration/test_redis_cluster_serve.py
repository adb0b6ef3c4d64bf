#!/usr/bin/env python3
"""`sluice serve` on a Redis Cluster (`store: {redis_cluster: {seeds}}`).

One cluster for the whole file: three masters on loopback (redis-server
--cluster-enabled yes, joined by redis-cli --cluster create) and a replica
of each of the first two.  The tests run in the order of their names:
the second and third take those masters down.

- Two instances, many keys spread over all three masters, a rule with two
  limits (both of a key's buckets in one slot, charged in one call): each
  key allows exactly its capacity across both instances, and /readyz is
  200.
- Two rules on one request, their keys on two masters: 200 concurrent
  requests from one user pass `narrow` (20/day) 20 times, and `wide`,
  charged per master and refunded where `narrow` rejected, holds the
  charges of those 20 alone.
- Failover: under load, the master holding the test keys is SIGKILLed
  (or SIGSTOPped: hung, connections open, no answers) and its replica
  promoted with CLUSTER FAILOVER TAKEOVER (no wait for the
  node timeout).  No instance crashes; while the slot has no live master
  its requests fail the way the rule's on_store_error says (closed: 503
  with Retry-After); once the replica is master the instances find it
  (slot map refreshed after the dead connection) and decide again; a key
  drained and replicated before the kill stays drained after it; keys on
  the other masters are decided throughout.

No assertion on speed beyond a generous bound on recovery.
"""
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import RedisServer, Sluice  # noqa: E402

TIGHT = 3  # capacity of the "tight" rule (and 1/h: nothing refills)

CONFIG = """
store: {redis_cluster: {seeds: [%(seeds)s], timeout_ms: %(timeout)d}}
rules:
  - name: tight
    match: {path: "/tight"}
    key: ["header:x-user-id"]
    limits: [{capacity: %(tight)d, rate: 1/h}, {capacity: 100, rate: 100/day}]
    on_store_error: closed
  - name: wide
    match: {path: "/wide"}
    key: ["header:x-user-id"]
    limits: [{capacity: 1000000, rate: 1000/s},
             {capacity: 100000000, rate: 100000000/day}]
    on_store_error: closed
"""


def crc16(data):
    """CRC16-CCITT (XMODEM), Redis Cluster's key checksum."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) \
                & 0xFFFF
    return crc


def slot_of(rule, identity):
    """The slot of the buckets of `identity` under `rule`: sluice stores
    them as sluice:{<rule>\\x1f<identity>}:<limit id>, hashed on the tag."""
    return crc16(("%s\x1f%s" % (rule, identity)).encode()) & 16383


def check(port, rule, identity):
    return harness.request(port, "GET", "/v1/check",
                           {"x-user-id": identity, "x-original-uri":
                            "/" + rule, "x-original-method": "GET"})


class Cluster:
    """Three masters; replicas[i] follows masters[i] (i = 0, 1)."""

    def __init__(self):
        self.nodes = []
        try:
            self.nodes = [RedisServer(cluster=True) for _ in range(5)]
            self.masters = self.nodes[:3]
            self.replicas = self.nodes[3:]
            self._create()
        except BaseException:
            self.stop()
            raise

    def _create(self):
        p = subprocess.run(["redis-cli", "--cluster", "create"] +
                           [n.seed() for n in self.masters] +
                           ["--cluster-yes"], capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError("cluster create: %s%s" % (p.stdout,
                                                         p.stderr))
        for n in self.masters:
            if not harness.wait_until(
                    lambda: "cluster_state:ok" in n.cli("CLUSTER", "INFO"),
                    15, 0.05):
                raise RuntimeError("cluster not ok on %d" % n.port)
        # The replicas join, then follow their masters; every master must
        # know them as replicas before a takeover is announced to it.
        ids = [m.cli("CLUSTER", "MYID") for m in self.masters]
        rids = [r.cli("CLUSTER", "MYID") for r in self.replicas]
        for r in self.replicas:
            r.cli("CLUSTER", "MEET", "127.0.0.1", self.masters[0].port)
        for r, mid in zip(self.replicas, ids):
            if not harness.wait_until(
                    lambda: mid in r.cli("CLUSTER", "NODES"), 15, 0.05):
                raise RuntimeError("replica never met the cluster")
            r.cli("CLUSTER", "REPLICATE", mid)
        for r in self.replicas:
            if not harness.wait_until(
                    lambda: "master_link_status:up" in r.cli(
                        "INFO", "replication"), 15, 0.05):
                raise RuntimeError("replica never synced")

        def known(n):
            lines = n.cli("CLUSTER", "NODES").splitlines()
            return all(any(line.startswith(rid) and "slave" in line
                           for line in lines) for rid in rids)
        for n in self.masters:
            if not harness.wait_until(lambda: known(n), 15, 0.05):
                raise RuntimeError("master %d does not know the replicas"
                                   % n.port)

    def owners(self):
        """slot -> the master (a RedisServer) serving it, as the first
        live node sees it."""
        live = next(n for n in self.nodes if n.poll() is None)
        out = {}
        for line in live.cli("CLUSTER", "NODES").splitlines():
            f = line.split()
            if "master" not in f[2] or "fail" in f[2]:
                continue
            port = int(f[1].split("@")[0].rsplit(":", 1)[1])
            node = next(m for m in self.nodes if m.port == port)
            for rng in f[8:]:
                if rng.startswith("["):
                    continue  # a slot being migrated
                lo, _, hi = rng.partition("-")
                for slot in range(int(lo), int(hi or lo) + 1):
                    out[slot] = node
        return out

    def seeds(self):
        return ", ".join('"%s"' % n.seed() for n in self.masters)

    def stop(self):
        for n in self.nodes:
            n.stop()


class Load:
    """One thread per (instance, rule, identity), each on a keep-alive
    connection, recording (sent, answered, status, has Retry-After)."""

    def __init__(self, ports, targets, seconds=60):
        self.stop_at = time.monotonic() + seconds
        self.records = {}
        self.errors = []
        self.threads = []
        for port in ports:
            for rule, ident in targets:
                out = self.records.setdefault((port, rule, ident), [])
                self.threads.append(threading.Thread(
                    target=self.run, args=(port, rule, ident, out)))
        for t in self.threads:
            t.start()

    def run(self, port, rule, ident, out):
        headers = {"x-user-id": ident, "x-original-uri": "/" + rule,
                   "x-original-method": "GET"}
        for t0, t1, r in harness.keep_alive_checks(
                port, headers, lambda: time.monotonic() < self.stop_at,
                self.errors, 0.002):
            out.append((t0, t1, r.status,
                        r.header("retry-after") is not None))

    def join(self):
        self.stop_at = 0
        for t in self.threads:
            t.join()


WIDE_NARROW = """
store: {redis_cluster: {seeds: [%(seeds)s], timeout_ms: 2000}}
rules:
  - name: wide
    key: [ip]
    limits: [{capacity: 1000, rate: 1000/day}]
  - name: narrow
    key: ["header:x-user-id"]
    limits: [{capacity: 20, rate: 20/day}]
"""


class RedisClusterServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.raise_nofile(4096)
        t0 = time.monotonic()
        cls.cluster = Cluster()
        print("cluster of 3 masters + 2 replicas up in %.1f s"
              % (time.monotonic() - t0), flush=True)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def setUp(self):
        self.procs = []

    def tearDown(self):
        # Every instance is stopped; then each must have exited cleanly
        # (SIGTERM drains; under ASan a leak or error makes it non-zero).
        codes = [(p.stop(), p.argv) for p in self.procs]
        self.assertEqual([c for c in codes if c[0] != 0], [])

    def serve(self, n=2, timeout_ms=100):
        text = CONFIG % {"seeds": self.cluster.seeds(),
                         "timeout": timeout_ms, "tight": TIGHT}
        out = []
        for _ in range(n):
            s = Sluice(text)
            self.procs.append(s)
            out.append(s)
        for s in out:
            self.assertTrue(harness.wait_until(
                lambda: s.request("GET", "/readyz").status == 200, 10),
                "not ready: %s" % s.log())
        return out

    # ------------------------------------------------- keys everywhere

    def test_1_keys_over_all_masters(self):
        a, b = self.serve(timeout_ms=1000)
        nkeys, per_key = 240, TIGHT + 2
        keys = ["user%d" % i for i in range(nkeys)]
        allowed = {k: 0 for k in keys}
        other = []
        lock = threading.Lock()

        def worker(part):
            ca, cb = a.client(), b.client()
            try:
                for k in part:
                    h = {"x-user-id": k, "x-original-uri": "/tight",
                         "x-original-method": "GET"}
                    for j in range(per_key):
                        c = ca if j % 2 == 0 else cb
                        st = c.request("GET", "/v1/check", h).status
                        with lock:
                            if st == 200:
                                allowed[k] += 1
                            elif st != 429:
                                other.append((k, st))
            finally:
                ca.close()
                cb.close()

        t0 = time.monotonic()
        threads = [threading.Thread(target=worker, args=(keys[i::6],))
                   for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        states = [int(m.cli("DBSIZE")) for m in self.cluster.masters]
        print("%d keys x %d requests over 2 instances in %.1f s: %d "
              "allowed (capacity %d each), states per master %s"
              % (nkeys, per_key, took, sum(allowed.values()), TIGHT,
                 states), flush=True)
        self.assertEqual(other, [])
        self.assertEqual({k for k, v in allowed.items() if v != TIGHT},
                         set())
        # Both limits of every key stored, on every master.
        self.assertEqual(sum(states), 2 * nkeys)
        for n in states:
            self.assertGreater(n, 0)
        for s in (a, b):
            self.assertEqual(s.request("GET", "/readyz").status, 200)
            self.assertIsNone(s.poll())

    # ---------------------------------------- two rules, two masters

    def test_1b_rules_on_two_masters_are_all_or_nothing(self):
        owners = self.cluster.owners()
        wide_master = owners[slot_of("wide", "127.0.0.1")]
        user = self.pick(owners, "narrow", "mallory",
                         lambda m: m is not wide_master)
        s = Sluice(WIDE_NARROW % {"seeds": self.cluster.seeds()},
                   threads=2)
        self.procs.append(s)
        self.assertTrue(harness.wait_until(
            lambda: s.request("GET", "/readyz").status == 200, 10))
        racers = 200
        statuses = harness.race(s.port, racers, "/v1/check",
                                {"x-user-id": user})

        def wide_remaining():
            r = s.request("POST", "/v1/take",
                          body='{"key":"127.0.0.1","rule":"wide","cost":0}')
            return r.json()["remaining"]
        # The refunds leave with the answers; wait for the last to land.
        harness.wait_until(lambda: wide_remaining() == 980, 10, 0.05)
        remaining = wide_remaining()
        print("%d concurrent requests over two masters: %d allowed, wide "
              "charged %d after refunds" % (racers, statuses.count(200),
                                            1000 - remaining), flush=True)
        self.assertEqual(len(statuses), racers)
        self.assertEqual(statuses.count(200), 20)
        self.assertEqual(statuses.count(429), racers - 20)
        self.assertEqual(remaining, 980)

    # ------------------------------------------------------- failover

    def pick(self, owners, rule, prefix, want):
        """The first identity prefix<i> whose slot's master passes
        want(master)."""
        for i in range(10000):
            ident = "%s%d" % (prefix, i)
            if want(owners[slot_of(rule, ident)]):
                return ident
        raise AssertionError("no key found")

    def failover(self, victim, replica, hang):
        """Drains a key on `victim`, puts load on it, on another key of
        its and on a key elsewhere, then kills it (SIGKILL, or SIGSTOP
        when `hang`: its connections stay open and nothing answers) and
        promotes `replica`."""
        owners = self.cluster.owners()
        tag = "%d-" % victim.port
        drained = self.pick(owners, "tight", "drained" + tag,
                            lambda m: m is victim)
        live = self.pick(owners, "wide", "live" + tag,
                         lambda m: m is victim)
        # More keys on the doomed master than elsewhere, so that its
        # failures come several in a row between other keys' successes.
        crowd = [self.pick(owners, "wide", "crowd%d-%s" % (i, tag),
                           lambda m: m is victim) for i in range(4)]
        elsewhere = self.pick(owners, "wide", "other" + tag,
                              lambda m: m is not victim)
        instances = self.serve(timeout_ms=100)
        ports = [s.port for s in instances]

        # Drain a key on the doomed master and make sure the replica has
        # it before the kill (replication is asynchronous; WAIT says when
        # the replica acknowledged every write so far).
        got = [check(ports[i % 2], "tight", drained).status
               for i in range(TIGHT + 1)]
        self.assertEqual(got, [200] * TIGHT + [429])
        self.assertEqual(victim.cli("WAIT", 1, 2000), "1")

        targets = [("tight", drained), ("wide", live), ("wide", elsewhere)]
        targets += [("wide", c) for c in crowd]
        load = Load(ports, targets)
        try:
            time.sleep(1.0)
            if hang:
                victim.signal(signal.SIGSTOP)
            else:
                victim.kill()
            killed = time.monotonic()
            time.sleep(0.5)  # the slot has no working master meanwhile
            self.assertEqual(
                replica.cli("CLUSTER", "FAILOVER", "TAKEOVER"), "OK")
            self.assertTrue(harness.wait_until(
                lambda: "role:master" in replica.cli("INFO",
                                                     "replication"),
                5, 0.01))
            promoted = time.monotonic()
            time.sleep(3.0)
        finally:
            load.join()
            if hang:
                victim.kill()  # SIGKILL ends a stopped process too

        recs = load.records
        # When each instance decided the live key again after promotion.
        resumed = []
        for port in ports:
            after = [t for t, _, st, _ in recs[(port, "wide", live)]
                     if t >= promoted and st == 200]
            resumed.append(after[0] - promoted if after else None)

        def count(rule, ident, t0=0.0, t1=float("inf")):
            out = {}
            for port in ports:
                for t, _, st, _ in recs[(port, rule, ident)]:
                    if t0 <= t < t1:
                        out[st] = out.get(st, 0) + 1
            return out

        gap = (killed, promoted)
        settled = (promoted + 2.0, float("inf"))
        slowest = max(d - t for rs in recs.values() for t, d, _, _ in rs)
        print("failover (master %s): replica promoted %.0f ms later; "
              "live key decided again %s ms after the promotion; slowest "
              "request %.0f ms (timeout 100 ms); during the gap: live key "
              "%s, drained key %s, key on another master %s; 2 s after "
              "promotion: live %s, drained %s, other %s"
              % ("SIGSTOPped" if hang else "SIGKILLed",
                 (promoted - killed) * 1000,
                 ["%.0f" % (r * 1000) if r is not None else "never"
                  for r in resumed], slowest * 1000,
                 count("wide", live, *gap),
                 count("tight", drained, *gap),
                 count("wide", elsewhere, *gap),
                 count("wide", live, *settled),
                 count("tight", drained, *settled),
                 count("wide", elsewhere, *settled)), flush=True)

        for s in instances:
            self.assertIsNone(s.poll(), "an instance died:\n" + s.log())
        self.assertEqual(load.errors, [])
        every = [r for rs in recs.values() for r in rs]
        # on_store_error: closed -- a failed call is a 503 with
        # Retry-After, never an allowed request or a false 429.
        self.assertTrue(all(ra for _, _, st, ra in every if st == 503))
        self.assertEqual({st for _, _, st, _ in every} - {200, 429, 503},
                         set())
        self.assertEqual(count("wide", live, *gap).get(429, 0), 0)
        self.assertGreater(count("wide", live, *gap).get(503, 0), 0)
        # A dead master fails its own slots only: the other masters'
        # keys are decided all along (one breaker per node).  A breaker
        # shared by all nodes would fail them for the whole gap (the
        # assertion on the gap's 200s below); on a machine oversubscribed
        # several times over, a call to a healthy master may still miss
        # its 100 ms deadline (7 of 344 in a --busy run at load average
        # 26, all while the failover loaded the host), so allow 5%.
        other = count("wide", elsewhere)
        self.assertLessEqual(other.get(503, 0),
                             max(2, sum(other.values()) // 20), other)
        self.assertGreater(count("wide", elsewhere, *gap).get(200, 0), 0)
        # The drained key stays drained: its state survived on the
        # replica, so no request for it is ever allowed again.
        self.assertEqual(count("tight", drained).get(200), None)
        self.assertGreater(count("tight", drained, *settled).get(429, 0),
                           0)
        # Decisions resume on the new master within a bounded time.
        for r in resumed:
            self.assertIsNotNone(r)
            self.assertLess(r, 2.0)
        # Once settled, the failed master's keys are decided again.  A
        # master still failing would answer 503 to nearly every call;
        # what a healthy one may still show on an oversubscribed machine
        # is the rare call that missed its 100 ms deadline (the key on
        # another master, checked over the whole run above, has shown
        # 2-4 such in this 1 s window beside 8 busy processes).
        for key in [("wide", live), ("tight", drained)] + \
                [("wide", c) for c in crowd]:
            got = count(*key, *settled)
            self.assertLessEqual(got.get(503, 0),
                                 max(3, sum(got.values()) // 20), key)
        # Nobody waits on the dead master much beyond timeout_ms.  A
        # client thread stalled on a busy machine may see one answer
        # late; calls waiting on the dead master would be slow by the
        # hundreds (the gap lasts over half a second).
        slow = [d - t for rs in recs.values() for t, d, _, _ in rs
                if d - t > 1.0]
        self.assertLessEqual(len(slow), max(3, len(every) // 100),
                             sorted(slow)[-10:])
        for s in instances:
            self.assertEqual(s.request("GET", "/readyz").status, 200)

    def test_2_failover_after_sigkill(self):
        self.failover(self.cluster.masters[0], self.cluster.replicas[0],
                      hang=False)

    def test_3_failover_of_a_hung_master(self):
        """SIGSTOP: the connections to the old master stay up (the
        kernel even accepts new ones) and nothing answers, so only the
        timeouts tell; the client must still look for the slot's new
        master."""
        self.failover(self.cluster.masters[1], self.cluster.replicas[1],
                      hang=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
