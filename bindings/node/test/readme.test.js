// The README's first example runs as written: copied out of README.md into
// an app folder of its own (sluice and express resolved as an installed
// app resolves them), started, and asked over HTTP.
'use strict';
const { test, freePort, waitFor, track, stopChild } = require('./helpers');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');

const PKG = path.resolve(__dirname, '..');

// The ```js blocks of the README, in order.
function jsBlocks() {
  const text = fs.readFileSync(path.join(PKG, 'README.md'), 'utf8');
  return [...text.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
}

function get(port) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', () => resolve(null));
  });
}

test('the README\'s first example is an app that starts, listens and limits', async () => {
  const first = jsBlocks()[0];
  assert.match(first, /listen\(/, 'it listens');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-readme-'));
  let child = null;
  try {
    fs.mkdirSync(path.join(dir, 'node_modules'));
    fs.symlinkSync(PKG, path.join(dir, 'node_modules', 'sluice'));
    fs.symlinkSync(path.join(PKG, 'node_modules', 'express'), path.join(dir, 'node_modules', 'express'));
    fs.writeFileSync(path.join(dir, 'app.js'), first);
    const port = await freePort();
    child = track(spawn(process.execPath, ['app.js'], { cwd: dir, env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] }), 'readme app');
    let r = null;
    await waitFor(async () => {
      if (child.exitCode !== null) throw new Error(`the example exited (${child.exitCode}):\n${child.log()}`);
      r = await get(port);
      return r !== null;
    }, 'the example to listen', 60000);
    assert.equal(r.status, 200);
    assert.equal(r.body, 'hello: 99 left');
    assert.equal(r.headers['ratelimit-policy'], '"api";q=100;w=50');
  } finally {
    await stopChild(child);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
