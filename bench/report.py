"""bench/report.py -- docs/BENCHMARKS.md and its plots from results.json.

Called by bench/run after the measurements; everything in the report comes
from the results of that run (and earlier --only runs merged into it).  A
section with no results at all (`--only` on a machine that has no earlier
results.json) keeps the text the page already had, marked as not rerun.
"""

import json
import os
import re
import shutil
import subprocess


def fmt(v, digits=3):
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return "{:,}".format(v)
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1000:
            return "{:,.0f}".format(v)
        return "{:.{}g}".format(v, digits)
    return str(v)


def pct(v):
    return "n/a" if v is None else "%.2f%%" % (100 * v)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ plots

class Plots:
    def __init__(self, workdir, imgdir):
        self.work = workdir
        self.img = imgdir
        self.ok = shutil.which("gnuplot") is not None
        self.made = []
        os.makedirs(self.work, exist_ok=True)
        os.makedirs(self.img, exist_ok=True)

    def bars(self, name, title, ylabel, rows, logscale=False):
        """rows: [(label, value)], None values skipped."""
        rows = [(l, v) for l, v in rows if v is not None]
        if not self.ok or not rows:
            return None
        dat = os.path.join(self.work, name + ".dat")
        with open(dat, "w") as f:
            for label, v in rows:
                f.write('"%s" %s\n' % (label, v))
        return self._plot(name, """
set title "%s"
set ylabel "%s"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.6
set yrange [0:*]
set format y "%%.1s%%c"
%s
set grid ytics
unset key
plot "%s" using 2:xtic(1) lc rgb "#3b6ea5"
""" % (title, ylabel, "set logscale y" if logscale else "", dat))

    def _plot(self, name, body, size="800,420"):
        png = os.path.join(self.img, name + ".png")
        gp = os.path.join(self.work, name + ".gp")
        with open(gp, "w") as f:
            f.write("set terminal pngcairo noenhanced size %s font \"sans,10\"\n" % size)
            f.write('set output "%s"\n' % png)
            f.write(body)
        r = subprocess.run(["gnuplot", gp], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            return None
        self.made.append(png)
        return "img/%s.png" % name

    def lines(self, name, title, xlabel, ylabel, series, size="900,420"):
        """series: [(label, [(x, y), ...])]."""
        if not self.ok or not series:
            return None
        plots = []
        for i, (label, pts) in enumerate(series):
            dat = os.path.join(self.work, "%s_%d.dat" % (name, i))
            with open(dat, "w") as f:
                for x, y in pts:
                    f.write("%s %s\n" % (x, y))
            plots.append('"%s" using 1:2 with steps lw 1.5 title "%s"'
                         % (dat, label))
        return self._plot(name, """
set title "%s"
set xlabel "%s"
set ylabel "%s"
set grid
set key top right
plot %s
""" % (title, xlabel, ylabel, ", ".join(plots)), size)

    def grouped(self, name, title, ylabel, cols, rows):
        """A clustered histogram: rows [(label, [v per col])]."""
        if not self.ok or not rows:
            return None
        dat = os.path.join(self.work, name + ".dat")
        with open(dat, "w") as f:
            for label, vals in rows:
                f.write('"%s" %s\n' % (label, " ".join(
                    "0" if v is None else str(v) for v in vals)))
        using = ", ".join(
            '"%s" using %d%s title "%s"' % (dat, i + 2,
                                             ":xtic(1)" if i == 0 else "", c)
            for i, c in enumerate(cols))
        return self._plot(name, """
set title "%s"
set ylabel "%s"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set format y "%%.1s%%c"
set grid ytics
set key top right
set xtics rotate by -15
plot %s
""" % (title, ylabel, using))


# ----------------------------------------------------------------- report

# The project's performance targets, each checked against this run:
# (what, section, how the figure is computed, comparison, bound, unit).
TARGETS = [
    ("pure decision function", "core", lambda r: r["core"]["dps"],
     ">=", 50e6, "decisions/s"),
    ("memory store, 1M keys, single takes, per thread CPU second",
     "scaling", lambda r: r["scaling"]["dps_1m_cpu"], ">=", 5e6,
     "decisions/s"),
    ("memory store, 10M keys, single takes, per thread CPU second",
     "scaling", lambda r: r["scaling"]["dps_10m_cpu"], ">=", 5e6,
     "decisions/s"),
    ("memory store, 1M keys, batches of 16, per thread CPU second",
     "scaling", lambda r: r["scaling"]["dps_1m_batch16_cpu"], ">=", 5e6,
     "decisions/s"),
    ("memory store, 10M keys, batches of 16, per thread CPU second",
     "scaling", lambda r: r["scaling"]["dps_10m_batch16_cpu"], ">=", 5e6,
     "decisions/s"),
    ("shared-memory store, 1k keys, 2 processes on one file, each vs one "
     "memory store, per CPU second", "shared",
     lambda r: r["shared"]["ratio_1k_2procs_cpu"], ">=", 0.7, "x"),
    ("shared-memory store, 1k keys, 2 processes on one file, each vs one "
     "memory store, decisions/s", "shared",
     lambda r: r["shared"]["ratio_1k_2procs"], ">=", 0.7, "x"),
    ("memory store, bytes per key (no key bytes are stored)", "memory",
     lambda r: r["memory"]["memory_store"], "<=", 64, "B"),
    ("nginx + sluice_limit CPU per request vs nginx + limit_req", "nginx",
     lambda r: r["nginx"]["cpu_ratio"], "<=", 1.05, "x"),
    ("nginx + sluice_limit req/s vs nginx + limit_req", "nginx",
     lambda r: r["nginx"]["rps_ratio"], ">=", 0.95, "x"),
    ("nginx + sluice_limit store=redis CPU per request (nginx + Redis) vs "
     "nginx + limit_req", "nginx",
     lambda r: r["nginx"]["redis_cpu_ratio"], "<=", 1.5, "x"),
    ("nginx + sluice_limit store=redis p99 at 50 connections", "nginx",
     lambda r: r["nginx"]["sluice_redis_p99_ms"], "<=", 2.0, "ms"),
    ("/v1/check req/s vs nginx limit_req", "http",
     lambda r: r["http"]["ratio"], ">=", 1.0, "x"),
    ("/v1/check p99", "http", lambda r: r["http"]["sluice_p99_ms"], "<=",
     1.0, "ms"),
    ("Redis script decisions/s vs classic script", "redis",
     lambda r: r["redis"]["ratio"], ">=", 1.8, "x"),
    ("Redis script CPU per decision vs classic script", "redis",
     lambda r: r["redis"]["usec_per_call_sluice_script"] /
     r["redis"]["usec_per_call_classic"], "<=", 0.7, "x"),
    ("Redis bytes per key, script path (key with prefix and hash tag)",
     "memory", lambda r: r["memory"]["redis_script"], "<=", 128, "B"),
    ("module Redis CPU per call", "redis",
     lambda r: r["redis"]["usec_per_call_module"], "<=", 3.0, "us"),
    ("SLUICE.TAKE redis-server CPU per call vs SET ... PX (medians)",
     "redis", lambda r: r["redis"]["module_take_vs_set_cpu"], "<=", 1.3,
     "x"),
    ("SLUICE.TAKEMANY of 16: redis-server CPU per key vs one SLUICE.TAKE",
     "redis", lambda r: r["redis"]["module_many16_vs_take_cpu"], "<=", 0.6,
     "x"),
    ("SLUICE.TAKEEACH of 16 (one limit): redis-server CPU per key vs one "
     "SLUICE.TAKE", "redis",
     lambda r: r["redis"]["module_each16_vs_take_cpu"], "<=", 0.6, "x"),
    ("store client on the module: decisions/s, takes of a loop turn batched "
     "vs each alone", "redis",
     lambda r: r["redis"]["module_batched_vs_alone"], ">=", 1.0, "x"),
    ("Redis bytes per key, module, 1M keys with a TTL (the floor, a SET "
     "PX under 6-character names, is in the module cost table)", "redis",
     lambda r: r["redis"]["module_bytes_per_key_1m"], "<=", 110, "B"),
    ("module decisions/s vs script path", "redis",
     lambda r: r["redis"]["module_dps"] / r["redis"]["sluice_dps"], ">=",
     3.0, "x"),
    ("module decisions/s vs classic script", "redis",
     lambda r: r["redis"]["module_ratio"], ">=", 5.0, "x"),
    ("Redis over TLS: script decisions/s vs plain", "redis",
     lambda r: r["redis"]["tls_ratio"], ">=", 0.7, "x"),
    ("Redis over TLS: module decisions/s vs plain", "redis",
     lambda r: r["redis"]["module_tls_ratio"], ">=", 0.6, "x"),
    ("Redis over TLS: redis-server CPU per decision vs plain (script)",
     "redis", lambda r: r["redis"]["redis_us_per_decision_sluice_tls"] /
     r["redis"]["redis_us_per_decision_sluice_script"], "<=", 1.25, "x"),
    ("Node, sluice memory: limiter's own node CPU vs the classic's "
     "(fixed load)", "node",
     lambda r: r["node"]["memory_limiter_cpu_vs_classic"], "<=", 0.05, "x"),
    ("Node, sluice Redis: limiter's own node CPU vs the classic's "
     "(fixed load)", "node",
     lambda r: r["node"]["redis_limiter_cpu_vs_classic"], "<=", 0.5, "x"),
    ("Node, sluice memory: in-process (overhead.js), vs the "
     "classic as written (2 headers)", "node",
     lambda r: r["node"]["memory_inproc_cpu_vs_classic"], "<=", 0.05, "x"),
    ("Node, sluice Redis: in-process (overhead.js), vs the classic as "
     "written (2 headers)", "node",
     lambda r: r["node"]["redis_inproc_cpu_vs_classic"], "<=", 0.3, "x"),
    ("Node, sluice Redis: in-process (overhead.js), vs the classic "
     "sending the same 5 headers", "node",
     lambda r: r["node"]["redis_inproc_cpu_vs_classic_headers"], "<=", 0.3,
     "x"),
    ("Node, sluice memory: req/s vs bare Express", "node",
     lambda r: r["node"]["memory_rps_vs_bare"], ">=", 0.95, "x"),
    ("Node, sluice memory: in-process CPU vs the cheaper Node peer's "
     "memory store (same 5 headers)", "node",
     lambda r: r["node"]["memory_inproc_cpu_vs_peers"], "<=", 0.5, "x"),
    ("Node, sluice Redis: req/s vs the classic app", "node",
     lambda r: r["node"]["redis_rps_vs_classic"], ">=", 1.05, "x"),
    ("Node, sluice Redis: req/s vs the classic app, saturated side by side "
     "(median of windows)", "node",
     lambda r: r["node"]["side_redis_rps_ratio"], ">=", 1.05, "x"),
    ("Node, sluice memory: req/s vs bare Express, saturated side by side "
     "(median of windows)", "node",
     lambda r: r["node"]["side_memory_rps_ratio"], ">=", 0.97, "x"),
    ("Node, sluice memory: req/s vs bare Express, paired runs of a fixed "
     "request count (median of rounds)", "node",
     lambda r: r["node"]["paired_memory_rps_ratio"], ">=", 0.97, "x"),
    ("Node, sluice memory: node CPU per request vs bare Express, paired "
     "runs of a fixed request count (median of rounds)", "node",
     lambda r: r["node"]["paired_memory_cpu_ratio"], "<=", 1.03, "x"),
    ("Node, sluice memory: p99 vs the classic app's", "node",
     lambda r: r["node"]["memory_p99_vs_classic"], "<=", 1.0, "x"),
    ("Node, sluice Redis: p99 vs the classic app's", "node",
     lambda r: r["node"]["redis_p99_vs_classic"], "<=", 1.0, "x"),
    ("gRPC ShouldRateLimit calls/s vs /v1/check req/s (memory)", "grpc",
     lambda r: r["grpc"]["ratio"], ">=", 0.8, "x"),
    ("gRPC server CPU per call vs /v1/check's per request (memory)",
     "grpc", lambda r: r["grpc"]["cpu_ratio"], "<=", 1.3, "x"),
    ("gRPC p99, memory store", "grpc", lambda r: r["grpc"]["grpc_p99_ms"],
     "<=", 2.0, "ms"),
    ("gRPC p99, Redis store", "grpc",
     lambda r: r["grpc"]["redis_grpc_p99_ms"], "<=", 5.0, "ms"),
]

# The node section's apps: (results.json prefix, label, short label).
NODE_APPS = [
    ("bare", "bare Express (no limiter)", "bare"),
    ("sluice_memory", "Express + sluice, memory store", "sluice memory"),
    ("sluice_redis", "Express + sluice, Redis store", "sluice Redis"),
    ("classic", "classic: ioredis + Lua hash bucket (EVALSHA)", "classic"),
    ("classic_headers", "the classic, sending sluice's 5 headers",
     "classic 5 headers"),
    ("flexible", "rate-limiter-flexible RateLimiterRedis",
     "rl-flexible"),
    ("express_rate_limit", "express-rate-limit + rate-limit-redis",
     "express-rate-limit"),
    ("flexible_memory", "rate-limiter-flexible RateLimiterMemory",
     "rl-flexible memory"),
    ("express_rate_limit_memory", "express-rate-limit MemoryStore",
     "erl memory"),
]


# The second instance of bare Express that the rounds and the side-by-side
# windows measure (bench/run's bare_again).
BARE_AGAIN = "bare Express again (a second instance of the same app)"


# Targets whose figure has a spread in results.json, a [low, high] list
# under the figure's key + "_spread": (section, key) by the target's label.
TARGET_SPREADS = {
    t[0]: ("node", k) for t, k in zip(
        [t for t in TARGETS if t[1] == "node"][:5] + [
            t for t in TARGETS if "cheaper Node peer" in t[0]],
        ["memory_limiter_cpu_vs_classic", "redis_limiter_cpu_vs_classic",
         "memory_inproc_cpu_vs_classic", "redis_inproc_cpu_vs_classic",
         "redis_inproc_cpu_vs_classic_headers",
         "memory_inproc_cpu_vs_peers"])
}


def targets_table(results):
    rows = []
    for what, section, get, op, bound, unit in TARGETS:
        try:
            v = float(get(results))
        except (KeyError, TypeError, ZeroDivisionError):
            rows.append([what, "%s %s %s" % (op, fmt(bound), unit),
                         "not measured", ""])
            continue
        if v < 0:
            # A cost ratio below zero: one of its differences (a limiter's
            # CPU above bare Express, say) was smaller than the run's
            # noise, so the run says nothing about the target.
            rows.append([what, "%s %s %s" % (op, fmt(bound), unit),
                         "%s %s" % (fmt(v), unit), "within the noise"])
            continue
        ok = v >= bound if op == ">=" else v <= bound
        got = "%s %s" % (fmt(v), unit)
        if what in TARGET_SPREADS:
            sec, key = TARGET_SPREADS[what]
            sp = (results.get(sec) or {}).get(key + "_spread")
            if sp:
                got += " (%s to %s)" % (fmt(sp[0]), fmt(sp[1]))
        rows.append([what, "%s %s %s" % (op, fmt(bound), unit),
                     got, "met" if ok else "**not met**"])
    return table(["target", "goal", "this run", ""], rows)


def img(path, alt):
    return "\n![%s](%s)\n" % (alt, path) if path else ""


def span(nd, k):
    """nd[k], a [low, high] pair, as "low to high" ("n/a" without it)."""
    return "%s to %s" % tuple(fmt(v) for v in nd[k]) if nd.get(k) \
        else "n/a"


def ratio_spread(nd, k):
    """A median ratio in bold with its _iqr and _range."""
    return "**%s** (IQR %s, range %s)" % (
        fmt(nd.get(k)), span(nd, k + "_iqr"), span(nd, k + "_range"))


def node_section(w, plots, nd):
    def rng(k):
        return span(nd, k)

    def med_iqr(k):
        v = fmt(nd.get(k))
        return "%s (%s)" % (v, rng(k + "_iqr")) if nd.get(k + "_iqr") else v

    w("\n## node: Express apps, sluice's addon vs the Redis limiters "
      "people use\n")
    w("Nine Express 4 apps (`bench/node/`, node %s, `NODE_ENV=production`) "
      "share one route (`GET /` answering `{\"ok\":true}`) and differ only "
      "in the limiter in front of it, each keyed by `x-user-id` with %s. "
      "One Redis serves them all (flushed between runs). Each app gets a "
      "%s s warm-up, then `wrk %s --latency` with a Lua script that sends "
      "one of %s random `x-user-id`s per request. node and Redis CPU per "
      "request are the utime + stime deltas of the node and redis-server "
      "processes over the measured run, divided by the requests wrk "
      "completed. rate-limiter-flexible and express-rate-limit "
      "count fixed windows; 100 requests per 50 s is their nearest "
      "equivalent. The classic app sends X-RateLimit-Limit and "
      "-Remaining, as the blog posts write it; \"the classic, sending "
      "sluice's 5 headers\" is the same bucket sending RateLimit-Policy, "
      "RateLimit and X-RateLimit-Limit/-Remaining/-Reset as sluice's "
      "middleware does by default. \"one key\" is how many of 105 "
      "back-to-back requests for "
      "a single user passed before the load (the bucket of 100 plus any "
      "token refilled meanwhile: the limit is really on).\n"
      % (fmt(nd.get("node_version")), fmt(nd.get("policy")),
         fmt(nd.get("warmup_s", 3)),
         fmt(nd.get("wrk")), fmt(nd.get("users"))))
    w("\nA limiter's own cost is the difference of two figures of 100 µs or "
      "more that each move with the machine's load, so it is measured two "
      "more ways. **In-process** (`bench/node/overhead.js`): each app's "
      "middleware called directly on a request and a response made as node "
      "and Express make them (the app's prototypes set on them, then "
      "Express's own properties added), the response's head rendered after "
      "it (so the headers a limiter sets are paid for), 50 calls in flight "
      "against the same Redis, in chunks of %s calls; in each of %s passes "
      "every middleware runs one chunk between two chunks of a no-op "
      "middleware (%s µs per call, interquartile range %s) and its figure "
      "for the pass is its node CPU per call minus the mean of those two; "
      "the order rotates from pass to pass; each figure below is the "
      "median over the passes with the interquartile range in brackets. "
      "Every chunk starts after a young-generation collection, with fixed "
      "16 MB semi-spaces, the collector on node's main thread and no "
      "idle-time scavenges (`%s`), after a warm-up of every middleware, so "
      "that no chunk pays for another's garbage (the load average was %s "
      "before and after).\n"
      % (fmt(nd.get("inproc_calls")), fmt(nd.get("inproc_passes")),
         fmt(nd.get("inproc_noop_cpu_us_per_call")), rng("inproc_noop_iqr"),
         nd.get("inproc_flags") or "n/a",
         rng("inproc_loadavg_1m").replace(" to ", " and ")))
    if nd.get("pinned"):
        w("\nPinned with CPU affinity (`sched_setaffinity`, as `taskset` "
          "does): %s, so that the app and its load do not trade time "
          "slices.\n" % nd["pinned"])
    rows = []
    for app, label, _ in NODE_APPS:
        rows.append([label, fmt(nd.get(app + "_rps")),
                     fmt(nd.get(app + "_p50_ms")),
                     fmt(nd.get(app + "_p99_ms")),
                     fmt(nd.get(app + "_node_cpu_us_per_req")),
                     "—" if app == "bare" else
                     med_iqr(app + "_inproc_cpu_us_per_call"),
                     fmt(nd.get(app + "_redis_cpu_us_per_req")),
                     fmt(nd.get(app + "_one_key_allowed_of_105"))])
    w(table(["app", "req/s", "p50 ms", "p99 ms", "node CPU µs/request",
             "limiter's own node CPU µs/call, in-process (IQR)",
             "Redis CPU µs/request",
             "one key: passed of 105"], rows))
    fixed = [(app, label) for app, label, _ in NODE_APPS
             if nd.get(app + "_fixed_cpu_us_per_req") is not None]
    if fixed:
        w("\n**At a fixed load**: the apps the targets compare (bare, "
          "sluice on each store, the classic) driven all at once, each by "
          "its own `wrk %s` whose connections each wait 0 to %s ms "
          "(uniform) before every request (about %s requests/s an app, well "
          "below what the core serves, so that CPU per request is not a "
          "function of saturation), %s windows after a warm-up; in every "
          "window "
          "each app's node CPU per request (from /proc/<pid>/task/*/"
          "schedstat, to the nanosecond) minus bare Express's in the same "
          "window is its limiter's own cost, so that every difference is "
          "of two figures measured at the same moments of the machine. "
          "Medians over the windows, interquartile range in brackets (load "
          "average %s before and after):\n"
          % (nd.get("fixed_wrk") or "n/a", fmt(nd.get("fixed_delay_ms")),
             fmt(nd.get("bare_fixed_rps")), fmt(nd.get("fixed_windows")),
             rng("fixed_loadavg_1m").replace(" to ", " and ")))
        w(table(["app", "req/s", "node CPU µs/request",
                 "above bare Express, µs/request (IQR)"],
                [[label, fmt(nd.get(app + "_fixed_rps")),
                  fmt(nd.get(app + "_fixed_cpu_us_per_req")),
                  "—" if app == "bare" else
                  med_iqr(app + "_fixed_limiter_cpu_us_per_req")]
                 for app, label in fixed]))
    side = [(app, label) for app, label, _ in NODE_APPS
            if nd.get(app + "_side_cpu_us_per_req") is not None]
    if side:
        if nd.get("bare_again_side_cpu_us_per_req") is not None:
            side.append(("bare_again", BARE_AGAIN))
        w("\n**Saturated, side by side**: the same apps and a second bare "
          "Express all driven at once at full speed, each by its own `wrk "
          "%s` as in the runs below (node CPU is then shared among the %s "
          "apps), %s windows after a warm-up, Redis flushed before each. "
          "Every window gives each app the same moments of the machine, so "
          "that the ratios of two apps are of figures measured together; "
          "the second bare Express says how far the method puts two "
          "identical apps apart. Medians over the windows (load average %s "
          "before and after):\n"
          % (nd.get("side_wrk") or "n/a", fmt(nd.get("side_apps")),
             fmt(nd.get("side_windows")),
             rng("side_loadavg_1m").replace(" to ", " and ")))
        w(table(["app", "req/s", "p99 ms", "node CPU µs/request"],
                [[label, fmt(nd.get(app + "_side_rps")),
                  fmt(nd.get(app + "_side_p99_ms")),
                  fmt(nd.get(app + "_side_cpu_us_per_req"))]
                 for app, label in side]))

        def side_ratio(k):
            return ratio_spread(nd, k)
        w("\nWindow by window, saturated side by side: sluice Redis serves "
          "%s of the classic's req/s, and one core would serve %s of the "
          "classic's req/s (1 / node CPU per request), p99 %s of the "
          "classic's; sluice memory serves %s of bare Express's req/s, a "
          "core %s of bare's, p99 %s of bare's; the second bare Express "
          "serves %s of the first's, a core %s.\n"
          % (side_ratio("side_redis_rps_ratio"),
             side_ratio("side_redis_capacity_ratio"),
             side_ratio("side_redis_p99_ratio"),
             side_ratio("side_memory_rps_ratio"),
             side_ratio("side_memory_capacity_ratio"),
             side_ratio("side_memory_p99_ratio"),
             side_ratio("side_bare_again_rps_ratio"),
             side_ratio("side_bare_again_capacity_ratio")))
    paired_section(w, nd)
    spread = []
    for app, label, _ in NODE_APPS + [("bare_again", BARE_AGAIN, "")]:
        runs = nd.get(app + "_runs") or []
        if len(runs) > 1:
            spread.append([label] + [", ".join(fmt(r.get(k)) for r in runs)
                                     for k in ("rps", "p99_ms",
                                               "cpu_us_per_req")])
    if spread:
        if nd.get("round_s") is not None:
            w("\nFor req/s and p99 the apps the targets compare stay up side "
              "by side, each idle while another "
              "is measured: after its warm-up, each is measured %s times "
              "with `wrk -t1 -c50 -d%ss --latency`, in rounds over the four "
              "and a second bare Express (the same app again, measured "
              "next to the first: what two identical apps give) in the "
              "order below (reversed every other round), Redis flushed "
              "before every run; the first table gives each figure's "
              "median, the other apps' one run of `wrk %s`. Every run, in "
              "order:\n"
              % (fmt(nd.get("rounds")), fmt(nd.get("round_s")),
                 fmt(nd.get("wrk"))))
        else:
            w("\nThe apps the targets compare ran %s times each, in turn "
              "(a pass over every app, then sluice memory, bare, the "
              "classic and sluice Redis again, the order reversed every "
              "other round); the table gives each figure's median. Every "
              "run, in order:\n" % fmt(nd.get("rounds")))
        w(table(["app", "req/s", "p99 ms", "node CPU µs/request"], spread))
    loads = [nd[a + "_loadavg_1m"] for a, _, _ in NODE_APPS
             if nd.get(a + "_loadavg_1m") is not None]
    if loads:
        w("\nThe machine's 1-minute load average after each app's run: "
          "%s to %s (%s cores; wrk, node and Redis alone make about 2).\n"
          % (fmt(min(loads)), fmt(max(loads)), fmt(os.cpu_count())))

    def ratio_s(k):
        v = fmt(nd.get(k))
        sp = nd.get(k + "_spread")
        return "**%s** (%s to %s)" % (v, fmt(sp[0]), fmt(sp[1])) if sp \
            else "**%s**" % v
    w("\nAt a fixed load, the limiter's own node CPU is %s (memory) and %s "
      "(Redis) of the classic's. In-process, the limiter's own CPU is %s "
      "(memory) and %s (Redis) of the classic's as written (2 headers), "
      "%s (memory) and %s (Redis) of the classic sending the same 5 "
      "headers, and the memory store's %s of the cheaper Node peer's "
      "memory store (%s; the same 5 headers). In brackets: the ratio from "
      "the far quartiles of the two figures (low over high, high over "
      "low).\n"
      % (ratio_s("memory_limiter_cpu_vs_classic"),
         ratio_s("redis_limiter_cpu_vs_classic"),
         ratio_s("memory_inproc_cpu_vs_classic"),
         ratio_s("redis_inproc_cpu_vs_classic"),
         ratio_s("memory_inproc_cpu_vs_classic_headers"),
         ratio_s("redis_inproc_cpu_vs_classic_headers"),
         ratio_s("memory_inproc_cpu_vs_peers"),
         dict((a, l) for a, l, _ in NODE_APPS).get(
             nd.get("memory_inproc_cheaper_peer"), "n/a")))
    w("\nSaturated: sluice memory req/s **%s** of bare Express's, p99 "
      "**%s** of the classic's; sluice Redis req/s **%s** of the classic's, "
      "p99 **%s** of the classic's; the memory store's req/s **%s** of the "
      "faster Node peer's memory store.\n"
      % tuple(fmt(nd.get(k)) for k in (
          "memory_rps_vs_bare", "memory_p99_vs_classic",
          "redis_rps_vs_classic", "redis_p99_vs_classic",
          "memory_rps_vs_peers")))
    if nd.get("redis_rps_vs_classic_paired") is not None:
        w("\nRound by round (each sluice run against the classic or bare run "
          "next to it): sluice Redis req/s **%s** of the classic's (%s), "
          "p99 **%s** of the classic's (%s); sluice memory req/s **%s** of "
          "bare Express's (%s).\n"
          % (fmt(nd.get("redis_rps_vs_classic_paired")),
             rng("redis_rps_vs_classic_paired_range"),
             fmt(nd.get("redis_p99_vs_classic_paired")),
             rng("redis_p99_vs_classic_paired_range"),
             fmt(nd.get("memory_rps_vs_bare_paired")),
             rng("memory_rps_vs_bare_paired_range")))
    if nd.get("bare_again_rps_vs_bare_paired") is not None:
        w("\nThe same app twice, round by round: the second bare Express's "
          "req/s **%s** of the first's (%s), its node CPU per request "
          "**%s** of the first's (%s) -- the spread the rounds give two "
          "identical apps.\n"
          % (fmt(nd.get("bare_again_rps_vs_bare_paired")),
             rng("bare_again_rps_vs_bare_paired_range"),
             fmt(nd.get("bare_again_cpu_vs_bare_paired")),
             rng("bare_again_cpu_vs_bare_paired_range")))
    inproc = [(label, nd.get(app + "_inproc_cpu_us_per_call_range"))
              for app, label, _ in NODE_APPS[1:]]
    if any(r for _, r in inproc):
        w("\nIn-process µs per call, lowest to highest pass: %s.\n"
          % "; ".join("%s %s to %s" % (label, fmt(r[0]), fmt(r[1]))
                      for label, r in inproc if r))
    if nd.get("wait_throughput_waits_per_s") is not None:
        w("\n`limiter.wait()` on Redis (`bench/node/wait.js`, %s processes "
          "at once on one key): **%s** reservations answered per second "
          "(%s calls, a bucket that never drains). On one token refilled "
          "at %s/s (%s waits): the turns on the server's clock come "
          "%s/s, their largest spacing error **%s µs**; promises resolve "
          "after their turn by %s ms (median), %s ms (p99), %s ms (max) "
          "-- the time the reservation's answer took in a burst of calls, "
          "since the timer starts when it arrives -- and %s before it.\n"
          % (nd.get("wait_procs"), fmt(nd.get("wait_throughput_waits_per_s")),
             nd.get("wait_throughput_waits"),
             nd.get("wait_spacing_rate_per_s"),
             nd.get("wait_spacing_waits"),
             fmt(nd.get("wait_spacing_achieved_per_s")),
             fmt(nd.get("wait_spacing_gap_error_us_max")),
             fmt(nd.get("wait_spacing_late_ms_p50")),
             fmt(nd.get("wait_spacing_late_ms_p99")),
             fmt(nd.get("wait_spacing_late_ms_max")),
             nd.get("wait_spacing_early")))
    w(img(plots.grouped(
        "node_cpu", "node and Redis CPU time per request", "µs per request",
        ["node", "Redis"],
        [(short, [nd.get(app + "_node_cpu_us_per_req"),
                  nd.get(app + "_redis_cpu_us_per_req")])
         for app, _, short in NODE_APPS]), "CPU per request by app"))


def paired_section(w, nd):
    """bench/run's node_paired(): sluice memory against bare Express (and
    bare Express against itself) in runs of a fixed request count, A B then
    B A."""
    if nd.get("paired_memory_cpu_ratio") is None:
        return

    def rng(k):
        return span(nd, k)

    def ratio(k):
        return ratio_spread(nd, k)
    w("\n**Paired runs of a fixed request count**: sluice memory and bare "
      "Express (and the second bare Express against the first), up side "
      "by side, each sent %s requests by `wrk %s` (the same random users, "
      "a Lua script that stops wrk after that many answers), one app then "
      "the other, the order turned every round (A B, B A, ...), %s rounds "
      "after a run of each unmeasured. node CPU per request is the node "
      "process's CPU time over the run (all its threads, from "
      "/proc/<pid>/task/*/schedstat: utime + stime to the nanosecond) over "
      "the requests answered: the same work for both apps, whatever share "
      "of a core the machine left each. Each round gives a ratio of two "
      "runs seconds apart; the figures are the medians of the rounds' "
      "ratios (load average %s before and after):\n"
      % (fmt(nd.get("paired_requests")), nd.get("paired_wrk") or "n/a",
         fmt(nd.get("paired_rounds")),
         rng("paired_loadavg_1m").replace(" to ", " and ")))
    rows = [[label, fmt(nd.get(app + "_paired_rps")),
             fmt(nd.get(app + "_paired_cpu_us_per_req"))]
            for app, label in (("bare", NODE_APPS[0][1]),
                               ("sluice_memory", NODE_APPS[1][1]),
                               ("bare_again", BARE_AGAIN))
            if nd.get(app + "_paired_rps") is not None]
    w(table(["app", "req/s (median)", "node CPU µs/request (median)"], rows))
    w("\nRound by round: sluice memory's node CPU per request %s of bare "
      "Express's, its req/s %s of bare's; the second bare Express's CPU "
      "per request %s of the first's, its req/s %s -- the spread the "
      "method gives two identical apps.\n"
      % (ratio("paired_memory_cpu_ratio"), ratio("paired_memory_rps_ratio"),
         ratio("paired_bare_again_cpu_ratio"),
         ratio("paired_bare_again_rps_ratio")))


def grpc_section(w, gr, nproc):
    w("\n## grpc: Envoy's rate limit service vs `/v1/check`\n")
    w("One `sluice serve` with both front ends on the same bucket (%s; "
      "the `envoy:` domain `bench`, key `user`, and an HTTP rule on "
      "`x-user-id`), run in turn: `/v1/check` by `wrk -t1 -c50 -d10s "
      "--latency` over 100,000 random `x-user-id` keys; then "
      "`ShouldRateLimit` by `bench/grpc_load.c` (`sluice_grpc_load`): 50 "
      "calls in flight over 4 HTTP/2 connections (h2c), each call one "
      "descriptor `user=<one of 100,000 random values>`, 10 s after 2 s of "
      "warm-up. h2load is not the load: it sends one body (`-d`) for every "
      "request, so all its calls charge one bucket; its figure for that "
      "one key (4 connections, 13 streams each) is given for comparison. "
      "CPU is the server's (user + system, /proc) over the measured run, "
      "divided by the calls or requests answered. The load generators "
      "run on the same cores as the server.\n" % gr.get("policy", "?"))
    rows = []
    for label, pre in (("memory store", ""), ("Redis store", "redis_")):
        rows.append(["`/v1/check`, " + label, fmt(gr.get(pre + "check_rps")),
                     fmt(gr.get(pre + "check_p50_ms")),
                     fmt(gr.get(pre + "check_p99_ms")),
                     fmt(gr.get(pre + "check_cpu_us_per_req"))])
        rows.append(["`ShouldRateLimit`, " + label,
                     fmt(gr.get(pre + "grpc_cps")),
                     fmt(gr.get(pre + "grpc_p50_ms")),
                     fmt(gr.get(pre + "grpc_p99_ms")),
                     fmt(gr.get(pre + "grpc_cpu_us_per_call"))])
    w(table(["front end", "calls or req/s", "p50 ms", "p99 ms",
             "server CPU µs per call"], rows))
    w("\nShouldRateLimit calls/s over /v1/check req/s: **%s** (memory), "
      "**%s** (Redis); server CPU per call over per request: **%s** "
      "(memory), **%s** (Redis). h2load, one key: %s calls/s. The "
      "machine's load average was %s when the section started (%s cores): "
      "the p99 figures of both front ends include waiting for a core.\n"
      % (fmt(gr.get("ratio")), fmt(gr.get("redis_ratio")),
         fmt(gr.get("cpu_ratio")), fmt(gr.get("redis_cpu_ratio")),
         fmt(gr.get("h2load_one_key_cps")), fmt(gr.get("loadavg_1m")),
         fmt(nproc)))


def nginx_section(w, ng, nproc):
    w("\n## nginx: `sluice_limit` vs `limit_req` vs `auth_request`\n")
    w("Four nginx (Debian's 1.22.1, one worker, `master_process off`) "
      "up at once, each in front of the same static file behind "
      "`try_files`, with the same policy (a bucket of 100 refilled 2/s "
      "per `x-user-id`): `sluice_limit zone=users burst=99 nodelay` "
      "(ngx_http_sluice_module, zone 4m on its shared-memory file in "
      "/dev/shm), `limit_req zone=users burst=99 nodelay` (rate=2r/s), and "
      "`auth_request` to `sluice serve --threads 1` `/v1/check` over a "
      "keep-alive upstream, and `sluice_limit` on `store=redis://` (one "
      "local redis-server%s). `wrk -t1 -c50 -d10s --latency` over 10,000 "
      "random users, %s rounds, the four in a rotating order in each "
      "round. CPU per request: nginx's (user + system, /proc), plus "
      "sluice serve's for `auth_request`, plus redis-server's for "
      "`store=redis://`. Medians, [min, max] over the "
      "rounds; the ratios are medians of the per-round ratios.\n"
      % (" with the SLUICE.TAKE module" if ng.get("redis_module_loaded")
         else "", len(ng.get("rounds", {}).get("limit_req", []))))
    rows = []
    for mode, label in (("sluice_limit", "nginx + `sluice_limit`"),
                        ("limit_req", "nginx + `limit_req`"),
                        ("auth_request", "nginx + `auth_request` + sluice "
                         "serve"),
                        ("sluice_redis", "nginx + `sluice_limit "
                         "store=redis://` + Redis")):
        rows.append([label, fmt(ng.get(mode + "_rps")),
                     "%s–%s" % tuple(fmt(v) for v in
                                     ng.get(mode + "_rps_range", [None] * 2)),
                     fmt(ng.get(mode + "_cpu_us_per_req")),
                     "%s–%s" % tuple(fmt(v) for v in
                                     ng.get(mode + "_cpu_range", [None] * 2)),
                     fmt(ng.get(mode + "_p99_ms"))])
    w(table(["setup", "req/s", "range", "CPU µs/request", "range",
             "p99 ms"], rows))
    w("\n`sluice_limit` over `limit_req`: CPU per request **%sx** (rounds: "
      "%s), req/s **%sx** (rounds: %s). `auth_request` over `limit_req`: "
      "CPU **%sx**, req/s **%sx**. `store=redis://` over `limit_req`: "
      "CPU **%sx** (nginx's alone %sx), req/s **%sx**. "
      "Same policy check, 105 back-to-back "
      "requests for one key: %s passed. Load average %s at the end (%s "
      "cores; wrk shares them). Command: `make bench ONLY=nginx`.\n"
      % (fmt(ng.get("cpu_ratio")), ng.get("cpu_ratio_rounds"),
         fmt(ng.get("rps_ratio")), ng.get("rps_ratio_rounds"),
         fmt(ng.get("auth_cpu_ratio")), fmt(ng.get("auth_rps_ratio")),
         fmt(ng.get("redis_cpu_ratio")), fmt(ng.get("redis_nginx_cpu_ratio")),
         fmt(ng.get("redis_rps_ratio")),
         ", ".join("%s %s" % (m, n) for m, n in
                   (ng.get("one_key_allowed_of_105") or {}).items()),
         fmt(ng.get("loadavg_1m")),
         fmt(nproc)))


def tls_costs(rd):
    """What TLS costs, and where, from this run's figures."""
    def delta(side, tls, plain):
        a = rd.get("%s_us_per_decision_%s" % (side, tls))
        b = rd.get("%s_us_per_decision_%s" % (side, plain))
        return None if None in (a, b) else round(a - b, 2)
    return (
        "What TLS costs, and where: nothing inside the command, which Redis "
        "runs the same way whatever the socket (`usec_per_call` for the "
        "script: %s µs over TLS, %s µs plain), and CPU around the socket on "
        "both sides. The client encrypts its commands and decrypts the "
        "replies (OpenSSL over memory BIOs; TLS 1.3, AES-256-GCM with "
        "Debian's defaults); Redis decrypts the commands and encrypts the "
        "replies on its one main thread, which also runs the scripts, so "
        "its share comes out of the decisions/s. Both pay per record and "
        "per byte, not per command: the client hands every command queued "
        "in one loop iteration to one `SSL_write` (records of up to 16 KB), "
        "and Redis answers what it read in one go with one write, so with "
        "%s decisions in flight a record carries on the order of a hundred "
        "commands. TLS minus plain in this run, per decision: client CPU "
        "%s µs (script) and %s µs (module); Redis CPU %s µs (script) and %s "
        "µs (module). Each is a difference of two figures that move by "
        "several percent from run to run with the machine's load: one near "
        "zero, or below it, says that at %s decisions in flight what TLS "
        "costs per decision is within that noise. With fewer decisions in "
        "flight each record carries fewer commands, and each decision pays "
        "a larger share of one.\n"
        % (fmt(rd.get("usec_per_call_sluice_tls")),
           fmt(rd.get("usec_per_call_sluice_script")),
           fmt(rd.get("sluice_inflight")),
           fmt(delta("client", "sluice_tls", "sluice_script")),
           fmt(delta("client", "module_tls", "module")),
           fmt(delta("redis", "sluice_tls", "sluice_script")),
           fmt(delta("redis", "module_tls", "module")),
           fmt(rd.get("sluice_inflight"))))


def batching_section(mb):
    """bench/run's module_batching(): the store client, batched and not."""
    if not mb:
        return ""

    def med(d):
        return "%s [%s – %s]" % (fmt(d["median"]), fmt(d["min"]),
                                 fmt(d["max"])) if d else "—"
    rows = [["takes of a loop turn in one SLUICE.TAKEEACH (default)",
             med(mb.get("batched_dps")),
             med(mb.get("batched_client_us_per_decision")),
             med(mb.get("batched_redis_us_per_decision"))],
            ["each take alone, one SLUICE.TAKE (`--no-batch`)",
             med(mb.get("alone_dps")),
             med(mb.get("alone_client_us_per_decision")),
             med(mb.get("alone_redis_us_per_decision"))]]
    return ("\n### The store client batching its takes\n\n"
            "`sluice_bench redis --keys 100000 --inflight 256` against one "
            "redis-server with the module, with and without "
            "`--no-batch` (SLUICE_REDIS_NO_BATCH), alternating on the same "
            "server, %s rounds each; medians [min – max]. Load average %s."
            "\n\n" % (fmt(mb.get("rounds")), fmt(mb.get("loadavg_1m")))
            + table(["store client", "decisions/s",
                     "client CPU µs/decision", "Redis CPU µs/decision"],
                    rows) + "\n")


def module_cost_section(mc):
    """bench/module_cost.py: the module's commands next to SET ... PX."""
    if not mc or not mc.get("stores"):
        return ""
    out = ["\n### The module's cost next to SET ... PX\n",
           "`bench/module_cost.py` (Redis %s): one redis-server per way of "
           "storing states (module argument `STORE`, docs/REDIS_MODULE.md)%s, "
           "driven by `redis-benchmark -c 4 -P 64` over %s random keys, "
           "%s keys decided per run, each command run %s times, the "
           "commands alternating. Figures per key: the median of the runs "
           "[min – max]. redis-server CPU is the whole process's user + "
           "system time over the run (network and protocol included: the "
           "headline); `usec_per_call` is Redis's own timing of the command "
           "alone, wall time, which on a loaded machine also counts the "
           "time the server waited for a core inside long commands. "
           "Ratios are taken per repetition (runs next to each other), then "
           "their median. Bytes per key: `used_memory` growth over %s keys "
           "`sluice:%%09d`, each holding a state with a TTL. Load average "
           "%s before, %s after.\n" % (
               mc.get("redis_version"),
               ", pinned to one core and redis-benchmark to another "
               "(taskset)" if mc.get("pinned") else "",
               fmt(mc.get("keys")), fmt(mc.get("calls_per_run")),
               fmt(mc.get("reps")), fmt(mc.get("keys")),
               fmt(mc.get("loadavg_1m_before")),
               fmt(mc.get("loadavg_1m_after")))]

    def med(d):
        return "%s [%s – %s]" % (fmt(d["median"]), fmt(d["min"]),
                                 fmt(d["max"])) if d else "—"
    rows = []
    for store, st in mc["stores"].items():
        for cmd, label in (("set", "SET k v PX"),
                           ("take", "SLUICE.TAKE"),
                           ("multi16", "SLUICE.TAKEMULTI, 16 keys"),
                           ("many16", "SLUICE.TAKEMANY, 16 keys"),
                           ("each16", "SLUICE.TAKEEACH, 16 keys"),
                           ("script", "sluice script (EVALSHA)"),
                           ("classic", "classic hash script (EVALSHA)")):
            if cmd + "_cpu_us_per_key" not in st:
                continue
            ratio_key = {"take": "take_over_set",
                         "multi16": "multi16_over_take",
                         "many16": "many16_over_take",
                         "each16": "each16_over_take",
                         "script": "script_over_set",
                         "classic": "classic_over_set"}.get(cmd)
            rows.append([
                store, label,
                med(st.get(cmd + "_cpu_us_per_key")),
                med(st.get(ratio_key + "_cpu_us_per_key"))
                if ratio_key else "—",
                med(st.get(cmd + "_usec_per_key")),
                med(st.get(ratio_key + "_usec_per_key"))
                if ratio_key else "—"])
    out.append(table(["STORE", "command", "redis-server CPU µs per key",
                      "ratio (to SET; batches: to TAKE)",
                      "usec_per_call per key", "ratio"], rows))
    first = next(iter(mc["stores"].values()))
    if "take_over_classic_cpu_us_per_key" in first:
        out.append("\nSame client, same pipelining: redis-server CPU per "
                   "decision, `SLUICE.TAKE` / classic script **%s**, sluice "
                   "script / classic script **%s** (medians of per-run "
                   "ratios).\n" % (
                       fmt(first["take_over_classic_cpu_us_per_key"]
                           ["median"]),
                       fmt(first.get("script_over_classic_cpu_us_per_key",
                                     {}).get("median"))))
    mrows = [[store, fmt(st["module_memory"]["bytes_per_key"]),
              st["module_memory"]["encoding"],
              fmt(st["set_memory"]["bytes_per_key"]),
              fmt(st.get("floor_memory", {}).get("bytes_per_key"))]
             for store, st in mc["stores"].items()
             if "module_memory" in st]
    out.append("\n" + table(["STORE", "module bytes/key", "value encoding",
                             "SET ... PX bytes/key, same names",
                             "floor: SET ... PX, shortest decimal names"],
                            mrows))
    out.append("\nThe floor is what this Redis spends on any key holding "
               "such a value with a TTL: the keyspace entry, the key name "
               "(jemalloc rounds `sluice:%09d`'s 20 bytes up to 32, the "
               "shortest decimal names' (6 characters for 1M keys) up to "
               "16), the value (an int-encoded "
               "object, 16 bytes), the expiry entry and one slot in each "
               "hash table. The module stores what `SET` stores; only "
               "shorter key names would go lower, and key names are part "
               "of the format the script path shares.\n")
    return "\n".join(out) + "\n"


def write(results, outdir, docs):
    plots = Plots(os.path.join(outdir, "plots"), os.path.join(docs, "img"))
    m = results.get("machine", {})
    md = []
    w = md.append

    w("# Benchmarks\n")
    w("Generated by `make bench` (`bench/run`) on %s from "
      "`build/bench/results.json`; run it again to regenerate this page. "
      "Every comparison below is a ratio of figures measured in the same "
      "run on the same machine. `make bench ONLY=<section>` reruns one "
      "section (core, scaling, shared, memory, http, redis, article_ab, "
      "simulate, grpc, node, nginx); "
      "the harness is `bench/run`, the in-process figures come from "
      "`bench/bench_core.c`.\n" % m.get("date", "?"))
    if results.get("quick"):
        w("> **Smoke run (`--quick`)**: durations and key counts were cut "
          "down to check the harness. These figures are not "
          "representative; run `make bench` for the real ones.\n")

    w("## Targets\n")
    w("Each project target against this run's figure (sections below "
      "give the method and the context of each):\n")
    w(targets_table(results))

    w("\n## Machine\n")
    w(table(["", ""], [
        ["cores (nproc)", fmt(m.get("nproc"))],
        ["CPU", fmt(m.get("cpu_model"))],
        ["memory", "%s MB" % fmt(m.get("memory_mb"))],
        ["kernel", fmt(m.get("kernel"))],
        ["nginx / Redis", "%s / %s" % (fmt(m.get("nginx")),
                                       fmt(m.get("redis")))],
        ["wrk / ab", "%s / %s" % (fmt(m.get("wrk")), fmt(m.get("ab")))],
    ]))
    w("\nLoad generators and servers share these cores, so single figures "
      "move by about 30% from run to run; ratios within one run are "
      "steadier. With 2 cores, wrk alone saturates one core near 140k "
      "requests/s, which is why the HTTP section also reports the server's "
      "CPU time per request (from /proc utime + stime over the run).\n")

    core = results.get("core")
    if core:
        w("## core: the decision function\n")
        w("`sluice_eval()` alone, one thread, 1024 buckets asked about 4 "
          "times a second of simulated time each (about half the decisions "
          "allow):\n")
        w(table(["decisions/s (1 thread)"], [[fmt(core.get("dps"))]]))

    sc = results.get("scaling")
    if sc:
        w("\n## scaling: the memory store\n")
        counts = sc.get("key_counts", {})

        def spread(key):
            if sc.get(key + "_min") is None:
                return fmt(sc.get(key))
            return "%s (%s – %s)" % (fmt(sc.get(key)), fmt(sc.get(key + "_min")),
                                    fmt(sc.get(key + "_max")))
        w("`sluice_memstore_take()` (single takes) and "
          "`sluice_memstore_take_each()` over batches of 16 (independent "
          "decisions; the next keys' slots are prefetched while one is "
          "decided), random 16-byte keys, every key resident before timing "
          "starts, one thread: `sluice_bench store --keys N --rounds %s "
          "--compare-batch 16 --seconds 2`, which times both on the same "
          "store, alternating round by round; medians of the rounds, with "
          "the lowest and highest in brackets. Target: 5,000,000 "
          "decisions/s per thread at 1M and 10M keys.\n"
          % fmt(sc.get("rounds", 1)))
        rows = []
        for n in ("1k", "1m", "10m"):
            rows.append([fmt(counts.get(n, n)), fmt(sc.get("dps_" + n)),
                         spread("dps_%s_cpu" % n),
                         spread("dps_%s_batch16_cpu" % n),
                         fmt(sc.get("dps_%s_2threads" % n))])
        w(table(["keys", "single takes, decisions/s",
                 "single takes, per CPU second",
                 "batches of 16, per CPU second",
                 "2 threads, decisions/s (both)"], rows))
        w("\n\"Per CPU second\" divides the decisions by the thread's own "
          "CPU time (`CLOCK_THREAD_CPUTIME_ID`): what one core does when "
          "nothing else runs on it, steadier than decisions/s on a busy "
          "machine (the 1-minute load average was %s before this section "
          "and %s after, on %s cores).\n"
          % (fmt(sc.get("loadavg_1m_before")),
             fmt(sc.get("loadavg_1m_after")),
             fmt(results.get("machine", {}).get("nproc"))))
        w("\n### The floor of a single take\n")
        w("Timed by the same command with `--floor` (`sluice_bench store "
          "--keys N --rounds %s --compare-batch 16 --seconds 2 --floor`), "
          "in the same process between the same rounds, so under the same "
          "load; medians of the rounds, lowest and highest in brackets. "
          "\"One dependent load\": a random cycle through a region the "
          "size and layout of the table (24-byte slots, the smallest power "
          "of two of them at most 3/4 full, one mapping offered huge pages, "
          "as the table's arena), each load's address the value of the one "
          "before: the memory latency every single take pays at least once, "
          "for its bucket's slot, which at these sizes is not in a cache. "
          "\"Hash\": the memory store's hash of a 16-byte key (%s), each "
          "key made from the hash before (latency; SipHash-1-3-128 beside "
          "it). \"Lock\": a trylock and unlock of an uncontended pthread "
          "mutex, as a take takes and releases its shard's lock. "
          "\"1e9 / load\" is what single takes would reach if each waited "
          "for the one before.\n"
          % (fmt(sc.get("rounds", 1)),
             "AES-128, util/aeshash.h" if sc.get("store_hash") == "aes"
             else "SipHash-1-3-128: no AES-NI here"))
        rows = []
        for n in ("1m", "10m"):
            if sc.get("dram_ns_" + n) is None:
                continue
            rows.append([fmt(counts.get(n, n)),
                         fmt(sc.get("table_mib_" + n)),
                         spread("dram_ns_" + n),
                         fmt(sc.get("ceiling_" + n)),
                         spread("dps_%s_cpu" % n),
                         spread("hash_ns_" + n),
                         spread("siphash_ns_" + n),
                         spread("lock_ns_" + n)])
        w(table(["keys", "table (MiB)", "one dependent load (ns)",
                 "1e9 / load", "single takes, per CPU second",
                 "hash (ns)", "SipHash (ns)", "lock + unlock (ns)"], rows))
        w("\nA single take cannot start its slot's miss before its key is "
          "hashed, and the caller cannot ask for the next key before the "
          "take returns; what lets single takes pass 1e9 / load is the "
          "processor running ahead: while one take waits for its slot, it "
          "executes the instructions after it, up to a window of a few "
          "hundred, and when the next take's hash and prefetch are inside "
          "that window, that take's miss overlaps this one's. Both the "
          "instructions from one take's slot to the next take's prefetch "
          "and the latency of the chain that computes that prefetch's "
          "address count: the AES hash of a 16-byte key takes longer than "
          "SipHash (the table) but about 15 instructions instead of about "
          "130, and made single takes faster; two chained AES encryptions "
          "for a 24-byte key made them slower than SipHash, which such keys "
          "keep. A miss inside a take on another line is paid in full: the "
          "sweep of another shard every 16th take reads slots the call "
          "before now prefetches. Batches fetch the next keys' lines while "
          "one is decided, and need no such luck.\n")
        w(img(plots.grouped(
            "scaling", "Memory store decisions/s by resident keys",
            "decisions/s", ["1 thread", "2 threads"],
            [(fmt(counts.get(n, n)),
              [sc.get("dps_" + n), sc.get("dps_%s_2threads" % n)])
             for n in ("1k", "1m", "10m")]),
            "memory store scaling"))

    sh = results.get("shared")
    if sh:
        w("\n## shared: the shared-memory store\n")
        counts = sh.get("key_counts", {})
        w("`sluice_shmstore_take()` on a file in /dev/shm, next to "
          "`sluice_memstore_take()`, random 16-byte keys, every key "
          "resident, one thread per process: one memory store, one process "
          "on a shared file, and two processes at once on one file (the "
          "figure is each process's), alternated %s times; medians. "
          "Decisions per second, and per second of each process's own CPU "
          "time (two processes and the machine's other work share %s "
          "cores, so the wall-clock rate measures the scheduler as much as "
          "the store; the CPU-time rate keeps what the processes cost each "
          "other: locks and cache lines that move between cores). Load "
          "average %s before, %s after. The file's key hash: %s.\n"
          % (fmt(sh.get("rounds", 1)),
             fmt(results.get("machine", {}).get("nproc")),
             fmt(sh.get("loadavg_1m_before")),
             fmt(sh.get("loadavg_1m_after")),
             " and ".join(SHARED_HASH.get(h, h)
                          for h in sh.get("hash", ["?"]))))
        rows = []
        for n in ("1k", "1m"):
            for what, label in (("", "decisions/s"),
                                ("_cpu", "per CPU second")):
                rows.append([fmt(counts.get(n, n)), label,
                             fmt(sh.get("memory_%s%s" % (n, what))),
                             fmt(sh.get("shared_%s%s" % (n, what))),
                             fmt(sh.get("shared_%s_2procs%s" % (n, what))),
                             fmt(sh.get("ratio_%s%s" % (n, what))),
                             fmt(sh.get("ratio_%s_2procs%s" % (n, what)))])
        w(table(["keys", "", "memory store", "shared, 1 process",
                 "shared, 2 processes (each)", "1 process / memory",
                 "each of 2 / memory"], rows))

    mem = results.get("memory")
    if mem:
        w("\n## memory: bytes per key\n")
        w("Resident bytes per key with %s keys holding a non-full bucket: "
          "the memory store's RSS growth, and Redis `used_memory` growth "
          "per key (Redis keys include the TTL and the key prefix).\n"
          % fmt(mem.get("keys")))
        rows = [("sluice memory store", mem.get("memory_store")),
                ("Redis, sluice script", mem.get("redis_script")),
                ("Redis, sluice module", mem.get("redis_module")),
                ("Redis, classic hash", mem.get("classic_hash"))]
        w(table(["store", "bytes per key"], [[l, fmt(v)] for l, v in rows]))
        w(img(plots.bars("memory", "Bytes per key", "bytes", rows),
              "bytes per key"))

    http = results.get("http")
    if http:
        w("\n## http: `/v1/check` vs nginx `limit_req`\n")
        w("`wrk -t1 -c50 -d10s --latency` (keep-alive) with a Lua script "
          "that sends one of 100,000 random `x-user-id` keys per request. "
          "sluice: `sluice serve` with the default config (memory store, "
          "capacity 100, 2/s, key `x-user-id`). nginx: one process, "
          "`%s`, answering with `empty_gif` (its cheapest content handler "
          "that runs after `limit_req`). nginx's `rate` is an integer per second (2r/s is the "
          "same refill) and it admits `burst + 1` requests at once, so "
          "`burst=99` is the bucket of 100.\n"
          % http.get("nginx_limit_req", "limit_req"))
        w(table(["server", "req/s", "p50 ms", "p99 ms",
                 "server CPU µs/request"], [
            ["sluice /v1/check", fmt(http.get("sluice_rps")),
             fmt(http.get("sluice_p50_ms")), fmt(http.get("sluice_p99_ms")),
             fmt(http.get("sluice_cpu_us_per_req"))],
            ["nginx limit_req", fmt(http.get("nginx_limit_req_rps")),
             fmt(http.get("nginx_p50_ms")), fmt(http.get("nginx_p99_ms")),
             fmt(http.get("nginx_cpu_us_per_req"))]]))
        w("\nsluice / nginx req/s: **%s**. Same policy check: of 105 "
          "back-to-back requests for one key, sluice let %s through and "
          "nginx %s (100 expected, plus any token refilled meanwhile).\n"
          % (fmt(http.get("ratio")),
             fmt(http.get("sluice_one_key_allowed_of_105")),
             fmt(http.get("nginx_one_key_allowed_of_105"))))
        w(img(plots.bars("http_cpu", "Server CPU time per request",
                         "µs per request",
                         [("sluice /v1/check",
                           http.get("sluice_cpu_us_per_req")),
                          ("nginx limit_req",
                           http.get("nginx_cpu_us_per_req"))]),
              "server CPU per request"))

    rd = results.get("redis")
    if rd:
        w("\n## redis: sluice's Redis store vs the classic Lua hash bucket\n")
        w("Classic: `bench/redis_classic.lua` (HMGET, HMSET, EXPIRE on a "
          "hash, the client's clock), driven as the classic middleware "
          "drives it: `redis-benchmark -c 50 -P 1`, one EVALSHA per "
          "request over 100,000 random keys. sluice: the Redis store client "
          "(`sluice_bench redis`, %s decisions in flight pipelined on one "
          "connection, server time), through the GCRA script, and through "
          "`SLUICE.TAKE` when the module is loaded; the script is also "
          "driven exactly like the classic one, which isolates the cost of "
          "the script from the client's pipelining. Redis CPU per call is Redis's own "
          "`usec_per_call` from `INFO commandstats`.\n"
          % fmt(rd.get("sluice_inflight")))
        w("\nThe store client's runs are repeated over TLS: a `redis-server` "
          "with `--tls-port` and a certificate for 127.0.0.1 signed by a CA "
          "that the harness makes with `openssl` (EC P-256), reached as "
          "`rediss://127.0.0.1:<port>` with that CA (`sluice_bench redis "
          "--tls-ca`); the TLS handshake is done before timing starts. The "
          "last two columns are CPU time (user + system) per decision of "
          "the whole process over the run: the client's "
          "(`sluice_bench`'s own `getrusage`) and redis-server's (from "
          "/proc), which, unlike `usec_per_call`, include the reading, "
          "writing, encryption and decryption.\n")

        def row(label, dps, p99, usec, path):
            return [label, fmt(rd.get(dps)), fmt(rd.get(p99)),
                    fmt(rd.get(usec)),
                    fmt(rd.get("client_us_per_decision_" + path))
                    if path else "—",
                    fmt(rd.get("redis_us_per_decision_" + path))
                    if path else "—"]
        w(table(["path", "decisions/s", "p99 ms", "Redis µs per call",
                 "client CPU µs/decision", "Redis CPU µs/decision"], [
            row("classic hash script", "classic_dps", "classic_p99_ms",
                "usec_per_call_classic", None),
            row("sluice script", "sluice_dps", "sluice_p99_ms",
                "usec_per_call_sluice_script", "sluice_script"),
            row("sluice script, driven like the classic one",
                "sluice_script_dps_classic_driver",
                "sluice_script_p99_ms_classic_driver",
                "usec_per_call_sluice_script_classic_driver", None),
            row("sluice module", "module_dps", "module_p99_ms",
                "usec_per_call_module", "module"),
            row("sluice script, TLS", "tls_dps", "tls_p99_ms",
                "usec_per_call_sluice_tls", "sluice_tls"),
            row("sluice module, TLS", "module_tls_dps", "module_tls_p99_ms",
                "usec_per_call_module_tls", "module_tls")]))
        w("\nsluice script / classic: **%s**; module / classic: **%s**. "
          "Over TLS / plain: script **%s**, module **%s**.\n"
          % (fmt(rd.get("ratio")), fmt(rd.get("module_ratio")),
             fmt(rd.get("tls_ratio")), fmt(rd.get("module_tls_ratio"))))
        if rd.get("loadavg_1m_before") is not None:
            w("\nThe machine's 1-minute load average: %s before this "
              "section, %s after (%s cores; Redis and one client alone make "
              "about 2).\n" % (fmt(rd.get("loadavg_1m_before")),
                               fmt(rd.get("loadavg_1m_after")),
                               fmt(os.cpu_count())))
        w("\n" + tls_costs(rd))
        w(batching_section(rd.get("module_batching")))
        w(module_cost_section(rd.get("module_cost")))
        w(img(plots.bars("redis", "Decisions per second through Redis",
                         "decisions/s",
                         [("classic hash script", rd.get("classic_dps")),
                          ("sluice script", rd.get("sluice_dps")),
                          ("sluice module", rd.get("module_dps")),
                          ("script, TLS", rd.get("tls_dps")),
                          ("module, TLS", rd.get("module_tls_dps"))]),
              "Redis decisions per second"))

    ab = results.get("article_ab")
    if ab:
        w("\n## article_ab: the classic `ab` check\n")
        w("`ab -n 1000 -c 200 -H \"x-user-id: test-user\"` against nginx "
          "configured as in `examples/nginx/nginx.conf.in`: it asks "
          "`sluice serve` through `auth_request` "
          "(`/v1/check?deny_status=403`, mapped to 429 by `error_page`) and "
          "proxies allowed requests to an app (here a static nginx). "
          "One user's bucket starts full (100) and refills 2/s while ab "
          "runs, so between %s and %s requests may pass.\n"
          % (fmt(ab.get("expected_allowed_min")),
             fmt(ab.get("expected_allowed_max"))))
        ok = None
        if None not in (ab.get("allowed"), ab.get("expected_allowed_max")):
            ok = (ab["expected_allowed_min"] <= ab["allowed"] <=
                  ab["expected_allowed_max"])
        w(table(["allowed (200)", "limited (429)", "other", "duration s",
                 "p99 ms", "within expected range"], [
            [fmt(ab.get("allowed")), fmt(ab.get("limited")),
             fmt(ab.get("other_status")), fmt(ab.get("duration_s")),
             fmt(ab.get("p99_ms")), fmt(ok)]]))

    sim = results.get("simulate")
    if sim and sim.get("policies"):
        w("\n## simulate: who gets a 429\n")
        w("`sluice simulate --seed %s` (%s s of generated traffic, %s "
          "requests; see docs/SIMULATE.md): mobile apps that fire 12 "
          "requests on open and refresh 3 times a minute, a user with a web "
          "and a mobile client on one IP, a campus behind one NAT address, "
          "and abusers at 18,000 requests a minute. Keyed by `x-user-id`, "
          "else the client IP.\n"
          % (sim.get("seed"), fmt(sim.get("duration_s")),
             fmt(sim.get("requests"))))
        rows = []
        for p in sim["policies"]:
            rows.append([p["description"], pct(p["false_429_rate"]),
                         fmt(p["legit_rejected"]),
                         pct(p["abuse_blocked_share"]), fmt(p["spike_2s"])])
        w(table(["policy", "false 429 (legitimate)", "legitimate 429s",
                 "abusive blocked", "most passed by one key in 2 s"], rows))
        w(img(plots.grouped(
            "sim_rates", "Legitimate requests rejected, by client class",
            "% rejected", [c for c in sim["requests_by_class"]
                           if c != "abuser"],
            [(p["description"],
              [round(100.0 * p["rejected_by_class"][c] /
                     max(sim["requests_by_class"][c], 1), 2)
               for c in sim["requests_by_class"] if c != "abuser"])
             for p in sim["policies"]]), "false 429s by class"))
        side = os.path.join(outdir, "simulate.json")
        if os.path.exists(side):
            with open(side) as f:
                full = json.load(f)
            series = []
            for p in full["policies"]:
                if p["name"] in ("fixed_window", "sliding_log",
                                 "sluice_token_bucket"):
                    pts = list(enumerate(p["abuse_passed_per_s"][:300]))
                    series.append((p["description"], pts))
            w(img(plots.lines(
                "sim_timeline", "Abusive requests let through, per second "
                "(first 300 s)", "simulated second", "requests passed",
                series), "abusive requests passed per second"))
            w("\nA fixed window lets a client that waits for the window to "
              "turn pass its whole limit twice within a second or two (the "
              "boundary spike); the token bucket never passes more than "
              "its capacity plus 2/s times the span.\n")

    node = results.get("node")
    if node:
        node_section(w, plots, node)

    gr = results.get("grpc")
    if gr:
        grpc_section(w, gr, m.get("nproc"))

    ng = results.get("nginx")
    if ng:
        nginx_section(w, ng, m.get("nproc"))

    missing = []
    for name in SECTIONS:
        for k, why in sorted(results.get(name, {}).get("reasons", {}).items()):
            missing.append("- `%s.%s`: %s" % (name, k, why))
    if missing:
        w("\n## Missing figures\n")
        w("These keys are null in results.json:\n")
        w("\n".join(missing) + "\n")
    if not plots.ok:
        w("\n(gnuplot is not installed: no plots.)\n")

    page = os.path.join(docs, "BENCHMARKS.md")
    text = "\n".join(md)
    if os.path.exists(page):
        with open(page) as f:
            text = keep_unmeasured(text, f.read(), results)
    with open(page, "w") as f:
        f.write(text)


# --------------------------------------------- sections not rerun this time

# How the shared section names the file's key hash (bench_core.c's
# shared_hash).
SHARED_HASH = {
    "aes": "AES-128, as the memory store's (one encryption per 16-byte key, "
           "util/aeshash.h; the file's creator had AES-NI)",
    "siphash": "SipHash-1-3-128 (the file's creator had no AES-NI)",
    "?": "not recorded (a run before the file kept its hash)",
}

# node_floor and node_timeout are measured by hand (bench/node/floor.py,
# answer_latency.js), never by bench/run: the page keeps them as they are.
SECTIONS = ("core", "scaling", "shared", "memory", "http", "redis",
            "article_ab", "simulate", "node", "node_floor", "node_timeout",
            "grpc", "nginx")


def blocks(text):
    """A page cut at its `## ` headings: (preamble, {name: block}), the
    name being the heading up to its colon (`## core: ...` -> core)."""
    parts = re.split(r"(?m)^(?=## )", text)
    named = {}
    for b in parts[1:]:
        named[b.split("\n", 1)[0][3:].split(":")[0].strip()] = b
    return parts[0], named


def keep_unmeasured(new, old, results):
    """`make bench ONLY=x` on a machine without the earlier results.json
    measures one section: the sections it did not run keep their text, their
    target rows and their missing-figure lines from the page already there,
    instead of vanishing."""
    kept = [s for s in SECTIONS if s not in results]
    pre, nb = blocks(new)
    old_pre, ob = blocks(old)
    kept = [s for s in kept if s in ob]
    if not kept:
        return new
    # When each kept section was measured: the old page's date, or the
    # date its own "not rerun" note gave that section.
    date = re.search(r"\) on (.+?) from", old_pre)
    when = {}
    note = re.search(r"^Not rerun this time.*$", old_pre, re.M)
    for names, d in re.findall(r"([a-z_, ]+) \(measured ([^)]+)\)",
                               note.group(0) if note else ""):
        for n in names.split(","):
            when[n.strip()] = d
    groups = {}
    for name in kept:
        d = when.get(name, date.group(1) if date else "earlier")
        groups.setdefault(d, []).append(name)
    pre = pre.rstrip("\n") + "\n\nNot rerun this time, kept as the page " \
        "had them: %s.\n\n" % "; ".join(
            "%s (measured %s)" % (", ".join(v), d) for d, v in groups.items())
    # Target rows of kept sections: the old row, matched by its first cell.
    old_rows = {l.split("|")[1].strip(): l for l in
                ob.get("Targets", "").splitlines() if l.startswith("| ")}
    rows = []
    for line in nb["Targets"].splitlines():
        what = line.split("|")[1].strip() if line.startswith("| ") else None
        sec = [t[1] for t in TARGETS if t[0] == what]
        if sec and sec[0] in kept and what in old_rows:
            line = old_rows[what]
        rows.append(line)
    out = [pre, "\n".join(rows) + "\n", nb["Machine"]]
    for name in SECTIONS:
        b = nb.get(name) if name not in kept else ob.get(name)
        if b:
            # The page's last block has no blank lines after it.
            out.append(b if b.endswith("\n\n") else b.rstrip("\n") +
                       "\n\n\n")
    missing = [l for l in nb.get("Missing figures", "").splitlines()
               if l.startswith("- `")]
    missing += [l for l in ob.get("Missing figures", "").splitlines()
                if l.startswith("- `") and l[3:].split(".")[0] in kept]
    if missing:
        out.append("## Missing figures\n\nThese keys are null in "
                   "results.json:\n\n" + "\n".join(missing) + "\n")
    tail = nb.get("Missing figures", "").split("\n\n(gnuplot", 1)
    if len(tail) == 2:
        out.append("\n(gnuplot" + tail[1])
    return "".join(out)
