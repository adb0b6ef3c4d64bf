#!/usr/bin/env python3
"""test_redis_layers.py -- the files of src/store/redis call each other one
way: no file calls (directly or through others) a file that calls it back.

The calls are read from the source the way a reviewer would check them by
grep: the functions each file defines with external linkage (sluice_redis_*
and sluice_redis__*), and the files that name them.  Hooks (function
pointers in sluice_redis_t) are not calls and do not count.  The test also
holds the order redis_int.h states: each file calls only files of the
layers below its own.
"""

import glob
import os
import re
import sys
import unittest

SRC = os.environ.get("SLUICE_SRC") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
DIR = os.path.join(SRC, "src", "store", "redis")
sys.path.insert(0, os.path.join(SRC, "tests", "unit"))
from layers_graph import include_rings  # noqa: E402 (test_layers' reader)

# The layers of redis_int.h, top first.
LAYERS = [["reserve.c"], ["client.c"], ["many.c", "import.c"], ["call.c"],
          ["cluster.c", "sentinel.c"],
          ["node.c"], ["quota.c"], ["maxmemory.c", "script.c", "module_path.c"],
          ["command.c"], ["link.c"],
          ["reply.c", "tls.c", "url.c", "status.c"]]


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def call_graph():
    """file -> {file it calls: [names]}"""
    files = sorted(glob.glob(os.path.join(DIR, "*.c")))
    src = {}
    defined = {}
    for f in files:
        name = os.path.basename(f)
        with open(f) as fh:
            text = strip_comments(fh.read())
        src[name] = text
        for m in re.finditer(r"^(?!static\b)[A-Za-z][\w \*]*?\b"
                             r"(sluice_redis_\w+)\s*(\(|\[)", text, re.M):
            defined[m.group(1)] = name
    graph = {name: {} for name in src}
    for name, text in src.items():
        for fn, home in defined.items():
            if home != name and re.search(r"\b%s\b" % re.escape(fn), text):
                graph[name].setdefault(home, []).append(fn)
    return graph


def rings(graph):
    """Strongly connected groups of more than one file (Tarjan)."""
    return include_rings({v: [(w, 0) for w in ws] for v, ws in graph.items()})


class LayersTest(unittest.TestCase):
    def test_no_ring_among_the_files(self):
        graph = call_graph()
        # the reading itself works: client.c calls call.c's start
        self.assertIn("sluice_redis__start", graph["client.c"]["call.c"])
        self.assertEqual(rings(graph), [])

    def test_each_file_calls_only_layers_below(self):
        graph = call_graph()
        layer = {f: i for i, fs in enumerate(LAYERS) for f in fs}
        self.assertEqual(sorted(set(graph) - set(layer)), [],
                         "a file of src/store/redis missing from LAYERS")
        wrong = ["%s -> %s (%s)" % (a, b, ", ".join(sorted(set(fns))))
                 for a, callees in sorted(graph.items())
                 for b, fns in sorted(callees.items())
                 if layer[b] <= layer[a]]
        self.assertEqual(wrong, [])


if __name__ == "__main__":
    unittest.main()
