#!/usr/bin/env python3
"""envoy.xds: the rate limit config from an xDS control plane, as Envoy
Gateway drives envoyproxy/ratelimit (CONFIG_TYPE=GRPC_XDS_SOTW).

The control plane (xds_control_plane.py) is written with grpcio
(Debian's python3-grpcio): an AggregatedDiscoveryService that pushes
DiscoveryResponses of
type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig to every
open stream and records every DiscoveryRequest sluice sends.

- Served, changed (on memory and on Redis): the limits ShouldRateLimit
  and POST /json enforce follow each version; each one is ACKed
  (version_info, response_nonce, node id); /readyz, /healthcheck and gRPC
  health say not ready until the first config; a changed limit keeps
  what a key has used (limit carry, as a file reload); SIGHUP keeps the
  control plane's domains; two instances on one Redis share a limit.
- Broken (a bad unit, a domain twice, descriptors nested too deep, a
  resource of another type, bytes that are no protobuf): NACKed with
  error_detail naming the problem and the last good version_info; the
  running config is still enforced.
- A response over 4 MiB drops the stream (the config kept); the next
  good version is taken.
- The control plane goes away: sluice keeps enforcing the last config,
  logs the loss once however many retries fail, and when a control plane
  is back on the port, reconnects (with the last accepted version) and
  takes its config.
- mTLS to the control plane: the right client certificate is served; one
  from another CA, or a server certificate sluice's CA did not sign, is
  never served (readyz stays 503, errors counted).
- A bad envoy.xds section is refused by check-config naming FILE:LINE.
- node_metadata reaches the control plane in each request's Node; a
  reload (SIGHUP) to another control plane and node id takes its configs
  (the last accepted one served meanwhile, still ready); a broken new
  block, or TLS files that make no context, keep the running client with
  FILE:LINE in the log; a renewed client certificate is presented on the
  next connection without a reload.
- headers (gRPC metadata on the call, names lowercased) reach the control
  plane; one that refuses calls without them (UNAUTHENTICATED) never
  serves a config, is logged once however many retries it refuses,
  counted as an error, not ready; a SIGHUP with the right value is
  followed; no value is ever logged or shown; bad names and values are
  refused naming FILE:LINE (the value never quoted).
"""
import json
import os
import sys
import tempfile
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

import grpc  # noqa: E402
import fixtures  # noqa: E402
import harness  # noqa: E402
from grpc_harness import GrpcSluice, protos, request, rls_stub  # noqa: E402
from xds_control_plane import (  # noqa: E402
    TYPE_URL, SECOND, MINUTE, HOUR, rl_config, api_config, ControlPlane)

OK, OVER = 1, 2


def uniq():
    return uuid.uuid4().hex[:12]


def xds_config(port, extra_xds="", extra=""):
    return ("envoy:\n  xds: {server: \"127.0.0.1:%d\", node_id: sluice-test,"
            " cluster: rl%s}\n%s" % (port, extra_xds, extra))


class XdsBase(unittest.TestCase):
    def control_plane(self, **kw):
        cp = ControlPlane(**kw)
        self.addCleanup(cp.stop)
        return cp

    def store(self):
        return "memory"

    def serve(self, cp, extra_xds=""):
        s = GrpcSluice(xds_config(cp.port, extra_xds,
                                  "store: %s\n" % self.store()))
        self.addCleanup(s.stop)
        return s, rls_stub(self, s)[1]

    def decide(self, stub, user):
        return stub.ShouldRateLimit(request("api", [("user", user)]),
                                    timeout=30)

    def allowed(self, stub, user, n):
        """How many of n calls for user are answered OK."""
        return sum(self.decide(stub, user).overall_code == OK
                   for _ in range(n))

    def metric(self, s, name):
        return s.metrics().get(name, 0)

    def wait_metric(self, s, name, at_least, timeout=60):
        self.assertTrue(harness.wait_until(
            lambda: self.metric(s, name) >= at_least, timeout, 0.05),
            "%s stayed below %s: %s" % (name, at_least,
                                        self.metric(s, name)))


