// sluice-memory.js -- Express + sluice, the in-process memory store.
const sluice = require('sluice');
const { serve, userKey, CAPACITY, RATE_PER_S } = require('./common');

const limiter = new sluice.Limiter({ store: 'memory', maxKeys: 1e6 });
const policy = sluice.policy([{ capacity: CAPACITY, rate: `${RATE_PER_S}/s` }],
  { name: 'api' });

serve(sluice.express({ limiter, policy, key: userKey }));
