/*
 * zone.c -- IANA time zones from the system's zoneinfo, for the calendar
 * windows of quotas (calendar.c).
 *
 * A TZif file (RFC 8536) lists a zone's transitions (the instants its UTC
 * offset changes) and, from version 2 on, a footer: a POSIX TZ string
 * ("CET-1CEST,M3.5.0,M10.5.0/3") that gives the offsets after the last
 * transition listed.  Debian's files are "slim" or "fat" by release: a
 * slim file stops listing transitions at the last rule change (2007 for
 * New York), so every instant of today comes from the footer.  Both are
 * read here: the 64-bit block of versions 2 to 4 (the 32-bit block of
 * version 1 when that is all there is) and the footer.
 *
 * Leap-second files (right/...) are refused: their instants count leap
 * seconds, which the Unix clocks sluice decides with do not.
 *
 * Loaded zones are kept for the process's life in one table, so the id
 * a limit holds stays valid however the limit is copied: the id is the
 * index, and a slot, once published (with release order), never changes.
 * Loading takes a mutex; reading a zone by id takes none.
 */
#include "core/zone.h"
#include "core/civil.h"
#include "sluice.h"
#include "util/errmsg.h"
#include "util/file.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZONEINFO      "/usr/share/zoneinfo"
#define TZIF_MAX      (1u << 20) /* the largest file read (real ones: < 4 KiB) */
#define TRANS_MAX     65536	 /* the most transitions a zone holds */
#define OFFSET_MAX    (26 * 3600)  /* |UTC offset|: RFC 8536 allows < 26 h */
#define RULE_TIME_MAX (167 * 3600) /* a TZ rule's time: -167 h .. 167 h */

/* ------------------------------------------------------------- TZif */

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
	return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* The counts of a TZif header, in file order. */
enum { ISUT, ISSTD, LEAP, TIME, TYPE, CHAR, NCOUNTS };

/* The bytes of a data block with these counts and `tb`-byte times. */
static uint64_t block_size(const uint32_t *c, unsigned tb)
{
	return (uint64_t)c[TIME] * (tb + 1) + (uint64_t)c[TYPE] * 6 + c[CHAR] +
	       (uint64_t)c[LEAP] * (tb + 4) + c[ISSTD] + c[ISUT];
}

static int read_header(const unsigned char *buf, size_t len, uint32_t *c,
		       char *err, size_t errlen)
{
	int i;

	if (len < 44 || memcmp(buf, "TZif", 4) != 0)
		return sluice_fail(-1, err, errlen, "not a TZif file");
	if (buf[4] != 0 && (buf[4] < '2' || buf[4] > '4'))
		return sluice_fail(-1, err, errlen,
				   "TZif version %u is not 1 to 4",
				   (unsigned)buf[4]);
	for (i = 0; i < NCOUNTS; i++)
		c[i] = be32(buf + 20 + 4 * i);
	return 0;
}

/* ------------------------------------------------- POSIX TZ strings */

/* [+-]hh[:mm[:ss]] into seconds, hours up to max_h. */
static const char *tz_time(const char *p, int32_t max_h, int32_t *out)
{
	int32_t sign = 1, h = 0, m = 0, s = 0;
	int n;

	if (*p == '+' || *p == '-')
		sign = *p++ == '-' ? -1 : 1;
	for (n = 0; *p >= '0' && *p <= '9' && n < 3; n++)
		h = h * 10 + (*p++ - '0');
	if (n == 0 || h > max_h)
		return NULL;
	if (*p == ':') {
		p++;
		if (!(p[0] >= '0' && p[0] <= '5' && p[1] >= '0' && p[1] <= '9'))
			return NULL;
		m = (p[0] - '0') * 10 + (p[1] - '0');
		p += 2;
		if (*p == ':') {
			p++;
			if (!(p[0] >= '0' && p[0] <= '5' && p[1] >= '0' &&
			      p[1] <= '9'))
				return NULL;
			s = (p[0] - '0') * 10 + (p[1] - '0');
			p += 2;
		}
	}
	*out = sign * (h * 3600 + m * 60 + s);
	return p;
}

/* A zone abbreviation: three or more letters, or <...> of letters,
 * digits, + and -. */
