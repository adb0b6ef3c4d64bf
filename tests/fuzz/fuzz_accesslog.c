/*
 * fuzz_accesslog.c -- libFuzzer harness for `sluice replay`'s log reader.
 *
 * Access logs hold whatever clients sent (nginx escapes it, but logs get
 * truncated, rotated mid-line and hand-edited): any bytes must be parsed or
 * rejected with a reason, never crash.  Each input is also replayed as a
 * whole log against a small config, so grouping, deciding and the report
 * see it too.
 */
#include "policy/config/config.h"
#include "sim/accesslog.h"
#include "sim/replay.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char config[] = "rules:\n"
			     "  - name: api\n"
			     "    key: [\"header:user-agent\", ip]\n"
			     "    limits: [{capacity: 3, rate: 1/s}]\n"
			     "  - name: login\n"
			     "    match: {methods: [POST], path: /login*}\n"
			     "    shadow: true\n"
			     "    limits: [{capacity: 1, rate: 1/min}]\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sluice_config_t *cfg;
	sluice_replay_opts_t o;
	sluice_replay_report_t r;
	sluice_logline_t ll;
	const char *why;
	char err[256], *line;
	FILE *f;

	if (!cfg)
		cfg = sluice_config_parse("fuzz.yaml", config, strlen(config),
					  err, sizeof(err));
	if (!cfg)
		abort();

	/* One line, parsed in place. */
	line = malloc(size + 1);
	if (!line)
		return 0;
	memcpy(line, data, size);
	line[size] = '\0';
	if (sluice_logline_parse(line, &ll, &why) == 0) {
		if (!ll.method || !ll.path || ll.path[0] == '\0')
			abort();
	} else if (!why || !why[0]) {
		abort();
	}
	free(line);

	/* The whole input as a log. */
	f = fmemopen((void *)data, size ? size : 1, "r");
	if (!f)
		return 0;
	sluice_replay_opts_default(&o);
	o.top = 3;
	if (sluice_replay_run(cfg, f, &o, &r, err, sizeof(err)) == 0 &&
	    r.replayed + r.malformed > r.lines)
		abort();
	sluice_replay_report_free(&r);
	fclose(f);
	return 0;
}
