"""test_config_defaults.py -- the defaults and the store kinds have one home
each (src/util/defaults.h, src/store/store_kinds.def), and what repeats
them agrees with it:

  * the Node binding's generated copy (bindings/node/lib/defaults.js) is
    what scripts/gen_defaults.py writes from the tables now;
  * docs/CONFIG.md states every default of the table as the table has it
    (the field tables, the "Default `X`" of a top-level setting, the
    Defaults section), and its store forms name exactly each kind's keys;
  * the public header's and the Node binding's documentation of the Redis
    defaults say the table's values.

Run by CTest as unit/test_config_defaults; SLUICE_SRC names the tree
(default: two folders up).
"""
import importlib.util
import os
import re
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))

_spec = importlib.util.spec_from_file_location(
    "gen_defaults", os.path.join(ROOT, "scripts", "gen_defaults.py"))
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def section(doc, heading):
    """The text under a `### heading` (up to the next ## or ### one)."""
    m = re.search(r"^###? " + re.escape(heading) + r"\s*$(.*?)(?=^###? |\Z)",
                  doc, re.M | re.S)
    return m.group(1) if m else None


def shown(value):
    """A table value as the docs write it between backticks."""
    return str(value)


class DefaultsTable(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rows = gen.read_defaults(os.path.join(ROOT, "src", "util",
                                                  "defaults.h"))
        cls.kinds = gen.read_kinds(os.path.join(ROOT, "src", "store",
                                                "store_kinds.def"))
        cls.values = {name: value for name, value, _ in cls.rows}
        cls.doc = read("docs", "CONFIG.md")

    def test_the_table_is_read_whole(self):
        # Each define is a row with a setting (the reader exits otherwise),
        # and the settings the docs are checked for are all there.
        settings = {s for _, _, s in self.rows}
        for s in ("threads", "listen", "store.memory.max_keys",
                  "store.redis.timeout_ms", "store.redis.key_prefix",
                  "http.idle_timeout_ms", "grpc.max_message_bytes"):
            self.assertIn(s, settings)
        self.assertEqual([k["name"] for k in self.kinds],
                         ["memory", "shared", "redis", "redis_cluster"])

    def test_node_copy_is_what_the_generator_writes(self):
        path = os.path.join(ROOT, "bindings", "node", "lib", "defaults.js")
        with open(path, encoding="utf-8") as f:
            committed = f.read()
        self.assertEqual(committed, gen.render(),
                         "bindings/node/lib/defaults.js is stale: run "
                         "scripts/gen_defaults.py")
        # And it carries every row and kind (the rendering is no stub).
        for name, value, _ in self.rows:
            self.assertRegex(committed, r"\n  %s: %s,\n" % (
                name, re.escape(repr(value) if isinstance(value, str)
                                else str(value))))
        for k in self.kinds:
            self.assertIn("\n    %s: Object.freeze({" % k["name"], committed)

    def test_config_md_states_each_default_as_the_table(self):
        for name, value, setting in self.rows:
            if setting.startswith("node:"):
                continue
            with self.subTest(setting=setting):
                parts = setting.split(".")
                found = []
                if len(parts) == 1:
                    text = section(self.doc, "`%s`" % setting)
                    self.assertIsNotNone(text, setting)
                    found += re.findall(r"Default\s+`([^`]+)`", text)
                else:
                    text = section(self.doc, "`%s`" % parts[0])
                    self.assertIsNotNone(text, parts[0])
                    field = parts[-1]
                    found += [
                        cell for cell in re.findall(
                            r"^\| `%s` \| ([^|]*) \|" % re.escape(field),
                            text, re.M)]
                    found = [re.search(r"`([^`]*)`", c).group(1)
                             if "`" in c else c.strip() for c in found]
                self.assertTrue(found, "docs/CONFIG.md states no default "
                                "for " + setting)
                for f in found:
                    self.assertEqual(f, shown(value), setting)
                # The Defaults section's `field: N` forms, where it has one.
                defaults = section(self.doc.replace("## Defaults",
                                                    "### Defaults"),
                                   "Defaults")
                # a dotted setting's form sits in its block's row
                # (http.max_connection_age_ms is not grpc's)
                if len(parts) > 1:
                    defaults = "\n".join(
                        line for line in defaults.splitlines()
                        if line.startswith("| `%s` |" % parts[0]))
                for f in re.findall(r"\b%s: ([^,}` ]+)"
                                    % re.escape(parts[-1]), defaults):
                    self.assertEqual(f, shown(value), setting)

    def test_config_md_store_forms_name_each_kinds_keys(self):
        text = section(self.doc, "`store`")
        for k in self.kinds:
            with self.subTest(kind=k["name"]):
                named = set()
                for inner in re.findall(r"^\| `\{%s: \{([^}]*)\}\}` \|"
                                        % k["name"], text, re.M):
                    for key in inner.split(","):
                        key = key.split(":")[0].strip()
                        if key and key != "...":
                            named.add(key)
                self.assertEqual(named, set(k["keys"]),
                                 "docs/CONFIG.md's {%s: {...}} forms"
                                 % k["name"])

    def test_public_header_says_the_redis_defaults(self):
        h = read("include", "sluice_redis.h")
        self.assertEqual(
            re.search(r'key_prefix; /\* NULL: "([^"]*)"', h).group(1),
            self.values["KEY_PREFIX"])
        self.assertEqual(
            int(re.search(r"timeout_ms;\s*/\* per call; 0: (\d+)",
                          h).group(1)),
            self.values["STORE_TIMEOUT_MS"])
        self.assertEqual(
            int(re.search(r"connections;\s*/\*[^*]*0: (\d+)", h).group(1)),
            self.values["CONNECTIONS"])

    def test_node_docs_say_the_binding_defaults(self):
        readme = read("bindings", "node", "README.md")
        m = re.search(r"timeoutMs \((\d+)\), connections \((\d+)\), "
                      r"keyPrefix \('([^']*)'\)", readme)
        self.assertIsNotNone(m, "README's list of the redis options")
        self.assertEqual(int(m.group(1)), self.values["NODE_TIMEOUT_MS"])
        self.assertEqual(int(m.group(2)), self.values["CONNECTIONS"])
        self.assertEqual(m.group(3), self.values["KEY_PREFIX"])
        dts = read("bindings", "node", "index.d.ts")
        self.assertEqual(
            int(re.search(r"Per call, default (\d+)", dts).group(1)),
            self.values["NODE_TIMEOUT_MS"])
        self.assertEqual(
            float(re.search(r"store bound, default ([0-9e.]+) buckets",
                            dts).group(1)),
            self.values["MAX_KEYS"])


if __name__ == "__main__":
    unittest.main()
