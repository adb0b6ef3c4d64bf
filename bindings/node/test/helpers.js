// helpers.js -- real servers for the tests: redis-server and `sluice serve`
// on free loopback ports, stopped when the test process ends (even when a
// test fails).
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const nodeTest = require('node:test');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const BUILD = process.env.SLUICE_BUILD || path.join(ROOT, 'build');
const children = new Set();

process.on('exit', () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// The bound of one redis-cli run.
const CLI_TIMEOUT_MS = 60000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(pred, what, timeoutMs = 20000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await pred()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

function canConnect(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

function track(child, name) {
  children.add(child);
  child.on('exit', () => children.delete(child));
  let log = '';
  child.stdout && child.stdout.on('data', (d) => { log += d; });
  child.stderr && child.stderr.on('data', (d) => { log += d; });
  child.log = () => `${name}:\n${log}`;
  return child;
}

function stopChild(child, sig = 'SIGTERM') {
  if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill(sig);
  });
}

// A server that ended while starting: its port, found free, may have been
// taken before it could bind it (anyone on this machine may take one), so
// a caller that chose the port may try another.
class ExitedAtStart extends Error {}

function exited(child) {
  return child.exitCode !== null || child.signalCode !== null;
}

// start() again, at most `tries` times in all, while it ends ExitedAtStart.
async function retryStart(start, tries = 3) {
  for (let i = 1; ; i++) {
    try {
      return await start();
    } catch (e) {
      if (!(e instanceof ExitedAtStart) || i >= tries) throw e;
    }
  }
}

// redis-server on a free port, no persistence.  kill() ends it at once;
// start() brings it back on the same port.
class Redis {
  static async start(extra = [], port = undefined) {
    const once = async () => {
      const r = new Redis(port || await freePort(), extra);
      await r.start();
      return r;
    };
    return port ? once() : retryStart(once);
  }

  constructor(port, extra) {
    this.port = port;
    this.extra = extra;
    this.url = `redis://127.0.0.1:${port}`;
  }

  async start() {
    this.proc = track(spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1',
      '--save', '', '--appendonly', 'no', ...this.extra], { stdio: ['ignore', 'pipe', 'pipe'] }), 'redis-server');
    // Until this server answers, by its own pid (another may hold the
    // port), or ends.
    const proc = this.proc;
    await waitFor(() => {
      if (exited(proc)) throw new ExitedAtStart(`redis-server on ${this.port} ended at start: ${proc.log()}`);
      const r = spawnSync('redis-cli', ['-p', String(this.port), 'INFO', 'server'], { encoding: 'utf8', timeout: 5000 });
      return (r.stdout || '').includes(`process_id:${proc.pid}\r`);
    }, `redis-server on ${this.port}`);
  }

  cli(...args) {
    // Bounded: a spawnSync blocks the loop, so no test timeout could end
    // a redis-cli waiting on a server that does not answer.
    const r = spawnSync('redis-cli', ['-p', String(this.port), ...args], { encoding: 'utf8', timeout: CLI_TIMEOUT_MS });
    return r.stdout || '';
  }

  kill() { return stopChild(this.proc, 'SIGKILL'); }

  stop() { return stopChild(this.proc); }
}

// Certificates made with the openssl command in a temporary folder
// (removed when the test process ends): a CA, a server certificate for
// localhost and 127.0.0.1 signed by it, a client certificate signed by it,
// and another CA that signed none of them.  Returns { dir, path(name) }.
function makeCerts() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-node-tls-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const openssl = (...args) => {
    const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8', timeout: 60000 });
    if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.error || ''}${r.stderr}`);
  };
  fs.writeFileSync(path.join(dir, 'san.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  openssl('req', '-x509', ...key, '-keyout', 'ca.key', '-out', 'ca.crt', '-subj', '/CN=sluice-test-ca', '-days', '2');
  openssl('req', '-x509', ...key, '-keyout', 'other.key', '-out', 'other.crt', '-subj', '/CN=another-ca', '-days', '2');
  for (const [name, cn, ext] of [['server', 'localhost', ['-extfile', 'san.cnf']], ['client', 'sluice-client', []]]) {
    openssl('req', ...key, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial',
      '-days', '2', ...ext, '-out', `${name}.crt`);
  }
  return { dir, path: (name) => path.join(dir, name) };
}

// redis-server with a TLS port beside its plain one (the plain port tells
// when it is up, and lets a test look at the keys with redis-cli).
// authClients 'yes' asks every TLS client for a certificate.
async function startTlsRedis(certs, authClients = 'no') {
  let tlsPort;
  const port = await freePort();
  do tlsPort = await freePort(); while (tlsPort === port);
  const r = await Redis.start(['--tls-port', String(tlsPort), '--tls-cert-file', certs.path('server.crt'),
    '--tls-key-file', certs.path('server.key'), '--tls-ca-cert-file', certs.path('ca.crt'),
    '--tls-auth-clients', authClients], port);
  r.tlsPort = tlsPort;
  r.tlsUrl = `rediss://127.0.0.1:${tlsPort}`;
  return r;
}

