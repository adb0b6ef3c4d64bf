// classic-headers.js -- classic.js's bucket (ioredis, one EVALSHA of
// bench/redis_classic.lua per request) sending the five headers sluice's
// middleware sends by default, in the same form: RateLimit-Policy,
// RateLimit (draft-11, "api";r=<remaining>;t=<seconds>), X-RateLimit-Limit,
// -Remaining and -Reset (seconds until the bucket is full again).  The
// in-process comparison (overhead.js) is then of the same work; classic.js
// stays the app as the blog posts write it.
const { main, CAPACITY, RATE_PER_S } = require('./common');
const { classic } = require('./classic');

const POLICY = `"api";q=${CAPACITY};w=${CAPACITY / RATE_PER_S}`;

function fiveHeaders(res, tokens) {
  const reset = Math.ceil((CAPACITY - tokens) / RATE_PER_S);
  res.set('RateLimit-Policy', POLICY);
  res.set('RateLimit', `"api";r=${tokens};t=${reset}`);
  res.set('X-RateLimit-Limit', String(CAPACITY));
  res.set('X-RateLimit-Remaining', String(tokens));
  res.set('X-RateLimit-Reset', String(reset));
}

main(module, () => classic(fiveHeaders));
