#!/usr/bin/env python3
"""Envoy's rate limit service over gRPC, decided by the real engine, as
Python's grpcio (Debian's python3-grpcio) calls it, on the memory store,
Redis and Redis Cluster.

- ShouldRateLimit answers overall_code, one status per descriptor in order
  (code, current_limit with name, requests_per_unit and unit,
  limit_remaining, duration_until_reset) and the engine's response headers;
  request and per-descriptor hits_addend and limit overrides count.
- grpc.health.v1.Health/Check: SERVING for "" and "ratelimit", NOT_FOUND
  for other names, NOT_SERVING while Redis is down.
- Several sluice instances on one Redis (or one Cluster): one key hammered
  through gRPC from several clients at once is charged exactly.
- A reload while calls are in flight loses none; SIGTERM answers the calls
  in flight, then exits 0.
"""
import os
import signal
import socket
import sys
import threading
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_harness  # noqa: E402

grpc_harness.use_system_python()

import grpc  # noqa: E402
import fixtures  # noqa: E402
import harness  # noqa: E402
from grpc_harness import (H2, GrpcSluice, envoy_dir,  # noqa: E402
                          frame, protos, request, rls_stub)
from harness import RedisServer  # noqa: E402

OK, OVER = 1, 2
SECOND, MINUTE, HOUR, DAY = 1, 2, 3, 4

API = """
domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: day, requests_per_unit: 5}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: plan
    value: free
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 3}
"""


def uniq():
    return uuid.uuid4().hex[:12]


def config(store, files=None, extra=""):
    d = envoy_dir(files or {"api.yaml": API})
    return ("store: %s\nenvoy: {config_dir: %s, response_headers: true}\n%s"
            % (store, d, extra))


