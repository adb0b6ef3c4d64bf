/*
 * fuzz_xds.c -- libFuzzer harness for the xDS client's DiscoveryResponse
 * (src/xds/xds_wire.c): any bytes decode to resources or an error, and
 * resources load into a config or an "xds:NAME:LINE: ..." error; never a
 * crash, a leak, undefined behaviour or a deep recursion.
 */
#include "policy/envoy/config.h"
#include "xds/xds.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sluice_envoy_settings_t s;
	sluice_xds_response_t r;
	sluice_envoy_config_t *cfg;
	char err[1024];

	if (sluice_xds_decode(data, size, &r, err, sizeof(err)) == 0) {
		sluice_envoy_settings_init(&s);
		cfg = sluice_envoy_load_texts(r.texts, r.ntexts, &s, err,
					      sizeof(err));
		if (!cfg && strncmp(err, "xds:", 4) != 0 &&
		    strcmp(err, "out of memory") != 0)
			abort(); /* every error names its resource */
		sluice_envoy_config_free(cfg);
	}
	sluice_xds_response_free(&r);
	return 0;
}
