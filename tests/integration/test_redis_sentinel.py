#!/usr/bin/env python3
"""`sluice serve` on Redis Sentinel (`store.redis.sentinel`).

Each test starts its own group (sentinel_harness.SentinelGroup): a master,
a replica following it and three `redis-server --sentinel` processes
watching it under a name of its own (quorum 2, down-after-milliseconds
1000; see SentinelGroup for why the name is unique).

- Decisions flow to the master the Sentinels name.  A key is drained
  (and acknowledged by the replica with WAIT), the master is SIGKILLed,
  and the Sentinels promote the replica: meanwhile every request gets the
  rule's on_store_error (closed: 503 with Retry-After, never a false
  allow or a false 429); afterwards Redis decides again on the new master
  (a fresh key is allowed, the drained key is still refused, the new
  master holds the new state), "master_changed" names it in the log, and
  /readyz is 200.  The gap from the kill to the first decision is printed
  with the Sentinels' detection time; only a generous bound is asserted.
  The old master, restarted, becomes a replica and gets no decisions.
- The same when the master hangs (SIGSTOP: connections open, nothing
  answers) and when it is handed over with SENTINEL FAILOVER (it lives
  on as a replica: writes to it are refused with READONLY).  Which
  server decided is told by where the request's key was written.
- The same with passwords: the master's from the URL (with a db), the
  Sentinels' own under sentinel.password; and with TLS everywhere
  (rediss://, Sentinels included).
- After SENTINEL FAILOVER, and after SIGSTOP / failover / SIGCONT, the
  old master keeps saying "master" (and accepting writes) for some 10 s
  until the Sentinels demote it: no decision sluice allows after it has
  followed the Sentinels goes there (every allowed key is on the new
  master once the old one has resynced from it).
- Sentinels in the list that are down are skipped.
- Sentinels that are all unreachable: serve runs, /readyz 503, each
  rule's on_store_error applies, no_master is said once (and counted in
  the metrics), the log is not flooded.
"""
import os
import re
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402
from sentinel_harness import SentinelGroup  # noqa: E402

TIGHT = 3  # capacity of the "tight" rule (1/h: nothing refills)
DOWN_AFTER_MS = 1000

CONFIG = """
store:
  redis:
%(url)s%(tls)s    timeout_ms: %(timeout)d
    sentinel: {master: %(name)s, addrs: [%(addrs)s]%(extra)s}
rules:
  - name: tight
    match: {path: "/tight"}
    key: ["header:x-user-id"]
    limits: [{capacity: %(tight)d, rate: 1/h}]
    on_store_error: %(mode)s
  - name: wide
    match: {path: "/wide"}
    key: ["header:x-user-id"]
    limits: [{capacity: 10000, rate: 1/min}]
    on_store_error: %(mode)s
"""


def config(addrs, mode="closed", url=None, password=None, tls=None,
           ca_file=None, timeout_ms=2000, name="mymaster"):
    """tls: sentinel.tls; ca_file: store.redis.tls.ca_file.  timeout_ms:
    closed mode and exact statuses ([200] * TIGHT + [429]) need every call
    to a live master decided; on a busy machine a 200 ms deadline was
    missed now and then (sequential checks of an ASan sluice on Redis
    beside 4 CPU-bound loops: 2 of 3,182 over 200 ms).  A dead master
    fails at once; a hung one answers 503 once the deadline passes."""
    extra = ""
    if password is not None:
        extra += ', password: "%s"' % password
    if tls is not None:
        extra += ", tls: %s" % ("true" if tls else "false")
    return CONFIG % {
        "url": '    url: "%s"\n' % url if url else "",
        "tls": '    tls: {ca_file: "%s"}\n' % ca_file if ca_file else "",
        "addrs": ", ".join('"%s"' % a for a in addrs), "extra": extra,
        "tight": TIGHT, "mode": mode, "timeout": timeout_ms,
        "name": name}


