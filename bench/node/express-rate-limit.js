// express-rate-limit.js -- express-rate-limit with the rate-limit-redis
// store over ioredis.  A fixed window: the closest to a bucket of 100
// refilled 2/s is 100 requests per 50 s.
const Redis = require('ioredis');
const { rateLimit } = require('express-rate-limit');
const { RedisStore } = require('rate-limit-redis');
const { main, userKey, redisUrl, CAPACITY, RATE_PER_S } = require('./common');

main(module, () => {
  const client = new Redis(redisUrl());
  return rateLimit({
    windowMs: (CAPACITY / RATE_PER_S) * 1000,
    limit: CAPACITY,
    standardHeaders: 'draft-7',
    legacyHeaders: false,
    keyGenerator: userKey,
    store: new RedisStore({
      sendCommand: (command, ...args) => client.call(command, ...args),
    }),
  });
});
