#!/usr/bin/env node
// build.js -- the package's install script: puts the native addon at
// build/sluice.node, where index.js loads it.
//
//   1. A prebuilt binary from prebuilds/<platform>-<arch>/ (the
//      prebuildify layout: node.napi[.glibc|.musl].node) when one matches
//      this machine and loads: no compiler, nothing else needed.
//   2. Otherwise, or when asked (fromSourceAsked() below: the environment
//      variable SLUICE_BUILD_FROM_SOURCE=1, npm's
//      npm_config_build_from_source=true, or
//      `node scripts/build.js --build-from-source`), from the sources the
//      package carries: deps/sluice (libsluice, listed in
//      deps/sluice/sources.json), deps/hiredis (hiredis's reply reader) and
//      deps/include (the Node-API, libuv and OpenSSL headers).  Needs only
//      a C compiler (CC, else cc) and the C library's headers.
//
// In a sluice checkout (bindings/node of the repository) the addon is
// always built from source, after scripts/prepack.js has copied the
// checkout's current libsluice sources into deps/; and built again only
// when what it is built from (deps/, src/, the compiler and its flags)
// changed since the last build (build/inputs.sha256), so that each `npm
// install` of the checkout does not spend minutes recompiling the same
// sources.
//
// Any POSIX system with a C compiler builds it: Linux, macOS (clang from
// the Xcode command line tools), the BSDs.  Linux-only parts of libsluice
// (the shared-memory store) are refused there at run time, with a message
// (src/util/platform.h); SLUICE_PORTABLE=1 builds that side on Linux too.
// Windows is refused here: libsluice needs POSIX (threads, sockets, mmap).
//
// The addon links nothing but libc: the napi_*, uv_* and OpenSSL calls
// bind, when node loads it, to what the node process already holds (Node
// exports its libuv and OpenSSL; a node linked with the system's libssl
// has it loaded).  It is linked with -z now, so a node without them fails
// at require with the missing symbol's name, not later in a request.
'use strict';
const { execFileSync, spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const pkg = path.resolve(__dirname, '..');
const out = path.join(pkg, 'build');
const target = path.join(out, 'sluice.node');
const deps = path.join(pkg, 'deps');
const inputsFile = path.join(out, 'inputs.sha256');

function die(msg) {
  console.error(`sluice: ${msg}`);
  process.exit(1);
}

// The checkout this package directory belongs to, or null when the package
// is installed (node_modules/sluice) or unpacked on its own.
function checkoutRoot() {
  const root = path.resolve(pkg, '..', '..');
  const ok = fs.existsSync(path.join(root, 'include', 'sluice.h')) &&
    fs.existsSync(path.join(root, 'CMakeLists.txt')) &&
    path.resolve(root, 'bindings', 'node') === pkg;
  return ok ? root : null;
}

// One build at a time (two apps installing, or cluster workers building
// on first require): a lock directory holding its owner's pid and host.
// A lock whose owner is gone (a build killed by a test's timeout, or by
// SIGKILL, never runs its exit handler) is taken over at once: waiting out
// its age would hold every later install for 10 minutes.  A lock of
// another host, or with no owner written yet, is taken over when left for
// 10 minutes.
const LOCK_STALE_MS = 600000;

function lockOwnerGone(dir) {
  let owner;
  try { owner = fs.readFileSync(path.join(dir, 'owner'), 'utf8').split('\n'); } catch { return false; }
  const pid = Number(owner[0]);
  if (!Number.isSafeInteger(pid) || pid <= 0 || owner[1] !== os.hostname()) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (e) {
    return e.code === 'ESRCH'; // EPERM: alive, another user's
  }
}

function lock(dir = path.join(out, '.lock')) {
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  for (let waited = 0; ; waited += 100) {
    try {
      fs.mkdirSync(dir);
      break;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
      let age = 0;
      try { age = Date.now() - fs.statSync(dir).mtimeMs; } catch { continue; }
      if (age > LOCK_STALE_MS || lockOwnerGone(dir)) {
        console.error(`sluice: taking over a lock its build left (${dir})`);
        fs.rmSync(dir, { recursive: true, force: true });
        continue;
      }
      if (waited % 10000 === 0) console.error(`sluice: waiting for another build (${dir})`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
    }
  }
  fs.writeFileSync(path.join(dir, 'owner'), `${process.pid}\n${os.hostname()}`);
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
}

// ------------------------------------------------------------ prebuilds

function libc() {
  if (process.platform !== 'linux') return null;
  const header = process.report && process.report.getReport().header;
  return header && header.glibcVersionRuntime ? 'glibc' : 'musl';
}

// The prebuilt binaries for this platform and architecture whose tags
// (prebuildify's file names: node.napi.glibc.node) fit this node: a
// Node-API one, of this C library when it names one (want: 'glibc',
// 'musl', or null off Linux), in the order of their names.
function prebuilds(dir = path.join(pkg, 'prebuilds', `${process.platform}-${process.arch}`), want = libc()) {
  let names = [];
  try { names = fs.readdirSync(dir).sort(); } catch { return []; }
  return names.filter((n) => {
    if (!n.endsWith('.node')) return false;
    const tags = n.slice(0, -'.node'.length).split('.');
    if (!tags.includes('napi')) return false;
    return !['glibc', 'musl'].some((l) => tags.includes(l) && l !== want);
  }).map((n) => path.join(dir, n));
}

// Copies the first prebuilt binary that loads here to build/sluice.node;
// returns why none did, or null.
function installPrebuild() {
  const found = prebuilds();
  if (!found.length) return `no prebuilt binary for ${process.platform}-${process.arch}${libc() ? ` (${libc()})` : ''}`;
  const reasons = [];
  for (const file of found) {
    const tmp = `${target}.${process.pid}.tmp`;
    fs.copyFileSync(file, tmp);
    try {
      process.dlopen({ exports: {} }, tmp);
    } catch (e) {
      fs.rmSync(tmp, { force: true });
      reasons.push(`${path.relative(pkg, file)} does not load here: ${e.message.split('\n')[0]}`);
      continue;
    }
    fs.renameSync(tmp, target);
    console.log(`sluice: installed the prebuilt ${path.relative(pkg, file)}`);
    return null;
  }
  return reasons.join('; ');
}

// --------------------------------------------------------- from source

const INSTALL_CC = 'install a C compiler (Debian/Ubuntu: apt-get install gcc libc6-dev; ' +
  'Fedora: dnf install gcc; Alpine: apk add gcc musl-dev; macOS: xcode-select --install) or set CC';

// Whether the user asked for a build from source: the command line, npm's
// config as npm hands it to install scripts (npm_config_build_from_source,
// set by `npm_config_build_from_source=true npm install`; npm 11 warns of
// the `--build-from-source` flag as an unknown config), or sluice's own
// SLUICE_BUILD_FROM_SOURCE.  A value naming other packages
// (npm_config_build_from_source=sqlite3) does not ask for this one.
function fromSourceAsked(argv = process.argv, env = process.env) {
  if (argv.includes('--build-from-source')) return true;
  const yes = (v, names) => v !== undefined &&
    (/^(1|true|yes|on)$/i.test(v) || v.split(',').map((x) => x.trim()).some((x) => names.includes(x)));
  return yes(env.SLUICE_BUILD_FROM_SOURCE, []) || yes(env.npm_config_build_from_source, ['sluice']);
}

// The link step for this system: a loadable module whose Node-API, libuv
// and OpenSSL symbols are left for the node process to provide.
function linkFlags(platform) {
  if (platform === 'darwin') return ['-bundle', '-undefined', 'dynamic_lookup'];
  // ELF (Linux, the BSDs): every symbol bound at load (-z now), so a node
  // without one fails at require, naming it.
  return ['-shared', '-Wl,-z,now', '-Wl,--as-needed'];
}

function compilerFlags(strict) {
  // Warnings are errors when the project builds its prebuilt binary; an
  // install on an unknown compiler only shows them.
  return ['-O2', '-fPIC', '-fvisibility=hidden', '-Wall', ...(strict ? ['-Werror'] : [])];
}

function runCc(args, cc) {
  return new Promise((resolve, reject) => {
    const child = spawn(cc[0], [...cc.slice(1), ...args], { stdio: ['ignore', 'inherit', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => { err += d; process.stderr.write(d); });
    child.on('error', (e) => reject(e.code === 'ENOENT'
      ? new Error(`the C compiler \`${cc[0]}\` was not found: ${INSTALL_CC}`) : e));
    child.on('close', (code) => {
      if (code === 0) return resolve();
      const header = /fatal error: ([^:\s]+): No such file/.exec(err);
      if (header)
        return reject(new Error(`the header ${header[1]} is missing: install the C library's headers ` +
          '(Debian/Ubuntu: apt-get install libc6-dev; Fedora: dnf install glibc-devel; Alpine: apk add musl-dev)'));
      reject(new Error(`${cc[0]} ${args.join(' ')} failed (exit ${code})`));
    });
  });
}

// Runs the jobs, `width` at a time; after a failure, starts no more.
async function pool(jobs, width) {
  let next = 0;
  let failed = false;
  const worker = async () => {
    while (next < jobs.length && !failed) {
      try {
        await jobs[next++]();
      } catch (e) {
        failed = true;
        throw e;
      }
    }
  };
  const results = await Promise.allSettled(Array.from({ length: Math.min(width, jobs.length) }, worker));
  const bad = results.find((r) => r.status === 'rejected');
  if (bad) throw bad.reason;
}

// Compiles deps/ and src/addon.c into `dest`.  cc: the compiler command
// (default CC, else cc); platform: the system the binary is for;
// portable: the non-Linux side of libsluice's platform guard (default
// SLUICE_PORTABLE=1 in the environment).
async function compile(dest, { strict = false, cc = null, platform = process.platform,
  portable = /^(1|true|yes|on)$/i.test(process.env.SLUICE_PORTABLE || '') } = {}) {
  const listFile = path.join(deps, 'sluice', 'sources.json');
  if (!fs.existsSync(listFile) || !fs.existsSync(path.join(deps, 'include', 'node_api.h')))
    die(`${path.relative(process.cwd(), deps) || deps} lacks the sources or headers the package carries ` +
      '(deps/sluice/sources.json, deps/include/node_api.h): in a sluice checkout, run `node scripts/prepack.js`');
  const list = JSON.parse(fs.readFileSync(listFile, 'utf8'));
  cc = (cc || process.env.CC || 'cc').split(/\s+/).filter(Boolean);
  const objdir = path.join(out, 'obj');
  fs.rmSync(objdir, { recursive: true, force: true });
  fs.mkdirSync(objdir, { recursive: true });
  const base = compilerFlags(strict);
  // libsluice's sources with the flags CMake gives each (sources.json).
  const flagsOf = (src) => [`-std=${src.std}`, ...base, '-Wextra', '-Wno-unused-parameter',
    ...src.defines.map((d) => `-D${d}`), ...(portable ? ['-DSLUICE_PORTABLE=1'] : []),
    ...src.includes.map((i) => `-I${path.join(deps, 'sluice', i)}`),
    `-I${path.join(deps, 'include')}`, `-I${deps}`];
  const jobs = [];
  const objs = [];
  const add = (src, flags) => {
    const obj = path.join(objdir, `${objs.length}-${path.basename(src, '.c')}.o`);
    objs.push(obj);
    jobs.push(() => runCc([...flags, '-c', src, '-o', obj], cc));
  };
  for (const s of list.sources) add(path.join(deps, 'sluice', s.file), flagsOf(s));
  // hiredis as its own Makefile builds it (C99, its own feature macros);
  // its warnings are not ours to fix (and GCC 14 makes one of them an
  // error: hiredis.c gives createArray a size_t where read.h says int).
  const hiredis = path.join(deps, 'hiredis');
  for (const s of fs.readdirSync(hiredis).filter((n) => n.endsWith('.c')).sort())
    add(path.join(hiredis, s), ['-std=c99', ...compilerFlags(false), '-w', '-Wno-incompatible-pointer-types']);
  // The addon: the library's include directories, not its SLUICE_BUILDING.
  // Every C file of src/ (addon.c, local.c, redis.c).
  const addonFlags = flagsOf(list.sources[0]).filter((f) => !f.startsWith('-DSLUICE_BUILDING'));
  for (const s of fs.readdirSync(path.join(pkg, 'src')).filter((n) => n.endsWith('.c')).sort())
    add(path.join(pkg, 'src', s), addonFlags);
  const width = Math.max(1, Math.min(4, (os.availableParallelism || (() => os.cpus().length))()));
  await pool(jobs, width);
  fs.mkdirSync(path.dirname(dest), { recursive: true });
  const tmp = `${dest}.${process.pid}.tmp`;
  await runCc([...linkFlags(platform), ...objs, '-lm', '-o', tmp], cc);
  fs.renameSync(tmp, dest);
  fs.rmSync(objdir, { recursive: true, force: true });
}

// ------------------------------------------------------ up to date

// A digest of everything a build reads: each file under `dirs` (its path
// and content, in a fixed order) and `extra` (the compiler's identity and
// flags).  Two builds with the same digest compile the same thing.
function inputsKey(dirs, extra) {
  const h = crypto.createHash('sha256');
  h.update(JSON.stringify(extra));
  const walk = (dir, rel) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const full = path.join(dir, e.name);
      const name = `${rel}/${e.name}`;
      if (e.isDirectory()) walk(full, name);
      else if (e.isFile()) h.update(`\0${name}\0${fs.statSync(full).size}\0`).update(fs.readFileSync(full));
    }
  };
  for (const d of dirs) walk(d, path.basename(d));
  return h.digest('hex');
}

// The digest of a checkout build, or null when the compiler cannot say
// what it is (then the build runs, and reports why if it fails).
function checkoutKey() {
  const cc = (process.env.CC || 'cc').split(/\s+/).filter(Boolean);
  let version;
  try {
    version = execFileSync(cc[0], [...cc.slice(1), '--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return null;
  }
  return inputsKey([deps, path.join(pkg, 'src')],
    { cc, version, flags: compilerFlags(true), platform: process.platform, arch: process.arch });
}

async function main() {
  if (process.platform === 'win32')
    die('Windows is not supported: libsluice needs a POSIX system (Linux, macOS, the BSDs); ' +
      'under Windows, run the app in WSL or a Linux container');
  const fromSource = fromSourceAsked();
  lock();
  const root = checkoutRoot();
  let why = null;
  let key = null;
  if (root) {
    require('./prepack.js').collect(root);
    why = 'in a sluice checkout, the addon is built from its sources';
    key = checkoutKey();
    let last = null;
    try { last = fs.readFileSync(inputsFile, 'utf8').trim(); } catch { /* never built here */ }
    if (!fromSource && key && key === last && fs.existsSync(target)) {
      console.log('sluice: the addon is up to date with the checkout\'s sources');
      return;
    }
  } else if (!fromSource) {
    why = installPrebuild();
    if (!why) return;
  } else {
    why = 'asked to build from source';
  }
  console.log(`sluice: building the addon from source (${why})`);
  fs.rmSync(inputsFile, { force: true });
  try {
    await compile(target, { strict: !!root });
  } catch (e) {
    die(e.message);
  }
  if (key) fs.writeFileSync(inputsFile, `${key}\n`);
  console.log(`sluice: built ${path.relative(process.cwd(), target) || target}`);
}

module.exports = { compile, lock, deps, checkoutRoot, fromSourceAsked, hostLibc: libc, inputsKey, prebuilds };

if (require.main === module) main();
