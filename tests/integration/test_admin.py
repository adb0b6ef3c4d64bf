#!/usr/bin/env python3
"""Admin endpoints of `sluice serve`: POST /v1/reset and /v1/refund.

- Off unless configured: without `admin:` both paths are 404.
- A bearer token guards them: missing or wrong -> 401; the right one
  (inline `token:` or `token_file:`) is accepted.
- reset makes a drained key full again under every limit and every tier;
  refund gives tokens back, never beyond full; ad-hoc buckets
  (capacity + rate) too.  The same on the memory store, on Redis (script
  path) and on Redis with the sluice module loaded.
- Bad bodies get 400 naming the field.

The buckets refill at 1/hour so nothing refills while a test runs: every
count is exact, nothing depends on timing.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import harness  # noqa: E402
from harness import RedisServer, Sluice  # noqa: E402

TOKEN = "s3cret-admin-token-0123456789"
AUTH = {"Authorization": "Bearer " + TOKEN}
MODULE = os.path.join(harness.BUILD, "sluice-redis.so")

RULES = """
rules:
  - name: api
    key: ["header:x-user-id"]
    limits: [{capacity: 5, rate: 1/h}, {capacity: 3, rate: 1/day}]
  - name: pair
    match: {path: "/pair"}
    key: "header:x-org+header:x-member"
    limits: [{capacity: 2, rate: 1/h}]
  - name: tiered
    key: ["header:x-user-id"]
    tiers:
      header: x-tier
      default: free
      limits:
        free: [{capacity: 2, rate: 1/h}]
        paid: [{capacity: 4, rate: 1/h}]