def check(sluice, rule, ident):
    return sluice.request("GET", "/v1/check", {
        "x-user-id": ident, "x-original-uri": "/" + rule,
        "x-original-method": "GET"})


def ready(sluice):
    return sluice.request("GET", "/readyz").status


def redis_lines(log):
    return [ln for ln in log.splitlines() if " redis " in ln]


class SentinelTest(unittest.TestCase):
    def setUp(self):
        self.group = None
        self.frozen = None
        self.procs = []

    def tearDown(self):
        if self.frozen:
            self.frozen.kill()  # SIGKILL ends a stopped process too
        for p in self.procs:
            p.stop()
        if self.group:
            self.group.stop()

    def serve(self, text):
        s = Sluice(text)
        self.procs.append(s)
        return s

    def start_group(self, **kw):
        t0 = time.monotonic()
        self.group = SentinelGroup(down_after_ms=DOWN_AFTER_MS, **kw)
        print("master %d, replica %d, sentinels %s up in %.1f s"
              % (self.group.master.port, self.group.replica.port,
                 self.group.addrs(), time.monotonic() - t0), flush=True)
        return self.group

    # ------------------------------------------------------- failover

    def failover(self, text, db=0, secrets=(), how="kill",
                 restart_old=False):
        g = self.group
        master, replica = g.master, g.replica
        sluice = self.serve(text)
        self.assertTrue(harness.wait_until(lambda: ready(sluice) == 200,
                                           15, 0.05), sluice.log())

        # Decisions flow, and land on the master the Sentinels name.
        got = [check(sluice, "wide", "before%d" % i).status
               for i in range(5)]
        self.assertEqual(got, [200] * 5)
        got = [check(sluice, "tight", "drained").status
               for _ in range(TIGHT + 1)]
        self.assertEqual(got, [200] * TIGHT + [429])
        stored = int(master.cli("-n", db, "DBSIZE"))
        self.assertEqual(stored, 6)
        # The replica acknowledged every write so far (replication is
        # asynchronous; WAIT says when it has them).
        self.assertEqual(master.cli("WAIT", 1, 5000), "1")
        self.assertEqual(int(replica.cli("-n", db, "DBSIZE")), stored)

        # The event: the master SIGKILLed (its connections reset), frozen
        # with SIGSTOP (connections open, no answers: only timeouts and
        # the Sentinels' news tell), or handed over with SENTINEL
        # FAILOVER (it stays up and is demoted: writes to it get
        # READONLY).
        if how == "kill":
            master.kill()
        elif how == "stop":
            master.signal(signal.SIGSTOP)
            self.frozen = master
        else:
            self.assertEqual(g.sentinels[0].cli("SENTINEL", "FAILOVER",
                                                g.name), "OK")
        event = time.monotonic()
        sent = []  # (sent at, identity, status)
        promoted = None
        i = 0
        # Poll with fresh keys until Redis decides on the new master:
        # with on_store_error closed any answer but a 503 comes from
        # Redis, and the key it wrote says which server decided.
        while time.monotonic() < event + 60:
            i += 1
            ident = "during%d" % i
            t = time.monotonic()
            r = check(sluice, "wide", ident)
            sent.append((t, ident, r.status))
            if r.status == 503:
                self.assertIsNotNone(r.header("retry-after"))
            if promoted is None and g.master_port() == replica.port:
                promoted = time.monotonic()
            if promoted is not None and r.status == 200 and t > promoted \
                    and replica.cli("-n", db, "KEYS",
                                    "*\x1f%s}*" % ident) != "":
                break
            time.sleep(0.02)
        on_new = set(re.findall("\x1f(during[0-9]+)}", replica.cli(
            "-n", db, "KEYS", "*during*")))
        first = next((t for t, ident, st in sent if st == 200 and
                      ident in on_new and (how != "manual" or
                                           t > (promoted or 0))), None)
        seen = {}
        for _, _, st in sent:
            seen[st] = seen.get(st, 0) + 1
        print("master %s: the Sentinels (down-after-milliseconds %d) "
              "named the replica after %s s; first decision on the new "
              "master %s s after it; answers meanwhile %s"
              % ({"kill": "SIGKILLed", "stop": "SIGSTOPped",
                  "manual": "handed over (SENTINEL FAILOVER)"}[how],
                 DOWN_AFTER_MS,
                 "%.2f" % (promoted - event) if promoted else "never",
                 "%.2f" % (first - event) if first else "never", seen),
              flush=True)
        self.assertIsNone(sluice.poll(), "sluice died:\n" + sluice.log())
        self.assertIsNotNone(promoted, "the Sentinels never promoted")
        self.assertIsNotNone(first, "no decision on the new master:\n"
                             + sluice.log())
        self.assertLess(first - event, 30.0)
        # Closed mode: never a false allow, never a false 429.
        self.assertEqual(set(seen) - {200, 503}, set(), seen)

        # Redis decides on the new master: fresh keys pass, the drained
        # key stays drained (the replica had it), and the new master
        # holds what is decided now.
        got = [check(sluice, "tight", "drained").status for _ in range(3)]
        self.assertEqual(got, [429] * 3)
        got = [check(sluice, "tight", "after").status
               for _ in range(TIGHT + 1)]
        self.assertEqual(got, [200] * TIGHT + [429])
        self.assertEqual(replica.info("replication").get("role"), "master")
        self.assertGreater(int(replica.cli("-n", db, "DBSIZE")), stored)
        self.assertEqual(ready(sluice), 200)

        log = sluice.log()
        changed = [ln for ln in redis_lines(log) if "master_changed" in ln]
        self.assertTrue(any("127.0.0.1:%d" % replica.port in ln
                            for ln in changed), log)
        for secret in secrets:
            self.assertNotIn(secret, log)
        if not restart_old:
            return sluice

        # The old master comes back (empty: it lost everything) and the
        # Sentinels make it a replica of the new one.  Decisions stay on
        # the new master: the drained key is still refused.  It comes
        # back once the failover is over, as an operator would bring it
        # back: a Sentinel still holding the old configuration would make
        # the new master a replica of the empty old one.
        self.wait_settled(replica)
        # Empty, it must never be promoted: on a loaded host a Sentinel
        # can see the new master late for a second (down-after 1000 ms)
        # and would otherwise fail over back to it, losing every bucket.
        master.extra += ["--replica-priority", "0"]
        master.start()
        self.assertTrue(harness.wait_until(
            lambda: master.info("replication").get(
                "master_link_status") == "up", 30, 0.1),
            "\n".join([master.log()] + [s.log() for s in g.sentinels]))
        got = [check(sluice, "tight", "drained").status for _ in range(3)]
        self.assertEqual(got, [429] * 3)
        self.assertEqual(ready(sluice), 200)
        self.assertEqual(g.master_port(), replica.port)
        return sluice

    def wait_settled(self, new):
        """Waits until every Sentinel names `new` and none is in a
        failover."""
        g = self.group
        self.assertTrue(
            harness.wait_until(lambda: g.settled_on(new.port), 60, 0.2),
            "the Sentinels never all named %d:\n%s" % (
                new.port, "\n".join(s.log() for s in g.sentinels)))

    def stays_on_the_new_master(self, sluice, label, fix=None):
        """After the failover: until the old master has been made a
        replica of the new one (Sentinel does it some 10 s later; until
        then it still says it is a master and accepts writes), every
        decision sluice allows is made on the new master, none on the old
        one (whose writes its resync to the new master throws away).
        fix: run once the old master is a replica, before the check."""
        g = self.group
        old, new = g.master, g.replica
        sent = []
        i = 0
        old_was_master = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            i += 1
            ident = "%s%d" % (label, i)
            sent.append((ident, check(sluice, "wide", ident).status))
            rep = old.info("replication")
            if rep.get("role") == "master":
                old_was_master += 1
            elif rep.get("master_link_status") == "up" and \
                    rep.get("master_port") == str(new.port):
                break
            time.sleep(0.02)
        self.assertLess(time.monotonic(), deadline,
                        "the old master never became a replica")
        # The old master now holds a copy of the new one's data: a key
        # it holds that the new master lacks was written to it alone.
        self.assertEqual(new.cli("WAIT", 1, 5000), "1")
        on_new = set(re.findall("\x1f(%s[0-9]+)}" % label,
                                new.cli("KEYS", "*%s*" % label)))
        allowed = [ident for ident, st in sent if st == 200]
        lost = [ident for ident in allowed if ident not in on_new]
        print("%d decisions while the old master still said it was one "
              "(%d polls); allowed %d, lost %d"
              % (len(sent), old_was_master, len(allowed), len(lost)),
              flush=True)
        self.assertGreater(old_was_master, 0)
        self.assertEqual(set(st for _, st in sent) - {200}, set(), sent)
        self.assertEqual(lost, [], sluice.log())
        got = [check(sluice, "tight", "drained").status for _ in range(3)]
        self.assertEqual(got, [429] * 3)
        self.assertEqual(ready(sluice), 200)

    def test_decisions_follow_a_failover(self):
        g = self.start_group()
        self.failover(config(g.addrs(), name=g.name), restart_old=True)

    def test_failover_of_a_hung_master(self):
        # SIGSTOP: sluice's connections to the old master stay open and
        # nothing answers; only the timeouts and the Sentinels' news
        # (+switch-master) lead it to the new master.
        g = self.start_group()
        self.failover(config(g.addrs(), name=g.name), how="stop")

    def test_manual_failover_while_the_old_master_lives(self):
        # SENTINEL FAILOVER: the old master stays up and is made a
        # replica of the new one; its connections are not lost, its
        # writes are refused (READONLY).
        g = self.start_group()
        self.failover(config(g.addrs(), name=g.name), how="manual")
        self.assertTrue(harness.wait_until(
            lambda: g.master.info("replication").get("role") == "slave",
            30, 0.1))

    def test_no_decision_on_a_demoted_master_that_still_says_master(self):
        # SENTINEL FAILOVER: once the Sentinels have named the new master,
        # the old one stays up and keeps saying "master" for ~10 s, until
        # they make it a replica.  sluice follows the Sentinels, not the
        # old master's ROLE: no decision goes there (it would be lost).
        g = self.start_group()
        sluice = self.failover(config(g.addrs(), name=g.name), how="manual")
        self.stays_on_the_new_master(sluice, "after_manual")

    def test_a_resumed_old_master_gets_no_decisions(self):
        # SIGSTOP, failover, SIGCONT: the old master comes back saying
        # "master" (with the drained bucket, and connections sluice had
        # open to it) until the Sentinels demote it.  Decisions stay on
        # the new master, which the Sentinels name.
        g = self.start_group()
        sluice = self.failover(config(g.addrs(), name=g.name), how="stop")
        self.wait_settled(g.replica)
        g.master.signal(signal.SIGCONT)
        self.frozen = None
        self.stays_on_the_new_master(sluice, "after_resume")

    def test_calls_in_flight_on_a_hung_master_are_decided_by_the_new(self):
        # timeout_ms 30 s: calls sent to a master that hangs (SIGSTOP)
        # are still in flight when the Sentinels name the new master.
        # Whatever the old one makes of them once resumed is lost (it is
        # made a replica of the new one), so the new master decides them
        # within their deadline: allowed (no 503 in closed mode), and
        # written there.
        g = self.start_group()
        sluice = self.serve(config(g.addrs(), name=g.name,
                                   timeout_ms=30000))
        self.assertTrue(harness.wait_until(lambda: ready(sluice) == 200,
                                           15, 0.05), sluice.log())
        got = [check(sluice, "tight", "drained").status
               for _ in range(TIGHT + 1)]
        self.assertEqual(got, [200] * TIGHT + [429])
        self.assertEqual(g.master.cli("WAIT", 1, 5000), "1")
        g.master.signal(signal.SIGSTOP)
        self.frozen = g.master
        answers = {}

        def one(ident):
            c = harness.Client(sluice.port, timeout=120)
            try:
                answers[ident] = c.request("GET", "/v1/check", {
                    "x-user-id": ident, "x-original-uri": "/wide",
                    "x-original-method": "GET"}).status
            except OSError as e:
                answers[ident] = repr(e)
            finally:
                c.close()

        threads = [threading.Thread(target=one, args=("inflight%d" % i,))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        self.assertTrue(all(not t.is_alive() for t in threads))
        self.assertEqual(g.master_port(), g.replica.port)
        print("answers to the calls in flight at the failover: %s"
              % answers, flush=True)
        self.assertEqual(set(answers.values()), {200}, sluice.log())
        on_new = g.replica.cli("KEYS", "*inflight*")
        for ident in answers:
            self.assertIn("\x1f%s}" % ident, on_new)
        got = [check(sluice, "tight", "drained").status for _ in range(3)]
        self.assertEqual(got, [429] * 3)

    def test_min_replicas_to_write_closes_the_manual_failover_window(self):
        # SENTINEL FAILOVER promotes the replica (REPLICAOF NO ONE), but
        # the Sentinels announce it (+switch-master) only about 1 s
        # later; meanwhile the old master still accepts writes, and what
        # it writes is lost when it is made a replica of the new one.
        # Redis's own remedy: min-replicas-to-write 1 on the old master,
        # which refuses writes (NOREPLICAS) as soon as its only replica
        # has left to become the master.  sluice takes the refusal as a
        # store error (503 here, on_store_error closed), so no decision
        # it allows is lost.  (The new master has no such setting: with
        # its only replica gone it would refuse too.)
        g = self.start_group()
        old, new = g.master, g.replica
        self.assertEqual(old.cli("CONFIG", "SET", "min-replicas-to-write",
                                 1), "OK")
        sluice = self.serve(config(g.addrs(), name=g.name))
        self.assertTrue(harness.wait_until(lambda: ready(sluice) == 200,
                                           15, 0.05), sluice.log())
        got = [check(sluice, "tight", "drained").status
               for _ in range(TIGHT + 1)]
        self.assertEqual(got, [200] * TIGHT + [429])
        self.assertEqual(old.cli("WAIT", 1, 5000), "1")
        self.assertEqual(g.sentinels[0].cli("SENTINEL", "FAILOVER", g.name),
                         "OK")
        sent = []
        i = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            i += 1
            ident = "mf%d" % i
            sent.append((ident, check(sluice, "wide", ident).status))
            rep = old.info("replication")
            if rep.get("role") == "slave" and \
                    rep.get("master_link_status") == "up" and \
                    rep.get("master_port") == str(new.port):
                break
            time.sleep(0.02)
        self.assertLess(time.monotonic(), deadline,
                        "the old master never became a replica")
        self.assertEqual(new.cli("WAIT", 1, 5000), "1")
        on_new = set(re.findall("\x1f(mf[0-9]+)}", new.cli("KEYS", "*mf*")))
        seen = {}
        for _, st in sent:
            seen[st] = seen.get(st, 0) + 1
        lost = [ident for ident, st in sent
                if st == 200 and ident not in on_new]
        print("SENTINEL FAILOVER, min-replicas-to-write 1 on the old "
              "master: answers %s, allowed but lost %d" % (seen, len(lost)),
              flush=True)
        self.assertEqual(set(seen) - {200, 503}, set(), seen)
        self.assertEqual(lost, [], sluice.log())
        self.assertIn(200, seen)
        got = [check(sluice, "tight", "drained").status for _ in range(3)]
        self.assertEqual(got, [429] * 3)

    def test_failover_with_passwords_and_a_db(self):
        g = self.start_group(password="m4ster-Pw", sentinel_password="s3nt-Pw")
        self.failover(config(g.addrs(), name=g.name,
                             url="redis://:m4ster-Pw@mymaster/3",
                             password="s3nt-Pw", tls=False), db=3,
                      secrets=("m4ster-Pw", "s3nt-Pw"))
        self.assertEqual(self.group.replica.cli("-n", 0, "DBSIZE"), "0")

    def test_failover_over_tls(self):
        # Master, replica and Sentinels all speak TLS only; the Sentinels
        # are reached over TLS because the master is (rediss://).
        self.tls = harness.TlsFiles()
        try:
            g = self.start_group(password="m4ster-Pw", tls=self.tls)
            self.failover(config(g.addrs(), name=g.name,
                                 url="rediss://:m4ster-Pw@mymaster/0",
                                 ca_file=self.tls.ca),
                          secrets=("m4ster-Pw",))
        finally:
            self.tls.remove()

    def test_dead_sentinels_in_the_list_are_skipped(self):
        # The first address has nobody listening, the second Sentinel is
        # stopped: the third and fourth name the master.
        g = self.start_group()
        g.sentinels[0].stop()
        addrs = ["127.0.0.1:%d" % harness.free_port()] + g.addrs()
        sluice = self.serve(config(addrs, name=g.name))
        self.assertTrue(harness.wait_until(lambda: ready(sluice) == 200,
                                           15, 0.05), sluice.log())
        got = [check(sluice, "tight", "skip").status
               for _ in range(TIGHT + 1)]
        self.assertEqual(got, [200] * TIGHT + [429])
        self.assertEqual(g.master.cli("DBSIZE"), "1")

    # -------------------------------------------- no Sentinel answers

    def unreachable(self, mode):
        addrs = ["127.0.0.1:%d" % harness.free_port() for _ in range(3)]
        sluice = self.serve(config(addrs, mode=mode))
        self.assertTrue(harness.wait_until(lambda: ready(sluice) == 503,
                                           10, 0.05), sluice.log())
        time.sleep(3.0)  # several rounds of asking the Sentinels
        answers = [check(sluice, rule, "u%d" % i)
                   for i in range(TIGHT + 2) for rule in ("tight", "wide")]
        lines = redis_lines(sluice.log())
        print("Sentinels unreachable, on_store_error %s: %s; log:\n  %s"
              % (mode, sorted({r.status for r in answers}),
                 "\n  ".join(lines)), flush=True)
        self.assertIsNone(sluice.poll(), "sluice died:\n" + sluice.log())
        self.assertEqual(sluice.request("GET", "/healthz").status, 200)
        self.assertEqual(ready(sluice), 503)
        # Said once, naming the group, however many rounds it asked.
        none = [ln for ln in lines if "no_master" in ln]
        self.assertEqual(len(none), 1, sluice.log())
        self.assertIn("mymaster", none[0])
        self.assertLessEqual(len(lines), 8, sluice.log())
        # Counted as calls with no master (those the open breaker failed
        # fast may not be).
        m = sluice.metrics()
        self.assertGreaterEqual(m.get('sluice_redis_errors_total{node="'
                                      'mymaster",kind="no_master"}', 0),
                                1, m)
        self.assertEqual(m.get('sluice_redis_up{node="mymaster"}'), 0)
        return answers

    def test_unreachable_sentinels_fail_closed(self):
        answers = self.unreachable("closed")
        self.assertEqual({r.status for r in answers}, {503})
        for r in answers:
            self.assertIsNotNone(r.header("retry-after"))

    def test_unreachable_sentinels_fail_open(self):
        answers = self.unreachable("open")
        self.assertEqual({r.status for r in answers}, {200})


if __name__ == "__main__":
    unittest.main(verbosity=2)
