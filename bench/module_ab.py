#!/usr/bin/env python3
"""bench/module_ab.py -- two builds of the Redis module, side by side.

    bench/module_ab.py OLD.so NEW.so [--reps R] [--calls N] [--keys K]
                       [--cmds set,take,multi16,many16,each16]

One redis-server per module (STORE int), both pinned to the same core and
redis-benchmark to another (taskset), driven exactly as bench/module_cost.py
drives them (same commands, 4 connections, pipelining 64, random keys out
of K), the runs alternating between the builds and the commands, the order
reversed every other repetition, so that load from other work lands on
both alike.  Prints, per build and command, redis-server CPU µs per key
and usec_per_call per key (median [min - max] of R runs), and each batch's
per-key figure over SLUICE.TAKE's, taken per repetition, then the median;
the load average before and after.  For comparing a change on a busy
machine, where figures from separate runs cannot be compared.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import module_cost as mc  # noqa: E402


def med(vs):
    vs = sorted(vs)
    return "%.3f [%.3f - %.3f]" % (statistics.median(vs), vs[0], vs[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("modules", nargs=2, metavar="MODULE.so")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=500000)
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--cmds", default="set,take,multi16,many16,each16")
    a = ap.parse_args()
    names = a.cmds.split(",")
    if "take" not in names:
        names.insert(0, "take")
    cs = mc.cpus()
    srv_cpu, bench_cpu = (cs[-1], cs[0]) if len(cs) >= 2 else (None, None)
    cmds = mc.commands()
    mods = [os.path.realpath(m) for m in a.modules]
    runs = {(i, n): [] for i in range(len(mods)) for n in names}
    load0 = os.getloadavg()[0]
    srvs = []
    try:
        for m in mods:
            srvs.append(mc.Server(m, "int", srv_cpu))
        for rep in range(a.reps):
            order = [(i, n) for n in names for i in range(len(mods))]
            for i, n in order if rep % 2 == 0 else order[::-1]:
                stat, per, args = cmds[n]
                runs[(i, n)].append(mc.one_run(srvs[i], stat, per, args,
                                               a.calls, a.keys, bench_cpu))
    finally:
        for s in srvs:
            s.stop()
    print("load average %.2f before, %.2f after; %d reps, %d keys decided "
          "per run, %d keys" % (load0, os.getloadavg()[0], a.reps, a.calls,
                                a.keys))
    for i, m in enumerate(mods):
        print(m)
        for n in names:
            print("  %-8s cpu_us/key %-24s usec/key %s" % (
                n, med([r["cpu_us_per_key"] for r in runs[(i, n)]]),
                med([r["usec_per_key"] for r in runs[(i, n)]])))
        for n in names:
            if n in ("take", "set"):
                continue
            print("  %-8s per key / take: cpu %-24s usec %s" % (
                n, med([x["cpu_us_per_key"] / y["cpu_us_per_key"] for x, y
                        in zip(runs[(i, n)], runs[(i, "take")])]),
                med([x["usec_per_key"] / y["usec_per_key"] for x, y
                     in zip(runs[(i, n)], runs[(i, "take")])])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
