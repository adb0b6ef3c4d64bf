// The native addon (src/addon.c, local.c, redis.c): every decision is
// made there, by libsluice.  Loaded once, by whichever module asks first.
'use strict';

const fs = require('node:fs');
const path = require('node:path');

// The package's folder (this file is in its lib/).
const PKG = path.join(__dirname, '..');

// The addon is built by the install script (scripts/build.js).  npm may
// hold install scripts back (npm 11's allowScripts): then build it on the
// first require, once.
function loadAddon() {
  const file = path.join(PKG, 'build', 'sluice.node');
  if (!fs.existsSync(file)) {
    const { spawnSync } = require('node:child_process');
    const r = spawnSync(process.execPath, [path.join(PKG, 'scripts', 'build.js')], { stdio: ['ignore', 2, 2] });
    if (r.status !== 0)
      throw new Error(`sluice: the native addon is not built and building it failed (see above); run \`node scripts/build.js\` in ${PKG}`);
  }
  return require(file);
}

module.exports = loadAddon();
