/*
 * key.c -- the store key of a named bucket: "<name>\x1f<identity>".
 *
 * Every front end (sluice serve's rules, POST /v1/take, the admin
 * endpoints, the Node.js addon) builds keys here, so the same name and
 * identity reach the same bucket whichever of them decides.
 *
 * The encoding of an identity (the bytes of its parts joined, a composite
 * identity's parts separated by 0x1f) is one rule:
 *
 *   kept verbatim  when it is at most SLUICE_IDENTITY_MAX bytes, does not
 *                  start with '~', and holds no byte below 0x20 or 0x7f
 *                  other than the 0x1f separator;
 *   else hashed    to "~" and the lower-case hex SHA-256 of all its bytes.
 *
 * A verbatim identity never starts with '~' and a hashed one always does,
 * so the two sets are disjoint; within each, distinct identities get
 * distinct encodings (SHA-256 being collision-free).  Hence no identity
 * can reach another's bucket: not "~<sha256 of X>" that of a long or
 * binary X (which is why an identity starting with '~' is hashed too), nor
 * a long one that of its first 200 bytes (why there is no truncation).
 * The separator is a plain byte of the identity, so "a\x1fb" given to
 * /v1/take or the Node addon is the composite identity (a, b) of a rule.
 */
#include "sluice.h"
#include "util/sha256.h"

#include <string.h>

/* 1 when the identity parts[0..nparts) (joined) is kept verbatim. */
static int verbatim(const void *const *parts, const size_t *lens, size_t nparts)
{
	size_t i, j, total = 0;
	int first = 1;

	for (i = 0; i < nparts; i++) {
		const unsigned char *p = parts[i];

		total += lens[i];
		for (j = 0; j < lens[i]; j++) {
			if (first && p[j] == '~')
				return 0;
			first = 0;
			if ((p[j] < 0x20 && p[j] != 0x1f) || p[j] == 0x7f)
				return 0;
		}
	}
	return total <= SLUICE_IDENTITY_MAX;
}

size_t sluice_key_make(const char *name, const void *const *parts,
		       const size_t *lens, size_t nparts,
		       char out[SLUICE_KEY_MAX])
{
	size_t i, namelen = strlen(name), off;

	if (namelen > SLUICE_KEY_NAME_MAX)
		namelen = SLUICE_KEY_NAME_MAX;
	memcpy(out, name, namelen);
	out[namelen] = '\x1f';
	off = namelen + 1;
	if (verbatim(parts, lens, nparts)) {
		for (i = 0; i < nparts; i++) {
			memcpy(out + off, parts[i], lens[i]);
			off += lens[i];
		}
	} else {
		static const char hex[] = "0123456789abcdef";
		uint8_t d[32];

		sluice_sha256(parts, lens, nparts, d);
		out[off++] = '~';
		for (i = 0; i < 32; i++) {
			out[off++] = hex[d[i] >> 4];
			out[off++] = hex[d[i] & 15];
		}
	}
	out[off] = '\0';
	return off;
}