// `redis-server --sentinel` on a free port watching `port` (a master on
// loopback) as `name`, quorum 1, in its own folder (Sentinel rewrites its
// config).  certs: the Sentinel then listens with TLS only and reaches
// the master over TLS too.
async function startSentinel(port, { name = 'mymaster', certs = null } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-node-sentinel-'));
  const sport = await freePort();
  const tls = certs ? ['--tls', '--cacert', certs.path('ca.crt')] : [];
  const lines = certs
    ? ['port 0', `tls-port ${sport}`, `tls-cert-file ${certs.path('server.crt')}`,
      `tls-key-file ${certs.path('server.key')}`, `tls-ca-cert-file ${certs.path('ca.crt')}`,
      'tls-auth-clients no', 'tls-replication yes']
    : [`port ${sport}`];
  lines.push('bind 127.0.0.1', `dir ${dir}`, `sentinel monitor ${name} 127.0.0.1 ${port} 1`);
  fs.writeFileSync(path.join(dir, 'sentinel.conf'), `${lines.join('\n')}\n`);
  const proc = track(spawn('redis-server', [path.join(dir, 'sentinel.conf'), '--sentinel'],
    { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] }), 'sentinel');
  const cli = (...args) => spawnSync('redis-cli', ['-p', String(sport), ...tls, ...args], { encoding: 'utf8', timeout: CLI_TIMEOUT_MS }).stdout || '';
  await waitFor(() => cli('PING').trim() === 'PONG', `sentinel on ${sport}`);
  return {
    addr: `127.0.0.1:${sport}`,
    cli,
    stop: async () => { await stopChild(proc); fs.rmSync(dir, { recursive: true, force: true }); },
  };
}

function portFree(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

// A port free together with port + 10000 (a cluster node's bus), below the
// ephemeral range.
async function freeClusterPort() {
  for (let i = 0; i < 1000; i++) {
    const port = 20000 + Math.floor(Math.random() * 10000);
    if (await portFree(port) && await portFree(port + 10000)) return port;
  }
  throw new Error('no free cluster port');
}

// A Redis Cluster of `n` masters on loopback, joined by redis-cli.
async function startCluster(n = 3) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-cluster-'));
  const nodes = [];
  for (let i = 0; i < n; i++) {
    nodes.push(await retryStart(async () => {
      const port = await freeClusterPort();
      const d = path.join(dir, String(port));
      fs.mkdirSync(d);
      return Redis.start(['--cluster-enabled', 'yes', '--dir', d, '--cluster-config-file', 'nodes.conf'], port);
    }));
  }
  const r = spawnSync('redis-cli', ['--cluster', 'create', ...nodes.map((x) => `127.0.0.1:${x.port}`), '--cluster-yes'],
    { encoding: 'utf8', timeout: 60000 });
  if (r.status !== 0) throw new Error(`cluster create: ${r.stdout}${r.stderr}`);
  for (const x of nodes) await waitFor(() => x.cli('CLUSTER', 'INFO').includes('cluster_state:ok'), 'cluster_state:ok');
  return {
    nodes,
    seeds: nodes.map((x) => `127.0.0.1:${x.port}`),
    stop: async () => {
      for (const x of nodes) await x.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

// `sluice serve` (the build's binary) with a YAML config.
async function startSluice(config) {
  const bin = path.join(BUILD, 'sluice');
  if (!fs.existsSync(bin)) throw new Error(`${bin} not found: build sluice first (make)`);
  return retryStart(async () => {
    const port = await freePort();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-node-'));
    const file = path.join(dir, 'sluice.yaml');
    fs.writeFileSync(file, `listen: 127.0.0.1:${port}\n${config}`);
    const proc = track(spawn(bin, ['serve', '-c', file], { stdio: ['ignore', 'pipe', 'pipe'] }), 'sluice');
    try {
      await waitFor(async () => {
        if (exited(proc)) throw new ExitedAtStart(`sluice serve on ${port} ended at start: ${proc.log()}`);
        return await canConnect(port) && !exited(proc);
      }, `sluice serve on ${port}`);
    } catch (e) {
      fs.rmSync(dir, { recursive: true, force: true });
      throw e;
    }
    return {
      port,
      proc,
      stop: async () => { await stopChild(proc); fs.rmSync(dir, { recursive: true, force: true }); },
    };
  });
}

// Resolves once the limiter's store answers (connected, script loaded):
// on a busy machine the first calls may outlast a short timeout.
async function storeReady(limiter, policy, timeoutMs = 20000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      await limiter.take('ready', policy, { cost: 0 });
      // Answered by Redis, not by the local fallback.
      if (!limiter.local) return;
      if (Date.now() > end) throw new Error('the store answered only through the local fallback');
    } catch (e) {
      if (Date.now() > end) throw e;
    }
    await sleep(25);
  }
}

// Takes against a server this client cannot use: every one fails (none is
// decided), until one says `reason` -- the node's failure as reported.
async function failsWith(l, pol, reason, timeoutMs = 20000) {
  const end = Date.now() + timeoutMs;
  let last = null;
  for (let i = 0; Date.now() < end; i++) {
    const e = await l.take(`nope-${i}`, pol).then((d) => { throw new Error(`decided: ${JSON.stringify(d)}`); }, (err) => err);
    if (!/^ERR_SLUICE_(STORE|TIMEOUT)$/.test(e.code)) throw e;
    last = e;
    if (reason.test(e.message)) return e;
    await sleep(50);
  }
  throw new Error(`no take failed saying ${reason}; the last: ${last && last.message}`);
}

// One HTTP request to host:port; resolves { status, headers, body, ms }.
// An HTTP server for handler (an app, a plain function) on a free port of
// host, once it listens.
function listen(handler, host = '127.0.0.1') {
  const http = require('node:http');
  return new Promise((resolve, reject) => {
    const server = http.createServer(handler);
    server.once('error', reject);
    server.listen(0, host, () => resolve(server));
  });
}

function request(port, urlPath = '/', headers = {}, agent = undefined, host = '127.0.0.1') {
  const http = require('node:http');
  const t0 = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port, path: urlPath, headers, agent }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body,
        ms: Number(process.hrtime.bigint() - t0) / 1e6 }));
    });
    req.on('error', reject);
    req.end();
  });
}

