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
5. The other prebuilds: Debian's arm64 Node 18 (its packages unpacked into
   a folder of their own) under qemu-aarch64 installs the linux-arm64 one,
   runs the app and the package's core tests; the musl one binds no glibc
   symbol, loads under musl's dynamic linker, and decides on musl's libc
   as the glibc one does on glibc's: no musl Node is packaged for Debian,
   so napi_host.c (the Node-API calls of the memory store, made as node
   makes them) runs both.
6. What a publisher checks: @arethetypeswrong/cli finds no problem with
   the types, TypeScript compiles ES module and CommonJS users under
   nodenext, and `npm publish --dry-run` warns of nothing and ships only
   the package's own files.
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
PREBUILD_ARM64 = "prebuilds/linux-arm64/node.napi.glibc.node"
PREBUILD_MUSL = "prebuilds/linux-x64/node.napi.musl.node"
# Each prebuild, the machine readelf names, and its C library.
PREBUILDS = [(PREBUILD, "X86-64", "glibc"), (PREBUILD_ARM64, "AArch64", "glibc"),
             (PREBUILD_MUSL, "X86-64", "musl")]
# The Debian packages of Node 18 (the cache survives between runs, in the
# build directory; the unpacked files do not).
DEB_CACHE = os.path.join(harness.BUILD, "debian-node18")
DEB_CACHE_ARM64 = os.path.join(harness.BUILD, "debian-node18-arm64")
# musl's libc and dynamic linker as Debian's musl package installs them.
MUSL_LIBC = "/usr/lib/x86_64-linux-musl/libc.so"
# The names a prebuild leaves for the node process to provide (Node-API,
# libuv, OpenSSL); every other undefined name must come from libc.
NODE_PROVIDES = re.compile(
    r"^(napi_|uv_|SSL_|SSL$|OPENSSL_|ERR_|X509|PEM_|BIO_|EVP_|TLS_|d2i_|"
    r"i2d_|ASN1_|GENERAL_NAME|CRYPTO_)")
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
                or proc.poll() is not None, timeout=240)
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
                  "index.mjs", "index.d.ts", "index.d.mts", "lib/limiter.js",
                  "lib/middleware.js", "lib/defaults.js", "src/addon.c",
                  "src/addon.h", "src/local.c", "src/redis.c",
                  "scripts/build.js", PREBUILD, PREBUILD_ARM64,
                  PREBUILD_MUSL, "deps/sluice/sources.json",
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
        self.assertEqual(pkg["exports"]["."]["require"],
                         {"types": "./index.d.ts", "default": "./index.js"})
        self.assertEqual(pkg["exports"]["."]["import"],
                         {"types": "./index.d.mts", "default": "./index.mjs"})
        # Any system that can build from source may install it: only
        # Windows (no POSIX) is refused up front.
        self.assertEqual(pkg["os"], ["!win32"])
        self.assertNotIn("cpu", pkg)
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

    def extract(self, member, name):
        """Extracts one file of the tarball; returns its path."""
        tmp = os.path.join(self.tmp, name)
        os.makedirs(tmp, exist_ok=True)
        with tarfile.open(self.tarball) as t:
            t.extract("package/" + member, tmp)
        return os.path.join(tmp, "package", member)

    def test_prebuilds_fit_their_machine_and_need_only_libc(self):
        for member, machine, libc in PREBUILDS:
            with self.subTest(member):
                f = self.extract(member, "unpacked-readelf")
                head = run(["readelf", "-h", f], self.tmp).stdout
                self.assertRegex(head, r"Machine:\s+.*" + machine)
                out = run(["readelf", "-d", f], self.tmp).stdout
                needed = re.findall(r"\(NEEDED\).*\[(.+)\]", out)
                self.assertEqual([n for n in needed if not re.match(
                    r"(libc|libm)\.so(\.|$)|ld-linux", n)], [], needed)
                self.assertIn("BIND_NOW", out)
                syms = run(["readelf", "-W", "--dyn-syms", f],
                           self.tmp).stdout
                if libc == "glibc":
                    # Debian 12 builds it; it must load on glibc 2.34
                    # (Ubuntu 22.04, RHEL 9).
                    versions = set(re.findall(r"@GLIBC_([\d.]+)", syms))
                    newest = max(versions, key=lambda v: tuple(
                        int(x) for x in v.split(".")))
                    self.assertLessEqual(
                        tuple(int(x) for x in newest.split(".")), (2, 34),
                        versions)
                    # The Linux side of the platform guard: the shared
                    # store's robust mutexes are compiled in.
                    self.assertIn("pthread_mutex_consistent", syms)

    def test_musl_prebuild_binds_no_glibc_symbol_and_loads_under_musl(self):
        f = self.extract(PREBUILD_MUSL, "unpacked-musl")
        out = run(["readelf", "-d", "-V", "-W", "--dyn-syms", f],
                  self.tmp).stdout
        self.assertNotIn("GLIBC", out)
        self.assertEqual(re.findall(r"\(NEEDED\).*\[(.+)\]", out),
                         ["libc.so"])
        if not shutil.which("musl-gcc") or not os.path.exists(MUSL_LIBC):
            self.skipTest("musl-tools is missing (scripts/deps)")
        # A musl program that provides what node would (the Node-API,
        # libuv and OpenSSL names, as empty functions) and loads the
        # addon with every symbol bound at once (RTLD_NOW): whatever else
        # it needs must be in musl's libc.
        libc = set(re.findall(r"^\S*\s+[A-Za-z]\s+(\S+)$", run(
            ["nm", "-D", "--defined-only", MUSL_LIBC], self.tmp).stdout,
            re.M))
        undefined = re.findall(r"^\s+U (\S+)$", run(
            ["nm", "-D", "--undefined-only", f], self.tmp).stdout, re.M)
        stubs = sorted(set(undefined) - libc)
        self.assertEqual([n for n in stubs if not NODE_PROVIDES.match(n)],
                         [], "names neither musl nor node provides")
        self.assertIn("napi_create_function", stubs)
        host = os.path.join(self.tmp, "musl-host")
        with open(host + ".c", "w") as c:
            c.write("#include <dlfcn.h>\n#include <stdio.h>\n")
            for n in stubs:
                c.write("void %s(void) {}\n" % n)
            c.write('int main(int argc, char **argv) {\n'
                    '  void *h = dlopen(argv[1], RTLD_NOW);\n'
                    '  if (!h) { printf("%s\\n", dlerror()); return 1; }\n'
                    '  printf("loaded %d\\n", '
                    'dlsym(h, "napi_register_module_v1") != NULL);\n'
                    '  return 0;\n}\n')
        run(["musl-gcc", "-rdynamic", "-o", host, host + ".c"], self.tmp)
        out = run([host, f], self.tmp, env=plain_env(), check=False)
        self.assertEqual((out.returncode, out.stdout.strip()),
                         (0, "loaded 1"), out.stdout + out.stderr)
        # The same loader refuses the glibc build: the check can fail.
        out = run([host, self.extract(PREBUILD, "unpacked-musl")], self.tmp,
                  env=plain_env(), check=False)
        self.assertNotEqual(out.returncode, 0, out.stdout)

    def napi_host(self, cc, addon, name):
        """tests/integration/napi_host.c built with `cc` (a list) against the
        Node-API headers the tarball carries, with a stub that aborts for
        every other name the addon leaves to node; its output on addon."""
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        inc = os.path.dirname(self.extract("deps/include/node_api.h", name))
        for h in ("js_native_api.h", "js_native_api_types.h",
                  "node_api_types.h"):
            self.extract("deps/include/" + h, name)
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "napi_host.c")
        run(cc + ["-std=c11", "-Wall", "-Wextra", "-Werror",
                  "-Wno-unused-parameter", "-I", inc, "-c", src, "-o",
                  "host.o"], d)
        defined = set(re.findall(r"^\S+\s+T (\S+)$", run(
            ["nm", "--defined-only", "host.o"], d).stdout, re.M))
        wanted = set(re.findall(r"^\s+U (\S+)$", run(
            ["nm", "-D", "--undefined-only", addon], d).stdout, re.M))
        stubs = sorted(n for n in wanted - defined if NODE_PROVIDES.match(n))
        self.assertIn("uv_timer_start", stubs)
        with open(os.path.join(d, "stubs.c"), "w") as c:
            c.write("#include <stdio.h>\n#include <stdlib.h>\n")
            for n in stubs:
                c.write('void %s(void) { puts("stub %s called"); exit(4); }\n'
                        % (n, n))
        run(cc + ["-w", "-c", "stubs.c", "-o", "stubs.o"], d)
        run(cc + ["-rdynamic", "-o", "host", "host.o", "stubs.o", "-ldl"], d)
        interp = re.search(r"interpreter: (\S+?)\]", run(
            ["readelf", "-l", "host"], d).stdout)
        self.assertIsNotNone(interp)
        self.assertEqual("ld-musl" in interp.group(1), cc == ["musl-gcc"],
                         interp.group(1))
        out = run([os.path.join(d, "host"), addon], d, env=plain_env(),
                  check=False)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        return out.stdout.splitlines()

    def test_musl_prebuild_decides_on_musl_as_the_glibc_one_on_glibc(self):
        # No musl node is packaged here: a host of its own runs the musl
        # prebuild's policy, memory store and decisions on musl's libc,
        # through the same Node-API calls node would make.
        if not shutil.which("musl-gcc") or not os.path.exists(MUSL_LIBC):
            self.skipTest("musl-tools is missing (scripts/deps)")
        musl = self.napi_host(["musl-gcc"], self.extract(
            PREBUILD_MUSL, "host-musl"), "host-musl")
        glibc = self.napi_host(["cc"], self.extract(
            PREBUILD, "host-glibc"), "host-glibc")
        self.assertEqual(musl, glibc)
        self.assertEqual(musl[0], "window 50")
        takes = [l.split() for l in musl[1:105]]
        # A bucket of 100 at one instant: 100 allowed, remaining counting
        # down, then refused with the wait for one token (2/s: 500 ms).
        self.assertEqual([t[0] for t in takes[:102]], ["1"] * 100 + ["0"] * 2)
        self.assertEqual(takes[0], ["1", "100", "99", "0", "500", "0"])
        self.assertEqual(takes[99], ["1", "100", "0", "0", "50000", "0"])
        self.assertEqual(takes[100], ["0", "100", "0", "500", "50000", "0"])
        # 499 ms later still refused (1 ms to wait), at 500 ms allowed.
        self.assertEqual(takes[102][:4], ["0", "100", "0", "1"])
        self.assertEqual(takes[103][:3], ["1", "100", "0"])
        # A key that is neither a string nor a Buffer: the addon refuses it.
        self.assertTrue(musl[105].startswith("Error ERR_SLUICE_NAPI"), musl)

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
        env["SLUICE_BUILD_FROM_SOURCE"] = "1"
        app = self.app_dir("app-source")
        out = npm(["install", "--prefer-offline", "--foreground-scripts",
                   self.tarball, "express@4"], app, env)
        self.assertIn("building the addon from source", out.stdout + out.stderr)
        # sluice's own switch draws no "Unknown env config" from npm 11.
        self.assertNotIn("Unknown", out.stdout + out.stderr)
        mod = os.path.join(app, "node_modules", "sluice")
        with open(os.path.join(mod, "build", "sluice.node"), "rb") as a, \
                open(os.path.join(mod, PREBUILD), "rb") as b:
            self.assertNotEqual(a.read(), b.read())
        self.check_app([shutil.which("node"), "app.js"], app, env)

    def test_the_from_source_switches(self):
        f = self.extract("scripts/build.js", "unpacked-switch")
        probe = ("const b = require(process.argv[1]);"
                 "console.log(JSON.stringify(JSON.parse(process.argv[2])"
                 ".map((e) => b.fromSourceAsked([], e))))")
        cases = [({}, False),
                 ({"SLUICE_BUILD_FROM_SOURCE": "1"}, True),
                 ({"SLUICE_BUILD_FROM_SOURCE": "0"}, False),
                 ({"npm_config_build_from_source": "true"}, True),
                 ({"npm_config_build_from_source": "sqlite3,sluice"}, True),
                 ({"npm_config_build_from_source": "sqlite3"}, False),
                 ({"npm_config_build_from_source": "false"}, False)]
        out = run(["node", "-e", probe, f, json.dumps([c for c, _ in cases])],
                  self.tmp)
        self.assertEqual(json.loads(out.stdout), [w for _, w in cases])

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

    def test_debian_arm64_node_under_qemu(self):
        root = self.debian_arm64_node()
        qemu = [shutil.which("qemu-aarch64"), "-L", root,
                os.path.join(root, "usr", "bin", "node")]
        app = self.app_dir("app-arm64")
        npm(["install", "--prefer-offline", "--ignore-scripts", self.tarball,
             "express@4"], app, self.tools_env())
        mod = os.path.join(app, "node_modules", "sluice")
        env = self.tools_env()
        out = run(qemu + ["-p", "process.arch + ' ' + process.version"], app,
                  env)
        self.assertRegex(out.stdout, r"^arm64 v18\.")
        # The install script, as npm runs it on an arm64 machine, installs
        # the arm64 prebuild with no compiler.  (Not left to the first
        # require: that starts process.execPath, an arm64 program the
        # kernel here runs only through qemu.)
        out = run(qemu + ["scripts/build.js"], mod, env)
        self.assertIn("installed the prebuilt " + PREBUILD_ARM64, out.stdout)
        line = self.check_app(qemu + ["app.js"], app, env)
        self.assertIn("node v18.", line)
        with open(os.path.join(mod, "build", "sluice.node"), "rb") as a, \
                open(os.path.join(mod, PREBUILD_ARM64), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.check_app(qemu + ["app.mjs"], app, env)
        # The package's core tests on that binary: the addon's decisions
        # equal the C core's (sluice_replay_core, built natively) over
        # random sequences, all-or-nothing policies, keys, bounds.  Run
        # as a file (Node 18's --test would start each file in a child
        # node, which the kernel cannot run without binfmt_misc).
        suite = os.path.join(self.tmp, "suite", "bindings", "node")
        shutil.copytree(os.path.join(PKG, "test"), os.path.join(suite, "test"))
        for f in ("package.json", "index.js", "index.mjs"):
            shutil.copy(os.path.join(PKG, f), suite)
        shutil.copytree(os.path.join(PKG, "lib"), os.path.join(suite, "lib"))
        os.mkdir(os.path.join(suite, "build"))
        shutil.copy(os.path.join(mod, PREBUILD_ARM64),
                    os.path.join(suite, "build", "sluice.node"))
        os.symlink(os.path.join(PKG, "node_modules"),
                   os.path.join(suite, "node_modules"))
        env = dict(plain_env(), SLUICE_BUILD=harness.BUILD)
        out = run(qemu + ["test/core.test.js"], suite, env, timeout=900,
                  check=False)
        self.assertEqual(out.returncode, 0, out.stdout[-6000:] + out.stderr[-3000:])
        self.assertRegex(out.stdout, r"(?m)^# pass [1-9]")
        self.assertRegex(out.stdout, r"(?m)^# fail 0$")

    def test_types_pass_arethetypeswrong(self):
        attw = os.path.join(PKG, "node_modules", "@arethetypeswrong", "cli",
                            "dist", "index.js")
        self.assertTrue(os.path.exists(attw), "npm ci in bindings/node")
        out = run(["node", attw, "--format", "json", self.tarball], self.tmp,
                  check=False)
        report = json.loads(out.stdout)
        analysis = report["analysis"]
        self.assertEqual(analysis["problems"], [], out.stdout[-3000:])
        res = analysis["entrypoints"]["."]["resolutions"]
        for kind in ("node10", "node16-cjs", "node16-esm", "bundler"):
            self.assertIn(kind, res)
            self.assertTrue(res[kind]["resolution"]["isTypeScript"], kind)
        # node16 from an ES module reads ES module types (not index.d.ts,
        # which is CommonJS: "Masquerading as CJS").
        self.assertTrue(res["node16-esm"]["resolution"]["fileName"]
                        .endswith("index.d.mts"))
        self.assertEqual(out.returncode, 0)

    def test_typescript_users_compile_under_nodenext(self):
        app = self.app_dir("app-ts")
        npm(["install", "--prefer-offline", "--ignore-scripts", self.tarball],
            app, self.tools_env())
        with open(os.path.join(app, "use.mts"), "w") as f:
            f.write("import sluice, { Limiter, policy } from 'sluice';\n"
                    "const l: Limiter = new sluice.Limiter({ store: 'memory' });\n"
                    "const d = await l.take('k', policy({ capacity: 1, rate: '1/s' }));\n"
                    "const ok: boolean = d.allowed;\n"
                    "// @ts-expect-error: a policy needs a capacity\n"
                    "policy({ rate: '1/s' });\n"
                    "export { ok };\n")
        with open(os.path.join(app, "use.cts"), "w") as f:
            f.write("import sluice = require('sluice');\n"
                    "const p: sluice.Policy = sluice.policy({ capacity: 1, rate: 1 });\n"
                    "export = p;\n")
        with open(os.path.join(app, "tsconfig.json"), "w") as f:
            json.dump({"compilerOptions": {
                "strict": True, "noEmit": True, "module": "nodenext",
                "moduleResolution": "nodenext", "target": "es2022",
                "types": ["node"], "typeRoots": [os.path.join(PKG, "node_modules",
                                                         "@types")]},
                "files": ["use.mts", "use.cts"]}, f)
        # @types/node from bindings/node's devDependencies.
        os.symlink(os.path.join(PKG, "node_modules", "@types"),
                   os.path.join(app, "node_modules", "@types"))
        tsc = os.path.join(PKG, "node_modules", "typescript", "bin", "tsc")
        out = run(["node", tsc, "-p", app], app, check=False)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_publish_dry_run_is_clean(self):
        # No credentials are needed for a dry run, but npm warns when it
        # finds none: a token for a registry on a closed loopback port
        # that nothing is sent to.
        rc = os.path.join(self.tmp, "npmrc-publish")
        with open(rc, "w") as f:
            f.write("//127.0.0.1:9/:_authToken=dry-run\n")
        env = dict(self.tools_env(), npm_config_userconfig=rc)
        out = run([shutil.which("npm"), "publish", "--dry-run", "--json",
                   "--registry", "http://127.0.0.1:9/", self.tarball],
                  self.tmp, env)
        self.assertNotIn("warn", out.stderr.lower(), out.stderr)
        info = json.loads(out.stdout)
        info = info.get("sluice", info)
        self.assertEqual(info["name"], "sluice")
        files = [f["path"] for f in info["files"]]
        allowed = re.compile(r"^(package\.json|README\.md|LICENSE|"
                             r"index\.(js|mjs|d\.ts|d\.mts)|lib/[^/]+\.js|"
                             r"src/[^/]+\.[ch]|"
                             r"scripts/build\.js|deps/.+|prebuilds/.+)$")
        self.assertEqual([f for f in files if not allowed.match(f)], [])
        self.assertEqual(sorted(f for f in files if f.startswith("prebuilds/")),
                         sorted(m for m, _, _ in PREBUILDS))

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

    def debian_arm64_node(self):
        """Debian 12's arm64 Node 18 with every arm64 library it loads
        (libc6 included) unpacked into a folder of its own, for
        `qemu-aarch64 -L folder`; returns that folder."""
        for t in ("apt-get", "apt-cache", "dpkg-deb", "qemu-aarch64"):
            if not shutil.which(t):
                self.skipTest("%s is missing (scripts/deps)" % t)
        arches = run(["dpkg", "--print-foreign-architectures"],
                     self.tmp).stdout.split()
        self.assertIn("arm64", arches, "scripts/deps adds arm64 to dpkg")

        def versions():
            madison = run(["apt-cache", "madison", "nodejs:arm64"],
                          self.tmp).stdout
            return madison, re.findall(
                r"^\s*nodejs:arm64\s*\|\s*(18\.[^\s|]+)", madison, re.M)

        madison, found = versions()
        if not found:  # lists read before arm64 was added
            run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq"],
                self.tmp, timeout=600)
            madison, found = versions()
        self.assertTrue(found, "apt knows no arm64 Node 18:\n" + madison)
        v = found[0]
        want = {"nodejs:arm64=" + v, "libnode108:arm64=" + v,
                # libstdc++6's, as libc6's.
                "libgcc-s1:arm64"}
        deps = run(["apt-cache", "depends", "libnode108:arm64=" + v,
                    "nodejs:arm64=" + v], self.tmp).stdout
        want |= set(re.findall(r"^\s*Depends: ([^\s<>]+:arm64)$", deps, re.M))
        want = sorted(want) + DEB_NODE_SHARED
        os.makedirs(DEB_CACHE_ARM64, exist_ok=True)

        def cached(w):
            name, _, version = w.partition("=")
            name, _, arch = name.partition(":")
            prefix = name + "_" + version.replace(":", "%3a")
            suffix = "_%s.deb" % (arch or "all")
            debs = sorted(f for f in os.listdir(DEB_CACHE_ARM64)
                          if f.startswith(prefix) and f.endswith(suffix)
                          and (version or f.count("_") == 2))
            return os.path.join(DEB_CACHE_ARM64, debs[-1]) if debs else None

        missing = [w for w in want if not cached(w)]
        if missing:
            run(["apt-get", "download"] + missing, DEB_CACHE_ARM64,
                timeout=600)
        root = os.path.join(self.tmp, "node18-arm64")
        for w in want:
            deb = cached(w)
            self.assertTrue(deb, "apt-get download %s left no .deb" % w)
            run(["dpkg-deb", "-x", deb, root], self.tmp)
        return root


if __name__ == "__main__":
    unittest.main(verbosity=2)
