#!/usr/bin/env python3
"""What a gRPC client can make the server hold is counted in one budget,
shared fairly: requests sent slowly, answers never read, a connection that
takes no answer; another client is still answered.  Raw HTTP/2
(python3-h2) makes what grpcio never sends.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

from grpc_harness import (H2, GrpcSluice, envoy_config, frame,  # noqa: E402
                          ping, protos, request, send_window)

RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OK = 1


def grpc_status(hdrs):
    return int(hdrs["grpc-status"]) if "grpc-status" in hdrs else None


class GrpcBudgetTest(unittest.TestCase):
    """What a client can make the server hold is counted in one budget,
    shared fairly."""

    def test_slow_senders_cannot_take_the_request_budget(self):
        """Streams that announce 64 KiB messages and never finish them,
        1 MiB a connection, fill the thread's 16 MiB to the byte; another
        client's ShouldRateLimit is still answered: the request that has
        been arriving longest is shed (RESOURCE_EXHAUSTED) to make room,
        not the newcomer refused."""
        protos()
        s = GrpcSluice(envoy_config())
        conns = []
        try:
            chunk = frame(b"", length=65536) + b"\0" * (65535 - 5)
            sids = []
            for _ in range(16):  # 16 x 16 x 65535 bytes
                h = H2(s.grpc_port)
                conns.append(h)
                h.wait(lambda: h.conn.remote_settings.max_concurrent_streams
                       == 100)
                for _ in range(16):
                    sid = h.headers()
                    send_window(h, sid, chunk)
                    sids.append((h, sid))
                self.assertTrue(ping(h))
            # The 256 bytes left, on a connection of their own.
            h = H2(s.grpc_port)
            conns.append(h)
            sid = h.headers()
            send_window(h, sid, frame(b"", length=1000) + b"\0" * 251)
            self.assertTrue(ping(h))
            with s.channel() as ch:
                r = s.rls(ch).ShouldRateLimit(
                    request("wide", [("k", "victim")]), timeout=30)
            self.assertEqual(r.overall_code, OK)
            # The oldest slow request paid for it.
            first, fsid = sids[0]
            hdrs, _, _ = first.result(fsid, timeout=60)
            self.assertEqual(grpc_status(hdrs), 8, hdrs)
            self.assertIn("shed", hdrs["grpc-message"])
        finally:
            for h in conns:
                h.close()
            s.stop()

    def window_zero(self, s):
        import h2.settings
        h = H2(s.grpc_port)
        h.conn.update_settings(
            {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        h.flush()
        return h

    def test_answers_a_client_never_reads_count_in_the_budget(self):
        """Connections whose flow-control window is 0 keep their answers
        unsent: those count in the thread's 16 MiB budget, and past it
        calls get RESOURCE_EXHAUSTED (trailers-only, which a window of 0
        does not hold back)."""
        import h2.events
        protos()
        s = GrpcSluice(envoy_config(extra="http: {idle_timeout_ms: 600000}\n"))
        req = request("wide", *[[("k", "v%d" % i)] for i in range(256)])
        body = frame(req.SerializeToString())
        conns = []
        try:
            with s.channel() as ch:
                answer = len(s.rls(ch).ShouldRateLimit(
                    req, timeout=30).SerializeToString())
            self.assertGreater(answer, 4096)
            ok = refused = 0
            for _ in range(1 + 20 * 1024 * 1024 // (100 * answer)):
                h = self.window_zero(s)
                conns.append(h)
                sids = []
                for _ in range(100):
                    sids.append(h.headers())
                    send_window(h, sids[-1], body, end=True)

                def heard(sid):
                    return any(isinstance(e, (h2.events.ResponseReceived,
                                              h2.events.StreamEnded,
                                              h2.events.StreamReset))
                               and e.stream_id == sid for e in h.events)
                self.assertTrue(h.wait(lambda: all(heard(x) for x in sids),
                                       60))
                for sid in sids:
                    if h.ended(sid):
                        refused += 1
                    else:
                        ok += 1
            self.assertGreater(refused, 0)
            self.assertLessEqual(ok * answer, 16 * 1024 * 1024)
        finally:
            for h in conns:
                h.close()
            s.stop()

    def test_a_connection_that_takes_no_answer_is_closed(self):
        """A connection with answers waiting on a window of 0 is closed
        once the idle timeout passes without a byte of them taken (PINGs
        answered meanwhile do not keep it)."""
        protos()
        s = GrpcSluice(envoy_config(extra="http: {idle_timeout_ms: 1500}\n"))
        h = self.window_zero(s)
        try:
            body = frame(request("wide", [("k", "v")]).SerializeToString())
            for _ in range(10):
                h.call(body)
            for _ in range(3):
                if not ping(h):
                    break
            self.assertTrue(h.wait(lambda: h.closed, 60))
            with s.channel() as ch:
                r = s.rls(ch).ShouldRateLimit(
                    request("wide", [("k", "after")]), timeout=30)
            self.assertEqual(r.overall_code, OK)
        finally:
            h.close()
            s.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
