#!/usr/bin/env python3
"""The Redis module sluice-redis.so against real redis-server processes.

Each test starts its own redis-server(s) on free loopback ports and always
stops them.  The module's decisions are compared with the core's
(sluice_replay_core, built next to the module from the same libsluice
sources) decision by decision:

  * with the test-only clock (module argument TESTCLOCK, command
    SLUICE.TESTCLOCK us) over random sequences: exact equality of every
    reply field, every stored state and every expiry;
  * with the server clock: the server's TIME read just before and just
    after each call brackets the module's clock, and the reply and stored
    state must be the core's for one of the instants in that bracket.

Environment: SLUICE_BUILD (build dir with sluice-redis.so and
sluice_replay_core), set by CTest.  Standard library only.
"""
import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))
BUILD = os.environ.get("SLUICE_BUILD", os.path.join(SRC, "build"))
MODULE = os.path.join(BUILD, "sluice-redis.so")
REPLAY = os.path.join(BUILD, "sluice_replay_core")
REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")

DAY_US = 86400 * 1000000

# --------------------------------------------------------------- helpers


def free_port(also_bus=False):
    """A free loopback port (and port+10000 free too, for Cluster)."""
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if not also_bus:
            return port
        if port + 10000 > 65535:
            continue
        b = socket.socket()
        try:
            b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
        finally:
            b.close()
    raise RuntimeError("no free port")


class RespError(Exception):
    """An error reply (returned, not raised, by Client.call)."""

    def __eq__(self, other):
        return isinstance(other, RespError) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


class Client:
    """A minimal RESP2 client over one socket."""

    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ConnectionError("bad reply %r" % line)

    def call(self, *args):
        self.send(*args)
        return self.read()

    def info(self, section):
        text = self.call("INFO", section).decode()
        out = {}
        for ln in text.splitlines():
            if ":" in ln and not ln.startswith("#"):
                k, v = ln.split(":", 1)
                out[k] = v
        return out


_servers = []


class Redis:
    """One redis-server on a free loopback port, stopped by stop() or at
    exit whatever happens."""

    def __init__(self, *extra, module_args=(), module=True, port=None,
                 workdir=None, bus=False):
        # bus: a cluster node, whose port + 10000 must be free too.
        self.port = port or free_port(also_bus=bus)
        self.dir = workdir or tempfile.mkdtemp(prefix="sluice-redis-")
        self.own_dir = workdir is None
        self.extra = (["--loadmodule", MODULE] + list(module_args)
                      if module else []) + list(extra)
        self.proc = None
        _servers.append(self)
        try:
            # A port taken between choosing and binding is chosen again
            # (not one the caller gave).
            for _ in range(3 if port is None else 0):
                if self.start(retry_in_use=True):
                    return
                self.port = free_port(also_bus=bus)
            self.start()
        except Exception:
            self.stop()
            raise

    @property
    def args(self):
        return [REDIS_SERVER, "--port", str(self.port),
                "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no",
                "--enable-debug-command", "local",
                "--logfile", os.path.join(self.dir, "redis.log")] + \
            self.extra

    def start(self, retry_in_use=False):
        """Starts the server; returns once it said it is ready in its own
        log (a PING alone may be answered by someone else's server on the
        port), or False when retry_in_use and the port was taken."""
        path = os.path.join(self.dir, "redis.log")
        try:
            seen = os.path.getsize(path)  # a restart appends to it
        except OSError:
            seen = 0

        def new_log():
            try:
                with open(path) as f:
                    f.seek(seen)
                    return f.read()
            except OSError:
                return ""
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while "Ready to accept connections" not in new_log():
            if self.proc.poll() is not None or time.time() > deadline:
                if retry_in_use and self.proc.poll() is not None and \
                        "Address already in use" in new_log():
                    self.proc = None
                    return False
                raise RuntimeError("redis-server did not start: %s" %
                                   self.log())
            time.sleep(0.02)
        while True:
            try:
                c = Client(self.port, timeout=2)
                if c.call("PING") == "PONG":
                    c.close()
                    return True
                c.close()
            except (OSError, ConnectionError):
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("redis-server did not start: %s" %
                                   self.log())
            time.sleep(0.02)

    def log(self):
        try:
            with open(os.path.join(self.dir, "redis.log")) as f:
                return f.read()[-2000:]
        except OSError:
            return "(no log)"

    def client(self):
        return Client(self.port)

    def stop(self, cleanup=True):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if cleanup and self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            if self in _servers:
                _servers.remove(self)


@atexit.register
def _stop_all():
    for s in list(_servers):
        s.stop()


