"""test_lua_shared.py -- the Redis scripts' state arithmetic has one home.

The scripts of src/store/redis/*.lua read and write the stored states
(a bucket's "<tat_us><frac:3>", a quota's "<end_s><used:9>") only through
the shared files of src/store/redis/lib/, which the build pastes in place
of their "--@include NAME" lines (cmake/lua_scripts.cmake) before it
computes each script's SHA-1.  This test fails when a script decodes or
encodes a state itself again (the patterns below outside lib/), when a
pattern has two homes in lib/, when an include names no file or a shared
file serves no script, and, given a build (SLUICE_BUILD), when what the
build embeds is not the expansion of today's sources or its SHA-1 is not
the text's.  The scripts and the C (src/core/decide.h, the module's
take.c) are kept agreeing by the replay tests (tests/unit/test_redis_script.c,
test_redis_module.py's alternation of script and module on one key).

Run by CTest as unit/test_lua_shared; SLUICE_SRC names the tree (default:
two folders up), SLUICE_BUILD the build directory (optional).
"""
import hashlib
import os
import re
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_ROOT = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))
BUILD = os.environ.get("SLUICE_BUILD")
REDIS = os.path.join(SRC_ROOT, "src", "store", "redis")
LIB = os.path.join(REDIS, "lib")

# What reads or writes a stored state, or the clock it is read against.
STATE_PATTERNS = {
    "a state cut into its parts (string.sub)": r"\bstring\.sub\s*\(",
    "a state formatted (string.format)": r"\bstring\.format\s*\(",
    "the shortfall's saturation at 2^53": r"9007199254740992",
    "a state's expiry written (PXAT)": r"['\"]PXAT['\"]",
    "the server's clock read (TIME)": r"['\"]TIME['\"]",
    "a fraction or count split off (% 1000, / 1000000)":
        r"%\s*1000\b|/\s*1000000\b",
}
# Each state format's reading and writing, and the one shared file that
# holds it.
HOMES = {
    r"string\.sub\(s, 1, -4\)": "bucket_debt.lua",  # tat
    r"string\.sub\(s, -3\)": "bucket_debt.lua",  # frac
    r"9007199254740992": "bucket_debt.lua",
    r"'%d%03d'": "bucket_put.lua",
    r"string\.sub\(s, 1, -10\)": "quota_state.lua",  # end_s
    r"string\.sub\(s, -9\)": "quota_state.lua",  # used
    r"'%d%09d'": "quota_put.lua",
    r"'TIME'": "now.lua",
}
INCLUDE_RE = re.compile(r"^[ \t]*--@include[ \t]+([A-Za-z0-9_]+\.lua)[ \t]*$",
                        re.M)


def code_of(text):
    """Lua text without its comments (--[[ ]] blocks and -- lines)."""
    text = re.sub(r"--\[(=*)\[.*?\]\1\]", "", text, flags=re.S)
    return re.sub(r"--[^\n]*", "", text)


def read(path):
    with open(path) as f:
        return f.read()


def scripts():
    return sorted(f for f in os.listdir(REDIS) if f.endswith(".lua"))


def libs():
    return sorted(f for f in os.listdir(LIB) if f.endswith(".lua"))


def reimplemented(text):
    """The state patterns a script's own code holds."""
    code = code_of(text)
    return [what for what, pat in STATE_PATTERNS.items()
            if re.search(pat, code)]


def expand(path, depth=0):
    """The text the build makes of path (cmake/lua_scripts.cmake's rule:
    the marker line becomes '-- lib/NAME' and the shared file's code
    without its leading comment, at the marker's indentation)."""
    assert depth <= 4, path
    out = []
    for line in read(path).splitlines(True):
        m = INCLUDE_RE.match(line.rstrip("\n"))
        if not m:
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip(" \t"))]
        inc = expand(os.path.join(LIB, m.group(1)), depth + 1)
        inc = re.sub(r"\A(--[^\n]*\n)+", "", inc)
        for piece in ("-- lib/%s\n" % m.group(1) + inc).splitlines(True):
            out.append(indent + piece if piece != "\n" else piece)
    return "".join(out)


class LuaShared(unittest.TestCase):
    def test_no_script_decodes_or_encodes_a_state_itself(self):
        self.assertGreaterEqual(len(scripts()), 10)
        for name in scripts():
            self.assertEqual(reimplemented(read(os.path.join(REDIS, name))),
                             [], "%s: use src/store/redis/lib/" % name)

    def test_the_check_sees_a_copy(self):
        # A script holding a shared file's code (what each script did
        # before lib/) is caught, pattern by pattern.
        for name in ("bucket_debt.lua", "bucket_put.lua", "quota_state.lua",
                     "quota_put.lua", "now.lua"):
            self.assertNotEqual(reimplemented(read(os.path.join(LIB, name))),
                                [], name)
        self.assertEqual(reimplemented("-- string.sub(s, 1, -4)\n"), [])

    def test_each_format_has_one_home(self):
        for pat, home in HOMES.items():
            found = [n for n in libs()
                     if re.search(pat, code_of(read(os.path.join(LIB, n))))]
            self.assertEqual(found, [home], pat)

    def test_includes_name_shared_files_and_each_is_used(self):
        used = set()
        for name in scripts():
            text = read(os.path.join(REDIS, name))
            for inc in INCLUDE_RE.findall(text):
                self.assertIn(inc, libs(), "%s includes %s" % (name, inc))
                used.add(inc)
            # Every marker is one the build expands (a misspelt one would
            # be a comment to Lua: the script short of its code).
            for line in text.splitlines():
                if line.lstrip().startswith("--@"):
                    self.assertRegex(line, INCLUDE_RE, name)
        self.assertEqual(sorted(used), libs())

    @unittest.skipUnless(BUILD, "SLUICE_BUILD unset")
    def test_the_build_embeds_the_expansion_and_its_sha1(self):
        header = read(os.path.join(BUILD, "generated", "script_lua.h"))
        for name in scripts():
            gen = os.path.join(BUILD, "generated", "lua", name)
            text = read(gen)
            self.assertEqual(text, expand(os.path.join(REDIS, name)), name)
            self.assertNotRegex(text, INCLUDE_RE)
            up = name[:-len(".lua")].upper()
            m = re.search(r'#define SLUICE_%s_LUA "([^"]*)"' % up, header)
            self.assertTrue(m, up)
            embedded = bytes(int(h, 16) for h in
                             re.findall(r"\\x([0-9a-f]{2})", m.group(1)))
            self.assertEqual(embedded, text.encode(), name)
            sha = re.search(r'#define SLUICE_%s_SHA1 "([0-9a-f]{40})"' % up,
                            header).group(1)
            self.assertEqual(sha, hashlib.sha1(embedded).hexdigest(), name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
