/*
 * zone.h -- IANA time zones for calendar quotas (zone.c): a TZif file's
 * transitions and its POSIX TZ footer, and the process's table of loaded
 * zones (sluice_zone_load() in sluice_quota.h).
 */
#ifndef SLUICE_CORE_ZONE_H
#define SLUICE_CORE_ZONE_H

#include <stddef.h>
#include <stdint.h>

/* The longest zone name: "<quota>@<unit>:<zone>" must fit a limit id
 * (SLUICE_LIMIT_ID_MAX, 64 bytes with its NUL: 9 digits, "@", "minute",
 * ":"). */
#define SLUICE_ZONE_NAME_MAX 46

/* The most zones one process loads (ids 1 .. SLUICE_ZONES_MAX; 0 is
 * UTC). */
#define SLUICE_ZONES_MAX 1024

/* One rule date of a POSIX TZ string: Jn, n or Mm.w.d, at `time` seconds
 * of local time (-167 h .. 167 h). */
typedef struct sluice_tzrule_s {
	char kind;		   /* 'J', 'D' (n) or 'M' */
	uint16_t day;		   /* Jn: 1..365; n: 0..365 */
	uint8_t month, week, wday; /* Mm.w.d */
	int32_t time;
} sluice_tzrule_t;

typedef struct sluice_zone_s {
	char name[SLUICE_ZONE_NAME_MAX + 1];
	uint64_t name_hash; /* of the name: names a quota's bucket in a
			       shared store, where ids differ by process */
	uint64_t serial;    /* this parse's own number (never 0) */
	size_t ntrans;
	int64_t *trans; /* transition instants (seconds), ascending */
	int32_t *off;	/* the UTC offset from trans[i] on */
	int32_t off0;	/* before the first transition */
	/* The footer (instants from the last transition on; for every
	 * instant when there is no transition). */
	int has_tz; /* 0: the last offset holds on forever */
	int has_dst;
	int32_t std_off, dst_off; /* UTC offsets (east positive) */
	sluice_tzrule_t start, end;
} sluice_zone_t;

/* Parses a TZif file (versions 1 to 4) into *z (name and hash left to the
 * caller).  Returns 0, or -1 with a message in err (not TZif, truncated,
 * inconsistent, leap seconds, a bad footer).  On success free it with
 * sluice_zone_release(). */
int sluice_tzif_parse(const unsigned char *buf, size_t len, sluice_zone_t *z,
		      char *err, size_t errlen);
void sluice_zone_release(sluice_zone_t *z);

/* The UTC offset (seconds, east positive) at instant t (seconds since the
 * epoch) and, in *next (may be NULL), the first transition after t
 * (INT64_MAX: none).  z NULL is UTC. */
int32_t sluice_zone_offset(const sluice_zone_t *z, int64_t t, int64_t *next);

/* The zone of an id, NULL for 0 (UTC) or an id never given. */
const sluice_zone_t *sluice_zone_get(uint16_t id);

/* The hash of a zone's name (0 for UTC). */
uint64_t sluice_zone_hash(uint16_t id);

/* Tests only: read zone files from dir (NULL: /usr/share/zoneinfo again)
 * -- the table-full test needs more zones than a system has.  The library
 * itself never calls it. */
void sluice__zone_root(const char *dir);

#endif
