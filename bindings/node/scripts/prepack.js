#!/usr/bin/env node
// prepack.js -- run in a sluice checkout (npm pack's prepack step, and
// `make node-prebuild`): makes bindings/node a package that installs
// anywhere, with no checkout and no cmake.
//
//   collect  copies into deps/ what building the addon needs, from one
//            place each:
//            - deps/sluice: the C sources of libsluice, exactly those the
//              checkout's CMake build of the library compiles
//              (-DSLUICE_LIBRARY_ONLY=ON: its compile_commands.json), the
//              headers they and src/addon.c include (the compiler's own
//              dependency list, cc -M), the generated script_lua.h, and
//              sources.json (sources, defines, include dirs, C standard);
//            - deps/include: the Node-API headers (the node-api-headers
//              npm package) and the libuv and OpenSSL headers the sources
//              include (libuv1-dev, libssl-dev), with their licences.
//            Any other header from outside the C library stops it: the
//            package could not build from source without it.
//   build    builds the addon from deps/ with warnings as errors for each
//            of PREBUILDS below and puts it at
//            prebuilds/<platform>-<arch>/node.napi.<libc>.node (the
//            prebuildify layout scripts/build.js reads), after checking
//            that it needs no shared library but libc (and, for musl, no
//            glibc symbol).
//   LICENSE  the project's licence, copied from the top of the checkout.
//
// Needs what a checkout's build needs (scripts/deps): cmake, a C compiler,
// libuv1-dev, libssl-dev, and for the other prebuilds Debian's
// gcc-aarch64-linux-gnu and musl-tools; and `npm ci` here
// (node-api-headers).  SLUICE_PREBUILDS=linux-x64-glibc (a comma list of
// names below) builds only those, for a quick local pack.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const build = require('./build.js');

const pkg = path.resolve(__dirname, '..');
const deps = build.deps;

function die(msg) {
  console.error(`sluice prepack: ${msg}`);
  process.exit(1);
}

function run(cmd, args, opts = {}) {
  try {
    return String(execFileSync(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts }));
  } catch (e) {
    if (e.code === 'ENOENT') die(`${cmd} not found: install it (the checkout's scripts/deps installs what a build needs)`);
    die(`${cmd} ${args.join(' ')} failed:\n${e.stdout || ''}${e.stderr || ''}`);
  }
}

// Splits a compile command as CMake writes it (no quoting in our paths).
function words(cmd) {
  return cmd.trim().split(/\s+/);
}

// Third-party headers the package carries, by where Debian installs them:
// /usr/include/<x> or /usr/include/<multiarch>/<x>  ->  deps/include/<x>.
const CARRIED = [/^(uv\.h|uv\/.+)$/, /^(openssl\/.+)$/];
const CARRIED_LICENCES = {
  uv: '/usr/share/doc/libuv1-dev/copyright',
  openssl: '/usr/share/doc/libssl-dev/copyright',
};

// The Node-API headers: the node-api-headers package (npm ci here), else
// those installed beside node (Debian's libnode-dev, Node's own tarball),
// of which only the Node-API ones (that folder has node's libuv and
// OpenSSL too): copied into build/napi, with their licence.
const NAPI_FILES = ['js_native_api.h', 'js_native_api_types.h', 'node_api.h', 'node_api_types.h'];

function napiHeaders() {
  const dest = path.join(pkg, 'build', 'napi');
  fs.rmSync(dest, { recursive: true, force: true });
  let dir = null;
  let licence = null;
  try {
    dir = require('node-api-headers').include_dir;
    licence = path.join(dir, '..', 'LICENSE');
  } catch { /* below */ }
  if (!dir || !fs.existsSync(path.join(dir, 'node_api.h'))) {
    dir = [path.resolve(path.dirname(process.execPath), '..', 'include', 'node'), '/usr/include/node']
      .find((d) => fs.existsSync(path.join(d, 'node_api.h')));
    licence = null;
  }
  if (!dir) die('no Node-API headers: run `npm ci` in bindings/node (the node-api-headers package)');
  const names = licence ? fs.readdirSync(dir).filter((n) => n.endsWith('.h')) : NAPI_FILES;
  for (const n of names) if (fs.existsSync(path.join(dir, n))) copy(path.join(dir, n), path.join(dest, n));
  if (licence && fs.existsSync(licence)) copy(licence, path.join(dest, 'LICENSE'));
  return dest;
}

