// defaults.js -- sluice's defaults and store kinds for the Node binding.
// Written by scripts/gen_defaults.py from src/util/defaults.h and
// src/store/store_kinds.def: edit those, then run the script (the
// checkout's tests/unit/test_defaults.py fails while this file is stale).
'use strict';

module.exports = Object.freeze({
  // listen
  LISTEN: '127.0.0.1:8080',
  // threads
  THREADS: 1,
  // ipv6_prefix
  IPV6_PREFIX: 64,
  // store.memory.max_keys
  MAX_KEYS: 1000000,
  // store.redis.url
  REDIS_URL: 'redis://127.0.0.1:6379',
  // store.redis.key_prefix
  KEY_PREFIX: 'sluice:',
  // store.redis.timeout_ms
  STORE_TIMEOUT_MS: 50,
  // store.redis.connections
  CONNECTIONS: 1,
  // node: store.redis.timeoutMs
  NODE_TIMEOUT_MS: 250,
  // http.max_header_bytes
  MAX_HEADER_BYTES: 8192,
  // http.max_body_bytes
  MAX_BODY_BYTES: 16384,
  // http.idle_timeout_ms
  IDLE_TIMEOUT_MS: 30000,
  // http.max_connection_age_ms
  HTTP_MAX_AGE_MS: 0,
  // grpc.max_message_bytes
  GRPC_MAX_MESSAGE: 65536,
  // grpc.max_connection_age_ms
  GRPC_MAX_AGE_MS: 86400000,
  // grpc.max_connection_age_grace_ms
  GRPC_MAX_AGE_GRACE_MS: 3600000,
  // Each store kind: its log name (and behind Sentinel), its keys in
  // the config file, its options here (none: no such kind here).
  STORE_KINDS: Object.freeze({
    memory: Object.freeze({
      logName: 'memory',
      sentinelLogName: null,
      keys: Object.freeze(['max_keys']),
      options: Object.freeze(['maxKeys']),
    }),
    shared: Object.freeze({
      logName: 'shared',
      sentinelLogName: null,
      keys: Object.freeze(['path', 'max_keys', 'group']),
      options: Object.freeze(['path', 'maxKeys', 'group']),
    }),
    redis: Object.freeze({
      logName: 'redis',
      sentinelLogName: 'redis sentinel',
      keys: Object.freeze(['url', 'key_prefix', 'timeout_ms', 'connections', 'max_keys', 'tls', 'sentinel']),
      options: Object.freeze(['url', 'cluster', 'sentinel', 'tls', 'timeoutMs', 'connections', 'keyPrefix', 'scriptOnly']),
    }),
    redis_cluster: Object.freeze({
      logName: 'redis cluster',
      sentinelLogName: null,
      keys: Object.freeze(['seeds', 'key_prefix', 'timeout_ms', 'connections', 'max_keys', 'tls']),
      options: Object.freeze([]),
    }),
  }),
});
