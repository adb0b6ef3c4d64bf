"""Shared helpers for the integration tests (standard library only).

Every process a test starts goes through Proc, which registers it for
cleanup at exit, so a failing or interrupted test never leaves a server
behind.  Servers listen on free loopback ports.

Environment: SLUICE_BUILD (the build directory holding the `sluice`
binary) and SLUICE_SRC (the source tree), both set by CTest.
"""
import atexit
import http.client
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))
BUILD = os.environ.get("SLUICE_BUILD", os.path.join(SRC, "build"))
SLUICE = os.path.join(BUILD, "sluice")

_procs = []
_dirs = []  # temporary directories removed at exit


def free_port(host="127.0.0.1"):
    """A loopback TCP port nobody listens on right now (on host: an IPv4
    or an IPv6 address).  Someone may take it before our server binds it:
    start servers with start_on_free_ports(), which then chooses again."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def in_use(text):
    """True when text (a log, an error) says a bind failed because the
    address was taken (EADDRINUSE), in the words of redis-server, sluice,
    nginx ("Address already in use"), Caddy ("address already in use")
    or Node ("EADDRINUSE")."""
    return "address already in use" in text.lower() or "EADDRINUSE" in text


def listens(pid, port):
    """True when process pid itself holds a listening TCP socket on port
    (IPv4 or IPv6, any address): a port chosen free and taken meanwhile
    by someone else's server accepts connections too, so accepting is no
    proof that ours is up."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.readlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address "ADDR:PORT" (hex), state 0A is LISTEN
            if fields[3] == "0A" and \
                    int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add("socket:[%s]" % fields[9])
    if not inodes:
        return False
    fds = "/proc/%d/fd" % pid
    try:
        names = os.listdir(fds)
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(os.path.join(fds, name)) in inodes:
                return True
        except OSError:
            pass
    return False


def start_on_free_ports(proc, init, nports=1, host="127.0.0.1", ready=None,
                        attempts=5, timeout=60.0, choose=None):
    """Starts a server on ports chosen free, and again on new ones when a
    port was taken between choosing and binding (EADDRINUSE): the one
    way every test starts a server on a port of its own.

    init(*ports) starts proc's process (Proc.__init__(proc, ...)) to
    listen on `nports` distinct ports of `host`; ready(*ports) says when
    it is up (default: the process itself listens on every one of them,
    listens()).  An attempt whose process exits saying the address is in
    use (in_use(), its log) is stopped and the next one chooses again;
    any other exit, or a process never ready within `timeout` s, raises
    RuntimeError with its log (the process stopped).  choose() gives a
    port (default: free_port(host)).  Returns the ports."""
    if choose is None:
        def choose():
            return free_port(host)
    if ready is None:
        def ready(*ports):
            return all(listens(proc.pid, p) for p in ports)
    for _ in range(attempts):
        ports = []
        while len(ports) < nports:
            p = choose()
            if p not in ports:
                ports.append(p)
        init(*ports)
        if wait_until(lambda: ready(*ports) or proc.poll() is not None,
                      timeout, 0.02) and ready(*ports):
            return ports
        log = proc.log()
        if proc.poll() is None:
            Proc.stop(proc)
            raise RuntimeError("%s never got ready on %s:\n%s"
                               % (proc.argv[0], ports, log))
        Proc.stop(proc)  # this attempt's process and log only
        if not in_use(log):
            raise RuntimeError("%s exited with %s before listening:\n%s"
                               % (proc.argv[0], proc.returncode, log))
    raise RuntimeError("no free port after %d attempts" % attempts)


def run_on_free_port(argv_for, attempts=5, timeout=60):
    """Runs argv_for(port) (a `sluice serve --listen 127.0.0.1:port` that
    is to fail for a reason of its own) to its end, again with a new port
    while it fails because that port was taken meanwhile; returns the
    subprocess.CompletedProcess."""
    for _ in range(attempts):
        port = free_port()
        p = subprocess.run(argv_for(port), capture_output=True, text=True,
                           timeout=timeout)
        if not ("listen 127.0.0.1:%d: " % port in p.stderr
                and in_use(p.stderr)):
            return p
    raise RuntimeError("no free port after %d attempts" % attempts)