ACCEPTED = 'sluice_envoy_xds_updates_total{result="accepted"}'
REJECTED = 'sluice_envoy_xds_updates_total{result="rejected"}'
CONNECTED = "sluice_envoy_xds_connected"
ERRORS = "sluice_envoy_xds_errors_total"
XDS_RELOADS = 'sluice_config_reloads_total{result="ok",trigger="xds"}'


class Served:
    """Run on each store (below)."""

    def test_served_acked_and_changed_live(self):
        cp = self.control_plane()
        s, stub = self.serve(cp)
        # No config yet: not ready.
        r = s.request("GET", "/readyz")
        self.assertEqual(r.status, 503)
        self.assertIn(b"config_pending", r.body)
        # Nor healthy to Envoy Gateway's probe or gRPC health: no Envoy
        # is sent to a service that knows no limit yet.
        self.assertEqual(s.request("GET", "/healthcheck").status, 500)
        hp = protos().health_pb2
        health = s.health()
        self.assertEqual(health.Check(hp.HealthCheckRequest(service=""),
                                      timeout=30).status,
                         hp.HealthCheckResponse.NOT_SERVING)
        n1 = cp.set("v1", [api_config(3)])
        ack = cp.reply_to(n1)
        self.assertIsNotNone(ack, "no ACK of v1")
        self.assertEqual(ack.version_info, "v1")
        self.assertFalse(ack.HasField("error_detail"))
        self.assertEqual(ack.type_url, TYPE_URL)
        self.assertEqual(ack.node.id, "sluice-test")
        self.assertEqual(ack.node.cluster, "rl")
        self.wait_metric(s, ACCEPTED, 1)
        self.assertTrue(harness.wait_until(
            lambda: s.request("GET", "/readyz").status == 200, 30))
        self.assertEqual(s.request("GET", "/healthcheck").status, 200)
        self.assertEqual(health.Check(hp.HealthCheckRequest(service=""),
                                      timeout=30).status,
                         hp.HealthCheckResponse.SERVING)
        u = uniq()
        self.assertEqual(self.allowed(stub, u, 5), 3)
        # v2: 6 a minute; a new user gets 6.
        n2 = cp.set("v2", [api_config(6)])
        ack = cp.reply_to(n2)
        self.assertEqual(ack.version_info, "v2")
        self.assertFalse(ack.HasField("error_detail"))
        self.assertTrue(harness.wait_until(
            lambda: self.metric(s, XDS_RELOADS) >= 2, 30))
        self.assertEqual(self.allowed(stub, uniq(), 8), 6)
        self.assertEqual(self.metric(s, CONNECTED), 1)
        self.assertTrue(s.wait_log('applied version "v2"'))

    def test_a_changed_limit_keeps_what_a_key_used(self):
        cp = self.control_plane()
        s, stub = self.serve(cp)
        cp.reply_to(cp.set("v1", [api_config(4)]))
        self.wait_metric(s, ACCEPTED, 1)
        u = uniq()
        self.assertEqual(self.allowed(stub, u, 3), 3)
        cp.reply_to(cp.set("v2", [api_config(10)]))
        self.wait_metric(s, ACCEPTED, 2)
        # 3 used of the new 10: 7 left, not a full bucket of 10.
        self.assertEqual(self.allowed(stub, u, 12), 7)

    def test_sighup_keeps_the_control_planes_domains(self):
        cp = self.control_plane()
        s, stub = self.serve(cp)
        cp.reply_to(cp.set("v1", [api_config(2)]))
        self.wait_metric(s, ACCEPTED, 1)
        u = uniq()
        self.assertEqual(self.allowed(stub, u, 1), 1)
        s.reload()
        self.assertEqual(
            self.metric(s, 'sluice_config_reloads_total'
                        '{result="ok",trigger="sighup"}'), 1)
        # The domain is still there, and u's use is still counted.
        self.assertEqual(self.allowed(stub, u, 3), 1)
        self.assertEqual(self.allowed(stub, uniq(), 3), 2)

    def test_the_json_endpoint_follows_the_served_config(self):
        cp = self.control_plane()
        s, stub = self.serve(cp)
        cp.reply_to(cp.set("v1", [api_config(2)]))
        self.wait_metric(s, ACCEPTED, 1)
        u = uniq()
        body = json.dumps({"domain": "api", "descriptors": [
            {"entries": [{"key": "user", "value": u}]}]})
        codes = [s.request("POST", "/json",
                           {"Content-Type": "application/json"},
                           body).status for _ in range(3)]
        self.assertEqual(codes, [200, 200, 429])
        # One bucket for both front ends: gRPC finds it spent.
        self.assertEqual(self.decide(stub, u).overall_code, OVER)

    def test_several_domains_and_nested_descriptors(self):
        cp = self.control_plane()
        s, stub = self.serve(cp)
        web = rl_config("web", "web", [
            ("plan", "free", None, [("user", None, (HOUR, 2), [])])])
        cp.reply_to(cp.set("v1", [api_config(1), web]))
        self.wait_metric(s, ACCEPTED, 1)
        u = uniq()
        req = request("web", [("plan", "free"), ("user", u)])
        codes = [stub.ShouldRateLimit(req, timeout=30).overall_code
                 for _ in range(3)]
        self.assertEqual(codes, [OK, OK, OVER])
        # A value the config does not name has no limit.
        req = request("web", [("plan", "paid"), ("user", u)])
        self.assertEqual(stub.ShouldRateLimit(req, timeout=30).overall_code,
                         OK)


