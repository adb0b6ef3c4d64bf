// noop.js -- Express with a middleware that does nothing but call next():
// what one more app.use() layer costs before any limiter work.
const { main } = require('./common');

main(module, () => function noop(req, res, next) {
  next();
});
