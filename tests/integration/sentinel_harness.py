"""Redis Sentinel for the integration tests: `Sentinel` (one
`redis-server --sentinel` on a free loopback port) and `SentinelGroup` (a
master, a replica and n Sentinels), on harness.py's processes and
directories, stopped afterwards whatever happened."""
import os
import random
import subprocess
import tempfile
import time

from harness import (DirProc, Proc, RedisServer, start_on_free_ports,
                     wait_until)


class Sentinel(DirProc):
    """`redis-server --sentinel` on a free loopback port watching
    `master` (a RedisServer) as `name`, with its own sentinel.conf (which
    Sentinel rewrites as it learns) in a temporary directory removed by
    stop().  password: the Sentinel's own requirepass (also what it
    presents to the other Sentinels); the master's password is taken from
    the master.  tls: a TlsFiles; the Sentinel then listens with TLS only
    and reaches the servers and the other Sentinels over TLS.
    slaveof: the name the servers know SLAVEOF by (rename-command)."""

    def __init__(self, master, name="mymaster", quorum=2,
                 down_after_ms=1000, failover_timeout_ms=5000,
                 password=None, tls=None, slaveof=None):
        self.name = name
        self.slaveof = slaveof
        self.password = password
        self.tls = tls
        self.down_after_ms = down_after_ms
        self.dir = tempfile.mkdtemp(prefix="sluice-sentinel-")

        # A port taken between choosing and binding: another one (see
        # RedisServer).  Its own line once it listens (a Sentinel says no
        # "Ready" line).
        def init(port):
            self.port = port
            self._spawn(master, name, quorum, down_after_ms,
                        failover_timeout_ms, password, tls)
        try:
            start_on_free_ports(self, init, attempts=4,
                                ready=lambda port: "Running mode=sentinel"
                                in self.log())
        except BaseException:
            self.discard()
            raise
        if not wait_until(lambda: self.poll() is None and self.ping(),
                          timeout=20):
            raise RuntimeError("sentinel on %d never answered PING:\n%s"
                               % (self.port, self.log()))

    def _spawn(self, master, name, quorum, down_after_ms,
               failover_timeout_ms, password, tls):
        conf = os.path.join(self.dir, "sentinel.conf")
        if tls:
            lines = ["port 0", "tls-port %d" % self.port,
                     "tls-cert-file %s" % tls.server_cert,
                     "tls-key-file %s" % tls.server_key,
                     "tls-ca-cert-file %s" % tls.ca,
                     "tls-auth-clients no", "tls-replication yes"]
        else:
            lines = ["port %d" % self.port]
        lines += ["bind 127.0.0.1", "dir %s" % self.dir,
                 "sentinel monitor %s 127.0.0.1 %d %d"
                 % (name, master.port, quorum),
                 "sentinel down-after-milliseconds %s %d"
                 % (name, down_after_ms),
                 "sentinel failover-timeout %s %d"
                 % (name, failover_timeout_ms),
                 "sentinel parallel-syncs %s 1" % name]
        if master.password:
            lines.append("sentinel auth-pass %s %s"
                         % (name, master.password))
        if password:
            lines.append("requirepass %s" % password)
        if self.slaveof:
            lines.append("sentinel rename-command %s SLAVEOF %s"
                         % (name, self.slaveof))
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        Proc.__init__(self, ["redis-server", conf, "--sentinel"],
                      cwd=self.dir)


    def addr(self):
        return "127.0.0.1:%d" % self.port

    def cli_args(self):
        """redis-cli's options to reach this Sentinel."""
        out = ["-h", "127.0.0.1", "-p", str(self.port)]
        if self.password:
            out += ["-a", self.password, "--no-auth-warning"]
        if self.tls:
            out += self.tls.cli_args()
        return out

    def master_port(self):
        """The master's port as this Sentinel names it, or None."""
        try:
            out = self.cli("SENTINEL", "get-master-addr-by-name",
                           self.name).split()
        except subprocess.TimeoutExpired:
            return None
        return int(out[1]) if len(out) == 2 and out[1].isdigit() else None

    def flags(self):
        """The flags of the master this Sentinel watches (SENTINEL
        MASTER): "master", plus "failover_in_progress" during a failover,
        "s_down"/"o_down" while it thinks the master is down."""
        try:
            out = self.cli("SENTINEL", "master", self.name).splitlines()
        except subprocess.TimeoutExpired:
            return set()
        for i in range(len(out) - 1):
            if out[i] == "flags":
                return set(out[i + 1].split(","))
        return set()

    def known(self, what):
        """SENTINEL replicas|sentinels <name>: the ports listed."""
        out = self.cli("SENTINEL", what, self.name).splitlines()
        return {int(out[i + 1]) for i in range(len(out) - 1)
                if out[i] == "port" and out[i + 1].isdigit()}