class ServedMemory(Served, XdsBase):
    pass


class ServedRedis(fixtures.ClassRedisStore, Served, XdsBase):
    def test_two_instances_on_one_redis_share_the_served_limit(self):
        cp = self.control_plane()
        (a, sa), (b, sb) = self.serve(cp), self.serve(cp)
        cp.set("v1", [api_config(4)])
        self.wait_metric(a, ACCEPTED, 1)
        self.wait_metric(b, ACCEPTED, 1)
        u = uniq()
        got = sum(self.allowed(st, u, 3) for st in (sa, sb))
        self.assertEqual(got, 4)


class Broken(XdsBase):
    def setUp(self):
        self.cp = self.control_plane()
        self.s, self.stub = self.serve(self.cp)
        self.cp.reply_to(self.cp.set("good", [api_config(2)]))
        self.wait_metric(self.s, ACCEPTED, 1)

    def nack(self, configs=None, anys=None):
        nonce = self.cp.set("bad-" + uniq(), configs, anys)
        r = self.cp.reply_to(nonce)
        self.assertIsNotNone(r, "no answer to a bad config")
        self.assertTrue(r.HasField("error_detail"), "not a NACK")
        # A NACK carries the version still running.
        self.assertEqual(r.version_info, "good")
        return r.error_detail.message

    def assert_still_enforced(self):
        self.assertEqual(self.allowed(self.stub, uniq(), 4), 2)

    def test_a_bad_unit_is_nacked_and_the_old_config_kept(self):
        bad = rl_config("broken-unit", "api",
                        [("user", None, (0, 5), [])])
        msg = self.nack([bad])
        self.assertIn("xds:broken-unit", msg)
        self.assertIn("invalid rate limit unit", msg)
        self.assert_still_enforced()
        self.wait_metric(self.s, REJECTED, 1)
        self.assertTrue(self.s.wait_log("rejected version"))
        self.assertEqual(
            self.metric(self.s, 'sluice_config_reloads_total'
                        '{result="error",trigger="xds"}'), 1)

    def test_a_domain_in_two_resources_is_nacked(self):
        msg = self.nack([api_config(5, name="a"), api_config(6, name="b")])
        self.assertIn("duplicate domain 'api'", msg)
        self.assert_still_enforced()

    def test_descriptors_nested_too_deep_are_nacked(self):
        items = [("k", None, (SECOND, 1), [])]
        for _ in range(40):
            items = [("k", None, None, items)]
        msg = self.nack([rl_config("deep", "api", items)])
        self.assertIn("nested", msg)
        self.assert_still_enforced()
        # A thousand levels: refused before protobuf-c recurses.
        value = b""
        for _ in range(1000):
            inner = b"\x0a\x01k" + (b"\x22" + varint(len(value)) + value
                                    if value else b"")
            value = inner
        cfg = b"\x12\x03api\x1a" + varint(len(value)) + value
        msg = self.nack(anys=[(TYPE_URL, cfg)])
        self.assertIn("nested", msg)
        self.assert_still_enforced()

    def test_another_type_and_garbage_are_nacked(self):
        msg = self.nack(anys=[("type.googleapis.com/google.protobuf.Empty",
                               b"")])
        self.assertIn("expected " + TYPE_URL, msg)
        msg = self.nack(anys=[(TYPE_URL, b"\x1a\xff\xff\xff\x0f")])
        self.assertIn("malformed", msg)
        self.assert_still_enforced()
        # Still taking good configs after all that.
        nonce = self.cp.set("good2", [api_config(3)])
        self.assertFalse(self.cp.reply_to(nonce).HasField("error_detail"))
        self.assertEqual(self.allowed(self.stub, uniq(), 5), 3)


