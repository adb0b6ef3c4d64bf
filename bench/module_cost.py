#!/usr/bin/env python3
"""bench/module_cost.py -- the Redis module's cost next to a bare SET ... PX.

    bench/module_cost.py [--build DIR] [--calls N] [--keys K] [--reps R]
                         [--stores int,string,call] [--quick]

For each way the module can keep its states (module argument STORE int,
string, call; see docs/REDIS_MODULE.md) one redis-server is started on a free
loopback port with the module loaded, and driven by redis-benchmark with
the same client, connections (4) and pipelining depth (64) for every
command, over random keys out of K:

  set        SET k:<n> 1796000000000000000 PX 100000 (the ceiling for a
             one-command decision: what the module writes)
  take       SLUICE.TAKE k:<n> 100 2/s
  multi16    SLUICE.TAKEMULTI 16 over 16 keys (one decision, 16 limits)
  many16     SLUICE.TAKEMANY over 16 keys (16 independent decisions)
  each16     SLUICE.TAKEEACH over 16 keys (16 independent decisions
             under one limit: the limit and cost stated once)
  script     sluice's Redis script path (EVALSHA of script.lua), and
  classic    the classic hash-bucket Lua script (bench/redis_classic.lua),
             both with the same policy, next to the first STORE mode only

Each command runs R times, the commands alternating (set, take, multi16,
many16, set, take, ...), so load from other processes lands on all of them
alike.  Redis and redis-benchmark are pinned to different cores (taskset)
when there are two or more.  Per run:

  usec_per_key   Redis's INFO commandstats usec_per_call, divided by the
                 keys per call (16 for the batched forms): the command
                 alone, wall time inside the server
  cpu_us_per_key the redis-server process's CPU time (user + sys: network
                 and protocol included) over the run, divided by the keys

Reported: the median of the R runs with min and max, and the ratios
take/set, multi16/take, many16/take and each16/take computed per repetition (the runs
next to each other) and then their median.  Memory: used_memory growth per
key with K keys, each holding a state with a TTL, for the module and for
SET of the same value and TTL (key names "sluice:%09d"), and the floor: that
SET under the shortest decimal names for K keys ("%06d" for 1M).

Prints a human summary on stderr and one JSON object on stdout.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpus():
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


class Server:
    def __init__(self, module, store, cpu):
        self.dir = tempfile.mkdtemp(prefix="sluice-module-cost-")
        self.port = free_port()
        argv = ["redis-server", "--port", str(self.port), "--bind",
                "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
                self.dir, "--logfile", os.path.join(self.dir, "redis.log"),
                "--loadmodule", module, "STORE", store]
        if cpu is not None and shutil.which("taskset"):
            argv = ["taskset", "-c", str(cpu)] + argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for _ in range(400):
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server (STORE %s) exited: %s"
                                   % (store, self.log()[-500:]))
            try:
                if self.cli("PING") == "PONG":
                    return
            except subprocess.SubprocessError:
                pass
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer")

    def log(self):
        try:
            with open(os.path.join(self.dir, "redis.log")) as f:
                return f.read()
        except OSError:
            return ""

    def cli(self, *args, stdin=None):
        r = subprocess.run(["redis-cli", "-p", str(self.port)] +
                           [str(a) for a in args], input=stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=600)
        return r.stdout.decode().strip()

    def info(self, section):
        out = {}
        for line in self.cli("INFO", section).splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                out[k] = v.strip()
        return out

    def cpu_seconds(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / \
            os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def load_scripts(srv, build):
    """SHA-1s of the classic hash-bucket script and sluice's script path
    (src/store/redis/script.lua, as the build expands it) loaded into srv;
    None when missing."""
    shas = {}
    for name, path in (("classic", (SRC, "bench", "redis_classic.lua")),
                       ("script", (build, "generated", "lua", "script.lua"))):
        try:
            with open(os.path.join(*path)) as f:
                sha = srv.cli("SCRIPT", "LOAD", f.read())
        except OSError:
            continue
        if len(sha) == 40:
            shas[name] = sha
    return shas


def commands(shas=None):
    """name -> (command stat name, keys per call, redis-benchmark args)"""
    multi = ["SLUICE.TAKEMULTI", "16"]
    multi += ["k%d:__rand_int__" % i for i in range(16)]
    multi += ["100", "2/s"] * 16
    many = ["SLUICE.TAKEMANY"]
    for i in range(16):
        many += ["k%d:__rand_int__" % i, "100", "2/s", "1"]
    each = ["SLUICE.TAKEEACH", "100", "2/s", "1"]
    each += ["k%d:__rand_int__" % i for i in range(16)]
    extra = {}
    shas = shas or {}
    # The same policy (100 tokens, 2/s) through both scripts, driven by the
    # same client as the module: the classic one with the client's clock,
    # sluice's with need = 1 token x 500000 us and tau = 100 x 500000.
    if "classic" in shas:
        extra["classic"] = ("evalsha", 1, [
            "EVALSHA", shas["classic"], "1", "c:__rand_int__", "100", "2",
            str(int(time.time() * 1000)), "1"])
    if "script" in shas:
        extra["script"] = ("evalsha", 1, [
            "EVALSHA", shas["script"], "1", "s:{__rand_int__}:0", "500000",
            "50000000"])
    return dict({
        "set": ("set", 1, ["SET", "k:__rand_int__", "1796000000000000000",
                           "PX", "100000"]),
        "take": ("sluice.take", 1, ["SLUICE.TAKE", "k:__rand_int__", "100",
                                    "2/s"]),
        "multi16": ("sluice.takemulti", 16, multi),
        "many16": ("sluice.takemany", 16, many),
        "each16": ("sluice.takeeach", 16, each),
    }, **extra)


def one_run(srv, stat, per_call, args, calls, keys, bench_cpu):
    srv.cli("FLUSHALL")
    srv.cli("CONFIG", "RESETSTAT")
    n = max(calls // per_call, 1000)
    # The batched forms name 16 keys per call, each from its own prefix:
    # keys/16 numbers per prefix keep the key space the same size.
    argv = ["redis-benchmark", "-p", str(srv.port), "-n", str(n), "-c", "4",
            "-P", "64", "-r", str(max(keys // per_call, 1)), "--csv"] + args
    if bench_cpu is not None and shutil.which("taskset"):
        argv = ["taskset", "-c", str(bench_cpu)] + argv
    c0 = srv.cpu_seconds()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=1800)
    c1 = srv.cpu_seconds()
    stats = srv.info("commandstats").get("cmdstat_" + stat, "")
    usec = None
    fails = 0
    for part in stats.split(","):
        k, _, v = part.partition("=")
        if k == "usec_per_call":
            usec = float(v)
        if k == "failed_calls":
            fails = int(v)
    if usec is None or r.returncode != 0:
        raise RuntimeError("%s: no calls recorded (%s)" %
                           (stat, r.stderr.decode()[-300:]))
    if fails:
        raise RuntimeError("%s: %d failed calls" % (stat, fails))
    return {"usec_per_key": usec / per_call,
            "cpu_us_per_key": (c1 - c0) * 1e6 / (n * per_call)}


def summary(values):
    vs = sorted(values)
    return {"median": round(statistics.median(vs), 3),
            "min": round(vs[0], 3), "max": round(vs[-1], 3)}


def mem_per_key(srv, keys, fmt, name="sluice:%09d"):
    srv.cli("FLUSHALL")
    m0 = int(srv.info("memory")["used_memory"])
    chunk = 100000
    for start in range(0, keys, chunk):
        out = []
        for i in range(start, min(keys, start + chunk)):
            args = [a.replace("KEY", name % i) for a in fmt]
            out.append("*%d\r\n" % len(args) + "".join(
                "$%d\r\n%s\r\n" % (len(a), a) for a in args))
        subprocess.run(["redis-cli", "-p", str(srv.port), "--pipe"],
                       input="".join(out).encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=600, check=True)
    m1 = int(srv.info("memory")["used_memory"])
    got = int(srv.cli("DBSIZE"))
    enc = srv.cli("OBJECT", "ENCODING", name % 1)
    srv.cli("FLUSHALL")
    if got != keys:
        raise RuntimeError("%d keys stored, expected %d" % (got, keys))
    return {"bytes_per_key": round((m1 - m0) / keys, 1), "encoding": enc}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--calls", type=int, default=1000000,
                    help="keys decided per run (default 1000000)")
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--stores", default="int,string,call")
    ap.add_argument("--mem-keys", type=int, default=None,
                    help="keys for bytes per key (default: --keys)")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.calls, a.keys, a.reps = 20000, 10000, 1
    mem_keys = a.mem_keys or a.keys
    module = os.path.realpath(os.path.join(a.build, "sluice-redis.so"))
    if not os.path.exists(module):
        print(json.dumps({"error": "%s is not built" % module}))
        return 1
    for tool in ("redis-server", "redis-cli", "redis-benchmark"):
        if not shutil.which(tool):
            print(json.dumps({"error": "%s not found" % tool}))
            return 1
    cs = cpus()
    srv_cpu, bench_cpu = (cs[-1], cs[0]) if len(cs) >= 2 else (None, None)
    out = {"calls_per_run": a.calls, "keys": a.keys, "reps": a.reps,
           "connections": 4, "pipeline": 64,
           "pinned": srv_cpu is not None,
           "loadavg_1m_before": round(os.getloadavg()[0], 2),
           "redis_version": None, "stores": {}}
    first = True
    for store in a.stores.split(","):
        srv = Server(module, store, srv_cpu)
        try:
            out["redis_version"] = srv.info("server").get("redis_version")
            # The scripts once, next to the first STORE mode only.
            cmds = commands(load_scripts(srv, a.build) if first else None)
            first = False
            runs = {name: [] for name in cmds}
            for rep in range(a.reps):
                # alternate the order too: no command always runs first
                order = list(cmds) if rep % 2 == 0 else list(cmds)[::-1]
                for name in order:
                    stat, per, args = cmds[name]
                    runs[name].append(one_run(srv, stat, per, args, a.calls,
                                              a.keys, bench_cpu))
            res = {}
            for name, rs in runs.items():
                for fig in ("usec_per_key", "cpu_us_per_key"):
                    res["%s_%s" % (name, fig)] = summary(
                        [r[fig] for r in rs])
            for fig in ("usec_per_key", "cpu_us_per_key"):
                for num, den in (("take", "set"), ("multi16", "take"),
                                 ("many16", "take"), ("each16", "take"),
                                 ("script", "set"),
                                 ("classic", "set"), ("take", "classic"),
                                 ("script", "classic")):
                    if num not in runs or den not in runs:
                        continue
                    res["%s_over_%s_%s" % (num, den, fig)] = summary(
                        [n[fig] / d[fig] for n, d in
                         zip(runs[num], runs[den])])
            res["module_memory"] = mem_per_key(
                srv, mem_keys, ["SLUICE.TAKE", "KEY", "100", "1/day"])
            res["set_memory"] = mem_per_key(
                srv, mem_keys, ["SET", "KEY", "1796000000000000000", "PX",
                                "86400000"])
            # The floor for a key holding such a value with a TTL on this
            # server: the same SET under the shortest decimal names that
            # tell K keys apart (6 characters for 1M).
            res["floor_memory"] = mem_per_key(
                srv, mem_keys, ["SET", "KEY", "1796000000000000000", "PX",
                                "86400000"],
                name="%%0%dd" % len(str(max(mem_keys - 1, 1))))
            out["stores"][store] = res
            r = res
            print("STORE %-6s take/set %.2f (usec %.2f vs %.2f), cpu "
                  "take/set %.2f; per key at 16: multi %.2f, many %.2f, "
                  "each %.2f of a take; bytes/key module %s set %s "
                  "floor %s" % (
                      store, r["take_over_set_usec_per_key"]["median"],
                      r["take_usec_per_key"]["median"],
                      r["set_usec_per_key"]["median"],
                      r["take_over_set_cpu_us_per_key"]["median"],
                      r["multi16_over_take_usec_per_key"]["median"],
                      r["many16_over_take_usec_per_key"]["median"],
                      r["each16_over_take_usec_per_key"]["median"],
                      r["module_memory"]["bytes_per_key"],
                      r["set_memory"]["bytes_per_key"],
                      r["floor_memory"]["bytes_per_key"]), file=sys.stderr)
        finally:
            srv.stop()
    out["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