class Decisions:
    """The same checks on every store (store() gives its YAML)."""

    def serve(self, **kw):
        s = GrpcSluice(config(self.store(), **kw))
        self.addCleanup(s.stop)
        return s

    def setUp(self):
        protos()
        self.s = self.serve()
        self.ch, self.stub = rls_stub(self, self.s)

    def decide(self, req, stub=None):
        return (stub or self.stub).ShouldRateLimit(req, timeout=30)

    def test_charges_until_over_limit_and_says_so(self):
        u = uniq()
        for left in (4, 3, 2, 1, 0):
            r = self.decide(request("api", [("user", u)]))
            self.assertEqual(r.overall_code, OK)
            st = r.statuses[0]
            self.assertEqual(st.code, OK)
            self.assertEqual(st.limit_remaining, left)
            self.assertEqual((st.current_limit.name,
                              st.current_limit.requests_per_unit,
                              st.current_limit.unit), ("per-user", 5, DAY))
            self.assertGreater(st.duration_until_reset.ToMilliseconds(), 0)
        r = self.decide(request("api", [("user", u)]))
        self.assertEqual(r.overall_code, OVER)
        self.assertEqual(r.statuses[0].code, OVER)
        self.assertEqual(r.statuses[0].limit_remaining, 0)
        hdrs = {h.key.lower(): h.value for h in r.response_headers_to_add}
        self.assertEqual(hdrs.get("ratelimit-limit"), "5")
        self.assertEqual(hdrs.get("ratelimit-remaining"), "0")

    def test_one_status_per_descriptor_in_order(self):
        u = uniq()
        r = self.decide(request("api", [("path", "/login"), ("x", "y")],
                                [("nothing", "here")],
                                [("plan", "free"), ("user", u)],
                                [("user", u)]))
        self.assertEqual(len(r.statuses), 4)
        self.assertEqual([s.code for s in r.statuses], [OK] * 4)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        self.assertFalse(r.statuses[1].HasField("current_limit"))
        self.assertEqual((r.statuses[2].current_limit.requests_per_unit,
                          r.statuses[2].current_limit.unit), (3, HOUR))
        self.assertEqual(r.statuses[2].limit_remaining, 2)
        self.assertEqual((r.statuses[3].current_limit.requests_per_unit,
                          r.statuses[3].current_limit.unit), (5, DAY))

    def test_hits_addend_of_the_request_and_of_a_descriptor(self):
        u, v = uniq(), uniq()
        r = self.decide(request("api", [("user", u)], hits_addend=3))
        self.assertEqual(r.statuses[0].limit_remaining, 2)
        r = self.decide(request("api", {"entries": [("user", v)],
                                        "hits": 4}, hits_addend=1))
        self.assertEqual(r.statuses[0].limit_remaining, 1)
        r = self.decide(request("api", [("user", u)], hits_addend=3))
        self.assertEqual(r.overall_code, OVER)

    def test_a_limit_override_replaces_the_configured_one(self):
        u = uniq()
        r = self.decide(request("api", {"entries": [("user", u)],
                                        "limit": (10, HOUR)}))
        st = r.statuses[0]
        self.assertEqual((st.current_limit.requests_per_unit,
                          st.current_limit.unit), (10, HOUR))
        self.assertEqual(st.limit_remaining, 9)

    def test_an_unknown_domain_limits_nothing(self):
        r = self.decide(request("nobody-" + uniq(), [("user", "a")]))
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(len(r.statuses), 1)
        self.assertFalse(r.statuses[0].HasField("current_limit"))

    def test_an_empty_domain_is_invalid(self):
        with self.assertRaises(grpc.RpcError) as e:
            self.decide(request("", [("user", "a")]))
        self.assertEqual(e.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT)

    def test_health_check(self):
        h = self.s.health(self.ch)
        p = protos().health_pb2
        for name in ("", "ratelimit"):
            # SERVING once the store is reached (a Redis client connects
            # in the background after start).
            self.assertTrue(harness.wait_until(lambda: h.Check(
                p.HealthCheckRequest(service=name),
                timeout=30).status == 1, 30))
        with self.assertRaises(grpc.RpcError) as e:
            h.Check(p.HealthCheckRequest(service="other"), timeout=30)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_health_watch_of_an_unknown_service(self):
        p = protos().health_pb2
        h = self.s.health(self.ch)
        # SERVING once the store is reached (a Redis client connects in
        # the background after start), so that the last Check below shows
        # what the watches left behind, not how far the connect got.
        self.assertTrue(harness.wait_until(lambda: h.Check(
            p.HealthCheckRequest(service=""), timeout=30).status == 1, 60))
        for name in ("other", "ratelimit\x00x"):
            it = h.Watch(p.HealthCheckRequest(service=name), timeout=60)
            self.assertEqual(next(it).status, 3)  # SERVICE_UNKNOWN
            it.cancel()
        with self.assertRaises(grpc.RpcError) as e:
            h.Check(p.HealthCheckRequest(service="ratelimit\x00x"),
                    timeout=30)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        # A watch the client ends is counted nowhere and frees its stream:
        # the server keeps answering.
        self.assertEqual(h.Check(p.HealthCheckRequest(service=""),
                                 timeout=30).status, 1)

    def test_concurrent_calls_on_one_key_are_exact(self):
        u = uniq()
        codes = self.hammer([self.stub] * 4, u, 40)
        self.assertEqual(codes.count(OK), 5)
        self.assertEqual(codes.count(OVER), 35)

    def hammer(self, stubs, u, n):
        """n calls for user u spread over the stubs, all at once."""
        futs = [stubs[i % len(stubs)].ShouldRateLimit.future(
            request("api", [("user", u)]), timeout=60) for i in range(n)]
        return [f.result().overall_code for f in futs]


