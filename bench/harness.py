"""bench/harness.py -- what bench/run's sections share: processes that
are always stopped, free loopback ports, the build's binaries, Redis and
nginx instances, wrk.

Every process started through `procs` is stopped when bench/run exits,
however it exits.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# Set by bench/run before any section runs.
procs = None


class Skip(Exception):
    """A piece is missing: the figures it gives are null, with a reason."""


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes

class Procs:
    """Every process the harness starts, stopped at exit whatever happens."""

    def __init__(self, logdir):
        self.logdir = logdir
        self.live = []

    def start(self, name, argv, **kw):
        out = open(os.path.join(self.logdir, name + ".log"), "ab")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, **kw)
        out.close()
        p.bench_name = name
        self.live.append(p)
        return p

    def stop(self, p):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.live:
            self.live.remove(p)

    def stop_all(self):
        for p in list(self.live):
            self.stop(p)


PROCS = None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise Skip("%s exited with status %s (see build/bench/logs/%s.log)"
                       % (proc.bench_name, proc.returncode, proc.bench_name))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise Skip("%s did not listen on port %d within %.0f s"
               % (proc.bench_name, port, timeout))


def run(argv, timeout=600, check=True, **kw):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, text=True, **kw)
    if check and r.returncode != 0:
        raise Skip("%s failed (%d): %s" % (os.path.basename(argv[0]),
                                           r.returncode,
                                           (r.stderr or r.stdout).strip()[-300:]))
    return r


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def need(binary):
    path = shutil.which(binary)
    if not path:
        raise Skip("%s is not installed (scripts/deps installs it)" % binary)
    return path


# ----------------------------------------------------------------- context

class Ctx:
    def __init__(self, args):
        self.quick = args.quick
        self.build = os.path.abspath(args.build)
        self.out = os.path.join(self.build, "bench")
        self.tmp = tempfile.mkdtemp(prefix="sluice-bench-")
        os.makedirs(os.path.join(self.out, "logs"), exist_ok=True)
        self.sluice = os.path.join(self.build, "sluice")
        self.bench = os.path.join(self.build, "sluice_bench")
        self.module = os.path.join(self.build, "sluice-redis.so")

    def seconds(self, full):
        return 1 if self.quick else full

    def need_sluice(self):
        if not os.access(self.sluice, os.X_OK):
            raise Skip("%s is not built" % self.sluice)
        return self.sluice

    def need_bench(self):
        if not os.access(self.bench, os.X_OK):
            raise Skip("%s is not built (cmake --build %s --target "
                       "sluice_bench)" % (self.bench, self.build))
        return self.bench

    def bench_json(self, *args, timeout=900):
        r = run([self.need_bench()] + [str(a) for a in args], timeout=timeout,
                check=False)
        try:
            out = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise Skip("sluice_bench %s failed (%d): %s"
                       % (args[0], r.returncode, r.stderr.strip()[-300:]))
        if "error" in out:
            raise Skip(out["error"])
        if r.returncode != 0:
            raise Skip("sluice_bench %s failed (%d): %s"
                       % (args[0], r.returncode, r.stderr.strip()[-300:]))
        return out


def attempt(res, keys, fn):
    """Runs fn(); on Skip, its keys stay null with the reason."""
    try:
        fn()
    except Skip as e:
        for k in keys:
            if res.get(k) is None:
                res["reasons"][k] = str(e)
        log("  skipped %s: %s" % (", ".join(keys), e))
    except subprocess.TimeoutExpired as e:
        for k in keys:
            if res.get(k) is None:
                res["reasons"][k] = "timed out: %s" % e
        log("  timed out: %s" % e)


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def tls_certs(ctx):
    """A CA and a server certificate it signed for 127.0.0.1 and localhost
    (EC P-256, as managed Redis services commonly use), made once per run
    with the openssl command.  Returns the directory holding ca.crt,
    server.crt and server.key."""
    d = os.path.join(ctx.tmp, "tls")
    if os.path.exists(os.path.join(d, "server.crt")):
        return d
    need("openssl")
    os.makedirs(d, exist_ok=True)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
           "-nodes"]
    with open(os.path.join(d, "san.cnf"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run(["openssl", "req", "-x509"] + key + [
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=sluice-bench-ca",
        "-days", "2"], cwd=d)
    run(["openssl", "req"] + key + [
        "-keyout", "server.key", "-out", "server.csr", "-subj",
        "/CN=localhost"], cwd=d)
    run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt",
         "-CAkey", "ca.key", "-CAcreateserial", "-days", "2", "-extfile",
         "san.cnf", "-out", "server.crt"], cwd=d)
    return d


class Redis:
    """A redis-server on a free loopback port.  With tls (a directory from
    tls_certs()) it also listens for TLS on tls_port, clients not asked
    for certificates; redis-cli keeps using the plain port."""

    def __init__(self, ctx, name, module=None, tls=None):
        need("redis-server")
        self.port = free_port()
        self.tls_port = None
        d = os.path.join(ctx.tmp, name)
        os.makedirs(d, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind",
                "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d,
                "--daemonize", "no"]
        if tls:
            self.tls_port = free_port()
            while self.tls_port == self.port:
                self.tls_port = free_port()
            argv += ["--tls-port", str(self.tls_port),
                     "--tls-cert-file", os.path.join(tls, "server.crt"),
                     "--tls-key-file", os.path.join(tls, "server.key"),
                     "--tls-ca-cert-file", os.path.join(tls, "ca.crt"),
                     "--tls-auth-clients", "no"]
        if module:
            argv += ["--loadmodule", module]
        self.proc = procs.start(name, argv)
        wait_port(self.port, self.proc)
        if self.tls_port:
            wait_port(self.tls_port, self.proc)

    def cli(self, *args, stdin=None):
        r = subprocess.run(["redis-cli", "-p", str(self.port)] +
                           [str(a) for a in args], input=stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=600)
        if r.returncode != 0:
            raise Skip("redis-cli %s: %s" % (args[0] if args else "",
                                             r.stderr.strip()))
        return r.stdout.strip()

    def info(self, section):
        out = {}
        for line in self.cli("INFO", section).splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                out[k] = v.strip()
        return out

    def used_memory(self):
        return int(self.info("memory")["used_memory"])

    def usec_per_call(self, command):
        stats = self.info("commandstats").get("cmdstat_" + command)
        if not stats:
            return None
        m = re.search(r"usec_per_call=([0-9.]+)", stats)
        return float(m.group(1)) if m else None

    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def tls_url(self):
        return "rediss://127.0.0.1:%d" % self.tls_port

    def cpu_seconds(self):
        return cpu_seconds(self.proc.pid)

    def stop(self):
        procs.stop(self.proc)


WRK_LUA = r"""
-- %(keys)s distinct keys (x-user-id), one picked at random per request.
local n = 0
function init(args)
  math.randomseed(12345 + n)
  n = n + 1
