#!/usr/bin/env python3
"""Writes fuzz_shmstore's seed corpus: shared-memory store files of this
build's layout, made by libsluice itself (ctypes), so that the seeds pass
the header checks and the fuzzer starts from live shards and slots.

    python3 tests/fuzz/shm_seeds.py build/libsluice.so tests/fuzz/corpus/fuzz_shmstore

Seeds: served-64-keys and served-1000-keys (files laid out for max_keys 64
and 1000, 40 and 700 keys charged: some drained, some in debt); and from
them the harness's own mutations, set in the header's unused tail (see
fuzz_shmstore.c): byte 4002 rotates the live file (rewritten-live,
lock-type-rewritten-live), bytes 4000-4001 shrink it under the mapping
(shrunk-into-shards, shrunk-mid-slots).  Run it again after the file's
layout changes (shm_file.c's SHM_VERSION): older seeds stop at the
version check and fuzz nothing else.
"""
import ctypes
import os
import sys
import tempfile


class Rate(ctypes.Structure):
    _fields_ = [("interval", ctypes.c_uint64), ("per", ctypes.c_uint32)]


class Limit(ctypes.Structure):
    _fields_ = [("capacity", ctypes.c_uint64), ("rate", Rate),
                ("tau", ctypes.c_uint64)]


def served(lib, max_keys, keys, directory):
    """The bytes of a file for max_keys with `keys` keys charged."""
    path = os.path.join(directory, "seed-%d" % max_keys)
    err = ctypes.create_string_buffer(256)
    store = ctypes.c_void_p()
    if lib.sluice_shmstore_open(ctypes.byref(store), path.encode(),
                                ctypes.c_size_t(max_keys), err,
                                ctypes.c_size_t(len(err))) != 0:
        raise SystemExit("open %s: %s" % (path, err.value.decode()))
    limits = (Limit * 2)()
    for lim, (cap, rate) in zip(limits, [(b"5", b"1/s"), (b"100", b"2/s")]):
        if lib.sluice_limit_parse(ctypes.byref(lim), cap, rate, err,
                                  ctypes.c_size_t(len(err))) != 0:
            raise SystemExit("limit: %s" % err.value.decode())
    lib.sluice_now_us.restype = ctypes.c_int64
    now = lib.sluice_now_us()
    for i in range(keys):
        key = ("user-%d" % i).encode() if i % 3 else os.urandom(24)
        # Every third key drained past empty (debt), the others charged
        # once; one limit or both.
        cost = 7 if i % 3 == 0 else 1
        rc = lib.sluice_shmstore_take(store, key, ctypes.c_size_t(len(key)),
                                      limits, ctypes.c_size_t(1 + i % 2),
                                      ctypes.c_uint64(cost),
                                      ctypes.c_int64(now), None, None)
        if rc < 0:
            raise SystemExit("take: %d" % rc)
    lib.sluice_shmstore_close(store)
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    return data


def with_tail(data, b4000, b4001, b4002):
    d = bytearray(data)
    d[4000], d[4001], d[4002] = b4000, b4001, b4002
    return bytes(d)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    lib = ctypes.CDLL(sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        small = served(lib, 64, 40, tmp)
        large = served(lib, 1000, 700, tmp)
    seeds = {
        "served-64-keys": small,
        "served-1000-keys": large,
        "rewritten-live": with_tail(small, 0, 0, 3),
        "lock-type-rewritten-live": with_tail(small, 0, 0x98, 1),
        "shrunk-into-shards": with_tail(small, 1, 0, 0),
        "shrunk-mid-slots": with_tail(large, 0x98, 1, 0),
    }
    for name in os.listdir(out):
        os.unlink(os.path.join(out, name))
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print("%s: %d bytes" % (name, len(data)))


if __name__ == "__main__":
    main()