class MemoryTest(Decisions, unittest.TestCase):
    def store(self):
        return "memory"

    def test_calls_are_timed_per_method_and_named_as_ratelimit(self):
        # envoy.metrics: both -- sluice's series and envoyproxy/ratelimit's
        # (as a statsd_exporter maps them), side by side.
        s = GrpcSluice(config(self.store()).replace(
            "response_headers: true}",
            "response_headers: true, metrics: both}"))
        self.addCleanup(s.stop)
        with s.channel() as ch:
            stub = s.rls(ch)
            u = uniq()
            for _ in range(6):
                stub.ShouldRateLimit(request("api", [("user", u)]),
                                     timeout=30)
        m = s.metrics()
        # Every call timed, under its method: the histogram's count is
        # the number of calls.
        self.assertEqual(m.get('sluice_grpc_request_duration_seconds_count'
                               '{method="ShouldRateLimit"}'), 6)
        self.assertEqual(m.get('sluice_grpc_request_duration_seconds_bucket'
                               '{method="ShouldRateLimit",le="+Inf"}'), 6)
        self.assertEqual(m.get('ratelimit_service_total_requests'
                               '{grpc_method="ShouldRateLimit"}'), 6)
        self.assertEqual(m.get('ratelimit_service_response_time_seconds_count'
                               '{grpc_method="ShouldRateLimit"}'), 6)
        self.assertEqual(m.get('ratelimit_service_rate_limit_total_hits'
                               '{domain="api",key1="user"}'), 6)
        self.assertEqual(m.get('ratelimit_service_rate_limit_over_limit'
                               '{domain="api",key1="user"}'), 1)
        self.assertEqual(m.get('ratelimit_service_rate_limit_within_limit'
                               '{domain="api",key1="user"}'), 5)
        self.assertEqual(m.get('ratelimit_service_config_load_success'), 1)
        self.assertEqual(m.get('sluice_envoy_total_hits_total'
                               '{domain="api",descriptor="user"}'), 6)

    def test_a_reload_while_calls_are_in_flight_loses_none(self):
        errors, codes, stop = [], [], threading.Event()

        def client():
            with self.s.channel() as ch:
                stub = self.s.rls(ch)
                while not stop.is_set():
                    try:
                        codes.append(stub.ShouldRateLimit(
                            request("api", [("user", uniq())]),
                            timeout=30).overall_code)
                    except grpc.RpcError as e:
                        errors.append(e)
        ts = [threading.Thread(target=client) for _ in range(4)]
        for t in ts:
            t.start()
        try:
            for i in range(5):
                api = API.replace("requests_per_unit: 2",
                                  "requests_per_unit: %d" % (3 + i))
                self.s.write_config(config(self.store(),
                                           {"api.yaml": api}))
                self.s.signal(signal.SIGHUP)
                n = len(codes)
                self.assertTrue(harness.wait_until(
                    lambda: len(codes) > n + 20, 30))
        finally:
            stop.set()
            for t in ts:
                t.join(60)
        self.assertEqual(errors, [])
        self.assertEqual(set(codes), {OK})
        self.assertTrue(harness.wait_until(
            lambda: self.s.log().count("SIGHUP: reloaded") >= 5, 30))