// Limiters on the Redis store made by one test file, closed after each
// test: limiter(redisOpts) makes one (timeoutMs 2000 unless given).  They
// reject on a store failure (onStoreError: 'reject'): these tests watch
// what the Redis client does, which the local fallback would hide.
function limiterPool(sluice, test) {
  const open = [];
  test.afterEach(async () => { while (open.length) await open.pop().close(); });
  return (redisOpts) => {
    const l = new sluice.Limiter({ store: { redis: { timeoutMs: 2000, ...redisOpts } }, onStoreError: 'reject' });
    open.push(l);
    return l;
  };
}

// node:test's test() and hooks with a timeout unless one is given: a test
// or hook still waiting after TEST_TIMEOUT_MS (SLUICE_TEST_TIMEOUT_MS,
// else 3 minutes; the slowest test takes seconds) fails with its name
// instead of hanging the run (a take whose callback never comes, a
// close() or a server stop that never ends).  Every test file takes
// `test` from here.
const TEST_TIMEOUT_MS = Number(process.env.SLUICE_TEST_TIMEOUT_MS) || 180000;

function withTimeout(opts) {
  return { timeout: TEST_TIMEOUT_MS, ...opts };
}

// A test or hook that fails leaves no server behind: the children it
// started (track()) and did not stop are killed.  Their pipes would
// otherwise hold the test process open after its last test, and `node
// --test` would wait for it forever (a failed startSluice() after
// startCluster() hung keys.test.js with three cluster nodes running).
function stopsWhatItStarted(fn) {
  if (typeof fn !== 'function') return fn;
  return async function (t) {
    const before = new Set(children);
    try {
      return await fn.call(this, t);
    } catch (e) {
      await Promise.all([...children].filter((c) => !before.has(c)).map((c) => stopChild(c, 'SIGKILL')));
      throw e;
    }
  };
}

function test(name, opts, fn) {
  if (typeof name === 'function' || (name !== null && typeof name === 'object')) [name, opts, fn] = [undefined, name, opts];
  if (typeof opts === 'function') [opts, fn] = [undefined, opts];
  fn = stopsWhatItStarted(fn);
  return name === undefined ? nodeTest(withTimeout(opts), fn) : nodeTest(name, withTimeout(opts), fn);
}
Object.assign(test, nodeTest);
for (const hook of ['before', 'after', 'beforeEach', 'afterEach'])
  test[hook] = (fn, opts) => nodeTest[hook](stopsWhatItStarted(fn), withTimeout(opts));
test.test = test;

// A route that never answers, counting the requests that reached it and
// the responses the client closed, and a client that sends one request
// and hangs up once it has reached the route: resolves 'hung up', or the
// status when the limiter answered first.
function hangUpRoute() {
  const n = { ran: 0, closed: 0 };
  const route = (req, res) => {
    n.ran++;
    res.on('close', () => { n.closed++; });
  };
  const hangUp = (port) => new Promise((resolve, reject) => {
    const before = n.ran;
    const req = require('node:http').request({ host: '127.0.0.1', port, path: '/' }, (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.on('error', () => {});
    req.end();
    waitFor(() => n.ran > before, 'the handler').then(() => {
      req.destroy();
      return waitFor(() => n.closed === n.ran, 'the server to see the hang-up');
    }).then(() => resolve('hung up'), reject);
  });
  return { n, route, hangUp };
}

module.exports = { ROOT, test, hangUpRoute, TEST_TIMEOUT_MS, limiterPool, BUILD, freePort, makeCerts, startTlsRedis, startSentinel, startCluster, storeReady, failsWith, sleep, waitFor, Redis, startSluice, listen, request, track, stopChild };
