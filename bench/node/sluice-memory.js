// sluice-memory.js -- Express + sluice, the in-process memory store.
const sluice = require('sluice');
const { main, userKey, CAPACITY, RATE_PER_S } = require('./common');

main(module, () => {
  const limiter = new sluice.Limiter({ store: 'memory', maxKeys: 1e6 });
  const policy = sluice.policy([{ capacity: CAPACITY, rate: `${RATE_PER_S}/s` }],
    { name: 'api' });
  return sluice.express({ limiter, policy, key: userKey });
});