class Huge(XdsBase):
    def test_a_response_over_4_mib_is_refused_and_the_config_kept(self):
        cp = self.control_plane()
        s, stub = self.serve(cp)
        cp.reply_to(cp.set("v1", [api_config(2)]))
        self.wait_metric(s, ACCEPTED, 1)
        errors = self.metric(s, ERRORS)
        big = rl_config("big", "api", [("user", None, (MINUTE, 2), [])] +
                        [("k%06d" % i, "v" * 100, (SECOND, 1), [])
                         for i in range(45000)])
        self.assertGreater(big.ByteSize(), 4 << 20)
        cp.set("v2", [big])
        # The stream is dropped (grpc-go's clients do the same), not
        # read: sluice keeps v1 and tries again.
        self.wait_metric(s, ERRORS, errors + 1)
        self.assertTrue(s.wait_log("larger than the 4 MiB limit"))
        self.assertEqual(self.metric(s, ACCEPTED), 1)
        self.assertEqual(self.allowed(stub, uniq(), 3), 2)
        # A good version after it is taken on the next stream.
        cp.set("v3", [api_config(5)])
        self.wait_metric(s, ACCEPTED, 2)
        self.assertEqual(self.allowed(stub, uniq(), 6), 5)


def varint(n):
    out = b""
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


class GoesAway(XdsBase):
    def test_served_while_away_then_reconnects(self):
        cp = ControlPlane()
        self.addCleanup(lambda: cp.stop())
        s, stub = self.serve(cp)
        cp.reply_to(cp.set("v1", [api_config(2)]))
        self.wait_metric(s, ACCEPTED, 1)
        cp.stop()
        self.wait_metric(s, ERRORS, 1)
        self.assertTrue(harness.wait_until(
            lambda: self.metric(s, CONNECTED) == 0, 30))
        # Every retry fails while it is away; the loss is logged once.
        self.wait_metric(s, ERRORS, 3)
        self.assertEqual(s.log().count("trying again with backoff"), 1)
        # The last config is still enforced, and ready.
        self.assertEqual(self.allowed(stub, uniq(), 4), 2)
        self.assertEqual(s.request("GET", "/readyz").status, 200)
        # Back, with a new version: taken after the reconnect.
        cp.current = None
        cp.requests = []
        cp.restart()
        first = None
        self.assertTrue(harness.wait_until(lambda: cp.requests, 60))
        first = cp.requests[0]
        # The first request after the reconnect says what it runs.
        self.assertEqual(first.version_info, "v1")
        nonce = cp.set("v2", [api_config(5)])
        self.assertEqual(cp.reply_to(nonce).version_info, "v2")
        self.wait_metric(s, ACCEPTED, 2)
        self.assertEqual(self.allowed(stub, uniq(), 7), 5)
        self.assertEqual(self.metric(s, CONNECTED), 1)
        self.assertEqual(s.log().count("envoy.xds: connected to"), 2)


