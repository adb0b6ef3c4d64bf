"""Helpers for the gRPC tests (test_grpc_*.py).

- use_system_python(): grpcio, grpc_tools and h2 come from Debian
  (python3-grpcio, python3-grpc-tools, python3-h2): a test started by
  another Python (pyenv, a venv) re-executes itself with /usr/bin/python3.
- protos(): compiles sluice's proto/ with grpc_tools.protoc into a
  temporary directory (once per process) and returns the modules.
- GrpcSluice: `sluice serve` with --grpc-listen on a free port.
- H2: a raw HTTP/2 client (python3-h2) for what grpcio will not send.
"""
import os
import shutil
import socket
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Sluice  # noqa: E402

SYSTEM_PYTHON = "/usr/bin/python3"


def use_system_python():
    try:
        import grpc  # noqa: F401 (only whether it imports)
        import grpc_tools  # noqa: F401
        import h2  # noqa: F401
    except ImportError:
        if (os.path.exists(SYSTEM_PYTHON) and
                os.path.realpath(sys.executable) !=
                os.path.realpath(SYSTEM_PYTHON)):
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
        raise


class Protos:
    pass


_protos = None


def protos():
    """The generated modules: rls_pb2, rls_grpc, desc_pb2 (the descriptor),
    health_pb2, health_grpc; for xDS disc_pb2, disc_grpc (discovery and
    ADS) and rlconf_pb2 (RateLimitConfig)."""
    global _protos
    if _protos is not None:
        return _protos
    from grpc_tools import protoc
    import grpc_tools
    out = tempfile.mkdtemp(prefix="sluice-grpc-py-")
    harness._dirs.append(out)
    src = os.path.join(harness.SRC, "proto")
    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    # health.proto is compiled from a copy at the top: its output would
    # otherwise be a package named `grpc`, hiding grpcio's.
    hdir = os.path.join(out, "health")
    os.mkdir(hdir)
    shutil.copy(os.path.join(src, "grpc/health/v1/health.proto"), hdir)
    files = ["envoy/service/ratelimit/v3/rls.proto",
             "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
             "envoy/config/core/v3/base.proto",
             "envoy/type/v3/ratelimit_unit.proto", "health.proto",
             "envoy/service/discovery/v3/discovery.proto",
             "ratelimit/config/ratelimit/v3/rls_conf.proto",
             "google/rpc/status.proto"]
    # The real well-known types come first: our copies of Duration and
    # UInt64Value are then checked against them on the wire.
    rc = protoc.main(["protoc", "-I" + wkt, "-I" + src, "-I" + hdir,
                      "--python_out=" + out, "--grpc_python_out=" + out] +
                     files)
    if rc != 0:
        raise RuntimeError("grpc_tools.protoc failed: %d" % rc)
    sys.path.append(out)
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
    import health_pb2
    import health_pb2_grpc
    from envoy.service.discovery.v3 import discovery_pb2, discovery_pb2_grpc
    from ratelimit.config.ratelimit.v3 import rls_conf_pb2
    p = Protos()
    p.disc_pb2, p.disc_grpc = discovery_pb2, discovery_pb2_grpc
    p.rlconf_pb2 = rls_conf_pb2
    p.rls_pb2, p.rls_grpc, p.desc_pb2 = rls_pb2, rls_pb2_grpc, ratelimit_pb2
    p.health_pb2, p.health_grpc = health_pb2, health_pb2_grpc
    _protos = p
    return p


def request(domain, *descriptors, hits_addend=0):
    """A RateLimitRequest; each descriptor a list of (key, value) pairs or
    a dict {"entries": [...], "limit": (rpu, unit), "hits": n}."""
    p = protos()
    req = p.rls_pb2.RateLimitRequest(domain=domain, hits_addend=hits_addend)
    for d in descriptors:
        if not isinstance(d, dict):
            d = {"entries": d}
        pd = req.descriptors.add()
        for k, v in d["entries"]:
            pd.entries.add(key=k, value=v)
        if "limit" in d:
            pd.limit.requests_per_unit = d["limit"][0]
            pd.limit.unit = d["limit"][1]
        if "hits" in d:
            pd.hits_addend.value = d["hits"]
    return req


