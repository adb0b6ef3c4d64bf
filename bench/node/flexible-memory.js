// flexible-memory.js -- rate-limiter-flexible's RateLimiterMemory, as its
// README's Express middleware uses it, sending the headers sluice's
// middleware sends by default (RateLimit-Policy, RateLimit,
// X-RateLimit-Limit/-Remaining/-Reset) so that the in-process comparison
// is of the same work.  A fixed window: 100 points per 50 s.
const { RateLimiterMemory } = require('rate-limiter-flexible');
const { main, userKey, CAPACITY, RATE_PER_S } = require('./common');

main(module, () => {
  const window = CAPACITY / RATE_PER_S;
  const limiter = new RateLimiterMemory({ points: CAPACITY, duration: window });
  const policy = `"api";q=${CAPACITY};w=${window}`;
  const headers = (res, r) => {
    const reset = Math.ceil(r.msBeforeNext / 1000);
    res.setHeader('RateLimit-Policy', policy);
    res.setHeader('RateLimit', `"api";r=${r.remainingPoints};t=${reset}`);
    res.setHeader('X-RateLimit-Limit', CAPACITY);
    res.setHeader('X-RateLimit-Remaining', r.remainingPoints);
    res.setHeader('X-RateLimit-Reset', reset);
  };
  return (req, res, next) => limiter.consume(userKey(req)).then((r) => {
    headers(res, r);
    next();
  }, (rej) => {
    if (rej instanceof Error) return next(rej);
    headers(res, rej);
    res.set('Retry-After', String(Math.ceil(rej.msBeforeNext / 1000)));
    return res.status(429).json({ error: 'Too Many Requests' });
  });
});
