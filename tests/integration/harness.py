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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))
BUILD = os.environ.get("SLUICE_BUILD", os.path.join(SRC, "build"))
SLUICE = os.path.join(BUILD, "sluice")

_procs = []


def free_port():
    """A loopback TCP port nobody listens on right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


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


def raise_nofile(n):
    """Raises this process's open-file limit to at least n (if allowed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(max(soft, n), hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


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


# ------------------------------------------------------------- sluice


class Sluice(Proc):
    """`sluice serve` on a free port, with an optional YAML config text."""

    def __init__(self, config=None, threads=None, extra=(), env=None):
        self.port = free_port()
        self.config_path = None
        argv = [SLUICE, "serve", "--listen", "127.0.0.1:%d" % self.port]
        if config is not None:
            fd, self.config_path = tempfile.mkstemp(prefix="sluice-",
                                                    suffix=".yaml")
            os.close(fd)
            self.write_config(config)
            argv += ["-c", self.config_path]
        if threads:
            argv += ["--threads", str(threads)]
        argv += list(extra)
        if env is not None:
            env = dict(os.environ, **env)
        super().__init__(argv, env=env)
        wait_for_port(self.port, proc=self)

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


class RedisServer(Proc):
    """redis-server on a free loopback port (no persistence).  kill() is
    SIGKILL; start() again brings it back on the same port, empty.
    cluster=True: --cluster-enabled yes, its nodes.conf in a temporary
    directory removed by stop().  password: --requirepass (cli() and
    ping() authenticate with it)."""

    def __init__(self, port=None, cluster=False, password=None):
        self.cluster = cluster
        self.password = password
        self.dir = tempfile.mkdtemp(prefix="sluice-redis-") if cluster \
            else None
        self.port = port or (free_cluster_port() if cluster
                             else free_port())
        self._start()

    def _start(self):
        argv = ["redis-server", "--port", str(self.port), "--bind",
                "127.0.0.1", "--save", "", "--appendonly", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        if self.cluster:
            argv += ["--dir", self.dir, "--cluster-enabled", "yes",
                     "--cluster-config-file", "nodes.conf",
                     "--cluster-node-timeout", "5000"]
        super().__init__(argv)
        wait_until(lambda: self.ping(), timeout=20)

    def stop(self, timeout=15):
        rc = super().stop(timeout)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        return rc

    def seed(self):
        return "127.0.0.1:%d" % self.port

    def start(self):
        self._start()

    def kill(self):
        self.signal(signal.SIGKILL)
        self.wait()
        if self in _procs:
            _procs.remove(self)

    def cli(self, *args):
        auth = ["-a", self.password, "--no-auth-warning"] \
            if self.password else []
        p = subprocess.run(["redis-cli", "-p", str(self.port)] + auth +
                           [str(a) for a in args], capture_output=True,
                           text=True, timeout=10)
        return p.stdout.strip()

    def ping(self):
        try:
            return self.cli("PING") == "PONG"
        except subprocess.TimeoutExpired:
            return False

    def url(self):
        return "redis://127.0.0.1:%d" % self.port
