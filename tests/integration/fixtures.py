"""What a test class holds for all of its tests, as mixins for
unittest.TestCase.  A mixin that gives store() comes first among the
bases, before the behaviour class whose store() it replaces:

    class RedisTest(fixtures.ClassRedisStore, Decisions, unittest.TestCase):
        redis_timeout_ms = 2000

- ClassRedis: one redis-server for the class (cls.redis, started with
  redis_extra), stopped after its tests.
- ClassRedisStore: the same, and store() names it (redis_timeout_ms).
- ClassRedisClusterStore: test_redis_cluster_serve's Cluster for the
  class (cls.cluster), and store() names its seeds.
- ClassTls: harness.TlsFiles for the class (cls.tls), removed after.
- FrozenRedisStore: store() is a redis-server of the test's own whose
  wall clock stands at self.frozen_at (tests/tools/frozen_clock.c, when
  frozen_at is not None) until advance() steps it past; for the stories
  at a midnight.
- shm_store(): a shared-memory store of its own, removed after the test.
"""
import os
import tempfile

import harness

FROZEN = os.path.join(harness.BUILD, "libfrozen_clock.so")


class ClassRedis:
    redis_extra = ()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.redis = harness.RedisServer(extra=cls.redis_extra)

    @classmethod
    def tearDownClass(cls):
        cls.redis.stop()
        super().tearDownClass()


class ClassRedisStore(ClassRedis):
    redis_timeout_ms = 3000

    def store(self):
        return '{redis: {url: "%s", timeout_ms: %d}}' % (
            self.redis.url(), self.redis_timeout_ms)


class ClassRedisClusterStore:
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        from test_redis_cluster_serve import Cluster
        cls.cluster = Cluster()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        super().tearDownClass()

    def store(self):
        return ("{redis_cluster: {seeds: [%s], timeout_ms: 3000}}"
                % self.cluster.seeds())


class ClassTls:
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tls = harness.TlsFiles()

    @classmethod
    def tearDownClass(cls):
        cls.tls.remove()
        super().tearDownClass()


class FrozenRedisStore:
    extra_redis = ()

    def store(self):
        env = {}
        self.clock_file = None
        if self.frozen_at is not None:
            fd, self.clock_file = tempfile.mkstemp(prefix="sluice-clock-")
            os.close(fd)
            self.addCleanup(os.unlink, self.clock_file)
            self.set_clock(self.frozen_at)
            env = {"LD_PRELOAD": FROZEN, "FROZEN_CLOCK_FILE":
                   self.clock_file}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # for the redis-server child only
        try:
            redis = harness.RedisServer(extra=self.extra_redis)
        finally:
            for k, v in saved.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v
        self.addCleanup(redis.stop)
        return '{redis: {url: "%s", timeout_ms: 2000}}' % redis.url()

    def set_clock(self, t):
        tmp = self.clock_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d" % int(t * 1e6))
        os.replace(tmp, self.clock_file)

    def advance(self, at):
        if self.clock_file:
            self.set_clock(at + 1)


def shm_store(test, name):
    """store: for a shared-memory file /dev/shm/sluice-it-PID-NAME,
    removed first and after test."""
    path = "/dev/shm/sluice-it-%d-%s" % (os.getpid(), name)
    if os.path.exists(path):
        os.unlink(path)
    test.addCleanup(lambda: os.path.exists(path) and os.unlink(path))
    return "{shared: {path: %s}}" % path
