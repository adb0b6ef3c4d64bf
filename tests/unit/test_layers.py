"""test_layers.py -- the folders of src/ depend on each other one way.

Reads every #include "..." under src/ and include/ and checks two things:

  * each folder includes only the folders the table LAYERS allows it
    (docs/ARCHITECTURE.md draws the same table): front ends on the policy
    engine, the policy engine on the stores, the stores on the core, and
    everything on util and the public headers (include/);
  * no file reaches itself by includes (no include ring, inside a folder
    or across folders).

And, from the objects of a build (SLUICE_BUILD, as CTest sets it; `nm`
says which file defines and which uses each symbol), that no file of a
folder calls itself back through other files of that folder (no call
ring), apart from the rings KNOWN_CALL_RINGS lists: those are known work,
and a ring that is not on the list, or grows past it, fails.

And that no file there is longer than MAX_LINES (800) lines.

A file's folder is its first directory below src/ (src/store/redis/x.c
is in "store").  An include names a file below src/ ("policy/rules.h"),
beside the includer, or in include/ ("sluice.h"); anything else is a
system or generated header (protobuf-c's, script_lua.h) and is not ours.

Run by CTest as unit/test_layers; SLUICE_SRC names the tree (default:
two folders up).
"""
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_ROOT = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))

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

# The public headers (include/) may include each other only.
PUBLIC = "include"

# Call rings inside a folder that exist and are known (each a set of
# files calling each other); a ring found must lie inside one of these.
# None is left: a new ring fails the test.
KNOWN_CALL_RINGS = []

# The longest a file of src/ or include/ may be (issue 19).
MAX_LINES = 800

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def sources(root):
    """Every .c and .h below src/ and include/, as paths from root."""
    out = []
    for top in ("src", PUBLIC):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def folder(path):
    parts = path.split(os.sep)
    return PUBLIC if parts[0] == PUBLIC else parts[1]


def resolve(root, includer, name, known):
    """The file an include names (a path from root), or None."""
    for cand in (os.path.join("src", name),
                 os.path.join(os.path.dirname(includer), name),
                 os.path.join(PUBLIC, name)):
        cand = os.path.normpath(cand)
        if cand in known:
            return cand
    return None


def include_graph(root):
    """{file: [(included file, line number), ...]} for our own headers."""
    files = sources(root)
    known = set(files)
    graph = {}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8",
                  errors="replace") as fh:
            text = fh.read()
        edges = []
        for m in INCLUDE_RE.finditer(text):
            target = resolve(root, f, m.group(1), known)
            if target:
                edges.append((target, text.count("\n", 0, m.start()) + 1))
        graph[f] = edges
    return graph


def layer_violations(graph):
    """'file:line: folder includes folder (header)' for each arrow the
    table does not allow."""
    bad = []
    for f, edges in sorted(graph.items()):
        src = folder(f)
        for target, line in edges:
            dst = folder(target)
            if dst == src:
                continue
            if src == PUBLIC:
                bad.append("%s:%d: a public header includes %s" %
                           (f, line, target))
            elif src not in LAYERS:
                bad.append("%s:%d: folder src/%s has no row in LAYERS" %
                           (f, line, src))
            elif dst != PUBLIC and dst not in LAYERS[src]:
                bad.append("%s:%d: %s includes %s (%s)" %
                           (f, line, src, dst, target))
    return bad


def include_rings(graph):
    """Each set of files that reach each other by includes (Tarjan's
    strongly connected components of more than one file, or a file that
    includes itself), as sorted lists."""
    index, low, stack, on, rings = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        # Iterative, so a deep include chain cannot hit the recursion limit.
        work = [(v, iter(graph.get(v, ())))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w, _ in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph.get(w, ()))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                selfloop = any(t == node for t, _ in graph.get(node, ()))
                if len(comp) > 1 or selfloop:
                    rings.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return rings


def folder_rings(graph):
    """Folders that reach each other through includes."""
    fgraph = {}
    for f, edges in graph.items():
        for target, line in edges:
            if folder(target) != folder(f):
                fgraph.setdefault(folder(f), {}).setdefault(
                    folder(target), (f, line))
    g = {a: [(b, 0) for b in sorted(bs)] for a, bs in fgraph.items()}
    return include_rings(g)


def object_files(build):
    """{source path from the tree's root: object file} for every object of
    the build whose source is below src/ and still exists."""
    objs = {}
    for d, _, files in os.walk(build):
        for f in sorted(files):
            if not f.endswith(".c.o") or ".dir" + os.sep not in d + os.sep:
                continue
            path = os.path.join(d, f)
            rel = path.split(".dir" + os.sep, 1)[1][:-2]
            if (rel.startswith("src" + os.sep) and rel not in objs and
                    os.path.exists(os.path.join(SRC_ROOT, rel))):
                objs[rel] = path
    return objs


