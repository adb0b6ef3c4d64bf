// key-only.js -- a middleware that computes the benchmarks' key (the
// x-user-id header, else the address) and calls next(): every limited
// app pays for its key.
const { main, userKey } = require('./common');

main(module, () => function keyOnly(req, res, next) {
  if (userKey(req) === undefined) throw new Error('no key');
  next();
});
