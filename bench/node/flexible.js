// flexible.js -- rate-limiter-flexible's RateLimiterRedis over ioredis, as
// its README's Express middleware uses it.  It counts fixed windows: the
// closest to a bucket of 100 refilled 2/s is 100 points per 50 s.
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { main, userKey, redisUrl, CAPACITY, RATE_PER_S } = require('./common');

main(module, () => {
  const limiter = new RateLimiterRedis({
    storeClient: new Redis(redisUrl()),
    keyPrefix: 'rlflx',
    points: CAPACITY,
    duration: CAPACITY / RATE_PER_S,
  });
  return (req, res, next) => limiter.consume(userKey(req)).then(() => next(),
    (rej) => {
      if (rej instanceof Error) {
        console.error('rate limiter:', rej.message);
        return next(); // fail open on a store error
      }
      res.set('Retry-After', String(Math.ceil(rej.msBeforeNext / 1000)));
      return res.status(429).json({ error: 'Too Many Requests' });
    });
});
