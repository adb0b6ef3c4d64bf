// express-rate-limit-memory.js -- express-rate-limit with its own
// MemoryStore, sending draft-7 RateLimit/RateLimit-Policy and the legacy
// X-RateLimit-* headers (five, as sluice's middleware does by default).
// A fixed window: 100 requests per 50 s.
const { rateLimit } = require('express-rate-limit');
const { main, userKey, CAPACITY, RATE_PER_S } = require('./common');

main(module, () => rateLimit({
  windowMs: (CAPACITY / RATE_PER_S) * 1000,
  limit: CAPACITY,
  standardHeaders: 'draft-7',
  legacyHeaders: true,
  keyGenerator: userKey,
}));