function copy(from, to) {
  fs.mkdirSync(path.dirname(to), { recursive: true });
  fs.copyFileSync(from, to);
}

function collect(root) {
  const cmakeDir = path.join(pkg, 'build', 'cmake');
  fs.mkdirSync(cmakeDir, { recursive: true });
  run('cmake', ['-S', root, '-B', cmakeDir, '-DCMAKE_BUILD_TYPE=Release',
    '-DSLUICE_LIBRARY_ONLY=ON', '-DSLUICE_TESTS=OFF', '-DCMAKE_EXPORT_COMPILE_COMMANDS=ON']);
  const commands = JSON.parse(fs.readFileSync(path.join(cmakeDir, 'compile_commands.json'), 'utf8'));
  if (!commands.length) die('CMake lists no library sources');
  const generated = path.join(cmakeDir, 'generated');

  const sluiceDir = path.join(deps, 'sluice');
  const includeDir = path.join(deps, 'include');
  fs.rmSync(sluiceDir, { recursive: true, force: true });
  fs.rmSync(includeDir, { recursive: true, force: true });

  // Where a path of the checkout or of the build lands in deps/sluice.
  const place = (file) => {
    const f = path.resolve(file);
    if (f.startsWith(generated + path.sep)) return path.join('generated', path.relative(generated, f));
    if (f.startsWith(root + path.sep) && !f.startsWith(pkg + path.sep)) return path.relative(root, f);
    return null;
  };

  // Each source with its defines and include directories, as CMake
  // compiles it; include directories outside the checkout are the system's
  // (pkg-config's -isystem /usr/include/hiredis): the package has its own
  // hiredis (deps/hiredis, reached as <hiredis/...>) and carries the other
  // headers in deps/include, so the dependency scan below runs with
  // exactly the directories a build from the package has.
  const sources = [];
  const headers = new Set();
  const napi = napiHeaders();
  const scan = (file, flags) => {
    const dep = run(process.env.CC || 'cc', ['-M', ...flags, `-I${napi}`, `-I${deps}`, file], { cwd: root });
    for (const h of dep.replace(/\\\n/g, ' ').split(':').slice(1).join(':').trim().split(/\s+/))
      if (h && h !== file) headers.add(path.resolve(root, h));
  };
  const dirOf = (dir) => {
    const rel = place(path.join(dir, '.x'));
    return rel && path.dirname(rel);
  };
  let addonFlags = null;
  for (const c of commands) {
    const w = words(c.command || (c.arguments || []).join(' '));
    const file = path.resolve(c.directory, c.file);
    const rel = place(file);
    if (!rel) die(`${file} is outside the checkout`);
    const defines = w.filter((x) => x.startsWith('-D')).map((x) => x.slice(2));
    const includes = w.filter((x) => x.startsWith('-I')).map((x) => x.slice(2)).map(dirOf).filter(Boolean);
    const std = (w.find((x) => x.startsWith('-std=')) || '-std=gnu11').slice(5);
    sources.push({ file: rel, std, defines, includes });
    const flags = [...includes.map((i) => `-I${path.join(i.startsWith('generated') ? cmakeDir : root, i)}`),
      ...defines.map((x) => `-D${x}`), `-std=${std}`];
    if (!addonFlags) addonFlags = flags.filter((x) => !x.startsWith('-DSLUICE_BUILDING'));
    scan(file, flags);
  }
  for (const f of fs.readdirSync(path.join(pkg, 'src')).filter((n) => n.endsWith('.c')).sort())
    scan(path.join(pkg, 'src', f), addonFlags);

  for (const { file } of sources)
    copy(path.join(file.startsWith('generated/') ? cmakeDir : root, file), path.join(sluiceDir, file));

  const system = [];
  const licences = new Set();
  for (const h of headers) {
    if (h.startsWith(napi + path.sep)) { copy(h, path.join(includeDir, path.relative(napi, h))); continue; }
    const rel = place(h);
    if (rel) { copy(h, path.join(sluiceDir, rel)); continue; }
    if (h.startsWith(pkg + path.sep)) continue; // deps/hiredis
    const m = /^\/usr\/include\/(?:[a-z0-9_]+-linux-[a-z0-9_]+\/)?(.+)$/.exec(h);
    const carried = m && CARRIED.find((re) => re.test(m[1]));
    if (carried) {
      copy(h, path.join(includeDir, m[1]));
      licences.add(m[1].startsWith('openssl/') ? 'openssl' : 'uv');
      continue;
    }
    system.push(h);
  }
  checkLibcOnly(system);

  if (fs.existsSync(path.join(napi, 'LICENSE')))
    copy(path.join(napi, 'LICENSE'), path.join(includeDir, 'LICENSE.node-api-headers'));
  for (const l of licences)
    if (fs.existsSync(CARRIED_LICENCES[l])) copy(CARRIED_LICENCES[l], path.join(includeDir, `LICENSE.${l}`));
  fs.writeFileSync(path.join(sluiceDir, 'sources.json'), `${JSON.stringify({
    comment: 'Written by scripts/prepack.js from the CMake build of libsluice (SLUICE_LIBRARY_ONLY)',
    sources,
  }, null, 2)}\n`);
  copy(path.join(root, 'LICENSE'), path.join(pkg, 'LICENSE'));
}

