// app-http.js -- the same app asking a separate `sluice serve` over HTTP
// (for apps that cannot load the addon, or that share sluice serve's
// rules).  SLUICE_URL (default http://127.0.0.1:8080), SLUICE_RULE (default
// "default"), SLUICE_TIMEOUT_MS (default 200), PORT (default 3000).
const express = require('express');
const { sluiceLimit } = require('./sluice-http');

const app = express();
app.use(sluiceLimit({
  url: process.env.SLUICE_URL || 'http://127.0.0.1:8080',
  rule: process.env.SLUICE_RULE || 'default',
  timeoutMs: Number(process.env.SLUICE_TIMEOUT_MS || 200),
}));
app.get('/', (req, res) => res.json({ hello: req.get('x-user-id') || 'anonymous' }));
app.post('/api/upload', (req, res) => res.status(201).json({ stored: true }));

const port = Number(process.env.PORT || 3000);
app.listen(port, '127.0.0.1', () => console.log(`app listening on http://127.0.0.1:${port}`));
