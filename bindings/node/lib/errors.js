// The errors sluice gives: an Error with a code (ERR_SLUICE_*), and the
// status a call answers with when the limiter is closed.
'use strict';

// A call's status when the limiter was closed (the addon's statuses are 0
// or a negative errno).
const CLOSED = -100;

function sluiceError(code, message) {
  const e = new Error(message);
  e.code = code;
  return e;
}

// rate-limiter-flexible's method names on a Limiter: a TypeError pointing
// to sluice's.
function peerMethod(theirs, ours) {
  return new TypeError(`sluice: ${theirs} is rate-limiter-flexible's; in sluice that is limiter.${ours}`);
}

module.exports = { CLOSED, sluiceError, peerMethod };