static const char *tz_name(const char *p)
{
	const char *q = p;

	if (*p == '<') {
		for (q = ++p;
		     (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') ||
		     (*q >= '0' && *q <= '9') || *q == '+' || *q == '-';
		     q++)
			;
		return *q == '>' && q - p >= 3 ? q + 1 : NULL;
	}
	while ((*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z'))
		q++;
	return q - p >= 3 ? q : NULL;
}

static const char *tz_num(const char *p, unsigned max, unsigned *out)
{
	unsigned v = 0;
	int n;

	for (n = 0; *p >= '0' && *p <= '9' && n < 3; n++)
		v = v * 10 + (unsigned)(*p++ - '0');
	if (n == 0 || v > max)
		return NULL;
	*out = v;
	return p;
}

/* ",Jn[/time]", ",n[/time]" or ",Mm.w.d[/time]". */
static const char *tz_rule(const char *p, sluice_tzrule_t *r)
{
	unsigned v;

	if (*p++ != ',')
		return NULL;
	memset(r, 0, sizeof(*r));
	r->time = 2 * 3600;
	if (*p == 'J') {
		r->kind = 'J';
		if (!(p = tz_num(p + 1, 365, &v)) || v < 1)
			return NULL;
		r->day = (uint16_t)v;
	} else if (*p == 'M') {
		r->kind = 'M';
		if (!(p = tz_num(p + 1, 12, &v)) || v < 1 || *p++ != '.')
			return NULL;
		r->month = (uint8_t)v;
		if (!(p = tz_num(p, 5, &v)) || v < 1 || *p++ != '.')
			return NULL;
		r->week = (uint8_t)v;
		if (!(p = tz_num(p, 6, &v)))
			return NULL;
		r->wday = (uint8_t)v;
	} else {
		r->kind = 'D';
		if (!(p = tz_num(p, 365, &v)))
			return NULL;
		r->day = (uint16_t)v;
	}
	if (*p == '/')
		p = tz_time(p + 1, 167, &r->time);
	return p;
}

/* Parses a footer's TZ string (NUL terminated) into z. */
static int tz_parse(const char *s, sluice_zone_t *z)
{
	const char *p = s;
	int32_t off;

	if (*p == '\0') {
		z->has_tz = 0; /* no rule: the last offset holds */
		return 0;
	}
	if (!(p = tz_name(p)) || !(p = tz_time(p, 24, &off)))
		return -1;
	z->std_off = -off; /* POSIX counts west positive */
	z->has_tz = 1;
	if (*p == '\0')
		return 0;
	if (!(p = tz_name(p)))
		return -1;
	z->has_dst = 1;
	z->dst_off = z->std_off + 3600;
	if (*p != ',' && *p != '\0') {
		if (!(p = tz_time(p, 24, &off)))
			return -1;
		z->dst_off = -off;
	}
	if (*p == '\0') {
		/* No rule: POSIX leaves it to the implementation; glibc's
		 * (and the United States' since 2007). */
		p = ",M3.2.0,M11.1.0";
	}
	if (!(p = tz_rule(p, &z->start)) || !(p = tz_rule(p, &z->end)))
		return -1;
	return *p == '\0' ? 0 : -1;
}

/* The data block a TZif file is read from: the 64-bit one of versions 2
 * to 4, else version 1's. */
typedef struct {
	uint32_t c[NCOUNTS];	/* its header's counts */
	const unsigned char *p; /* its first byte */
	unsigned tb;		/* the bytes of a transition time: 4 or 8 */
	uint64_t size;		/* block_size() */
} tzif_block_t;

/* The headers read and the block found in buf, its counts checked and its
 * bytes all there: 0, or -1 with why in err. */
static int find_block(const unsigned char *buf, size_t len, tzif_block_t *b,
		      char *err, size_t errlen)
{
	const uint32_t *c = b->c;

	if (read_header(buf, len, b->c, err, errlen) != 0)
		return -1;
	b->p = buf + 44;
	b->tb = 4;
	if (buf[4] != 0) {
		/* Skip the 32-bit block: the 64-bit one follows. */
		b->size = block_size(c, 4);
		if (b->size > len - 44)
			return sluice_fail(-1, err, errlen,
					   "TZif file is truncated");
		b->p += b->size;
		if (read_header(b->p, len - (size_t)(b->p - buf), b->c, err,
				errlen) != 0)
			return -1;
		b->p += 44;
		b->tb = 8;
	}
	if (c[TYPE] < 1 || c[TYPE] > 256 || c[TIME] > TRANS_MAX ||
	    (c[ISUT] != 0 && c[ISUT] != c[TYPE]) ||
	    (c[ISSTD] != 0 && c[ISSTD] != c[TYPE]))
		return sluice_fail(-1, err, errlen,
				   "TZif header counts are inconsistent");
	if (c[LEAP] != 0)
		return sluice_fail(-1, err, errlen,
				   "TZif file counts leap seconds (a right/ "
				   "zone): not supported");
	b->size = block_size(c, b->tb);
	if (b->size > len - (size_t)(b->p - buf))
		return sluice_fail(-1, err, errlen, "TZif file is truncated");
	return 0;
}

/* The block's time types checked, and its transitions with their offsets
 * into z: 0, or -1 with why in err (z's arrays then for the caller to
 * release). */
static int read_transitions(sluice_zone_t *z, const tzif_block_t *b, char *err,
			    size_t errlen)
{
	const uint32_t *c = b->c;
	const unsigned char *idx = b->p + (size_t)c[TIME] * b->tb;
	const unsigned char *types = idx + c[TIME];
	size_t i;

	z->ntrans = c[TIME];
	if (z->ntrans) {
		z->trans = malloc(z->ntrans * sizeof(*z->trans));
		z->off = malloc(z->ntrans * sizeof(*z->off));
		if (!z->trans || !z->off)
			return sluice_fail(-1, err, errlen, "out of memory");
	}
	for (i = 0; i < c[TYPE]; i++) {
		int32_t o = (int32_t)be32(types + 6 * i);

		if (o <= -OFFSET_MAX || o >= OFFSET_MAX || types[6 * i + 4] > 1)
			return sluice_fail(-1, err, errlen,
					   "TZif time type %zu is out of range",
					   i);
	}
	z->off0 = (int32_t)be32(types);
	for (i = 0; i < z->ntrans; i++) {
		int64_t t = b->tb == 8 ? be64(b->p + 8 * i)
				       : (int64_t)(int32_t)be32(b->p + 4 * i);

		if (idx[i] >= c[TYPE] || (i > 0 && t <= z->trans[i - 1]))
			return sluice_fail(-1, err, errlen,
					   "TZif transition %zu is out of "
					   "order or of no type",
					   i);
		z->trans[i] = t;
		z->off[i] = (int32_t)be32(types + 6 * idx[i]);
	}
	return 0;
}

/* The footer, "\n" TZ "\n", at p with rest bytes left, into z: 0, or -1
 * with why in err. */
static int read_footer(sluice_zone_t *z, const unsigned char *p, size_t rest,
		       char *err, size_t errlen)
{
	char tz[128];
	const unsigned char *nl;
	size_t n;

	if (rest < 2 || p[0] != '\n' || !(nl = memchr(p + 1, '\n', rest - 1)) ||
	    (n = (size_t)(nl - p - 1)) >= sizeof(tz) || memchr(p + 1, '\0', n))
		return sluice_fail(-1, err, errlen,
				   "TZif footer is missing or too long");
	memcpy(tz, p + 1, n);
	tz[n] = '\0';
	if (tz_parse(tz, z) != 0)
		return sluice_fail(-1, err, errlen,
				   "TZif footer \"%s\" is not a POSIX TZ "
				   "string",
				   tz);
	return 0;
}

static uint64_t zone_serial;

int sluice_tzif_parse(const unsigned char *buf, size_t len, sluice_zone_t *z,
		      char *err, size_t errlen)
{
	tzif_block_t b;
	const unsigned char *end;

	memset(z, 0, sizeof(*z));
	/* Names this parse for the footer's per-thread cache. */
	z->serial = __atomic_add_fetch(&zone_serial, 1, __ATOMIC_RELAXED);
	if (find_block(buf, len, &b, err, errlen) != 0)
		return -1;
	if (read_transitions(z, &b, err, errlen) != 0)
		goto fail;
	end = b.p + b.size;
	/* Version 1 has no footer: the last offset holds. */
	if (b.tb == 8 &&
	    read_footer(z, end, len - (size_t)(end - buf), err, errlen) != 0)
		goto fail;
	return 0;
fail:
	sluice_zone_release(z);
	return -1;
}

void sluice_zone_release(sluice_zone_t *z)
{
	free(z->trans);
	free(z->off);
	z->trans = NULL;
	z->off = NULL;
	z->ntrans = 0;
}

/* ------------------------------------------------- offsets and rules */

/* The day (since the epoch) a rule names in year y. */
static int64_t rule_day(const sluice_tzrule_t *r, int64_t y)
{
	int64_t jan1 = sluice_days_from_civil(y, 1, 1), first, day;
	unsigned wd;

	if (r->kind == 'J') /* 1..365, February 29 never counted */
		return jan1 + r->day - 1 +
		       (sluice_civil_leap(y) && r->day >= 60);
	if (r->kind == 'D') /* 0..365 */
		return jan1 + r->day;
	first = sluice_days_from_civil(y, r->month, 1);
	/* POSIX weekdays count from Sunday 0; ISO from Monday 0. */
	wd = (sluice_civil_iso_weekday(first) + 1) % 7;
	day = first + (r->wday + 7 - wd) % 7 + 7 * (r->week - 1);
	while (day >= first + sluice_civil_month_days(y, r->month))
		day -= 7; /* week 5: the last such weekday */
	return day;
}

/*
 * The footer's changes around year y, in order: those of y - 1, y and
 * y + 1 (a rule's time may reach a week into the next or the previous
 * year).  A tie (a zone on summer time all year: "EST5EDT,0/0,J365/25")
 * puts the change to standard time first, so that summer time holds.
 * The last zone and year each thread asked for are kept: a window's
 * boundaries ask for the offsets of a few instants of one year, and a
 * zone's files end their transitions (a slim file at its last rule
 * change, a fat one at 2037) so that every later instant comes here.
 */
typedef struct rule_year_s {
	uint64_t serial; /* the zone's (0: none) */
	int64_t y;
	int64_t at[6];
	int dst[6];
} rule_year_t;

static _Thread_local rule_year_t rule_cache;

static const rule_year_t *rule_year(const sluice_zone_t *z, int64_t yt)
{
	rule_year_t *c = &rule_cache;
	int64_t y;
	int n = 0, i, j;

	if (c->serial == z->serial && c->y == yt)
		return c;
	for (y = yt - 1; y <= yt + 1; y++) {
		c->at[n] = rule_day(&z->start, y) * 86400 + z->start.time -
			   z->std_off;
		c->dst[n++] = 1;
		c->at[n] =
			rule_day(&z->end, y) * 86400 + z->end.time - z->dst_off;
		c->dst[n++] = 0;
	}
	/* Insertion sort, standard time first among equal instants. */
	for (i = 1; i < n; i++) {
		int64_t a = c->at[i];
		int b = c->dst[i];

		for (j = i; j > 0 && (c->at[j - 1] > a ||
				      (c->at[j - 1] == a && c->dst[j - 1] > b));
		     j--) {
			c->at[j] = c->at[j - 1];
			c->dst[j] = c->dst[j - 1];
		}
		c->at[j] = a;
		c->dst[j] = b;
	}
	c->serial = z->serial;
	c->y = yt;
	return c;
}

/* The offset the footer gives at t and the next change after it: the
 * last change of t's years at or before t gives it (standard time
 * before them all). */
static int32_t rule_offset(const sluice_zone_t *z, int64_t t, int64_t *next)
{
	const rule_year_t *c;
	int64_t yt;
	unsigned m, d;
	int32_t off = z->std_off;
	int i;

	*next = INT64_MAX;
	if (!z->has_dst)
		return z->std_off;
	sluice_civil_from_days(sluice_floor_div(t, 86400), &yt, &m, &d);
	c = rule_year(z, yt);
	for (i = 0; i < 6; i++) {
		if (c->at[i] > t) {
			*next = c->at[i];
			break;
		}
		off = c->dst[i] ? z->dst_off : z->std_off;
	}
	if (*next == INT64_MAX) {
		/* After y + 1's changes (a rule reaching far into the
		 * previous year): the next year's first. */
		c = rule_year(z, yt + 1);
		for (i = 0; i < 6 && *next == INT64_MAX; i++)
			if (c->at[i] > t)
				*next = c->at[i];
	}
	return off;
}

int32_t sluice_zone_offset(const sluice_zone_t *z, int64_t t, int64_t *next)
{
	int64_t nx = INT64_MAX;
	int32_t off;
	size_t lo, hi;

	if (!z) {
		off = 0;
	} else if (z->ntrans == 0 || t >= z->trans[z->ntrans - 1]) {
		if (z->has_tz) {
			off = rule_offset(z, t, &nx);
		} else {
			off = z->ntrans ? z->off[z->ntrans - 1] : z->off0;
		}
	} else if (t < z->trans[0]) {
		off = z->off0;
		nx = z->trans[0];
	} else {
		/* The last transition at or before t: trans[lo] <= t <
		 * trans[hi]. */
		lo = 0;
		hi = z->ntrans - 1;
		while (hi - lo > 1) {
			size_t mid = lo + (hi - lo) / 2;

			if (z->trans[mid] <= t)
				lo = mid;
			else
				hi = mid;
		}
		off = z->off[lo];
		nx = z->trans[hi];
	}
	if (next)
		*next = nx;
	return off;
}

/* ------------------------------------------------------- the table */

static pthread_mutex_t zones_lock = PTHREAD_MUTEX_INITIALIZER;
static sluice_zone_t *zones[SLUICE_ZONES_MAX + 1]; /* [0]: UTC, NULL */
static uint16_t nzones = 1;

const sluice_zone_t *sluice_zone_get(uint16_t id)
{
	if (id == 0 || id > SLUICE_ZONES_MAX)
		return NULL;
	return __atomic_load_n(&zones[id], __ATOMIC_ACQUIRE);
}

uint64_t sluice_zone_hash(uint16_t id)
{
	const sluice_zone_t *z = sluice_zone_get(id);

	return z ? z->name_hash : 0;
}

const char *sluice_zone_name(uint16_t id)
{
	const sluice_zone_t *z;

	if (id == 0)
		return "UTC";
	z = sluice_zone_get(id);
	return z ? z->name : "";
}

/* FNV-1a, then a final mix (splitmix64's) so that every bit depends on
 * every byte: the shared store folds part of it into a bucket's name. */
static uint64_t name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3u;
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9u;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebu;
	h ^= h >> 31;
	return h ? h : 1;
}

/* A zone name: components of letters, digits, '_', '-' and '+' (and '.'
 * not first), separated by single '/': never absolute, never "..". */
static int name_ok(const char *name)
{
	const char *p;
	int start = 1;

	if (!*name || strlen(name) > SLUICE_ZONE_NAME_MAX)
		return 0;
	for (p = name; *p; p++) {
		char ch = *p;

		if (ch == '/') {
			if (start)
				return 0; /* leading '/' or "//" */
			start = 1;
			continue;
		}
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
		      ch == '+' || (ch == '.' && !start)))
			return 0;
		start = 0;
	}
	return !start && !strstr(name, "..");
}