end
function request()
  return wrk.format(nil, nil,
    {["x-user-id"] = "user-" .. math.random(1, %(keys)d)})
end
"""


def nginx_conf(ctx, name, port, server_body, http_extra=""):
    d = os.path.join(ctx.tmp, name)
    os.makedirs(os.path.join(d, "www", "v1"), exist_ok=True)
    # Static files answer: `return` would run in the rewrite phase, before
    # limit_req (preaccess) and auth_request (access) could say no.
    for page in ("index.html", "v1/check"):
        with open(os.path.join(d, "www", page), "w") as f:
            f.write("ok\n")
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""
daemon off;
master_process off;
worker_processes 1;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %(d)s/body;
    proxy_temp_path %(d)s/proxy;
    fastcgi_temp_path %(d)s/fastcgi;
    uwsgi_temp_path %(d)s/uwsgi;
    scgi_temp_path %(d)s/scgi;
    keepalive_requests 1000000;
    default_type text/plain;
    %(http_extra)s
    server {
        listen 127.0.0.1:%(port)d;
        root %(d)s/www;
        %(server_body)s
    }
}
""" % {"d": d, "port": port, "server_body": server_body,
       "http_extra": http_extra})
    return d, conf


def start_nginx(ctx, name, port, server_body, http_extra=""):
    need("nginx")
    d, conf = nginx_conf(ctx, name, port, server_body, http_extra)
    p = procs.start(name, ["nginx", "-p", d, "-e", d + "/error.log", "-c",
                           conf])
    wait_port(port, p)
    return p


