// Client addresses: the bucket key of an address (ipKey), and the
// middleware's default key, the client's address as the framework or the
// socket gives it.
'use strict';

const native = require('./addon');
const { typeName, classProp } = require('./options');

// An IPv4 address exactly as inet_ntop writes it (no leading zero, each
// part <= 255): its key is itself, with no call into the addon.  Every
// other text goes to the addon's parser, sluice serve's own.
const IPV4_KEY = /^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$/;

// The key of an address text, or null when it is no address.
function addressKey(address, bits) {
  if (IPV4_KEY.test(address)) return address;
  return native.ipKey(address, bits);
}

function subnetBits(subnet, what) {
  if (subnet === false) return 128;
  if (!Number.isInteger(subnet) || subnet < 1 || subnet > 128)
    throw new RangeError(`${what} must be a prefix length from 1 to 128 (default 64) or false, got ${subnet}`);
  return subnet;
}

/**
 * ipKey(address, subnet = 64) -> the bucket key of a client address, as
 * `sluice serve` keys it (the same parser, in the addon): a port, the
 * brackets of "[2001:db8::1]:443" and an IPv6 zone are dropped; an IPv4
 * address as it is (an IPv4-mapped IPv6 address as its IPv4); an IPv6
 * address as its /subnet network ("2001:db8:1:2::/64"), since one client
 * commonly holds a whole /64.  subnet false keeps the address whole.  A
 * text that is no address is a TypeError.
 */
function ipKey(address, subnet = 64) {
  const bits = subnetBits(subnet, 'ipKey(): subnet');
  if (typeof address !== 'string' || address === '')
    throw new TypeError(`the client address is unknown (got ${typeName(address)}): the connection may be gone`);
  const k = addressKey(address, bits);
  if (k === null) throw new TypeError(`${JSON.stringify(address.slice(0, 100))} is not an IP address`);
  return k;
}

// The default key: the client's address -- Express's req.ip (which
// follows `trust proxy`), Fastify's request.ip (`trustProxy`), else the
// socket's peer (node:http, Connect); never a header the client could
// write.  An address that does not parse (an X-Forwarded-For entry such
// as "unknown" that the framework handed on) gives way to the socket's
// peer, the proxy that sent it, as sluice serve's walk stops at an entry
// it cannot read: never a bucket of the client's choosing.
function defaultKey(req, bits) {
  const ip = classProp(req, 'ip');
  if (typeof ip === 'string' && ip !== '') {
    const k = addressKey(ip, bits);
    if (k !== null) return k;
  }
  let sock = classProp(req, 'socket');
  if (sock === undefined || sock === null) {
    const raw = classProp(req, 'raw');
    if (raw !== null && typeof raw === 'object') sock = classProp(raw, 'socket');
  }
  const peer = sock !== null && typeof sock === 'object' ? classProp(sock, 'remoteAddress') : undefined;
  if (typeof peer === 'string' && peer !== '') {
    const k = addressKey(peer, bits);
    if (k !== null) return k;
  }
  throw new TypeError(`the client address is unknown (got ${typeName(peer)}): the connection may be gone`);
}

module.exports = { subnetBits, ipKey, defaultKey };
