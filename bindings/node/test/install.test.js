// The install script (scripts/build.js): one build at a time, and a lock
// left by a build that was killed (a test's timeout, SIGKILL: no exit
// handler runs) does not hold the next install for 10 minutes; in a
// checkout, a build whose inputs did not change is not run again.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { track, waitFor } = require('./helpers');

const BUILD_JS = path.resolve(__dirname, '..', 'scripts', 'build.js');

// A node process that takes the lock at `dir`, prints "locked", then runs
// `then` (JavaScript) while holding it.
function locker(dir, then) {
  const code = `require(${JSON.stringify(BUILD_JS)}).lock(${JSON.stringify(dir)});
    console.log('locked'); ${then}`;
  const c = track(spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'pipe'] }), 'locker');
  c.out = '';
  c.err = '';
  c.stdout.on('data', (d) => { c.out += d; });
  c.stderr.on('data', (d) => { c.err += d; });
  c.exited = new Promise((resolve) => c.on('exit', (status, signal) => resolve({ status, signal })));
  return c;
}

test('a build lock whose owner is alive is waited for; once the owner is killed, it is taken over at once', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-lock-'));
  const dir = path.join(tmp, '.lock');
  try {
    // The holder takes the lock and stays until killed.
    const holder = locker(dir, 'setInterval(() => {}, 1000);');
    await waitFor(() => holder.out.includes('locked'), 'the holder to take the lock');
    assert.equal(fs.readFileSync(path.join(dir, 'owner'), 'utf8').split('\n')[0], String(holder.pid));

    // A second build waits while the holder lives (it says so) ...
    const waiter = locker(dir, '');
    await waitFor(() => waiter.err.includes('waiting for another build'), 'the waiter to wait');
    assert.equal(waiter.out, '', 'the lock is not taken while its owner lives');

    // ... and takes it as soon as the holder dies by SIGKILL (its exit
    // handler never runs, the lock directory stays).  Before, the lock
    // was taken over only once 10 minutes old: this test's own timeout.
    holder.kill('SIGKILL');
    assert.equal((await holder.exited).signal, 'SIGKILL');
    assert.ok(fs.existsSync(dir), 'the killed holder left its lock');
    const { status } = await waiter.exited;
    assert.equal(status, 0, waiter.err);
    assert.equal(waiter.out.trim(), 'locked');
    assert.match(waiter.err, /taking over a lock its build left/);
    assert.ok(!fs.existsSync(dir), 'the waiter released the lock on exit');
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('a fresh build lock of another host is waited for, not taken over: its owner cannot be checked from here', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-lock-'));
  const dir = path.join(tmp, '.lock');
  try {
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'owner'), `1\nanother-host-${process.pid}`);
    const waiter = locker(dir, '');
    await waitFor(() => waiter.err.includes('waiting for another build'), 'the waiter to wait');
    // Released by its owner: the waiter takes it.
    fs.rmSync(dir, { recursive: true, force: true });
    const { status } = await waiter.exited;
    assert.equal(status, 0, waiter.err);
    assert.equal(waiter.out.trim(), 'locked');
    assert.doesNotMatch(waiter.err, /taking over/);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('the build inputs\' digest changes with any file\'s content, name or presence, and with the compiler', () => {
  const { inputsKey } = require(BUILD_JS);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-inputs-'));
  try {
    const src = path.join(tmp, 'src');
    fs.mkdirSync(path.join(src, 'sub'), { recursive: true });
    fs.writeFileSync(path.join(src, 'a.c'), 'int a;\n');
    fs.writeFileSync(path.join(src, 'sub', 'b.h'), '#define B 1\n');
    const cc = { cc: ['cc'], version: 'cc 12' };
    const key = inputsKey([src], cc);
    assert.match(key, /^[0-9a-f]{64}$/);
    assert.equal(inputsKey([src], { ...cc }), key, 'the same inputs, the same digest');
    fs.writeFileSync(path.join(src, 'sub', 'b.h'), '#define B 2\n');
    const changed = inputsKey([src], cc);
    assert.notEqual(changed, key, 'a header changed');
    fs.renameSync(path.join(src, 'a.c'), path.join(src, 'c.c'));
    const renamed = inputsKey([src], cc);
    assert.notEqual(renamed, changed, 'a file renamed');
    fs.writeFileSync(path.join(src, 'd.c'), '');
    assert.notEqual(inputsKey([src], cc), renamed, 'an empty file added');
    assert.notEqual(inputsKey([src], { ...cc, version: 'cc 13' }), inputsKey([src], cc), 'another compiler');
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

// Built once (npm ci's install script, or the first run here), a second
// build of the unchanged checkout reuses the addon: an `npm install` of
// the checkout (an app, the example) recompiled it each time, minutes on
// a busy machine.
test('in a checkout, building again with nothing changed reuses the addon', { timeout: 900000 }, () => {
  const pkg = path.resolve(__dirname, '..');
  const target = path.join(pkg, 'build', 'sluice.node');
  const env = { ...process.env };
  delete env.npm_config_build_from_source;
  const build = () => spawnSync(process.execPath, [BUILD_JS], { cwd: pkg, env, encoding: 'utf8', timeout: 840000 });
  const first = build();
  assert.equal(first.status, 0, first.stdout + first.stderr);
  const before = fs.statSync(target).mtimeMs;
  const again = build();
  assert.equal(again.status, 0, again.stdout + again.stderr);
  assert.match(again.stdout, /up to date/, again.stdout + again.stderr);
  assert.doesNotMatch(again.stdout, /building the addon/);
  assert.equal(fs.statSync(target).mtimeMs, before, 'the addon was not rewritten');
  assert.ok(fs.existsSync(path.join(pkg, 'build', 'inputs.sha256')));
});

test('the prebuild picked is the one of this C library: musl on Alpine, glibc elsewhere, an untagged one on both', () => {
  const { prebuilds } = require(BUILD_JS);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-prebuilds-'));
  try {
    for (const n of ['node.napi.glibc.node', 'node.napi.musl.node', 'node.napi.node', 'node.abi115.node', 'README.txt'])
      fs.writeFileSync(path.join(dir, n), '');
    const names = (want) => prebuilds(dir, want).map((f) => path.basename(f));
    assert.deepEqual(names('musl'), ['node.napi.musl.node', 'node.napi.node']);
    assert.deepEqual(names('glibc'), ['node.napi.glibc.node', 'node.napi.node']);
    // Off Linux (no C library named): only an untagged one.
    assert.deepEqual(names(null), ['node.napi.node']);
    assert.deepEqual(prebuilds(path.join(dir, 'absent'), 'glibc'), []);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
