#!/usr/bin/env python3
"""`make deb`: Debian packages built with dpkg-buildpackage from the tree.

Checks each package's contents (dpkg-deb --contents), that the config in
/etc/sluice is a conffile and the unit is installed, and that lintian
reports no errors.  Needs debhelper and lintian (scripts/deps installs
them); skipped where dpkg-buildpackage is missing (not a Debian system).
"""
import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(HERE)))

EXPECTED = {
    "sluice": ["./usr/bin/sluice", "./etc/sluice/sluice.yaml",
               "./lib/systemd/system/sluice.service",
               "./usr/share/man/man1/sluice.1.gz",
               "./usr/share/man/man5/sluice.yaml.5.gz",
               "./usr/share/doc/sluice/copyright"],
    "libsluice{major}": ["./usr/lib/{arch}/libsluice.so.{version}",
                         "./usr/lib/{arch}/libsluice.so.{major}"],
    "libsluice-redis{major}": [
        "./usr/lib/{arch}/libsluice-redis.so.{version}",
        "./usr/lib/{arch}/libsluice-redis.so.{major}"],
    "libsluice-dev": ["./usr/include/sluice.h", "./usr/include/sluice_redis.h",
                      "./usr/lib/{arch}/libsluice.so",
                      "./usr/lib/{arch}/libsluice.a",
                      "./usr/lib/{arch}/libsluice-redis.so",
                      "./usr/lib/{arch}/libsluice-redis.a",
                      "./usr/lib/{arch}/pkgconfig/sluice.pc",
                      "./usr/lib/{arch}/pkgconfig/sluice-redis.pc"],
    "sluice-redis-module": ["./usr/lib/redis/modules/sluice.so",
                            "./usr/share/man/man7/sluice-redis.7.gz"],
    # As Debian's libnginx-mod-* (dh_nginx): the module, its load file.
    "libnginx-mod-http-sluice": [
        "./usr/lib/nginx/modules/ngx_http_sluice_module.so",
        "./usr/share/nginx/modules-available/mod-http-sluice.conf"],
}


def run(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (
            " ".join(argv), p.returncode, p.stdout[-4000:], p.stderr[-4000:]))
    return p.stdout


@unittest.skipUnless(shutil.which("dpkg-buildpackage") and
                     shutil.which("dh"), "no dpkg-buildpackage / debhelper")
class DebTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sluice-deb-")
        env = {k: v for k, v in os.environ.items()
               if k not in ("CFLAGS", "LDFLAGS", "ASAN_OPTIONS",
                            "UBSAN_OPTIONS")}
        run(["make", "-C", SRC, "deb", "DEB_BUILD=" + cls.tmp, "JOBS=2"],
            env=env, timeout=900)
        with open(os.path.join(SRC, "include", "sluice.h")) as f:
            cls.version = re.search(r'#define SLUICE_VERSION "([^"]+)"',
                                    f.read()).group(1)
        cls.major = cls.version.split(".")[0]
        cls.arch = run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"]).strip()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def deb(self, name):
        found = glob.glob(os.path.join(self.tmp, "%s_*.deb" % name))
        self.assertEqual(len(found), 1, (name, os.listdir(self.tmp)))
        return found[0]

    def test_contents(self):
        for pkg, paths in EXPECTED.items():
            name = pkg.format(major=self.major)
            deb = self.deb(name)
            self.assertIn("_%s_" % self.version, os.path.basename(deb))
            listing = run(["dpkg-deb", "--contents", deb])
            have = {line.split()[5] for line in listing.splitlines()}
            for p in paths:
                p = p.format(arch=self.arch, version=self.version,
                             major=self.major)
                self.assertIn(p, have, name)
        # Redis 7 loads only an executable module file.
        listing = run(["dpkg-deb", "--contents",
                       self.deb("sluice-redis-module")])
        line = [x for x in listing.splitlines() if "sluice.so" in x][0]
        self.assertTrue(line.startswith("-rwxr-xr-x"), line)

    def test_conffile_and_depends(self):
        conffiles = run(["dpkg-deb", "--info", self.deb("sluice"),
                         "conffiles"])
        self.assertIn("/etc/sluice/sluice.yaml", conffiles)
        # The core library needs neither libuv nor hiredis.
        depends = run(["dpkg-deb", "--field",
                       self.deb("libsluice" + self.major), "Depends"])
        self.assertNotIn("libuv", depends)
        self.assertNotIn("hiredis", depends)

    def test_nginx_module_is_enabled_as_debian_enables_its_own(self):
        deb = self.deb("libnginx-mod-http-sluice")
        depends = run(["dpkg-deb", "--field", deb, "Depends"])
        self.assertIn("nginx-abi-", depends)
        d = tempfile.mkdtemp(prefix="sluice-deb-ctl-", dir=self.tmp)
        run(["dpkg-deb", "-e", deb, d])
        with open(os.path.join(d, "postinst")) as f:
            postinst = f.read()
        self.assertIn("mod-http-sluice.conf:50-mod-http-sluice.conf",
                      postinst)
        self.assertIn("/etc/nginx/modules-enabled", postinst)
        run(["dpkg-deb", "-x", deb, d])
        with open(os.path.join(d, "usr/share/nginx/modules-available",
                               "mod-http-sluice.conf")) as f:
            self.assertEqual(f.read(), "load_module modules/"
                             "ngx_http_sluice_module.so;\n")

    def test_lintian_reports_no_errors(self):
        if not shutil.which("lintian"):
            self.skipTest("no lintian")
        changes = glob.glob(os.path.join(self.tmp, "*.changes"))
        self.assertEqual(len(changes), 1)
        p = subprocess.run(["lintian", "--fail-on", "error"] + changes,
                           capture_output=True, text=True, timeout=600)
        errors = [x for x in p.stdout.splitlines() if x.startswith("E:")]
        self.assertEqual(errors, [])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
