// The test helpers themselves: a test that fails leaves no server behind,
// so its file's process ends and the run goes on (the servers' pipes
// would otherwise hold it open forever).
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// Runs fixtures/fails_with_servers.js; resolves { code, pids, err } once
// it ends, or { code: 'still running' } after ms (then ends it and the
// servers it named: this test's own children).
function runFixture(args, ms) {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT; // its own run, reporting as one, not a subtest of this
  const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'fails_with_servers.js'), ...args],
    { stdio: ['ignore', 'pipe', 'pipe'], env });
  let err = ''; // stdout (the test's report) and stderr
  child.stdout.on('data', (d) => { err += d; });
  child.stderr.on('data', (d) => { err += d; });
  const pids = () => ((err.match(/^PIDS ([0-9 ]+)$/m) || [])[1] || '').split(' ').filter(Boolean).map(Number);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      for (const pid of pids()) if (alive(pid)) process.kill(pid, 'SIGKILL');
      resolve({ code: 'still running', pids: pids(), err });
    }, ms);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, pids: pids(), err });
    });
  });
}

for (const kind of ['redis', 'cluster']) {
  test(`a test that fails with a ${kind === 'cluster' ? 'Redis Cluster' : 'Redis'} running: its file still ends, the servers stopped`, async () => {
    const r = await runFixture([kind], 90000);
    assert.equal(r.pids.length, kind === 'cluster' ? 3 : 1, r.err);
    assert.notEqual(r.code, 'still running', `the test file did not end:\n${r.err}`);
    assert.equal(r.code, 1, r.err);
    assert.match(r.err, /failed on purpose/);
    assert.deepEqual(r.pids.filter(alive), [], 'no server left running');
  });
}

// Holds a port with a server that accepts and never answers.
function silentServer() {
  const net = require('node:net');
  return new Promise((resolve) => {
    const socks = new Set();
    const s = net.createServer((c) => { socks.add(c); c.on('close', () => socks.delete(c)); });
    s.listen(0, '127.0.0.1', () => resolve({
      port: s.address().port,
      close: () => new Promise((r) => { for (const c of socks) c.destroy(); s.close(r); }),
    }));
  });
}

test('a Redis whose port is taken by another server ends at start, said as such (no test stuck on the other server)', async () => {
  const { Redis } = require('./helpers');
  const other = await silentServer();
  try {
    await assert.rejects(Redis.start([], other.port), /redis-server on [0-9]+ ended at start: .*Address already in use/s);
  } finally {
    await other.close();
  }
});
