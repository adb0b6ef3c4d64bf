#!/usr/bin/env python3
"""The soak: sluice under a steady open-loop load while faults are
injected in turn (`make soak`; a 60 s version runs in `make test`).

What runs (all on loopback, each in its own temporary directory):
- a Redis master, one replica and three Sentinels (sentinel_harness.py,
  down-after-milliseconds 1000);
- three `sluice serve` instances with one rule, `soak` (key x-user-id,
  capacity CAPACITY, refill RATE/s, on_store_error: closed), on the
  Sentinel group; the third reaches Redis through delay_proxy.py (a TCP
  proxy that follows the Sentinels' master and adds 50 ms on demand);
  http_load.js (Node's HTTP client, keep-alive) sends their load;
- a Node.js process (node_load.js) with the addon of bindings/node on the
  same Sentinel group and the same buckets (policy "soak").

The load: USERS known users; every instance gets a fixed share of the
offered rate SOAK_RATE (req/s), sent on a schedule whatever the answers
(open loop), bounded in count (rate x SOAK_SECONDS) and in flight.  Each
user is offered about three times its refill rate, so every bucket is
kept empty and the bound is tight.

The faults, one every SOAK_FAULT_EVERY seconds (default 10), in turn:
SIGKILL of the master (the Sentinels fail over; the killed one is
restarted as a replica of the new master), CLIENT KILL TYPE normal,
SCRIPT FLUSH, a Sentinel SIGKILLed (restarted half a slot later), the
master SIGSTOPped for 3 s (the Sentinels fail over; SIGCONT, and they
demote it), a `sluice serve` instance SIGKILLed and restarted 1 s later
on its port, a SIGHUP storm (20 to every instance, 50 ms apart), and a
slow link (the proxied instance's Redis 50 ms further away for the
slot, less 2 s).

Pass/fail (the driver exits 1 if any fails):
1. crashes: 0 -- no process of ours exits unless we stopped it, every
   `sluice serve` exits 0 on SIGTERM at the end, Node exits 0, and no
   log holds a sanitizer report;
2. per key, allowed <= CAPACITY + RATE x T + 1 + LOST x F, where T is
   the time from the key's first request sent to its last answer, F the
   failovers seen and LOST what one failover may give a key.  Replication
   is asynchronous, so a failover loses the charges the old master
   answered and had not yet sent to its replica; Redis writes a command
   to the replication stream in the event-loop turn that answers it, so
   those are at most the charges of the master's last turn before it died
   (SIGKILL) or stopped (SIGSTOP), well under REPL_LAG_S.  A key's bucket
   is kept empty (it is offered three times its rate), so within any
   interval w it gets at most 1 + RATE x w tokens: LOST = 1 +
   ceil(RATE x REPL_LAG_S) = 2.  CAPACITY / RATE (10 s to refill) is far
   longer than a failover's outage (2 to 3 s), so a bucket that restarted
   full at a failover would give about CAPACITY - RATE x 3 = 35 tokens
   more, and fails the check at once.  on_store_error is closed, so the
   fail mode itself admits nothing (a failed call is a 503 / a rejected
   take);
3. 5xx other than 503 with Retry-After (the closed mode's answer): 0;
4. answers later than timeout_ms + SOAK_LATE_GRACE_MS: 0 (the grace is
   for scheduling on a busy machine; the service promises timeout_ms);
5. requests without an answer: 0, except those sent to the instance
   being SIGKILLed while it is down; Node's calls rejected only with
   the store's errors; no call held back by the in-flight bound;
6. at the end, every instance's descriptors back to where they started
   (+2) and its resident memory flat: the slope of a least-squares line
   through its RSS samples after warm-up (one a second) at most
   RSS_SLOPE_B_PER_REQ (48) bytes per request the instance is offered
   (3.75 KiB/s at the default 80 a second each), so a leak of 100 bytes a
   request fails even in a 60 s run, while what an instance still grows
   by after warm-up in a short run (allocator arenas and buffers touched
   for the first time: 1.6 to 1.9 KiB/s in a 60 s run, about 0.2 KiB/s
   over 600 s) passes; the slope is in the report.  Under ASan the
   quarantine grows to 256 MiB before it recycles, so there the growth
   after warm-up must stay within 320 MiB.

SOAK_REPORT=FILE writes the figures between the soak markers of FILE
(docs/RELIABILITY.md).
"""
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import harness  # noqa: E402
import sentinel_harness  # noqa: E402

