#!/usr/bin/env python3
"""The Node addon as macOS and the BSDs build it, built and run on Linux.

src/util/platform.h is the one guard over what only Linux has (the
shared-memory store's robust mutexes, getrandom(), SOCK_NONBLOCK at
socket(), MADV_HUGEPAGE).  Building with SLUICE_PORTABLE=1 takes the other
side here, so that side is compiled (warnings as errors, as for a prebuild)
and tested in `make test`:

1. the binary binds none of the Linux-only calls, and does bind the
   portable ones (getentropy, fcntl);
2. the memory store limits;
3. the Redis store, over sockets made the portable way, limits against a
   real redis-server;
4. the shared-memory store is refused with a message that says why and
   what to use, and leaves no file behind.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

PKG = os.path.join(harness.SRC, "bindings", "node")

BUILD = r"""
const build = require(process.argv[1] + '/scripts/build.js');
const prepack = require(process.argv[1] + '/scripts/prepack.js');
prepack.collect(build.checkoutRoot());
build.compile(process.argv[2], { strict: true, portable: true })
  .catch((e) => { console.error(e.message); process.exit(1); });
"""

CHECK = r"""
const sluice = require(process.argv[1]);
const fs = require('node:fs');
(async () => {
  const p = sluice.policy({ capacity: 2, rate: '1/min' }, { name: 'portable' });
  const out = {};
  const mem = new sluice.Limiter({ store: 'memory' });
  out.memory = [];
  for (let i = 0; i < 3; i++) out.memory.push((await mem.take('k', p)).allowed);
  const redis = new sluice.Limiter({ store: { redis: { url: process.argv[2], timeoutMs: 5000 } } });
  out.redis = [];
  for (let i = 0; i < 3; i++) out.redis.push((await redis.take('k', p)).allowed);
  await redis.close();
  try {
    new sluice.Limiter({ store: { shared: { path: process.argv[3] } } });
    out.shared = 'opened';
  } catch (e) {
    out.shared = e.message;
  }
  out.sharedFile = fs.existsSync(process.argv[3]);
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e.stack); process.exit(1); });
"""


def plain_env():
    return {k: v for k, v in os.environ.items()
            if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LD_PRELOAD")}


def run(argv, cwd, timeout=600):
    out = subprocess.run(argv, cwd=cwd, env=plain_env(), capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (
            " ".join(argv[:3]), out.returncode, out.stdout[-4000:],
            out.stderr[-4000:]))
    return out


class PortableAddon(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        node, npm = shutil.which("node"), shutil.which("npm")
        if not node or not npm:
            raise AssertionError("node and npm are required (scripts/deps)")
        cls.tmp = tempfile.mkdtemp(prefix="sluice-portable-")
        try:
            if not os.path.exists(os.path.join(PKG, "node_modules",
                                               "node-api-headers")):
                run([npm, "ci", "--ignore-scripts", "--prefer-offline",
                     "--no-audit", "--no-fund"], PKG)
            # A copy of the package's JavaScript, with the portable addon
            # where index.js loads it (build/sluice.node).
            cls.pkg = os.path.join(cls.tmp, "sluice")
            os.makedirs(os.path.join(cls.pkg, "build"))
            with open(os.path.join(PKG, "package.json")) as f:
                files = json.load(f)["files"]
            shutil.copy(os.path.join(PKG, "package.json"), cls.pkg)
            for name in files:
                src = os.path.join(PKG, name.rstrip("/"))
                if name.startswith(("deps", "prebuilds", "src", "scripts")):
                    continue
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(cls.pkg, name))
                elif os.path.isfile(src):
                    shutil.copy(src, cls.pkg)
            cls.addon = os.path.join(cls.pkg, "build", "sluice.node")
            run([node, "-e", BUILD, PKG, cls.addon], PKG)
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_binds_the_portable_calls_only(self):
        out = run(["nm", "-D", "--undefined-only", self.addon], self.tmp)
        bound = set(re.findall(r"^\s*U (\w+)", out.stdout, re.M))
        for linux_only in ("getrandom", "pthread_mutex_consistent",
                           "pthread_mutex_timedlock",
                           "pthread_mutexattr_setrobust", "posix_fallocate",
                           "flock"):
            self.assertNotIn(linux_only, bound)
        self.assertIn("getentropy", bound)
        self.assertIn("fcntl", bound)
    def test_stores_work_and_the_shared_store_is_refused(self):
        shm = os.path.join(self.tmp, "shared.sluice")
        with harness.RedisServer() as redis:
            out = run([shutil.which("node"), "-e", CHECK, self.pkg,
                       "redis://127.0.0.1:%d" % redis.port, shm], self.tmp)
            keys = redis.cli("--scan").strip()
        got = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(got["memory"], [True, True, False])
        self.assertEqual(got["redis"], [True, True, False])
        self.assertTrue(keys, "the Redis store wrote its bucket")
        self.assertIn("needs Linux", got["shared"])
        self.assertIn("memory or the Redis store", got["shared"])
        self.assertIn(shm, got["shared"])
        self.assertFalse(got["sharedFile"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
