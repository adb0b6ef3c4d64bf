// app.js -- an Express app limited by sluice in its own process.
//   REDIS_URL: share the buckets through Redis (every instance of the app,
//   and any `sluice serve` on the same Redis); unset: the memory store.
//   REDIS_TIMEOUT_MS: how long a decision may wait for Redis before the
//   rule's onStoreError applies (default 50).  PORT (default 3000).
const express = require('express');
const sluice = require('sluice');

const redis = { url: process.env.REDIS_URL, timeoutMs: Number(process.env.REDIS_TIMEOUT_MS || 50) };
const limiter = new sluice.Limiter({ store: redis.url ? { redis } : 'memory' });
const api = sluice.policy([{ capacity: 100, rate: '2/s' }, { capacity: 10000, rate: '10000/day' }], { name: 'api' });
const upload = sluice.policy([{ capacity: 5, rate: '5/min' }], { name: 'upload' });

// Whose bucket: the user your authentication established -- here the
// x-user-id header, which an auth proxy in front sets (stripping the
// client's own) -- else the client address (IPv6 grouped by /64).  Never
// key on a header a client can write itself.
const key = (req) => req.get('x-user-id') || sluice.ipKey(req.ip);

const app = express();
app.use(sluice.express({ limiter, policy: api, key }));
app.get('/', (req, res) => res.json({ hello: req.get('x-user-id') || 'anonymous' }));
app.post('/api/upload', sluice.express({ limiter, policy: upload, key, onStoreError: 'closed' }),
  (req, res) => res.status(201).json({ stored: true }));

const port = Number(process.env.PORT || 3000);
const server = app.listen(port, '127.0.0.1', () => console.log(`app listening on http://127.0.0.1:${port}`));
process.on('SIGTERM', () => server.close(() => limiter.close()));
