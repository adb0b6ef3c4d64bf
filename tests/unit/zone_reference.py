#!/usr/bin/env python3
"""The reference for test_zone: calendar windows computed with Python's
zoneinfo (its own reader of /usr/share/zoneinfo, its own date arithmetic),
for many instants of several zones, in every unit.

Writes one line per (zone, unit, instant):
    ZONE UNIT T OFFSET START END
T, START and END in seconds since the epoch, OFFSET the zone's UTC offset
at T in seconds.  The window rule is src/core/calendar.c's: a window runs
from one local boundary to the next, a boundary being the first instant
at which the zone's clock reads it or later (a boundary in a gap is the
end of the gap; one read twice, the first reading).  Seconds, minutes and
hours are the local ones at the instant's offset, cut where the offset
changes.

The instants: every transition of each zone from 1995 to 2030 and a few
around it (a second before and after, the half hour and hour after), the
local midnights and month starts near them, instants after 2037 (where
the files' POSIX footers rule), and a seeded sample across 1970..2100.
"""
import random
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe",
         "Asia/Kolkata", "Pacific/Apia", "America/Sao_Paulo"]
UNITS = ["second", "minute", "hour", "day", "week", "month", "year"]
EPOCH = datetime(1970, 1, 1)


def offset(tz, u):
    return int(datetime.fromtimestamp(u, tz).utcoffset().total_seconds())


def transitions(tz, y0, y1):
    """Every instant in [y0, y1) at which tz's offset changes."""
    out = []
    u = int((datetime(y0, 1, 1) - EPOCH).total_seconds())
    end = int((datetime(y1, 1, 1) - EPOCH).total_seconds())
    step = 6 * 3600
    prev = offset(tz, u)
    while u < end:
        nxt = u + step
        o = offset(tz, nxt)
        if o != prev:
            lo, hi = u, nxt  # offset(lo) == prev, offset(hi) != prev
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if offset(tz, mid) == prev:
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
            prev = o
        u = nxt
    return out


def first_reading(tz, local):
    """The first instant at which tz's clock reads `local` (a naive
    datetime) or later."""
    u0 = int(local.replace(tzinfo=tz, fold=0).timestamp())
    u1 = int(local.replace(tzinfo=tz, fold=1).timestamp())
    if u0 + offset(tz, u0) == (local - EPOCH).total_seconds():
        return min(u0, u1) if u1 + offset(tz, u1) == \
            (local - EPOCH).total_seconds() else u0
    # A gap: the clock skips `local`; the first instant after it is the
    # transition between the two readings.
    lo, hi = min(u0, u1), max(u0, u1)
    o = offset(tz, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offset(tz, mid) == o:
            lo = mid
        else:
            hi = mid
    return hi


def floor_unit(unit, lt):
    if unit == "second":
        return lt
    if unit == "minute":
        return lt.replace(second=0)
    if unit == "hour":
        return lt.replace(minute=0, second=0)
    day = lt.replace(hour=0, minute=0, second=0)
    if unit == "day":
        return day
    if unit == "week":
        return day - timedelta(days=day.weekday())
    if unit == "month":
        return day.replace(day=1)
    return day.replace(month=1, day=1)


def next_unit(unit, lb):
    if unit == "second":
        return lb + timedelta(seconds=1)
    if unit == "minute":
        return lb + timedelta(minutes=1)
    if unit == "hour":
        return lb + timedelta(hours=1)
    if unit == "day":
        return lb + timedelta(days=1)
    if unit == "week":
        return lb + timedelta(days=7)
    if unit == "month":
        return lb.replace(year=lb.year + (lb.month == 12),
                          month=lb.month % 12 + 1)
    return lb.replace(year=lb.year + 1)


def last_change(tz, lo, hi):
    """The last instant in (lo, hi] at which tz's offset changes, or lo
    (at most one change in so short a span)."""
    if offset(tz, lo) == offset(tz, hi):
        return lo
    o = offset(tz, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offset(tz, mid) == o:
            hi = mid
        else:
            lo = mid
    return hi


def short_window(tz, unit, t):
    """Seconds, minutes, hours: the local one at t's offset, cut where the
    offset changes."""
    off = offset(tz, t)
    lt = datetime.fromtimestamp(t, tz).replace(tzinfo=None)
    lb = floor_unit(unit, lt)
    s = int((lb - EPOCH).total_seconds()) - off
    e = int((next_unit(unit, lb) - EPOCH).total_seconds()) - off
    s = last_change(tz, s, t)
    c = last_change(tz, t, e - 1)
    return s, (c if c != t else e)


def window(tz, unit, t):
    if unit in ("second", "minute", "hour"):
        return short_window(tz, unit, t)
    lt = datetime.fromtimestamp(t, tz).replace(tzinfo=None)
    lb = floor_unit(unit, lt)
    b0 = first_reading(tz, lb)
    lb = next_unit(unit, lb)
    b1 = first_reading(tz, lb)
    while b1 <= t:
        b0 = b1
        lb = next_unit(unit, lb)
        b1 = first_reading(tz, lb)
    assert b0 <= t < b1, (unit, t, b0, b1)
    return b0, b1


def instants(tz, rng):
    ts = set()
    for tr in transitions(tz, 1995, 2031):
        for d in (-86400, -3601, -3600, -1, 0, 1, 1799, 1800, 3599, 3600,
                  7200, 86400):
            ts.add(tr + d)
        # The local midnight of the day and the month of the change.
        lt = datetime.fromtimestamp(tr, tz).replace(tzinfo=None)
        for lb in (floor_unit("day", lt), floor_unit("month", lt),
                   floor_unit("day", lt) + timedelta(days=1)):
            b = first_reading(tz, lb)
            ts.update((b - 1, b, b + 1))
    for y in (2038, 2040, 2052, 2100):
        for m in (1, 3, 4, 6, 9, 10, 11, 12):
            base = int((datetime(y, m, 1) - EPOCH).total_seconds())
            for k in range(6):
                ts.add(base + rng.randrange(31 * 86400))
    for _ in range(300):
        ts.add(rng.randrange(0, 4102444800))  # 1970 .. 2100
    return sorted(ts)


def main():
    rng = random.Random(31)
    out = sys.stdout
    for name in ZONES:
        tz = ZoneInfo(name)
        for t in instants(tz, rng):
            off = offset(tz, t)
            for unit in UNITS:
                s, e = window(tz, unit, t)
                out.write("%s %s %d %d %d %d\n" % (name, unit, t, off, s, e))


if __name__ == "__main__":
    main()
