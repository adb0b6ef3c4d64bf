/*
 * quota.c -- calendar quotas as the module's verbs take them: where a
 * verb takes "capacity rate", a rate of the form
 *
 *   @<unit>[:<zone>|:first_use]      (@month, @day:Europe/Berlin,
 *                                     @hour:first_use)
 *
 * makes the limit a quota of `capacity` requests per calendar window
 * (sluice_quota.h), the form the quota's id takes after its '@', which
 * is what the Redis client sends.  The module links the core, so it
 * computes zoned windows itself, at the server's clock, and stores the
 * state the script path stores (end_s * 10^9 + used, expiring at the
 * window's end).
 */
#include "redis_module/module.h"

#include <stdio.h>
#include <string.h>

/* A quota's capacity: a whole number, digits only. */
static int parse_quota(const char *s, uint64_t *v)
{
	uint64_t n = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || n > (UINT64_MAX - 9) / 10)
			return -1;
		n = n * 10 + (uint64_t)(*s - '0');
	}
	*v = n;
	return 0;
}

int sluice_rm_quota_parse(const char *capacity, const char *rate,
			  sluice_limit_t *limit, char *err, size_t errlen)
{
	char unit[16];
	const char *colon = strchr(rate + 1, ':'), *zone = NULL;
	size_t ulen = colon ? (size_t)(colon - rate - 1) : strlen(rate + 1);
	uint8_t per, align = SLUICE_ALIGN_CALENDAR;
	uint16_t id = 0;
	uint64_t quota;

	if (ulen == 0 || ulen >= sizeof(unit)) {
		snprintf(err, errlen,
			 "quota rate \"%.40s\" names no unit: expected "
			 "@<unit>[:<zone>|:first_use], e.g. @month or "
			 "@day:Europe/Berlin",
			 rate);
		return -1;
	}
	memcpy(unit, rate + 1, ulen);
	unit[ulen] = '\0';
	/* The core's messages name the unit and the zone. */
	if (sluice_per_parse(unit, &per, err, errlen) != 0)
		return -1;
	if (colon && strcmp(colon + 1, "first_use") == 0)
		align = SLUICE_ALIGN_FIRST_USE;
	else if (colon)
		zone = colon + 1;
	if (zone && sluice_zone_load(zone, &id, err, errlen) != 0)
		return -1;
	if (parse_quota(capacity, &quota) != 0 || quota == 0 ||
	    quota > SLUICE_QUOTA_MAX) {
		snprintf(err, errlen,
			 "quota \"%.40s\" is not a whole number from 1 to %llu",
			 capacity, (unsigned long long)SLUICE_QUOTA_MAX);
		return -1;
	}
	return sluice_quota_init(limit, quota, per, align, id, err, errlen) == 0
		       ? 0
		       : -1;
}
