"""layers_graph.py -- the readers test_layers.py judges with: the tree's
files and their kinds, the include graph of its C, the require() graph of
its JavaScript, the import graph of its Python, the call graph of a build's
objects (nm) with the calls through hooks found in the sources, and the
rings of any of these graphs (Tarjan's strongly connected components).

Nothing here knows the layering: the tables and the checks are in
test_layers.py.
"""
import ast
import os
import re
import subprocess

# The public headers.
PUBLIC = "include"

# The trees read, and the folders in them that are not ours to check:
# vendored (bindings/node/deps), installed, built or fuzzers' inputs.
TREES = ("src", PUBLIC, "bindings", "tests", "bench")
SKIP_DIRS = {"deps", "node_modules", "build", "prebuilds", "corpus"}

# What kind of source a file is, by its suffix.
KINDS = {".c": "C", ".h": "C", ".def": "C", ".js": "JavaScript",
         ".mjs": "JavaScript", ".cjs": "JavaScript", ".ts": "TypeScript",
         ".mts": "TypeScript", ".py": "Python", ".lua": "Lua",
         ".sh": "shell"}
# An executable without a suffix is of its interpreter's kind.
SHEBANGS = {"python3": "Python", "python": "Python", "node": "JavaScript",
            "sh": "shell", "bash": "shell"}

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
    """A file's text (a path from root)."""
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


def sources(root):
    """Every .c and .h of the trees, as paths from root."""
    return [f for f in walk(root) if f.endswith((".c", ".h"))]


def top(path):
    """The tree a path is in: src, include, bindings, tests, bench."""
    return path.split(os.sep)[0]


def folder(path):
    """src/x/...: x; include/...: include; anything else: its top."""
    parts = path.split(os.sep)
    return parts[1] if parts[0] == "src" else parts[0]


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
                mod = name.split(".")[0]
                beside = os.path.join(os.path.dirname(f), mod + ".py")
                cands = ([beside] if beside in texts else
                         by_name.get(mod, []))
                if len(cands) == 1:
                    edges.append((cands[0], node.lineno))
        graph[f] = edges
    return graph


def texts_of(root, language, tops=TREES):
    """{path: text} of the files of a kind below tops."""
    return {f: read(root, f) for f in walk(root, tops)
            if kind(root, f) == language}


def object_files(build, root):
    """{source path from the tree's root: object file} for every object of
    the build whose source is below src/ and still exists in root."""
    objs = {}
    for d, _, files in os.walk(build):
        for f in sorted(files):
            if not f.endswith(".c.o") or ".dir" + os.sep not in d + os.sep:
                continue
            path = os.path.join(d, f)
            rel = path.split(".dir" + os.sep, 1)[1][:-2]
            if (rel.startswith("src" + os.sep) and rel not in objs and
                    os.path.exists(os.path.join(root, rel))):
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
    """C text without its comments."""
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
    """{caller: {file: {field, ...}}}: the files each file calls through
    hooks.
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
                    edges.setdefault(f, {}).setdefault(owner, set()).add(
                        field)
    return edges


def with_hooks(graph, hooks, upcalls=frozenset()):
    """The call graph with the hook edges added (files of graph only),
    but those whose every field is one of upcalls."""
    out = {f: list(edges) for f, edges in graph.items()}
    for f, targets in hooks.items():
        have = {t for t, _ in out.get(f, ())}
        for t, fields in sorted(targets.items()):
            if (f in out and t in out and t not in have and
                    any((f, x) not in upcalls for x in fields)):
                out[f].append((t, 0))
    return out


def call_rings_inside_folders(graph):
    """The call rings among the files of each folder."""
    inside = {f: [(t, 0) for t, _ in edges if folder(t) == folder(f)]
              for f, edges in graph.items()}
    return include_rings(inside)


def unknown(rings, known):
    """The rings that lie inside none of the sets known."""
    return [r for r in rings if not any(set(r) <= k for k in known)]


def show(rings, hooks=None, upcalls=frozenset()):
    """Rings one a line, and the hooks among their files (those of
    upcalls marked)."""
    lines = []
    for r in rings:
        lines.append(" <-> ".join(r))
        for f in r:
            for t, fields in sorted((hooks or {}).get(f, {}).items()):
                how = ", ".join("->" + x + (" (an upcall)" if (f, x) in
                                            upcalls else "")
                                for x in sorted(fields))
                if t in r:
                    lines.append("    %s calls %s through %s" % (f, t, how))
    return "\n" + "\n".join(lines)
