#!/usr/bin/env python3
"""TLS on the gRPC listener (grpc.tls): grpcio clients with good, wrong and
no certificates, client SANs, certificates replaced without a restart or
by SIGHUP, and a certificate that cannot be used refusing the start.  The
listener's transport without TLS: test_grpc_transport.py.
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

import grpc  # noqa: E402
import fixtures  # noqa: E402
import harness  # noqa: E402
from grpc_harness import (GrpcSluice, envoy_config, protos,  # noqa: E402
                          request)

RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OK = 1


def read(path):
    with open(path, "rb") as f:
        return f.read()


class GrpcTlsTest(fixtures.ClassTls, unittest.TestCase):
    """grpc.tls: TLS on the gRPC listener, as grpcio clients present good,
    wrong and no certificates (envoyproxy/ratelimit's GRPC_SERVER_USE_TLS,
    GRPC_CLIENT_TLS_CACERT, GRPC_CLIENT_TLS_SAN)."""

    @classmethod
    def setUpClass(cls):
        protos()
        super().setUpClass()

    def serve(self, tls):
        s = GrpcSluice(envoy_config(extra="grpc: {tls: %s}\n" % tls))
        self.addCleanup(s.stop)
        return s

    def call(self, s, root=None, cert=None, key=None):
        """ShouldRateLimit over TLS, trusting root (the test CA by
        default), presenting cert/key; the overall code, or the
        grpc.StatusCode it failed with."""
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(root or self.tls.ca),
            private_key=read(key) if key else None,
            certificate_chain=read(cert) if cert else None)
        # A channel of its own each time: grpcio's shared subchannels would
        # answer from an earlier failed handshake's backoff.
        with grpc.secure_channel("127.0.0.1:%d" % s.grpc_port, creds,
                                 options=[("grpc.use_local_subchannel_pool",
                                           1)]) as ch:
            try:
                return s.rls(ch).ShouldRateLimit(
                    request("tls", [("k", "v")]), timeout=20).overall_code
            except grpc.RpcError as e:
                return e.code()

    def test_server_certificate_only(self):
        s = self.serve("{cert_file: %s, key_file: %s}"
                       % (self.tls.server_cert, self.tls.server_key))
        self.assertEqual(self.call(s), OK)
        # A client that trusts another CA does not get through.
        self.assertEqual(self.call(s, root=self.tls.other_ca),
                         grpc.StatusCode.UNAVAILABLE)
        # Nor does one speaking cleartext HTTP/2.
        with s.channel() as ch:
            with self.assertRaises(grpc.RpcError):
                s.rls(ch).ShouldRateLimit(request("tls", [("k", "v")]),
                                          timeout=20)

    def test_mutual_tls_needs_a_certificate_of_the_client_ca(self):
        s = self.serve("{cert_file: %s, key_file: %s, client_ca_file: %s}"
                       % (self.tls.server_cert, self.tls.server_key,
                          self.tls.ca))
        self.assertEqual(self.call(s, cert=self.tls.client_cert,
                                   key=self.tls.client_key), OK)
        # No certificate, or one from another CA: refused.
        self.assertEqual(self.call(s), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.call(s, cert=self.tls.other_server_cert,
                                   key=self.tls.other_server_key),
                         grpc.StatusCode.UNAVAILABLE)
        self.assertTrue(harness.wait_until(
            lambda: "TLS handshake with 127.0.0.1:" in s.log(), 20))

    def test_client_sans_allow_only_the_names_listed(self):
        base = "cert_file: %s, key_file: %s, client_ca_file: %s" % (
            self.tls.server_cert, self.tls.server_key, self.tls.ca)
        s = self.serve("{%s, client_sans: [localhost]}" % base)
        # The server certificate names localhost (and may authenticate
        # a client): let in; the client certificate names nothing.
        self.assertEqual(self.call(s, cert=self.tls.server_cert,
                                   key=self.tls.server_key), OK)
        self.assertEqual(self.call(s, cert=self.tls.client_cert,
                                   key=self.tls.client_key),
                         grpc.StatusCode.UNAVAILABLE)
        self.assertTrue(harness.wait_until(
            lambda: "names none of grpc.tls.client_sans" in s.log(), 20))
        s2 = self.serve("{%s, client_sans: [envoy.example]}" % base)
        self.assertEqual(self.call(s2, cert=self.tls.server_cert,
                                   key=self.tls.server_key),
                         grpc.StatusCode.UNAVAILABLE)

    def test_a_replaced_certificate_is_served_without_a_restart(self):
        d = tempfile.mkdtemp(prefix="sluice-grpc-tls-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        crt, key = os.path.join(d, "s.crt"), os.path.join(d, "s.key")

        def put(src_crt, src_key):
            self.tls.install(((src_crt, crt), (src_key, key)))
        put(self.tls.server_cert, self.tls.server_key)
        s = self.serve("{cert_file: %s, key_file: %s}" % (crt, key))
        self.assertEqual(self.call(s), OK)
        # Renewed (here: by the other CA): new connections get the new
        # certificate once the files changed (looked at once a second).
        put(self.tls.other_server_cert, self.tls.other_server_key)
        self.assertTrue(harness.wait_until(
            lambda: self.call(s, root=self.tls.other_ca) == OK, 30))
        self.assertEqual(self.call(s), grpc.StatusCode.UNAVAILABLE)
        # A key that does not fit is logged and the last good pair kept
        # (the files are looked at when a client connects).
        put(self.tls.server_cert, self.tls.other_server_key)
        self.assertTrue(harness.wait_until(
            lambda: self.call(s, root=self.tls.other_ca) == OK and
            "cannot be used with the certificate" in s.log(), 30))
        self.assertNotIn("PRIVATE KEY", s.log())

    def test_sighup_applies_other_certificate_files(self):
        s = self.serve("{cert_file: %s, key_file: %s}"
                       % (self.tls.server_cert, self.tls.server_key))
        self.assertEqual(self.call(s), OK)
        s.write_config(envoy_config(extra="grpc: {tls: {cert_file: %s, "
                                    "key_file: %s}}\n"
                                    % (self.tls.other_server_cert,
                                       self.tls.other_server_key)))
        self.assertIn("SIGHUP: reloaded", s.reload())
        self.assertEqual(self.call(s, root=self.tls.other_ca), OK)
        # A reload naming a key that does not fit is refused; the
        # running certificate stays.
        s.write_config(envoy_config(extra="grpc: {tls: {cert_file: %s, "
                                    "key_file: %s}}\n"
                                    % (self.tls.server_cert,
                                       self.tls.client_key)))
        self.assertIn("reload rejected", s.reload())
        self.assertIn("grpc.tls.key_file", s.log())
        self.assertEqual(self.call(s, root=self.tls.other_ca), OK)

    def test_a_certificate_that_cannot_be_used_refuses_the_start(self):
        fd, path = tempfile.mkstemp(suffix=".yaml")
        os.close(fd)
        self.addCleanup(os.unlink, path)
        with open(path, "w") as f:
            f.write("grpc: {tls: {cert_file: %s, key_file: %s}}\n"
                    % (self.tls.server_cert, self.tls.client_key))
        p = harness.run_on_free_port(lambda listen: [
            harness.SLUICE, "serve", "-c", path, "--listen",
            "127.0.0.1:%d" % listen, "--grpc-listen",
            "127.0.0.1:%d" % harness.free_port()])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("grpc.tls.key_file", p.stderr)
        self.assertNotIn("PRIVATE KEY", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