class RedisTest(fixtures.ClassRedisStore, Decisions, unittest.TestCase):
    def test_several_instances_on_one_redis_stay_exact(self):
        others = [self.serve() for _ in range(2)]
        chans = [s.channel() for s in [self.s] + others]
        for c in chans:
            self.addCleanup(c.close)
        stubs = [protos().rls_grpc.RateLimitServiceStub(c) for c in chans]
        u = uniq()
        codes = self.hammer(stubs * 2, u, 60)
        self.assertEqual(codes.count(OK), 5)
        self.assertEqual(codes.count(OVER), 55)

    def redis_asleep(self):
        """True while Redis does not answer a PING within 0.2 s."""
        with socket.create_connection(("127.0.0.1", self.redis.port),
                                      5) as c:
            c.sendall(b"PING\r\n")
            c.settimeout(0.2)
            try:
                return not c.recv(16)
            except socket.timeout:
                return True

    def test_sigterm_answers_the_calls_in_flight(self):
        s = self.serve()
        h = H2(s.grpc_port)
        try:
            h.wait(lambda: h.conn.remote_settings.max_concurrent_streams
                   == 100)
            # Redis stalls (every client paused 2 s), so the calls wait
            # for it at SIGTERM.
            self.assertEqual(self.redis.cli("CLIENT", "PAUSE", "2000",
                                            "ALL"), "OK")
            self.assertTrue(harness.wait_until(self.redis_asleep, 10))
            sids = [h.call(frame(request("api", [("user", uniq())])
                                 .SerializeToString())) for _ in range(10)]
            # A PING answered after them: the server holds every call.
            self.assertTrue(h.ping(b"inflight"))
            s.signal(signal.SIGTERM)
            answers, goaways = h.raw_results(sids)
            for sid in sids:
                hdrs, body = answers[sid]
                self.assertEqual(hdrs.get("grpc-status"), "0", hdrs)
                r = protos().rls_pb2.RateLimitResponse.FromString(body[5:])
                self.assertEqual(r.overall_code, OK)
            # The shutdown notice came first (every stream still taken).
            self.assertEqual(goaways[0].last_stream_id, 2 ** 31 - 1)
            self.assertEqual(s.wait(30), 0)
        finally:
            h.close()

    def test_health_is_not_serving_while_redis_is_down(self):
        p = protos().health_pb2
        down = RedisServer()
        s = GrpcSluice(config('{redis: {url: "%s", timeout_ms: 200}}'
                              % down.url()))
        self.addCleanup(s.stop)
        with s.channel() as ch:
            h = s.health(ch)
            self.assertTrue(harness.wait_until(lambda: h.Check(
                p.HealthCheckRequest(service="ratelimit"),
                timeout=30).status == 1, 30))
            down.stop()
            self.assertTrue(harness.wait_until(lambda: h.Check(
                p.HealthCheckRequest(service="ratelimit"),
                timeout=30).status == 2, 30))  # NOT_SERVING
            with self.assertRaises(grpc.RpcError) as e:
                s.rls(ch).ShouldRateLimit(request("api", [("user", "x")]),
                                          timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_health_watch_follows_the_store_and_the_drain(self):
        """Health/Watch (grpcio's stub from health.proto): the status at
        once, then a message at each change: Redis gone, Redis back, and
        SIGTERM (NOT_SERVING, then the stream ends)."""
        p = protos().health_pb2
        redis = RedisServer()
        self.addCleanup(redis.stop)
        s = GrpcSluice(config('{redis: {url: "%s", timeout_ms: 200}}'
                              % redis.url()))
        self.addCleanup(s.stop)
        with s.channel() as ch:
            h = s.health(ch)
            # SERVING once the store is reached (the client connects in
            # the background after start).
            self.assertTrue(harness.wait_until(lambda: h.Check(
                p.HealthCheckRequest(service="ratelimit"),
                timeout=30).status == 1, 30))
            it = h.Watch(p.HealthCheckRequest(service="ratelimit"),
                         timeout=120)
            self.assertEqual(next(it).status, 1)  # SERVING
            redis.stop()
            self.assertEqual(next(it).status, 2)  # NOT_SERVING
            redis.start()
            self.assertEqual(next(it).status, 1)  # SERVING again
            s.signal(signal.SIGTERM)
            self.assertEqual(next(it).status, 2)  # draining
            with self.assertRaises(grpc.RpcError) as e:
                next(it)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(s.wait(30), 0)


class RedisClusterTest(fixtures.ClassRedisClusterStore, Decisions,
                       unittest.TestCase):
    def test_several_instances_on_one_cluster_stay_exact(self):
        other = self.serve()
        with other.channel() as ch:
            stubs = [self.stub, other.rls(ch)]
            u = uniq()
            codes = self.hammer(stubs, u, 40)
        self.assertEqual(codes.count(OK), 5)
        self.assertEqual(codes.count(OVER), 35)


if __name__ == "__main__":
    unittest.main(verbosity=2)
