/*
 * log.c -- the `log:` section: how `sluice serve` writes its log.
 *
 *   log: {format: text, level: info}    # format: text | json
 *                                       # level: debug | info | warn | error
 *
 * envoyproxy/ratelimit's LOG_FORMAT and LOG_LEVEL (its "warning" is
 * read as warn).  A reload applies both (serve/server.c).
 */
#include "policy/config/internal.h"

#include <string.h>
#include <strings.h>

int sluice_config_parse_log(sluice_yaml_t *y, yaml_node_t *node,
			    sluice_config_t *cfg)
{
	static const char *const keys[] = {"format", "level", NULL};
	static const struct {
		const char *name;
		sluice_log_level_t level;
	} levels[] = {{"debug", SLUICE_LOG_DEBUG},
		      {"info", SLUICE_LOG_INFO},
		      {"warn", SLUICE_LOG_WARN},
		      {"warning", SLUICE_LOG_WARN},
		      {"error", SLUICE_LOG_ERROR}};
	yaml_node_t *v;
	const char *s;
	size_t i;
	int rc = 0;

	if (sluice_yaml_expect_map(y, node, "log") < 0 ||
	    sluice_yaml_check_keys(y, node, "log", keys) < 0)
		return -1;
	if ((v = sluice_yaml_get(y, node, "format"))) {
		if (sluice_yaml_string(y, v, "log.format", &s) < 0)
			rc = -1;
		else if (strcasecmp(s, "text") == 0)
			cfg->log_json = 0;
		else if (strcasecmp(s, "json") == 0)
			cfg->log_json = 1;
		else
			rc = sluice_yaml_error(y, v,
					       "log.format is \"%.40s\"; "
					       "expected text or json",
					       s);
	}
	if ((v = sluice_yaml_get(y, node, "level"))) {
		if (sluice_yaml_string(y, v, "log.level", &s) < 0)
			return -1;
		for (i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
			if (strcasecmp(s, levels[i].name) == 0)
				break;
		if (i == sizeof(levels) / sizeof(levels[0]))
			return sluice_yaml_error(y, v,
						 "log.level is \"%.40s\"; "
						 "expected debug, info, warn "
						 "or error",
						 s);
		cfg->log_level = levels[i].level;
	}
	return rc;
}
