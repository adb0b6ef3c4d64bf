#!/usr/bin/env python3
"""Records the seed corpus of fuzz_grpc (tests/fuzz/corpus/fuzz_grpc).

Real grpcio clients (Debian's python3-grpcio) call `sluice serve` through
a recording proxy on loopback: each connection's client-to-server bytes
become one seed.  Floods and odd inputs grpcio never sends are built with
python3-h2 / hyperframe.  Each seed starts with fuzz_grpc's two control
bytes (read size, sweeps/drain/response headers).

    SLUICE_BUILD=build-test python3 tests/fuzz/grpc_seeds.py
"""
import os
import socket
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

import grpc  # noqa: E402
from grpc_harness import GrpcSluice, envoy_config, protos, request  # noqa

OUT = os.path.join(HERE, "corpus", "fuzz_grpc")
FUZZ_YAML = """
domain: fuzz
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 2}
"""


class Recorder:
    """A loopback TCP proxy keeping what each client sent."""

    def __init__(self, port):
        self.port = port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.addr = "127.0.0.1:%d" % self.lsock.getsockname()[1]
        self.sent = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            s = socket.create_connection(("127.0.0.1", self.port), 20)
            rec = bytearray()
            self.sent.append(rec)
            threading.Thread(target=self.pump, args=(c, s, rec),
                             daemon=True).start()
            threading.Thread(target=self.pump, args=(s, c, None),
                             daemon=True).start()

    @staticmethod
    def pump(src, dst, rec):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if rec is not None:
                    rec += b
                dst.sendall(b)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def save(name, ctl, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes(ctl) + bytes(data))


def recorded(rec, name, ctl, fn):
    """Runs fn(channel) on a new channel through the recorder; saves what
    the client sent."""
    before = len(rec.sent)
    ch = grpc.insecure_channel(rec.addr)
    try:
        fn(ch)
    except grpc.RpcError:
        pass
    ch.close()
    grpc_harness.harness.wait_until(lambda: len(rec.sent) > before, 10)
    save(name, ctl, rec.sent[before])


def main():
    os.makedirs(OUT, exist_ok=True)
    p = protos()
    s = GrpcSluice(envoy_config({"fuzz.yaml": FUZZ_YAML}))
    try:
        rec = Recorder(s.grpc_port)
        rls = p.rls_grpc.RateLimitServiceStub
        hl = p.health_grpc.HealthStub
        hreq = p.health_pb2.HealthCheckRequest

        def calls(ch):
            stub = rls(ch)
            for _ in range(3):
                stub.ShouldRateLimit(request("fuzz", [("k", "v")],
                                             [("k", "x")]), timeout=20)
            stub.ShouldRateLimit(request(
                "fuzz", {"entries": [("k", "y")], "limit": (3, 2),
                         "hits": 2}, hits_addend=2), timeout=20)
        recorded(rec, "rls_calls", [0xff, 0x00], calls)
        recorded(rec, "rls_small_reads", [0x04, 0x01], calls)

        def health(ch):
            h = hl(ch)
            h.Check(hreq(service=""), timeout=20)
            h.Check(hreq(service="ratelimit"), timeout=20)
            try:
                h.Check(hreq(service="other"), timeout=20)
            except grpc.RpcError:
                pass
            it = h.Watch(hreq(service="ratelimit"), timeout=20)
            next(it)
            it.cancel()
        recorded(rec, "health", [0x80, 0x01], health)
        recorded(rec, "health_drain", [0x80, 0x0b], health)

        def errors(ch):
            for req in (request("fuzz", [("k", "a\x00b")]),
                        request("", [("k", "v")]),
                        request("fuzz", *[[("k", str(i))]
                                          for i in range(300)])):
                try:
                    rls(ch).ShouldRateLimit(req, timeout=20)
                except grpc.RpcError:
                    pass
            try:
                ch.unary_unary("/x.Y/Z")(b"", timeout=20)
            except grpc.RpcError:
                pass
            rls(ch).ShouldRateLimit(request("fuzz", [("k", "v")]),
                                    timeout=0.5)
        recorded(rec, "errors", [0x40, 0x00], errors)
    finally:
        s.stop()

    # What grpcio never sends.
    import h2.config
    import h2.connection
    import h2.errors
    import hpack
    from hyperframe.frame import (ContinuationFrame, HeadersFrame,
                                  PingFrame, SettingsFrame)

    def client():
        c = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        c.initiate_connection()
        return c
    hdrs = [(":method", "POST"), (":scheme", "http"),
            (":path", "/envoy.service.ratelimit.v3.RateLimitService/"
             "ShouldRateLimit"),
            (":authority", "x"), ("content-type", "application/grpc"),
            ("grpc-timeout", "5S")]
    c = client()
    for _ in range(300):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, hdrs)
        c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    save("rapid_reset", [0xff, 0x00], c.data_to_send())

    c = client()
    pre = c.data_to_send()
    block = hpack.Encoder().encode(
        hdrs + [("x-flood-%d" % i, "v" * 20) for i in range(100)])
    frames = [HeadersFrame(1, block[:32]).serialize()]
    for off in range(32, len(block), 32):
        frames.append(ContinuationFrame(1, block[off:off + 32]).serialize())
    save("continuation_flood", [0xff, 0x00], pre + b"".join(frames))

    c = client()
    pre = c.data_to_send()
    save("ping_settings_flood", [0xff, 0x00], pre + b"".join(
        PingFrame(0, opaque_data=b"12345678").serialize() +
        SettingsFrame(0).serialize() for _ in range(300)))

    c = client()
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, hdrs)
    c.send_data(sid, b"\x00\xff\xff\xff\xff" + b"x" * 50)
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, hdrs + [("grpc-encoding", "gzip")], end_stream=True)
    save("big_prefix_and_gzip", [0x20, 0x00], c.data_to_send())

    save("http1", [0xff, 0x00],
         b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    budget_seeds(client, hdrs)


def budget_seeds(client, hdrs):
    """The budget's cases: slow senders holding partial messages (shed
    oldest first), and a client whose window of 0 holds every answer."""
    import h2.settings
    c = client()
    for i in range(40):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, hdrs)
        # A 64 KiB message announced, 1,500 bytes of it sent, no end.
        c.send_data(sid, b"\x00\x00\x01\x00\x00" + b"\x0a" * 1495)
    save("slow_senders", [0xff, 0x01], c.data_to_send())

    body = request("fuzz", *[[("k", "v%d" % i)] for i in range(64)]) \
        .SerializeToString()
    c = client()
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    for i in range(30):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, hdrs)
        c.send_data(sid, b"\x00" + len(body).to_bytes(4, "big") + body,
                    end_stream=True)
    save("window_zero", [0xff, 0x03], c.data_to_send())


if __name__ == "__main__":
    main()
