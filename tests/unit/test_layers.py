"""test_layers.py -- the folders of src/ depend on each other one way, and
no file of the tree reaches itself back.

From every #include "..." of src/, include/, the Node addon
(bindings/node/src), tests/ and bench/: each folder of src/ includes only
the folders the table LAYERS allows it (docs/ARCHITECTURE.md draws the
same table), the addon only what HOSTS allows it, nothing of src/ or
include/ includes a file outside them, and no file reaches itself by
includes.  No JavaScript file (bindings/node, tests/, bench/) reaches
itself by require() or import but in the rings KNOWN_REQUIRE_RINGS lists,
nor a Python module (tests/, bench/) by import.

From the objects of a build (SLUICE_BUILD; `nm` says which file defines
and which uses each symbol): no file of a folder calls itself back through
other files of that folder (no call ring) but in the rings
KNOWN_CALL_RINGS lists.  A call through a hook -- a struct's function
pointer, `r->wake_retry(r)` -- is invisible to nm, so the sources add it:
a file that stores its function in a field (`r->wake_retry = fn;`, `.take
= fn,` in an ops table) is called by each file that calls through that
field (`->wake_retry(`), when both mean the same struct's member; but the
UPCALLS, hooks that carry news up by design.  A callback handed over as
an argument is not seen.  SLUICE_BUILD unset (a standalone run), those
checks are skipped, saying so; CTest always sets it, and a build without
its objects fails.

No source file (C, JavaScript, TypeScript, Python, Lua, shell) is longer
than MAX_LINES for its kind, but those OVER_LONG caps at their length.

A file's folder is its first directory below src/ (src/store/redis/x.c
is in "store").  An include names a file below src/ ("policy/rules.h"),
beside the includer, or in include/ ("sluice.h"); anything else is a
system or generated header (protobuf-c's, script_lua.h), not ours.
Vendored and generated trees (bindings/node/deps, build output, fuzzing
corpora) are not read.  The readers of the tree and the build are in
layers_graph.py; the tables and the checks are here.  Run by CTest as
unit/test_layers; SLUICE_SRC names the tree (default: two folders up).
"""
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_ROOT = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
from layers_graph import (  # noqa: E402 (the readers, beside this file)
    PUBLIC, call_graph, call_rings_inside_folders, closure, folder,
    folder_rings, hook_edges, import_graph, include_graph, include_rings,
    line_counts, nm_symbols, object_files, read, require_graph, show,
    texts_of, top, unknown, with_hooks)

# Which folders each folder may include (besides itself and "include",
# the public headers).  A new folder needs a row; a new arrow is a
# design decision, so it is written here, not inferred.
LAYERS = {
    # front ends
    "cli": {"serve", "sim", "policy", "store", "core", "util"},
    # `sluice serve`: the HTTP front end, and the process that also
    # hosts the gRPC front end on its loop threads (server.c)
    "serve": {"grpc", "xds", "policy", "store", "core", "util"},
    # the xDS client `sluice serve` runs for envoy.xds (its own thread)
    "xds": {"policy", "util"},
    "grpc": {"policy", "store", "core", "util"},
    "sim": {"policy", "store", "core", "util"},
    # ngx_http_sluice_module inside nginx: the stores through their
    # driver interface, and the policy engine (sluice_config, headers)
    "nginx": {"policy", "store", "core", "util"},
    # the engine every front end drives: config (and its Envoy dialect),
    # rules, the verdict engine
    "policy": {"store", "core", "util"},
    # the stores: memory, shared memory, Redis (store/redis)
    "store": {"core", "util"},
    # the Redis module: the core's decision inside redis-server
    "redis_module": {"core", "util"},
    "core": {"util"},
    "util": set(),
}

# The public headers (include/, PUBLIC) may include each other only.

# C outside src/ that the library's package compiles, and which folders
# of src/ it may include (tests/ and bench/ may include any).
HOSTS = {
    # the Node addon: a host of the stores, as `sluice serve` is, and
    # glue only -- never the policy engine or a front end
    os.path.join("bindings", "node", "src"): {"store", "core", "util"},
}

# Call rings inside a folder that exist and are known (each a set of
# files calling each other); a ring found must lie inside one of these.
# None is left but those UPCALLS close: a new ring fails the test.
KNOWN_CALL_RINGS = []

