#!/usr/bin/env python3
"""envoy.response_dynamic_metadata (envoyproxy/ratelimit's
RESPONSE_DYNAMIC_METADATA): RateLimitResponse.dynamic_metadata, a
google.protobuf.Struct, holds what envoyproxy/ratelimit's
ratelimitToMetadata() puts there -- the domain, each descriptor's entries
as "KEY=VALUE", its limit override and hits_addend, the request's
hits_addend, and the config `metadata:` of the descriptors that passed,
merged (the first descriptor's value wins, mappings merge).

One table, run through gRPC (grpcio, the Struct decoded) and POST /json
(its "dynamicMetadata"), on the memory store and on Redis; off by default
no field at all.  The metadata a request gets is the config's: one that
is over gives none, an unlimited or a replaced limit none, an override
none, and nothing in a request makes its way into "metadata".
"""
import json
import os
import subprocess
import sys
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

import fixtures  # noqa: E402
import harness  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from grpc_harness import GrpcSluice, envoy_dir, protos, request  # noqa: E402

HOUR = 3

API = """
domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: day, requests_per_unit: 5}
    metadata:
      service: {name: users, tier: 1}
      tags: [a, "b", 3.5]
      quoted: "true"
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      service: {name: login, owner: team-x, nested: {deep: [null, true]}}
      flag: true
  - key: free
    rate_limit: {unlimited: true}
    metadata: {unlimited_meta: 1}
  - key: old
    rate_limit: {name: old, unit: hour, requests_per_unit: 100}
    metadata: {replaced_meta: 1}
  - key: new
    rate_limit: {unit: hour, requests_per_unit: 100, replaces: [{name: old}]}
    metadata: {replacer_meta: 1}
  - key: other
    metadata: {no_limit_here: 1}
    descriptors:
      - key: sub
        rate_limit: {unit: hour, requests_per_unit: 7}
"""


def uniq():
    return uuid.uuid4().hex[:12]


class Table:
    """The cases, through a front end (call()) on a store (store())."""

    def serve(self, on=True):
        d = envoy_dir({"api.yaml": API})
        s = GrpcSluice("store: %s\nenvoy: {config_dir: %s%s}\n"
                       % (self.store(), d,
                          ", response_dynamic_metadata: true" if on else ""))
        self.addCleanup(s.stop)
        return s

    def setUp(self):
        protos()
        self.s = self.serve()

    def test_the_fields_envoyproxy_ratelimit_puts_there(self):
        u = uniq()
        code, md = self.call(self.s, "api", [
            {"entries": [("user", u)]},
            {"entries": [("path", "/login")], "hits": 2},
            {"entries": [("other", "1")], "limit": (10, HOUR)}],
            hits_addend=3)
        self.assertEqual(code, "OK")
        self.assertEqual(md, {
            "domain": "api",
            "descriptors": [
                {"entries": ["user=" + u]},
                {"entries": ["path=/login"], "hitsAddend": 2},
                {"entries": ["other=1"],
                 "limit": "requests_per_unit:10 unit:HOUR"}],
            "hitsAddend": 3,
            # user's first: its service.name wins, the mappings merge.
            "metadata": {
                "service": {"name": "users", "tier": 1, "owner": "team-x",
                            "nested": {"deep": [None, True]}},
                "tags": ["a", "b", 3.5], "quoted": "true", "flag": True}})

    def test_a_descriptor_that_is_over_passes_no_metadata(self):
        u = uniq()
        code, md = self.call(self.s, "api",
                             [{"entries": [("path", "/login")], "hits": 2}])
        self.assertEqual(code, "OK")
        self.assertEqual(md["metadata"]["flag"], True)
        code, md = self.call(self.s, "api", [{"entries": [("user", u)]},
                                             {"entries": [("path",
                                                           "/login")]}])
        self.assertEqual(code, "OVER_LIMIT")
        # user's passed (not charged: all or nothing), path's is over.
        self.assertEqual(md["metadata"],
                         {"service": {"name": "users", "tier": 1},
                          "tags": ["a", "b", 3.5], "quoted": "true"})
        self.assertEqual(md["descriptors"],
                         [{"entries": ["user=" + u]},
                          {"entries": ["path=/login"]}])

    def test_only_a_limit_that_decided_gives_its_metadata(self):
        # Unlimited, replaced, no match, a level without a limit, an
        # override of a configured key: no metadata; the replacer's is.
        code, md = self.call(self.s, "api", [
            {"entries": [("free", "x")]}, {"entries": [("old", "x")]},
            {"entries": [("new", "x")]}, {"entries": [("nobody", "x")]},
            {"entries": [("other", "x")]},
            {"entries": [("user", uniq())], "limit": (10, HOUR)}])
        self.assertEqual(code, "OK")
        self.assertEqual(md["metadata"], {"replacer_meta": 1})
        self.assertNotIn("hitsAddend", md)
        code, md = self.call(self.s, "api", [{"entries": [("free", "x")]}])
        self.assertNotIn("metadata", md)
        self.assertEqual(md["domain"], "api")

    def test_a_request_cannot_put_anything_into_metadata(self):
        # Entries named like the metadata's keys, or holding '=', stay
        # entries; "metadata" is the config's alone.
        code, md = self.call(self.s, "api", [
            {"entries": [("metadata", "flag=false")]},
            {"entries": [("other", "1"), ("sub", "x=y")]}])
        self.assertEqual(code, "OK")
        self.assertEqual(md["descriptors"][0]["entries"],
                         ["metadata=flag=false"])
        self.assertEqual(md["descriptors"][1]["entries"],
                         ["other=1", "sub=x=y"])
        self.assertNotIn("metadata", md)

    def test_an_unknown_domain_still_answers_the_request_part(self):
        code, md = self.call(self.s, "nobody", [{"entries": [("a", "b")]}])
        self.assertEqual(code, "OK")
        self.assertEqual(md, {"domain": "nobody",
                              "descriptors": [{"entries": ["a=b"]}]})

    def test_off_by_default_no_field(self):
        s = self.serve(on=False)
        code, md = self.call(s, "api", [{"entries": [("user", uniq())]}])
        self.assertEqual(code, "OK")
        self.assertIsNone(md)