"""


def take(s, body):
    return s.request("POST", "/v1/take", {}, json.dumps(body))


def drain(s, body, most=20):
    """Takes until refused; returns how many passed (bounded)."""
    n = 0
    while n < most and take(s, body).status == 200:
        n += 1
    return n


def remaining(s, body):
    r = take(s, dict(body, cost=0))
    return r.json()["remaining"]


class AdminOff(unittest.TestCase):

    def test_without_admin_config_the_paths_do_not_exist(self):
        with Sluice(RULES) as s:
            for path in ("/v1/reset", "/v1/refund"):
                r = s.request("POST", path, AUTH,
                              json.dumps({"rule": "api", "key": "a"}))
                self.assertEqual(r.status, 404, path)
                r = s.request("GET", path)
                self.assertEqual(r.status, 404, path)


class AdminListen(unittest.TestCase):
    """admin.listen: the admin endpoints on a listener of their own, and
    only there; a warning when they face a non-loopback address."""

    def admin_on(self, host):
        """A config with admin.listen on host and a free port, chosen
        again at each start attempt (a port taken meanwhile fails one);
        the port is self.admin_port."""
        def cfg():
            self.admin_port = harness.free_port()
            return ('admin: {token: "%s", listen: "%s:%d"}\n%s'
                    % (TOKEN, host, self.admin_port, RULES))
        return cfg

    def test_admin_endpoints_only_on_their_listener(self):
        with Sluice(self.admin_on("127.0.0.1")) as s:
            port = self.admin_port
            harness.wait_for_port(port, proc=s)
            body = json.dumps({"rule": "api", "key": "lp"})
            take(s, {"rule": "api", "key": "lp"})
            r = s.request("POST", "/v1/reset", AUTH, body)
            self.assertEqual(r.status, 404)
            self.assertIn("admin.listen", r.json()["message"])
            r = harness.request(port, "POST", "/v1/reset", AUTH, body)
            self.assertEqual((r.status, r.json()), (200, {"status": "reset"}))
            r = harness.request(port, "POST", "/v1/reset", {}, body)
            self.assertEqual(r.status, 401)
            # the admin listener serves nothing else
            for path in ("/v1/check", "/metrics", "/healthz"):
                r = harness.request(port, "GET", path)
                self.assertEqual(r.status, 404, path)
            self.assertEqual(s.request("GET", "/healthz").status, 200)
            self.assertIn("admin endpoints listening on 127.0.0.1:%d"
                          % port, s.log())
            self.assertNotIn("not a loopback address", s.log())

    def test_warning_when_admin_faces_a_network(self):
        # admin.listen on every address (traffic stays on loopback)
        with Sluice(self.admin_on("0.0.0.0")) as s:
            port = self.admin_port
            self.assertTrue(harness.wait_until(
                lambda: "not a loopback address" in s.log(), 20))
            self.assertIn("served on 0.0.0.0:%d" % port, s.log())
        # no admin.listen: the admin endpoints follow listen
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            def argv(port):  # its config names the port chosen
                f.seek(0)
                f.truncate()
                f.write('listen: "0.0.0.0:%d"\nadmin: {token: "%s"}\n%s'
                        % (port, TOKEN, RULES))
                f.flush()
                return [harness.SLUICE, "serve", "-c", f.name]
            with harness.Server(argv, ready=lambda p, port: (
                    harness.LISTENING.replace("127.0.0.1", "0.0.0.0")
                    % port in p.log())) as p:
                main = p.port
                self.assertTrue(harness.wait_until(
                    lambda: "served on 0.0.0.0:%d" % main in p.log(), 20))
        # loopback: no warning
        with Sluice('admin: {token: "%s"}\n%s' % (TOKEN, RULES)) as s:
            self.assertEqual(s.request("GET", "/healthz").status, 200)
            self.assertNotIn("not a loopback address", s.log())

    def test_bad_admin_listen_names_the_line(self):
        path, p = harness.check_config(
            'admin:\n  token: "%s"\n  listen: "nowhere"\n' % TOKEN)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(path + ":3: admin.listen", p.stderr)


class Behaviour:
    """The same assertions on each store (store() gives its YAML)."""

    def start(self, admin='{token: "%s"}' % TOKEN):
        s = Sluice("store: %s\nadmin: %s\n%s" % (self.store(), admin,
                                                  RULES))
        # A store not yet reachable would fail open and spoil the counts.
        if not harness.wait_until(
                lambda: s.request("GET", "/readyz").status == 200, 20):
            s.stop()
            self.fail("not ready")
        return s

    def post(self, s, path, body, headers=AUTH):
        return s.request("POST", path, headers, json.dumps(body))

    def test_token_is_required_and_checked(self):
        with self.start() as s:
            body = {"rule": "api", "key": "a"}
            for headers in ({}, {"Authorization": "Bearer wrong"},
                            {"Authorization": "Bearer " + TOKEN + "x"},
                            {"Authorization": "Basic " + TOKEN},
                            {"Authorization": TOKEN}):
                r = self.post(s, "/v1/reset", body, headers)
                self.assertEqual(r.status, 401, headers)
                self.assertEqual(r.header("www-authenticate"), "Bearer")
            take(s, body)
            self.assertEqual(self.post(s, "/v1/reset", body).status, 200)
            r = s.request("GET", "/v1/reset", AUTH)
            self.assertEqual(r.status, 405)

    def test_token_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".token") as f:
            f.write(TOKEN + "\n")
            f.flush()
            with self.start("{token_file: %s}" % f.name) as s:
                take(s, {"rule": "api", "key": "a"})
                r = self.post(s, "/v1/reset", {"rule": "api", "key": "a"})
                self.assertEqual(r.status, 200)
                r = self.post(s, "/v1/reset", {"rule": "api", "key": "a"},
                              {"Authorization": "Bearer x"})
                self.assertEqual(r.status, 401)

    def test_reset_fills_every_limit(self):
        with self.start() as s:
            body = {"rule": "api", "key": "alice"}
            self.assertEqual(drain(s, body), 3)
            other = {"rule": "api", "key": "bob"}
            self.assertEqual(drain(s, other), 3)
            r = self.post(s, "/v1/reset", body)
            self.assertEqual((r.status, r.json()), (200, {"status": "reset"}))
            # Both limits full again (the 3/day one decided before).
            self.assertEqual(drain(s, body), 3)
            # Another key is untouched.
            self.assertEqual(take(s, other).status, 429)
            # Each action is logged; a key cannot forge a log line.
            forged = {"rule": "api", "key": "x\nERROR forged"}
            self.assertEqual(self.post(s, "/v1/reset", forged).status, 404)
            log = s.log()
            self.assertIn('admin: reset of rule "api" key "alice"', log)
            self.assertIn('key "x?ERROR forged"', log)
            self.assertNotIn("\nERROR forged", log)

    def test_reset_covers_every_tier(self):
        with self.start() as s:
            free = {"rule": "tiered", "key": "t"}
            paid = {"rule": "tiered", "key": "t", "tier": "paid"}
            self.assertEqual(drain(s, free), 2)
            self.assertEqual(drain(s, paid), 4)
            self.assertEqual(
                self.post(s, "/v1/reset", {"rule": "tiered",
                                           "key": "t"}).status, 200)
            self.assertEqual(drain(s, free), 2)
            self.assertEqual(drain(s, paid), 4)

    def test_refund_gives_back_never_beyond_full(self):
        with self.start() as s:
            body = {"rule": "api", "key": "carol"}
            self.assertEqual(drain(s, body), 3)
            r = self.post(s, "/v1/refund", dict(body, cost=2))
            self.assertEqual((r.status, r.json()),
                             (200, {"status": "refunded"}))
            self.assertEqual(remaining(s, body), 2)
            r = self.post(s, "/v1/refund", dict(body, cost=1000))
            self.assertEqual(r.status, 200)
            # Full, not more: 3 (the smaller limit), then refused.
            self.assertEqual(drain(s, body), 3)
            # The default cost is the rule's (1).
            self.assertEqual(self.post(s, "/v1/refund", body).status, 200)
            self.assertEqual(remaining(s, body), 1)

    def test_refund_of_a_tier(self):
        with self.start() as s:
            paid = {"rule": "tiered", "key": "u", "tier": "paid"}
            self.assertEqual(drain(s, paid), 4)
            r = self.post(s, "/v1/refund", dict(paid, cost=1))
            self.assertEqual(r.status, 200)
            self.assertEqual(remaining(s, paid), 1)

    def test_ad_hoc_buckets(self):
        with self.start() as s:
            body = {"key": "job", "capacity": 4, "rate": "1/h"}
            self.assertEqual(drain(s, body), 4)
            self.assertEqual(self.post(s, "/v1/refund",
                                       dict(body, cost=3)).status, 200)
            self.assertEqual(remaining(s, body), 3)
            self.assertEqual(self.post(s, "/v1/reset", body).status, 200)
            self.assertEqual(remaining(s, body), 4)
            # The longest key a caller may send (hashed in the store).
            long = {"key": "z" * 400, "capacity": 2, "rate": "1/h"}
            self.assertEqual(drain(s, long), 2)
            self.assertEqual(self.post(s, "/v1/reset", long).status, 200)
            self.assertEqual(remaining(s, long), 2)
            # The rule "api" with the same key is another bucket.
            self.assertEqual(remaining(s, {"rule": "api", "key": "job"}), 3)

    def test_set_leaves_the_tokens_asked(self):
        """/v1/set: the key's buckets hold `remaining` tokens, whatever
        they held -- a full one (no state) too, a drained one, the
        capacity or more is full; and a reservation then waits."""
        with self.start() as s:
            body = {"rule": "api", "key": "sam"}
            r = self.post(s, "/v1/set", dict(body, remaining=1))
            self.assertEqual((r.status, r.json()), (200, {"status": "set"}))
            self.assertEqual(drain(s, body), 1)
            r = self.post(s, "/v1/set", dict(body, remaining=2))
            self.assertEqual(r.status, 200)
            self.assertEqual(remaining(s, body), 2)
            self.assertEqual(self.post(s, "/v1/set",
                                       dict(body, remaining=99)).status, 200)
            # Full: the smaller limit's 3.
            self.assertEqual(drain(s, body), 3)
            adhoc = {"key": "set-job", "capacity": 4, "rate": "1/h"}
            self.assertEqual(self.post(s, "/v1/set",
                                       dict(adhoc, remaining=0)).status, 200)
            r = take(s, dict(adhoc, max_wait_ms=3600000))
            self.assertEqual(r.status, 200)
            # One token an hour: an hour to wait.
            self.assertTrue(3590000 < r.json()["wait_ms"] <= 3600000,
                            r.json())
            for bad in ({"remaining": -1}, {"remaining": "2"}, {},
                        {"cost": 1, "remaining": 1}):
                r = self.post(s, "/v1/set", dict(body, **bad))
                self.assertEqual(r.status, 400, bad)
            r = self.post(s, "/v1/set", dict(body, remaining=1),
                          headers={})
            self.assertEqual(r.status, 401)

    def test_a_reservation_is_refunded_only_while_nothing_followed_it(self):
        """/v1/take with max_wait_ms answers "state"; /v1/refund with
        "if_state" gives the reservation back only while the buckets still
        hold it, else 409 not_refunded and nothing changes.  How a client
        would get around the limit: reserve, let a later turn be given,
        then give its own back -- an unconditional refund would let one
        more request into that later turn's interval."""
        with self.start() as s:
            job = {"key": "w", "capacity": 1, "rate": "1/h"}
            r = take(s, dict(job, max_wait_ms=0))
            self.assertEqual(r.status, 200)
            self.assertRegex(r.json()["state"], r"^[0-9]+$")
            b = take(s, dict(job, max_wait_ms=7200000)).json()
            c = take(s, dict(job, max_wait_ms=10800000)).json()
            self.assertTrue(3590000 < b["wait_ms"] <= 3600000, b)
            self.assertTrue(7190000 < c["wait_ms"] <= 7200000, c)
            # b gives up after c was given the next turn: nothing back.
            r = self.post(s, "/v1/refund", dict(job, if_state=b["state"]))
            self.assertEqual(r.status, 409, r.body)
            self.assertEqual(r.json()["error"], "not_refunded")
            self.assertIn("conditional refund of ad-hoc key", s.log())
            # The limit holds: nobody else gets a turn within two hours.
            passed = sum(take(s, dict(job, max_wait_ms=7200000)).status
                         == 200 for _ in range(5))
            self.assertEqual(passed, 0)
            # A refused reservation answers no state.
            self.assertNotIn("state", take(s, dict(job, max_wait_ms=1))
                             .json())
            # c is last in line: given back; its state is then gone.
            r = self.post(s, "/v1/refund", dict(job, if_state=c["state"]))
            self.assertEqual((r.status, r.json()),
                             (200, {"status": "refunded"}))
            r = self.post(s, "/v1/refund", dict(job, if_state=c["state"]))
            self.assertEqual(r.status, 409)
            # c's turn is the next reservation's.
            d = take(s, dict(job, max_wait_ms=7200000))
            self.assertEqual(d.status, 200)
            self.assertTrue(7190000 < d.json()["wait_ms"] <= 7200000)
            # A rule's two limits: one state each, both must still hold.
            rule = {"rule": "api", "key": "wa"}
            r = take(s, dict(rule, max_wait_ms=0)).json()
            self.assertRegex(r["state"], r"^[0-9]+\.[0-9]+$")
            self.assertEqual(self.post(s, "/v1/refund",
                                       dict(rule, if_state=r["state"])
                                       ).status, 200)
            self.assertEqual(remaining(s, rule), 3)
            r = take(s, dict(rule, max_wait_ms=0)).json()
            self.assertEqual(take(s, rule).status, 200)  # a take after it
            self.assertEqual(self.post(s, "/v1/refund",
                                       dict(rule, if_state=r["state"])
                                       ).status, 409)
            self.assertEqual(remaining(s, rule), 1)
            # A state that is no state of these buckets: 400.
            for bad in ("x", "1.2", "", " 1", "-1", 5,
                        "99999999999999999999"):
                r = self.post(s, "/v1/refund", dict(job, if_state=bad))
                self.assertEqual(r.status, 400, bad)
                self.assertEqual(r.json()["field"], "if_state")
            r = self.post(s, "/v1/reset", dict(job, if_state="1"))
            self.assertEqual(r.status, 400)

    def test_a_key_without_state_is_not_found(self):
        """Nothing to reset or refund (every bucket full, the same as
        none): 404 not_found, and nothing changes."""
        with self.start() as s:
            for path in ("/v1/reset", "/v1/refund"):
                for body in ({"rule": "api", "key": "nobody"},
                             {"rule": "tiered", "key": "nobody"},
                             {"key": "nobody", "capacity": 2,
                              "rate": "1/h"}):
                    r = self.post(s, path, body)
                    self.assertEqual(r.status, 404, (path, body))
                    self.assertEqual(r.json()["status"], "not_found")
            # One drained limit of one tier is enough to be found.
            take(s, {"rule": "tiered", "key": "some", "tier": "paid"})
            r = self.post(s, "/v1/reset", {"rule": "tiered", "key": "some"})
            self.assertEqual((r.status, r.json()), (200, {"status": "reset"}))
            self.assertIn("no bucket holds state", s.log())

    def test_composite_identities_are_one_bucket_everywhere(self):
        """The documented form of a composite identity (parts joined by
        0x1f) reaches the bucket /v1/check charges, from /v1/take and from
        the admin endpoints."""
        with self.start() as s:
            hdrs = {"x-org": "acme", "x-member": "ann"}
            ident = {"rule": "pair", "key": "acme\x1fann"}

            def check():
                return s.request("GET", "/v1/check/pair", hdrs).status
            self.assertEqual([check() for _ in range(3)], [200, 200, 429])
            self.assertEqual(remaining(s, ident), 0)
            self.assertEqual(take(s, ident).status, 429)
            r = self.post(s, "/v1/reset", ident)
            self.assertEqual((r.status, r.json()), (200, {"status": "reset"}))
            self.assertEqual(check(), 200)
            self.assertEqual(take(s, ident).status, 200)
            self.assertEqual(check(), 429)
            self.assertEqual(self.post(s, "/v1/refund", ident).status, 200)
            self.assertEqual(check(), 200)

    def test_bad_bodies_name_the_field(self):
        with self.start() as s:
            cases = [
                ("/v1/reset", "{", "body"),
                ("/v1/reset", '{"rule": "api"}', "key"),
                ("/v1/reset", '{"rule": "nope", "key": "k"}', "rule"),
                ("/v1/reset", '{"rule": "api", "key": "k", "cost": 1}',
                 "cost"),
                ("/v1/reset", '{"rule": "api", "key": "k", "capacity": 1}',
                 "capacity"),
                ("/v1/refund", '{"rule": "api", "key": "k", "cots": 1}',
                 "cots"),
                ("/v1/refund", '{"rule": "api", "key": "k", "cost": -1}',
                 "cost"),
                ("/v1/refund", '{"key": "k", "rate": "1/s"}', "capacity"),
                ("/v1/refund", '{"key": "k", "capacity": 2}', "rate"),
                ("/v1/refund", '{"rule": "api", "key": "k", "tier": "x"}',
                 "tier"),
            ]
            for path, body, field in cases:
                r = s.request("POST", path, AUTH, body)
                self.assertEqual(r.status, 400, body)
                self.assertEqual(r.json()["field"], field, body)


