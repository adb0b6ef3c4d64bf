#!/usr/bin/env python3
"""bindings/node: the `sluice` npm package, tested as its users meet it.

1. `npm ci` in bindings/node (the npm registry only: node-api-headers and,
   for the tests, express), which builds the addon from this checkout;
   then the package's own tests (Node's built-in runner) against real
   redis-server and `sluice serve` processes they start themselves.
2. A fresh app folder: `npm install <checkout>/bindings/node express` and
   the five-line Express app from the package's README, limited for real.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

PKG = os.path.join(harness.SRC, "bindings", "node")


def npm(args, cwd, timeout=600):
    exe = shutil.which("npm")
    if not exe or not shutil.which("node"):
        raise AssertionError("node and npm are required (scripts/deps)")
    out = subprocess.run([exe] + args + ["--no-audit", "--no-fund"],
                         cwd=cwd, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise AssertionError("npm %s failed:\n%s%s" % (
            " ".join(args), out.stdout[-3000:], out.stderr[-3000:]))
    return out


class NodePackage(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        built = harness.node_addon_mtime()
        # --prefer-offline: a package already in npm's cache is not
        # revalidated with the registry (fetches of 35 s each were seen on
        # a busy machine); a clean machine still downloads everything.
        npm(["ci", "--prefer-offline"], PKG)
        # npm may hold install scripts back; the package then builds on
        # first require.  Build now (unless npm ci's install script just
        # did) so the tests below start warm.
        harness.build_node_addon(unless_built_since=built)

    def test_package_tests(self):
        tests = sorted(os.path.join("test", f)
                       for f in os.listdir(os.path.join(PKG, "test"))
                       if f.endswith(".test.js"))
        env = dict(os.environ)
        # The addon and node are not built with the sanitizers.
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LD_PRELOAD"):
            env.pop(k, None)
        # Each test has a timeout (test/helpers.js); --test-force-exit
        # then ends a test file whose timed-out test left its sockets or
        # servers open, so a hang fails in minutes, naming the test,
        # well inside this run's own bound.
        node = shutil.which("node")
        flags = ["--test"]
        if "--test-force-exit" in subprocess.run(
                [node, "--help"], capture_output=True, text=True,
                timeout=60).stdout:
            flags.append("--test-force-exit")
        out = subprocess.run([node] + flags + tests,
                             cwd=PKG, env=env, capture_output=True,
                             text=True, timeout=800)
        summary = [line for line in out.stdout.splitlines()
                   if line.startswith(("# pass", "# fail", "not ok"))]
        # The failures first: the tail alone may not reach them.
        failed = [line for line in out.stdout.splitlines()
                  if line.lstrip().startswith("not ok")]
        self.assertEqual(out.returncode, 0,
                         "\n".join(failed) + "\n" + out.stdout[-8000:] +
                         out.stderr[-3000:])
        self.assertIn("# fail 0", summary)

    def test_fresh_app_installs_from_the_checkout(self):
        app = tempfile.mkdtemp(prefix="sluice-app-")
        try:
            npm(["init", "-y"], app)
            npm(["install", "--prefer-offline", PKG, "express@4"], app)
            with open(os.path.join(app, "app.js"), "w") as f:
                f.write("""
const express = require('express');
const sluice = require('sluice');
const app = express();
app.use(sluice.express({ limiter: new sluice.Limiter({ store: 'memory' }),
  policy: sluice.policy([{ capacity: 3, rate: '1/min' }], { name: 'api' }) }));
app.get('/', (req, res) => res.send('hello'));
app.listen(Number(process.env.PORT), '127.0.0.1');
""")
            env = {k: v for k, v in os.environ.items()
                   if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS")}
            with harness.Server(lambda port: [shutil.which("node"), "app.js"],
                                env=lambda port: dict(env, PORT=str(port)),
                                cwd=app) as proc:
                port = proc.port
                got = [harness.request(port, "GET", "/", {"x-user-id": "a"})
                       for _ in range(4)]
                self.assertEqual([r.status for r in got],
                                 [200, 200, 200, 429], got)
                self.assertEqual(got[0].header("RateLimit"),
                                 '"api";r=2;t=60')
                self.assertEqual(got[3].json()["error"], "rate_limited")
                # The default key is the client address: a header the
                # client writes mints no fresh bucket.
                r = harness.request(port, "GET", "/", {"x-user-id": "b"})
                self.assertEqual(r.status, 429)
        finally:
            shutil.rmtree(app, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