def start_sluice(ctx, name, extra=()):
    port = free_port()
    p = procs.start(name, [ctx.need_sluice(), "serve", "--listen",
                           "127.0.0.1:%d" % port] + list(extra))
    wait_port(port, p)
    return p, port


def parse_ms(text):
    m = re.match(r"([0-9.]+)(us|ms|s)$", text)
    if not m:
        return None
    v = float(m.group(1))
    return {"us": v / 1000, "ms": v, "s": v * 1000}[m.group(2)]


def wrk(ctx, url, pid, keys=100000, others=None, warmup=0, seconds=10):
    """wrk -t1 -c50 -d<seconds>s --latency over `keys` random x-user-id keys.
    CPU per request is measured for `pid` (cpu_us_per_req) and for each
    {name: pid} in `others` (<name>_cpu_us_per_req), from /proc over the
    measured run.  `warmup` seconds of the same load run first, unmeasured
    (a JIT-compiled server reaches its steady state)."""
    need("wrk")
    script = os.path.join(ctx.tmp, "keys-%d.lua" % keys)
    with open(script, "w") as f:
        f.write(WRK_LUA % {"keys": keys})
    if warmup and not ctx.quick:
        run(["wrk", "-t1", "-c50", "-d%ds" % warmup, "-s", script, url],
            timeout=300)
    pids = {"": pid}
    pids.update({name + "_": p for name, p in (others or {}).items()})
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    out = run(["wrk", "-t1", "-c50", "-d%ds" % ctx.seconds(seconds),
               "--latency", "-s", script, url], timeout=300).stdout
    cpu1 = {k: cpu_seconds(p) for k, p in pids.items()}
    m = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    if not m or not rps:
        raise Skip("could not read wrk's output: %s" % out[-300:])
    n = int(m.group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    res = {"rps": round(float(rps.group(1))),
           "p50_ms": parse_ms(lat.get("50", "")),
           "p99_ms": parse_ms(lat.get("99", "")),
           "requests": n,
           "non_2xx": int(non2xx.group(1)) if non2xx else 0,
           "socket_errors": errors.group(1).strip() if errors else None}
    for k in pids:
        res[k + "cpu_us_per_req"] = round((cpu1[k] - cpu0[k]) * 1e6 /
                                          max(n, 1), 2)
    return res


def one_key(port, path, n=105):
    """n back-to-back requests for one key: how many pass.  Both servers
    must let the bucket of 100 through and no more (plus what refills)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    ok = 0
    try:
        for _ in range(n):
            conn.request("GET", path, headers={"x-user-id": "one-key"})
            r = conn.getresponse()
            r.read()
            ok += r.status == 200
    finally:
        conn.close()
    return ok


# -------------------------------------------------------------------- node

def npm(args, cwd, timeout=900):
    """npm in `cwd`, quiet; a failure is a Skip carrying npm's last words."""
    need("npm")
    r = run(["npm"] + list(args) + ["--no-audit", "--no-fund",
                                    "--loglevel=error"],
            timeout=timeout, check=False, cwd=cwd)
    if r.returncode != 0:
        raise Skip("npm %s failed (%d): %s" % (args[0], r.returncode,
                                              (r.stderr or r.stdout)
                                              .strip()[-400:]))
    return r


def start_node_app(ctx, name, script, env=None):
    """`node script` with PORT set to a free loopback port (the process is
    node itself, so its pid is the one whose CPU is measured)."""
    port = free_port()
    e = dict(os.environ, PORT=str(port), NODE_ENV="production")
    e.update(env or {})
    p = procs.start(name, [need("node"), os.path.basename(script)],
                    cwd=os.path.dirname(script), env=e)
    wait_port(port, p, timeout=30)
    return p, port