def call_graph(objs):
    """{file: [(file it calls or reads a symbol of, 0), ...]}."""
    defs, uses = {}, {}
    for src, obj in sorted(objs.items()):
        out = subprocess.run(["nm", obj], capture_output=True, text=True,
                             check=True).stdout
        uses[src] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRC":
                defs.setdefault(parts[2], src)
            elif len(parts) == 2 and parts[0] == "U":
                uses[src].add(parts[1])
    graph = {}
    for src, names in uses.items():
        targets = {defs[n] for n in names if n in defs} - {src}
        graph[src] = [(t, 0) for t in sorted(targets)]
    return graph


def call_rings_inside_folders(graph):
    """The call rings among the files of each folder."""
    inside = {f: [(t, 0) for t, _ in edges if folder(t) == folder(f)]
              for f, edges in graph.items()}
    return include_rings(inside)


class Layers(unittest.TestCase):
    def setUp(self):
        self.graph = include_graph(SRC_ROOT)
        self.assertGreater(len(self.graph), 100, "src/ not found at " +
                           SRC_ROOT)

    def test_the_table_itself_is_one_way(self):
        g = {a: [(b, 0) for b in sorted(bs)] for a, bs in LAYERS.items()}
        self.assertEqual(include_rings(g), [])

    def test_every_folder_has_a_row(self):
        folders = {folder(f) for f in self.graph} - {PUBLIC}
        self.assertEqual(sorted(folders - set(LAYERS)), [])

    def test_each_folder_includes_only_what_the_table_allows(self):
        bad = layer_violations(self.graph)
        self.assertEqual(bad, [], "\n" + "\n".join(bad))

    def test_no_folder_ring(self):
        self.assertEqual(folder_rings(self.graph), [])

    def test_no_file_includes_itself_through_others(self):
        rings = include_rings(self.graph)
        self.assertEqual(rings, [], "\n" + "\n".join(" -> ".join(r)
                                                      for r in rings))

    def test_no_call_ring_inside_a_folder_but_the_known(self):
        build = os.environ.get("SLUICE_BUILD")
        if not build:
            self.skipTest("SLUICE_BUILD is not set (CTest sets it)")
        objs = object_files(build)
        self.assertIn("src/policy/verdict.c", objs,
                      "no objects of src/ under " + build)
        new = [r for r in call_rings_inside_folders(call_graph(objs))
               if not any(set(r) <= k for k in KNOWN_CALL_RINGS)]
        self.assertEqual(new, [], "\n" + "\n".join(" <-> ".join(r)
                                                      for r in new))

    def test_the_policy_engine_library_holds_no_front_end(self):
        # libsluice_policy.a is what every front end links (serve, the
        # simulator, the nginx module): it holds the engine and what lies
        # below it, never a front end's object.
        build = os.environ.get("SLUICE_BUILD")
        if not build:
            self.skipTest("SLUICE_BUILD is not set (CTest sets it)")
        lib = os.path.join(build, "libsluice_policy.a")
        self.assertTrue(os.path.exists(lib), lib + " was not built")
        members = subprocess.run(["ar", "t", lib], capture_output=True,
                                 text=True, check=True).stdout.split()
        self.assertIn("verdict.c.o", members)
        below = {"policy", "store", "core", "util"}
        sources_by_name = {}
        for f in self.graph:
            if f.endswith(".c"):
                sources_by_name.setdefault(os.path.basename(f) + ".o",
                                           set()).add(folder(f))
        wrong = sorted(m for m in members
                       if not sources_by_name.get(m, set()) & below)
        self.assertEqual(wrong, [], "front-end objects in " + lib)

    def test_no_source_file_is_past_800_lines(self):
        # Issue 19: a file past MAX_LINES is split by concern (the bucket
        # table into buckets_*.c, the shared-memory store into shm.c and
        # shm_file.c), so that its name says what it holds.
        long = []
        for f in sorted(self.graph):
            with open(os.path.join(SRC_ROOT, f), encoding="utf-8",
                      errors="replace") as fh:
                n = sum(1 for _ in fh)
            if n > MAX_LINES:
                long.append("%s: %d lines" % (f, n))
        self.assertEqual(long, [], "\n" + "\n".join(long))

    def test_the_checker_sees_a_ring_and_a_wrong_arrow(self):
        # The checks can fail: a made-up tree with both faults.
        g = {
            "src/core/a.h": [("src/core/b.h", 3)],
            "src/core/b.h": [("src/core/a.h", 4)],
            "src/store/s.c": [("src/policy/p.h", 7)],
            "src/policy/p.h": [],
        }
        self.assertEqual(include_rings(g), [["src/core/a.h", "src/core/b.h"]])
        self.assertEqual(layer_violations(g), [
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


if __name__ == "__main__":
    unittest.main(verbosity=1)
