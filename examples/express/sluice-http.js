// sluice-http.js -- Express middleware asking `sluice serve` for a decision
// with one `POST /v1/take` per request, over a keep-alive connection pool.
// Copies sluice's rate-limit headers; 429 when limited.  When sluice cannot
// answer in timeoutMs: failOpen lets the request through with no headers,
// else 503.
const http = require('node:http');

const HEADERS = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset',
  'ratelimit-policy', 'ratelimit', 'retry-after'];

function sluiceLimit({ url = 'http://127.0.0.1:8080', rule = 'default', timeoutMs = 200,
  key = (req) => req.get('x-user-id') || req.ip, failOpen = true, maxSockets = 64 } = {}) {
  const target = new URL('/v1/take', url);
  const agent = new http.Agent({ keepAlive: true, maxSockets });

  function ask(body, done) {
    let finished = false;
    const finish = (err, status, headers, text) => {
      if (finished) return;
      finished = true;
      done(err, status, headers, text);
    };
    const req = http.request(target, {
      method: 'POST', agent, timeout: timeoutMs,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => finish(null, res.statusCode, res.headers, text));
      res.on('error', finish);
    });
    // One deadline for the whole exchange, connect included.
    const timer = setTimeout(() => req.destroy(new Error('sluice: timed out')), timeoutMs);
    req.on('close', () => clearTimeout(timer));
    req.on('timeout', () => req.destroy(new Error('sluice: timed out')));
    req.on('error', finish);
    req.end(body);
  }

  return (req, res, next) => {
    ask(JSON.stringify({ rule, key: String(key(req)) }), (err, status, headers, text) => {
      let d;
      try {
        if (err) throw err;
        d = JSON.parse(text);
        if (status !== 200 && status !== 429) throw new Error(`sluice: ${status} ${text}`);
      } catch (e) {
        if (failOpen) return next(); // no rate-limit headers: nothing was decided
        return res.status(503).json({ error: 'store_unavailable' });
      }
      for (const h of HEADERS) if (headers[h] !== undefined) res.setHeader(h, headers[h]);
      if (d.allowed) return next();
      res.status(429).json({ error: 'rate_limited', retry_after_ms: d.retry_after_ms, policy: rule });
    });
  };
}

module.exports = { sluiceLimit };
