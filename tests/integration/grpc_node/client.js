// Calls sluice's gRPC listener the way a Node service would: @grpc/grpc-js
// with @grpc/proto-loader loading sluice's proto/ directory.
//
//   node client.js PLAN_JSON
//
// PLAN_JSON: {"address": "127.0.0.1:PORT", "proto": "DIR",
//             "calls": [RateLimitRequest as JSON, ...],   // in order
//             "parallel": N,          // then N more copies of calls[0] at once
//             "health": ["", "ratelimit", ...],
//             "tls": {"ca": FILE, "cert": FILE, "key": FILE}}  // optional:
//             // TLS trusting ca, presenting cert/key when given (mTLS)
// Prints one JSON object: {"calls": [...], "parallel": [...], "health": [...]},
// each entry either the response (enums as names, longs as strings) or
// {"error": CODE, "details": "..."}.
"use strict";
const fs = require("fs");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const plan = JSON.parse(process.argv[2]);
const opts = { keepCase: true, enums: String, longs: String, defaults: true, includeDirs: [plan.proto] };
const def = loader.loadSync(
  ["envoy/service/ratelimit/v3/rls.proto", "grpc/health/v1/health.proto"], opts);
const pkg = grpc.loadPackageDefinition(def);
const tls = plan.tls;
const creds = tls
  ? grpc.credentials.createSsl(fs.readFileSync(tls.ca),
    tls.key ? fs.readFileSync(tls.key) : null,
    tls.cert ? fs.readFileSync(tls.cert) : null)
  : grpc.credentials.createInsecure();
const rls = new pkg.envoy.service.ratelimit.v3.RateLimitService(plan.address, creds);
const health = new pkg.grpc.health.v1.Health(plan.address, creds);

function call(client, method, req) {
  return new Promise((resolve) => {
    const deadline = new Date(Date.now() + 20000);
    client[method](req, { deadline }, (err, resp) => {
      if (err) resolve({ error: err.code, details: err.details });
      else resolve(resp);
    });
  });
}

(async () => {
  const out = { calls: [], parallel: [], health: [] };
  for (const req of plan.calls || []) out.calls.push(await call(rls, "ShouldRateLimit", req));
  if (plan.parallel) {
    const ps = [];
    for (let i = 0; i < plan.parallel; i++) ps.push(call(rls, "ShouldRateLimit", plan.calls[0]));
    out.parallel = await Promise.all(ps);
  }
  for (const service of plan.health || []) out.health.push(await call(health, "Check", { service }));
  process.stdout.write(JSON.stringify(out) + "\n");
  rls.close();
  health.close();
})().catch((e) => { console.error(e); process.exit(1); });
