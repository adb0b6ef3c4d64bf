/*
 * test_zone.c -- time zones and calendar windows against a reference: the
 * windows of every unit, for thousands of instants of seven zones (New
 * York, Berlin, Lord Howe's half-hour summer time, Kolkata's half-hour
 * offset, Apia's skipped 2011-12-30, Sao Paulo's summer time that began
 * at midnight, UTC), as tests/unit/zone_reference.py computes them with
 * Python's zoneinfo, must be ours to the second; so must the zones' UTC
 * offsets.  And the loader's refusals: names that are paths, files that
 * are not TZif, a zone table that is full.
 */
#include "check.h"
#include "core/calendar.h"
#include "core/zone.h"
#include "sluice.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SLUICE_SRC_DIR
#error "SLUICE_SRC_DIR: CMakeLists.txt defines it"
#endif

static uint8_t per_of(const char *unit)
{
	uint8_t per = 0;

	CHECK(sluice_per_parse(unit, &per, NULL, 0) == 0);
	return per;
}

/* Every line of the reference: the zone's offset at T and the window
 * holding T, for a calendar quota in that zone and unit. */
static void test_windows_match_python_zoneinfo(void)
{
	FILE *f = popen(
		"python3 " SLUICE_SRC_DIR "/tests/unit/zone_reference.py", "r");
	char zone[64], unit[16];
	long long t, off, start, end;
	size_t lines = 0, bad = 0;
	int zones_seen = 0;
	char last[64] = "";

	CHECK(f != NULL);
	while (fscanf(f, "%63s %15s %lld %lld %lld %lld", zone, unit, &t, &off,
		      &start, &end) == 6) {
		sluice_limit_t q;
		uint16_t id = 0;
		int64_t s_us = -1, e_us;
		char err[256];

		CHECK(sluice_zone_load(zone, &id, err, sizeof(err)) == 0);
		CHECK(sluice_quota_init(&q, 10, per_of(unit),
					SLUICE_ALIGN_CALENDAR, id, err,
					sizeof(err)) == 0);
		e_us = sluice_quota_calendar(&q, (int64_t)t * 1000000 + 999999,
					     &s_us);
		if (strcmp(zone, last) != 0) {
			zones_seen++;
			snprintf(last, sizeof(last), "%s", zone);
		}
		if (sluice_zone_offset(sluice_zone_get(id), t, NULL) != off ||
		    e_us != end * 1000000 || s_us != start * 1000000) {
			if (bad++ < 10)
				fprintf(stderr,
					"%s %s at %lld: offset %d [%lld, %lld) "
					"want %lld [%lld, %lld)\n",
					zone, unit, t,
					(int)sluice_zone_offset(
						sluice_zone_get(id), t, NULL),
					(long long)(s_us / 1000000),
					(long long)(e_us / 1000000), off, start,
					end);
		}
		lines++;
	}
	CHECK(pclose(f) == 0);
	fprintf(stderr, "  %zu windows compared, %zu differ\n", lines, bad);
	CHECK(zones_seen == 7);
	CHECK(lines > 20000);
	CHECK(bad == 0);
}

/* Windows are contiguous: walking from one window's end finds the next
 * window starting there, over years of days, weeks and months of a zone
 * with summer time (no gap, no overlap, each longer than nothing except
 * Apia's skipped day). */
static void test_windows_tile_time(void)
{
	const char *zones[] = {"America/New_York", "Australia/Lord_Howe",
			       "Pacific/Apia", "America/Sao_Paulo"};
	const uint8_t pers[] = {SLUICE_PER_HOUR, SLUICE_PER_DAY,
				SLUICE_PER_WEEK, SLUICE_PER_MONTH};
	size_t zi, pi;

	for (zi = 0; zi < 4; zi++) {
		uint16_t id;

		CHECK(sluice_zone_load(zones[zi], &id, NULL, 0) == 0);
		for (pi = 0; pi < 4; pi++) {
			sluice_limit_t q;
			int64_t t = INT64_C(1262304000) * 1000000; /* 2010 */
			int64_t start, end, prev_end = 0;
			int n;

			CHECK(sluice_quota_init(&q, 1, pers[pi], 0, id, NULL,
						0) == 0);
			for (n = 0;
			     n < 3000 && t < INT64_C(2051222400) * 1000000;
			     n++) {
				end = sluice_quota_calendar(&q, t, &start);
				CHECK(start <= t && t < end);
				if (prev_end)
					CHECK(start == prev_end);
				CHECK(start % 1000000 == 0 &&
				      end % 1000000 == 0);
				prev_end = end;
				t = end;
			}
		}
	}
}

