#!/usr/bin/env python3
"""http.tls and admin.tls: HTTPS on `sluice serve`'s HTTP listeners, as
clients with good, wrong and no certificates, cleartext and garbage see
it; http.max_connection_age_ms; nginx auth_request over https://.

Certificates are harness.TlsFiles' (made by the openssl command), as the
gRPC listener's TLS tests use them; the TLS code is one copy for both
listeners (src/util/tls_server.c).
"""
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import harness  # noqa: E402

RULES = """
rules:
  - name: tight
    key: ["header:x-user-id"]
    limits: [{capacity: 3, rate: 1/min}]
"""


class Https:
    """One keep-alive HTTPS connection (http.client), trusting `ca` and
    presenting cert/key when given."""

    def __init__(self, port, ca, cert=None, key=None, timeout=20):
        self.ctx = ssl.create_default_context(cafile=ca)
        if cert:
            self.ctx.load_cert_chain(cert, key)
        self.conn = http.client.HTTPSConnection(
            "localhost", port, context=self.ctx, timeout=timeout)

    def request(self, method, path, headers=None, body=None):
        self.conn.request(method, path, body=body, headers=headers or {})
        r = self.conn.getresponse()
        return harness.Response(
            r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())

    def close(self):
        self.conn.close()


class ServeHttpsTest(fixtures.ClassTls, unittest.TestCase):
    users = 0

    def serve(self, tls, http_extra=""):
        """sluice serve with http: {tls: TLS, ...http_extra}."""
        s = harness.Sluice("http: {tls: %s%s}\n" % (tls, http_extra) + RULES)
        self.addCleanup(s.stop)
        return s

    def basic(self):
        return "{cert_file: %s, key_file: %s}" % (self.tls.server_cert,
                                                  self.tls.server_key)

    def mutual(self, extra=""):
        return "{cert_file: %s, key_file: %s, client_ca_file: %s%s}" % (
            self.tls.server_cert, self.tls.server_key, self.tls.ca, extra)

    def check(self, s, ca=None, cert=None, key=None, user=None):
        """GET /v1/check over a fresh HTTPS connection (as `user`, else a
        user of its own): the status, or the ssl/socket error's class
        when the handshake was refused."""
        if user is None:
            ServeHttpsTest.users += 1
            user = "user-%d" % ServeHttpsTest.users
        c = Https(s.port, ca or self.tls.ca, cert, key)
        try:
            return c.request("GET", "/v1/check",
                             {"x-user-id": user}).status
        except (ssl.SSLError, ConnectionError, http.client.HTTPException,
                OSError) as e:
            return type(e).__name__
        finally:
            c.close()

    def metrics(self, s, ca):
        c = Https(s.port, ca)
        try:
            return harness.parse_metrics(
                c.request("GET", "/metrics").body.decode())
        finally:
            c.close()

    # ------------------------------------------------------ good clients

    def test_https_check_counts_and_limits_over_one_keep_alive_connection(
            self):
        s = self.serve(self.basic())
        c = Https(s.port, self.tls.ca)
        try:
            got = [c.request("GET", "/v1/check",
                             {"x-user-id": "alice"}).status
                   for _ in range(4)]
            # Pipelined: three requests in one TLS write, three answers
            # in order on the same connection.
            sock = c.conn.sock
            sock.sendall(b"".join(
                b"GET /v1/check HTTP/1.1\r\nHost: x\r\nx-user-id: bob\r\n"
                b"\r\n" for _ in range(3)))
            f = sock.makefile("rb")
            piped = [harness.read_response(f).status for _ in range(3)]
        finally:
            c.close()
        self.assertEqual(got, [200, 200, 200, 429])
        self.assertEqual(piped, [200, 200, 200])
        self.assertEqual(self.check(s, user="carol"), 200)

    def test_tls_1_1_is_refused(self):
        s = self.serve(self.basic())
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(self.tls.ca)
        try:
            ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        except (ValueError, AttributeError):
            self.skipTest("this Python cannot offer TLS 1.1")
        with socket.create_connection(("127.0.0.1", s.port), 20) as raw:
            with self.assertRaises((ssl.SSLError, ConnectionError)):
                with ctx.wrap_socket(raw, server_hostname="localhost"):
                    pass
        self.assertEqual(self.check(s), 200)

    def test_curl_over_https_reuses_its_connection(self):
        curl = shutil.which("curl")
        if not curl:
            self.skipTest("curl is not installed")
        s = self.serve(self.basic())
        url = "https://localhost:%d/v1/check" % s.port
        p = subprocess.run(
            [curl, "-sS", "-v", "--cacert", self.tls.ca, "-H",
             "x-user-id: dave", "-o", "/dev/null", "-w", "%{http_code}\\n",
             url, url],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ["200", "200"])
        self.assertIn("Re-using existing connection", p.stderr)
        # Without trusting the CA, curl refuses the server.
        p = subprocess.run([curl, "-sS", url], capture_output=True,
                           text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)

    # ---------------------------------------------------- bad clients

    def test_cleartext_http_gets_a_400_and_the_server_goes_on(self):
        s = self.serve(self.basic())
        out = harness.raw(s.port, b"GET /v1/check HTTP/1.1\r\nHost: x\r\n"
                          b"x-user-id: eve\r\n\r\n")
        self.assertEqual([r.status for r in out], [400])
        self.assertIn(b"https_required", out[0].body)
        self.assertEqual(out[0].header("connection"), "close")
        # The request was not decided: eve's bucket is untouched.
        self.assertEqual([self.check(s, user="eve") for _ in range(4)],
                         [200, 200, 200, 429])

    def test_garbage_and_a_truncated_client_hello_harm_no_one(self):
        s = self.serve(self.basic())
        # A ClientHello's record header and a few bytes of it, then
        # nothing more: the connection waits (idle timeout) without
        # stopping anyone else.
        hello = bytes.fromhex("160301020001000200") + b"\x03\x03" + b"\0" * 20
        stuck = socket.create_connection(("127.0.0.1", s.port), 20)
        self.addCleanup(stuck.close)
        stuck.sendall(hello)
        for seed in range(5):
            junk = os.urandom(2000 + seed * 3000)
            with socket.create_connection(("127.0.0.1", s.port), 20) as g:
                try:
                    g.sendall(junk)
                    g.settimeout(20)
                    while g.recv(4096):
                        pass  # an alert, then the close
                except (ConnectionError, socket.timeout):
                    pass
        # A record that claims 16 KiB and stops after its header.
        with socket.create_connection(("127.0.0.1", s.port), 20) as g:
            g.sendall(bytes.fromhex("1603014000"))
            self.assertEqual(self.check(s, user="frank"), 200)
        self.assertEqual(self.check(s, user="frank"), 200)
        self.assertIsNone(s.poll())

    # ------------------------------------------------------ mutual TLS

    def test_mutual_tls_needs_a_certificate_of_the_client_ca(self):
        s = self.serve(self.mutual())
        self.assertEqual(self.check(s, cert=self.tls.client_cert,
                                    key=self.tls.client_key), 200)
        # No certificate, or one from another CA: refused.
        self.assertNotEqual(self.check(s), 200)
        self.assertNotEqual(self.check(s, cert=self.tls.other_server_cert,
                                       key=self.tls.other_server_key), 200)
        self.assertTrue(harness.wait_until(
            lambda: s.log().count("http.tls: TLS handshake with "
                                  "127.0.0.1:") >= 2, 20))
        self.assertEqual(self.check(s, cert=self.tls.client_cert,
                                    key=self.tls.client_key), 200)

    def test_a_client_certificate_session_resumes(self):
        """A client resuming its TLS session (nginx's
        proxy_ssl_session_reuse, on by default) is let in, and its
        certificate is still held to client_sans."""
        s = self.serve(self.mutual(", client_sans: [localhost]"))
        ctx = ssl.create_default_context(cafile=self.tls.ca)
        ctx.load_cert_chain(self.tls.server_cert, self.tls.server_key)
        req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        session = None
        for attempt in range(2):
            raw = socket.create_connection(("127.0.0.1", s.port), 20)
            with ctx.wrap_socket(raw, server_hostname="localhost",
                                 session=session) as sock:
                sock.sendall(req)
                r = harness.read_response(sock.makefile("rb"))
                self.assertEqual(r.status, 200)
                reused = sock.session_reused
                session = sock.session  # TLS 1.3: after the first read
        self.assertTrue(reused)
        self.assertNotIn("session id context", s.log())

    def test_client_sans_allow_only_the_names_listed(self):
        s = self.serve(self.mutual(", client_sans: [localhost]"))
        # The server certificate names localhost (and may authenticate a
        # client): let in; the client certificate names nothing.
        self.assertEqual(self.check(s, cert=self.tls.server_cert,
                                    key=self.tls.server_key), 200)
        self.assertNotEqual(self.check(s, cert=self.tls.client_cert,
                                       key=self.tls.client_key), 200)
        self.assertTrue(harness.wait_until(
            lambda: "names none of http.tls.client_sans" in s.log(), 20))
        s2 = self.serve(self.mutual(", client_sans: [\"10.9.8.7\"]"))
        self.assertNotEqual(self.check(s2, cert=self.tls.server_cert,
                                       key=self.tls.server_key), 200)

    # -------------------------------------------------------- renewal

    def test_a_renewed_certificate_is_served_without_a_restart(self):
        d = tempfile.mkdtemp(prefix="sluice-https-")
        self.addCleanup(shutil.rmtree, d, True)
        crt, key = os.path.join(d, "s.crt"), os.path.join(d, "s.key")

        def put(src_crt, src_key):
            self.tls.install(((src_crt, crt), (src_key, key)))
        put(self.tls.server_cert, self.tls.server_key)
        s = self.serve("{cert_file: %s, key_file: %s}" % (crt, key))
        self.assertEqual(self.check(s), 200)
        # Renewed (here: by the other CA): new connections get the new
        # certificate once the files changed (looked at once a second).
        put(self.tls.other_server_cert, self.tls.other_server_key)
        self.assertTrue(harness.wait_until(
            lambda: self.check(s, ca=self.tls.other_ca) == 200, 30))
        self.assertNotEqual(self.check(s), 200)
        # A key that does not fit: logged once, counted, and the last
        # good pair kept.
        failures = 'sluice_tls_reload_failures_total{listener="http"}'
        self.assertEqual(self.metrics(s, self.tls.other_ca)[failures], 0)
        put(self.tls.server_cert, self.tls.other_server_key)
        self.assertTrue(harness.wait_until(
            lambda: self.check(s, ca=self.tls.other_ca) == 200 and
            "cannot be used with the certificate" in s.log(), 30))
        for _ in range(3):  # more connections, more than a second apart
            time.sleep(1.1)
            self.assertEqual(self.check(s, ca=self.tls.other_ca), 200)
        self.assertEqual(s.log().count("cannot be used with the "
                                       "certificate"), 1)
        self.assertEqual(self.metrics(s, self.tls.other_ca)[failures], 1)
        self.assertNotIn("PRIVATE KEY", s.log())

    def test_sighup_applies_other_files_and_refuses_bad_ones(self):
        s = self.serve(self.basic())
        self.assertEqual(self.check(s), 200)
        s.write_config("http: {tls: {cert_file: %s, key_file: %s}}\n%s"
                       % (self.tls.other_server_cert,
                          self.tls.other_server_key, RULES))
        self.assertIn("SIGHUP: reloaded", s.reload())
        self.assertEqual(self.check(s, ca=self.tls.other_ca), 200)
        s.write_config("http: {tls: {cert_file: %s, key_file: %s}}\n%s"
                       % (self.tls.server_cert, self.tls.client_key,
                          RULES))
        self.assertIn("reload rejected", s.reload())
        self.assertIn("http.tls.key_file", s.log())
        self.assertEqual(self.check(s, ca=self.tls.other_ca), 200)

    def test_files_that_cannot_be_used_are_config_errors_with_the_line(self):
        path, p = harness.check_config(
            "threads: 1\nhttp:\n  tls: {cert_file: %s, key_file: %s}\n"
            % (self.tls.server_cert, self.tls.client_key))
        self.assertNotEqual(p.returncode, 0)
        out = p.stdout + p.stderr
        self.assertIn("%s:3: http.tls.key_file" % path, out)
        self.assertNotIn("PRIVATE KEY", out)
        p = harness.run_on_free_port(lambda listen: [
            harness.SLUICE, "serve", "-c", path, "--listen",
            "127.0.0.1:%d" % listen])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("%s:3: http.tls.key_file" % path, p.stderr)
        path, p = harness.check_config(
            "http: {tls: {cert_file: /nonexistent.crt, key_file: %s}}\n"
            % self.tls.server_key, path)
        self.assertIn('%s:1: http.tls.cert_file "/nonexistent.crt"' % path,
                      p.stdout + p.stderr)
        # A FIFO named by mistake is refused at once, not read (which
        # would wait for a writer forever).
        fifo = path + ".fifo"
        os.mkfifo(fifo)
        self.addCleanup(os.unlink, fifo)
        path, p = harness.check_config(
            "http: {tls: {cert_file: %s, key_file: %s}}\n"
            % (fifo, self.tls.server_key), path)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('%s:1: http.tls.cert_file "%s"' % (path, fifo),
                      p.stdout + p.stderr)

    # ------------------------------------------------------ max age

    def test_an_old_keep_alive_connection_is_told_to_close(self):
        """http.max_connection_age_ms: 1000 (900 to 1100 ms with the
        jitter): a request started later gets Connection: close and the
        server closes after its answer; before, keep-alive."""
        req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        for tls in (True, False):
            with self.subTest(tls=tls):
                if tls:
                    s = self.serve(self.basic(),
                                   ", max_connection_age_ms: 1000")
                else:
                    s = harness.Sluice(
                        "http: {max_connection_age_ms: 1000}\n" + RULES)
                    self.addCleanup(s.stop)
                t0 = time.monotonic()
                sock = socket.create_connection(("127.0.0.1", s.port), 20)
                if tls:
                    ctx = ssl.create_default_context(cafile=self.tls.ca)
                    sock = ctx.wrap_socket(sock, server_hostname="localhost")
                self.addCleanup(sock.close)
                f = sock.makefile("rb")
                sock.sendall(req)
                first = harness.read_response(f)
                early = time.monotonic() - t0 < 0.85
                time.sleep(max(0.0, 1.2 - (time.monotonic() - t0)))
                sock.sendall(req)
                later = harness.read_response(f)
                self.assertEqual(first.status, 200)
                if early:  # a loaded host may take longer: then unknown
                    self.assertIsNone(first.header("connection"))
                self.assertEqual(later.status, 200)
                self.assertEqual(later.header("connection"), "close")
                # The server closes its side after the answer (over TLS
                # after its close_notify): end of stream, not a timeout.
                self.assertEqual(f.read(1), b"")

    def test_age_is_not_a_limit_bypass(self):
        """A client that reconnects after each Connection: close keeps
        its bucket: the age closes connections, never resets counts."""
        s = self.serve(self.basic(), ", max_connection_age_ms: 100")
        got = []
        for _ in range(4):
            c = Https(s.port, self.tls.ca)
            try:
                c.conn.connect()
                time.sleep(0.2)  # past the age: the answer closes
                r = c.request("GET", "/v1/check", {"x-user-id": "gina"})
                got.append((r.status, r.header("connection")))
            finally:
                c.close()
        self.assertEqual(got, [(200, "close"), (200, "close"),
                               (200, "close"), (429, "close")])

    # ------------------------------------------------------- admin.tls

    def test_admin_listener_has_its_own_tls(self):
        token = "a" * 32

        def config():
            self.admin_port = harness.free_port()
            return ("admin: {token: %s, listen: \"127.0.0.1:%d\", tls: "
                    "{cert_file: %s, key_file: %s, client_ca_file: %s}}\n"
                    % (token, self.admin_port, self.tls.server_cert,
                       self.tls.server_key, self.tls.ca)) + RULES
        s = harness.Sluice(config)
        self.addCleanup(s.stop)
        harness.wait_for_port(self.admin_port, 20, s)
        # The decision listener stays cleartext (no http.tls).
        self.assertEqual(s.request("GET", "/v1/check",
                                   {"x-user-id": "x"}).status, 200)
        c = Https(self.admin_port, self.tls.ca, self.tls.client_cert,
                  self.tls.client_key)
        try:
            r = c.request("POST", "/v1/reset",
                          {"authorization": "Bearer " + token,
                           "content-type": "application/json"},
                          '{"rule": "tight", "key": "x"}')
        finally:
            c.close()
        self.assertEqual((r.status, r.json()), (200, {"status": "reset"}))
        # Without a client certificate: refused; cleartext: a 400.
        c = Https(self.admin_port, self.tls.ca)
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError,
                                http.client.HTTPException)):
            c.request("POST", "/v1/reset")
        c.close()
        out = harness.raw(self.admin_port, b"POST /v1/reset HTTP/1.1\r\n"
                          b"Host: x\r\n\r\n")
        self.assertEqual([r.status for r in out], [400])

    def test_admin_tls_without_an_admin_listener_is_an_error(self):
        path, p = harness.check_config(
            "admin:\n  token: %s\n  tls: {cert_file: %s, key_file: %s}\n"
            % ("b" * 32, self.tls.server_cert, self.tls.server_key))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("%s:3: admin.tls without admin.listen" % path,
                      p.stdout + p.stderr)


