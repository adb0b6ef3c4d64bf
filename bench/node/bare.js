// bare.js -- Express with no limiter: the floor every limited app is
// measured against.
const { main } = require('./common');

main(module, () => null);
