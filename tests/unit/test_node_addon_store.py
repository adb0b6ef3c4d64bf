"""test_node_addon_store.py -- the Node addon reaches its stores only
through the store interface (src/store/store.h), as `sluice serve` does.

bindings/node/src opens every store with sluice_backend_open*() and calls
it through its ops (take, peek, reset, refund, penalize, block); it calls
no store's own functions (sluice_memstore_*, sluice_shmstore_*,
sluice_redis_* but the name of an event kind).  So a store added to
src/store (one driver file and one case in store.c) is one the addon can
open too, and the addon has no second copy of a store's calls.

Run by CTest as unit/test_node_addon_store; SLUICE_SRC names the tree
(default: two folders up).
"""
import os
import re
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_ROOT = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))
ADDON = os.path.join(SRC_ROOT, "bindings", "node", "src")

# A store's own function, called: its name followed by "(".
STORE_CALL_RE = re.compile(
    r"\b(sluice_(?:memstore|shmstore|redis)_[a-z0-9_]+)\s*\(")
# What the addon may still name: words, not a store's calls.
ALLOWED = {"sluice_redis_event_name"}
OPEN_RE = re.compile(r"\bsluice_backend_open(?:_events)?\s*\(")
OPS_RE = re.compile(
    r"->ops->(take|peek|reset|refund|penalize|block)\b|"
    r"\bops->(take|peek|reset|refund|penalize|block)\b")


def strip_comments(text):
    """C text with its comments blanked (line numbers kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)


def bypasses(files):
    """'file:line: name' for each store function a file calls."""
    bad = []
    for name, text in sorted(files.items()):
        code = strip_comments(text)
        for m in STORE_CALL_RE.finditer(code):
            if m.group(1) not in ALLOWED:
                bad.append("%s:%d: %s" % (name, code.count("\n", 0, m.start()) + 1,
                                          m.group(1)))
    return bad


def addon_sources():
    out = {}
    for f in sorted(os.listdir(ADDON)):
        if f.endswith((".c", ".h")):
            with open(os.path.join(ADDON, f), encoding="utf-8") as fh:
                out[f] = fh.read()
    return out


class AddonUsesTheStoreInterface(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.files = addon_sources()

    def test_the_addon_has_sources(self):
        self.assertIn("addon.c", self.files)
        self.assertIn("local.c", self.files)
        self.assertIn("redis.c", self.files)

    def test_no_store_function_is_called_but_through_ops(self):
        bad = bypasses(self.files)
        self.assertEqual(bad, [], "\n" + "\n".join(bad))

    def test_stores_are_opened_by_the_registry(self):
        # Both kinds of JS store (answered at once, answered from the
        # loop) open their backend through store.c.
        for f in ("local.c", "redis.c"):
            self.assertRegex(strip_comments(self.files[f]), OPEN_RE, f)
        self.assertIn('#include "store/store.h"', self.files["addon.h"])

    def test_every_verb_goes_through_ops(self):
        seen = set()
        for text in self.files.values():
            for m in OPS_RE.finditer(strip_comments(text)):
                seen.add(m.group(1) or m.group(2))
        self.assertEqual(seen, {"take", "peek", "reset", "refund",
                                "penalize", "block"})

    def test_the_checker_sees_a_bypass(self):
        # The check can fail: a made-up file calling a store directly,
        # beside one that only names it in a comment or names an event.
        files = {
            "a.c": "int f(void)\n{\n\treturn sluice_memstore_take(s, k);\n}\n",
            "b.c": "/* sluice_redis_take(r) */\nconst char *n = "
                   "sluice_redis_event_name(k);\n",
            "c.c": "\trc = sluice_shmstore_reset (s, k, n, l, m);\n",
        }
        self.assertEqual(bypasses(files), ["a.c:3: sluice_memstore_take",
                                           "c.c:1: sluice_shmstore_reset"])


if __name__ == "__main__":
    unittest.main(verbosity=1)
