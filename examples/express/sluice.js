// sluice.js -- Express middleware: one `POST /v1/take` to sluice per request.
// Sets the rate-limit headers and answers 429 when the bucket is empty.
const HEADERS = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset',
  'ratelimit-policy', 'ratelimit', 'retry-after'];

function sluiceLimit({ url = 'http://127.0.0.1:8080', rule = 'default',
  key = (req) => req.get('x-user-id') || req.ip, failOpen = true } = {}) {
  return async (req, res, next) => {
    let r, d;
    try {
      r = await fetch(`${url}/v1/take`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ rule, key: String(key(req)) }), signal: AbortSignal.timeout(1000) });
      d = await r.json();
      if (r.status !== 200 && r.status !== 429) throw new Error(`sluice: ${r.status} ${JSON.stringify(d)}`);
    } catch (err) {
      return failOpen ? next() : next(err); // sluice unreachable: open or closed, your choice
    }
    for (const h of HEADERS) if (r.headers.has(h)) res.set(h, r.headers.get(h));
    res.set('X-RateLimit-Limit', String(d.limit)).set('X-RateLimit-Remaining', String(d.remaining));
    if (d.allowed) return next();
    res.set('Retry-After', String(Math.max(1, Math.ceil(d.retry_after_ms / 1000))));
    res.status(429).json({ error: 'rate_limited', retry_after_ms: d.retry_after_ms, policy: rule });
  };
}

module.exports = { sluiceLimit };
