#!/usr/bin/env python3
"""`make install` as an operator runs it, staged under DESTDIR.

One optimised build (its own build folder, PREFIX /usr/local, DESTDIR a
temporary folder), then, against the installed files only:
- the shared libraries export exactly the functions their headers mark
  SLUICE_API, carry SONAME libsluice*.so.<major>, and libsluice needs
  neither libuv nor hiredis;
- a C program built with `pkg-config --cflags --libs sluice` (core only:
  no libuv/hiredis on its link line) runs, shared and static;
- a program using the Redis store builds with `pkg-config sluice-redis`;
- the installed `sluice --version` prints SLUICE_VERSION (which is also the
  Debian package version), `sluice check-config` accepts the installed
  example config;
- the installed Redis module loads into a real redis-server and answers
  SLUICE.TAKE;
- the installed man pages are groff -ww clean; the systemd unit passes
  `systemd-analyze verify` where systemd-analyze exists.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))
PREFIX = "/usr/local"

PROGRAM = r"""
#include <sluice.h>
#include <stdio.h>

int main(void)
{
	sluice_limit_t limit;
	sluice_decision_t d;
	sluice_memstore_t *store;
	char err[128];
	int i, allowed = 0;

	if (sluice_limit_parse(&limit, "3", "1/min", err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	sluice_memstore_open(&store, 16, NULL, 0);
	if (!store)
		return 1;
	for (i = 0; i < 5; i++)
		allowed += sluice_memstore_take(store, "k", 1, &limit, 1, 1,
						1000000, NULL, &d) == 1;
	printf("%s allowed=%d remaining=%llu\n", SLUICE_VERSION, allowed,
	       (unsigned long long)d.remaining);
	sluice_memstore_free(store);
	return 0;
}
"""

REDIS_PROGRAM = r"""
#include <sluice_redis.h>
#include <stdio.h>

int main(void)
{
	uv_loop_t loop;
	sluice_redis_opts_t opts = {.url = "redis://127.0.0.1:1"};
	sluice_redis_t *r;
	char err[128];

	uv_loop_init(&loop);
	if (sluice_redis_open(&r, &loop, &opts, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	sluice_redis_free(r);
	uv_run(&loop, UV_RUN_DEFAULT);
	printf("ok\n");
	return uv_loop_close(&loop) != 0;
}
"""


def run(argv, env=None, cwd=None, timeout=900):
    p = subprocess.run(argv, capture_output=True, text=True, env=env,
                       cwd=cwd, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (
            " ".join(argv), p.returncode, p.stdout[-4000:], p.stderr[-4000:]))
    return p.stdout


def header_api(path):
    """The function names a header marks SLUICE_API."""
    with open(path) as f:
        text = f.read()
    return set(re.findall(r"^SLUICE_API\s[^;(]*?\b(sluice_\w+)\(", text,
                          re.M))


def header_unmarked(path):
    """Function declarations at the start of a line without SLUICE_API (a
    public function the shared library would keep hidden)."""
    with open(path) as f:
        text = f.read()
    return re.findall(r"^(?!SLUICE_API|typedef|static|#)[a-z][\w ]*?\**"
                      r"\b(sluice_\w+)\(", text, re.M)


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sluice-install-")
        cls.root = os.path.join(cls.tmp, "root")
        build = os.path.join(cls.tmp, "build")
        # The sanitizer flags of the test build must not leak into an
        # ordinary build: a clean environment for make and the compiler.
        env = {k: v for k, v in os.environ.items()
               if k not in ("CFLAGS", "LDFLAGS", "ASAN_OPTIONS",
                            "UBSAN_OPTIONS")}
        run(["make", "-C", SRC, "install", "BUILD=" + build,
             "PREFIX=" + PREFIX, "DESTDIR=" + cls.root, "JOBS=2"], env=env)
        cls.prefix = cls.root + PREFIX
        cls.libdir = os.path.join(cls.prefix, "lib")
        cls.env = dict(env, LD_LIBRARY_PATH=cls.libdir,
                       PKG_CONFIG_PATH=os.path.join(cls.libdir, "pkgconfig"),
                       PKG_CONFIG_SYSROOT_DIR=cls.root)
        with open(os.path.join(SRC, "include", "sluice.h")) as f:
            cls.version = re.search(r'#define SLUICE_VERSION "([^"]+)"',
                                    f.read()).group(1)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.prefix, *parts)

    def pkgconfig(self, *args):
        return run(["pkg-config"] + list(args), env=self.env).split()

    def test_layout(self):
        major = self.version.split(".")[0]
        for rel in ["bin/sluice", "include/sluice.h", "include/sluice_redis.h",
                    "lib/libsluice.a", "lib/libsluice-redis.a",
                    "lib/libsluice.so.%s" % self.version,
                    "lib/libsluice-redis.so.%s" % self.version,
                    "lib/pkgconfig/sluice.pc", "lib/pkgconfig/sluice-redis.pc",
                    "lib/redis/modules/sluice.so",
                    "share/man/man1/sluice.1", "share/man/man5/sluice.yaml.5",
                    "share/man/man7/sluice-redis.7",
                    "share/doc/sluice/sluice.yaml"]:
            self.assertTrue(os.path.isfile(self.path(rel)), rel)
        for lib in ("libsluice", "libsluice-redis"):
            self.assertEqual(os.readlink(self.path("lib", lib + ".so")),
                             "%s.so.%s" % (lib, major))
            dyn = run(["readelf", "-d", self.path("lib", lib + ".so")])
            self.assertIn("Library soname: [%s.so.%s]" % (lib, major), dyn)
        # The module must stay executable: Redis 7 refuses it otherwise.
        self.assertTrue(os.access(self.path("lib/redis/modules/sluice.so"),
                                  os.X_OK))

    def test_exports_only_the_api(self):
        for lib, headers in (("libsluice.so", ("sluice.h",
                                               "sluice_reserve.h",
                                               "sluice_quota.h")),
                             ("libsluice-redis.so", ("sluice_redis.h",))):
            out = run(["nm", "-D", "--defined-only", self.path("lib", lib)])
            names = {line.split()[-1] for line in out.splitlines()
                     if line.strip()}
            api = set()
            for header in headers:
                got = header_api(self.path("include", header))
                self.assertTrue(got, header)
                api |= got
                self.assertEqual(
                    header_unmarked(self.path("include", header)), [],
                    "declared without SLUICE_API in " + header)
            self.assertEqual(names, api, "%s exports %s, lacks %s" % (
                lib, sorted(names - api), sorted(api - names)))
        needed = run(["readelf", "-d", self.path("lib", "libsluice.so")])
        self.assertNotIn("libuv", needed)
        self.assertNotIn("hiredis", needed)

    def test_core_program_links_with_pkg_config_only(self):
        cflags = self.pkgconfig("--cflags", "sluice")
        libs = self.pkgconfig("--libs", "sluice")
        line = " ".join(cflags + libs)
        self.assertNotIn("uv", line)
        self.assertNotIn("hiredis", line)
        src = os.path.join(self.tmp, "prog.c")
        with open(src, "w") as f:
            f.write(PROGRAM)
        want = "%s allowed=3 remaining=0\n" % self.version
        exe = os.path.join(self.tmp, "prog")
        run(["cc", "-Wall", "-Werror", src, "-o", exe] + cflags + libs,
            env=self.env)
        self.assertEqual(run([exe], env=self.env), want)
        needed = run(["readelf", "-d", exe])
        self.assertIn("[libsluice.so.", needed)
        self.assertNotIn("libuv", needed)
        # Static: libsluice.a and what Libs.private says it needs.
        static = [a for a in self.pkgconfig("--static", "--libs", "sluice")
                  if a != "-lsluice"]
        exe_static = exe + "-static"
        run(["cc", "-Wall", "-Werror", src, "-o", exe_static] + cflags +
            [self.path("lib", "libsluice.a")] + static, env=self.env)
        self.assertEqual(run([exe_static], env={}), want)

    def test_redis_store_program_links_with_pkg_config(self):
        src = os.path.join(self.tmp, "prog_redis.c")
        with open(src, "w") as f:
            f.write(REDIS_PROGRAM)
        exe = os.path.join(self.tmp, "prog_redis")
        run(["cc", "-Wall", "-Werror", src, "-o", exe] +
            self.pkgconfig("--cflags", "--libs", "sluice-redis"),
            env=self.env)
        self.assertEqual(run([exe], env=self.env), "ok\n")
        self.assertIn("[libsluice-redis.so.", run(["readelf", "-d", exe]))

    def test_program_version_and_example_config(self):
        sluice = self.path("bin", "sluice")
        self.assertEqual(run([sluice, "--version"], env=self.env),
                         "sluice %s\n" % self.version)
        example = self.path("share/doc/sluice/sluice.yaml")
        self.assertEqual(run([sluice, "check-config", example], env=self.env),
                         "%s: ok\n" % example)
        # The Debian package carries the same version.
        with open(os.path.join(SRC, "debian", "changelog")) as f:
            first = f.readline()
        self.assertTrue(first.startswith("sluice (%s" % self.version), first)

    def test_module_loads_into_redis(self):
        if not shutil.which("redis-server"):
            self.skipTest("no redis-server")
        module = self.path("lib/redis/modules/sluice.so")
        # Up once it answers PING (its own "Ready" line first; a port
        # taken meanwhile is chosen again).
        with harness.RedisServer(extra=["--loadmodule", module]) as redis:
            cli = ["redis-cli", "-p", str(redis.port)]
            self.assertIsNone(redis.poll(), redis.log())
            out = run(cli + ["SLUICE.TAKE", "k", "2", "1/min"]).split()
            self.assertEqual(out[:3], ["1", "2", "1"])
            run(cli + ["SLUICE.TAKE", "k", "2", "1/min"])
            out = run(cli + ["SLUICE.TAKE", "k", "2", "1/min"]).split()
            self.assertEqual(out[:3], ["0", "2", "0"])

    def test_man_pages_are_clean(self):
        for rel in ["share/man/man1/sluice.1", "share/man/man5/sluice.yaml.5",
                    "share/man/man7/sluice-redis.7"]:
            p = subprocess.run(["groff", "-ww", "-man", "-Tutf8",
                                self.path(rel)], capture_output=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, rel)
            self.assertEqual(p.stderr, b"", rel)
            self.assertGreater(len(p.stdout), 1000, rel)
            with open(self.path(rel)) as f:
                self.assertIn('"sluice %s"' % self.version, f.readline())

    def test_systemd_unit_verifies(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("no systemd-analyze")
        with open(os.path.join(SRC, "packaging", "sluice.service")) as f:
            unit = f.read()
        for want in ("DynamicUser=yes", "NoNewPrivileges=yes",
                     "ProtectSystem=strict", "ProtectHome=yes",
                     "PrivateTmp=yes", "RestrictAddressFamilies=",
                     "Restart=on-failure",
                     "ExecReload=/bin/kill -HUP $MAINPID",
                     "ExecStart=/usr/bin/sluice serve -c "
                     "/etc/sluice/sluice.yaml"):
            self.assertIn(want, unit)
        # Verified against the installed program (not yet in /usr/bin).
        unit = unit.replace("/usr/bin/sluice", self.path("bin", "sluice"))
        path = os.path.join(self.tmp, "sluice.service")
        with open(path, "w") as f:
            f.write(unit)
        p = subprocess.run(["systemd-analyze", "verify", "--man=no", path],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr.strip(), "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