# Hooks that call up by design, as (caller, field): news for the file
# that registered the hook, which calls down into the caller.  Such a
# call closes a ring, so the call graph leaves it out; any other hook is
# a call like the others.
UPCALLS = {
    # The HTTP code tells the transport that gave it the bytes (tcp.c)
    # that a request began, an answer waits or a connection may go
    # (c->io, sluice_conn_io_t).
    ("src/serve/http_conn.c", "begin"),
    ("src/serve/http_resp.c", "release"),
    ("src/serve/http_resp.c", "wake"),
    # The Redis client's news travels up through hooks (redis_int.h): a
    # closed handle, a node refusing calls and a lost slot map refresh
    # to client.c and call.c, a connection up or failed to the topology
    # (cluster.c, sentinel.c).
    ("src/store/redis/link.c", "released"),
    ("src/store/redis/sentinel.c", "released"),
    ("src/store/redis/node.c", "probe_calls"),
    ("src/store/redis/cluster.c", "wake_retry"),
    ("src/store/redis/node.c", "on_conn_up"),
    ("src/store/redis/node.c", "on_conn_failed"),
}

# require() rings that are known, each with its reason.
KNOWN_REQUIRE_RINGS = [
    # npm's install script, the package's only one, asks prepack.js to
    # collect the sources when it runs in a checkout, by a lazy require():
    # prepack.js is not in the package.
    {"bindings/node/scripts/build.js", "bindings/node/scripts/prepack.js"},
]

# The longest a source file may be, by kind.  A file past ~800 lines is
# usually two, whatever its language (a test file too: it is two
# specifications); data (corpora, .tsv, .json) has no limit.
MAX_LINES = {"C": 800, "JavaScript": 800, "TypeScript": 800,
             "Python": 800, "Lua": 800, "shell": 800}

# Files that were past their limit when the check reached tests/ and
# bench/, each capped at its length then: it may shrink, never grow, and
# its row goes when a split by concern brings it under the limit.
# src/ and include/ have none.
OVER_LONG = {
    "bench/run": 1916,
    "bench/report.py": 1373,
    "bench/bench_core.c": 996,
    "tests/integration/harness.py": 967,
    "tests/integration/test_redis_module.py": 1091,
    "tests/soak/soak.py": 878,
    "tests/unit/test_redis_quota.c": 863,
}

def too_long(counts, over=OVER_LONG):
    """'path: n lines (kind limit m)' for each file past its limit or
    its cap, and each row of over that is stale."""
    bad = []
    for f, (k, n) in sorted(counts.items()):
        cap = max(MAX_LINES[k], over.get(f, 0))
        if n > cap:
            bad.append("%s: %d lines (%s limit %d%s)" %
                       (f, n, k, MAX_LINES[k],
                        ", capped at %d" % cap if f in over else ""))
    for f, cap in sorted(over.items()):
        if f not in counts:
            bad.append("%s: in OVER_LONG, but gone: remove its row" % f)
        elif counts[f][1] <= MAX_LINES[counts[f][0]]:
            bad.append("%s: %d lines, within its limit: remove its row "
                       "from OVER_LONG" % (f, counts[f][1]))
    return bad


def host(path):
    """The row of HOSTS a file outside src/ belongs to, or None."""
    for h in HOSTS:
        if path.startswith(h + os.sep):
            return h
    return None


def layer_violations(graph):
    """'file:line: folder includes folder (header)' for each arrow the
    tables do not allow."""
    bad = []
    for f, edges in sorted(graph.items()):
        src = folder(f)
        for target, line in edges:
            dst = folder(target)
            if dst == src:
                continue
            if top(f) == "src" and src not in LAYERS:
                bad.append("%s:%d: folder src/%s has no row in LAYERS" %
                           (f, line, src))
            elif top(f) in ("src", PUBLIC) and top(target) not in (
                    "src", PUBLIC):
                bad.append("%s:%d: includes %s, outside src/ and "
                           "include/" % (f, line, target))
            elif src == PUBLIC:
                bad.append("%s:%d: a public header includes %s" %
                           (f, line, target))
            elif top(f) == "src" and dst != PUBLIC and dst not in LAYERS[src]:
                bad.append("%s:%d: %s includes %s (%s)" %
                           (f, line, src, dst, target))
            elif (host(f) and top(target) == "src" and
                  dst not in HOSTS[host(f)]):
                bad.append("%s:%d: %s includes %s (%s)" %
                           (f, line, host(f), dst, target))
    return bad


