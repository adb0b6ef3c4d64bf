// bare.js -- Express with no limiter: the floor every limited app is
// measured against.
const { serve } = require('./common');

serve(null);
