// The shared-memory store: every process of the host that opens one file
// shares its buckets, exactly, with each other and with `sluice serve`.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFile } = require('node:child_process');
const sluice = require('..');
const { startSluice, request } = require('./helpers');

let seq = 0;
function shmPath(t) {
  const p = `/dev/shm/sluice-node-${process.pid}-${seq++}`;
  fs.rmSync(p, { force: true });
  t.after(() => fs.rmSync(p, { force: true }));
  return p;
}

function run(file, key, takes) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [path.join(__dirname, 'fixtures', 'shared.js'), file, key, String(takes)],
      { timeout: 120000 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message}: ${stderr}`)) : resolve(Number(stdout))));
  });
}

test('four node processes on one file take one burst between them', async (t) => {
  const file = shmPath(t);
  // 4 x 150 attempts at a 200 burst refilling 1/h: exactly 200 pass in all
  // (each process alone on a memory store would pass 150).
  const counts = await Promise.all([0, 1, 2, 3].map(() => run(file, 'alice', 150)));
  assert.equal(counts.reduce((a, b) => a + b, 0), 200, `per process: ${counts}`);
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);
});

test('a new limiter on the same file finds a drained bucket drained', async (t) => {
  const file = shmPath(t);
  const pol = sluice.policy([{ capacity: 3, rate: '1/h' }], { name: 'p' });
  const a = new sluice.Limiter({ store: { shared: { path: file, maxKeys: 100 } } });
  assert.equal(a.store, 'shared');
  for (let i = 0; i < 3; i++) assert.equal((await a.take('bob', pol)).allowed, true);
  await a.close();
  const b = new sluice.Limiter({ store: { shared: { path: file, maxKeys: 100 } } });
  const d = await b.take('bob', pol);
  assert.equal(d.allowed, false);
  assert.equal(d.remaining, 0);
  assert.equal((await b.take('carol', pol)).allowed, true);
  await b.close();
});

test('a file made for another maxKeys is refused, naming it', async (t) => {
  const file = shmPath(t);
  const a = new sluice.Limiter({ store: { shared: { path: file, maxKeys: 100 } } });
  await a.close();
  assert.throws(() => new sluice.Limiter({ store: { shared: { path: file, maxKeys: 200 } } }),
    (e) => e.code === 'ERR_SLUICE_STORE' && e.message.includes(file) && e.message.includes('max_keys 100'));
  assert.throws(() => new sluice.Limiter({ store: { shared: { path: '/nonexistent-dir/x' } } }),
    (e) => e.code === 'ERR_SLUICE_STORE' && e.message.includes('/nonexistent-dir/x'));
  assert.throws(() => new sluice.Limiter({ store: { shared: {} } }), TypeError);
});

test('group: the file is made with that group and mode 0660, and a bad group is refused', async (t) => {
  const file = shmPath(t);
  const gid = Number(require('node:child_process').execFileSync('getent', ['group', 'daemon']).toString().split(':')[2]);
  const a = new sluice.Limiter({ store: { shared: { path: file, maxKeys: 100, group: 'daemon' } } });
  const st = fs.statSync(file);
  assert.equal(st.mode & 0o777, 0o660);
  assert.equal(st.gid, gid);
  await a.close();
  // The same file again, through its gid.
  const b = new sluice.Limiter({ store: { shared: { path: file, maxKeys: 100, group: gid } } });
  await b.close();
  const other = shmPath(t);
  assert.throws(() => new sluice.Limiter({ store: { shared: { path: other, group: 'no-such-group-sluice' } } }),
    (e) => e.code === 'ERR_SLUICE_STORE' && e.message.includes('no-such-group-sluice'));
  assert.equal(fs.existsSync(other), false);
  assert.throws(() => new sluice.Limiter({ store: { shared: { path: other, group: 'a b' } } }), /store.shared.group/);
  assert.throws(() => new sluice.Limiter({ store: { shared: { path: other, group: -1 } } }), /store.shared.group/);
});

test('a file another user owns, or writable by others, is refused naming why', async (t) => {
  const file = shmPath(t);
  const a = new sluice.Limiter({ store: { shared: { path: file, maxKeys: 100 } } });
  await a.close();
  fs.chmodSync(file, 0o666);
  assert.throws(() => new sluice.Limiter({ store: { shared: { path: file, maxKeys: 100 } } }),
    (e) => e.code === 'ERR_SLUICE_STORE' && e.message.includes(file));
  fs.chmodSync(file, 0o600);
  if (process.getuid() === 0) {
    fs.chownSync(file, 1, 1); // daemon: not this user, not root
    assert.throws(() => new sluice.Limiter({ store: { shared: { path: file, maxKeys: 100 } } }),
      (e) => e.code === 'ERR_SLUICE_STORE' && e.message.includes(file));
  }
});

test('node and sluice serve on one file share a bucket', async (t) => {
  const file = shmPath(t);
  const s = await startSluice(`store: {shared: {path: ${file}, max_keys: 10000}}
rules:
  - name: shared
    key: ["header:x-user-id"]
    limits: [{capacity: 200, rate: 1/h}]
`);
  try {
    assert.equal(await run(file, 'dave', 150), 150);
    const got = [];
    for (let i = 0; i < 60; i++) got.push((await request(s.port, '/v1/check', { 'x-user-id': 'dave' })).status);
    assert.equal(got.filter((c) => c === 200).length, 50, `statuses: ${got}`);
  } finally {
    await s.stop();
  }
});
