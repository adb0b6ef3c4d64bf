// five-headers.js -- no limiter: the key, then the five rate-limit headers
// sluice's middleware sends by default, with values of the same form, set
// by res.setHeader() as a JavaScript limiter sets them.  What the headers
// alone cost an app.
const { main, userKey, CAPACITY, RATE_PER_S } = require('./common');

main(module, () => {
  let remaining = CAPACITY;
  const policy = `"api";q=${CAPACITY};w=${CAPACITY / RATE_PER_S}`;
  return function fiveHeaders(req, res, next) {
    if (userKey(req) === undefined) throw new Error('no key');
    remaining = remaining === 0 ? CAPACITY - 1 : remaining - 1;
    res.setHeader('RateLimit-Policy', policy);
    res.setHeader('RateLimit', `"api";r=${remaining};t=1`);
    res.setHeader('X-RateLimit-Limit', CAPACITY);
    res.setHeader('X-RateLimit-Remaining', remaining);
    res.setHeader('X-RateLimit-Reset', 1);
    next();
  };
});