SECONDS = float(os.environ.get("SOAK_SECONDS", "600"))
FAULT_EVERY = float(os.environ.get("SOAK_FAULT_EVERY", "10"))
OFFERED = float(os.environ.get("SOAK_RATE", "300"))  # req/s, all instances
LATE_GRACE_MS = float(os.environ.get("SOAK_LATE_GRACE_MS", "1000"))
REPORT = os.environ.get("SOAK_REPORT")

CAPACITY = 50  # 10 s to refill: a reset at a failover shows
RATE = 5  # tokens per second
REPL_LAG_S = 0.2  # longest an answered charge waits to reach the replica
LOST_PER_FAILOVER = 1 + int(-(-RATE * REPL_LAG_S // 1))  # 2: docstring, 2.
RSS_SLOPE_B_PER_REQ = 48  # docstring, 6.
TIMEOUT_MS = 250
USERS = ["user%02d" % i for i in range(20)]
NODE_SHARE = 0.2  # of the offered rate; the rest split over the serves
MAX_IN_FLIGHT = 64  # per instance
DELAY_MS = 50
FAULTS = ["master SIGKILL", "CLIENT KILL", "SCRIPT FLUSH",
          "Sentinel SIGKILL", "master SIGSTOP", "sluice SIGKILL",
          "SIGHUP storm", "slow link"]
SANITIZER = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|"
                       r"runtime error:|Segmentation fault|Aborted")

RULES = """rules:
  - name: soak
    key: ["header:x-user-id"]
    limits: [{capacity: %d, rate: %d/s}]
    on_store_error: closed
""" % (CAPACITY, RATE)


def now():
    return time.time()


def proc_stats(pid):
    """(RSS in KiB, open descriptors) of a live process, or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(ln.split()[1]) for ln in f
                       if ln.startswith("VmRSS:"))
        return rss, len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, StopIteration, ValueError):
        return None


def asan_build(path):
    with open(path, "rb") as f:
        return b"__asan_init" in f.read()


# ------------------------------------------------------------ processes


class Serve:
    """One `sluice serve` instance: its config in the soak's directory,
    restarted on the same port after a SIGKILL.  Keeps every
    incarnation's log and its memory/descriptor samples."""

    def __init__(self, name, config, workdir):
        self.name = name
        self.path = os.path.join(workdir, name + ".yaml")
        with open(self.path, "w") as f:
            f.write(config)
        self.port = None
        self.proc = None
        self.killed = []  # (killed at, ready again at)
        self.logs = []
        self.exits = []  # unexpected exits and final statuses
        self.rss = []  # (time, KiB) of the running incarnation
        self.fd_start = None
        self.fd_end = None
        self.started_at = None

    def argv(self, port):
        return [harness.SLUICE, "serve", "--listen", "127.0.0.1:%d" % port,
                "-c", self.path, "--threads", "2"]

    def start(self):
        p = harness.Proc.__new__(harness.Proc)
        if self.port is None:
            def init(port):
                self.port = port
                harness.Proc.__init__(p, self.argv(port))
            harness.start_listening(p, init)
        else:
            harness.Proc.__init__(p, self.argv(self.port))
            line = harness.LISTENING % self.port
            if not harness.wait_until(lambda: line in p.log() or
                                      p.poll() is not None, 60) or \
                    line not in p.log():
                raise RuntimeError("%s did not come back:\n%s"
                                   % (self.name, p.log()))
        self.proc = p
        self.rss = []
        self.started_at = now()

    def mark_start(self):
        """Descriptors once ready (store connections up)."""
        st = proc_stats(self.proc.pid)
        self.fd_start = st[1] if st else None

    def ready(self):
        try:
            return harness.request(self.port, "GET", "/readyz").status == 200
        except OSError:
            return False

    def kill(self):
        if self.proc.poll() is not None:  # a crash the restart must not hide
            self.exits.append("exited by itself with %s"
                              % self.proc.returncode)
        self.proc.signal(signal.SIGKILL)
        self.proc.wait()
        self.logs.append(self.proc.log())
        self.proc.stop()

    def stop(self):
        if self.proc is None:
            return
        rc = None
        if self.proc.poll() is None:
            self.proc.signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        else:
            rc = self.proc.returncode
        self.logs.append(self.proc.log())
        self.proc.stop()
        self.proc = None
        if rc != 0:
            self.exits.append("exit status %s at the final SIGTERM" % rc)


# ----------------------------------------------------------------- load


def read_rows(path, node=False):
    """The load's records: (sent, done, latency ms, instance, key,
    outcome) in seconds since the epoch, and its closing line."""
    rows, end = [], None
    with open(path) as f:
        for ln in f:
            if ln.startswith("# done"):
                end = ln.strip()
                continue
            parts = ln.split()
            if node:
                parts.insert(2, "node")
            sent, done, inst, key, outcome = parts
            outcome = int(outcome) if outcome.isdigit() else outcome
            rows.append((int(sent) / 1000.0, int(done) / 1000.0,
                         float(int(done) - int(sent)), inst, key, outcome))
    return rows, end


# --------------------------------------------------------------- faults


class Soak:
    def __init__(self, workdir):
        self.workdir = workdir
        self.group = None
        self.proxy = None
        self.serves = []
        self.node = None
        self.faults = []  # dicts: kind, start, end, detail, error
        self.failovers = 0
        self.stopped = None  # a SIGSTOPped master, for the finally
        self.stop_flag = threading.Event()

    # -- the Sentinel group

    def servers(self):
        return [self.group.master, self.group.replica]

    def master(self):
        port = self.group.master_port()
        return next((s for s in self.servers() if s.port == port), None)

    def wait_new_master(self, old_port, deadline):
        while now() < deadline:
            port = self.group.master_port()
            if port is not None and port != old_port:
                return port
            time.sleep(0.05)
        return None

    def start_proxy(self):
        for _ in range(5):
            port = harness.free_port()
            p = harness.Proc([sys.executable, os.path.join(HERE,
                                                           "delay_proxy.py"),
                              str(port), self.group.name, str(DELAY_MS)] +
                             [str(s.port) for s in self.group.sentinels])
            if harness.wait_until(lambda: "ready" in p.log() or
                                  p.poll() is not None, 30) and \
                    p.poll() is None:
                self.proxy, self.proxy_port = p, port
                return
            p.stop()
        raise RuntimeError("the delay proxy did not start")

    # -- the faults; each returns a detail string and ends by `end`

    def fault_master_kill(self, k, end):
        m = self.master()
        t = now()
        m.kill()
        port = self.wait_new_master(m.port, t + 30)
        if port is None:
            raise RuntimeError("no failover within 30 s of the kill")
        took = now() - t
        new = next(s for s in self.servers() if s.port == port)
        m.replicaof = new
        m.start()  # empty, a replica of the new master
        harness.wait_until(lambda: m.info("replication").get(
            "master_link_status") == "up", max(1.0, end - now()), 0.1)
        return "master %d killed; Sentinels named %d after %.2f s; " \
            "restarted as its replica" % (m.port, port, took)

    def fault_client_kill(self, k, end):
        n = self.master().cli("CLIENT", "KILL", "TYPE", "normal")
        return "%s connections killed" % n

    def fault_script_flush(self, k, end):
        return "SCRIPT FLUSH: %s" % self.master().cli("SCRIPT", "FLUSH")

    def fault_sentinel_kill(self, k, end):
        s = self.group.sentinels[(k // len(FAULTS)) % len(
            self.group.sentinels)]
        s.signal(signal.SIGKILL)
        s.wait()
        old = s.logfile.name
        if s in harness._procs:
            harness._procs.remove(s)
        time.sleep(max(0.5, (end - now()) / 2))
        harness.Proc.__init__(s, s.argv, cwd=s.dir)
        os.unlink(old)
        if not harness.wait_until(s.ping, 20):
            raise RuntimeError("Sentinel %d did not come back" % s.port)
        return "Sentinel %d killed, restarted" % s.port

    def fault_master_stop(self, k, end):
        m = self.master()
        t = now()
        m.signal(signal.SIGSTOP)
        self.stopped = m
        time.sleep(3.0)
        m.signal(signal.SIGCONT)
        self.stopped = None
        # A failover under way when it resumed still ends.
        port = self.wait_new_master(m.port, now() + 3)
        if port is None:
            return "master %d stopped 3 s, resumed; no failover" % m.port
        took = now() - t
        # The Sentinels demote the old master once it answers again.
        demoted = harness.wait_until(lambda: m.info("replication").get(
            "role") == "slave", max(1.0, end - now()), 0.1)
        return "master %d stopped 3 s; Sentinels named %d after %.2f s; " \
            "resumed, %s" % (m.port, port, took,
                             "demoted to replica" if demoted else
                             "not yet demoted at the slot's end")

    def fault_serve_kill(self, k, end):
        s = self.serves[(k // len(FAULTS)) % len(self.serves)]
        t = now()
        s.kill()
        time.sleep(1.0)
        s.start()
        harness.wait_until(s.ready, 20, 0.05)
        s.mark_start()
        s.killed.append((t, now()))
        return "%s killed, listening again after %.2f s" % (s.name, now() - t)

    def fault_hup_storm(self, k, end):
        for _ in range(20):
            for s in self.serves:
                s.proc.signal(signal.SIGHUP)
            time.sleep(0.05)
        return "20 SIGHUP to each instance"

    def fault_slow_link(self, k, end):
        hold = max(1.0, end - now() - 2.0)
        self.proxy.signal(signal.SIGUSR1)
        time.sleep(hold)
        self.proxy.signal(signal.SIGUSR2)
        return "%s's Redis link %d ms slower for %.1f s" % (
            self.serves[-1].name, DELAY_MS, hold)

    def inject(self, start):
        table = [self.fault_master_kill, self.fault_client_kill,
                 self.fault_script_flush, self.fault_sentinel_kill,
                 self.fault_master_stop, self.fault_serve_kill,
                 self.fault_hup_storm, self.fault_slow_link]
        k = 0
        while not self.stop_flag.is_set():
            at = start + (k + 1) * FAULT_EVERY
            end = at + FAULT_EVERY
            if end > start + SECONDS:
                return
            while now() < at and not self.stop_flag.is_set():
                time.sleep(min(0.05, at - now()))
            if self.stop_flag.is_set():
                return
            f = {"kind": FAULTS[k % len(FAULTS)], "start": now(),
                 "end": end, "error": None, "detail": ""}
            try:
                f["detail"] = table[k % len(table)](k, end)
            except Exception as e:  # noqa: BLE001 -- reported as a failure
                f["error"] = "%s: %s" % (type(e).__name__, e)
            f["done"] = now()
            f["end"] = max(end, f["done"])
            self.faults.append(f)
            print("[%6.1f s] %-16s %s" % (f["start"] - start, f["kind"],
                                          f["error"] or f["detail"]),
                  flush=True)
            k += 1

    def sample(self):
        """Memory of every live instance, and the master the Sentinels
        name (a change is a failover, whatever caused it), once a
        second."""
        last = self.group.master_port()
        while not self.stop_flag.wait(1.0):
            port = self.group.master_port()
            if port is not None and last is not None and port != last:
                self.failovers += 1
            last = port or last
            for s in self.serves:
                p = s.proc
                st = proc_stats(p.pid) if p is not None else None
                if st:
                    s.rss.append((now(), st[0]))


# ------------------------------------------------------------- analysis


def classify(soak, t):
    for f in soak.faults:
        if f["start"] <= t < f["end"]:
            return f["kind"]
    return "no fault"


def rss_slope_limit():
    """The RSS slope (KiB/s) an instance may show: RSS_SLOPE_B_PER_REQ
    per request it is offered."""
    per_instance = OFFERED * (1 - NODE_SHARE) / 3
    return RSS_SLOPE_B_PER_REQ * per_instance / 1024


def rss_slope(samples):
    """The slope, in KiB/s, of the least-squares line through (time,
    KiB) samples; None with fewer than 10 (too short a run to tell)."""
    n = len(samples)
    if n < 10:
        return None
    mt = sum(t for t, _ in samples) / n
    mk = sum(k for _, k in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return None
    return sum((t - mt) * (k - mk) for t, k in samples) / var


def analyse(soak, rows, node_rows, start, end, node_end, asan):
    failures = []
    kinds = ["no fault"] + FAULTS
    per_kind = {k: {"requests": 0, "allowed": 0, "denied": 0, "503": 0,
                    "errors": 0, "late": 0, "max_ms": 0.0, "ms": []}
                for k in kinds}
    late_limit = TIMEOUT_MS + LATE_GRACE_MS
    bad5xx, unexpected, late, answered = [], [], [], 0
    allowed = {u: 0 for u in USERS}
    first = {}
    last = {}

    def killed_then(name, sent, done):
        s = next(s for s in soak.serves if s.name == name)
        return any(a - 0.5 <= done and sent <= b + 0.5 for a, b in s.killed)

    for sent, done, ms, inst, key, outcome in rows + node_rows:
        k = per_kind[classify(soak, sent)]
        k["requests"] += 1
        first[key] = min(first.get(key, sent), sent)
        last[key] = max(last.get(key, done), done)
        if outcome in (200, "allowed"):
            allowed[key] += 1
            k["allowed"] += 1
        elif outcome in (429, "denied"):
            k["denied"] += 1
        elif outcome in (503, "ERR_SLUICE_STORE", "ERR_SLUICE_TIMEOUT"):
            k["503"] += 1
        if isinstance(outcome, int) or outcome in ("allowed", "denied",
                                                    "ERR_SLUICE_STORE",
                                                    "ERR_SLUICE_TIMEOUT"):
            answered += 1
            k["max_ms"] = max(k["max_ms"], ms)
            k["ms"].append(ms)
            if ms > late_limit:
                k["late"] += 1
                late.append((inst, key, round(ms), classify(soak, sent)))
        if (isinstance(outcome, int) and outcome >= 500 and outcome != 503) \
                or outcome == "503-no-retry-after":
            bad5xx.append((inst, key, outcome))
        if outcome in ("refused", "reset", "timeout", "skipped") or (
                isinstance(outcome, str) and outcome.startswith("ERR_") and
                outcome not in ("ERR_SLUICE_STORE", "ERR_SLUICE_TIMEOUT")) \
                or outcome == "error":
            k["errors"] += 1
            if not (outcome in ("refused", "reset") and inst != "node" and
                    killed_then(inst, sent, done)):
                unexpected.append((inst, key, outcome, classify(soak, sent)))

    crashes = []
    for s in soak.serves:
        crashes += ["%s: %s" % (s.name, e) for e in s.exits]
        for log in s.logs:
            m = SANITIZER.search(log)
            if m:
                crashes.append("%s: %s" % (s.name, log[m.start():][:300]))
    if soak.node_rc != 0 or not node_end:
        crashes.append("node: exit status %s, summary %r"
                       % (soak.node_rc, node_end))
    if soak.proxy_rc is not None:
        crashes.append("delay proxy exited with %s" % soak.proxy_rc)

    keys = []
    for u in USERS:
        t = last.get(u, 0) - first.get(u, 0)
        bound = CAPACITY + RATE * t + 1
        allowance = LOST_PER_FAILOVER * soak.failovers
        ok = allowed[u] <= bound + allowance
        keys.append((u, allowed[u], t, bound, allowance, ok))
        if not ok:
            failures.append("key %s: %d allowed > %.1f + %d"
                            % (u, allowed[u], bound, allowance))

    resources = []
    for s in soak.serves:
        warm = [(t, kib) for t, kib in s.rss if t >= s.started_at +
                min(30.0, max(5.0, (end - s.started_at) * 0.2))]
        rs, re_ = (warm[0][1], warm[-1][1]) if warm else (None, None)
        slope = rss_slope(warm)
        if asan:
            flat = rs is None or re_ - rs <= 320 * 1024
        else:
            flat = slope is None or slope <= rss_slope_limit()
        fd_ok = s.fd_end is not None and s.fd_start is not None and \
            s.fd_end <= s.fd_start + 2
        resources.append((s.name, len(s.killed) + 1, rs, re_, slope,
                          s.fd_start, s.fd_end, flat and fd_ok))
        if not flat:
            failures.append("%s: RSS %s -> %s KiB, slope %s KiB/s"
                            % (s.name, rs, re_, slope))
        if not fd_ok:
            failures.append("%s: descriptors %s -> %s"
                            % (s.name, s.fd_start, s.fd_end))
    ns = soak.node_stats
    if ns:
        flat = ns["rss1"] - ns["rss0"] <= max(32 * 1024 * 1024,
                                              ns["rss0"] * 0.3)
        fd_ok = ns["fd1"] <= ns["fd0"] + 2
        resources.append(("node", 1, ns["rss0"] // 1024, ns["rss1"] // 1024,
                          None, ns["fd0"], ns["fd1"], flat and fd_ok))
        if not (flat and fd_ok):
            failures.append("node: RSS %d -> %d, descriptors %d -> %d"
                            % (ns["rss0"], ns["rss1"], ns["fd0"], ns["fd1"]))
    else:
        failures.append("node: no resource figures")

    fault_errors = [f for f in soak.faults if f["error"]]
    if crashes:
        failures.append("crashes: %s" % crashes)
    if bad5xx:
        failures.append("5xx other than 503 with Retry-After: %d, e.g. %s"
                        % (len(bad5xx), bad5xx[:5]))
    if late:
        failures.append("answers later than %d ms: %d, e.g. %s"
                        % (late_limit, len(late), late[:5]))
    if unexpected:
        failures.append("requests without an answer outside a kill of "
                        "their instance: %d, e.g. %s"
                        % (len(unexpected), unexpected[:5]))
    for f in fault_errors:
        failures.append("fault %s: %s" % (f["kind"], f["error"]))
    return {"per_kind": per_kind, "keys": keys, "resources": resources,
            "crashes": crashes, "bad5xx": bad5xx, "late": late,
            "unexpected": unexpected, "answered": answered,
            "requests": len(rows) + len(node_rows),
            "failures": failures, "late_limit": late_limit}


def report(soak, a, start, end, lags, asan, build):
    out = []
    w = out.append
    kinds = ["no fault"] + FAULTS
    w("Run: %s, `SOAK_SECONDS=%g` (a fault every %g s, %d faults, %d "
      "failovers), offered %g req/s (%d users, 3 `sluice serve` instances "
      "and one Node.js process), rule capacity %d, refill %d/s, "
      "`timeout_ms: %d`, `on_store_error: closed`; `sluice` of `%s/`%s."
      % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(start)), SECONDS,
         FAULT_EVERY, len(soak.faults), soak.failovers, OFFERED, len(USERS),
         CAPACITY, RATE, TIMEOUT_MS, build, " (ASan+UBSan)" if asan else ""))
    w("")
    w("Requests sent: %d; answered: %d; the HTTP load's worst lateness "
      "against its schedule: %s ms." % (a["requests"], a["answered"],
                                        lags))
    w("")
    w("Requests by the fault whose slot they were sent in (a slot is "
      "the %g s from one fault to the next); answer times from sending "
      "to the whole answer, as the load measured them:" % FAULT_EVERY)
    w("")
    w("| while | faults | requests | allowed | 429 | 503 (closed) "
      "| no answer | p50 | p99 | slowest | later than %d ms |"
      % a["late_limit"])
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for k in kinds:
        p = a["per_kind"][k]
        if p["requests"] == 0:
            continue
        ms = sorted(p["ms"]) or [0.0]
        w("| %s | %s | %d | %d | %d | %d | %d | %.0f ms | %.0f ms "
          "| %.0f ms | %d |"
          % (k, "-" if k == "no fault" else
             sum(1 for f in soak.faults if f["kind"] == k),
             p["requests"], p["allowed"], p["denied"], p["503"],
             p["errors"], ms[len(ms) // 2], ms[int(len(ms) * 0.99)],
             p["max_ms"], p["late"]))
    w("")
    w("Allowed per key against the bound capacity + rate x T + 1 "
      "(T: first request to last answer), plus %d per failover (the "
      "charges a failover may lose: soak.py's docstring):"
      % LOST_PER_FAILOVER)
    w("")
    w("| key | allowed | T (s) | bound | + failovers | allowed / bound |")
    w("|---|---|---|---|---|---|")
    for u, n, t, bound, allowance, ok in a["keys"]:
        w("| %s | %d | %.1f | %.1f | %d | %.3f%s |"
          % (u, n, t, bound, allowance, n / bound, "" if ok else " FAIL"))
    w("")
    w("| process | incarnations | RSS after warm-up | RSS at end "
      "| RSS slope (last incarnation; at most %.2f KiB/s) "
      "| fds at start | fds at end | flat |" % rss_slope_limit())
    w("|---|---|---|---|---|---|---|---|")
    for name, inc, r0, r1, slope, f0, f1, ok in a["resources"]:
        w("| %s | %d | %s | %s | %s | %s | %s | %s |"
          % (name, inc, "%d KiB" % r0 if r0 else "-",
             "%d KiB" % r1 if r1 else "-",
             "%+.3f KiB/s" % slope if slope is not None else "-",
             f0, f1, "yes" if ok else "NO"))
    w("")
    w("Crashes: %d. 5xx other than 503 with Retry-After: %d. "
      "Requests without an answer outside a kill of their instance: %d."
      % (len(a["crashes"]), len(a["bad5xx"]), len(a["unexpected"])))
    w("")
    w("Faults (each in its slot; the driver prints every one as it "
      "goes):")
    w("")
    for k in FAULTS:
        done = [f for f in soak.faults if f["kind"] == k]
        if not done:
            continue
        took = [float(m) for f in done for m in re.findall(
            r"after ([0-9.]+) s", f["detail"] or "")]
        errors = [f["error"] for f in done if f["error"]]
        w("- %s: %d times%s%s; e.g. %s" % (
            k, len(done),
            "; %.2f-%.2f s until %s" % (
                min(took), max(took), "it listened again"
                if k == "sluice SIGKILL" else
                "the Sentinels named a new master") if took else "",
            "; FAILED %d: %s" % (len(errors), errors[0]) if errors else "",
            done[0]["detail"]))
    w("")
    w("Result: %s" % ("PASS" if not a["failures"] else
                      "FAIL\n\n" + "\n".join("- " + x
                                             for x in a["failures"])))
    return "\n".join(out)


def write_report(path, text, header):
    begin, stop = "<!-- soak:begin -->", "<!-- soak:end -->"
    with open(path) as f:
        doc = f.read()
    if begin not in doc or stop not in doc:
        raise RuntimeError("%s has no %s ... %s markers" % (path, begin,
                                                             stop))
    doc = doc[:doc.index(begin) + len(begin)] + "\n" + header + "\n" + \
        text + "\n" + doc[doc.index(stop):]
    with open(path, "w") as f:
        f.write(doc)


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f
                       if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    redis = subprocess.run(["redis-server", "--version"], capture_output=True,
                           text=True).stdout.split()[2]
    node = subprocess.run(["node", "--version"], capture_output=True,
                          text=True).stdout.strip()
    commit = subprocess.run(["git", "-C", harness.SRC, "rev-parse", "--short",
                             "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return ("Machine: %s, %d cores (%s), %.0f GiB, shared with other work; "
            "Redis %s, Node.js %s; commit %s."
            % (platform.platform(terse=True), os.cpu_count(), cpu, mem,
               redis.replace("v=", ""), node, commit))


# ----------------------------------------------------------------- main


def build_node_addon():
    pkg = os.path.join(harness.SRC, "bindings", "node")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LD_PRELOAD")}
    if not os.path.isdir(os.path.join(pkg, "node_modules",
                                      "node-api-headers")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=pkg,
                       env=env, check=True, capture_output=True, timeout=600)
    subprocess.run(["node", "scripts/build.js"], cwd=pkg, env=env,
                   check=True, capture_output=True, timeout=600)
    return env


def main():
    asan = asan_build(harness.SLUICE)
    build = os.path.basename(os.path.normpath(harness.BUILD))
    node_env = build_node_addon()
    workdir = tempfile.mkdtemp(prefix="sluice-soak-")
    soak = Soak(workdir)
    soak.node_rc = None
    soak.proxy_rc = None
    soak.node_stats = None
    soak.http = None
    soak.http_rc = None
    rows, node_rows, node_end, http_end = [], [], None, None
    threads = []
    ok = False
    try:
        t0 = now()
        soak.group = sentinel_harness.SentinelGroup(
            n=3, down_after_ms=1000, failover_timeout_ms=5000)
        soak.start_proxy()
        addrs = ", ".join('"%s"' % a for a in soak.group.addrs())
        store = ("store:\n  redis:\n    sentinel: {master: %s, addrs: [%s]}"
                 "\n    timeout_ms: %d\n" % (soak.group.name, addrs,
                                             TIMEOUT_MS))
        proxied = ("store:\n  redis:\n    url: \"redis://127.0.0.1:%d\"\n"
                   "    timeout_ms: %d\n" % (soak.proxy_port, TIMEOUT_MS))
        for i, text in enumerate([store, store, proxied]):
            s = Serve("serve%d" % (i + 1), text + RULES, workdir)
            s.start()
            soak.serves.append(s)
        for s in soak.serves:
            if not harness.wait_until(s.ready, 30, 0.05):
                raise RuntimeError("%s never ready:\n%s"
                                   % (s.name, s.proc.log()))
            s.mark_start()
        print("group, proxy and instances up in %.1f s (%s); work dir %s"
              % (now() - t0, ", ".join("%s :%d" % (s.name, s.port)
                                        for s in soak.serves), workdir),
              flush=True)

        # Both loads start their schedules together, once warmed up.
        start = now() + 8.0
        node_rate = OFFERED * NODE_SHARE
        serve_rate = (OFFERED - node_rate) / len(soak.serves)
        node_out = os.path.join(workdir, "node.out")
        with open(os.path.join(workdir, "node.json"), "w") as f:
            json.dump({"sentinels": soak.group.addrs(),
                       "master": soak.group.name, "capacity": CAPACITY,
                       "rate": RATE, "timeoutMs": TIMEOUT_MS,
                       "keys": USERS, "reqRate": node_rate,
                       "seconds": SECONDS, "startAt": int(start * 1000),
                       "out": node_out, "maxInFlight": MAX_IN_FLIGHT}, f)
        soak.node = harness.Proc(["node", os.path.join(HERE, "node_load.js"),
                                  os.path.join(workdir, "node.json")],
                                 env=node_env)
        http_out = os.path.join(workdir, "http.out")
        with open(os.path.join(workdir, "http.json"), "w") as f:
            json.dump({"targets": [{"name": s.name, "port": s.port,
                                    "rate": serve_rate}
                                   for s in soak.serves],
                       "keys": USERS, "seconds": SECONDS,
                       "startAt": int(start * 1000), "out": http_out,
                       "maxInFlight": MAX_IN_FLIGHT}, f)
        http = harness.Proc(["node", os.path.join(HERE, "http_load.js"),
                             os.path.join(workdir, "http.json")],
                            env=node_env)
        soak.http = http
        for s in soak.serves:
            s.started_at = start
        threads = [threading.Thread(target=soak.inject, args=(start,)),
                   threading.Thread(target=soak.sample)]
        for t in threads:
            t.start()
        try:
            soak.http_rc = http.wait(SECONDS + 120)
        except subprocess.TimeoutExpired:
            http.signal(signal.SIGKILL)
        end = now()
        soak.stop_flag.set()
        for t in threads:
            t.join(120)

        # Node finishes its own schedule and exits.
        try:
            soak.node_rc = soak.node.wait(120)
        except subprocess.TimeoutExpired:
            soak.node.signal(signal.SIGKILL)
        node_rows, node_end = read_rows(node_out, node=True)
        rows, http_end = read_rows(http_out)
        if node_end:
            soak.node_stats = dict(
                (k, int(v)) for k, v in re.findall(r"(\w+)=(-?\d+)",
                                                   node_end))
        if soak.proxy.poll() is not None:
            soak.proxy_rc = soak.proxy.returncode
        # The load's connections are closed: descriptors back down.
        for s in soak.serves:
            if s.proc.poll() is not None:
                s.exits.append("exited with %s" % s.proc.returncode)
                s.fd_end = None
                continue
            harness.wait_until(lambda: (proc_stats(s.proc.pid) or
                                        (0, 1 << 30))[1] <= s.fd_start + 2,
                               15, 0.1)
            st = proc_stats(s.proc.pid)
            s.fd_end = st[1] if st else None
        for s in soak.serves:
            s.stop()

        if soak.http_rc != 0 or not http_end:
            raise RuntimeError("the HTTP load failed (%s):\n%s"
                               % (soak.http_rc, http.log()))
        a = analyse(soak, rows, node_rows, start, end, node_end, asan)
        lag = re.search(r"lag=(\d+)", http_end).group(1)
        text = report(soak, a, start, end, lag, asan, build)
        print(text, flush=True)
        if REPORT:
            header = ("Command: `make soak` (`SOAK_SECONDS=%g`). %s"
                      % (SECONDS, machine()))
            write_report(REPORT, text, header)
            print("written to %s" % REPORT)
        ok = not a["failures"]
    finally:
        soak.stop_flag.set()
        for t in threads:
            if t.is_alive():
                t.join(60)
        if soak.stopped is not None:
            soak.stopped.signal(signal.SIGCONT)
        for p in (soak.node, soak.http):
            if p is not None:
                p.signal(signal.SIGKILL)
                p.stop()
        for s in soak.serves:
            if s.proc is not None:
                s.proc.signal(signal.SIGKILL)
                s.proc.stop()
        if soak.proxy is not None:
            soak.proxy.stop()
        if soak.group is not None:
            soak.group.stop()
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            for s in soak.serves:
                for i, log in enumerate(s.logs):
                    with open(os.path.join(workdir, "%s.%d.log"
                                           % (s.name, i)), "w") as f:
                        f.write(log)
            print("logs kept in %s" % workdir)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
