"""test_layers.py -- the folders of src/ depend on each other one way, and
no file of the tree reaches itself back.

From every #include "..." of src/, include/, the Node addon
(bindings/node/src), tests/ and bench/: each folder of src/ includes only
the folders the table LAYERS allows it (docs/ARCHITECTURE.md draws the
same table), the addon only what HOSTS allows it, nothing of src/ or
include/ includes a file outside them, and no file reaches itself by
includes.  No JavaScript file (bindings/node, tests/, bench/) reaches
itself by require() or import, nor a Python module (tests/, bench/) by
import, but the rings KNOWN_REQUIRE_RINGS lists.

From the objects of a build (SLUICE_BUILD; `nm` says which file defines
and which uses each symbol): no file of a folder calls itself back through
other files of that folder (no call ring) but in the rings
KNOWN_CALL_RINGS lists.  A call through a hook -- a struct's function
pointer, `r->wake_retry(r)` -- is invisible to nm, so the sources add it:
a file that stores its function in a field (`r->wake_retry = fn;`, `.take
= fn,` in an ops table) is called by each file that calls through that
field (`->wake_retry(`), when both mean the same struct's member.  A
callback handed over as an argument is not seen.  SLUICE_BUILD unset (a
standalone run), those checks are skipped, saying so; CTest always sets
it, and a build without its objects fails.

No source file (C, JavaScript, TypeScript, Python, Lua, shell) is longer
than MAX_LINES for its kind, but those OVER_LONG caps at their length.

A file's folder is its first directory below src/ (src/store/redis/x.c
is in "store").  An include names a file below src/ ("policy/rules.h"),
beside the includer, or in include/ ("sluice.h"); anything else is a
system or generated header (protobuf-c's, script_lua.h), not ours.
Vendored and generated trees (bindings/node/deps, build output, fuzzing
corpora) are not read.  Run by CTest as unit/test_layers; SLUICE_SRC
names the tree (default: two folders up).
"""
import ast
import os
import re
import subprocess
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

# C outside src/ that the library's package compiles, and which folders
# of src/ it may include (tests/ and bench/ may include any).
HOSTS = {
    # the Node addon: a host of the stores, as `sluice serve` is, and
    # glue only -- never the policy engine or a front end
    os.path.join("bindings", "node", "src"): {"store", "core", "util"},
}

# Call rings inside a folder that exist and are known (each a set of
# files calling each other); a ring found must lie inside one of these.
# Each closes through a hook, by design: by direct calls alone no file
# reaches itself, and a new ring of either kind fails the test.
KNOWN_CALL_RINGS = [
    # The HTTP code tells the transport that gave it the bytes (tcp.c)
    # that a request began, an answer waits or a connection may go,
    # through c->io (sluice_conn_io_t: begin, wake, release).
    {"src/serve/" + f for f in (
        "admin.c", "answer.c", "handlers.c", "http_conn.c", "http_resp.c",
        "json_api.c", "rls_json.c", "tcp.c")},
    # The Redis client's news travels up through hooks (redis_int.h): a
    # closed handle, a refusing node and a lost slot map refresh to
    # client.c and call.c (released, probe_calls, wake_retry), a node up
    # or failed to cluster.c and sentinel.c (on_conn_up, on_conn_failed).
    {"src/store/redis/" + f for f in (
        "call.c", "client.c", "cluster.c", "command.c", "link.c", "many.c",
        "maxmemory.c", "module_path.c", "node.c", "quota.c", "script.c",
        "sentinel.c")},
]

# require() rings that are known, each with its reason.
KNOWN_REQUIRE_RINGS = [
    # npm's install script, the package's only one, asks prepack.js to
    # collect the sources when it runs in a checkout, by a lazy require():
    # prepack.js is not in the package.
    {"bindings/node/scripts/build.js", "bindings/node/scripts/prepack.js"},
]

# The trees read, and the folders in them that are not ours to check:
# vendored (bindings/node/deps), installed, built or fuzzers' inputs.
TREES = ("src", PUBLIC, "bindings", "tests", "bench")
SKIP_DIRS = {"deps", "node_modules", "build", "prebuilds", "corpus"}

# The longest a source file may be, by kind.  A file past ~800 lines is
# usually two, whatever its language (a test file too: it is two
# specifications); data (corpora, .tsv, .json) has no limit.
MAX_LINES = {"C": 800, "JavaScript": 800, "TypeScript": 800,
             "Python": 800, "Lua": 800, "shell": 800}