class SentinelGroup:
    """A master, one replica following it and `n` Sentinels watching it
    (quorum 2), all on loopback.  Returns only once the replica is in
    sync and every Sentinel knows the master, the replica and the other
    Sentinels (so a failover can happen as soon as the master dies).
    tls: a TlsFiles; every process then speaks TLS only.  stop() stops
    every process, also when the constructor fails.

    Another group's Sentinels still running on this machine (a parallel
    test, another checkout's) know the ports of the servers they watched;
    one of those ports reused by this group's master got it demoted by
    them to a replica of their master, and resynced empty (a drained
    bucket lost although WAIT had confirmed it), and this group's
    Sentinels, hearing the same master name with a higher epoch on it,
    followed them.  So each group has its own master name (default:
    unique), and its servers know SLAVEOF and REPLICAOF only by names
    that its own Sentinels alone are told."""

    _made = 0

    def __init__(self, n=3, name=None, password=None,
                 sentinel_password=None, down_after_ms=1000,
                 failover_timeout_ms=5000, timeout=60, tls=None):
        SentinelGroup._made += 1
        tag = "%d-%d-%d" % (os.getpid(), SentinelGroup._made,
                            random.randrange(1 << 30))
        self.name = name or "mymaster-" + tag
        slaveof = "SLAVEOF-" + tag
        extra = ["--rename-command", "SLAVEOF", slaveof,
                 "--rename-command", "REPLICAOF", "REPLICAOF-" + tag]
        name = self.name
        self.master = self.replica = None
        self.sentinels = []
        try:
            self.master = RedisServer(password=password, tls=tls,
                                      extra=extra)
            self.replica = RedisServer(password=password, tls=tls,
                                       replicaof=self.master, extra=extra)
            deadline = time.monotonic() + timeout
            if not wait_until(lambda: self.replica.info("replication").get(
                    "master_link_status") == "up", timeout, 0.05):
                raise RuntimeError("the replica never synced:\n"
                                   + self.replica.log())
            self.sentinels = [Sentinel(self.master, name, 2, down_after_ms,
                                       failover_timeout_ms,
                                       sentinel_password, tls, slaveof)
                              for _ in range(n)]
            others = {s.port for s in self.sentinels}
            for s in self.sentinels:
                left = max(1.0, deadline - time.monotonic())
                if not wait_until(lambda: (
                        s.master_port() == self.master.port and
                        self.replica.port in s.known("replicas") and
                        s.known("sentinels") == others - {s.port}),
                        left, 0.1):
                    raise RuntimeError(
                        "sentinel %d never saw the group: replicas %s, "
                        "sentinels %s\n%s" % (s.port, s.known("replicas"),
                                              s.known("sentinels"),
                                              s.log()))
        except BaseException:
            self.stop()
            raise

    def addrs(self):
        return [s.addr() for s in self.sentinels]

    def master_port(self):
        """The master as the first live Sentinel names it (or None)."""
        for s in self.sentinels:
            if s.poll() is None:
                return s.master_port()
        return None

    def settled_on(self, port):
        """Whether every live Sentinel names `port` as the master and
        none is in a failover.  Until then a Sentinel that has not yet
        heard the new configuration still holds the old master as the
        master: if that one comes back, it makes the new master a replica
        of it (Sentinel "fixes" a replica that says it is a master)."""
        live = [s for s in self.sentinels if s.poll() is None]
        return bool(live) and all(
            s.master_port() == port and
            not s.flags() & {"failover_in_progress", "s_down", "o_down"}
            for s in live)

    def stop(self):
        for p in self.sentinels + [self.replica, self.master]:
            if p is not None:
                p.stop()