class Grpc:
    def call(self, s, domain, descriptors, hits_addend=0):
        ch = s.channel()
        self.addCleanup(ch.close)
        r = s.rls(ch).ShouldRateLimit(
            request(domain, *descriptors, hits_addend=hits_addend),
            timeout=30)
        code = {1: "OK", 2: "OVER_LIMIT"}[r.overall_code]
        if not r.HasField("dynamic_metadata"):
            return code, None
        return code, json_format.MessageToDict(r.dynamic_metadata)


class Json:
    def call(self, s, domain, descriptors, hits_addend=0):
        body = {"domain": domain, "descriptors": []}
        if hits_addend:
            body["hits_addend"] = hits_addend
        for d in descriptors:
            jd = {"entries": [{"key": k, "value": v}
                              for k, v in d["entries"]]}
            if "limit" in d:
                jd["limit"] = {"requests_per_unit": d["limit"][0],
                               "unit": "HOUR"}
            if "hits" in d:
                jd["hits_addend"] = d["hits"]
            body["descriptors"].append(jd)
        r = s.request("POST", "/json", {"Content-Type": "application/json"},
                      json.dumps(body))
        self.assertIn(r.status, (200, 429), r)
        j = r.json()
        return j["overallCode"], j.get("dynamicMetadata")


class Memory:
    def store(self):
        return "memory"


class Redis(fixtures.ClassRedis):
    def store(self):
        # Each server its own keys: the cases reuse /login's bucket.
        return ('{redis: {url: "%s", timeout_ms: 3000, key_prefix: "%s:"}}'
                % (self.redis.url(), uniq()))


class GrpcMemoryTest(Grpc, Memory, Table, unittest.TestCase):
    pass


class JsonMemoryTest(Json, Memory, Table, unittest.TestCase):
    pass


class GrpcRedisTest(Grpc, Redis, Table, unittest.TestCase):
    pass


class JsonRedisTest(Json, Redis, Table, unittest.TestCase):
    pass


class BadMetadata(unittest.TestCase):
    def check(self, text):
        d = envoy_dir({"api.yaml": text})
        p = subprocess.run([harness.SLUICE, "check-config", d],
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def test_metadata_that_is_not_a_mapping_names_file_and_line(self):
        rc, out = self.check("domain: a\ndescriptors:\n  - key: k\n"
                             "    rate_limit: {unit: hour, "
                             "requests_per_unit: 1}\n"
                             "    metadata: [1, 2]\n")
        self.assertNotEqual(rc, 0)
        self.assertIn("api.yaml:5:", out)
        self.assertIn("metadata", out)

    def test_a_key_given_twice_names_file_and_line(self):
        rc, out = self.check("domain: a\ndescriptors:\n  - key: k\n"
                             "    metadata:\n      x: 1\n      y: {z: 1,"
                             " z: 2}\n")
        self.assertNotEqual(rc, 0)
        self.assertIn("api.yaml:6:", out)
        self.assertIn("'z' given twice", out)

    def test_a_reload_takes_changed_metadata(self):
        d = envoy_dir({"api.yaml": API})
        s = GrpcSluice("envoy: {config_dir: %s, watch_ms: 0, "
                       "response_dynamic_metadata: true}\n" % d)
        self.addCleanup(s.stop)
        with open(os.path.join(d, "api.yaml"), "w") as f:
            f.write(API.replace("flag: true", "flag: changed"))
        self.assertIn("reloaded", s.reload())
        _, md = Grpc.call(self, s, "api",
                          [{"entries": [("path", "/login")]}])
        self.assertEqual(md["metadata"]["flag"], "changed")


if __name__ == "__main__":
    unittest.main(verbosity=2)