KINDS = {".c": "C", ".h": "C", ".def": "C", ".js": "JavaScript",
         ".mjs": "JavaScript", ".cjs": "JavaScript", ".ts": "TypeScript",
         ".mts": "TypeScript", ".py": "Python", ".lua": "Lua",
         ".sh": "shell"}
# An executable without a suffix is of its interpreter's kind.
SHEBANGS = {"python3": "Python", "python": "Python", "node": "JavaScript",
            "sh": "shell", "bash": "shell"}

# Files that were past their limit when the check reached tests/ and
# bench/, each capped at its length then: it may shrink, never grow, and
# its row goes when a split by concern brings it under the limit (a
# split test is a new test registered with CTest, so none was split in
# passing).  src/ and include/ have none.
OVER_LONG = {
    "bench/run": 1916,
    "bench/report.py": 1373,
    "bench/bench_core.c": 996,
    "tests/integration/harness.py": 1111,
    "tests/integration/test_envoy_json.py": 919,
    "tests/integration/test_grpc_transport.py": 1112,
    "tests/integration/test_redis_module.py": 1091,
    "tests/integration/test_serve_http.py": 1029,
    "tests/soak/soak.py": 877,
    "tests/unit/test_config.c": 1306,
    "tests/unit/test_envoy_config.c": 861,
    "tests/unit/test_envoy_rls.c": 1036,
    "tests/unit/test_redis_quota.c": 863,
    "tests/unit/test_rules.c": 1072,
    "tests/unit/test_shmstore.c": 1402,
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# require('./x'), import('./x'), import x from './x', export ... from
# './x', import './x': a relative name, so one of ours.
REQUIRE_RE = re.compile(r"""(?:\brequire\s*\(\s*|\bimport\s*\(\s*|"""
                        r"""\bfrom\s+|^\s*import\s+)(['"])(\.[^'"]*)\1""",
                        re.M)
# A function stored in a field: `x->f = fn;`, `x.f = &fn;`, `.f = fn,`.
HOOK_SET_RE = re.compile(
    r"(?:->|\.)\s*([A-Za-z_]\w*)\s*=\s*&?\s*([A-Za-z_]\w*)\s*[;,}]")
# A call through a field: `x->f(`, `x.f(`.
HOOK_CALL_RE = re.compile(r"(?:->|\.)\s*([A-Za-z_]\w*)\s*\(")
# A function-pointer member, inside a struct's braces: `int (*f)(`.
FNPTR_RE = re.compile(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)\s*\(")
STRUCT_RE = re.compile(r"\b(?:struct|union)\b[^;{}()]*\{")


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8",
              errors="replace") as fh:
        return fh.read()


def walk(root, tops=TREES):
    """Every file below the trees tops, as sorted paths from root, but
    those in SKIP_DIRS."""
    out = []
    for tree in tops:
        for d, dirs, files in os.walk(os.path.join(root, tree)):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
            out.extend(os.path.relpath(os.path.join(d, f), root)
                       for f in files)
    return sorted(out)


def kind(root, path):
    """The language of a source file (KINDS, or its #! line), or None."""
    ext = os.path.splitext(path)[1]
    if ext:
        return KINDS.get(ext)
    try:
        with open(os.path.join(root, path), "rb") as fh:
            first = fh.readline(200).decode("utf-8", "replace")
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = words[1:]
    return SHEBANGS.get(os.path.basename(words[0])) if words else None


def line_counts(root):
    """{path: (kind, lines)} for every source file of the trees."""
    out = {}
    for f in walk(root):
        k = kind(root, f)
        if k:
            out[f] = (k, read(root, f).count("\n"))
    return out


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


def sources(root):
    """Every .c and .h of the trees, as paths from root."""
    return [f for f in walk(root) if f.endswith((".c", ".h"))]


def top(path):
    return path.split(os.sep)[0]


def folder(path):
    """src/x/...: x; include/...: include; anything else: its top."""
    parts = path.split(os.sep)
    return parts[1] if parts[0] == "src" else parts[0]


def host(path):
    """The row of HOSTS a file outside src/ belongs to, or None."""
    for h in HOSTS:
        if path.startswith(h + os.sep):
            return h
    return None


def resolve(root, includer, name, known):
    """The file an include names (a path from root), or None.  Files of
    src/ and include/ look in src/ first (as their -I says); the others
    beside themselves first (the C rule for "...")."""
    below, beside = os.path.join("src", name), os.path.join(
        os.path.dirname(includer), name)
    order = ((below, beside) if top(includer) in ("src", PUBLIC) else
             (beside, below))
    for cand in order + (os.path.join(PUBLIC, name),):
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
        text = read(root, f)
        edges = []
        for m in INCLUDE_RE.finditer(text):
            target = resolve(root, f, m.group(1), known)
            if target:
                edges.append((target, text.count("\n", 0, m.start()) + 1))
        graph[f] = edges
    return graph


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


def include_rings(graph):
    """Each set of files that reach each other by includes (Tarjan's
    strongly connected components of more than one file, or a file that
    includes itself), as sorted lists.  Any graph of the same shape
    ({node: [(node, anything), ...]}) will do: calls, require(), import."""
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


def require_graph(texts):
    """{file: [(required file, line), ...]} among JavaScript files
    ({path: text}): relative names, resolved as Node does for a file
    (the name, .js, .mjs, .cjs, then the folder's index.js)."""
    graph = {}
    for f, text in texts.items():
        edges = []
        for m in REQUIRE_RE.finditer(text):
            base = os.path.normpath(os.path.join(os.path.dirname(f),
                                                 m.group(2)))
            for cand in (base, base + ".js", base + ".mjs", base + ".cjs",
                         os.path.join(base, "index.js")):
                if cand in texts:
                    edges.append((cand, text.count("\n", 0, m.start()) + 1))
                    break
        graph[f] = edges
    return graph


def import_graph(texts):
    """{file: [(imported file, line), ...]} among Python files ({path:
    text}): a module beside the importer, else the only one of its name
    (the tests put each other's folders on sys.path)."""
    by_name = {}
    for f in texts:
        if f.endswith(".py"):
            by_name.setdefault(os.path.basename(f)[:-3], []).append(f)
    graph = {}
    for f, text in texts.items():
        edges = []
        for node in ast.walk(ast.parse(text, f)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                beside = os.path.join(os.path.dirname(f), top + ".py")
                cands = ([beside] if beside in texts else
                         by_name.get(top, []))
                if len(cands) == 1:
                    edges.append((cands[0], node.lineno))
        graph[f] = edges
    return graph


def texts_of(root, language, tops=TREES):
    return {f: read(root, f) for f in walk(root, tops)
            if kind(root, f) == language}


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


def nm_symbols(objs):
    """(defs, uses, funcs): the file defining each global symbol, the
    symbols each file uses, and the functions each file defines (its
    static ones too)."""
    defs, uses, funcs = {}, {}, {}
    for src, obj in sorted(objs.items()):
        out = subprocess.run(["nm", obj], capture_output=True, text=True,
                             check=True).stdout
        uses[src], funcs[src] = set(), set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRC":
                defs.setdefault(parts[2], src)
            if len(parts) == 3 and parts[1] in "Tt":
                funcs[src].add(parts[2])
            elif len(parts) == 2 and parts[0] == "U":
                uses[src].add(parts[1])
    return defs, uses, funcs


def call_graph(defs, uses):
    """{file: [(file it calls or reads a symbol of, 0), ...]}."""
    graph = {}
    for src, names in uses.items():
        targets = {defs[n] for n in names if n in defs} - {src}
        graph[src] = [(t, 0) for t in sorted(targets)]
    return graph


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def fnptr_members(text):
    """The function-pointer members a file's structs declare."""
    names = set()
    for m in STRUCT_RE.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        names.update(FNPTR_RE.findall(text, m.end(), i))
    return names


def closure(graph):
    """{file: the files it sees: itself and all it includes, through
    others too}."""
    seen = {}
    for f in graph:
        todo, got = [f], {f}
        while todo:
            for t, _ in graph.get(todo.pop(), ()):
                if t not in got:
                    got.add(t)
                    todo.append(t)
        seen[f] = got
    return seen


def hook_edges(texts, funcs, defs, sees):
    """{caller: {file: field}}: the file each file calls through a hook.
    texts: {path: C text}; funcs, defs: as nm_symbols gives them; sees:
    {path: files it includes, itself too}.  A field means the struct
    member its file sees first: one of its own structs', else one of its
    headers'; setter and caller must mean the same declaration."""
    code = {f: strip_comments(t) for f, t in texts.items()}
    declared = {f: fnptr_members(t) for f, t in code.items()}

    def meaning(f, field):
        if field in declared.get(f, ()):
            return {f}
        return {d for d in sees.get(f, {f}) if field in declared.get(d, ())}

    setters = {}  # field -> [(file whose function it is, declarations)]
    for f, text in code.items():
        for field, fn in HOOK_SET_RE.findall(text):
            owner = (f if fn in funcs.get(f, ()) else defs.get(fn))
            if owner and fn in funcs.get(owner, ()):
                setters.setdefault(field, []).append(
                    (owner, meaning(f, field)))
    edges = {}
    for f, text in code.items():
        for field in set(HOOK_CALL_RE.findall(text)) & set(setters):
            mine = meaning(f, field)
            for owner, theirs in setters[field]:
                if owner != f and mine & theirs:
                    edges.setdefault(f, {})[owner] = field
    return edges


def with_hooks(graph, hooks):
    """The call graph with the hook edges added (files of graph only)."""
    out = {f: list(edges) for f, edges in graph.items()}
    for f, targets in hooks.items():
        if f in out:
            have = {t for t, _ in out[f]}
            out[f] += [(t, 0) for t in sorted(targets)
                       if t in out and t not in have]
    return out


def call_rings_inside_folders(graph):
    """The call rings among the files of each folder."""
    inside = {f: [(t, 0) for t, _ in edges if folder(t) == folder(f)]
              for f, edges in graph.items()}
    return include_rings(inside)


def unknown(rings, known):
    return [r for r in rings if not any(set(r) <= k for k in known)]


def show(rings, hooks=None):
    """Rings one a line, and the hooks among their files."""
    lines = []
    for r in rings:
        lines.append(" <-> ".join(r))
        for f in r:
            for t, field in sorted((hooks or {}).get(f, {}).items()):
                if t in r:
                    lines.append("    %s calls %s through ->%s" %
                                 (f, t, field))
    return "\n" + "\n".join(lines)


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
        objs = object_files(build)
        self.assertIn("src/policy/verdict.c", objs,
                      "no objects of src/ under %s: build it first "
                      "(cmake --build)" % build)
        defs, uses, funcs = nm_symbols(objs)
        texts = {f: read(SRC_ROOT, f) for f in self.graph
                 if top(f) in ("src", PUBLIC)}
        hooks = hook_edges(texts, funcs, defs, closure(self.graph))
        self.assertTrue(hooks, "no call through a hook found in src/")
        calls = call_graph(defs, uses)
        direct = call_rings_inside_folders(calls)
        self.assertEqual(direct, [], "rings of direct calls:" + show(direct))
        new = unknown(call_rings_inside_folders(with_hooks(calls, hooks)),
                      KNOWN_CALL_RINGS)
        self.assertEqual(new, [], show(new, hooks))

    def test_the_policy_engine_library_holds_no_front_end(self):
        # libsluice_policy.a is what every front end links (serve, the
        # simulator, the nginx module): it holds the engine and what lies
        # below it, never a front end's object.
        lib = os.path.join(build_dir(self), "libsluice_policy.a")
        self.assertTrue(os.path.exists(lib), lib + " was not built")
        members = subprocess.run(["ar", "t", lib], capture_output=True,
                                 text=True, check=True).stdout.split()
        self.assertIn("verdict.c.o", members)
        below = {"policy", "store", "core", "util"}
        sources_by_name = {}
        for f in self.graph:
            if f.endswith(".c") and top(f) == "src":
                sources_by_name.setdefault(os.path.basename(f) + ".o",
                                           set()).add(folder(f))
        wrong = sorted(m for m in members
                       if not sources_by_name.get(m, set()) & below)
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


class Checker(unittest.TestCase):
    """The checks can fail: made-up trees with each fault."""

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
        self.assertEqual(hooks, {cluster: {call: "wake_retry"}})
        rings = call_rings_inside_folders(with_hooks(graph, hooks))
        self.assertEqual(rings, [[call, cluster]])
        self.assertEqual(unknown(rings, [{call, cluster, node}]), [])
        self.assertEqual(unknown(rings, []), [[call, cluster]])
        self.assertIn("through ->wake_retry", show(rings, hooks))


if __name__ == "__main__":
    unittest.main(verbosity=2)