def wait_for_port(port, timeout=20.0, proc=None):
    """Waits until something accepts on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("process exited with %s before listening:\n%s"
                               % (proc.returncode, proc.log()))
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("nothing listens on port %d" % port)


def wait_until(predicate, timeout=10.0, interval=0.02):
    """Polls predicate() until it is true; returns its last value."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value


def peer_has_read(sock):
    """True once the other end of loopback TCP socket `sock` has read
    every byte sent on it: the kernel's socket for that end (accepted or
    still in the listener's backlog) holds nothing unread.  A test polls
    it (wait_until) instead of sleeping for the server to read."""
    def hexaddr(addr):
        ip = "".join("%02X" % int(b) for b in reversed(addr[0].split(".")))
        return "%s:%04X" % (ip, addr[1])
    local, remote = hexaddr(sock.getpeername()), hexaddr(sock.getsockname())
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[2] == remote:
                return int(fields[4].split(":")[1], 16) == 0
    return False


def raise_nofile(n):
    """Raises this process's open-file limit to at least n (if allowed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(max(soft, n), hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


NODE_PKG = os.path.join(SRC, "bindings", "node")
NODE_ADDON = os.path.join(NODE_PKG, "build", "sluice.node")


def node_addon_mtime():
    """bindings/node's built addon's mtime (ns), or None when not built."""
    try:
        return os.stat(NODE_ADDON).st_mtime_ns
    except FileNotFoundError:
        return None


def build_node_addon(unless_built_since):
    """Builds bindings/node's addon (scripts/build.js) unless it was built
    after `unless_built_since` (a node_addon_mtime() taken before an
    `npm ci`/`npm install`).  npm runs the package's install script, which
    builds it, but may hold install scripts back; building it a second time
    doubled the longest step of the Node tests (minutes on a busy machine,
    past the test's timeout)."""
    now = node_addon_mtime()
    if now is not None and now != unless_built_since:
        return
    env = {k: v for k, v in os.environ.items()
           if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LD_PRELOAD")}
    subprocess.run([shutil.which("node"), "scripts/build.js"], cwd=NODE_PKG,
                   env=env, check=True, capture_output=True, timeout=600)


class Proc:
    """A child process whose stdout+stderr go to a temporary log file."""

    def __init__(self, argv, env=None, cwd=None):
        self.argv = list(argv)
        self.logfile = tempfile.NamedTemporaryFile(
            prefix="sluice-test-", suffix=".log", delete=False)
        self.p = subprocess.Popen(self.argv, stdout=self.logfile,
                                  stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                  start_new_session=True)
        self.logfile.close()  # the child holds its own descriptor
        self.pid = self.p.pid
        _procs.append(self)

    def poll(self):
        return self.p.poll()

    @property
    def returncode(self):
        return self.p.returncode

    def log(self):
        with open(self.logfile.name, "r", errors="replace") as f:
            return f.read()

    def wait_log(self, text, count=1, timeout=30.0):
        """Waits until the log holds `text` at least `count` times; true
        if it does.  Read a log line only after this says it is there: a
        counter, a port or an answer may come before the line is written
        (on a busy machine, long before)."""
        return bool(wait_until(lambda: self.log().count(text) >= count,
                               timeout, 0.02))

    def signal(self, sig):
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def wait(self, timeout=30):
        return self.p.wait(timeout)

    def stop(self, timeout=15):
        """SIGTERM, then SIGKILL if it does not go; returns the status."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        if self in _procs:
            _procs.remove(self)
        try:
            os.unlink(self.logfile.name)
        except OSError:
            pass
        return self.p.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Server(Proc):
    """A process listening on ports of its own, started with
    start_on_free_ports(): argv(*ports) gives its command line and
    env(*ports) its environment (None: ours), both called again at each
    attempt; ready(server, *ports) says when it is up (default: it
    listens on every port).  self.ports, self.port the first."""

    def __init__(self, argv, env=None, cwd=None, nports=1,
                 host="127.0.0.1", ready=None):
        def init(*ports):
            self.ports, self.port = list(ports), ports[0]
            Proc.__init__(self, argv(*ports),
                          env=env(*ports) if callable(env) else env, cwd=cwd)
        start_on_free_ports(self, init, nports, host,
                            None if ready is None else
                            lambda *ports: ready(self, *ports))


@atexit.register
def _cleanup():
    for p in list(_procs):
        try:
            p.p.kill()
            p.p.wait(5)
        except Exception:
            pass
        if getattr(p, "dir", None):  # a cluster node's nodes.conf
            shutil.rmtree(p.dir, ignore_errors=True)
        # A process that failed to start was never stop()ped: its log
        # and config file are still there.
        for path in (p.logfile.name, getattr(p, "config_path", None)):
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
    for d in list(_dirs):
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------- sluice


ADDR_IN_USE = "Address already in use"

# What `sluice serve` logs once its sockets are bound, its signal handlers
# installed and its threads started: only then may a test send it SIGHUP
# (before, the signal's default action ends the process), and only a log
# line of its own proves the port is its own (a port chosen free may be
# taken by someone else before the server binds it; something then
# answers on it, but not the server under test).
LISTENING = "listening on 127.0.0.1:%d"

# The last line of every SIGHUP's handling, written after the reload's
# metrics and after every thread was handed the new rules.
RELOAD_LINES = ("SIGHUP: reloaded", "SIGHUP: reload rejected",
                "SIGHUP: out of memory", "SIGHUP: running the built-in")


def listen_addr(host, port):
    """host:port as sluice's --listen and its log write it ([::1]:80)."""
    return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)


def start_listening(proc, init, attempts=5, timeout=60.0, host="127.0.0.1"):
    """Runs init(port) (which starts `proc`'s `sluice serve` listening on
    host:port) until the process says it listens there (LISTENING), on a
    new port when the one chosen was taken (start_on_free_ports()).
    Returns the port."""
    line = LISTENING.replace("127.0.0.1:%d", "%s")
    return start_on_free_ports(
        proc, init, host=host, attempts=attempts, timeout=timeout,
        ready=lambda port: line % listen_addr(host, port) in proc.log())[0]


def check_config(text, path=None):
    """`sluice check-config` of text, written to path (else to a file of
    its own, removed at exit): the path and the finished process."""
    if path is None:
        d = tempfile.mkdtemp(prefix="sluice-check-")
        _dirs.append(d)
        path = os.path.join(d, "sluice.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path, subprocess.run([SLUICE, "check-config", path],
                                capture_output=True, text=True, timeout=60)


def keep_alive_checks(port, headers, running, errors, pause=0.0):
    """GET /v1/check with headers on one keep-alive connection while
    running() holds, pause seconds apart: (sent, answered, response) per
    answer.  A broken connection is counted in errors (its repr) and
    opened again."""
    client = None
    try:
        while running():
            try:
                if client is None:
                    client = Client(port, timeout=10)
                t0 = time.monotonic()
                r = client.request("GET", "/v1/check", headers)
                yield t0, time.monotonic(), r
            except Exception as e:
                errors.append(repr(e))
                if client:
                    client.close()
                client = None
            if pause:
                time.sleep(pause)
    finally:
        if client:
            client.close()


def race(port, n, path, headers):
    """n GET requests of path with headers, all released at once (a
    barrier, so that they meet at the store together); their statuses."""
    gate = threading.Barrier(n, timeout=60)
    statuses = []
    lock = threading.Lock()

    def one():
        try:
            gate.wait()
        except threading.BrokenBarrierError:
            pass
        r = request(port, "GET", path, headers)
        with lock:
            statuses.append(r.status)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return statuses


def reload(proc, timeout=30.0):
    """Sends SIGHUP to a started `sluice serve` and waits for the line
    that ends its handling; returns that line (\"SIGHUP: reloaded ...\",
    \"SIGHUP: reload rejected ...\").  Then the log holds every line the
    reload wrote, its metrics count it, and each thread takes the new
    rules before the next request it reads.  Waiting for the metric
    instead would read the log before the reload wrote it."""
    def lines():
        return [ln for ln in proc.log().splitlines()
                if any(k in ln for k in RELOAD_LINES)]
    before = len(lines())
    proc.signal(signal.SIGHUP)
    if not wait_until(lambda: len(lines()) > before, timeout, 0.02):
        raise RuntimeError("SIGHUP: no reload line within %.0f s:\n%s"
                           % (timeout, proc.log()))
    return lines()[before]


class Sluice(Proc):
    """`sluice serve` on a free port of host (127.0.0.1, or ::1 for IPv6),
    with an optional YAML config text (or a callable giving it, called
    again at each start attempt).  Returns once the server said it listens
    on its port (see LISTENING)."""

    def __init__(self, config=None, threads=None, extra=(), env=None,
                 host="127.0.0.1"):
        self.config_path = None
        if config is not None:
            fd, self.config_path = tempfile.mkstemp(prefix="sluice-",
                                                    suffix=".yaml")
            os.close(fd)
            if not callable(config):
                self.write_config(config)
        if env is not None:
            env = dict(os.environ, **env)

        def init(port):
            self.port = port
            if callable(config):
                # Written again at each attempt: its own ports (e.g.
                # admin.listen) are chosen again with the listen port.
                self.write_config(config())
            argv = [SLUICE, "serve", "--listen", listen_addr(host, port)]
            if self.config_path:
                argv += ["-c", self.config_path]
            if threads:
                argv += ["--threads", str(threads)]
            # A callable gives each attempt its own arguments (its own
            # further ports, chosen again with the listen port).
            more = extra() if callable(extra) else extra
            Proc.__init__(self, argv + list(more), env=env)
        try:
            start_listening(self, init, host=host)
        except BaseException:
            if hasattr(self, "p"):
                self.stop()
            elif self.config_path:
                os.unlink(self.config_path)
            raise

    def reload(self, timeout=30.0):
        """SIGHUP, then the line that ends its handling (see reload())."""
        return reload(self, timeout)

    def write_config(self, text):
        # Written whole and renamed, so a reload never sees half a file.
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config_path)

    def stop(self, timeout=15):
        rc = super().stop(timeout)
        if self.config_path:
            try:
                os.unlink(self.config_path)
            except OSError:
                pass
        return rc

    def request(self, method, path, headers=None, body=None):
        return request(self.port, method, path, headers, body)

    def client(self):
        return Client(self.port)

    def metrics(self):
        return parse_metrics(self.request("GET", "/metrics").body.decode())


