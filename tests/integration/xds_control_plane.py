"""An xDS control plane for the integration tests, written with grpcio
(Debian's python3-grpcio): an AggregatedDiscoveryService that pushes
DiscoveryResponses of
type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig to every
open stream and records every DiscoveryRequest a client sends, as Envoy
Gateway serves envoyproxy/ratelimit (CONFIG_TYPE=GRPC_XDS_SOTW)."""
import os
import queue
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

import grpc  # noqa: E402
from grpc_harness import protos  # noqa: E402

TYPE_URL = ("type.googleapis.com/"
            "ratelimit.config.ratelimit.v3.RateLimitConfig")
SECOND, MINUTE, HOUR, DAY = 1, 2, 3, 4


def rl_config(name, domain, descriptors):
    """A RateLimitConfig; descriptors: [(key, value, (unit, rpu) or None,
    [children])]."""
    p = protos().rlconf_pb2

    def fill(dst, items):
        for key, value, limit, children in items:
            d = dst.add(key=key, value=value or "")
            if limit is not None:
                d.rate_limit.unit = limit[0]
                d.rate_limit.requests_per_unit = limit[1]
            fill(d.descriptors, children)
    c = p.RateLimitConfig(name=name, domain=domain)
    fill(c.descriptors, descriptors)
    return c


def api_config(rpu, unit=MINUTE, name="api-config"):
    return rl_config(name, "api", [("user", None, (unit, rpu), [])])


class ControlPlane:
    """An ADS server on a loopback port (the same port again after
    restart()); set() pushes a version to every stream, requests holds
    what sluice sent."""

    def __init__(self, port=None, tls=None, require=None):
        self.lock = threading.Condition()
        self.requests = []
        self.metadata = []  # each stream's call metadata, a dict
        self.require = require  # (name, value) a call must carry
        self.streams = []
        self.current = None
        self.nonce = 0
        self.tls = tls
        self.peers = []  # each stream's client certificate CN
        self.server = None
        self.port = port
        self.start()

    def start(self):
        p = protos()
        cp = self

        class Ads(p.disc_grpc.AggregatedDiscoveryServiceServicer):
            def StreamAggregatedResources(self, it, context):
                return cp._stream(it, context)

        self.server = grpc.server(futures.ThreadPoolExecutor(16))
        p.disc_grpc.add_AggregatedDiscoveryServiceServicer_to_server(
            Ads(), self.server)
        addr = "127.0.0.1:%d" % (self.port or 0)
        for _ in range(100):
            if self.tls:
                port = self.server.add_secure_port(addr, self.tls)
            else:
                port = self.server.add_insecure_port(addr)
            if port:
                break
            time.sleep(0.1)  # the old server's socket is going away
        self.port = port
        self.server.start()

    def stop(self):
        self.server.stop(0).wait(30)
        with self.lock:
            for q in self.streams:
                q.put(None)
            self.streams = []

    def restart(self):
        self.start()

    def _stream(self, it, context):
        q = queue.Queue()
        md = dict(context.invocation_metadata())
        with self.lock:
            self.metadata.append(md)
            self.lock.notify_all()
        if self.require and md.get(self.require[0]) != self.require[1]:
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "no valid %s" % self.require[0])
        with self.lock:
            cn = context.auth_context().get("x509_common_name")
            self.peers.append(cn[0].decode() if cn else None)
            self.lock.notify_all()
            self.streams.append(q)
            if self.current is not None:
                q.put(self.current)

        def reader():
            try:
                for req in it:
                    with self.lock:
                        self.requests.append(req)
                        self.lock.notify_all()
            except Exception:  # the stream ended
                pass
            q.put(None)
        threading.Thread(target=reader, daemon=True).start()
        while True:
            item = q.get()
            if item is None:
                return
            yield item

    def set(self, version, configs=None, anys=None):
        """Pushes version (RateLimitConfigs, or raw Any resources);
        returns its nonce."""
        p = protos()
        resp = p.disc_pb2.DiscoveryResponse(version_info=version,
                                            type_url=TYPE_URL)
        for c in configs or []:
            a = resp.resources.add()
            a.Pack(c)
        for type_url, value in anys or []:
            resp.resources.add(type_url=type_url, value=value)
        with self.lock:
            self.nonce += 1
            resp.nonce = "n%d" % self.nonce
            self.current = resp
            for q in self.streams:
                q.put(resp)
        return resp.nonce

    def reply_to(self, nonce, timeout=60):
        """The request that answered `nonce` (ACK or NACK)."""
        def find():
            for r in self.requests:
                if r.response_nonce == nonce:
                    return r
            return None
        with self.lock:
            self.lock.wait_for(lambda: find() is not None, timeout)
            return find()
