// common.js -- what every benchmarked app shares: one Express app with one
// route answering a small JSON, the limiter under test mounted in front of
// it, listening on 127.0.0.1:$PORT.  Each variant file passes its
// middleware (or none) and nothing else differs between them.
const express = require('express');

// Whose bucket: the x-user-id header, else the client address (every
// variant uses this same key).
function userKey(req) {
  return req.get('x-user-id') || req.ip;
}

// The classic policy of the benchmarks: a bucket of 100 refilled 2/s.
const CAPACITY = 100;
const RATE_PER_S = 2;

// Runs the app with `middleware` (or a promise of it, or null for none)
// in front of the route.
async function serve(middleware) {
  const mw = await middleware;
  const app = express();
  app.disable('x-powered-by');
  if (mw) app.use(mw);
  app.get('/', (req, res) => res.json({ ok: true }));
  const port = Number(process.env.PORT);
  if (!Number.isInteger(port) || port <= 0) {
    throw new RangeError('PORT must be set to the port to listen on');
  }
  const server = app.listen(port, '127.0.0.1', () =>
    console.log(`listening on 127.0.0.1:${port}`));
  return server;
}

function redisUrl() {
  const url = process.env.REDIS_URL;
  if (!url) throw new RangeError('REDIS_URL must be set (redis://host:port)');
  return url;
}

// Each variant file exports middleware() -> its middleware (or a promise
// of it) and serves the app when run as `node <file>`: overhead.js drives
// the very same middlewares without HTTP.
function main(mod, middleware) {
  mod.exports = { middleware };
  if (require.main === mod) {
    serve(middleware()).catch((err) => {
      console.error(err.message);
      process.exit(1);
    });
  }
}

module.exports = { main, serve, userKey, redisUrl, CAPACITY, RATE_PER_S };