# --------------------------------------------------------------- HTTP


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case name -> value
        self.body = body

    def header(self, name):
        return self.headers.get(name.lower())

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "<Response %d %r %r>" % (self.status, self.headers, self.body)


def _response(r):
    body = r.read()
    return Response(r.status, {k.lower(): v for k, v in r.getheaders()},
                    body)


class Client:
    """One keep-alive connection (http.client)."""

    def __init__(self, port, timeout=10):
        self.conn = http.client.HTTPConnection("127.0.0.1", port,
                                               timeout=timeout)

    def request(self, method, path, headers=None, body=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        self.conn.request(method, path, body=body, headers=headers or {})
        return _response(self.conn.getresponse())

    def close(self):
        self.conn.close()


def request(port, method, path, headers=None, body=None):
    """One request on a fresh connection."""
    c = Client(port)
    try:
        return c.request(method, path, headers, body)
    finally:
        c.close()


def read_response(f):
    """Reads one HTTP/1.1 response (Content-Length framed) from a socket
    file; returns a Response, or None at end of stream."""
    line = f.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split(" ", 2)
    status = int(parts[1])
    headers = {}
    while True:
        line = f.readline().decode("latin-1")
        if line in ("\r\n", "\n", ""):
            break
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    body = f.read(n) if n else b""
    return Response(status, headers, body)


def raw(port, data, timeout=10, half_close=False):
    """Sends raw bytes on a fresh connection; returns every response read
    until the server closes (or timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        f = s.makefile("rb")
        out = []
        try:
            while True:
                r = read_response(f)
                if r is None:
                    break
                out.append(r)
        except (socket.timeout, ConnectionResetError):
            pass
        return out
    finally:
        s.close()


def parse_metrics(text):
    """Prometheus text -> {'name{labels}': float} (labels as printed)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        k, v = line.rsplit(" ", 1)
        out[k] = float(v)
    return out


# -------------------------------------------------------------- redis


def free_cluster_port():
    """A port free together with port + 10000 (a cluster node's bus),
    both below the ephemeral range so the kernel hands neither out to
    someone else meanwhile."""
    rnd = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(1000):
        port = rnd.randrange(20000, 30000)
        if _port_free(port) and _port_free(port + 10000):
            return port
    raise RuntimeError("no free cluster port")


def _port_free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class DirProc(Proc):
    """A redis-server (or Sentinel) working in its own temporary
    directory (self.dir), which stop() removes; cli() runs redis-cli with
    the subclass's cli_args()."""

    def cli(self, *args):
        p = subprocess.run(["redis-cli"] + self.cli_args() +
                           [str(a) for a in args], capture_output=True,
                           text=True, timeout=10)
        return p.stdout.strip()

    def ping(self):
        try:
            return self.cli("PING") == "PONG"
        except subprocess.TimeoutExpired:
            return False

    def stop(self, timeout=15):
        rc = super().stop(timeout)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        return rc

    def discard(self):
        """After a start that failed: stops the process, if one was
        started, and removes the directory."""
        if hasattr(self, "p"):
            self.stop()
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class RedisServer(DirProc):
    """redis-server on a free loopback port (no persistence), working in a
    temporary directory removed by stop().  kill() is SIGKILL; start()
    again brings it back on the same port, empty.  cluster=True:
    --cluster-enabled yes, its nodes.conf in that directory.  password:
    --requirepass (cli() and ping() authenticate with it; a replica also
    uses it as masterauth).
    tls: a TlsFiles; the server then listens with TLS only (--port 0,
    --tls-port), replicates and talks to its cluster bus over TLS, and
    with tls_auth_clients=True refuses clients without a certificate
    signed by the CA.  cert: a (certificate, key) pair to present
    instead of the TlsFiles' server certificate (cli() then skips
    verification).  replicaof: another RedisServer to follow.
    extra: more redis-server arguments (e.g. --rename-command)."""

    def __init__(self, port=None, cluster=False, password=None, tls=None,
                 tls_auth_clients=False, replicaof=None, cert=None,
                 extra=()):
        self.extra = list(extra)
        self.cluster = cluster
        self.password = password
        self.tls = tls
        self.cert = cert
        self.tls_auth_clients = tls_auth_clients
        self.replicaof = replicaof
        # Its working directory: a cluster node's nodes.conf, and the
        # snapshot a replica receives when it syncs.
        self.dir = tempfile.mkdtemp(prefix="sluice-redis-")
        if port is not None:
            self.port = port
            self._start()
            return
        # A port chosen free may be taken before redis-server binds it
        # (and then PING is answered by someone else's server): the
        # server's own "Ready" line, or another port.
        def init(port):
            self.port = port
            self._spawn()
        try:
            start_on_free_ports(self, init, attempts=4, ready=self._ready,
                                choose=free_cluster_port if cluster
                                else None)
        except BaseException:
            self.discard()
            raise
        self._wait_ping()

    def _ready(self, port=None):
        return "Ready to accept connections" in self.log()

    def _start(self):
        """Starts it on self.port (no other): up once it answers PING."""
        self._spawn()
        wait_until(lambda: self._ready() or self.poll() is not None, 20)
        self._wait_ping()

    def _wait_ping(self):
        if not wait_until(lambda: self.poll() is None and self.ping(),
                          timeout=20):
            raise RuntimeError("redis-server on %d never answered PING:\n%s"
                               % (self.port, self.log()))

    def _spawn(self):
        if self.dir is None:  # stopped, then started again
            self.dir = tempfile.mkdtemp(prefix="sluice-redis-")
        try:  # what a replica received: a restart starts empty
            os.unlink(os.path.join(self.dir, "dump.rdb"))
        except OSError:
            pass
        # A replica syncs at once (the master would wait 5 s for more
        # replicas to join the transfer).
        argv = ["redis-server", "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.dir,
                "--repl-diskless-sync-delay", "0"]
        if self.tls:
            cert, key = self.cert or (self.tls.server_cert,
                                      self.tls.server_key)
            argv += ["--port", "0", "--tls-port", str(self.port),
                     "--tls-cert-file", cert, "--tls-key-file", key,
                     "--tls-ca-cert-file", self.tls.ca,
                     "--tls-auth-clients",
                     "yes" if self.tls_auth_clients else "no",
                     "--tls-replication", "yes"]
            if self.cluster:
                argv += ["--tls-cluster", "yes"]
        else:
            argv += ["--port", str(self.port)]
        if self.password:
            argv += ["--requirepass", self.password,
                     "--masterauth", self.password]
        if self.replicaof:
            argv += ["--replicaof", "127.0.0.1", str(self.replicaof.port)]
        if self.cluster:
            argv += ["--cluster-enabled", "yes",
                     "--cluster-config-file", "nodes.conf",
                     "--cluster-node-timeout", "5000"]
        argv += self.extra
        previous = getattr(self, "logfile", None)  # before a kill()
        super().__init__(argv)
        if previous:
            try:
                os.unlink(previous.name)
            except OSError:
                pass

    def seed(self):
        return "127.0.0.1:%d" % self.port

    def start(self):
        self._start()

    def kill(self):
        self.signal(signal.SIGKILL)
        self.wait()
        if self in _procs:
            _procs.remove(self)

    def cli_args(self):
        """redis-cli's options to reach this server (TLS and password)."""
        out = ["-h", "127.0.0.1", "-p", str(self.port)]
        if self.tls:
            out += self.tls.cli_args()
            if self.cert:
                out.append("--insecure")
        if self.password:
            out += ["-a", self.password, "--no-auth-warning"]
        return out

    def info(self, section):
        """INFO section -> {field: value} (strings)."""
        out = {}
        for line in self.cli("INFO", section).splitlines():
            k, sep, v = line.partition(":")
            if sep:
                out[k] = v.strip()
        return out

    def url(self):
        return "%s://127.0.0.1:%d" % ("rediss" if self.tls else "redis",
                                      self.port)


# ---------------------------------------------------------------- TLS


class TlsFiles:
    """Test certificates made with the openssl command in a temporary
    directory (removed at exit): a CA; a server certificate it signed for
    CN localhost with the names DNS:localhost and IP:127.0.0.1; a client
    certificate it signed (for mutual TLS); and a second CA, for clients
    that must not trust the server, which signed a certificate for
    localhost too (a server certificate from the wrong CA).  EC P-256
    keys: quick to make, and every TLS version Redis speaks takes them."""

    CONF = """
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
# Redis presents the same certificate when it connects to a master or a
# cluster peer, so it must be good for both ends.
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-tls-")
        _dirs.append(self.dir)
        self.conf = self._path("openssl.cnf")
        with open(self.conf, "w") as f:
            f.write(self.CONF)
        self.ca, self.ca_key = self._ca("ca", "sluice test CA")
        self.other_ca, self.other_ca_key = self._ca("other-ca",
                                                    "sluice unrelated CA")
        self.server_cert, self.server_key = self._leaf(
            "server", "localhost", "server", 1001)
        self.client_cert, self.client_key = self._leaf(
            "client", "sluice test client", "client", 1002)
        self.other_server_cert, self.other_server_key = self._leaf(
            "other-server", "localhost", "server", 1003, other=True)

    def _path(self, name):
        return os.path.join(self.dir, name)

    def _openssl(self, *args):
        p = subprocess.run(["openssl"] + list(args), cwd=self.dir,
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError("openssl %s: %s" % (" ".join(args),
                                                   p.stderr))

    def _key(self, name):
        key = self._path(name + ".key")
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt",
                      "ec_paramgen_curve:P-256", "-out", key)
        return key

    def _ca(self, name, cn):
        key = self._key(name)
        crt = self._path(name + ".crt")
        self._openssl("req", "-config", self.conf, "-new", "-x509",
                      "-key", key, "-subj", "/CN=" + cn, "-days", "3",
                      "-extensions", "ca", "-out", crt)
        return crt, key

    def _leaf(self, name, cn, section, serial, other=False):
        ca, ca_key = (self.other_ca, self.other_ca_key) if other \
            else (self.ca, self.ca_key)
        key = self._key(name)
        csr = self._path(name + ".csr")
        crt = self._path(name + ".crt")
        self._openssl("req", "-config", self.conf, "-new", "-key", key,
                      "-subj", "/CN=" + cn, "-out", csr)
        self._openssl("x509", "-req", "-in", csr, "-CA", ca,
                      "-CAkey", ca_key, "-set_serial", str(serial),
                      "-days", "3", "-extfile", self.conf, "-extensions",
                      section, "-out", crt)
        return crt, key

    def install(self, pairs):
        """Copies each (source, destination) file pair over, each
        written whole beside its destination and renamed onto it, as a
        certificate renewal (cert-manager, certbot) replaces files."""
        for src, dst in pairs:
            with open(src, "rb") as f:
                data = f.read()
            with open(dst + ".tmp", "wb") as f:
                f.write(data)
            os.replace(dst + ".tmp", dst)

    def cli_args(self):
        """redis-cli's TLS options: trust the CA, present the client
        certificate (harmless where the server asks for none)."""
        return ["--tls", "--cacert", self.ca, "--cert", self.client_cert,
                "--key", self.client_key]

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.dir in _dirs:
            _dirs.remove(self.dir)


# The spellings of /api/upload (tests/data/path_spellings.tsv): one table
# for the matcher's unit test and the tests through real nginx and Caddy.
PATH_SPELLINGS = os.path.join(SRC, "tests", "data", "path_spellings.tsv")


def path_spellings():
    """[(target, nginx_uri or "400", caddy, charged: bool)] in file order."""
    rows = []
    with open(PATH_SPELLINGS, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            target, nginx, caddy, charged = line.split("\t")
            assert caddy in ("upload", "other", "-"), line
            assert charged in ("yes", "no"), line
            rows.append((target, nginx, caddy, charged == "yes"))
    return rows


def routes_to(path, want="/api/upload"):
    """Whether an app router given `path` (as a proxy routed it) takes it
    to `want` by the app conventions sluice also reads: any case, one
    trailing slash, trailing dots and spaces (Caddy), a .format suffix
    (Rails, Spring <= 5.2)."""
    p = path.lower()
    if p.endswith("/") and len(p) > 1:
        p = p[:-1]
    cands = {p, p.rstrip(". ")}
    last = p.rsplit("/", 1)
    if len(last) == 2 and "." in last[1][1:]:
        seg = last[1]
        cands.add(last[0] + "/" + seg[:seg.index(".", 1)])
        cands.add(last[0] + "/" + seg[:seg.rindex(".")])
    return want in cands
