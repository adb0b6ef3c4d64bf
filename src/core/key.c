/*
 * key.c -- the store key of a named bucket: "<name>\x1f<identity>".
 *
 * Every front end (sluice serve's rules, POST /v1/take, the Node.js addon)
 * builds keys here, so the same name and identity reach the same bucket
 * whichever of them decides.  An identity longer than SLUICE_IDENTITY_MAX
 * bytes, or one holding control characters, is replaced by "~" and the hex
 * SHA-256 of the raw identity: fixed-size, and no client can make two
 * different values share a bucket (plain truncation would let
 * "AAAA...x" and "AAAA...y" collide).
 */
#include "sluice.h"
#include "util/sha256.h"

#include <string.h>

size_t sluice_key_make(const char *name, const void *const *parts,
		       const size_t *lens, size_t nparts,
		       char out[SLUICE_KEY_MAX])
{
	size_t i, j, total = 0, namelen = strlen(name), off;
	int hash = 0;

	for (i = 0; i < nparts; i++) {
		const unsigned char *p = parts[i];

		total += lens[i];
		if (lens[i] == 1 && p[0] == 0x1f && nparts > 1)
			continue; /* the composite separator */
		for (j = 0; j < lens[i] && !hash; j++)
			if (p[j] < 0x20 || p[j] == 0x7f)
				hash = 1;
	}
	if (total > SLUICE_IDENTITY_MAX)
		hash = 1;
	if (namelen > SLUICE_KEY_NAME_MAX)
		namelen = SLUICE_KEY_NAME_MAX;

	memcpy(out, name, namelen);
	out[namelen] = '\x1f';
	off = namelen + 1;
	if (hash) {
		static const char hex[] = "0123456789abcdef";
		uint8_t d[32];

		sluice_sha256(parts, lens, nparts, d);
		out[off++] = '~';
		for (i = 0; i < 32; i++) {
			out[off++] = hex[d[i] >> 4];
			out[off++] = hex[d[i] & 15];
		}
	} else {
		for (i = 0; i < nparts; i++) {
			memcpy(out + off, parts[i], lens[i]);
			off += lens[i];
		}
	}
	out[off] = '\0';
	return off;
}
