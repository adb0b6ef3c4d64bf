#!/usr/bin/env python3
"""The harness's own promises: a server whose chosen port is taken
between choosing and binding starts on another one.

Each test hands out, as the first "free" port, one it listens on itself
(someone else's server on the machine), and checks that the start goes on
to a port of the server's own: sluice serve (its log line), IPv6, a server
known only by its socket (harness.Server), redis-server and Sentinel,
nginx and Caddy with two ports each, and a run that is to fail for a
reason of its own.
"""
import os
import shutil
import socket
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # it imports test_nginx, test_caddy
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import sentinel_harness  # noqa: E402
from harness import Sluice  # noqa: E402


class Taken:
    """Within `with`: a socket listening on a port of host (and accepting,
    as a server would), and harness.free_port() answering that port
    first, then truly free ones.  self.offered: it was handed out."""

    def __init__(self, host="127.0.0.1"):
        self.host = host

    def __enter__(self):
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self.sock = socket.socket(family)
        self.sock.bind((self.host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.offered = False
        self.real = harness.free_port

        def first_taken(host="127.0.0.1"):
            if not self.offered:
                self.offered = True
                return self.port
            return self.real(host)
        harness.free_port = first_taken
        return self

    def __exit__(self, *exc):
        harness.free_port = self.real
        self.sock.close()


def ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


class StartsOnAnotherPort(unittest.TestCase):

    def test_sluice_serve(self):
        with Taken() as t, Sluice() as s:
            self.assertTrue(t.offered)
            self.assertNotEqual(s.port, t.port)
            self.assertIn(harness.LISTENING % s.port, s.log())
            self.assertTrue(harness.listens(s.pid, s.port))
            self.assertFalse(harness.listens(s.pid, t.port))
            self.assertEqual(s.request("GET", "/healthz").status, 200)

    def test_sluice_serve_on_ipv6(self):
        if not ipv6_loopback():
            self.skipTest("no IPv6 loopback")
        with Taken("::1") as t, Sluice(host="::1") as s:
            self.assertTrue(t.offered)
            self.assertNotEqual(s.port, t.port)
            self.assertIn("listening on [::1]:%d" % s.port, s.log())
            c = socket.create_connection(("::1", s.port), 10)
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(harness.read_response(c.makefile("rb")).status,
                             200)
            c.close()

    def test_a_server_known_by_its_socket(self):
        # Python's http.server says nothing when it listens: the harness
        # sees its own listening socket (someone else's accepts too).
        with Taken() as t, harness.Server(lambda port: [
                sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                str(port)], cwd=tempfile.gettempdir()) as p:
            self.assertTrue(t.offered)
            self.assertNotEqual(p.port, t.port)
            self.assertEqual(harness.request(p.port, "GET", "/").status, 200)

    def test_redis_server_and_sentinel(self):
        with Taken() as t, harness.RedisServer() as r:
            self.assertTrue(t.offered)
            self.assertNotEqual(r.port, t.port)
            self.assertTrue(harness.listens(r.pid, r.port))
            self.assertTrue(r.ping())
            with Taken() as t2, sentinel_harness.Sentinel(r, quorum=1) as s:
                self.assertTrue(t2.offered)
                self.assertNotEqual(s.port, t2.port)
                self.assertTrue(harness.listens(s.pid, s.port))
                self.assertTrue(harness.wait_until(
                    lambda: s.master_port() == r.port, 20))

    def test_nginx_with_two_ports(self):
        import test_nginx
        if not os.path.exists(test_nginx.NGINX):
            self.skipTest("nginx is not installed (scripts/deps)")
        with Sluice() as s, Taken() as t, test_nginx.Nginx(s.port) as n:
            self.assertTrue(t.offered)
            self.assertNotIn(t.port, (n.port, n.upstream_port))
            self.assertTrue(harness.listens(n.pid, n.port))
            self.assertTrue(harness.listens(n.pid, n.upstream_port))
            r = n.request("GET", "/", {"x-user-id": "u"})
            self.assertEqual((r.status, r.body), (200, b"app\n"))

    def test_caddy_with_two_ports(self):
        import test_caddy
        if not os.path.exists(test_caddy.CADDY):
            self.skipTest("caddy is not installed (scripts/deps)")
        with Sluice(test_caddy.example_config()) as s, Taken() as t, \
                test_caddy.Caddy(s.port) as caddy:
            self.assertTrue(t.offered)
            self.assertNotIn(t.port, (caddy.port, caddy.upstream_port))
            self.assertEqual(caddy.request("GET", "/").status, 200)

    def test_a_run_that_fails_for_its_own_reason(self):
        d = tempfile.mkdtemp(prefix="sluice-harness-")
        try:
            path = os.path.join(d, "file")
            with open(path, "w") as f:
                f.write("not a socket")
            with Taken() as t:
                p = harness.run_on_free_port(lambda port: [
                    harness.SLUICE, "serve", "--listen",
                    "127.0.0.1:%d" % port, "--grpc-listen", "unix:" + path])
                self.assertTrue(t.offered)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("not a socket", p.stderr)
            self.assertFalse(harness.in_use(p.stderr), p.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)


class OtherFailuresAreErrors(unittest.TestCase):

    def test_an_exit_that_is_not_a_taken_port_is_not_retried(self):
        starts = []

        def argv(port):
            starts.append(port)
            return ["sh", "-c", "echo no such thing >&2; exit 3"]
        with self.assertRaises(RuntimeError) as e:
            harness.Server(argv)
        self.assertEqual(len(starts), 1)
        self.assertIn("exited with 3", str(e.exception))
        self.assertIn("no such thing", str(e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