def archive_sources(lib):
    """The source path (src/...) of each object in a static archive, read
    from its DWARF compile unit: member names are only base names, and
    policy/config/store.c and store/store.c both make a store.c.o."""
    out = subprocess.run(["readelf", "--debug-dump=info", "--dwarf-depth=1",
                          lib], capture_output=True, text=True,
                         check=True).stdout
    members = len(subprocess.run(["ar", "t", lib], capture_output=True,
                                 text=True, check=True).stdout.split())
    names = re.findall(r"DW_TAG_compile_unit.*?DW_AT_name\s*:[^\n]*?"
                       r"((?:^|[\s/])src/\S+\.c)\s*$", out, re.S | re.M)
    paths = [n[n.index("src/"):] for n in names]
    if len(paths) != members:
        raise AssertionError("%s: %d members, %d compile units named (a "
                             "build without -g cannot be checked)"
                             % (lib, members, len(paths)))
    return paths


def build_dir(test):
    """SLUICE_BUILD: unset, the test is skipped (a standalone run, said
    so); set, it must hold a build (CTest sets it: there a missing or
    empty build fails)."""
    if "SLUICE_BUILD" not in os.environ:
        test.skipTest("SLUICE_BUILD is not set: a standalone run does not "
                      "read a build's objects (CTest sets it)")
    build = os.environ["SLUICE_BUILD"]
    if not build or not os.path.isdir(build):
        test.fail("SLUICE_BUILD=%r is not a build directory" % build)
    return build


class Layers(unittest.TestCase):
    def setUp(self):
        self.graph = include_graph(SRC_ROOT)
        self.assertGreater(len(self.graph), 100, "src/ not found at " +
                           SRC_ROOT)

    def test_the_table_itself_is_one_way(self):
        g = {a: [(b, 0) for b in sorted(bs)] for a, bs in LAYERS.items()}
        self.assertEqual(include_rings(g), [])

    def test_every_folder_has_a_row(self):
        folders = {folder(f) for f in self.graph if top(f) == "src"}
        self.assertEqual(sorted(folders - set(LAYERS)), [])

    def test_each_folder_includes_only_what_the_table_allows(self):
        bad = layer_violations(self.graph)
        self.assertEqual(bad, [], "\n" + "\n".join(bad))

    def test_no_folder_ring(self):
        self.assertEqual(folder_rings(self.graph), [])

    def test_no_file_includes_itself_through_others(self):
        # src/, include/, the Node addon, tests/ and bench/ alike.
        self.assertIn(os.path.join("bindings", "node", "src", "addon.c"),
                      self.graph)
        rings = include_rings(self.graph)
        self.assertEqual(rings, [], show(rings))

    def test_no_javascript_file_requires_itself_through_others(self):
        texts = texts_of(SRC_ROOT, "JavaScript")
        self.assertIn(os.path.join("bindings", "node", "index.js"), texts)
        new = unknown(include_rings(require_graph(texts)),
                      KNOWN_REQUIRE_RINGS)
        self.assertEqual(new, [], show(new))

    def test_no_python_module_imports_itself_through_others(self):
        texts = texts_of(SRC_ROOT, "Python", ("tests", "bench"))
        self.assertIn(os.path.join("tests", "integration", "harness.py"),
                      texts)
        rings = include_rings(import_graph(texts))
        self.assertEqual(rings, [], show(rings))

    def test_no_call_ring_inside_a_folder_but_the_known(self):
        build = build_dir(self)
        objs = object_files(build, SRC_ROOT)
        self.assertIn("src/policy/verdict.c", objs,
                      "no objects of src/ under %s: build it first "
                      "(cmake --build)" % build)
        defs, uses, funcs = nm_symbols(objs)
        texts = {f: read(SRC_ROOT, f) for f in self.graph
                 if top(f) in ("src", PUBLIC)}
        hooks = hook_edges(texts, funcs, defs, closure(self.graph))
        self.assertTrue(hooks, "no call through a hook found in src/")
        calls = call_graph(defs, uses)
        new = unknown(call_rings_inside_folders(
            with_hooks(calls, hooks, UPCALLS)), KNOWN_CALL_RINGS)
        self.assertEqual(new, [], show(new, hooks, UPCALLS))
        # Each upcall listed still closes a ring: else its row goes.
        stale = [u for u in sorted(UPCALLS) if not call_rings_inside_folders(
            with_hooks(calls, hooks, UPCALLS - {u}))]
        self.assertEqual(stale, [], "UPCALLS rows that close no ring")

    def test_the_policy_engine_library_holds_no_front_end(self):
        # libsluice_policy.a is what every front end links (serve, the
        # simulator, the nginx module): it holds the engine and what lies
        # below it, never a front end's object.
        lib = os.path.join(build_dir(self), "libsluice_policy.a")
        self.assertTrue(os.path.exists(lib), lib + " was not built")
        members = archive_sources(lib)
        self.assertIn("src/policy/verdict.c", members)
        below = {"policy", "store", "core", "util"}
        wrong = sorted(m for m in members if folder(m) not in below)
        self.assertEqual(wrong, [], "front-end objects in " + lib)

    def test_no_source_file_is_past_its_limit(self):
        # Issue 19: a file past its limit is split by concern (the bucket
        # table into buckets_*.c, the shared-memory store into shm.c and
        # shm_file.c), so that its name says what it holds.
        counts = line_counts(SRC_ROOT)
        for f in ("src/policy/verdict.c", "bindings/node/index.js",
                  "bindings/node/src/addon.c", "tests/unit/check.h",
                  "bench/run", "tests/integration/harness.py"):
            self.assertIn(f, counts)
        long = too_long(counts)
        self.assertEqual(long, [], "\n" + "\n".join(long))


