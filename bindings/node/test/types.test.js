// index.d.ts and the README: every JavaScript and TypeScript example of
// README.md, extracted into files of its own, compiles under
// `tsc --strict` (typescript from npm) against the package's types --
// JavaScript through checkJs, with the real types of express, fastify and
// node.  A wrong option name in an example, or a type that does not cover
// an option, fails here.
'use strict';
const { test } = require('./helpers');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const PKG = path.resolve(__dirname, '..');

function examples() {
  const text = fs.readFileSync(path.join(PKG, 'README.md'), 'utf8');
  const out = [];
  const re = /^```(js|ts)\n([\s\S]*?)^```$/gm;
  for (let m; (m = re.exec(text)) !== null;) {
    const line = text.slice(0, m.index).split('\n').length;
    out.push({ lang: m[1], code: m[2], line });
  }
  return out;
}

function tsc(dir, extra = []) {
  const bin = path.join(PKG, 'node_modules', 'typescript', 'bin', 'tsc');
  return spawnSync(process.execPath, [bin, '-p', dir, ...extra], { cwd: PKG, encoding: 'utf8', timeout: 300000 });
}

// A folder inside the package (so express, fastify and @types resolve from
// its node_modules), removed afterwards.
function project(t, files) {
  const dir = fs.mkdtempSync(path.join(PKG, '.tsc-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  for (const [name, code] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), code);
  fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      strict: true, noEmit: true, allowJs: true, checkJs: true, module: 'commonjs', target: 'es2022',
      esModuleInterop: true, types: ['node'], skipLibCheck: false,
      paths: { sluice: ['../index.d.ts'] },
    },
    include: ['*.ts', '*.js'],
  }));
  return dir;
}

test('README examples compile under tsc --strict', (t) => {
  const ex = examples();
  assert.ok(ex.length >= 6, `the README has its examples: ${ex.length}`);
  const files = {};
  ex.forEach((e, i) => {
    // Each example is a module of its own (its names do not clash).
    const tail = e.lang === 'js' ? '\nmodule.exports = {};\n' : '\nexport {};\n';
    files[`readme_${String(i).padStart(2, '0')}_line${e.line}.${e.lang}`] = e.code + tail;
  });
  const dir = project(t, files);
  const r = tsc(dir);
  assert.equal(r.status, 0, `tsc --strict failed:\n${r.stdout}${r.stderr}`);
});

test('the types refuse what the middleware refuses (a check that tsc does check)', (t) => {
  const dir = project(t, {
    'bad.ts': `import * as sluice from 'sluice';
const limiter = new sluice.Limiter();
const policy = sluice.policy([{ capacity: 1, rate: '1/s' }]);
sluice.express({ limiter, policy, keyGenerator: () => 'x' });
sluice.express({ limiter, policy, headers: 'draft-9' });
new sluice.Limiter({ stor: 'memory' });
limiter.block('k', policy);
sluice.policy([{ quota: 5, per: 'fortnight' }]);
sluice.policy([{ quota: 5, per: 'day', align: 'midnight' }]);
export {};
`,
  });
  const r = tsc(dir);
  assert.notEqual(r.status, 0);
  const out = r.stdout + r.stderr;
  assert.match(out, /keyGenerator/);
  assert.match(out, /draft-9/);
  assert.match(out, /stor/);
  assert.match(out, /bad\.ts\(7,/, 'block needs ms');
  assert.match(out, /fortnight/, 'a quota\'s unit is one of QuotaUnit');
  assert.match(out, /midnight/, 'align is calendar or first_use');
});