// Every header not carried must come with the C library (or the compiler):
// a build from the package has nothing else.
function checkLibcOnly(files) {
  const usr = files.filter((f) => f.startsWith('/usr/include/'));
  const other = files.filter((f) => !f.startsWith('/usr/include/') && !/^\/usr\/lib\/gcc\//.test(f) &&
    !/^\/usr\/lib\/llvm/.test(f));
  if (other.length) die(`headers from outside the C library that the package does not carry: ${other.join(' ')}`);
  let owners = '';
  try {
    owners = execFileSync('dpkg', ['-S', ...usr], { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
  } catch (e) {
    if (e.code === 'ENOENT') return; // not Debian: nothing to ask
    owners = String(e.stdout || '');
  }
  const bad = [];
  for (const line of owners.split('\n').filter(Boolean)) {
    const [pkgs, file] = line.split(': ');
    if (!pkgs.split(', ').every((p) => /^(libc6-dev|linux-libc-dev)(:|$)/.test(p))) bad.push(`${file} (${pkgs})`);
  }
  if (bad.length)
    die(`the sources include headers from outside the C library that the package does not carry: ${bad.join(', ')}; ` +
      'add them to CARRIED in scripts/prepack.js');
}

// The prebuilt binaries a tarball carries, built on a linux-x64 Debian
// machine: the host's compiler, Debian's cross compiler, and Debian's
// musl-gcc (musl-tools: musl's headers and libc, x86_64).  The headers in
// deps/include are the host's: uv.h is the same on every Linux, and
// OpenSSL's configuration.h differs for arm64 only in what the addon does
// not use (RC4_INT, OPENSSL_NO_EC_NISTP_64_GCC_128).
const PREBUILDS = [
  { name: 'linux-x64-glibc', dir: 'linux-x64', libc: 'glibc', cc: 'x86_64-linux-gnu-gcc',
    strip: 'strip', machine: 'X86-64', pkg: 'gcc' },
  { name: 'linux-arm64-glibc', dir: 'linux-arm64', libc: 'glibc', cc: 'aarch64-linux-gnu-gcc',
    strip: 'aarch64-linux-gnu-strip', machine: 'AArch64', pkg: 'gcc-aarch64-linux-gnu' },
  { name: 'linux-x64-musl', dir: 'linux-x64', libc: 'musl', cc: 'musl-gcc',
    strip: 'strip', machine: 'X86-64', pkg: 'musl-tools' },
];

// The compiler command for a prebuild: the host's cc (or CC) for its own
// kind, through ccache when there is one (a second pack recompiles
// nothing).
function compilerFor(t) {
  const host = `${process.platform}-${process.arch}-${build.hostLibc()}`;
  let cc = host === t.name && process.env.CC ? process.env.CC : t.cc;
  if (!which(cc.split(/\s+/)[0]))
    die(`${cc.split(/\s+/)[0]} not found: the ${t.name} prebuild needs Debian's ${t.pkg} (scripts/deps installs it)`);
  if (which('ccache') && !/\bccache\b/.test(cc)) cc = `ccache ${cc}`;
  return cc;
}

function which(cmd) {
  if (cmd.includes('/')) return fs.existsSync(cmd) ? cmd : null;
  for (const d of (process.env.PATH || '').split(path.delimiter)) {
    const f = path.join(d, cmd);
    try { fs.accessSync(f, fs.constants.X_OK); return f; } catch { /* next */ }
  }
  return null;
}

// What a prebuilt binary is: its machine (readelf -h), the shared
// libraries it needs and the symbol versions it binds (readelf -d, -V).
function describe(file) {
  const header = run('readelf', ['-h', file]);
  const m = /Machine:\s+(.+)/.exec(header);
  return {
    machine: m ? m[1].trim() : '?',
    needed: needed(file),
    versions: [...new Set(run('readelf', ['-V', '-W', file]).match(/\bGLIBC_[\w.]+/g) || [])],
  };
}

// Builds one prebuild and checks it; returns its path.
async function prebuild(t) {
  const dest = path.join(pkg, 'prebuilds', t.dir, `node.napi.${t.libc}.node`);
  fs.rmSync(dest, { force: true });
  try {
    await build.compile(dest, { strict: true, cc: compilerFor(t), platform: 'linux', portable: false });
  } catch (e) {
    die(`${t.name}: ${e.message}`);
  }
  run(t.strip, ['--strip-unneeded', dest]);
  const d = describe(dest);
  if (!d.machine.includes(t.machine)) die(`${dest} is for ${d.machine}, not ${t.machine}`);
  const libs = d.needed.filter((l) => !/^(libc|libm|libpthread|libdl|ld-linux[-\w]*)\.so/.test(l));
  if (libs.length) die(`${dest} needs ${libs.join(', ')}: the prebuilt binary may need only libc`);
  if (t.libc === 'musl' && (d.versions.length || d.needed.some((l) => /^libc\.so\.6$/.test(l))))
    die(`${dest} binds glibc (${[...d.versions, ...d.needed].join(', ')}): musl-gcc must build it`);
  // The one for this machine loads in this node.
  if (t.name === `linux-${process.arch}-${build.hostLibc()}`) process.dlopen({ exports: {} }, dest);
  console.log(`sluice prepack: ${path.relative(pkg, dest)} (${fs.statSync(dest).size} bytes, ${d.machine})`);
  return dest;
}

// The shared libraries a binary needs, from its dynamic section.
function needed(file) {
  return run('readelf', ['-d', file]).split('\n')
    .map((l) => /\(NEEDED\).*\[(.+)\]/.exec(l)).filter(Boolean).map((m) => m[1]);
}

async function main() {
  const root = build.checkoutRoot();
  if (!root) {
    // An unpacked tarball packed again: it already carries what it needs.
    if (fs.existsSync(path.join(deps, 'sluice', 'sources.json'))) return;
    die('not in a sluice checkout (bindings/node of the repository)');
  }
  build.lock();
  collect(root);
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    console.error('sluice prepack: no prebuilt binaries (they are built on linux-x64)');
    return;
  }
  const only = (process.env.SLUICE_PREBUILDS || '').split(',').map((x) => x.trim()).filter(Boolean);
  const unknown = only.filter((n) => !PREBUILDS.some((t) => t.name === n));
  if (unknown.length)
    die(`SLUICE_PREBUILDS names ${unknown.join(', ')}; known: ${PREBUILDS.map((t) => t.name).join(', ')}`);
  fs.rmSync(path.join(pkg, 'prebuilds'), { recursive: true, force: true });
  // One after the other: each build already uses every core.
  for (const t of PREBUILDS) if (!only.length || only.includes(t.name)) await prebuild(t);
}

module.exports = { collect, PREBUILDS, describe };

if (require.main === module) main();