class NginxHttpsTest(unittest.TestCase):
    """nginx's auth_request asking sluice over https:// with
    proxy_ssl_verify on (and a client certificate for mTLS)."""

    def test_auth_request_over_https_with_verification(self):
        import test_nginx
        tls = harness.TlsFiles()
        self.addCleanup(tls.remove)
        os.chmod(tls.dir, 0o755)  # nginx's workers (nobody) read these
        for name in os.listdir(tls.dir):
            os.chmod(os.path.join(tls.dir, name), 0o644)
        s = harness.Sluice(
            "http: {tls: {cert_file: %s, key_file: %s, client_ca_file: %s,"
            " client_sans: [localhost]}}\ntrusted_proxies: [127.0.0.1]\n"
            % (tls.server_cert, tls.server_key, tls.ca) + """
rules:
  - name: per-ip
    key: [ip]
    limits: [{capacity: 3, rate: 1/min}]
""")
        self.addCleanup(s.stop)

        class HttpsNginx(test_nginx.Nginx):
            def _config(self, sluice_port, users):
                text = super()._config(sluice_port, users)
                # A connection per check: each after the first resumes
                # its TLS session (proxy_ssl_session_reuse is on).
                up = "server 127.0.0.1:%d;\n        keepalive 64;" % (
                    sluice_port)
                assert text.count(up) == 1
                text = text.replace(up, "server 127.0.0.1:%d;" % sluice_port)
                old = "proxy_pass http://sluice/v1/check?deny_status=403;"
                assert text.count(old) == 1
                return text.replace(old, (
                    "proxy_pass https://sluice/v1/check?deny_status=403;\n"
                    "            proxy_ssl_verify on;\n"
                    "            proxy_ssl_trusted_certificate %s;\n"
                    "            proxy_ssl_name localhost;\n"
                    "            proxy_ssl_server_name on;\n"
                    "            proxy_ssl_session_reuse on;\n"
                    "            proxy_ssl_certificate %s;\n"
                    "            proxy_ssl_certificate_key %s;")
                    % (tls.ca, tls.server_cert, tls.server_key))
        n = HttpsNginx(s.port)
        self.addCleanup(n.stop)
        got = [n.request("GET", "/").status for _ in range(4)]
        self.assertEqual(got, [200, 200, 200, 429], n.error_log())
        # sluice saw nginx's handshakes succeed, none refused.
        self.assertNotIn("TLS handshake with", s.log())


if __name__ == "__main__":
    unittest.main()