class MemoryStore(Behaviour, unittest.TestCase):

    def store(self):
        return "memory"


class SharedStore(Behaviour, unittest.TestCase):
    """The shared-memory store: one file per test, removed afterwards."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-admin-shm-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def store(self):
        return "{shared: {path: %s/buckets, max_keys: 10000}}" % self.dir


class RedisStore(fixtures.ClassRedisStore, Behaviour, unittest.TestCase):
    redis_timeout_ms = 2000

    def setUp(self):
        self.redis.cli("FLUSHALL")


@unittest.skipUnless(os.path.exists(MODULE), "module not built")
class RedisModuleStore(RedisStore):
    redis_extra = ("--loadmodule", MODULE)

    def test_takes_go_through_the_module(self):
        self.redis.cli("CONFIG", "RESETSTAT")
        with self.start() as s:
            body = {"rule": "api", "key": "m"}
            self.assertEqual(drain(s, body), 3)
            self.assertEqual(self.post(s, "/v1/reset", body).status, 200)
            self.assertEqual(drain(s, body), 3)
        self.assertIn("cmdstat_sluice.take",
                      self.redis.cli("INFO", "commandstats").lower())


class RedisClusterStore(Behaviour, unittest.TestCase):
    """Three masters: keys (and so resets and refunds) over all of them."""

    @classmethod
    def setUpClass(cls):
        cls.nodes = []
        try:
            cls.nodes = [RedisServer(cluster=True) for _ in range(3)]
            p = subprocess.run(["redis-cli", "--cluster", "create"] +
                               [n.seed() for n in cls.nodes] +
                               ["--cluster-yes"], capture_output=True,
                               text=True, timeout=60)
            if p.returncode != 0:
                raise RuntimeError(p.stdout + p.stderr)
            for n in cls.nodes:
                if not harness.wait_until(
                        lambda: "cluster_state:ok" in n.cli("CLUSTER",
                                                            "INFO"), 30):
                    raise RuntimeError("cluster not ok")
        except BaseException:
            for n in cls.nodes:
                n.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        for n in cls.nodes:
            n.stop()

    def setUp(self):
        for n in self.nodes:
            n.cli("FLUSHALL")

    def store(self):
        return "{redis_cluster: {seeds: [%s], timeout_ms: 2000}}" % ", ".join(
            '"%s"' % n.seed() for n in self.nodes)


if __name__ == "__main__":
    unittest.main(verbosity=2)