/* Where zone files are read: ZONEINFO, or a test's directory. */
static const char *zone_root = ZONEINFO;

void sluice__zone_root(const char *dir)
{
	pthread_mutex_lock(&zones_lock);
	zone_root = dir ? dir : ZONEINFO;
	pthread_mutex_unlock(&zones_lock);
}

static int load_file(const char *name, sluice_zone_t *z, char *err,
		     size_t errlen)
{
	char path[256];
	char why[160], msg[200];
	char *buf = NULL;
	size_t len = 0;
	int quotable, rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", zone_root, name) >=
	    sizeof(path))
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "time zone \"%s\": path too long", name);
	if (sluice_file_read(path, TZIF_MAX, 0, &buf, &len, &quotable, why,
			     sizeof(why)) != 0)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "time zone \"%s\": no such zone (%s %s)",
				   name, path, why);
	rc = sluice_tzif_parse((const unsigned char *)buf, len, z, msg,
			       sizeof(msg));
	free(buf);
	if (rc != 0)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "time zone \"%s\": %s: %s", name, path, msg);
	return 0;
}

int sluice_zone_load(const char *name, uint16_t *id, char *err, size_t errlen)
{
	sluice_zone_t *z;
	uint16_t i;
	int rc;

	if (!name || !id)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "time zone: no name");
	if (strcmp(name, "UTC") == 0 || strcmp(name, "Etc/UTC") == 0) {
		*id = 0;
		return 0;
	}
	if (!name_ok(name))
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "time zone \"%.64s\": not an IANA zone name "
				   "(such as Europe/Berlin, at most %d "
				   "characters, no \"..\", not a path)",
				   name, SLUICE_ZONE_NAME_MAX);
	pthread_mutex_lock(&zones_lock);
	for (i = 1; i < nzones; i++) {
		if (strcmp(zones[i]->name, name) == 0) {
			pthread_mutex_unlock(&zones_lock);
			*id = i;
			return 0;
		}
	}
	if (nzones > SLUICE_ZONES_MAX) {
		pthread_mutex_unlock(&zones_lock);
		return sluice_fail(SLUICE_ERANGE, err, errlen,
				   "time zone \"%s\": too many zones (at most "
				   "%d in one process)",
				   name, SLUICE_ZONES_MAX);
	}
	if (!(z = calloc(1, sizeof(*z)))) {
		pthread_mutex_unlock(&zones_lock);
		return sluice_fail(SLUICE_ENOMEM, err, errlen,
				   "time zone \"%s\": out of memory", name);
	}
	/* Read under the lock: one load per name, and loads are rare. */
	if ((rc = load_file(name, z, err, errlen)) != 0) {
		pthread_mutex_unlock(&zones_lock);
		free(z);
		return rc;
	}
	strcpy(z->name, name);
	z->name_hash = name_hash(name);
	i = nzones++;
	__atomic_store_n(&zones[i], z, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&zones_lock);
	*id = i;
	return 0;
}
