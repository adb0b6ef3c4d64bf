#!/usr/bin/env python3
"""`sluice serve` on a Redis that speaks TLS (`rediss://`, `tls:`).

The certificates are made for the run with the openssl command
(harness.TlsFiles): a CA, a server certificate it signed for localhost and
127.0.0.1, a client certificate it signed, and an unrelated CA.
redis-server listens with TLS only (--port 0 --tls-port).

- Decisions through rediss:// equal plain ones: the same requests against
  a TLS server and a plain one give the same statuses and rate-limit
  headers, and leave the same keys in Redis.
- A certificate that does not verify (a CA that did not sign it, or a
  name it does not carry): serve keeps running, logs one tls_failed line
  naming the node and OpenSSL's reason however often it reconnects,
  /readyz 503, each rule's on_store_error applies, the failure counts
  under kind "tls", and the server is not hammered with handshakes.
  Once the server presents a good certificate, sluice gets in.
- Mutual TLS (--tls-auth-clients yes): without a client certificate
  nothing is decided by Redis; with cert_file/key_file it works.
- A Redis Cluster of three masters over TLS (--tls-cluster yes): every
  key allows exactly its capacity across two instances.
- tls.ca_file naming a missing file: serve refuses the config, naming
  FILE:LINE.

Nothing asserts on speed; waits are polls with generous deadlines.
"""
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import harness  # noqa: E402
from harness import RedisServer, Sluice  # noqa: E402

CAPACITY = 5

CONFIG = """
store: {redis: {url: "%(url)s", timeout_ms: %(timeout)d%(tls)s}}
rules:
  - name: api
    key: ["header:x-user-id"]
    limits: [{capacity: %(capacity)d, rate: 1/h}, {capacity: 100, rate: 100/day}]
    on_store_error: %(mode)s
"""

# What OpenSSL says of a certificate that does not verify (the SSL
# error, or the X.509 reason behind it).
VERIFY_REASON = re.compile(r"certificate verify failed|unable to get local "
                           r"issuer certificate|self[- ]signed certificate|"
                           r"hostname mismatch", re.I)


def tls_block(**fields):
    """` , tls: {k: "v", ...}` for the store's flow mapping."""
    if not fields:
        return ""
    items = []
    for k, v in fields.items():
        if isinstance(v, bool):
            items.append("%s: %s" % (k, "true" if v else "false"))
        else:
            items.append('%s: "%s"' % (k, v))
    return ", tls: {%s}" % ", ".join(items)


# Closed mode and exact statuses: a call that missed a 200 ms deadline on
# a busy machine answered 503 (sequential checks of an ASan sluice on
# Redis, beside 4 CPU-bound loops: 2 of 3,182 over 200 ms, the slowest
# 224 ms).  A server that refuses the handshake fails at once whatever
# the timeout.
def config(url, mode="closed", timeout=2000, **tls):
    return CONFIG % {"url": url, "timeout": timeout, "tls": tls_block(**tls),
                     "capacity": CAPACITY, "mode": mode}


def ready(sluice):
    return sluice.request("GET", "/readyz").status


def wait_status(sluice, status, timeout=10.0):
    """Seconds until /readyz answers `status`, or None."""
    t0 = time.monotonic()
    if harness.wait_until(lambda: ready(sluice) == status, timeout, 0.05):
        return time.monotonic() - t0
    return None


def redis_lines(log):
    return [ln for ln in log.splitlines() if " redis " in ln]


def check(sluice, user):
    return sluice.request("GET", "/v1/check", {"x-user-id": user})


def handshakes_refused(redis):
    """TLS handshakes the server refused so far, as its log tells (Redis
    counts a connection in INFO only once its handshake is done)."""
    return redis.log().count("Error accepting a client connection")


def node(redis):
    return 'node="127.0.0.1:%d"' % redis.port