class MutualTls(XdsBase):
    @classmethod
    def setUpClass(cls):
        cls.t = harness.TlsFiles()

    def creds(self):
        t = self.t

        def rd(p):
            with open(p, "rb") as f:
                return f.read()
        return grpc.ssl_server_credentials(
            [(rd(t.server_key), rd(t.server_cert))],
            root_certificates=rd(t.ca), require_client_auth=True)

    def tls(self, ca, cert, key):
        return (", tls: {ca: %s, cert: %s, key: %s, server_name: localhost}"
                % (ca, cert, key))

    def test_the_right_client_certificate_is_served(self):
        cp = self.control_plane(tls=self.creds())
        t = self.t
        s, stub = self.serve(cp, self.tls(t.ca, t.client_cert, t.client_key))
        nonce = cp.set("v1", [api_config(2)])
        self.assertEqual(cp.reply_to(nonce).version_info, "v1")
        self.wait_metric(s, ACCEPTED, 1)
        self.assertEqual(self.allowed(stub, uniq(), 3), 2)

    def assert_never_served(self, s, cp, why):
        cp.set("v1", [api_config(2)])
        self.wait_metric(s, ERRORS, 2)
        self.assertEqual(self.metric(s, ACCEPTED), 0)
        self.assertEqual(cp.requests, [])
        self.assertEqual(s.request("GET", "/readyz").status, 503)
        self.assertTrue(s.wait_log(why), s.log())

    def test_a_client_certificate_from_another_ca_is_refused(self):
        cp = self.control_plane(tls=self.creds())
        t = self.t
        s, _ = self.serve(cp, self.tls(t.ca, t.other_server_cert,
                                       t.other_server_key))
        self.assert_never_served(s, cp, "envoy.xds: 127.0.0.1")

    def test_no_client_certificate_is_refused(self):
        cp = self.control_plane(tls=self.creds())
        s, _ = self.serve(
            cp, ", tls: {ca: %s, server_name: localhost}" % self.t.ca)
        self.assert_never_served(s, cp, "envoy.xds: 127.0.0.1")

    def test_a_server_from_another_ca_is_refused(self):
        cp = self.control_plane(tls=self.creds())
        t = self.t
        s, _ = self.serve(cp, self.tls(t.other_ca, t.client_cert,
                                       t.client_key))
        self.assert_never_served(s, cp, "the server's certificate")

    def test_a_server_name_not_in_its_certificate_is_refused(self):
        cp = self.control_plane(tls=self.creds())
        t = self.t
        s, _ = self.serve(cp, ", tls: {ca: %s, cert: %s, key: %s, "
                          "server_name: elsewhere.example}"
                          % (t.ca, t.client_cert, t.client_key))
        self.assert_never_served(s, cp, "the server's certificate")

    def test_a_renewed_client_certificate_is_presented_next(self):
        cp = self.control_plane(tls=self.creds())
        t = self.t
        d = tempfile.mkdtemp(prefix="sluice-xds-certs-")
        harness._dirs.append(d)
        cert, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")

        def install(c, k):
            for src, dst in ((c, cert), (k, key)):
                with open(src, "rb") as f:
                    data = f.read()
                with open(dst + ".new", "wb") as f:
                    f.write(data)
                os.replace(dst + ".new", dst)
        install(t.client_cert, t.client_key)
        s, stub = self.serve(cp, self.tls(t.ca, cert, key))
        cp.reply_to(cp.set("v1", [api_config(2)]))
        self.wait_metric(s, ACCEPTED, 1)
        self.assertEqual(cp.peers, ["sluice test client"])
        # cert-manager writes the renewed pair; the control plane then
        # restarts: the next connection presents the new certificate.
        renewed = t._leaf("renewed-client", "sluice renewed client",
                          "client", 1010)
        install(*renewed)
        cp.stop()
        cp.restart()
        with cp.lock:
            self.assertTrue(cp.lock.wait_for(lambda: len(cp.peers) >= 2,
                                             90), cp.peers)
        self.assertEqual(cp.peers[1], "sluice renewed client")
        self.assertNotIn("SIGHUP", s.log())
        self.assertEqual(self.allowed(stub, uniq(), 3), 2)

    def test_plaintext_to_a_tls_server_is_never_served(self):
        cp = self.control_plane(tls=self.creds())
        s, _ = self.serve(cp)
        self.assert_never_served(s, cp, "envoy.xds: 127.0.0.1")


