#!/usr/bin/env python3
"""The gRPC listener as a gRPC and HTTP/2 server: what well-behaved and
badly-behaved clients get.

grpcio (Debian's python3-grpcio) makes the well-formed calls; raw HTTP/2
(python3-h2 and hand-built frames) makes what grpcio never sends.  Each bad
input gets its gRPC status or HTTP/2 error, the server's memory stays
bounded, and another client is answered afterwards.
"""
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

import grpc  # noqa: E402
import harness  # noqa: E402
from grpc_harness import (H2, GrpcSluice, envoy_config, frame,  # noqa: E402
                          ping, protos, request)

RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OK = 1


def grpc_status(hdrs):
    return int(hdrs["grpc-status"]) if "grpc-status" in hdrs else None


class GrpcTransportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        protos()
        cls.s = GrpcSluice(envoy_config())
        cls.base_rss = cls.s.rss_kb()

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def call(self, req, timeout=20):
        with self.s.channel() as ch:
            return self.s.rls(ch).ShouldRateLimit(req, timeout=timeout)

    def assert_alive(self):
        """Another client is still answered, and memory is bounded."""
        r = self.call(request("alive", [("k", "v")]))
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(len(r.statuses), 1)
        self.assertLess(self.s.rss_kb() - self.base_rss, 128 * 1024)

    def body(self, req):
        return frame(req.SerializeToString())

    # ------------------------------------------------------ good calls

    def test_a_call_is_answered_with_one_status_per_descriptor(self):
        r = self.call(request("nowhere", [("a", "1")], [("b", "2")],
                              [("c", "3")]))
        self.assertEqual(r.overall_code, OK)
        self.assertEqual([s.code for s in r.statuses], [OK, OK, OK])

    def test_a_raw_call_has_headers_a_message_and_trailers(self):
        h = H2(self.s.grpc_port)
        try:
            sid = h.call(self.body(request("nowhere", [("a", "1")])))
            hdrs, body, reset = h.result(sid)
            self.assertEqual(hdrs[":status"], "200")
            self.assertEqual(hdrs["content-type"], "application/grpc")
            self.assertEqual(grpc_status(hdrs), 0)
            flag, n = struct.unpack(">BI", body[:5])
            self.assertEqual((flag, n), (0, len(body) - 5))
            resp = protos().rls_pb2.RateLimitResponse.FromString(body[5:])
            self.assertEqual(resp.overall_code, OK)
        finally:
            h.close()

    def test_a_message_split_across_many_data_frames_is_put_together(self):
        h = H2(self.s.grpc_port)
        try:
            body = self.body(request("nowhere", [("a", "1")], [("b", "2")]))
            sid = h.headers()
            for i in range(len(body)):  # one byte a frame, prefix too
                h.data(sid, body[i:i + 1], end=False)
            h.data(sid, b"", end=True)
            hdrs, out, _ = h.result(sid)
            self.assertEqual(grpc_status(hdrs), 0, hdrs)
            resp = protos().rls_pb2.RateLimitResponse.FromString(out[5:])
            self.assertEqual(len(resp.statuses), 2)
        finally:
            h.close()

    def test_a_hundred_concurrent_streams_on_one_connection(self):
        h = H2(self.s.grpc_port)
        try:
            h.wait(lambda: h.conn.remote_settings.max_concurrent_streams
                   == 100)
            self.assertEqual(h.conn.remote_settings.max_concurrent_streams,
                             100)
            body = self.body(request("nowhere", [("a", "1")]))
            sids = [h.headers() for _ in range(100)]
            for sid in sids:
                h.data(sid, body)
            for sid in sids:
                hdrs, _, _ = h.result(sid)
                self.assertEqual(grpc_status(hdrs), 0, (sid, hdrs))
        finally:
            h.close()

    def test_concurrent_grpcio_calls_share_a_channel(self):
        results = []
        with self.s.channel() as ch:
            stub = self.s.rls(ch)
            futs = [stub.ShouldRateLimit.future(
                request("nowhere", [("n", str(i))]), timeout=30)
                for i in range(200)]
            results = [f.result().overall_code for f in futs]
        self.assertEqual(results, [OK] * 200)

    def test_metrics_count_calls_by_method_and_status(self):
        def count(method, code):
            return self.s.metrics().get(
                'sluice_grpc_calls_total{method="%s",code="%d"}'
                % (method, code), 0)
        ok0, unimpl0 = count("ShouldRateLimit", 0), count("other", 12)
        self.call(request("nowhere", [("a", "1")]))
        with self.s.channel() as ch:
            with self.assertRaises(grpc.RpcError):
                ch.unary_unary("/x.Y/Z")(b"", timeout=20)
        self.assertEqual(count("ShouldRateLimit", 0), ok0 + 1)
        self.assertEqual(count("other", 12), unimpl0 + 1)

    def test_ping_is_answered(self):
        import h2.events
        h = H2(self.s.grpc_port)
        try:
            h.conn.ping(b"sluice!!")
            h.flush()
            self.assertTrue(h.wait(lambda: any(
                isinstance(e, h2.events.PingAckReceived) and
                e.ping_data == b"sluice!!" for e in h.events)))
        finally:
            h.close()

    def test_unknown_fields_are_ignored(self):
        # Field 99 (varint) and field 100 (bytes) are nobody's: proto3
        # skips them.
        extra = b"\x98\x06\x2a" + b"\xa2\x06\x03abc"
        h = H2(self.s.grpc_port)
        try:
            sid = h.call(frame(
                request("nowhere", [("a", "1")]).SerializeToString() +
                extra))
            hdrs, body, _ = h.result(sid)
            self.assertEqual(grpc_status(hdrs), 0, hdrs)
            resp = protos().rls_pb2.RateLimitResponse.FromString(body[5:])
            self.assertEqual([s.code for s in resp.statuses], [OK])
        finally:
            h.close()

    # ------------------------------------------------------- bad calls

    def raw(self, body=None, end=True, **kw):
        h = H2(self.s.grpc_port)
        try:
            sid = h.headers(**kw)
            if body is not None:
                h.data(sid, body, end=end)
            return h.result(sid)
        finally:
            h.close()

    def test_a_content_type_that_is_not_grpc_gets_415(self):
        hdrs, _, _ = self.raw(b"{}", ctype="application/json")
        self.assertEqual(hdrs[":status"], "415")
        hdrs, _, _ = self.raw(b"{}", ctype=None)
        self.assertEqual(hdrs[":status"], "415")
        self.assert_alive()

    def test_grpc_with_another_codec_is_unimplemented(self):
        hdrs, _, _ = self.raw(b"{}", ctype="application/grpc+json")
        self.assertEqual(grpc_status(hdrs), 12)

    def test_a_get_is_refused(self):
        hdrs, _, _ = self.raw(None, method="GET", end=True)
        self.assertEqual(hdrs[":status"], "405")

    def test_an_unknown_method_is_unimplemented(self):
        with self.s.channel() as ch:
            f = ch.unary_unary("/envoy.service.ratelimit.v3."
                               "RateLimitService/Nope")
            with self.assertRaises(grpc.RpcError) as e:
                f(b"", timeout=20)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("Nope", e.exception.details())

    def test_a_truncated_message_is_an_error(self):
        body = self.body(request("nowhere", [("a", "1")]))
        hdrs, _, _ = self.raw(body[:-3])
        self.assertEqual(grpc_status(hdrs), 13, hdrs)
        self.assertIn("truncated", hdrs["grpc-message"])
        hdrs, _, _ = self.raw(body[:3])  # not even a prefix
        self.assertEqual(grpc_status(hdrs), 13, hdrs)
        self.assert_alive()

    def test_a_message_that_does_not_parse_is_invalid_argument(self):
        hdrs, _, _ = self.raw(frame(b"\x0a\xff\xff\xff\xff\x0f"))
        self.assertEqual(grpc_status(hdrs), 3, hdrs)

    def test_two_messages_on_a_unary_call_is_an_error(self):
        one = self.body(request("nowhere", [("a", "1")]))
        hdrs, _, _ = self.raw(one + one)
        self.assertEqual(grpc_status(hdrs), 13, hdrs)

    def test_a_prefix_claiming_4_gb_is_refused_at_once(self):
        h = H2(self.s.grpc_port)
        try:
            sid = h.headers()
            h.data(sid, struct.pack(">BI", 0, 0xFFFFFFFF) + b"x" * 100,
                   end=False)
            # Answered without the rest (which never comes).
            hdrs, _, _ = h.result(sid)
            self.assertEqual(grpc_status(hdrs), 8, hdrs)
            self.assertIn("max_message_bytes", hdrs["grpc-message"])
        finally:
            h.close()
        self.assert_alive()

    def test_ten_thousand_descriptors_are_refused(self):
        req = request("nowhere", *[[("k", str(i))] for i in range(10000)])
        with self.assertRaises(grpc.RpcError) as e:
            self.call(req)
        self.assertEqual(e.exception.code(),
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assert_alive()

    def test_a_nul_byte_in_a_domain_key_or_value_is_invalid_argument(self):
        # protobuf-c reads strings up to their first NUL: "a\0x" would
        # have shared the bucket of "a".
        for req in [request("nowhere", [("k", "a\x00x")]),
                    request("nowhere", [("k\x00", "a")]),
                    request("nowhere", [("k", "v")], [("k", "\x00")]),
                    request("no\x00where", [("k", "a")])]:
            with self.assertRaises(grpc.RpcError) as e:
                self.call(req)
            self.assertEqual(e.exception.code(),
                             grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("NUL", e.exception.details())
        self.assertEqual(self.call(request("nowhere", [("k", "a")]))
                         .overall_code, OK)
        self.assert_alive()

    def test_the_descriptor_cap_is_one_and_named(self):
        for n in (257, 1025):
            req = request("nowhere", *[[("k", str(i))] for i in range(n)])
            with self.assertRaises(grpc.RpcError) as e:
                self.call(req)
            self.assertEqual(e.exception.code(),
                             grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("%d descriptors in one request; at most 256" % n,
                          e.exception.details())
        r = self.call(request("nowhere", *[[("k", str(i))]
                                           for i in range(256)]))
        self.assertEqual(len(r.statuses), 256)

    def test_grpc_connections_have_their_own_gauge(self):
        m = self.s.metrics()
        base = m.get("sluice_grpc_connections", -1)
        self.assertGreaterEqual(base, 0)
        with self.s.channel() as ch:
            self.s.rls(ch).ShouldRateLimit(request("nowhere", [("a", "1")]),
                                           timeout=20)
            # The HTTP gauge counts HTTP connections only: the scrape's.
            def counted():
                m = self.s.metrics()
                return (m["sluice_grpc_connections"] == base + 1 and
                        m["sluice_connections"] == 1)
            self.assertTrue(harness.wait_until(counted, 30),
                            self.s.metrics())
        harness.wait_until(lambda: self.s.metrics().get(
            "sluice_grpc_connections") == base, 30)

    def test_compression_is_refused_unless_identity(self):
        body = self.body(request("nowhere", [("a", "1")]))
        hdrs, _, _ = self.raw(body, extra=[("grpc-encoding", "gzip")])
        self.assertEqual(grpc_status(hdrs), 12, hdrs)
        self.assertEqual(hdrs.get("grpc-accept-encoding"), "identity")
        hdrs, _, _ = self.raw(body, extra=[("grpc-encoding", "identity")])
        self.assertEqual(grpc_status(hdrs), 0, hdrs)
        # The compressed flag without an encoding is a protocol error.
        hdrs, _, _ = self.raw(b"\x01" + body[1:])
        self.assertEqual(grpc_status(hdrs), 13, hdrs)

    def test_grpcio_gzip_calls_are_refused(self):
        with self.s.channel() as ch:
            with self.assertRaises(grpc.RpcError) as e:
                self.s.rls(ch).ShouldRateLimit(
                    request("nowhere", [("a", "1")]), timeout=20,
                    compression=grpc.Compression.Gzip)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def test_grpc_timeout_is_honoured(self):
        # Headers and no message: the deadline answers.
        hdrs, _, _ = self.raw(None, extra=[("grpc-timeout", "200m")])
        self.assertEqual(grpc_status(hdrs), 4, hdrs)
        hdrs, _, _ = self.raw(None, extra=[("grpc-timeout", "soon")])
        self.assertEqual(grpc_status(hdrs), 3, hdrs)
        hdrs, _, _ = self.raw(None, extra=[("grpc-timeout", "0n")])
        self.assertEqual(grpc_status(hdrs), 4, hdrs)

    def test_an_http1_client_is_told_what_the_port_speaks(self):
        with socket.create_connection(("127.0.0.1", self.s.grpc_port),
                                      20) as c:
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while True:
                b = c.recv(4096)
                if not b:
                    break
                data += b
        self.assertTrue(data.startswith(b"HTTP/1.1 505 "), data)
        self.assertIn(b"HTTP/2", data)
        self.assert_alive()

    def test_garbage_instead_of_the_preface_is_closed(self):
        with socket.create_connection(("127.0.0.1", self.s.grpc_port),
                                      20) as c:
            c.sendall(b"\x00\x01\x02garbage" * 10)
            c.settimeout(20)
            self.assertEqual(c.recv(4096), b"")

    # ------------------------------------------------------------ floods

    def test_partial_messages_on_many_streams_are_bounded(self):
        """100 streams each sending half of a 60 KB message and never the
        rest: the connection buffers at most 1 MiB of them; each stream
        past that sheds the oldest (RESOURCE_EXHAUSTED at once), so the
        slowest senders lose their share first."""
        h = H2(self.s.grpc_port)
        before = self.s.rss_kb()
        try:
            h.wait(lambda: h.conn.remote_settings.max_concurrent_streams
                   == 100)
            half = struct.pack(">BI", 0, 60000) + b"\x0a" * 30000
            sids = []
            for _ in range(100):
                sid = h.headers()
                sids.append(sid)
                off = 0
                while off < len(half):
                    room = min(h.conn.local_flow_control_window(sid),
                               h.conn.max_outbound_frame_size)
                    if room <= 0:
                        if not h.pump(30):
                            break
                        continue
                    h.data(sid, half[off:off + room], end=False)
                    off += room
            # 34 halves fit in 1 MiB; each stream past them sheds the
            # one that has been arriving longest.
            for sid in sids[:66]:
                hdrs, _, _ = h.result(sid, timeout=30)
                self.assertEqual(grpc_status(hdrs), 8, hdrs)
                self.assertIn("shed", hdrs["grpc-message"])
            self.assertTrue(ping(h))
            self.assertFalse(any(h.ended(sid) for sid in sids[66:]))
            self.assertLess(self.s.rss_kb() - before, 32 * 1024)
        finally:
            h.close()
        self.assert_alive()

    def test_rapid_reset_flood_ends_in_goaway(self):
        """CVE-2023-44487: streams opened and reset at once cost a token
        each; past the burst the connection gets GOAWAY."""
        import h2.errors
        h = H2(self.s.grpc_port)
        sent = 0
        try:
            for _ in range(20000):
                try:
                    sid = h.headers()
                    h.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                    h.flush()
                except (BrokenPipeError, ConnectionResetError):
                    break
                except Exception:  # h2 refuses once GOAWAY came in
                    break
                sent += 1
                if sent % 100 == 0:
                    h.sock.setblocking(False)
                    try:
                        data = h.sock.recv(65536)
                        if not data:
                            break
                        h.events += h.conn.receive_data(data)
                    except BlockingIOError:
                        pass
                    except Exception:
                        break
                    finally:
                        h.sock.setblocking(True)
                    if h.goaway():
                        break
            h.wait(lambda: h.goaway() is not None or h.closed, 30)
            self.assertIsNotNone(h.goaway())
            self.assertLess(sent, 5000)  # cut off well before the end
            self.assertEqual(h.goaway().error_code,
                             h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        finally:
            h.close()
        # Said once in the log (with the peer) and counted.
        self.assertTrue(harness.wait_until(
            lambda: "too many streams reset" in self.s.log(), 30))
        line = [x for x in self.s.log().splitlines()
                if "too many streams reset" in x][0]
        self.assertIn("127.0.0.1:", line)
        self.assertGreaterEqual(self.s.metrics().get(
            'sluice_grpc_connections_refused_total{reason="reset_flood"}',
            0), 1)
        self.assert_alive()

    def raw_frames(self, frames, must_close=True):
        """Sends the preface and frames; returns what came back until
        the server closed (or, when must_close is false, until it has
        been quiet for a while: a server that keeps up with a flood of
        frames it must only acknowledge may leave the connection open)."""
        from hyperframe.frame import SettingsFrame
        c = socket.create_connection(("127.0.0.1", self.s.grpc_port), 20)
        out = b""
        try:
            c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                      SettingsFrame(0).serialize())
            for f in frames:
                try:
                    c.sendall(f)
                except (BrokenPipeError, ConnectionResetError):
                    break
            c.settimeout(20)
            while True:
                try:
                    b = c.recv(65536)
                except ConnectionResetError:
                    break
                except TimeoutError:
                    if must_close:
                        raise
                    break
                if not b:
                    break
                out += b
        finally:
            c.close()
        return out

    def goaway_of(self, data):
        from hyperframe.frame import Frame, GoAwayFrame
        while len(data) >= 9:
            f, length = Frame.parse_frame_header(memoryview(data[:9]))
            f.parse_body(memoryview(data[9:9 + length]))
            if isinstance(f, GoAwayFrame):
                return f
            data = data[9 + length:]
        return None

    def test_continuation_flood_ends_in_goaway(self):
        """CVE-2024-28182: HEADERS followed by endless CONTINUATION."""
        import hpack
        from hyperframe.frame import ContinuationFrame, HeadersFrame
        block = hpack.Encoder().encode(
            [(":method", "POST"), (":scheme", "http"), (":path", RLS),
             (":authority", "x"), ("content-type", "application/grpc")] +
            [("x-flood-%d" % i, "v" * 50) for i in range(2000)])
        piece = 64
        frames = [HeadersFrame(1, block[:piece]).serialize()]
        for off in range(piece, min(len(block), piece * 2000), piece):
            frames.append(ContinuationFrame(
                1, block[off:off + piece]).serialize())
        g = self.goaway_of(self.raw_frames(frames))
        self.assertIsNotNone(g)
        self.assertEqual(g.error_code, 11)  # ENHANCE_YOUR_CALM
        self.assertTrue(harness.wait_until(lambda: self.s.metrics().get(
            'sluice_grpc_connections_refused_total{reason="header_flood"}',
            0) >= 1, 30))
        self.assert_alive()

    def test_a_huge_header_list_resets_the_stream(self):
        h = H2(self.s.grpc_port)
        try:
            sid = h.headers(extra=[("x-big-%d" % i, "v" * 1000)
                                   for i in range(40)], end=True)
            hdrs, _, reset = h.result(sid)
            self.assertTrue(reset is not None or h.closed, hdrs)
        finally:
            h.close()
        self.assert_alive()

    def test_settings_and_ping_floods_do_not_grow_memory(self):
        from hyperframe.frame import PingFrame, SettingsFrame
        frames = []
        for i in range(5000):
            frames.append(PingFrame(0, opaque_data=b"12345678").serialize())
            frames.append(SettingsFrame(0).serialize())
        # Whether nghttp2 cuts the connection off (its queue of unsent
        # acknowledgements full) or keeps up depends on how fast this
        # client's socket drains on a busy machine; either way the server
        # must stay up and answer others.
        self.raw_frames(frames, must_close=False)
        self.assert_alive()


class GrpcCutOffLogTest(unittest.TestCase):
    def test_each_cut_off_is_logged_once_and_lines_are_rate_limited(self):
        """Connections cut off together make at most one log line a
        second per thread; each line counts the ones it left out, so the
        lines and their counts add up to every connection cut off, once
        each."""
        import re
        import threading
        import time
        import hpack
        from hyperframe.frame import (ContinuationFrame, HeadersFrame,
                                      SettingsFrame)
        block = hpack.Encoder().encode(
            [(":method", "POST"), (":path", RLS)] +
            [("x-flood-%d" % i, "v" * 50) for i in range(200)])
        flood = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + \
            SettingsFrame(0).serialize() + \
            HeadersFrame(1, block[:64]).serialize() + b"".join(
                ContinuationFrame(1, block[o:o + 64]).serialize()
                for o in range(64, 64 * 40, 64))
        line = re.compile(r"grpc: connection from 127\.0\.0\.1:\d+ cut off: "
                          r"endless CONTINUATION frames"
                          r"(?: \(and (\d+) more cut off since the last "
                          r"such line\))?$")
        protos()
        with GrpcSluice(envoy_config(), threads=1) as s:
            def one():
                c = socket.create_connection(("127.0.0.1", s.grpc_port), 20)
                try:
                    c.sendall(flood)
                    c.settimeout(20)
                    while c.recv(65536):
                        pass
                except OSError:
                    pass
                finally:
                    c.close()

            def reported():
                n = 0
                for x in s.log().splitlines():
                    m = line.search(x)
                    if m:
                        n += 1 + int(m.group(1) or 0)
                return n

            ts = [threading.Thread(target=one) for _ in range(10)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            refused = 'sluice_grpc_connections_refused_total' \
                '{reason="header_flood"}'
            self.assertTrue(harness.wait_until(
                lambda: s.metrics().get(refused) == 10, 30))
            # One more, a second later: its line reports the ones the
            # first second's line left out.
            time.sleep(1.1)
            one()
            self.assertTrue(harness.wait_until(
                lambda: s.metrics().get(refused) == 11, 30))
            self.assertTrue(harness.wait_until(lambda: reported() == 11, 30),
                            s.log())
            self.assertLessEqual(len([x for x in s.log().splitlines()
                                      if line.search(x)]), 11)


class GrpcListenTest(unittest.TestCase):
    def test_a_unix_socket_listener(self):
        protos()
        d = tempfile.mkdtemp(prefix="sluice-grpc-unix-")
        harness._dirs.append(d)
        path = os.path.join(d, "grpc.sock")
        with GrpcSluice(envoy_config(), unix=path, threads=2) as s:
            with s.channel() as ch:
                for i in range(20):
                    r = s.rls(ch).ShouldRateLimit(
                        request("nowhere", [("a", str(i))]), timeout=20)
                    self.assertEqual(r.overall_code, OK)
            self.assertEqual(s.stop(), 0)
        self.assertFalse(os.path.exists(path))

    def test_a_unix_path_that_is_not_a_socket_is_left_alone(self):
        d = tempfile.mkdtemp(prefix="sluice-grpc-unix-")
        harness._dirs.append(d)
        path = os.path.join(d, "file")
        with open(path, "w") as f:
            f.write("mine")
        p = harness.run_on_free_port(lambda listen: [
            harness.SLUICE, "serve", "--listen", "127.0.0.1:%d" % listen,
            "--grpc-listen", "unix:" + path])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("not a socket", p.stderr)
        with open(path) as f:
            self.assertEqual(f.read(), "mine")

    def test_streams_that_never_send_are_closed_at_the_idle_timeout(self):
        protos()
        s = GrpcSluice(envoy_config(extra="http: {idle_timeout_ms: 1500}\n"))
        h = H2(s.grpc_port)
        try:
            sids = [h.headers() for _ in range(20)]
            for sid in sids:
                hdrs, _, _ = h.result(sid, timeout=30)
                self.assertEqual(grpc_status(hdrs), 4, hdrs)
                self.assertIn("idle", hdrs["grpc-message"])
            # Then the idle connection gets GOAWAY and is closed.
            self.assertTrue(h.wait(lambda: h.goaway() is not None, 30))
            self.assertEqual(h.goaway().error_code, 0)
            with s.channel() as ch:  # others are still answered
                r = s.rls(ch).ShouldRateLimit(
                    request("alive", [("k", "v")]), timeout=20)
            self.assertEqual(r.overall_code, OK)
        finally:
            h.close()
            s.stop()

    def test_an_old_connection_gets_goaway_then_closes_after_the_grace(self):
        # grpc.max_connection_age_ms: a connection holding an open stream
        # (a health Watch) is told GOAWAY once it is that old, and closed
        # once the grace has passed too, so that Envoy's connections
        # spread over the replicas again.  The idle timeout is far off.
        protos()
        s = GrpcSluice(envoy_config(
            extra="http: {idle_timeout_ms: 600000}\n"
                  "grpc: {max_connection_age_ms: 500, "
                  "max_connection_age_grace_ms: 2000}\n"))
        h = H2(s.grpc_port)
        try:
            sid = h.headers(path="/grpc.health.v1.Health/Watch")
            h.data(sid, frame(b""), end=True)
            self.assertTrue(h.wait(lambda: h.goaway() is not None, 30))
            self.assertEqual(h.goaway().error_code, 0)
            self.assertFalse(h.ended(sid))  # the Watch was still open
            self.assertTrue(h.wait(lambda: h.closed, 30))
            with s.channel() as ch:  # a new connection is answered
                r = s.rls(ch).ShouldRateLimit(
                    request("alive", [("k", "v")]), timeout=20)
            self.assertEqual(r.overall_code, OK)
        finally:
            h.close()
            s.stop()

    def test_a_grpc_port_in_use_is_an_error(self):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        try:
            port = taken.getsockname()[1]
            p = harness.run_on_free_port(lambda listen: [
                harness.SLUICE, "serve", "--listen", "127.0.0.1:%d" % listen,
                "--grpc-listen", "127.0.0.1:%d" % port])
        finally:
            taken.close()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("127.0.0.1:%d" % port, p.stderr)
        self.assertIn("in use", p.stderr)

    def test_config_errors_name_the_line(self):
        path, p = harness.check_config(
            "listen: 127.0.0.1:9\n\ngrpc:\n  listen: nowhere\n")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("%s:4" % path, p.stdout + p.stderr)
        _, p = harness.check_config(
            "grpc: {listen: 127.0.0.1:1, max_message_bytes: 1}\n", path)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("max_message_bytes", p.stdout + p.stderr)
        p = subprocess.run([harness.SLUICE, "serve", "--grpc-listen", "x"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--grpc-listen", p.stderr)

    def test_a_larger_message_cap_lets_the_engine_judge_the_count(self):
        protos()
        with GrpcSluice(envoy_config(
                extra="grpc: {max_message_bytes: 1048576}\n")) as s:
            req = request("nowhere", *[[("k", str(i))]
                                       for i in range(10000)])
            with s.channel() as ch:
                with self.assertRaises(grpc.RpcError) as e:
                    s.rls(ch).ShouldRateLimit(req, timeout=30)
            self.assertEqual(e.exception.code(),
                             grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("descriptors", e.exception.details())

    def test_sigterm_sends_goaway_and_exits(self):
        protos()
        s = GrpcSluice(envoy_config())
        h = H2(s.grpc_port)
        try:
            sid = h.call(frame(request("nowhere", [("a", "1")])
                               .SerializeToString()))
            hdrs, _, _ = h.result(sid)
            self.assertEqual(grpc_status(hdrs), 0)
            s.signal(signal.SIGTERM)
            self.assertTrue(h.wait(lambda: h.goaway() is not None, 30))
            self.assertEqual(s.wait(30), 0)
        finally:
            h.close()
            s.stop()

    def test_draining_says_not_serving_and_answers_what_was_sent(self):
        """SIGTERM: a shutdown notice first (GOAWAY naming the last
        possible stream), so calls already on the wire are still
        answered, Health/Check with NOT_SERVING; the final GOAWAY comes
        once the last call is answered, then the process exits 0."""
        from hyperframe.frame import DataFrame, GoAwayFrame, HeadersFrame
        protos()
        s = GrpcSluice(envoy_config())
        h = H2(s.grpc_port)
        try:
            h.wait(lambda: h.conn.remote_settings.max_concurrent_streams
                   == 100)
            held = h.headers()  # a call in flight: headers, no message
            # A PING answered after them: the server has the call.
            self.assertTrue(h.ping(b"in-order"))
            s.signal(signal.SIGTERM)
            self.assertTrue(harness.wait_until(
                lambda: "draining" in s.log(), 30))
            # Sent before reading the notice (h2 would refuse after it).
            sid = h.headers(path="/grpc.health.v1.Health/Check")
            h.data(sid, frame(b""))
            frames = []
            for batch in h.raw_frames(30):
                frames += batch
                if any(f.stream_id == sid and "END_STREAM" in f.flags
                       for f in batch):
                    break
            else:
                self.fail("closed before the answer")
            goaways = [f for f in frames if isinstance(f, GoAwayFrame)]
            self.assertEqual(goaways[0].last_stream_id, 2 ** 31 - 1)
            body = b"".join(f.data for f in frames
                            if isinstance(f, DataFrame) and
                            f.stream_id == sid)
            status = [dict(h.conn.decoder.decode(f.data))
                      for f in frames if isinstance(f, HeadersFrame)
                      and f.stream_id == sid]
            self.assertEqual(status[-1].get("grpc-status"), "0", status)
            resp = protos().health_pb2.HealthCheckResponse.FromString(
                body[5:])
            self.assertEqual(resp.status, 2)  # NOT_SERVING
            # The call in flight finishes; then the last GOAWAY, and exit.
            msg = frame(request("nowhere", [("a", "1")]).SerializeToString())
            df = DataFrame(held, data=msg)
            df.flags.add("END_STREAM")
            h.sock.sendall(df.serialize())
            later = [f for batch in h.raw_frames(30) for f in batch]
            answer = {}
            for f in later:
                if isinstance(f, HeadersFrame) and f.stream_id == held:
                    answer.update(dict(h.conn.decoder.decode(f.data)))
            self.assertEqual(answer.get("grpc-status"), "0", answer)
            final = [f for f in later if isinstance(f, GoAwayFrame)]
            self.assertEqual(final[-1].last_stream_id, sid)
            self.assertEqual(final[-1].error_code, 0)
            self.assertEqual(s.wait(30), 0)
        finally:
            h.close()
            s.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