class TlsTest(fixtures.ClassTls, unittest.TestCase):
    def setUp(self):
        self.procs = []

    def tearDown(self):
        for p in reversed(self.procs):
            p.stop()

    def redis(self, **kw):
        r = RedisServer(**kw)
        self.procs.append(r)
        return r

    def serve(self, text):
        s = Sluice(text)
        self.procs.append(s)
        return s

    # ------------------------------------------- the same decisions

    def decisions(self, sluice):
        """A fixed sequence of checks and takes -> (who, what each
        answered)."""
        out = []

        def seen(who, r):
            out.append((who, r.status, r.header("x-ratelimit-limit"),
                        r.header("x-ratelimit-remaining"),
                        r.header("ratelimit-policy"),
                        r.header("retry-after") is not None))
        for i in range(CAPACITY + 2):
            seen("alice", check(sluice, "alice"))
            if i % 3 == 0:
                seen("bob", check(sluice, "bob"))
        for _ in range(4):
            seen("carol", sluice.request("POST", "/v1/take", body=(
                '{"key": "carol", "rule": "api", "cost": 2}')))
        return out

    def test_decisions_through_tls_equal_plain_ones(self):
        plain = self.redis()
        tls = self.redis(tls=self.tls)
        on_plain = self.serve(config(plain.url()))
        on_tls = self.serve(config(tls.url(), ca_file=self.tls.ca))
        for s in (on_plain, on_tls):
            self.assertIsNotNone(wait_status(s, 200), s.log())
        a = self.decisions(on_plain)
        b = self.decisions(on_tls)
        print("plain: %s\nTLS:   %s" % (a, b), flush=True)
        self.assertEqual(a, b)

        # Really decided by Redis, as the limits say (closed mode: a
        # failure would be a 503).
        def statuses(who):
            return [st for w, st, *_ in b if w == who]
        self.assertEqual(statuses("alice"), [200] * CAPACITY + [429] * 2)
        self.assertEqual(statuses("bob"), [200] * 3)
        self.assertEqual(statuses("carol"), [200, 200, 429, 429])
        # The TLS server holds the same keys as the plain one.
        keys_plain = sorted(plain.cli("KEYS", "*").splitlines())
        keys_tls = sorted(tls.cli("KEYS", "*").splitlines())
        self.assertEqual(keys_tls, keys_plain)
        self.assertGreater(len(keys_tls), 0)
        m = on_tls.metrics()
        self.assertEqual(m["sluice_redis_up{%s}" % node(tls)], 1)
        self.assertEqual(m.get('sluice_redis_errors_total{%s,kind="tls"}'
                               % node(tls), 0), 0)
        self.assertFalse([ln for ln in redis_lines(on_tls.log())
                          if "tls_failed" in ln], on_tls.log())

    # --------------------------------- a certificate that does not verify

    def refused(self, redis, sluice, mode, events=("tls_failed",),
                reason=VERIFY_REASON):
        """sluice cannot use `redis`: checks the log, /readyz, the fail
        mode, the metrics and, last, how often the server sees a
        handshake."""
        took = wait_status(sluice, 503)
        self.assertIsNotNone(took, "/readyz never said 503:\n" + sluice.log())
        time.sleep(1.0)  # past the first few quick retries
        before = handshakes_refused(redis)
        window = 4.0
        time.sleep(window)
        seen = handshakes_refused(redis) - before
        answers = [check(sluice, "u%d" % i) for i in range(CAPACITY + 3)]
        log = sluice.log()
        lines = redis_lines(log)
        where = "127.0.0.1:%d" % redis.port
        print("%s, on_store_error %s: /readyz 503 after %.2f s, %d "
              "handshakes refused in %.0f s, answers %s, log:\n  %s"
              % ("/".join(events), mode, took, seen, window,
                 [r.status for r in answers], "\n  ".join(lines)),
              flush=True)
        self.assertIsNone(sluice.poll(), "sluice died:\n" + log)
        self.assertEqual(sluice.request("GET", "/healthz").status, 200)
        self.assertEqual(ready(sluice), 503)
        # The 503 names the node and its last error (never /metrics).
        body = sluice.request("GET", "/readyz").json()
        self.assertEqual(body["status"], "store_unavailable", body)
        self.assertEqual([n["node"] for n in body["nodes"]],
                         ["127.0.0.1:%d" % redis.port], body)
        self.assertNotEqual(body["nodes"][0]["last_error"], "", body)
        if events == ("tls_failed",) and reason is not None:
            self.assertRegex(body["nodes"][0]["last_error"], reason)
        # Said, naming the node and why; and each kind of failure once,
        # not once per reconnect (it reconnected meanwhile).
        failed = [ln for ln in lines if any(": %s" % e in ln
                                            for e in events)]
        self.assertGreaterEqual(len(failed), 1, log)
        for e in events:
            self.assertLessEqual(len([ln for ln in failed
                                      if ": %s" % e in ln]), 1, log)
        for ln in failed:
            self.assertIn(where, ln)
        if reason is not None:
            self.assertTrue(any(reason.search(ln) for ln in failed), log)
        self.assertLessEqual(len(lines), 5, log)
        if mode == "closed":
            self.assertEqual([r.status for r in answers],
                             [503] * len(answers))
            for r in answers:
                self.assertIsNotNone(r.header("retry-after"))
        elif mode == "open":
            self.assertEqual([r.status for r in answers],
                             [200] * len(answers))
        m = sluice.metrics()
        self.assertEqual(m["sluice_redis_up{%s}" % node(redis)], 0)
        self.assertGreaterEqual(
            m.get('sluice_redis_errors_total{%s,kind="tls"}' % node(redis),
                  0), 1, m)
        self.assertEqual(redis.cli("DBSIZE"), "0")
        # At most one handshake a second, as for a refused AUTH: the
        # connection is retried, not hammered (each handshake costs the
        # server a signature).
        self.assertLessEqual(seen, int(window) + 2)
        return answers

    def test_wrong_ca_is_logged_once_and_fails_closed(self):
        redis = self.redis(tls=self.tls)
        sluice = self.serve(config(redis.url(), mode="closed",
                                   ca_file=self.tls.other_ca))
        self.refused(redis, sluice, "closed")

    def test_wrong_ca_fails_open(self):
        redis = self.redis(tls=self.tls)
        sluice = self.serve(config(redis.url(), mode="open",
                                   ca_file=self.tls.other_ca))
        self.refused(redis, sluice, "open")

    def test_server_certificate_fixed_on_the_server_is_used(self):
        # The server presents a certificate from the wrong CA, then is
        # given the right one (CONFIG SET, no restart): sluice, still
        # retrying, gets in and says so.
        redis = self.redis(tls=self.tls, cert=(self.tls.other_server_cert,
                                               self.tls.other_server_key))
        sluice = self.serve(config(redis.url(), ca_file=self.tls.ca))
        self.assertIsNotNone(wait_status(sluice, 503), sluice.log())
        time.sleep(2.0)  # refused for a while: backing off
        self.assertEqual(check(sluice, "r").status, 503)
        self.assertEqual(redis.cli("CONFIG", "SET",
                                   "tls-cert-file", self.tls.server_cert,
                                   "tls-key-file", self.tls.server_key),
                         "OK")
        took = wait_status(sluice, 200, timeout=15)
        print("certificate fixed on the server: /readyz 200 after %s s"
              % took, flush=True)
        self.assertIsNotNone(took, sluice.log())
        self.assertEqual(check(sluice, "r").status, 200)
        lines = redis_lines(sluice.log())
        self.assertEqual(len([ln for ln in lines if "tls_failed" in ln]), 1,
                         lines)
        self.assertTrue(any("connected" in ln for ln in lines), lines)

    def test_certificate_for_another_name_does_not_verify(self):
        # The right CA, but the certificate names localhost and
        # 127.0.0.1, not this: host-name verification is on by default.
        redis = self.redis(tls=self.tls)
        sluice = self.serve(config(redis.url(), mode="closed",
                                   ca_file=self.tls.ca,
                                   server_name="redis.example.com"))
        self.refused(redis, sluice, "closed")

    def test_rediss_without_ca_file_uses_the_system_store(self):
        # The system's CAs did not sign the test CA: refused, not
        # silently accepted.
        redis = self.redis(tls=self.tls)
        sluice = self.serve(config(redis.url(), mode="closed"))
        self.refused(redis, sluice, "closed")

    def test_verify_false_accepts_any_certificate(self):
        redis = self.redis(tls=self.tls)
        sluice = self.serve(config(redis.url(), ca_file=self.tls.other_ca,
                                   verify=False))
        self.assertIsNotNone(wait_status(sluice, 200), sluice.log())
        self.assertEqual(check(sluice, "v").status, 200)
        self.assertNotEqual(redis.cli("DBSIZE"), "0")

    # ----------------------------------------------------- mutual TLS

    def test_mutual_tls_needs_the_client_certificate(self):
        redis = self.redis(tls=self.tls, tls_auth_clients=True)
        without = self.serve(config(redis.url(), mode="closed",
                                    ca_file=self.tls.ca))
        # With TLS 1.3 the server checks the client's certificate after
        # the client thinks the handshake is done: the refusal may come
        # as an alert or as a reset on the first write.  Either way it is
        # said once, not once per reconnect.
        self.refused(redis, without, "closed",
                     events=("tls_failed", "unreachable"),
                     reason=re.compile(r"certificate required|alert", re.I))
        self.assertEqual(redis.cli("DBSIZE"), "0")

        with_cert = self.serve(config(
            redis.url(), mode="closed", ca_file=self.tls.ca,
            cert_file=self.tls.client_cert, key_file=self.tls.client_key,
            server_name="localhost"))
        self.assertIsNotNone(wait_status(with_cert, 200), with_cert.log())
        got = [check(with_cert, "m").status for _ in range(CAPACITY + 1)]
        self.assertEqual(got, [200] * CAPACITY + [429])
        self.assertNotEqual(redis.cli("DBSIZE"), "0")
        # The first instance still cannot get in.
        self.assertEqual(ready(without), 503)

    # ------------------------------------------------- cluster over TLS

    def test_cluster_over_tls(self):
        t0 = time.monotonic()
        try:
            masters = [self.redis(cluster=True, tls=self.tls)
                       for _ in range(3)]
            p = subprocess.run(["redis-cli", "--cluster", "create"] +
                               [m.seed() for m in masters] +
                               ["--cluster-yes"] + self.tls.cli_args(),
                               capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                raise RuntimeError(p.stdout + p.stderr)
            for m in masters:
                if not harness.wait_until(
                        lambda: "cluster_state:ok" in m.cli("CLUSTER",
                                                            "INFO"),
                        20, 0.05):
                    raise RuntimeError("cluster not ok on %d" % m.port)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print("cluster over TLS did not start: %s" % e, flush=True)
            self.skipTest("cluster over TLS did not start: %s" % e)
        print("TLS cluster of 3 masters up in %.1f s"
              % (time.monotonic() - t0), flush=True)

        seeds = ", ".join('"rediss://%s"' % m.seed() for m in masters)
        text = CONFIG.replace(
            'store: {redis: {url: "%(url)s", timeout_ms: %(timeout)d%(tls)s}}',
            'store: {redis_cluster: {seeds: [%s], timeout_ms: 1000, '
            'tls: {ca_file: "%s"}}}' % (seeds, self.tls.ca)) % {
                "capacity": CAPACITY, "mode": "closed"}
        a, b = self.serve(text), self.serve(text)
        for s in (a, b):
            self.assertIsNotNone(wait_status(s, 200), s.log())
        keys = ["user%d" % i for i in range(60)]
        allowed = {k: 0 for k in keys}
        other = []
        lock = threading.Lock()

        def worker(part):
            for k in part:
                for j in range(CAPACITY + 2):
                    st = check(a if j % 2 == 0 else b, k).status
                    with lock:
                        if st == 200:
                            allowed[k] += 1
                        elif st != 429:
                            other.append((k, st))
        threads = [threading.Thread(target=worker, args=(keys[i::4],))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        states = [int(m.cli("DBSIZE")) for m in masters]
        print("%d keys over 2 instances on a TLS cluster: %d allowed "
              "(capacity %d each), states per master %s"
              % (len(keys), sum(allowed.values()), CAPACITY, states),
              flush=True)
        self.assertEqual(other, [])
        self.assertEqual({k for k, v in allowed.items() if v != CAPACITY},
                         set())
        self.assertEqual(sum(states), 2 * len(keys))
        for n in states:
            self.assertGreater(n, 0)
        for s in (a, b):
            self.assertEqual(ready(s), 200)
            self.assertIsNone(s.poll())

    # ------------------------------------------------------ bad config

    def test_missing_ca_file_is_refused_with_file_and_line(self):
        missing = os.path.join(self.tls.dir, "no-such-ca.crt")
        text = config("rediss://127.0.0.1:6390", ca_file=missing)
        line = next(i for i, ln in enumerate(text.splitlines(), 1)
                    if "ca_file" in ln)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(text)
            f.flush()
            p = subprocess.run([harness.SLUICE, "serve", "-c", f.name,
                                "--listen", "127.0.0.1:%d"
                                % harness.free_port()],
                               capture_output=True, text=True, timeout=30)
            print("serve with a missing ca_file: status %d, %r"
                  % (p.returncode, p.stderr), flush=True)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("%s:%d:" % (f.name, line), p.stderr)
            self.assertIn("no-such-ca.crt", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
