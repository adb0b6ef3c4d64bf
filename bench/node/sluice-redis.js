// sluice-redis.js -- Express + sluice with its Redis store (libsluice's own
// client on Node's event loop; no ioredis).
const sluice = require('sluice');
const { main, userKey, redisUrl, CAPACITY, RATE_PER_S } = require('./common');

main(module, () => {
  const limiter = new sluice.Limiter({
    store: { redis: { url: redisUrl(), timeoutMs: 50 } },
  });
  const policy = sluice.policy([{ capacity: CAPACITY, rate: `${RATE_PER_S}/s` }],
    { name: 'api' });
  return sluice.express({ limiter, policy, key: userKey });
});
