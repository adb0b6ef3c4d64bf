/*
 * strerror.c -- the words of the library's SLUICE_E* codes.
 */
#include "sluice.h"

const char *sluice_strerror(int err)
{
	switch (err) {
	case SLUICE_OK:
		return "success";
	case SLUICE_EINVAL:
		return "invalid argument";
	case SLUICE_ERANGE:
		return "value out of range";
	case SLUICE_ENOMEM:
		return "out of memory";
	case SLUICE_ESTORE:
		return "store failure";
	case SLUICE_ETIMEDOUT:
		return "store timed out";
	default:
		return "unknown error";
	}
}
