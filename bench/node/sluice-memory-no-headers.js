// sluice-memory-no-headers.js -- sluice-memory.js with headers: false:
// the decision without the rate-limit headers.
const sluice = require('sluice');
const { main, userKey, CAPACITY, RATE_PER_S } = require('./common');

main(module, () => {
  const limiter = new sluice.Limiter({ store: 'memory', maxKeys: 1e6 });
  const policy = sluice.policy([{ capacity: CAPACITY, rate: `${RATE_PER_S}/s` }],
    { name: 'api' });
  return sluice.express({ limiter, policy, key: userKey, headers: false });
});