def replay(lines):
    """Runs sluice_replay_core over the lines; one parsed row per T line:
    (allowed, limit, remaining, retry_ms, reset_ms, which, [states])."""
    out = subprocess.run([REPLAY], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for ln in out.splitlines():
        f = [int(x) for x in ln.split()]
        rows.append((f[:6], f[6:]))
    return rows


def server_time_us(c):
    sec, usec = c.call("TIME")
    return int(sec) * 1000000 + int(usec)


def state_of(c, key):
    v = c.call("GET", key)
    return 0 if v is None else int(v)


def shortfall(state, now, per):
    """decide.c's shortfall of a state at now (units of 1/per us), which
    the Lua script answers."""
    if state <= 0 or state // 1000 < now:
        return 0
    delta, frac = state // 1000 - now, min(state % 1000, per - 1)
    return 2 ** 53 if delta >= 2 ** 53 // per else delta * per + frac


def expiry_ms(state):
    """The PXAT a stored state must carry: its expiry rounded up to ms."""
    exp_us = state // 1000 + (state % 1000 != 0)
    return -(-exp_us // 1000)


# A spread of rates: fast, fractional, thirds, slow, and the exact text
# forms sluice_rate_format() writes.
RATES = ["2/s", "0.5/s", "3/s", "50/min", "7/day", "1/3s", "1000/s",
         "7/86400000000us", "3/1000000us", "1/259200s", "100/ms"]


def random_limit(rng):
    return str(rng.randint(1, 40)), rng.choice(RATES)


# ----------------------------------------------------------------- tests


class ModuleTest(unittest.TestCase):
    def setUp(self):
        self.servers = []
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        for s in self.servers:
            s.stop()

    def connect(self, srv):
        c = srv.client()
        self.clients.append(c)
        return c

    def redis(self, *extra, **kw):
        s = Redis(*extra, **kw)
        self.servers.append(s)
        return s

    # -- decisions ------------------------------------------------------

    def test_take_matches_core_over_random_sequences_exactly(self):
        srv = self.redis(module_args=["TESTCLOCK"])
        c = self.connect(srv)
        rng = random.Random(5)
        # The test clock runs ahead of the real one, so no key expires by
        # itself during the test: the key holds exactly the core's state.
        base = server_time_us(c) + 30 * DAY_US
        for seq in range(40):
            key = "seq:%d" % seq
            cap, rate = random_limit(rng)
            now = base + rng.randint(0, DAY_US)
            lines, got = ["L 1 %s %s" % (cap, rate)], []
            for _ in range(60):
                step = rng.choice([0, 1, 7, 999, 1000, 1001, 250000,
                                   3000000, 86400000000])
                now += step if rng.random() > 0.05 else -rng.randint(0, 5000)
                cost = rng.choice([0, 1, 1, 1, 2, 3, int(cap),
                                   int(cap) + 1])
                self.assertEqual(c.call("SLUICE.TESTCLOCK", now), "OK")
                args = ["SLUICE.TAKE", key, cap, rate]
                if cost != 1 or rng.random() < 0.3:
                    args += ["COST", cost]
                reply = c.call(*args)
                self.assertIsInstance(reply, list, reply)
                st = state_of(c, key)
                pxat = c.call("PEXPIRETIME", key)
                got.append((reply, st, pxat))
                lines.append("T %d %d" % (now, cost))
            for (reply, st, pxat), (want, states) in zip(got, replay(lines)):
                self.assertEqual(reply, want[:5], (cap, rate, lines))
                self.assertEqual(st, states[0])
                if st:
                    self.assertEqual(pxat, expiry_ms(st))
                    self.assertEqual(c.call("OBJECT", "ENCODING", key),
                                     b"int")

    def test_takemulti_matches_core_all_or_nothing(self):
        srv = self.redis(module_args=["TESTCLOCK"])
        c = self.connect(srv)
        rng = random.Random(7)
        base = server_time_us(c) + 30 * DAY_US
        for seq in range(25):
            n = rng.randint(1, 4)
            keys = ["m%d:%d" % (seq, i) for i in range(n)]
            limits = [random_limit(rng) for _ in range(n)]
            flat = [x for lim in limits for x in lim]
            now = base
            lines, got = ["L %d %s" % (n, " ".join(flat))], []
            for _ in range(40):
                now += rng.choice([0, 1, 1000, 400000, 2000000, 60000000])
                cost = rng.choice([0, 1, 1, 2, 5, 41])
                c.call("SLUICE.TESTCLOCK", now)
                reply = c.call("SLUICE.TAKEMULTI", n, *keys, *flat,
                               "COST", cost)
                self.assertIsInstance(reply, list, reply)
                got.append((reply, [state_of(c, k) for k in keys]))
                lines.append("T %d %d" % (now, cost))
            for (reply, sts), (want, states) in zip(got, replay(lines)):
                self.assertEqual(reply, want, (limits, lines))
                self.assertEqual(sts, states)

    def checked_at_server_time(self, c, key, cmd, cap, rate, cost, lo=0,
                               per=None):
        """Runs cmd (a decision on key under one limit) between two reads
        of the server's TIME and of the key, in one transaction so that no
        key expires in between however this process is scheduled, and
        asserts that the reply and the stored state are the core's at one
        instant of that bracket (widened by lo us before it).  Returns the
        reply.  With per, cmd is the Lua script, whose reply is the
        bucket's shortfall before the call (the client derives the
        decision from it with the core's code)."""
        self.assertEqual(c.call("MULTI"), "OK")
        for part in (["GET", key], ["TIME"], cmd, ["TIME"], ["GET", key]):
            self.assertEqual(c.call(*part), "QUEUED")
        before, (s0, u0), reply, (s1, u1), after = c.call("EXEC")
        before, after = int(before or 0), int(after or 0)
        t0 = int(s0) * 1000000 + int(u0)
        t1 = int(s1) * 1000000 + int(u1)
        lines = ["L 1 %s %s" % (cap, rate)]
        for now in range(t0 - lo, t1 + 1):
            lines += ["S 0 %d" % before, "T %d %d" % (now, cost)]
        if per is None:
            ok = any(want[:5] == reply[:5] and states[0] == after
                     for want, states in replay(lines))
        else:
            ok = any(shortfall(before, now, per) == reply and
                     states[0] == after
                     for now, (want, states) in
                     zip(range(t0 - lo, t1 + 1), replay(lines)))
        self.assertTrue(ok, (cmd, before, t0, t1, reply, after))
        return reply

    def test_server_clock_decisions_are_the_core_at_the_server_time(self):
        srv = self.redis()  # no TESTCLOCK: the production configuration
        c = self.connect(srv)
        # Redis 7.2+ caches the command time when EXEC starts, a little
        # before the first TIME of the bracket.
        ver = tuple(int(x) for x in
                    c.info("server")["redis_version"].split(".")[:2])
        lo = 2000 if ver >= (7, 2) else 0
        rng = random.Random(11)
        for cap, rate in [("5", "1/day"), ("10", "2/s"), ("3", "1/min"),
                          ("100", "1000/s"), ("7", "3/s")]:
            key = "clock:%s:%s" % (cap, rate)
            for _ in range(30):
                cost = rng.choice([0, 1, 1, 2, int(cap) + 1])
                self.checked_at_server_time(
                    c, key, ["SLUICE.TAKE", key, cap, rate, "COST", cost],
                    cap, rate, cost, lo)

    def test_peek_and_rejection_write_nothing(self):
        srv = self.redis(module_args=["TESTCLOCK"])
        c = self.connect(srv)
        now = server_time_us(c) + DAY_US
        c.call("SLUICE.TESTCLOCK", now)
        self.assertEqual(c.call("SLUICE.TAKE", "p", 3, "1/min", "COST", 0),
                         [1, 3, 3, 0, 0])
        self.assertEqual(c.call("EXISTS", "p"), 0)
        self.assertEqual(c.call("SLUICE.TAKE", "p", 3, "1/min", "COST", 3),
                         [1, 3, 0, 0, 180000])
        st = state_of(c, "p")
        self.assertEqual(st, (now + 180000000) * 1000)
        self.assertEqual(c.call("SLUICE.TAKE", "p", 3, "1/min"),
                         [0, 3, 0, 60000, 180000])
        self.assertEqual(c.call("SLUICE.TAKE", "p", 3, "1/min", "COST", 4),
                         [0, 3, 0, -1, 180000])
        self.assertEqual(state_of(c, "p"), st)

    # -- replication and persistence ------------------------------------

    def test_callable_from_multi_and_scripts(self):
        srv = self.redis()
        c = self.connect(srv)
        self.assertEqual(c.call("EVAL", "return redis.call('SLUICE.TAKE', "
                                "KEYS[1], 5, '1/day', 'COST', 2)", 1, "lua"),
                         [1, 5, 3, 0, 172800000])
        self.assertEqual(c.call("MULTI"), "OK")
        self.assertEqual(c.call("SLUICE.TAKE", "lua", 5, "1/day"), "QUEUED")
        self.assertEqual(c.call("SLUICE.TAKEMULTI", 2, "lua", "x", 5,
                                "1/day", 1, "1/day"), "QUEUED")
        one, two = c.call("EXEC")
        self.assertEqual(one[:3], [1, 5, 2])
        self.assertEqual(two[:3] + two[5:], [1, 1, 0, 1])

    def test_replica_holds_the_same_state(self):
        master = self.redis()
        # The replica does not even load the module: it receives effects.
        replica = self.redis(module=False)
        m, r = self.connect(master), self.connect(replica)
        self.assertEqual(r.call("REPLICAOF", "127.0.0.1", master.port), "OK")
        deadline = time.time() + 10
        while r.info("replication").get("master_link_status") != "up":
            self.assertLess(time.time(), deadline, "replica never synced")
            time.sleep(0.05)
        rng = random.Random(3)
        keys = ["rep:%d" % i for i in range(20)]
        for _ in range(300):
            k = rng.choice(keys)
            if rng.random() < 0.2:
                k2 = rng.choice([x for x in keys if x != k])
                m.call("SLUICE.TAKEMULTI", 2, k, k2, 5, "1/day", 8, "1/h",
                       "COST", rng.randint(0, 3))
            else:
                m.call("SLUICE.TAKE", k, 5, "1/day", "COST",
                       rng.randint(0, 3))
        self.assertEqual(m.call("WAIT", 1, 5000), 1)
        for k in keys:
            self.assertEqual(r.call("GET", k), m.call("GET", k), k)
            self.assertEqual(r.call("PEXPIRETIME", k),
                             m.call("PEXPIRETIME", k), k)
            if m.call("EXISTS", k):
                self.assertEqual(r.call("OBJECT", "ENCODING", k), b"int")

    def _snapshot(self, c, keys):
        return {k: (c.call("GET", k), c.call("PEXPIRETIME", k)) for k in keys}

    def test_aof_restart_and_debug_reload_keep_state(self):
        srv = self.redis("--appendonly", "yes", "--appendfsync", "always")
        c = self.connect(srv)
        keys = ["aof:%d" % i for i in range(10)]
        for i, k in enumerate(keys):
            c.call("SLUICE.TAKE", k, 10, "1/day", "COST", i + 1)
        c.call("SLUICE.TAKEMULTI", 2, keys[0], keys[1], 10, "1/day", 10,
               "1/day")
        snap = self._snapshot(c, keys)
        self.assertTrue(all(v[0] for v in snap.values()))

        # The AOF holds the effects, never the clock-dependent command.
        aof = b""
        adir = os.path.join(srv.dir, "appendonlydir")
        for name in sorted(os.listdir(adir)):
            if name.endswith(".aof"):
                with open(os.path.join(adir, name), "rb") as f:
                    aof += f.read()
        self.assertNotIn(b"SLUICE", aof.upper())
        self.assertIn(b"$4\r\nPXAT\r\n", aof)
        self.assertIn(b"MULTI", aof)  # TAKEMULTI's two SETs, atomically

        self.assertEqual(c.call("DEBUG", "RELOAD"), "OK")
        self.assertEqual(self._snapshot(c, keys), snap)
        self.assertEqual(c.call("OBJECT", "ENCODING", keys[3]), b"int")

        srv.stop(cleanup=False)
        srv.start()
        c = self.connect(srv)
        self.assertEqual(self._snapshot(c, keys), snap)
        # The bucket goes on where it was: key 4 spent 5 of 10 tokens.
        reply = c.call("SLUICE.TAKE", keys[4], 10, "1/day", "COST", 0)
        self.assertEqual(reply[:3], [1, 10, 5])

    def _aof(self, srv):
        data = b""
        adir = os.path.join(srv.dir, "appendonlydir")
        for name in sorted(os.listdir(adir)):
            if name.endswith(".aof"):
                with open(os.path.join(adir, name), "rb") as f:
                    data += f.read()
        return data

    def _random_batches(self, m, rng, keys, count):
        for _ in range(count):
            pick = [rng.choice(keys) for _ in range(rng.randint(1, 6))]
            if rng.random() < 0.5:
                reply = m.call("SLUICE.TAKEEACH", rng.randint(1, 6),
                               rng.choice(["1/day", "1/h", "3/min"]),
                               rng.choice([0, 1, 1, 2]), *pick)
            else:
                args = []
                for k in pick:
                    args += [k, rng.randint(1, 6),
                             rng.choice(["1/day", "1/h", "3/min"]),
                             rng.choice([0, 1, 1, 2, 9])]
                reply = m.call("SLUICE.TAKEMANY", *args)
            self.assertEqual(len(reply), len(pick), reply)

    def test_batches_replicate_one_script_unless_a_replica_listens(self):
        """TAKEEACH and TAKEMANY replicate their writes once per call while
        no replica is connected: one write as SET key state PXAT ms,
        several as one EVAL running those SETs in order.  With a replica
        connected (which runs a script slower than the SETs) they replicate
        the SETs, in MULTI/EXEC.  The replica and the master restarted from
        its AOF (which replays the scripts) end with byte-identical values
        (DUMP), expiries and encodings, over random batches with repeated
        keys, peeks, rejections and keys of another type."""
        master = self.redis("--appendonly", "yes", "--appendfsync",
                            "always")
        m = self.connect(master)
        # One call, three writes (one key twice): one EVAL, no MULTI.
        self.assertEqual([d[:3] for d in m.call(
            "SLUICE.TAKEEACH", 5, "1/day", 1, "e1", "e2", "e1", "e3")],
            [[1, 5, 4], [1, 5, 4], [1, 5, 3], [1, 5, 4]])
        self.assertEqual(m.call("SLUICE.TAKEEACH", 5, "1/day", 1, "e4")[0]
                         [:3], [1, 5, 4])
        aof = self._aof(master)
        self.assertEqual(aof.count(b"$4\r\nEVAL\r\n"), 1, aof)
        self.assertNotIn(b"MULTI", aof)
        self.assertNotIn(b"SLUICE", aof.upper())
        self.assertIn(b"$3\r\nSET\r\n$2\r\ne4\r\n", aof)  # one write
        m.call("LPUSH", "alist", "x")
        rng = random.Random(12)
        keys = ["b:%d" % i for i in range(12)] + ["alist"]
        self._random_batches(m, rng, keys, 80)
        evals = self._aof(master).count(b"$4\r\nEVAL\r\n")
        self.assertGreater(evals, 10)

        replica = self.redis(module=False)
        r = self.connect(replica)
        self.assertEqual(r.call("REPLICAOF", "127.0.0.1", master.port), "OK")
        deadline = time.time() + 30
        while r.info("replication").get("master_link_status") != "up":
            self.assertLess(time.time(), deadline, "replica never synced")
            time.sleep(0.05)
        # The master sees the replica within its check interval: from then
        # on a batch of two writes goes as two SETs in MULTI/EXEC.
        deadline = time.time() + 30
        for i in range(10000):
            before = len(self._aof(master))
            m.call("SLUICE.TAKEEACH", 5, "1/day", 1, "w%d" % i, "x%d" % i)
            tail = self._aof(master)[before:]
            if b"MULTI" in tail:
                break
            self.assertIn(b"EVAL", tail)
            self.assertLess(time.time(), deadline, "replica never seen")
            time.sleep(0.02)
        self.assertNotIn(b"EVAL", tail)
        self.assertEqual(tail.count(b"$3\r\nSET\r\n"), 2, tail)
        self._random_batches(m, rng, keys, 80)
        self.assertEqual(self._aof(master).count(b"$4\r\nEVAL\r\n"),
                         evals + i)
        self.assertEqual(m.call("WAIT", 1, 10000), 1)
        names = keys + ["e1", "e2", "e3", "e4"]
        snap = {}
        for k in names:
            mine = (m.call("DUMP", k), m.call("PEXPIRETIME", k),
                    m.call("OBJECT", "ENCODING", k))
            theirs = (r.call("DUMP", k), r.call("PEXPIRETIME", k),
                      r.call("OBJECT", "ENCODING", k))
            self.assertEqual(theirs, mine, k)
            snap[k] = mine
        written = [k for k in names if snap[k][2] == b"int"]
        self.assertGreater(len(written), 8, snap)

        # The AOF (scripts, then SETs) replays to the same bytes.
        master.stop(cleanup=False)
        master.start()
        m = self.connect(master)
        for k in names:
            self.assertEqual((m.call("DUMP", k), m.call("PEXPIRETIME", k),
                              m.call("OBJECT", "ENCODING", k)), snap[k], k)

    # -- the script's state format ----------------------------------------

    def test_state_written_as_the_script_does_is_read_and_continued(self):
        """The Redis script path stores the same integer with SET ... PXAT;
        a key switching between writers keeps its tokens exactly."""
        srv = self.redis(module_args=["TESTCLOCK"])
        c = self.connect(srv)
        now = server_time_us(c) + DAY_US
        cap, rate = "10", "3/s"
        lines = ["L 1 %s %s" % (cap, rate), "T %d 4" % now]
        # "Script" side: the core's state after 4 tokens, stored as the
        # script stores it (SET of the decimal integer, PXAT expiry), via
        # both a plain SET and a Lua script.
        (_, (st,)), = replay(lines)
        self.assertEqual(c.call("EVAL",
                                "return redis.call('SET', KEYS[1], ARGV[1],"
                                " 'PXAT', ARGV[2])", 1, "sw", st,
                                expiry_ms(st)), "OK")
        self.assertEqual(c.call("OBJECT", "ENCODING", "sw"), b"int")
        # Module side, 100 ms later: continues from 6 tokens (+0 refilled).
        now += 100000
        c.call("SLUICE.TESTCLOCK", now)
        reply = c.call("SLUICE.TAKE", "sw", cap, rate)
        lines.append("T %d 1" % now)
        want, (st2,) = replay(lines)[-1]
        self.assertEqual(reply, want[:5])
        self.assertEqual(reply[2], 5)
        self.assertEqual(state_of(c, "sw"), st2)
        self.assertEqual(c.call("PEXPIRETIME", "sw"), expiry_ms(st2))
        # And back: the next writer reads the module's value as its state.
        now += 1000000
        lines.append("T %d 2" % now)
        want, (st3,) = replay(lines)[-1]
        self.assertEqual(replay(["L 1 %s %s" % (cap, rate),
                                 "S 0 %d" % state_of(c, "sw"),
                                 "T %d 2" % now])[0][1], [st3])

    def test_module_and_script_alternate_on_one_key_exactly(self):
        """The real Redis script (src/store/redis/script.lua, as the build
        expands it) and the module take turns on the same keys: every
        decision of either is the core's at the server time, so no token
        appears or vanishes at a switch."""
        path = os.environ.get("SLUICE_SCRIPT",
                              os.path.join(BUILD, "generated/lua/script.lua"))
        with open(path) as f:
            script = f.read()
        srv = self.redis()
        c = self.connect(srv)
        sha = c.call("SCRIPT", "LOAD", script).decode()
        rng = random.Random(13)
        served = {"module": 0, "script": 0}
        for cap, rate in [("5", "1/day"), ("10", "2/s"), ("20", "1000/s"),
                          ("7", "3/s"), ("4", "7/86400000000us")]:
            interval, per, _ = (int(x) for x in subprocess.run(
                [REPLAY], input="P %s %s\n" % (cap, rate),
                capture_output=True, text=True, check=True).stdout.split())
            key = "alt:%s:%s" % (cap, rate)
            for i in range(40):
                cost = rng.choice([0, 1, 1, 2, 3, int(cap) + 1])
                # The script's arguments as the store sends them.
                tau = int(cap) * interval
                need = tau + 1 if cost > int(cap) else cost * interval
                if i % 2 == 0:
                    cmd = ["SLUICE.TAKE", key, cap, rate, "COST", cost]
                    reply = self.checked_at_server_time(c, key, cmd, cap,
                                                        rate, cost)
                    served["module"] += reply[0]
                else:
                    cmd = ["EVALSHA", sha, 1, key, need, tau] + (
                        [per] if per > 1 else [])
                    reply = self.checked_at_server_time(c, key, cmd, cap,
                                                        rate, cost, per=per)
                    served["script"] += reply + need <= tau
        self.assertGreater(served["module"], 0)
        self.assertGreater(served["script"], 0)

    # -- cluster ------------------------------------------------------------

    def cluster(self):
        """Three masters made one cluster, once each says it is ok: the
        nodes and {port: a client of each}."""
        nodes = []
        for _ in range(3):
            nodes.append(self.redis("--cluster-enabled", "yes",
                                    "--cluster-config-file", "nodes.conf",
                                    "--cluster-node-timeout", "5000",
                                    bus=True))
        addrs = ["127.0.0.1:%d" % n.port for n in nodes]
        res = subprocess.run([REDIS_CLI, "--cluster", "create", *addrs,
                              "--cluster-replicas", "0", "--cluster-yes"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        clients = {n.port: self.connect(n) for n in nodes}
        deadline = time.time() + 20
        while not all(b"cluster_state:ok" in cl.call("CLUSTER", "INFO")
                      for cl in clients.values()):
            self.assertLess(time.time(), deadline, "cluster never ok")
            time.sleep(0.1)
        return nodes, clients

    def test_cluster_routes_the_commands(self):
        nodes, clients = self.cluster()

        def routed(*cmd):
            """Sends cmd to the first node, follows one MOVED."""
            port = nodes[0].port
            reply = clients[port].call(*cmd)
            if isinstance(reply, RespError) and str(reply).startswith(
                    "MOVED"):
                port = int(str(reply).split()[2].rsplit(":", 1)[1])
                reply = clients[port].call(*cmd)
            return port, reply

        moved = 0
        for i in range(30):
            key = "user:%d" % i
            port, reply = routed("SLUICE.TAKE", key, 5, "1/day")
            self.assertEqual(reply, [1, 5, 4, 0, 86400000], key)
            moved += port != nodes[0].port
            # The key lives on the node that owns its slot.
            self.assertEqual(clients[port].call("EXISTS", key), 1)
        self.assertGreater(moved, 0)
        # TAKEMULTI: keys of one slot are routed; keys of several are not.
        port, reply = routed("SLUICE.TAKEMULTI", 2, "{u1}:min", "{u1}:day",
                             5, "1/min", 100, "1/day")
        self.assertEqual(reply[:3], [1, 5, 4])
        self.assertEqual(clients[port].call("EXISTS", "{u1}:min",
                                            "{u1}:day"), 2)
        slots = [clients[port].call("CLUSTER", "KEYSLOT", k)
                 for k in ("a", "b")]
        self.assertNotEqual(slots[0], slots[1])
        _, reply = routed("SLUICE.TAKEMULTI", 2, "a", "b", 5, "1/min", 5,
                          "1/min")
        self.assertIsInstance(reply, RespError)
        self.assertTrue(str(reply).startswith("CROSSSLOT"), reply)

    # -- the key API and the STORE modes ---------------------------------

    def test_takes_run_no_server_command_and_store_int_values(self):
        """The module reads and writes states through the key API (no GET,
        no SET run inside it), and the value is int-encoded as SET stores
        a decimal integer; STORE call keeps GET and SET."""
        for store, inner in (("int", False), ("call", True)):
            srv = self.redis(module_args=["STORE", store, "TESTCLOCK"])
            c = self.connect(srv)
            # A fixed clock: the reset times below are exact.
            c.call("SLUICE.TESTCLOCK", server_time_us(c))
            self.assertEqual(c.call("SLUICE.TAKE", "k", 5, "1/day"),
                             [1, 5, 4, 0, 86400000])
            self.assertEqual(c.call("SLUICE.TAKE", "k", 5, "1/day"),
                             [1, 5, 3, 0, 172800000])
            self.assertEqual(c.call("SLUICE.TAKEMULTI", 2, "k", "m", 5,
                                    "1/day", 2, "1/day")[:3], [1, 2, 1])
            self.assertEqual(c.call("SLUICE.TAKEMANY", "x", 3, "1/day", 1,
                                    "k", 5, "1/day", 1),
                             [[1, 3, 2, 0, 86400000],
                              [1, 5, 1, 0, 345600000]])
            self.assertEqual(c.call("OBJECT", "ENCODING", "k"), b"int")
            self.assertEqual(c.call("OBJECT", "ENCODING", "x"), b"int")
            stats = c.info("commandstats")
            self.assertEqual("cmdstat_get" in stats, inner, (store, stats))
            self.assertEqual("cmdstat_set" in stats, inner, (store, stats))
            # Small numbers are objects Redis shares between keys: a take
            # on one key replaces its value and leaves the others alone.
            c.call("SET", "s1", "5")
            c.call("SET", "s2", "5")
            c.call("APPEND", "raw", "7")  # a raw-encoded string
            for k in ("s1", "raw"):
                self.assertEqual(c.call("SLUICE.TAKE", k, 5, "1/day")[:3],
                                 [1, 5, 4], k)
                self.assertEqual(c.call("OBJECT", "ENCODING", k), b"int")
            self.assertEqual(c.call("GET", "s2"), b"5")
            self.assertEqual(c.call("PTTL", "s2"), -1)
            self.assertEqual(c.call("GET", "s1"), c.call("GET", "raw"))

    def test_store_modes_and_takemany_decide_alike(self):
        """STORE int, string and call, and TAKEMANY against the same TAKEs
        one after the other: the same replies, stored bytes and expiries
        over random sequences (a state written in one mode is read in
        another through the script-compatible format)."""
        servers = {m: self.redis(module_args=["TESTCLOCK", "STORE", m])
                   for m in ("int", "string", "call")}
        cs = {m: self.connect(s) for m, s in servers.items()}
        many = self.connect(self.redis(module_args=["TESTCLOCK"]))
        rng = random.Random(21)
        base = server_time_us(many) + 30 * DAY_US
        keys = ["a", "b", "c", "{t}d"]
        for step in range(120):
            now = base + step * rng.choice([0, 1, 999, 250000, 60000000])
            for c in list(cs.values()) + [many]:
                c.call("SLUICE.TESTCLOCK", now)
            batch = []
            for _ in range(rng.randint(1, 5)):
                cap, rate = random_limit(rng)
                batch.append((rng.choice(keys), cap, rate,
                              rng.choice([0, 1, 1, 1, 2, 7])))
            singles = {}
            for m, c in cs.items():
                singles[m] = [c.call("SLUICE.TAKE", k, cap, rate, "COST",
                                     cost) for k, cap, rate, cost in batch]
            self.assertEqual(singles["int"], singles["string"])
            self.assertEqual(singles["int"], singles["call"])
            args = [a for d in batch for a in d]
            self.assertEqual(many.call("SLUICE.TAKEMANY", *args),
                             singles["int"], batch)
            for k in keys:
                got = [(c.call("GET", k), c.call("PEXPIRETIME", k))
                       for c in list(cs.values()) + [many]]
                self.assertEqual(len(set(got)), 1, (k, got))

    def test_prefetched_batches_decide_as_batches_without(self):
        """On Redis 7.0 with STORE int the batches and TAKEMULTI prefetch
        their keys (prefetch.c reads the server's dictionaries); that
        changes nothing: large TAKEEACH and TAKEMANY calls (windows of 16
        and more, repeated keys, a key of another type, dictionaries growing
        and rehashing) and TAKEMULTI of up to 16 keys reply and store
        exactly as on a server that does not prefetch."""
        pf = self.redis(module_args=["TESTCLOCK"])
        plain = self.redis(module_args=["TESTCLOCK", "STORE", "string"])
        a, b = self.connect(pf), self.connect(plain)
        on_70 = a.info("server")["redis_version"].startswith("7.0.")
        self.assertIn("batches prefetched" if on_70 else
                      "batches not prefetched", pf.log())
        self.assertIn("batches not prefetched", plain.log())
        for c in (a, b):
            c.call("LPUSH", "alist", "x")
        rng = random.Random(8)
        pool = ["p:%d" % i for i in range(3000)] + ["alist"]
        now = server_time_us(a)
        for step in range(90):
            now += rng.choice([0, 1, 1000, 400000, 3000000])
            for c in (a, b):
                c.call("SLUICE.TESTCLOCK", now)
            pick = [rng.choice(pool) for _ in range(rng.randint(1, 120))]
            if step % 3 == 2:
                multi = list(dict.fromkeys(pick))[:16]
                args = [len(multi)] + multi
                for _ in multi:
                    args += [rng.randint(5, 30), rng.choice(["2/s", "7/h"])]
                cmd = "SLUICE.TAKEMULTI"
            elif step % 3 == 0:
                args = [rng.randint(1, 9), rng.choice(["2/s", "50/min"]),
                        rng.choice([0, 1, 1, 3])] + pick
                cmd = "SLUICE.TAKEEACH"
            else:
                args = []
                for k in pick:
                    args += [k, rng.randint(1, 9), rng.choice(["2/s", "7/h"]),
                             rng.choice([0, 1, 2])]
                cmd = "SLUICE.TAKEMANY"
            self.assertEqual(a.call(cmd, *args), b.call(cmd, *args), step)
        self.assertGreater(a.call("DBSIZE"), 1000)
        # Expiry runs on the servers' real clocks: a key due within
        # 15 s of now may go between the reads on one server and not
        # the other (it did, 44 s into a busy CI run), so those keys are
        # compared by their expiry times alone; all the others (over
        # 1,000 stored states, asserted) by value and expiry.
        soon = server_time_us(a) // 1000 + 15000
        compared = 0
        for k in pool:
            ta, tb = a.call("PEXPIRETIME", k), b.call("PEXPIRETIME", k)
            if any(0 <= t < soon for t in (ta, tb)):
                # Due soon on one: the same time on the other, or gone.
                self.assertTrue(ta == tb or -2 in (ta, tb), (k, ta, tb))
                continue
            va = a.call("GET", k)
            self.assertEqual((va, a.call("PEXPIRETIME", k)),
                             (b.call("GET", k), b.call("PEXPIRETIME", k)), k)
            compared += va is not None
        self.assertGreater(compared, 1000)

    def test_takemany_errors_and_keys(self):
        srv = self.redis()
        c = self.connect(srv)
        c.call("LPUSH", "alist", "x")
        c.call("SET", "text", "hello")
        # A key holding something else fails its own decision only.
        reply = c.call("SLUICE.TAKEMANY", "u", 2, "1/day", 1, "alist", 2,
                       "1/day", 1, "text", 2, "1/day", 1, "u", 2, "1/day",
                       1)
        self.assertEqual(reply[0], [1, 2, 1, 0, 86400000])
        self.assertTrue(str(reply[1]).startswith("WRONGTYPE"), reply)
        self.assertTrue(str(reply[2]).startswith(
            'ERR key "text" does not hold a sluice state'), reply)
        self.assertEqual(reply[3], [1, 2, 0, 0, 172800000])
        # Bad arguments fail the whole call, before anything is decided.
        for args, prefix in [
                ((), "ERR wrong number of arguments"),
                (("u", 2, "1/day"), "ERR wrong number of arguments"),
                (("u", 2, "1/day", 1, "v"), "ERR wrong number of arguments"),
                (("v", 2, "1/day", 1, "u", 2, "1/day", "x"),
                 'ERR decision 2: cost "x" is not a whole number'),
                (("v", 2, "1/day", 1, "u", 2, "fast", 1), "ERR "),
                (("v", 2, "1/day", 1, "u", 2, "1/day",
                  "99999999999999999999"), "ERR decision 2: cost")]:
            reply = c.call("SLUICE.TAKEMANY", *args)
            self.assertIsInstance(reply, RespError, args)
            self.assertTrue(str(reply).startswith(prefix), (args, reply))
        self.assertEqual(c.call("EXISTS", "v"), 0)
        self.assertEqual(c.call("SLUICE.TAKE", "u", 2, "1/day")[:3],
                         [0, 2, 0])
        # Cluster routing sees every key (each 4th argument from the 1st).
        self.assertEqual(c.call("COMMAND", "GETKEYS", "SLUICE.TAKEMANY",
                                "a", 1, "1/s", 1, "b", 1, "1/s", 1),
                         [b"a", b"b"])

    def test_written_keys_signal_watch_and_keyspace_events(self):
        """As SET ... PXAT: an allowed take touches WATCH and fires "set"
        and "expire"; a rejected one or a peek touches nothing."""
        srv = self.redis()
        c = self.connect(srv)
        sub = self.connect(srv)
        c.call("CONFIG", "SET", "notify-keyspace-events", "KEA")
        sub.call("PSUBSCRIBE", "__keyspace@0__:w")
        c.call("SLUICE.TAKE", "w", 1, "1/day")
        self.assertEqual(sub.read()[3], b"set")
        self.assertEqual(sub.read()[3], b"expire")
        for args in (("w", 1, "1/day"), ("w", 1, "1/day", "COST", 0)):
            c.call("WATCH", "w")
            self.assertEqual(c.call("SLUICE.TAKE", *args)[0],
                             1 if args[-1] == 0 else 0)
            c.call("MULTI")
            c.call("PING")
            self.assertEqual(c.call("EXEC"), ["PONG"], args)
        other = self.connect(srv)
        c.call("WATCH", "w2")
        self.assertEqual(other.call("SLUICE.TAKE", "w2", 1, "1/day")[0], 1)
        c.call("MULTI")
        c.call("PING")
        self.assertIsNone(c.call("EXEC"))
        # Nothing else was published: the next event is a new write.
        c.call("SET", "w", "1")
        self.assertEqual(sub.read()[3], b"set")

    def test_takemany_in_a_cluster_needs_one_slot(self):
        nodes, clients = self.cluster()
        first = clients[nodes[0].port]
        # Keys of one slot (one hash tag) go to the node owning it.
        reply = first.call("SLUICE.TAKEMANY", "{u7}:a", 5, "1/day", 1,
                           "{u7}:b", 5, "1/day", 2)
        port = nodes[0].port
        if isinstance(reply, RespError):
            self.assertTrue(str(reply).startswith("MOVED"), reply)
            port = int(str(reply).split()[2].rsplit(":", 1)[1])
            reply = clients[port].call("SLUICE.TAKEMANY", "{u7}:a", 5,
                                       "1/day", 1, "{u7}:b", 5, "1/day", 2)
        self.assertEqual(reply, [[1, 5, 4, 0, 86400000],
                                 [1, 5, 3, 0, 172800000]])
        self.assertEqual(clients[port].call("EXISTS", "{u7}:a", "{u7}:b"), 2)
        # Keys of several slots are refused before anything is decided.
        reply = clients[port].call("SLUICE.TAKEMANY", "a", 5, "1/day", 1,
                                   "b", 5, "1/day", 1)
        self.assertIsInstance(reply, RespError)
        self.assertTrue(str(reply).startswith("CROSSSLOT"), reply)

    # -- bad input ----------------------------------------------------------

    def test_every_bad_argument_is_an_error(self):
        srv = self.redis()
        c = self.connect(srv)
        c.call("LPUSH", "alist", "x")
        c.call("SET", "text", "hello")
        c.call("SET", "float", "1.5")
        c.call("SET", "huge", "99999999999999999999")
        c.call("SET", "spaced", " 5")
        bad = [
            (["SLUICE.TAKE"], "ERR wrong number of arguments"),
            (["SLUICE.TAKE", "k"], "ERR wrong number of arguments"),
            (["SLUICE.TAKE", "k", "10"], "ERR wrong number of arguments"),
            (["SLUICE.TAKE", "k", "10", "2/s", "COST"],
             "ERR wrong number of arguments"),
            (["SLUICE.TAKE", "k", "10", "2/s", "COST", "1", "x"],
             "ERR wrong number of arguments"),
            (["SLUICE.TAKE", "k", "ten", "2/s"], "ERR capacity \"ten\""),
            (["SLUICE.TAKE", "k", "0", "2/s"], "ERR capacity must be"),
            (["SLUICE.TAKE", "k", "-1", "2/s"], "ERR capacity \"-1\""),
            (["SLUICE.TAKE", "k", "1.5", "2/s"], "ERR capacity \"1.5\""),
            (["SLUICE.TAKE", "k", "99999999999999999999", "2/s"],
             "ERR capacity"),
            (["SLUICE.TAKE", "k", "10", "2/x"], "ERR rate \"2/x\""),
            (["SLUICE.TAKE", "k", "10", "0/s"], "ERR rate \"0/s\""),
            (["SLUICE.TAKE", "k", "10", ""], "ERR rate"),
            (["SLUICE.TAKE", "k", "10", "2/s\x00"], "ERR capacity and rate"),
            (["SLUICE.TAKE", "k", "10", "1001/s"], "ERR rate \"1001/s\" is too fine"),
            (["SLUICE.TAKE", "k", "10000000000", "1/day"],
             "ERR capacity 10000000000 is too large"),
            (["SLUICE.TAKE", "k", "10", "2/s", "COST", "-1"],
             "ERR COST \"-1\""),
            (["SLUICE.TAKE", "k", "10", "2/s", "COST", "1.5"],
             "ERR COST \"1.5\""),
            (["SLUICE.TAKE", "k", "10", "2/s", "COST", ""], "ERR COST"),
            (["SLUICE.TAKE", "k", "10", "2/s", "COST", "4503599627370497"],
             "ERR COST 4503599627370497 is too large"),
            (["SLUICE.TAKE", "k", "10", "2/s", "WEIGHT", "1"],
             "ERR unknown option \"WEIGHT\""),
            (["SLUICE.TAKE", "alist", "10", "2/s"], "WRONGTYPE"),
            (["SLUICE.TAKE", "text", "10", "2/s"],
             "ERR key \"text\" does not hold a sluice state"),
            (["SLUICE.TAKE", "float", "10", "2/s"], "ERR key \"float\""),
            (["SLUICE.TAKE", "huge", "10", "2/s"], "ERR key \"huge\""),
            (["SLUICE.TAKE", "spaced", "10", "2/s"], "ERR key \"spaced\""),
            (["SLUICE.TAKEMULTI"], "ERR wrong number of arguments"),
            (["SLUICE.TAKEMULTI", "0", "10", "2/s"], "ERR numkeys"),
            (["SLUICE.TAKEMULTI", "x", "k", "10", "2/s"], "ERR numkeys"),
            (["SLUICE.TAKEMULTI", "17"] + ["k"] * 51, "ERR numkeys"),
            (["SLUICE.TAKEMULTI", "2", "a", "b", "10", "2/s"],
             "ERR numkeys is 2"),
            (["SLUICE.TAKEMULTI", "1", "a", "10", "2/s", "5"],
             "ERR numkeys is 1"),
            (["SLUICE.TAKEMULTI", "2", "a", "a", "1", "2/s", "1", "1/s"],
             "ERR key 2 is the same as key 1"),
            (["SLUICE.TAKEMULTI", "2", "a", "b", "1", "2/s", "1", "1/q"],
             "ERR rate \"1/q\""),
            (["SLUICE.TAKEMULTI", "1", "a", "1", "2/s", "COST", "x"],
             "ERR COST"),
            (["SLUICE.TAKEMULTI", "2", "a", "alist", "1", "2/s", "1", "1/s"],
             "WRONGTYPE"),
            (["SLUICE.TESTCLOCK", "1"], "ERR unknown command"),
        ]
        for args, prefix in bad:
            reply = c.call(*args)
            self.assertIsInstance(reply, RespError, (args, reply))
            self.assertTrue(str(reply).startswith(prefix),
                            (args, str(reply), prefix))
        self.assertEqual(c.call("PING"), "PONG")
        # Nothing was written by any of them.
        self.assertEqual(c.call("EXISTS", "k", "a", "b"), 0)
        self.assertEqual(c.call("GET", "text"), b"hello")

    def test_module_refuses_unknown_load_arguments(self):
        for args in (["FASTER"], ["STORE", "fast"], ["STORE"]):
            with self.assertRaises(RuntimeError):
                Redis(module_args=args)


if __name__ == "__main__":
    for path, what in [(MODULE, "the module"), (REPLAY, "the replay tool")]:
        if not os.path.exists(path):
            print("missing %s: %s (build first)" % (what, path))
            sys.exit(1)
    if not REDIS_SERVER or not REDIS_CLI:
        print("redis-server / redis-cli not found")
        sys.exit(1)
    unittest.main(verbosity=2)