class Follows(XdsBase):
    """What a reload changes in envoy.xds, and the node's metadata."""

    def test_descriptor_metadata_reaches_dynamic_metadata(self):
        from google.protobuf import json_format
        cp = self.control_plane()
        s = GrpcSluice(xds_config(cp.port, "", "  response_dynamic_metadata:"
                                  " true\nstore: memory\n"))
        self.addCleanup(s.stop)
        c = api_config(3)
        c.descriptors[0].metadata.update(
            {"svc": {"name": "users", "n": 2}, "tags": ["a", True, None],
             "s": "it's \"quoted\"\n"})
        ack = cp.reply_to(cp.set("v1", [c]))
        self.assertFalse(ack.HasField("error_detail"), ack.error_detail)
        ch = s.channel()
        self.addCleanup(ch.close)
        r = s.rls(ch).ShouldRateLimit(request("api", [("user", "x")]),
                                      timeout=30)
        md = json_format.MessageToDict(r.dynamic_metadata)
        self.assertEqual(md["metadata"], {
            "svc": {"name": "users", "n": 2}, "tags": ["a", True, None],
            "s": "it's \"quoted\"\n"})
        # Nested deeper than a file may be: NACKed on the wire.
        deep = api_config(3)
        v = deep.descriptors[0].metadata
        for _ in range(40):
            v = v.get_or_create_struct("k")
        ack = cp.reply_to(cp.set("v2", [deep]))
        self.assertEqual(ack.version_info, "v1")
        self.assertIn("metadata nested more than", ack.error_detail.message)

    def test_node_metadata_reaches_the_control_plane(self):
        cp = self.control_plane()
        s, _ = self.serve(cp, ", node_metadata: {team: rl, zone: \"a=b\","
                          " n: 7}")
        ack = cp.reply_to(cp.set("v1", [api_config(2)]))
        self.assertIsNotNone(ack)
        self.assertEqual(dict(ack.node.metadata), {"team": "rl",
                                                   "zone": "a=b", "n": "7"})
        self.assertEqual(ack.node.id, "sluice-test")

    def test_a_reload_follows_a_new_control_plane_and_node(self):
        cp1, cp2 = self.control_plane(), self.control_plane()
        s, stub = self.serve(cp1)
        cp1.reply_to(cp1.set("v1", [api_config(2)]))
        self.wait_metric(s, ACCEPTED, 1)
        u = uniq()
        self.assertEqual(self.allowed(stub, u, 1), 1)
        s.write_config(
            "envoy:\n  xds: {server: \"127.0.0.1:%d\", node_id: second,"
            " node_metadata: {gen: \"2\"}}\nstore: %s\n"
            % (cp2.port, self.store()))
        self.assertIn("reloaded", s.reload())
        self.assertTrue(s.wait_log("envoy.xds: following 127.0.0.1:%d"
                                   % cp2.port))
        with cp2.lock:
            self.assertTrue(cp2.lock.wait_for(lambda: cp2.requests, 60))
            first = cp2.requests[0]
        self.assertEqual(first.node.id, "second")
        self.assertEqual(dict(first.node.metadata), {"gen": "2"})
        # Until cp2 sends a config, cp1's last one is served: still ready,
        # u's use still counted.
        self.assertEqual(s.request("GET", "/readyz").status, 200)
        self.assertEqual(self.allowed(stub, u, 3), 1)
        # cp1's new versions are no longer taken.
        cp1.set("v9", [api_config(100)])
        ack = cp2.reply_to(cp2.set("w1", [api_config(5)]))
        self.assertEqual(ack.version_info, "w1")
        self.wait_metric(s, ACCEPTED, 2)
        self.assertEqual(self.allowed(stub, uniq(), 7), 5)
        self.assertEqual(self.metric(s, ACCEPTED), 2)
        self.assertFalse(any(r.node.id == "second" for r in cp1.requests))

    def test_a_broken_new_block_keeps_the_running_client(self):
        cp = self.control_plane()
        s, stub = self.serve(cp)
        cp.reply_to(cp.set("v1", [api_config(2)]))
        self.wait_metric(s, ACCEPTED, 1)
        bad = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False)
        bad.write("not a certificate\n")
        bad.close()
        self.addCleanup(os.unlink, bad.name)
        for block, line, words in (
                ("xds:\n    server: nohost\n    node_id: x\n", 3,
                 "expected HOST:PORT"),
                ("xds:\n    server: \"127.0.0.1:1\"\n    node_id: x\n"
                 "    tls: {ca: %s}\n" % bad.name, 5, "envoy.xds.tls")):
            s.write_config("envoy:\n  %sstore: %s\n"
                           % (block, self.store()))
            line_seen = s.reload()
            self.assertIn("reload rejected", line_seen)
            self.assertIn("%s:%d:" % (s.config_path, line), line_seen)
            self.assertIn(words, line_seen)
        self.assertNotIn("envoy.xds: following", s.log())
        # Each update reads sluice's config again: with the file good
        # again (no SIGHUP), the client that kept running takes cp's next
        # version.
        s.write_config(xds_config(cp.port, "", "store: %s\n" % self.store()))
        ack = cp.reply_to(cp.set("v2", [api_config(4)]))
        self.assertEqual(ack.version_info, "v2")
        self.assertFalse(ack.HasField("error_detail"))
        self.wait_metric(s, ACCEPTED, 2)
        self.assertEqual(self.allowed(stub, uniq(), 6), 4)


