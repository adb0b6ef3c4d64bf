#!/usr/bin/env python3
"""Envoy's rate limit service as a Node service calls it: @grpc/grpc-js
with @grpc/proto-loader (from npm, `npm ci` in grpc_node/) loading sluice's
proto/, on the memory store, Redis and Redis Cluster.

grpc_node/client.js makes the calls in order, then a burst in parallel on
one channel, then health checks, and prints what it got as JSON.
"""
import json
import os
import shutil
import subprocess
import sys
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from grpc_harness import GrpcSluice, envoy_dir  # noqa: E402
from harness import RedisServer  # noqa: E402

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


class MemoryTest(NodeCalls, unittest.TestCase):
    def store(self):
        return "memory"


class RedisTest(NodeCalls, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis = RedisServer()

    @classmethod
    def tearDownClass(cls):
        cls.redis.stop()

    def store(self):
        return '{redis: {url: "%s", timeout_ms: 3000}}' % self.redis.url()


class RedisClusterTest(NodeCalls, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from test_redis_cluster_serve import Cluster
        cls.cluster = Cluster()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def store(self):
        return ("{redis_cluster: {seeds: [%s], timeout_ms: 3000}}"
                % self.cluster.seeds())


if __name__ == "__main__":
    unittest.main(verbosity=2)
