// app.js -- a tiny Express app limited by sluice.
//   SLUICE_URL (default http://127.0.0.1:8080), SLUICE_RULE (default "default"),
//   PORT (default 3000).  Start sluice first: `sluice serve`.
const express = require('express');
const { sluiceLimit } = require('./sluice');

const app = express();
app.use(sluiceLimit({
  url: process.env.SLUICE_URL || 'http://127.0.0.1:8080',
  rule: process.env.SLUICE_RULE || 'default',
}));
app.get('/', (req, res) => res.json({ hello: req.get('x-user-id') || 'anonymous' }));
app.post('/api/upload', (req, res) => res.status(201).json({ stored: true }));

const port = Number(process.env.PORT || 3000);
app.listen(port, '127.0.0.1', () => console.log(`app listening on http://127.0.0.1:${port}`));