/* The zone table: one id per name, UTC's aliases 0, names of the loaded
 * zones, and every name that could reach outside the zoneinfo refused. */
static void test_zone_names_and_refusals(void)
{
	const char *bad[] = {"",
			     "../../etc/passwd",
			     "/etc/localtime",
			     "Europe/../Europe/Berlin",
			     "Europe//Berlin",
			     "Europe/Berlin/",
			     "./UTC",
			     "Europe/.Berlin",
			     "Europe/Berlin\n",
			     "Europe/Nowhere",
			     "Europe",
			     "zone.tab",
			     "right/Europe/Berlin",
			     "America/Argentina/ComodRivadavia_but_much_longer_"
			     "than_any_zone"};
	uint16_t a, b, c;
	char err[256];
	size_t i;

	CHECK(sluice_zone_load("UTC", &a, NULL, 0) == 0 && a == 0);
	CHECK(sluice_zone_load("Etc/UTC", &a, NULL, 0) == 0 && a == 0);
	CHECK(strcmp(sluice_zone_name(0), "UTC") == 0);
	CHECK(sluice_zone_load("Europe/Berlin", &a, NULL, 0) == 0 && a > 0);
	CHECK(sluice_zone_load("Asia/Kolkata", &b, NULL, 0) == 0 && b != a);
	CHECK(sluice_zone_load("Europe/Berlin", &c, NULL, 0) == 0 && c == a);
	CHECK(strcmp(sluice_zone_name(a), "Europe/Berlin") == 0);
	CHECK(strcmp(sluice_zone_name(1000), "") == 0);
	CHECK(sluice_zone_get(a) && !sluice_zone_get(0));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		c = 77;
		CHECK(sluice_zone_load(bad[i], &c, err, sizeof(err)) ==
		      SLUICE_EINVAL);
		CHECK(c == 77 && err[0] != '\0');
	}
	/* The message names the zone. */
	CHECK(sluice_zone_load("Mars/Olympus", &c, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	CHECK(strstr(err, "Mars/Olympus") != NULL);
	CHECK(sluice_zone_load(NULL, &c, err, sizeof(err)) == SLUICE_EINVAL);
}

/* Files that are not what they claim: the parser refuses each with a
 * message (never reads past the buffer: ASan watches). */
static void test_tzif_refuses_damaged_files(void)
{
	static unsigned char buf[1 << 16];
	FILE *f = fopen("/usr/share/zoneinfo/Europe/Berlin", "rb");
	size_t len, cut;
	sluice_zone_t z;
	char err[200];

	CHECK(f != NULL);
	len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	CHECK(len > 100);
	CHECK(sluice_tzif_parse(buf, len, &z, err, sizeof(err)) == 0);
	CHECK(z.has_tz && z.has_dst && z.std_off == 3600 && z.dst_off == 7200);
	sluice_zone_release(&z);
	/* Every truncation is refused. */
	for (cut = 0; cut < len; cut++) {
		err[0] = '\0';
		CHECK(sluice_tzif_parse(buf, cut, &z, err, sizeof(err)) != 0);
		CHECK(err[0] != '\0');
	}
	/* Not TZif; a version 5; a footer that is not a TZ string. */
	CHECK(sluice_tzif_parse((const unsigned char *)"TZxf2", 5, &z, err,
				sizeof(err)) != 0);
	buf[4] = '5';
	CHECK(sluice_tzif_parse(buf, len, &z, err, sizeof(err)) != 0);
	buf[4] = '2';
	buf[len - 3] = '!';
	CHECK(sluice_tzif_parse(buf, len, &z, err, sizeof(err)) != 0);
	CHECK(strstr(err, "footer") != NULL);
}

/* A version 1 file (32-bit times, no footer): the same offsets as the
 * version 2 file it was cut from, up to 2037, and the last offset after. */
static void test_version_1_file(void)
{
	static unsigned char buf[1 << 16];
	FILE *f = fopen("/usr/share/zoneinfo/Europe/Berlin", "rb");
	sluice_zone_t v1, v2;
	size_t len, size;
	uint32_t c[6];
	int64_t t;
	int i;

	CHECK(f != NULL);
	len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	CHECK(sluice_tzif_parse(buf, len, &v2, NULL, 0) == 0);
	for (i = 0; i < 6; i++)
		c[i] = (uint32_t)buf[20 + 4 * i] << 24 |
		       (uint32_t)buf[21 + 4 * i] << 16 |
		       (uint32_t)buf[22 + 4 * i] << 8 | buf[23 + 4 * i];
	/* isut, isstd, leap, time, type, char */
	size = 44 + c[3] * 5 + c[4] * 6 + c[5] + c[2] * 8 + c[1] + c[0];
	buf[4] = 0;
	CHECK(sluice_tzif_parse(buf, size, &v1, NULL, 0) == 0);
	CHECK(!v1.has_tz && v1.ntrans > 100);
	for (t = 0; t < INT64_C(2140000000); t += 86400 * 7 + 3607)
		CHECK(sluice_zone_offset(&v1, t, NULL) ==
		      sluice_zone_offset(&v2, t, NULL));
	CHECK(sluice_zone_offset(&v1, INT64_C(4102444800), NULL) ==
	      v1.off[v1.ntrans - 1]);
	sluice_zone_release(&v1);
	sluice_zone_release(&v2);
}

/* POSIX TZ footers alone (a file with no transitions): offsets from the
 * rule for any year, southern-hemisphere summers across New Year, and a
 * zone on summer time all year. */
static void test_footer_rules(void)
{
	static const struct {
		const char *tz;
		int64_t t;
		int32_t off;
	} cases[] = {
		/* New York 2100-07-01 and 2100-01-15: EDT, EST. */
		{"EST5EDT,M3.2.0,M11.1.0", 4118083200, -4 * 3600},
		{"EST5EDT,M3.2.0,M11.1.0", 4103683200, -5 * 3600},
		/* 2100-03-14 06:59:59 UTC EST, 07:00:00 EDT (2nd Sunday). */
		{"EST5EDT,M3.2.0,M11.1.0", 4108690799, -5 * 3600},
		{"EST5EDT,M3.2.0,M11.1.0", 4108690800, -4 * 3600},
		/* Lord Howe: +10:30, +11 in summer (January). */
		{"<+1030>-10:30<+11>-11,M10.1.0,M4.1.0", 4103683200, 11 * 3600},
		{"<+1030>-10:30<+11>-11,M10.1.0,M4.1.0", 4118083200,
		 10 * 3600 + 1800},
		/* Summer time all year (a v3 extension). */
		{"EST5EDT,0/0,J365/25", 4103683200, -4 * 3600},
		{"EST5EDT,0/0,J365/25", 4118083200, -4 * 3600},
		{"<+0530>-5:30", 4118083200, 5 * 3600 + 1800},
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned char file[200];
		size_t n = strlen(cases[i].tz), len;
		sluice_zone_t z;
		char err[200];

		/* A v2 file with no transitions: a v1 header and block of
		 * one type, a v2 header and block, the footer. */
		memset(file, 0, sizeof(file));
		memcpy(file, "TZif2", 5);
		file[20 + 4 * 4 + 3] = 1; /* typecnt */
		file[20 + 5 * 4 + 3] = 1; /* charcnt */
		memcpy(file + 51, file, 44);
		file[95 + 6] = 0;
		len = 95 + 7;
		file[len++] = '\n';
		memcpy(file + len, cases[i].tz, n);
		len += n;
		file[len++] = '\n';
		CHECK(sluice_tzif_parse(file, len, &z, err, sizeof(err)) == 0);
		if (sluice_zone_offset(&z, cases[i].t, NULL) != cases[i].off)
			fprintf(stderr, "%s at %lld: %d\n", cases[i].tz,
				(long long)cases[i].t,
				(int)sluice_zone_offset(&z, cases[i].t, NULL));
		CHECK(sluice_zone_offset(&z, cases[i].t, NULL) == cases[i].off);
		sluice_zone_release(&z);
	}
}

/* Threads loading the same zones in different orders agree on every
 * id. */
#define NAMES 24
static const char *const thread_names[NAMES] = {
	"Europe/Paris",	    "Europe/Madrid",   "Europe/Rome",
	"Europe/Vienna",    "Europe/Oslo",     "Europe/Lisbon",
	"America/Chicago",  "America/Denver",  "America/Phoenix",
	"America/Toronto",  "America/Havana",  "America/Bogota",
	"Asia/Tokyo",	    "Asia/Shanghai",   "Asia/Dubai",
	"Asia/Kathmandu",   "Asia/Tehran",     "Asia/Singapore",
	"Africa/Cairo",	    "Africa/Lagos",    "Africa/Nairobi",
	"Pacific/Auckland", "Pacific/Chatham", "Pacific/Kiritimati"};

static void *load_all(void *arg)
{
	uint16_t *ids = arg;
	size_t i, start = ids[0];

	for (i = 0; i < NAMES; i++) {
		size_t k = (start + i * 7) % NAMES;

		if (sluice_zone_load(thread_names[k], &ids[1 + k], NULL, 0) !=
		    0)
			ids[1 + k] = 0;
	}
	return NULL;
}

static void test_threads_agree_on_ids(void)
{
	pthread_t th[4];
	uint16_t ids[4][NAMES + 1];
	size_t i, k;

	for (i = 0; i < 4; i++) {
		ids[i][0] = (uint16_t)(i * 5);
		CHECK(pthread_create(&th[i], NULL, load_all, ids[i]) == 0);
	}
	for (i = 0; i < 4; i++)
		CHECK(pthread_join(th[i], NULL) == 0);
	for (k = 1; k <= NAMES; k++) {
		CHECK(ids[0][k] != 0);
		for (i = 1; i < 4; i++)
			CHECK(ids[i][k] == ids[0][k]);
		CHECK(strcmp(sluice_zone_name(ids[0][k]),
			     thread_names[k - 1]) == 0);
	}
}

/* The table holds SLUICE_ZONES_MAX zones: the next new name is refused
 * (SLUICE_ERANGE, a message), the loaded ones still answer, every id
 * still names its zone.  The zones are copies of one file in a directory
 * of the test's own (no system has a thousand zones). */
static void test_table_full(void)
{
	char dir[] = "/tmp/sluice-zones-XXXXXX", path[128], name[32];
	static unsigned char buf[1 << 16];
	FILE *f = fopen("/usr/share/zoneinfo/Asia/Kolkata", "rb");
	uint16_t id, first = 0;
	size_t len, i, loaded = 0;
	char err[200];
	int rc = 0;

	CHECK(f != NULL);
	len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	CHECK(mkdtemp(dir) != NULL);
	for (i = 0; i < SLUICE_ZONES_MAX + 2; i++) {
		snprintf(path, sizeof(path), "%s/Z%zu", dir, i);
		f = fopen(path, "wb");
		CHECK(f && fwrite(buf, 1, len, f) == len);
		fclose(f);
	}
	sluice__zone_root(dir);
	for (i = 0; i < SLUICE_ZONES_MAX + 2; i++) {
		snprintf(name, sizeof(name), "Z%zu", i);
		rc = sluice_zone_load(name, &id, err, sizeof(err));
		if (rc != 0)
			break;
		if (!first)
			first = id;
		loaded++;
	}
	sluice__zone_root(NULL);
	CHECK(rc == SLUICE_ERANGE && strstr(err, "too many") &&
	      strstr(err, name));
	/* Every id up to the last was given once: the table is full. */
	CHECK(id == SLUICE_ZONES_MAX && first + loaded - 1 == id);
	CHECK(sluice_zone_load("Europe/Berlin", &id, NULL, 0) == 0);
	CHECK(strcmp(sluice_zone_name(id), "Europe/Berlin") == 0);
	CHECK(sluice_zone_load("Z0", &id, NULL, 0) == 0 && id == first);
	CHECK(sluice_zone_get(SLUICE_ZONES_MAX) != NULL &&
	      sluice_zone_get(SLUICE_ZONES_MAX + 1) == NULL);
	for (i = 0; i < SLUICE_ZONES_MAX + 2; i++) {
		snprintf(path, sizeof(path), "%s/Z%zu", dir, i);
		unlink(path);
	}
	rmdir(dir);
}

int main(void)
{
	RUN(test_windows_match_python_zoneinfo);
	RUN(test_windows_tile_time);
	RUN(test_zone_names_and_refusals);
	RUN(test_tzif_refuses_damaged_files);
	RUN(test_version_1_file);
	RUN(test_footer_rules);
	RUN(test_threads_agree_on_ids);
	RUN(test_table_full); /* last: it fills the table */
	TESTS_DONE();
}