class Headers(XdsBase):
    """envoy.xds.headers: metadata a control plane may ask for."""
    TOKEN = "Bearer tok-" + uniq()

    def assert_never_shown(self, s, secret):
        self.assertNotIn(secret, s.log())
        r = s.request("GET", "/rlconfig", {"Authorization": "Bearer " +
                                           "a" * 32})
        self.assertEqual(r.status, 200)
        self.assertNotIn(secret.encode(), r.body)

    def config(self, cp, headers):
        return xds_config(cp.port, ", headers: {%s}" % headers,
                          "store: memory\nadmin: {token: \"%s\"}\n"
                          % ("a" * 32))

    def serve_admin(self, cp, headers):
        s = GrpcSluice(self.config(cp, headers))
        self.addCleanup(s.stop)
        return s

    def test_headers_reach_the_control_plane_lowercased(self):
        cp = self.control_plane(require=("authorization", self.TOKEN))
        s = self.serve_admin(cp, "Authorization: \"%s\", x-tenant: 7"
                             % self.TOKEN)
        ack = cp.reply_to(cp.set("v1", [api_config(2)]))
        self.assertIsNotNone(ack)
        self.assertFalse(ack.HasField("error_detail"))
        self.wait_metric(s, ACCEPTED, 1)
        md = cp.metadata[0]
        self.assertEqual(md["authorization"], self.TOKEN)
        self.assertEqual(md["x-tenant"], "7")
        self.assert_never_shown(s, self.TOKEN)

    def test_a_refusing_control_plane_is_logged_once_until_sighup(self):
        cp = self.control_plane(require=("authorization", self.TOKEN))
        wrong = "Bearer wrong-" + uniq()
        s = self.serve_admin(cp, "authorization: \"%s\"" % wrong)
        cp.set("v1", [api_config(2)])
        # Refused at every retry: counted, never served, not ready.
        self.wait_metric(s, ERRORS, 3)
        self.assertEqual(self.metric(s, ACCEPTED), 0)
        self.assertEqual(self.metric(s, CONNECTED), 0)
        self.assertEqual(cp.requests, [])
        r = s.request("GET", "/readyz")
        self.assertEqual(r.status, 503)
        self.assertIn(b"config_pending", r.body)
        self.assertEqual(s.log().count("trying again with backoff"), 1,
                         s.log())
        self.assertIn("grpc-status 16 (unauthenticated: see "
                      "envoy.xds.headers)", s.log())
        self.assertLessEqual(s.log().count("envoy.xds: connected to"), 1)
        # The right token, with SIGHUP: a new stream carries it.
        s.write_config(self.config(cp, "authorization: \"%s\"" % self.TOKEN))
        self.assertIn("reloaded", s.reload())
        self.assertTrue(s.wait_log("envoy.xds: following"))
        self.wait_metric(s, ACCEPTED, 1)
        self.assertTrue(harness.wait_until(
            lambda: s.request("GET", "/readyz").status == 200, 30))
        self.assertEqual(cp.metadata[-1]["authorization"], self.TOKEN)
        self.assertEqual(self.allowed(rls_stub(self, s)[1], uniq(), 3), 2)
        for secret in (self.TOKEN, wrong):
            self.assert_never_shown(s, secret)


