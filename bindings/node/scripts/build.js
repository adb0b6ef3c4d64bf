#!/usr/bin/env node
// build.js -- builds the addon from a sluice checkout, with no download:
//   1. libsluice and libsluice-redis (static, position-independent) with
//      the checkout's CMake build, library only (-DSLUICE_LIBRARY_ONLY=ON);
//   2. src/addon.c against the Node-API headers of the `node-api-headers`
//      npm package (falling back to the headers installed beside node,
//      e.g. Debian's libnode-dev), linked with libsluice-redis.a, libsluice.a
//      and hiredis.
// The addon does not link libuv: its uv_* calls bind to the libuv inside
// Node, the loop the Redis client runs on.
// Needs: a C compiler, cmake, pkg-config, libuv1-dev, libhiredis-dev and libssl-dev
// (Debian), as the checkout's scripts/deps installs them.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const pkg = path.resolve(__dirname, '..');
const root = path.resolve(pkg, '..', '..');
const out = path.join(pkg, 'build');
const libdir = path.join(out, 'libsluice');

function die(msg) {
  console.error(`sluice: ${msg}`);
  process.exit(1);
}

function run(cmd, args, opts = {}) {
  try {
    return String(execFileSync(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'], ...opts }) || '');
  } catch (e) {
    if (e.code === 'ENOENT') die(`${cmd} not found: install it (Debian: see scripts/deps in the sluice checkout)`);
    die(`${cmd} ${args.join(' ')} failed${e.stdout ? `:\n${e.stdout}` : ''}`);
  }
}

function napiHeaders() {
  const dirs = [];
  try {
    dirs.push(require('node-api-headers').include_dir);
  } catch { /* not installed: try the headers beside node */ }
  dirs.push(path.resolve(path.dirname(process.execPath), '..', 'include', 'node'), '/usr/include/node');
  const dir = dirs.find((d) => d && fs.existsSync(path.join(d, 'node_api.h')));
  if (!dir) die('no Node-API headers: `npm install node-api-headers` or install libnode-dev');
  return dir;
}

if (!fs.existsSync(path.join(root, 'include', 'sluice.h')))
  die(`${root} is not a sluice checkout: the addon builds from the checkout's sources`);

// One build at a time (two apps installing, or cluster workers building
// on first require): a lock directory, taken over when left for 10 minutes.
const lock = path.join(out, '.lock');
fs.mkdirSync(out, { recursive: true });
for (let waited = 0; ; waited += 100) {
  try {
    fs.mkdirSync(lock);
    break;
  } catch (e) {
    if (e.code !== 'EEXIST') throw e;
    let age = 0;
    try { age = Date.now() - fs.statSync(lock).mtimeMs; } catch { continue; }
    if (age > 600000) { fs.rmSync(lock, { recursive: true, force: true }); continue; }
    if (waited % 10000 === 0) console.error(`sluice: waiting for another build (${lock})`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  }
}
process.on('exit', () => fs.rmSync(lock, { recursive: true, force: true }));

fs.mkdirSync(libdir, { recursive: true });
run('cmake', ['-S', root, '-B', libdir, '-DCMAKE_BUILD_TYPE=Release',
  '-DSLUICE_LIBRARY_ONLY=ON', '-DSLUICE_TESTS=OFF'], { stdio: ['ignore', 'ignore', 'inherit'] });
run('cmake', ['--build', libdir, '--target', 'sluice_redis_static', '-j', String(Math.max(1, require('node:os').cpus().length))],
  { stdio: ['ignore', 'ignore', 'inherit'] });

const cflags = run('pkg-config', ['--cflags', 'libuv', 'hiredis', 'openssl']).trim().split(/\s+/).filter(Boolean);
const cc = process.env.CC || 'cc';
const target = path.join(out, 'sluice.node');
const tmp = `${target}.tmp`;
run(cc, ['-std=gnu11', '-O2', '-fPIC', '-shared', '-fvisibility=hidden',
  '-Wall', '-Wextra', '-Werror', '-Wno-unused-parameter',
  '-I', path.join(root, 'include'), '-I', napiHeaders(), ...cflags,
  // Every C file of src/ (addon.c, local.c, redis.c).
  ...fs.readdirSync(path.join(pkg, 'src')).filter((f) => f.endsWith('.c')).sort().map((f) => path.join(pkg, 'src', f)),
  path.join(libdir, 'libsluice-redis.a'), path.join(libdir, 'libsluice.a'),
  // libsluice's and hiredis's own symbols stay inside the addon.
  '-Wl,--exclude-libs,ALL', '-lhiredis', '-lssl', '-lcrypto', '-lm', '-o', tmp], { stdio: ['ignore', 'inherit', 'inherit'] });
fs.renameSync(tmp, target);
console.log(`sluice: built ${path.relative(process.cwd(), target) || target}`);