def envoy_dir(files):
    """A temporary envoyproxy/ratelimit config directory: {name: text}."""
    d = tempfile.mkdtemp(prefix="sluice-envoy-")
    harness._dirs.append(d)
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    return d


# A domain whose limits no test reaches: the transport tests' engine.
WIDE = """
domain: wide
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000000000}
"""


def envoy_config(files=None, extra=""):
    """sluice's config text with an envoy: section over a new directory
    holding files ({name: text}; by default the `wide` domain)."""
    d = envoy_dir(files or {"wide.yaml": WIDE})
    return "envoy: {config_dir: %s}\n%s" % (d, extra)


class GrpcSluice(Sluice):
    """`sluice serve` with its gRPC listener on a free loopback port (or
    the Unix socket `unix`)."""

    def __init__(self, config=None, threads=None, extra=(), unix=None):
        def argv():
            # Chosen again at each attempt: a port taken between choosing
            # and binding fails the attempt (harness.start_listening).
            if unix:
                self.grpc_addr = "unix:" + unix
                self.grpc_target = "unix:" + unix
                self.grpc_port = None
            else:
                self.grpc_port = harness.free_port()
                self.grpc_addr = "127.0.0.1:%d" % self.grpc_port
                self.grpc_target = self.grpc_addr
            return ["--grpc-listen", self.grpc_addr] + list(extra)
        super().__init__(config, threads, argv)
        if self.grpc_port:
            harness.wait_for_port(self.grpc_port, proc=self)
        else:
            harness.wait_until(lambda: os.path.exists(unix), 20)

    def channel(self):
        import grpc
        return grpc.insecure_channel(self.grpc_target)

    def rls(self, channel=None):
        return protos().rls_grpc.RateLimitServiceStub(
            channel or self.channel())

    def health(self, channel=None):
        return protos().health_grpc.HealthStub(channel or self.channel())

    def rss_kb(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def frame(msg, flag=0, length=None):
    """A gRPC length-prefixed message."""
    return struct.pack(">BI", flag, len(msg) if length is None else length) \
        + msg


def rls_stub(test, s):
    """(a channel to s's gRPC port, a RateLimitService stub on it); the
    channel is closed after test."""
    ch = s.channel()
    test.addCleanup(ch.close)
    return ch, s.rls(ch)


class H2:
    """One HTTP/2 connection driven by hand (h2's state machine, our
    socket), for requests grpcio never sends."""

    def __init__(self, port, timeout=20):
        import h2.config
        import h2.connection
        self.sock = socket.create_connection(("127.0.0.1", port), timeout)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True,
                                      header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()
        self.events = []
        self.closed = False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def headers(self, path="/envoy.service.ratelimit.v3.RateLimitService/"
                "ShouldRateLimit", ctype="application/grpc", extra=(),
                end=False, method="POST"):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", "http"),
                (":authority", "localhost"), (":path", path)]
        if ctype:
            hdrs.append(("content-type", ctype))
        hdrs += [("te", "trailers")] + list(extra)
        self.conn.send_headers(sid, hdrs, end_stream=end)
        self.flush()
        return sid

    def data(self, sid, data, end=True):
        self.conn.send_data(sid, data, end_stream=end)
        self.flush()

    def call(self, body, **kw):
        sid = self.headers(**kw)
        self.data(sid, body)
        return sid

    def pump(self, timeout=20):
        """Reads once; returns False when the peer closed."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            return False
        import h2.exceptions
        try:
            self.events += self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closed = True
            return False
        try:
            self.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        return True

    def wait(self, pred, timeout=20):
        deadline = time.monotonic() + timeout
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0 or not self.pump(left):
                return pred()
        return True

    def ping(self, data):
        """A PING, then waits for its ACK (the server has read all that
        came before it); whether it came."""
        import h2.events
        self.conn.ping(data)
        self.flush()
        return self.wait(lambda: any(
            isinstance(e, h2.events.PingAckReceived) for e in self.events))

    def raw_frames(self, timeout=30):
        """The frames the peer sends, read past h2's state machine (which
        stops at a GOAWAY, even one that still takes every stream): a
        list for each read of the socket, until the peer closes.  HPACK
        state stays h2's, so nothing may be read through h2 afterwards."""
        from hyperframe.frame import Frame
        buf = b""
        self.sock.settimeout(timeout)
        while True:
            data = self.sock.recv(65536)
            if not data:
                return
            buf += data
            frames = []
            while len(buf) >= 9:
                f, n = Frame.parse_frame_header(memoryview(buf[:9]))
                if len(buf) < 9 + n:
                    break
                f.parse_body(memoryview(buf[9:9 + n]))
                buf = buf[9 + n:]
                frames.append(f)
            yield frames

    def ended(self, sid):
        import h2.events
        return any(isinstance(e, (h2.events.StreamEnded,
                                  h2.events.StreamReset)) and
                   e.stream_id == sid for e in self.events)

    def result(self, sid, timeout=20):
        """(headers dict incl. trailers, body bytes, reset code or None)."""
        import h2.events
        self.wait(lambda: self.ended(sid), timeout)
        hdrs, body, reset = {}, b"", None
        for e in self.events:
            if getattr(e, "stream_id", None) != sid:
                continue
            if isinstance(e, (h2.events.ResponseReceived,
                              h2.events.TrailersReceived)):
                hdrs.update(dict(e.headers))
            elif isinstance(e, h2.events.DataReceived):
                body += e.data
                self.conn.acknowledge_received_data(
                    e.flow_controlled_length, sid)
            elif isinstance(e, h2.events.StreamReset):
                reset = e.error_code
        return hdrs, body, reset

    def raw_results(self, sids, timeout=30):
        """Reads frames past h2's state machine (raw_frames()) until each
        of sids has ended: {sid: (headers incl. trailers, body)}, and the
        GOAWAY frames seen."""
        from hyperframe.frame import (ContinuationFrame, DataFrame,
                                      GoAwayFrame, HeadersFrame)
        out = {sid: ({}, b"") for sid in sids}
        ended, goaways, block = set(), [], {}
        for frames in self.raw_frames(timeout):
            for f in frames:
                if isinstance(f, GoAwayFrame):
                    goaways.append(f)
                if isinstance(f, (HeadersFrame, ContinuationFrame)):
                    block[f.stream_id] = block.get(f.stream_id, b"") + f.data
                    if "END_HEADERS" in f.flags:
                        hdrs = dict(self.conn.decoder.decode(
                            block.pop(f.stream_id)))
                        if f.stream_id in out:
                            out[f.stream_id][0].update(hdrs)
                if isinstance(f, DataFrame) and f.stream_id in out:
                    h, b = out[f.stream_id]
                    out[f.stream_id] = (h, b + f.data)
                if "END_STREAM" in getattr(f, "flags", ()) and \
                        f.stream_id in out:
                    ended.add(f.stream_id)
            if len(ended) == len(sids):
                break
        return out, goaways

    def goaway(self):
        import h2.events
        for e in self.events:
            if isinstance(e, h2.events.ConnectionTerminated):
                return e
        return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def send_window(h, sid, data, end=False):
    """Sends data on sid as the flow-control windows allow, reading the
    server's WINDOW_UPDATEs between."""
    while data:
        w = min(h.conn.local_flow_control_window(sid),
                h.conn.max_outbound_frame_size)
        if w <= 0:
            if not h.pump(20):
                raise AssertionError("the server closed the connection")
            continue
        h.conn.send_data(sid, data[:w], end_stream=end and len(data) <= w)
        h.flush()
        data = data[w:]


def ping(h):
    """Returns once the server has read everything sent before."""
    import h2.events
    n = sum(isinstance(e, h2.events.PingAckReceived) for e in h.events)
    h.conn.ping(b"%08d" % n)
    h.flush()
    return h.wait(lambda: sum(isinstance(e, h2.events.PingAckReceived)
                              for e in h.events) > n, 30)