class BadSettings(unittest.TestCase):
    def check(self, text):
        return harness.check_config(text)

    def assert_refused(self, text, line, words):
        path, r = self.check(text)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("%s:%d:" % (path, line), r.stderr + r.stdout)
        self.assertIn(words, r.stderr + r.stdout)

    def test_bad_settings_name_file_and_line(self):
        self.assert_refused(
            "envoy:\n  xds:\n    server: nohost\n    node_id: a\n", 3,
            "expected HOST:PORT")
        self.assert_refused(
            "envoy:\n  xds:\n    server: \"h:99999\"\n    node_id: a\n", 3,
            "port 1-65535")
        self.assert_refused("envoy:\n  xds:\n    server: \"h:1\"\n", 3,
                            "no node_id")
        self.assert_refused(
            "envoy:\n  config_dir: /tmp\n  xds: {server: \"h:1\", "
            "node_id: a}\n", 2, "both config_dir and xds")
        self.assert_refused(
            "envoy:\n  xds:\n    server: \"h:1\"\n    node_id: a\n"
            "    tls: {cert: /etc/hostname}\n", 5, "without key")
        self.assert_refused(
            "envoy:\n  xds:\n    server: \"h:1\"\n    node_id: a\n"
            "    tls: {ca: /nonexistent/ca.pem}\n", 5, "cannot be read")
        self.assert_refused(
            "envoy:\n  xds:\n    server: \"h:1\"\n    node_id: a\n"
            "    colour: blue\n", 5, "colour")
        self.assert_refused(
            "envoy:\n  xds:\n    server: \"h:1\"\n    node_id: a\n"
            "    node_metadata: {a: \"1\", a: \"2\"}\n", 5,
            "node_metadata has 'a' twice")

    def test_bad_headers_name_file_and_line_not_the_value(self):
        head = "envoy:\n  xds:\n    server: \"h:1\"\n    node_id: a\n"
        for body, line, words in (
                ("      \":path\": /x\n", 6, "pseudo-header"),
                ("      content-type: x\n", 6, "set by the client"),
                ("      grpc-timeout: 1S\n", 6, "reserved by HTTP/2 or gRPC"),
                ("      te: trailers\n", 6, "set by the client"),
                ("      x-key-bin: AAAA\n", 6, "binary metadata"),
                ("      \"x y\": secret-v\n", 6, "not a gRPC metadata"),
                ("      authorization: \"secret-v\\x01\"\n", 6,
                 "not printable ASCII"),
                ("      authorization: \" secret-v\"\n", 6,
                 "starts or ends with a space"),
                ("      Authorization: secret-v\n"
                 "      authorization: secret-v\n", 7, "twice"),
                ("".join("      x-h%d: secret-v\n" % i for i in range(17)),
                 6, "at most 16"),
                ("      x-a: \"%s\"\n      x-b: \"%s\"\n"
                 % ("secret-v" * 510, "secret-v" * 510), 7,
                 "expected at most 8192")):
            path, r = self.check(head + "    headers:\n" + body)
            out = r.stderr + r.stdout
            self.assertNotEqual(r.returncode, 0, out)
            self.assertIn("%s:%d:" % (path, line), out)
            self.assertIn(words, out)
            self.assertNotIn("secret-v", out)

    def test_good_settings_pass(self):
        _, r = self.check("envoy:\n  xds: {server: \"[::1]:18001\", "
                          "node_id: envoy-ratelimit}\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        _, r = self.check("envoy:\n  xds: {server: \"h:1\", node_id: a, "
                          "headers: {Authorization: \"Bearer x\", "
                          "x-tenant.id_2: \"\"}}\n")
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
