#!/usr/bin/env python3
"""bindings/node as published: the tarball `npm pack` makes, installed in
fresh folders outside the checkout.

1. `npm pack` in bindings/node (its prepack step copies the libsluice
   sources and headers into the package and builds the prebuilt addon).
2. `npm install <tarball> express@4` with a PATH that holds node, npm, sh
   and env and no compiler, cmake or make: the prebuilt binary is
   installed; an Express app (CommonJS and ES module) answers 200, then
   429, with the rate-limit headers.
3. The same tarball with `--build-from-source` and a compiler: the addon is
   built from the sources the tarball carries; the app works.  Without a
   compiler the build names what to install.
4. Debian 12's Node 18 (nodejs and libnode108 unpacked from Debian's
   packages, OpenSSL from the system's libssl3) installs the prebuilt
   binary on first require and runs the app.
Every folder is a fresh temporary one, removed at the end.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

PKG = os.path.join(harness.SRC, "bindings", "node")
PREBUILD = "prebuilds/linux-x64/node.napi.glibc.node"
# The Debian packages of Node 18 (the cache survives between runs, in the
# build directory; the unpacked files do not).
DEB_CACHE = os.path.join(harness.BUILD, "debian-node18")
# Files Debian's Node 18 loads from /usr/share/nodejs at start.
DEB_NODE_SHARED = ["node-cjs-module-lexer", "node-acorn", "node-undici"]

APP_CJS = r"""
const express = require('express');
const sluice = require('sluice');
const app = express();
app.use(sluice.express({ limiter: new sluice.Limiter({ store: 'memory' }),
  policy: sluice.policy([{ capacity: 3, rate: '1/min' }], { name: 'api' }) }));
app.get('/', (req, res) => res.send('hello'));
const server = app.listen(0, '127.0.0.1', () =>
  console.log(`listening on ${server.address().port} node ${process.version}`));
"""

APP_ESM = r"""
import express from 'express';
import sluice, { Limiter, policy, express as limit } from 'sluice';
if (sluice.Limiter !== Limiter) throw new Error('default and named exports differ');
const app = express();
app.use(limit({ limiter: new Limiter({ store: 'memory' }),
  policy: policy([{ capacity: 3, rate: '1/min' }], { name: 'api' }) }));
app.get('/', (req, res) => res.send('hello'));
const server = app.listen(0, '127.0.0.1', () =>
  console.log(`listening on ${server.address().port} node ${process.version}`));
"""

NO_TOOLS = ("cc", "gcc", "clang", "cmake", "make", "c99", "ld")


def run(argv, cwd, env=None, timeout=600, check=True):
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (
            " ".join(argv), out.returncode, out.stdout[-4000:],
            out.stderr[-4000:]))
    return out


def npm(args, cwd, env=None, timeout=600):
    return run([shutil.which("npm")] + args + ["--no-audit", "--no-fund"],
               cwd, env, timeout)


def plain_env():
    """The environment without the sanitizers' settings (neither node nor
    the addon is built with them)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LD_PRELOAD")}


