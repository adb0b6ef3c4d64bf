#!/usr/bin/env python3
"""Envoy's rate limit service as a Node service calls it: @grpc/grpc-js
with @grpc/proto-loader (from npm, `npm ci` in grpc_node/) loading sluice's
proto/, on the memory store, Redis and Redis Cluster.

grpc_node/client.js makes the calls in order, then a burst in parallel on
one channel, then health checks, and prints what it got as JSON; with
"tls" in its plan, over TLS (TlsTest: the server certificate, mutual TLS
and the client SAN allow-list with good, wrong and no certificates).
"""
import json
import os
import shutil
import subprocess
import sys
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import harness  # noqa: E402
from grpc_harness import GrpcSluice, envoy_dir  # noqa: E402

UNAVAILABLE = 14
NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "grpc_node")

API = """
domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: day, requests_per_unit: 5}
"""


def setUpModule():
    if not shutil.which("node") or not shutil.which("npm"):
        raise unittest.SkipTest("node and npm are needed")
    p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund",
                        "--loglevel=error"], cwd=NODE_DIR,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("npm ci: %s%s" % (p.stdout, p.stderr))


def run_client(s, plan):
    plan = dict(plan, address=s.grpc_target,
                proto=os.path.join(harness.SRC, "proto"))
    p = subprocess.run(["node", os.path.join(NODE_DIR, "client.js"),
                        json.dumps(plan)], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        raise AssertionError("client.js: %s%s" % (p.stdout, p.stderr))
    return json.loads(p.stdout)


def req(user, **kw):
    return dict({"domain": "api", "descriptors": [
        {"entries": [{"key": "user", "value": user}]}]}, **kw)


class NodeCalls:
    def serve(self):
        d = envoy_dir({"api.yaml": API})
        s = GrpcSluice("store: %s\nenvoy: {config_dir: %s}\n"
                       % (self.store(), d))
        self.addCleanup(s.stop)
        return s

    def test_should_rate_limit_and_health(self):
        s = self.serve()
        u = uuid.uuid4().hex
        out = run_client(s, {
            "calls": [req(u), req(u, hits_addend=3), req(u),
                      {"domain": "api", "descriptors": [
                          {"entries": [{"key": "user", "value": u + "x"}],
                           "limit": {"requests_per_unit": 10,
                                     "unit": "HOUR"}},
                          {"entries": [{"key": "other", "value": "1"}]}]},
                      {"domain": "", "descriptors": []}],
            "health": ["", "ratelimit", "nope"]})
        c = out["calls"]
        self.assertEqual(c[0]["overall_code"], "OK")
        st = c[0]["statuses"][0]
        self.assertEqual(st["current_limit"]["name"], "per-user")
        self.assertEqual(st["current_limit"]["requests_per_unit"], 5)
        self.assertEqual(st["current_limit"]["unit"], "DAY")
        self.assertEqual(st["limit_remaining"], 4)
        self.assertGreater(int(st["duration_until_reset"]["seconds"]) * 1000
                           + st["duration_until_reset"]["nanos"] // 10**6,
                           0)
        self.assertEqual(c[1]["statuses"][0]["limit_remaining"], 1)
        self.assertEqual(c[2]["statuses"][0]["limit_remaining"], 0)
        self.assertEqual(c[2]["overall_code"], "OK")
        self.assertEqual([s["current_limit"] and
                          s["current_limit"]["requests_per_unit"]
                          for s in c[3]["statuses"]], [10, None])
        self.assertEqual(c[4]["error"], 3)  # INVALID_ARGUMENT
        h = out["health"]
        self.assertEqual([x.get("status") for x in h[:2]],
                         ["SERVING", "SERVING"])
        self.assertEqual(h[2]["error"], 5)  # NOT_FOUND

    def test_a_parallel_burst_on_one_key_is_exact(self):
        s = self.serve()
        u = uuid.uuid4().hex
        out = run_client(s, {"calls": [req(u)], "parallel": 50})
        codes = [r["overall_code"] for r in out["calls"] + out["parallel"]]
        self.assertEqual(codes.count("OK"), 5, codes)
        self.assertEqual(codes.count("OVER_LIMIT"), 46, codes)


class TlsTest(fixtures.ClassTls, unittest.TestCase):
    """grpc.tls as grpc-js clients see it: the server certificate, mutual
    TLS and the client SAN allow-list, with good, wrong and no client
    certificates (test_grpc_transport.GrpcTlsTest has grpcio's)."""

    def serve(self, tls):
        d = envoy_dir({"api.yaml": API})
        s = GrpcSluice("envoy: {config_dir: %s}\ngrpc: {tls: %s}\n"
                       % (d, tls))
        self.addCleanup(s.stop)
        return s

    def call(self, s, ca=None, cert=None, key=None):
        """One ShouldRateLimit from a new grpc-js client: its overall
        code, or the gRPC status code it failed with."""
        tls = {"ca": ca or self.tls.ca}
        if cert:
            tls.update(cert=cert, key=key)
        out = run_client(s, {"calls": [req(uuid.uuid4().hex)], "tls": tls})
        c = out["calls"][0]
        return c.get("overall_code", c.get("error"))

    def base(self):
        return "cert_file: %s, key_file: %s" % (self.tls.server_cert,
                                                self.tls.server_key)

    def test_server_certificate_only(self):
        s = self.serve("{%s}" % self.base())
        self.assertEqual(self.call(s), "OK")
        # A client that trusts another CA does not get through.
        self.assertEqual(self.call(s, ca=self.tls.other_ca), UNAVAILABLE)
        # Nor does a cleartext one.
        out = run_client(s, {"calls": [req("x")]})
        self.assertEqual(out["calls"][0].get("error"), UNAVAILABLE)

    def test_mutual_tls_good_wrong_and_no_client_certificate(self):
        s = self.serve("{%s, client_ca_file: %s}" % (self.base(),
                                                      self.tls.ca))
        t = self.tls
        self.assertEqual(self.call(s, cert=t.client_cert,
                                   key=t.client_key), "OK")
        self.assertEqual(self.call(s), UNAVAILABLE)
        self.assertEqual(self.call(s, cert=t.other_server_cert,
                                   key=t.other_server_key), UNAVAILABLE)
        self.assertTrue(harness.wait_until(
            lambda: "TLS handshake with 127.0.0.1:" in s.log(), 20))

    def test_client_sans_allow_only_the_names_listed(self):
        t = self.tls
        s = self.serve("{%s, client_ca_file: %s, client_sans: [localhost]}"
                       % (self.base(), t.ca))
        # The server certificate names localhost: let in; the client
        # certificate, of the right CA, names nothing: refused.
        self.assertEqual(self.call(s, cert=t.server_cert,
                                   key=t.server_key), "OK")
        self.assertEqual(self.call(s, cert=t.client_cert,
                                   key=t.client_key), UNAVAILABLE)
        self.assertTrue(harness.wait_until(
            lambda: "names none of grpc.tls.client_sans" in s.log(), 20))


class MemoryTest(NodeCalls, unittest.TestCase):
    def store(self):
        return "memory"


class RedisTest(fixtures.ClassRedisStore, NodeCalls, unittest.TestCase):
    pass


class RedisClusterTest(fixtures.ClassRedisClusterStore, NodeCalls,
                       unittest.TestCase):
    pass


if __name__ == "__main__":
    unittest.main(verbosity=2)
