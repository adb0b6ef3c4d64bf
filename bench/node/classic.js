// classic.js -- the classic Express + ioredis token bucket, as the usual
// blog post writes it: a Lua script keeping a hash per user (tokens, time
// of the last refill; HMGET/HMSET/EXPIRE, bench/redis_classic.lua, the one
// the redis section measures), loaded once with SCRIPT LOAD and called
// with one EVALSHA per request, the app's clock passed in.  It sends
// X-RateLimit-Limit and X-RateLimit-Remaining, as the posts do;
// classic-headers.js is the same bucket sending sluice's five headers.
const fs = require('fs');
const path = require('path');
const Redis = require('ioredis');
const { main, userKey, redisUrl, CAPACITY, RATE_PER_S } = require('./common');

const script = fs.readFileSync(path.join(__dirname, '..', 'redis_classic.lua'),
  'utf8');

// The blog post's two headers.
function twoHeaders(res, tokens) {
  res.set('X-RateLimit-Limit', String(CAPACITY));
  res.set('X-RateLimit-Remaining', String(tokens));
}

// The middleware; `headers(res, tokens)` sets the response's headers.
function tokenBucket(redis, sha, headers) {
  return async (req, res, next) => {
    const key = `rate:${userKey(req)}`;
    let allowed, tokens;
    try {
      [allowed, tokens] = await redis.evalsha(sha, 1, key, CAPACITY,
        RATE_PER_S, Date.now(), 1);
    } catch (err) {
      // Fail open: a Redis problem must not take the API down.
      console.error('rate limiter:', err.message);
      return next();
    }
    headers(res, tokens);
    if (!allowed) {
      return res.status(429).json({ error: 'Too Many Requests' });
    }
    return next();
  };
}

// Connects, loads the script, and returns the middleware.
async function classic(headers) {
  const redis = new Redis(redisUrl());
  const sha = await redis.script('load', script);
  return tokenBucket(redis, sha, headers);
}

main(module, () => classic(twoHeaders));
module.exports.classic = classic;
