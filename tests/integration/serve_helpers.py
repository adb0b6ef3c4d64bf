"""What the tests of `sluice serve` over HTTP share: a test user behind the
trusted proxy, a /v1/check as that user, and a bucket spent to its first
refusal."""
import zlib


def user(name):
    """The headers of user `name` behind the trusted proxy (the test's
    127.0.0.1): its id and an address of its own, so that the default
    policy's per-address ceiling (default-ip) is not shared by every test
    user."""
    h = zlib.crc32(name.encode())
    return {"x-user-id": name,
            "x-real-ip": "10.%d.%d.%d" % (h >> 16 & 255, h >> 8 & 255,
                                          h & 255)}


def check(s, name, **kw):
    headers = user(name)
    headers.update(kw.pop("headers", {}))
    return s.request(kw.pop("method", "GET"), kw.pop("path", "/v1/check"),
                     headers)


def spend_until_refused(s, name, method="GET", path="/v1/check", most=2000):
    """Spends `name`'s bucket on one keep-alive connection and returns the
    first refusal. The classic bucket holds 100 and refills 2/s, so on a
    busy machine a few more than 100 can pass while the loop runs; the
    count bounds the loop, never a clock."""
    c = s.client()
    try:
        for _ in range(most):
            r = c.request(method, path, user(name))
            if r.status != 200:
                return r
    finally:
        c.close()
    raise AssertionError("%d requests for %s all passed" % (most, name))