def plain_asserts(root):
    """file:line of every assert() call in src/ (an invariant there is
    SLUICE_ASSERT(), src/util/invariant.h); comment lines are skipped."""
    bad = []
    for d, _, names in os.walk(os.path.join(root, "src")):
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            path = os.path.join(d, n)
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    code = line.split("//")[0].split("/*")[0]
                    if code.lstrip().startswith("*"):
                        continue
                    if re.search(r"(?<![A-Za-z_])assert\s*\(", code):
                        bad.append("%s:%d" % (os.path.relpath(path, root), i))
    return bad


class Invariants(unittest.TestCase):
    def test_no_plain_assert_in_src(self):
        # assert() is off wherever NDEBUG is (a sanitized Release) and on
        # in the nginx module's build: SLUICE_ASSERT() is on and off by one
        # rule everywhere.
        bad = plain_asserts(SRC_ROOT)
        self.assertEqual(bad, [], "\n" + "\n".join(bad))


class Checker(unittest.TestCase):
    """The checks can fail: made-up trees with each fault."""

    def test_the_checker_sees_a_plain_assert(self):
        import tempfile
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "src", "core"))
            with open(os.path.join(root, "src", "core", "a.c"), "w") as f:
                f.write("int f(int x)\n{\n\tSLUICE_ASSERT(x);\n"
                        "\t/* assert(x) in a comment */\n"
                        "\t * assert(x), a comment's line\n"
                        "\tassert(x > 0);\n\treturn x;\n}\n")
            self.assertEqual(plain_asserts(root), ["src/core/a.c:6"])

    def test_the_checker_sees_a_ring_and_a_wrong_arrow(self):
        g = {
            "src/core/a.h": [("src/core/b.h", 3)],
            "src/core/b.h": [("src/core/a.h", 4)],
            "src/store/s.c": [("src/policy/p.h", 7)],
            "src/policy/p.h": [("tests/unit/check.h", 2)],
            "bindings/node/src/x.c": [("src/policy/p.h", 5)],
            "tests/unit/check.h": [],
        }
        self.assertEqual(include_rings(g), [["src/core/a.h", "src/core/b.h"]])
        self.assertEqual(layer_violations(g), [
            "bindings/node/src/x.c:5: bindings/node/src includes policy "
            "(src/policy/p.h)",
            "src/policy/p.h:2: includes tests/unit/check.h, outside src/ "
            "and include/",
            "src/store/s.c:7: store includes policy (src/policy/p.h)"])
        # A call ring inside a folder is one; the same arrows across two
        # folders are the layering's business, not a ring inside one.
        calls = {
            "src/grpc/a.c": [("src/grpc/b.c", 0)],
            "src/grpc/b.c": [("src/grpc/a.c", 0), ("src/util/u.c", 0)],
            "src/util/u.c": [("src/grpc/b.c", 0)],
        }
        self.assertEqual(call_rings_inside_folders(calls),
                         [["src/grpc/a.c", "src/grpc/b.c"]])

    def test_the_checker_sees_require_and_import_rings(self):
        js = {"bindings/node/index.js": "const a = require('./lib/a');",
              "bindings/node/lib/a.js": "const {b} =\n  require('./b.js');",
              "bindings/node/lib/b.js": "import x from '../index.js';",
              "bindings/node/lib/c.js": "require('node:fs'); require('..')"}
        self.assertEqual(include_rings(require_graph(js)), [[
            "bindings/node/index.js", "bindings/node/lib/a.js",
            "bindings/node/lib/b.js"]])
        self.assertEqual(require_graph(js)["bindings/node/lib/c.js"],
                         [("bindings/node/index.js", 1)])
        py = {"tests/integration/harness.py": "import os\nimport grpc_h\n",
              "tests/integration/grpc_h.py": "from harness import Sluice\n",
              "tests/fuzz/seeds.py": "'''import harness'''\nimport grpc_h\n",
              "bench/harness.py": "import json\n"}
        self.assertEqual(include_rings(import_graph(py)), [[
            "tests/integration/grpc_h.py", "tests/integration/harness.py"]])
        self.assertEqual(import_graph(py)["tests/fuzz/seeds.py"],
                         [("tests/integration/grpc_h.py", 2)])

    def test_the_checker_sees_an_over_long_file(self):
        counts = {"src/core/a.c": ("C", 801), "bench/run": ("Python", 900),
                  "tests/x.py": ("Python", 950), "tests/y.js": ("JavaScript",
                                                                700)}
        over = {"bench/run": 900, "tests/x.py": 940, "tests/y.js": 900,
                "tests/gone.c": 1000}
        self.assertEqual(too_long(counts, over), [
            "src/core/a.c: 801 lines (C limit 800)",
            "tests/x.py: 950 lines (Python limit 800, capped at 940)",
            "tests/gone.c: in OVER_LONG, but gone: remove its row",
            "tests/y.js: 700 lines, within its limit: remove its row "
            "from OVER_LONG"])

    def test_the_checker_sees_a_ring_through_a_hook(self):
        # call.c calls cluster.c directly; cluster.c calls call.c back
        # through r->wake_retry, which call.c sets: nm sees one arrow.
        hdr, call, cluster, node = ("src/store/redis/int.h",
                                    "src/store/redis/call.c",
                                    "src/store/redis/cluster.c",
                                    "src/store/redis/node.c")
        texts = {
            call: "static void wake(sluice_redis_t *r) {}\n"
                  "void open(sluice_redis_t *r) { r->wake_retry = wake; }",
            cluster: "void moved(sluice_redis_t *r) { r->wake_retry(r); }",
            # a field of the same name in a struct of its own is another
            # field: no arrow to call.c
            node: "struct own { void (*wake_retry)(int); } o;\n"
                  "void f(void) { o.wake_retry(1); /* r->wake_retry( */ }",
        }
        sees = {call: {call, hdr}, cluster: {cluster, hdr}, node: {node, hdr},
                hdr: {hdr}}
        texts_h = dict(texts)
        texts_h[hdr] = "struct r { void (*wake_retry)(sluice_redis_t *); };"
        funcs = {call: {"wake", "open"}, cluster: {"moved"}, node: {"f"}}
        graph = {call: [(cluster, 0)], cluster: [], node: []}
        self.assertEqual(call_rings_inside_folders(graph), [])
        hooks = hook_edges(texts_h, funcs, {"open": call, "moved": cluster},
                           sees)
        self.assertEqual(hooks, {cluster: {call: {"wake_retry"}}})
        rings = call_rings_inside_folders(with_hooks(graph, hooks))
        self.assertEqual(rings, [[call, cluster]])
        self.assertEqual(unknown(rings, [{call, cluster, node}]), [])
        self.assertEqual(unknown(rings, []), [[call, cluster]])
        self.assertIn("through ->wake_retry", show(rings, hooks))
        # Known as an upcall, it closes no ring; another field would.
        self.assertEqual(call_rings_inside_folders(
            with_hooks(graph, hooks, {(cluster, "wake_retry")})), [])
        self.assertEqual(call_rings_inside_folders(
            with_hooks(graph, hooks, {(cluster, "other")})), [[call, cluster]])


if __name__ == "__main__":
    unittest.main(verbosity=2)