class PackedPackage(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not shutil.which("npm") or not shutil.which("node"):
            raise AssertionError("node and npm are required (scripts/deps)")
        cls.tmp = tempfile.mkdtemp(prefix="sluice-pkg-")
        try:
            cls._pack()
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def _pack(cls):
        # npm pack needs the package's devDependencies (node-api-headers);
        # the install script is not needed for that.
        if not os.path.exists(os.path.join(PKG, "node_modules",
                                           "node-api-headers")):
            npm(["ci", "--ignore-scripts", "--prefer-offline"], PKG)
        out = npm(["pack", "--json", "--pack-destination", cls.tmp], PKG)
        info = json.loads(out.stdout[out.stdout.index("["):])
        cls.tarball = os.path.join(cls.tmp, info[0]["filename"])
        cls.files = [f["path"] for f in info[0]["files"]]

        # A PATH with node, npm, sh and env only.
        cls.tools = os.path.join(cls.tmp, "bin")
        os.mkdir(cls.tools)
        for t in ("node", "npm", "sh", "env"):
            os.symlink(os.path.realpath(shutil.which(t)),
                       os.path.join(cls.tools, t))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def tools_env(self):
        env = {"PATH": self.tools, "HOME": os.environ.get("HOME", "/root")}
        for k in ("npm_config_cache", "LANG", "TMPDIR"):
            if k in os.environ:
                env[k] = os.environ[k]
        return env

    def app_dir(self, name):
        d = os.path.join(self.tmp, name)
        os.mkdir(d)
        with open(os.path.join(d, "package.json"), "w") as f:
            json.dump({"name": name, "version": "1.0.0", "private": True}, f)
        with open(os.path.join(d, "app.js"), "w") as f:
            f.write(APP_CJS)
        with open(os.path.join(d, "app.mjs"), "w") as f:
            f.write(APP_ESM)
        return d

    def check_app(self, argv, cwd, env):
        """Starts the app, checks 200, 200, 200, 429 with the headers;
        returns the line it logged when listening."""
        with harness.Proc(argv, env=env, cwd=cwd) as proc:
            harness.wait_until(
                lambda: re.search(r"listening on (\d+) .*", proc.log())
                or proc.poll() is not None, timeout=60)
            m = re.search(r"listening on (\d+) .*", proc.log())
            self.assertTrue(m, "the app did not start:\n" + proc.log())
            port = int(m.group(1))
            got = [harness.request(port, "GET", "/", {"x-user-id": "a"})
                   for _ in range(4)]
            self.assertEqual([r.status for r in got], [200, 200, 200, 429],
                             got)
            self.assertEqual(got[0].header("RateLimit"), '"api";r=2;t=60')
            self.assertEqual(got[0].header("X-RateLimit-Limit"), "3")
            self.assertIsNotNone(got[3].header("Retry-After"))
            # The default key is the client address: a header the client
            # writes itself buys no fresh bucket.
            self.assertEqual(
                harness.request(port, "GET", "/", {"x-user-id": "b"}).status,
                429)
            return m.group(0)

    # ------------------------------------------------------------ tests

    def test_tarball_carries_what_an_install_needs(self):
        for f in ("LICENSE", "README.md", "package.json", "index.js",
                  "index.mjs", "index.d.ts", "src/addon.c",
                  "src/addon.h", "src/local.c", "src/redis.c",
                  "scripts/build.js", PREBUILD, "deps/sluice/sources.json",
                  "deps/sluice/include/sluice.h",
                  "deps/sluice/generated/script_lua.h",
                  "deps/hiredis/read.c", "deps/hiredis/COPYING",
                  "deps/include/node_api.h", "deps/include/uv.h",
                  "deps/include/openssl/ssl.h"):
            self.assertIn(f, self.files)
        for f in self.files:
            self.assertFalse(f.startswith(("node_modules/", "build/",
                                           "test/")), f)
        with tarfile.open(self.tarball) as t:
            pkg = json.load(t.extractfile("package/package.json"))
            listed = json.load(t.extractfile(
                "package/deps/sluice/sources.json"))["sources"]
            lic = t.extractfile("package/LICENSE").read().decode()
        self.assertEqual(pkg["license"], "MIT")
        self.assertIn("MIT License", lic)
        self.assertEqual(pkg["exports"]["."]["require"], "./index.js")
        self.assertEqual(pkg["exports"]["."]["import"], "./index.mjs")
        self.assertEqual(pkg["os"], ["linux"])
        self.assertIn("x64", pkg["cpu"])
        self.assertTrue(pkg["engines"]["node"].startswith(">="))
        self.assertNotIn("dependencies", pkg)
        # The libsluice sources are those CMake compiles for the library.
        for f in listed:
            self.assertIn("deps/sluice/" + f["file"], self.files)
        # ... every one of them: the list is CMake's, not a copy of it.
        cm = os.path.join(self.tmp, "cmake-library")
        run(["cmake", "-S", harness.SRC, "-B", cm, "-DSLUICE_LIBRARY_ONLY=ON",
             "-DSLUICE_TESTS=OFF", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
            self.tmp)
        with open(os.path.join(cm, "compile_commands.json")) as f:
            cmake = sorted(os.path.relpath(os.path.join(c["directory"],
                                                        c["file"]),
                                           harness.SRC) for c in json.load(f))
        self.assertEqual(sorted(f["file"] for f in listed), cmake)
        self.assertIn("src/store/redis/link.c", cmake)

    def test_prebuild_needs_only_libc(self):
        tmp = os.path.join(self.tmp, "unpacked-readelf")
        os.mkdir(tmp)
        with tarfile.open(self.tarball) as t:
            t.extract("package/" + PREBUILD, tmp)
        out = run(["readelf", "-d", os.path.join(tmp, "package", PREBUILD)],
                  self.tmp).stdout
        needed = re.findall(r"\(NEEDED\).*\[(.+)\]", out)
        self.assertEqual([n for n in needed
                          if not re.match(r"(libc|libm)\.so\.|ld-linux", n)], [],
                         needed)
        self.assertIn("BIND_NOW", out)

    def test_installs_without_a_compiler_from_the_prebuild(self):
        env = self.tools_env()
        for t in NO_TOOLS:
            self.assertIsNone(shutil.which(t, path=env["PATH"]), t)
        app = self.app_dir("app-prebuilt")
        out = npm(["install", "--prefer-offline", "--foreground-scripts",
                   self.tarball, "express@4"], app, env)
        self.assertIn("installed the prebuilt " + PREBUILD,
                      out.stdout + out.stderr)
        mod = os.path.join(app, "node_modules", "sluice")
        with open(os.path.join(mod, "build", "sluice.node"), "rb") as a, \
                open(os.path.join(mod, PREBUILD), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.check_app(["node", "app.js"], app, env)
        self.check_app(["node", "app.mjs"], app, env)
        # With the install script held back (npm 11's allowScripts), the
        # first require installs the prebuild, still with no compiler.
        shutil.rmtree(os.path.join(mod, "build"))
        self.check_app(["node", "app.js"], app, env)
        self.assertTrue(os.path.exists(os.path.join(mod, "build",
                                                    "sluice.node")))

    def test_builds_from_source_with_a_compiler(self):
        env = plain_env()
        app = self.app_dir("app-source")
        out = npm(["install", "--prefer-offline", "--foreground-scripts",
                   "--build-from-source", self.tarball, "express@4"],
                  app, env)
        self.assertIn("building the addon from source", out.stdout + out.stderr)
        mod = os.path.join(app, "node_modules", "sluice")
        with open(os.path.join(mod, "build", "sluice.node"), "rb") as a, \
                open(os.path.join(mod, PREBUILD), "rb") as b:
            self.assertNotEqual(a.read(), b.read())
        self.check_app([shutil.which("node"), "app.js"], app, env)

    def test_from_source_without_a_compiler_names_what_to_install(self):
        tmp = os.path.join(self.tmp, "unpacked-nocc")
        os.mkdir(tmp)
        with tarfile.open(self.tarball) as t:
            t.extractall(tmp)
        env = self.tools_env()
        out = run(["node", "scripts/build.js", "--build-from-source"],
                  os.path.join(tmp, "package"), env, check=False)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("C compiler", out.stderr)
        self.assertIn("apt-get install gcc", out.stderr)
        self.assertNotIn("Error:", out.stderr)  # a message, not a trace
        # A compiler without the C library's headers: the header is named,
        # and the package that has it.
        env["CC"] = "%s -nostdinc" % shutil.which("cc")
        out = run(["node", "scripts/build.js", "--build-from-source"],
                  os.path.join(tmp, "package"), env, check=False)
        self.assertNotEqual(out.returncode, 0)
        self.assertRegex(out.stderr, r"the header \S+\.h is missing")
        self.assertIn("libc6-dev", out.stderr)

    def test_debian_node18_loads_the_prebuild(self):
        root = self.debian_node18()
        app = self.app_dir("app-node18")
        npm(["install", "--prefer-offline", "--ignore-scripts", self.tarball,
             "express@4"], app, self.tools_env())
        mod = os.path.join(app, "node_modules", "sluice")
        self.assertFalse(os.path.exists(os.path.join(mod, "build")))
        # Node 18 in a mount namespace of its own, where /usr/share also
        # shows the unpacked /usr/share/nodejs it loads at start.
        libdir = os.path.join(root, "usr", "lib", "x86_64-linux-gnu")
        node18 = os.path.join(root, "usr", "bin", "node")
        script = ("%s -t overlay overlay -o lowerdir=%s:/usr/share "
                  "/usr/share && exec %s LD_LIBRARY_PATH=%s %s \"$@\"" % (
                      shutil.which("mount"),
                      os.path.join(root, "usr", "share"),
                      shutil.which("env"), libdir, node18))
        env = self.tools_env()
        argv = [shutil.which("unshare"), "-m", "/bin/sh", "-c", script,
                "node18"]
        line = self.check_app(argv + ["app.js"], app, env)
        self.assertIn("node v18.", line)
        # The first require installed the prebuilt binary, with no compiler.
        with open(os.path.join(mod, "build", "sluice.node"), "rb") as a, \
                open(os.path.join(mod, PREBUILD), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.check_app(argv + ["app.mjs"], app, env)
        # OpenSSL came from the system: Node 18 has it as libssl.so.3.
        out = run(argv + ["-p", "process.versions.openssl"], app, env)
        self.assertRegex(out.stdout, r"^3\.")

    # -------------------------------------------------------- Node 18

    def debian_node18(self):
        """Debian 12's Node 18 unpacked into a folder of its own (the
        installed node is not touched); returns that folder."""
        for t in ("apt-get", "apt-cache", "dpkg-deb", "unshare", "mount"):
            if not shutil.which(t):
                self.skipTest("%s is missing: not a Debian machine" % t)
        if os.geteuid() != 0:
            self.skipTest("mounting in a namespace of its own needs root")
        def node18_versions():
            madison = run(["apt-cache", "madison", "nodejs"],
                          self.tmp).stdout
            return madison, re.findall(
                r"^\s*nodejs\s*\|\s*(18\.[^\s|]+)", madison, re.M)

        madison, versions = node18_versions()
        if not versions:  # a machine whose package lists were never read
            run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq"],
                self.tmp, timeout=600)
            madison, versions = node18_versions()
        self.assertTrue(versions, "apt knows no Node 18:\n" + madison)
        v = versions[0]
        want = ["nodejs=" + v, "libnode108=" + v] + DEB_NODE_SHARED
        # libnode108's libraries, where the system lacks one.
        deps = run(["apt-cache", "depends", "libnode108=" + v],
                   self.tmp).stdout
        for lib in re.findall(r"^\s*Depends: (lib[^\s<>]+)", deps, re.M):
            q = run(["dpkg-query", "-W", "-f=${Status}", lib], self.tmp,
                    check=False)
            if "install ok installed" not in q.stdout:
                want.append(lib)
        os.makedirs(DEB_CACHE, exist_ok=True)

        def cached(w):
            name, _, version = w.partition("=")
            prefix = name + "_" + version.replace(":", "%3a")
            debs = sorted(f for f in os.listdir(DEB_CACHE)
                          if f.startswith(prefix) and f.endswith(".deb")
                          and (version or f.count("_") == 2))
            return os.path.join(DEB_CACHE, debs[-1]) if debs else None

        missing = [w for w in want if not cached(w)]
        if missing:
            run(["apt-get", "download"] + missing, DEB_CACHE, timeout=600)
        root = os.path.join(self.tmp, "node18")
        for w in want:
            deb = cached(w)
            self.assertTrue(deb, "apt-get download %s left no .deb" % w)
            run(["dpkg-deb", "-x", deb, root], self.tmp)
        return root


if __name__ == "__main__":
    unittest.main(verbosity=2)
