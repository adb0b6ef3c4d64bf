#!/usr/bin/env python3
"""floor.py -- where the gap between sluice's memory-store app and bare
Express goes: the apps below up side by side, all driven at once at full
speed (each by its own `wrk -t1 -c50` with the 10,000 random users of the
node section), window after window, the order of the wrk starts turned
every window.  Per app: its req/s over bare Express's in the same window,
and bare's node CPU per request over the app's (what one core serves of
it), medians over the windows with the interquartile range.  A second bare
Express is the method's own spread.  node runs on CPU 0 and wrk on CPU 1
when there are two.

Run after `bench/run --only node` has installed the apps (npm ci and the
sluice package from the checkout):

    python3 bench/node/floor.py [WINDOWS [SECONDS]]
"""
import os
import re
import signal
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
APPS = os.environ.get("FLOOR_APPS", "bare bare noop key-only five-headers sluice-memory-no-headers sluice-memory").split()
WRK_LUA = r"""
function init(args) math.randomseed(24680) end
function request()
  return wrk.format(nil, nil, {["x-user-id"] = "user-" .. math.random(1, 10000)})
end
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ns(pid):
    """The process's CPU time, all threads, from schedstat."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
            total += int(f.read().split()[0])
    return total


def on_cpu(cpu):
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def start(app, cpu):
    port = free_port()
    p = subprocess.Popen(
        ["node", os.path.join(HERE, app + ".js")], cwd=HERE,
        env=dict(os.environ, PORT=str(port), NODE_ENV="production"),
        stdout=subprocess.PIPE, text=True, preexec_fn=on_cpu(cpu))
    line = p.stdout.readline()
    if "listening" not in line:
        p.kill()
        raise SystemExit("%s did not start: %r" % (app, line))
    return p, port


def window(apps, script, seconds, turn, cpu):
    order = apps[turn % len(apps):] + apps[:turn % len(apps)]
    c0 = {name: cpu_ns(p.pid) for name, p, _ in order}
    wrks = [(name, subprocess.Popen(
        ["wrk", "-t1", "-c50", "-d%ds" % seconds, "-s", script,
         "http://127.0.0.1:%d/" % port],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=on_cpu(cpu))) for name, _, port in order]
    outs = {}
    for name, w in wrks:
        try:
            outs[name] = w.communicate(timeout=seconds + 60)[0]
        except subprocess.TimeoutExpired:
            w.kill()
            outs[name] = w.communicate()[0]
    c1 = {name: cpu_ns(p.pid) for name, p, _ in order}
    got = {}
    for name, out in outs.items():
        m = re.search(r"(\d+) requests in", out)
        if not m or int(m.group(1)) == 0:
            raise SystemExit("wrk for %s: %s" % (name, out[-300:]))
        n = int(m.group(1))
        got[name] = (n / seconds, (c1[name] - c0[name]) / 1e3 / n)
    return got


def main():
    windows = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    two = os.cpu_count() >= 2
    script = os.path.join("/tmp", "sluice-floor-%d.lua" % os.getpid())
    with open(script, "w") as f:
        f.write(WRK_LUA)
    apps = []
    try:
        for i, app in enumerate(APPS):
            p, port = start(app, 0 if two else None)
            apps.append(("%s#%d" % (app, i), p, port))
        window(apps, script, 2, 0, 1 if two else None)  # warm-up
        load0 = os.getloadavg()[0]
        runs = [window(apps, script, seconds, i, 1 if two else None)
                for i in range(windows)]
        load1 = os.getloadavg()[0]
    finally:
        for _, p, _ in apps:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        os.unlink(script)
    base = apps[0][0]
    print("%d windows of %d s, %d apps at once; load average %.2f -> %.2f"
          % (windows, seconds, len(apps), load0, load1))
    print("| app | req/s | node CPU us/request | req/s vs bare (IQR) "
          "| a core's req/s vs bare (IQR) |")
    print("|---|---|---|---|---|")
    for name, _, _ in apps:
        rps = [w[name][0] / w[base][0] for w in runs]
        core = [w[base][1] / w[name][1] for w in runs]
        q, c = statistics.quantiles(rps, n=4), statistics.quantiles(core, n=4)
        print("| %s | %.0f | %.1f | %.3f (%.3f-%.3f) | %.3f (%.3f-%.3f) |" % (
            name, statistics.median(w[name][0] for w in runs),
            statistics.median(w[name][1] for w in runs),
            statistics.median(rps), q[0], q[2],
            statistics.median(core), c[0], c[2]))


if __name__ == "__main__":
    main()
