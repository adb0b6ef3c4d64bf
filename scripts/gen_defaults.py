#!/usr/bin/env python3
"""gen_defaults.py -- writes the Node binding's copy of sluice's defaults
and store kinds (bindings/node/lib/defaults.js) from the one table of each:
src/util/defaults.h and src/store/store_kinds.def.

The npm package carries the written file (it has no C headers to read at
run time), so it is committed; tests/unit/test_defaults.py fails when it
differs from what this script writes now.  Run after changing either
table:

    scripts/gen_defaults.py            # rewrite the file
    scripts/gen_defaults.py --check    # exit 1 if it is stale

The readers below are also the test's (docs/CONFIG.md is checked against
what they return).
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULTS_H = os.path.join(ROOT, "src", "util", "defaults.h")
KINDS_DEF = os.path.join(ROOT, "src", "store", "store_kinds.def")
OUT = os.path.join(ROOT, "bindings", "node", "lib", "defaults.js")

# A row of defaults.h: its comment (the setting first), then the define.
ROW_RE = re.compile(
    r"/\*\s*(?P<setting>(?:node:\s*)?[A-Za-z0-9_.]+)[^*]*(?:\*(?!/)[^*]*)*\*/\s*\n"
    r"#define\s+SLUICE_DEFAULT_(?P<name>[A-Z0-9_]+)\s+(?P<value>.+?)\s*$",
    re.M,
)
# A row of store_kinds.def.
KIND_RE = re.compile(
    r"^SLUICE_STORE_KIND\(\s*(?P<id>[A-Z_]+),\s*\"(?P<name>[^\"]+)\",\s*"
    r"\"(?P<log>[^\"]+)\",\s*(?P<sentinel>NULL|\"[^\"]+\"),\s*"
    r"\((?P<keys>[^)]*)\),\s*\((?P<options>[^)]*)\)\s*\)",
    re.M | re.S,
)


def _value(text, where):
    text = text.strip()
    m = re.fullmatch(r"([0-9]+)(?:[uU]?[lL]{0,2}|[lL]{1,2}[uU]?)", text)
    if m:
        return int(m.group(1))
    m = re.fullmatch(r'"((?:[^"\\]|\\.)*)"', text)
    if m and "\\" not in m.group(1):
        return m.group(1)
    sys.exit(f"{where}: {text!r} is neither a decimal integer nor a plain "
             "\"string\"; the table's rows take one of those")


def read_defaults(path=DEFAULTS_H):
    """[(NAME, value, setting)] in the file's order; setting is the
    config's name ("store.redis.timeout_ms") or "node:" and the Node
    binding's option."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rows = []
    for m in ROW_RE.finditer(text):
        setting = re.sub(r"^node:\s*", "node: ", m.group("setting"))
        setting = setting.rstrip(".")
        rows.append((m.group("name"), _value(m.group("value"), path), setting))
    defines = re.findall(r"^#define\s+SLUICE_DEFAULT_", text, re.M)
    if len(defines) != len(rows):
        sys.exit(f"{path}: {len(defines)} defines but {len(rows)} rows of "
                 "the form the file's head gives (a comment naming the "
                 "setting, then the define)")
    return rows


def _strings(text):
    return re.findall(r'"([^"]*)"', text)


def read_kinds(path=KINDS_DEF):
    """[{id, name, log, sentinel, keys, options}] in the file's order."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    body = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    kinds = []
    for m in KIND_RE.finditer(body):
        sentinel = m.group("sentinel")
        kinds.append({
            "id": m.group("id"),
            "name": m.group("name"),
            "log": m.group("log"),
            "sentinel": None if sentinel == "NULL" else sentinel.strip('"'),
            "keys": _strings(m.group("keys")),
            "options": _strings(m.group("options")),
        })
    if len(kinds) != body.count("SLUICE_STORE_KIND("):
        sys.exit(f"{path}: a row is not of the form the file's head gives")
    return kinds


def _js(v):
    # JSON's strings and numbers are JavaScript's; single quotes as the
    # binding's own code writes them.
    if isinstance(v, str):
        return "'" + json.dumps(v)[1:-1].replace("'", "\\'") + "'"
    if v is None:
        return "null"
    return json.dumps(v)


def _list(items):
    return "Object.freeze([" + ", ".join(_js(i) for i in items) + "])"


def render():
    lines = [
        "// defaults.js -- sluice's defaults and store kinds for the Node binding.",
        "// Written by scripts/gen_defaults.py from src/util/defaults.h and",
        "// src/store/store_kinds.def: edit those, then run the script (the",
        "// checkout's tests/unit/test_defaults.py fails while this file is stale).",
        "'use strict';",
        "",
        "module.exports = Object.freeze({",
    ]
    for name, value, setting in read_defaults():
        lines.append(f"  // {setting}")
        lines.append(f"  {name}: {_js(value)},")
    lines.append("  // Each store kind: its log name (and behind Sentinel), its keys in")
    lines.append("  // the config file, its options here (none: no such kind here).")
    lines.append("  STORE_KINDS: Object.freeze({")
    for k in read_kinds():
        lines.append(f"    {k['name']}: Object.freeze({{")
        lines.append(f"      logName: {_js(k['log'])},")
        lines.append(f"      sentinelLogName: {_js(k['sentinel'])},")
        lines.append(f"      keys: {_list(k['keys'])},")
        lines.append(f"      options: {_list(k['options'])},")
        lines.append("    }),")
    lines.append("  }),")
    lines.append("});")
    return "\n".join(lines) + "\n"


def main(argv):
    text = render()
    if argv[1:] == ["--check"]:
        try:
            now = open(OUT, encoding="utf-8").read()
        except FileNotFoundError:
            now = None
        if now != text:
            print(f"{os.path.relpath(OUT, ROOT)} is stale: run "
                  "scripts/gen_defaults.py", file=sys.stderr)
            return 1
        return 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
