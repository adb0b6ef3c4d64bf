// classic.js -- the classic Express + ioredis token bucket, as the usual
// blog post writes it: a Lua script keeping a hash per user (tokens, time
// of the last refill; HMGET/HMSET/EXPIRE, bench/redis_classic.lua, the one
// the redis section measures), loaded once with SCRIPT LOAD and called
// with one EVALSHA per request, the app's clock passed in.
const fs = require('fs');
const path = require('path');
const Redis = require('ioredis');
const { main, userKey, redisUrl, CAPACITY, RATE_PER_S } = require('./common');

const script = fs.readFileSync(path.join(__dirname, '..', 'redis_classic.lua'),
  'utf8');

function tokenBucket(redis, sha) {
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
    res.set('X-RateLimit-Limit', String(CAPACITY));
    res.set('X-RateLimit-Remaining', String(tokens));
    if (!allowed) {
      return res.status(429).json({ error: 'Too Many Requests' });
    }
    return next();
  };
}

main(module, async () => {
  const redis = new Redis(redisUrl());
  const sha = await redis.script('load', script);
  return tokenBucket(redis, sha);
});
