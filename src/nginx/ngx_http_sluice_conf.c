/*
 * ngx_http_sluice_conf.c -- what ngx_http_sluice_module's directives say
 * (their reference is the command table, ngx_http_sluice_module.c): the
 * zones, each location's limits and settings, each refused with nginx's
 * "... in FILE:LINE" when it is wrong.
 */
#include "ngx_http_sluice.h"

#include <ctype.h>

void *ngx_http_sluice_create_main_conf(ngx_conf_t *cf)
{
	ngx_http_sluice_main_conf_t *smcf;

	smcf = ngx_pcalloc(cf->pool, sizeof(*smcf));
	if (smcf == NULL)
		return NULL;
	if (ngx_array_init(&smcf->zones, cf->pool, 4,
			   sizeof(ngx_http_sluice_zone_t *)) != NGX_OK ||
	    ngx_array_init(&smcf->stores, cf->pool, 4,
			   sizeof(ngx_http_sluice_store_t *)) != NGX_OK)
		return NULL;
	return smcf;
}

/* Gives each zone with no store= its own file, now that the directory is
 * known. */
char *ngx_http_sluice_init_main_conf(ngx_conf_t *cf, void *conf)
{
	ngx_http_sluice_main_conf_t *smcf = conf;
	ngx_http_sluice_zone_t **zp = smcf->zones.elts, *z;
	ngx_uint_t i;
	u_char *p;

	if (smcf->store_dir.data == NULL) {
		ngx_str_set(&smcf->store_dir, NGX_HTTP_SLUICE_STORE_DIR);
	}
	for (i = 0; i < smcf->zones.nelts; i++) {
		z = zp[i];
		if (z->store->cfg.kind != SLUICE_STORE_SHARED ||
		    z->store->cfg.shm_path)
			continue;
		p = ngx_pnalloc(cf->pool, smcf->store_dir.len + z->name.len +
						  sizeof("/nginx-sluice-"));
		if (p == NULL)
			return NGX_CONF_ERROR;
		z->store->shown.data = p;
		p = ngx_sprintf(p, "%V/nginx-sluice-%V", &smcf->store_dir,
				&z->name);
		z->store->shown.len = p - z->store->shown.data;
		*p = '\0';
		z->store->cfg.shm_path = (char *)z->store->shown.data;
	}
	return ngx_http_sluice_config_init_main(cf, smcf);
}

void *ngx_http_sluice_create_loc_conf(ngx_conf_t *cf)
{
	ngx_http_sluice_loc_conf_t *conf;

	conf = ngx_pcalloc(cf->pool, sizeof(*conf));
	if (conf == NULL)
		return NULL;
	conf->limits = NULL;
	conf->status = NGX_CONF_UNSET_UINT;
	conf->log_level = NGX_CONF_UNSET_UINT;
	conf->dry_run = NGX_CONF_UNSET;
	conf->headers = NGX_CONF_UNSET_UINT;
	return conf;
}

char *ngx_http_sluice_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
	ngx_http_sluice_loc_conf_t *prev = parent;
	ngx_http_sluice_loc_conf_t *conf = child;

	ngx_http_sluice_config_merge(conf, prev);
	if (conf->limits == NULL)
		conf->limits = prev->limits;
	ngx_conf_merge_uint_value(conf->log_level, prev->log_level,
				  NGX_LOG_ERR);
	conf->delay_log_level = (conf->log_level == NGX_LOG_INFO)
					? NGX_LOG_INFO
					: conf->log_level + 1;
	ngx_conf_merge_uint_value(conf->status, prev->status,
				  NGX_HTTP_SERVICE_UNAVAILABLE);
	ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
	ngx_conf_merge_uint_value(conf->headers, prev->headers,
				  NGX_HTTP_SLUICE_HEADERS_OFF);
	return NGX_CONF_OK;
}

/* "10r/s", "30r/m" (nginx's) or sluice's exact forms ("2/s", "1/3s"). */
static char *parse_rate(ngx_str_t *text, sluice_rate_t *rate)
{
	static u_char msg[300];
	char buf[64], err[200];
	size_t i, n = 0;

	if (text->len >= sizeof(buf))
		goto bad;
	for (i = 0; i < text->len; i++) {
		/* nginx's "r/" is sluice's "/" */
		if (text->data[i] == 'r' && i + 1 < text->len &&
		    text->data[i + 1] == '/' && i > 0)
			continue;
		buf[n++] = (char)text->data[i];
	}
	buf[n] = '\0';
	if (sluice_rate_parse(buf, rate, err, sizeof(err)) == 0)
		return NGX_CONF_OK;
	ngx_snprintf(msg, sizeof(msg), "invalid rate \"%V\": %s%Z", text, err);
	return (char *)msg;
bad:
	ngx_snprintf(msg, sizeof(msg), "invalid rate \"%V\"%Z", text);
	return (char *)msg;
}

/* "NAME=VALUE" when arg starts with prefix ("NAME="): its VALUE in *out,
 * and 1; else 0. */
static ngx_uint_t param_value(ngx_str_t *arg, const char *prefix,
			      ngx_str_t *out)
{
	size_t n = ngx_strlen(prefix);

	if (ngx_strncmp(arg->data, prefix, n) != 0)
		return 0;
	out->data = arg->data + n;
	out->len = arg->len - n;
	return 1;
}

/* What a sluice_limit_zone directive says, before its zone is made. */
typedef struct {
	ngx_str_t name;
	ssize_t bytes; /* the zone's size= (after its name, "zone=N:SIZE") */
	ngx_str_t rate;
	ngx_str_t store_text;
	ngx_str_t opts[2]; /* fail=, timeout=: read once the store is known */
	ngx_uint_t nopts;
} ngx_http_sluice_zone_args_t;

/* zone=NAME:SIZE into args' name and bytes. */
static char *zone_read_name_size(ngx_conf_t *cf, ngx_str_t *arg,
				 ngx_http_sluice_zone_args_t *args)
{
	ngx_str_t size;
	u_char *p;

	args->name.data = arg->data + 5;
	p = (u_char *)ngx_strchr(args->name.data, ':');
	if (p == NULL) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "invalid zone size \"%V\"", arg);
		return NGX_CONF_ERROR;
	}
	args->name.len = p - args->name.data;
	size.data = p + 1;
	size.len = arg->data + arg->len - size.data;
	args->bytes = ngx_parse_size(&size);
	if (args->bytes == NGX_ERROR) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "invalid zone size \"%V\"", arg);
		return NGX_CONF_ERROR;
	}
	if (args->bytes < NGX_HTTP_SLUICE_ZONE_MIN) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "zone \"%V\" is too small (at least "
				   "32k: %d buckets)",
				   arg,
				   NGX_HTTP_SLUICE_ZONE_MIN /
					   NGX_HTTP_SLUICE_BUCKET_BYTES);
		return NGX_CONF_ERROR;
	}
	return NGX_CONF_OK;
}

/* The directive's parameters after its key, each refused if unknown. */
static char *zone_read_args(ngx_conf_t *cf, ngx_http_sluice_zone_args_t *args)
{
	ngx_str_t *value = cf->args->elts;
	ngx_uint_t i;

	for (i = 2; i < cf->args->nelts; i++) {
		if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {
			if (zone_read_name_size(cf, &value[i], args) !=
			    NGX_CONF_OK)
				return NGX_CONF_ERROR;
			continue;
		}
		if (param_value(&value[i], "rate=", &args->rate) ||
		    param_value(&value[i], "store=", &args->store_text))
			continue;
		/* The store's options, read once the store is known. */
		if ((ngx_strncmp(value[i].data, "fail=", 5) == 0 ||
		     ngx_strncmp(value[i].data, "timeout=", 8) == 0) &&
		    args->nopts < 2) {
			args->opts[args->nopts++] = value[i];
			continue;
		}
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "invalid parameter \"%V\"", &value[i]);
		return NGX_CONF_ERROR;
	}
	return NGX_CONF_OK;
}

/* The zone of that name, or NULL. */
static ngx_http_sluice_zone_t *zone_by_name(ngx_http_sluice_main_conf_t *smcf,
					    ngx_str_t *name)
{
	ngx_http_sluice_zone_t **zones = smcf->zones.elts;
	ngx_uint_t i;

	for (i = 0; i < smcf->zones.nelts; i++)
		if (zones[i]->name.len == name->len &&
		    ngx_strncmp(zones[i]->name.data, name->data, name->len) ==
			    0)
			return zones[i];
	return NULL;
}

/* A zone's name: given, short enough to name its buckets, of the
 * characters allowed, and not another zone's. */
static char *zone_check_name(ngx_conf_t *cf, ngx_command_t *cmd,
			     ngx_http_sluice_main_conf_t *smcf, ngx_str_t *name)
{
	ngx_http_sluice_zone_t *first;
	ngx_uint_t i;

	if (name->len == 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"%V\" must have \"zone\" parameter",
				   &cmd->name);
		return NGX_CONF_ERROR;
	}
	if (name->len > SLUICE_KEY_NAME_MAX) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "zone name \"%V\" is longer than %d bytes",
				   name, SLUICE_KEY_NAME_MAX);
		return NGX_CONF_ERROR;
	}
	for (i = 0; i < name->len; i++)
		if (!(isalnum(name->data[i]) || name->data[i] == '_' ||
		      name->data[i] == '-' || name->data[i] == '.')) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
					   "invalid zone name \"%V\" (letters, "
					   "digits, '_', '-', '.')",
					   name);
			return NGX_CONF_ERROR;
		}
	first = zone_by_name(smcf, name);
	if (first) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "duplicate zone \"%V\" (first in "
				   "%s:%ui)",
				   name, first->conf_file, first->conf_line);
		return NGX_CONF_ERROR;
	}
	return NGX_CONF_OK;
}

/* The zone, added to the main conf's: its name, size, rate and key (the
 * directive's first argument); NULL when refused. */
static ngx_http_sluice_zone_t *zone_add(ngx_conf_t *cf,
					ngx_http_sluice_main_conf_t *smcf,
					ngx_http_sluice_zone_args_t *args)
{
	ngx_http_compile_complex_value_t ccv;
	ngx_http_sluice_zone_t *zone, **zp;
	ngx_str_t *value = cf->args->elts;
	char *rv;

	/* Limits point at it: allocated alone, never moved. */
	zone = ngx_pcalloc(cf->pool, sizeof(*zone));
	zp = ngx_array_push(&smcf->zones);
	if (zone == NULL || zp == NULL)
		return NULL;
	*zp = zone;
	/* NUL-terminated: it names the zone's buckets (sluice_key_make). */
	zone->name.data = ngx_pnalloc(cf->pool, args->name.len + 1);
	if (zone->name.data == NULL)
		return NULL;
	ngx_memcpy(zone->name.data, args->name.data, args->name.len);
	zone->name.data[args->name.len] = '\0';
	zone->name.len = args->name.len;
	zone->size = (size_t)args->bytes;
	zone->rate_text = args->rate;
	zone->conf_file = cf->conf_file->file.name.data;
	zone->conf_line = cf->conf_file->line;

	/* No rate: a zone for quotas (sluice_limit ... quota=N/UNIT). */
	rv = args->rate.len ? parse_rate(&args->rate, &zone->rate)
			    : NGX_CONF_OK;
	if (rv != NGX_CONF_OK) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", rv);
		return NULL;
	}

	ngx_memzero(&ccv, sizeof(ccv));
	ccv.cf = cf;
	ccv.value = &value[1];
	ccv.complex_value = &zone->key;
	if (ngx_http_compile_complex_value(&ccv) != NGX_OK)
		return NULL;
	return zone;
}

/* The store before this one on the same file, or NULL. */
static ngx_http_sluice_store_t *
same_file_store(ngx_http_sluice_main_conf_t *smcf,
		ngx_http_sluice_store_t *store)
{
	ngx_http_sluice_store_t **stores = smcf->stores.elts;
	ngx_uint_t i;

	for (i = 0; store->cfg.shm_path && i < smcf->stores.nelts; i++)
		if (stores[i]->cfg.shm_path &&
		    ngx_strcmp(stores[i]->cfg.shm_path, store->cfg.shm_path) ==
			    0)
			return stores[i];
	return NULL;
}

/* The store before this one with the same store= text (Redis), else
 * this one. */
static ngx_http_sluice_store_t *
same_text_store(ngx_http_sluice_main_conf_t *smcf,
		ngx_http_sluice_store_t *store)
{
	ngx_http_sluice_store_t **stores = smcf->stores.elts;
	ngx_uint_t i;

	for (i = 0; store->text.len && i < smcf->stores.nelts; i++)
		if (stores[i]->text.len == store->text.len &&
		    ngx_strncmp(stores[i]->text.data, store->text.data,
				store->text.len) == 0)
			return stores[i];
	return store;
}

/* The store into the main conf's list, unless it is there already. */
static char *store_add_once(ngx_http_sluice_main_conf_t *smcf,
			    ngx_http_sluice_store_t *store)
{
	ngx_http_sluice_store_t **stores = smcf->stores.elts, **sp;
	ngx_uint_t i;

	for (i = 0; i < smcf->stores.nelts; i++)
		if (stores[i] == store)
			return NGX_CONF_OK;
	sp = ngx_array_push(&smcf->stores);
	if (sp == NULL)
		return NGX_CONF_ERROR;
	*sp = store;
	return NGX_CONF_OK;
}

/* The zone's store: one already opened for the same file or Redis
 * store=, else this new one; then the store's options (fail=,
 * timeout=), but not for a file shared with a zone before. */
static char *zone_set_store(ngx_conf_t *cf, ngx_http_sluice_main_conf_t *smcf,
			    ngx_http_sluice_zone_t *zone,
			    ngx_http_sluice_store_t *store,
			    ngx_http_sluice_zone_args_t *args)
{
	ngx_http_sluice_store_t *shared;
	ngx_uint_t i;
	char *rv;

	/* Zones naming one file share one store (and must agree on its
	 * size: the file is made for one number of buckets). */
	shared = same_file_store(smcf, store);
	if (shared) {
		if (shared->cfg.max_keys != store->cfg.max_keys) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
					   "zone \"%V\" has another size than "
					   "a zone before it on store \"%V\"",
					   &zone->name, &store->shown);
			return NGX_CONF_ERROR;
		}
		zone->store = shared;
		return NGX_CONF_OK;
	}
	/* Zones naming one Redis store share its clients: one connection
	 * per worker per node. */
	store = same_text_store(smcf, store);
	zone->store = store;
	if (store_add_once(smcf, store) != NGX_CONF_OK)
		return NGX_CONF_ERROR;
	for (i = 0; i < args->nopts; i++) {
		rv = ngx_http_sluice_store_option(cf, zone, &args->opts[i]);
		if (rv != NGX_CONF_OK) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", rv);
			return NGX_CONF_ERROR;
		}
	}
	return NGX_CONF_OK;
}

char *ngx_http_sluice_zone_cmd(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
	ngx_http_sluice_main_conf_t *smcf = conf;
	ngx_http_sluice_zone_args_t args;
	ngx_http_sluice_store_t *store;
	ngx_http_sluice_zone_t *zone;
	char *rv;

	ngx_memzero(&args, sizeof(args));
	if (zone_read_args(cf, &args) != NGX_CONF_OK ||
	    zone_check_name(cf, cmd, smcf, &args.name) != NGX_CONF_OK)
		return NGX_CONF_ERROR;
	zone = zone_add(cf, smcf, &args);
	if (zone == NULL)
		return NGX_CONF_ERROR;

	store = ngx_pcalloc(cf->pool, sizeof(*store));
	if (store == NULL)
		return NGX_CONF_ERROR;
	rv = ngx_http_sluice_store_parse(cf, zone, &args.store_text,
					 &smcf->store_dir, store);
	if (rv != NGX_CONF_OK) {
		if (rv != NGX_CONF_ERROR)
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", rv);
		return NGX_CONF_ERROR;
	}
	return zone_set_store(cf, smcf, zone, store, &args);
}

/* quota=N/UNIT [tz=ZONE] [align=calendar|first_use] into a calendar
 * quota (sluice_quota.h); NGX_CONF_OK or the message. */
static char *parse_quota(ngx_str_t *text, ngx_str_t *tz, ngx_str_t *align,
			 sluice_limit_t *limit)
{
	static u_char msg[400];
	char unit[32], zname[256], err[256];
	u_char *slash;
	ngx_int_t count, n;
	uint8_t per = 0, al = SLUICE_ALIGN_CALENDAR;
	uint16_t zone = 0;

	slash = ngx_strlchr(text->data, text->data + text->len, '/');
	count = slash ? ngx_atoi(text->data, slash - text->data) : NGX_ERROR;
	if (count == NGX_ERROR || count < 1 ||
	    (uint64_t)count > SLUICE_QUOTA_MAX) {
		ngx_snprintf(msg, sizeof(msg),
			     "invalid quota \"%V\" (N/UNIT: N from 1 to %uL "
			     "requests per second, minute, hour, day, week, "
			     "month or year, as \"10000/month\")%Z",
			     text, (uint64_t)SLUICE_QUOTA_MAX);
		return (char *)msg;
	}
	n = text->data + text->len - slash - 1;
	if ((size_t)n >= sizeof(unit))
		n = sizeof(unit) - 1; /* refused by the parser, cut or not */
	ngx_memcpy(unit, slash + 1, (size_t)n);
	unit[n] = '\0';
	if (sluice_per_parse(unit, &per, err, sizeof(err)) != 0) {
		ngx_snprintf(msg, sizeof(msg), "invalid quota \"%V\": %s%Z",
			     text, err);
		return (char *)msg;
	}
	if (align->data) {
		if (align->len == 8 &&
		    ngx_strncmp(align->data, "calendar", 8) == 0) {
			al = SLUICE_ALIGN_CALENDAR;
		} else if (align->len == 9 &&
			   ngx_strncmp(align->data, "first_use", 9) == 0) {
			al = SLUICE_ALIGN_FIRST_USE;
		} else {
			ngx_snprintf(msg, sizeof(msg),
				     "invalid align \"%V\" (calendar or "
				     "first_use)%Z",
				     align);
			return (char *)msg;
		}
	}
	if (tz->data) {
		if (al == SLUICE_ALIGN_FIRST_USE) {
			ngx_snprintf(msg, sizeof(msg),
				     "\"tz=%V\" with \"align=first_use\": a "
				     "first-use window opens at a key's first "
				     "request, in no time zone%Z",
				     tz);
			return (char *)msg;
		}
		if (tz->len == 0 || tz->len >= sizeof(zname) ||
		    ngx_strlchr(tz->data, tz->data + tz->len, '\0')) {
			ngx_snprintf(msg, sizeof(msg), "invalid tz \"%V\"%Z",
				     tz);
			return (char *)msg;
		}
		ngx_memcpy(zname, tz->data, tz->len);
		zname[tz->len] = '\0';
		if (sluice_zone_load(zname, &zone, err, sizeof(err)) != 0) {
			ngx_snprintf(msg, sizeof(msg),
				     "invalid tz \"%V\": %s%Z", tz, err);
			return (char *)msg;
		}
	}
	if (sluice_quota_init(limit, (uint64_t)count, per, al, zone, err,
			      sizeof(err)) != 0) {
		ngx_snprintf(msg, sizeof(msg), "invalid quota \"%V\": %s%Z",
			     text, err);
		return (char *)msg;
	}
	return NGX_CONF_OK;
}

/* What a sluice_limit directive says, before its limit is made. */
typedef struct {
	ngx_str_t zname, quota, tz, align; /* quota.data NULL: no quota */
	ngx_int_t burst, delay, cost;
	ngx_http_complex_value_t *cost_cv; /* cost=$variable */
	ngx_uint_t nodelay, has_delay, has_burst;
} ngx_http_sluice_limit_args_t;

/* NAME=N (burst=, delay=) into *n: a count, 0 or more. */
static char *limit_read_count(ngx_conf_t *cf, ngx_str_t *arg, const char *name,
			      ngx_int_t *n)
{
	size_t skip = ngx_strlen(name) + 1;

	*n = ngx_atoi(arg->data + skip, arg->len - skip);
	if (*n < 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "invalid %s value \"%V\"", name, arg);
		return NGX_CONF_ERROR;
	}
	return NGX_CONF_OK;
}

/* cost=N (a positive integer) or cost=$variable (read per request). */
static char *limit_read_cost(ngx_conf_t *cf, ngx_str_t *arg,
			     ngx_http_sluice_limit_args_t *args)
{
	ngx_http_compile_complex_value_t ccv;
	ngx_str_t s;

	s.data = arg->data + 5;
	s.len = arg->len - 5;
	if (s.len && s.data[0] == '$') {
		args->cost_cv = ngx_palloc(cf->pool, sizeof(*args->cost_cv));
		if (args->cost_cv == NULL)
			return NGX_CONF_ERROR;
		ngx_memzero(&ccv, sizeof(ccv));
		ccv.cf = cf;
		ccv.value = &s;
		ccv.complex_value = args->cost_cv;
		if (ngx_http_compile_complex_value(&ccv) != NGX_OK)
			return NGX_CONF_ERROR;
		return NGX_CONF_OK;
	}
	args->cost = ngx_atoi(s.data, s.len);
	if (args->cost <= 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "invalid cost value \"%V\" (a positive "
				   "integer or a variable)",
				   arg);
		return NGX_CONF_ERROR;
	}
	return NGX_CONF_OK;
}

/* The directive's parameters, each refused if unknown or malformed. */
static char *limit_read_args(ngx_conf_t *cf, ngx_http_sluice_limit_args_t *args)
{
	ngx_str_t *value = cf->args->elts;
	ngx_uint_t i;
	char *rv;

	for (i = 1; i < cf->args->nelts; i++) {
		if (param_value(&value[i], "zone=", &args->zname))
			continue;
		if (ngx_strncmp(value[i].data, "burst=", 6) == 0) {
			rv = limit_read_count(cf, &value[i], "burst",
					      &args->burst);
			if (rv != NGX_CONF_OK)
				return rv;
			args->has_burst = 1;
			continue;
		}
		if (param_value(&value[i], "quota=", &args->quota) ||
		    param_value(&value[i], "tz=", &args->tz) ||
		    param_value(&value[i], "align=", &args->align))
			continue;
		if (ngx_strncmp(value[i].data, "delay=", 6) == 0) {
			rv = limit_read_count(cf, &value[i], "delay",
					      &args->delay);
			if (rv != NGX_CONF_OK)
				return rv;
			args->has_delay = 1;
			continue;
		}
		if (ngx_strcmp(value[i].data, "nodelay") == 0) {
			args->nodelay = 1;
			continue;
		}
		if (ngx_strncmp(value[i].data, "cost=", 5) == 0) {
			rv = limit_read_cost(cf, &value[i], args);
			if (rv != NGX_CONF_OK)
				return rv;
			continue;
		}
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "invalid parameter \"%V\"", &value[i]);
		return NGX_CONF_ERROR;
	}
	return NGX_CONF_OK;
}

/* The parameters that may not go together, or without another. */
static char *limit_check_args(ngx_conf_t *cf, ngx_command_t *cmd,
			      ngx_http_sluice_limit_args_t *args)
{
	if (args->zname.len == 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"%V\" must have \"zone\" parameter",
				   &cmd->name);
		return NGX_CONF_ERROR;
	}
	if (args->quota.data == NULL && (args->tz.data || args->align.data)) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"%s\" without \"quota\": tz= and align= "
				   "describe a quota's calendar window",
				   args->tz.data ? "tz" : "align");
		return NGX_CONF_ERROR;
	}
	if (args->quota.data &&
	    (args->has_burst || args->has_delay || args->nodelay)) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"quota\" with \"%s\": a quota counts "
				   "requests per window and refuses the rest "
				   "at once (burst, delay and nodelay are a "
				   "rate's)",
				   args->has_burst   ? "burst"
				   : args->has_delay ? "delay"
						     : "nodelay");
		return NGX_CONF_ERROR;
	}
	if (args->nodelay && args->has_delay) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"nodelay\" and \"delay\" are mutually "
				   "exclusive");
		return NGX_CONF_ERROR;
	}
	if (args->delay > args->burst) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"delay=%i\" is more than \"burst=%i\"",
				   args->delay, args->burst);
		return NGX_CONF_ERROR;
	}
	return NGX_CONF_OK;
}

/* A new limit of the location on zone, zeroed: NULL when refused (the
 * zone's second at this level, or one too many). */
static ngx_http_sluice_limit_t *limit_add(ngx_conf_t *cf,
					  ngx_http_sluice_loc_conf_t *lcf,
					  ngx_http_sluice_zone_t *zone,
					  ngx_str_t *zname)
{
	ngx_http_sluice_limit_t *limit, *limits;
	ngx_uint_t i;

	if (lcf->limits == NULL) {
		lcf->limits = ngx_array_create(cf->pool, 2, sizeof(*limit));
		if (lcf->limits == NULL)
			return NULL;
	}
	limits = lcf->limits->elts;
	for (i = 0; i < lcf->limits->nelts; i++)
		if (limits[i].zone == zone) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
					   "duplicate sluice_limit zone \"%V\"",
					   zname);
			return NULL;
		}
	if (lcf->limits->nelts >= SLUICE_MAX_LIMITS) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "more than %d sluice_limit in one level",
				   SLUICE_MAX_LIMITS);
		return NULL;
	}
	limit = ngx_array_push(lcf->limits);
	if (limit == NULL)
		return NULL;
	ngx_memzero(limit, sizeof(*limit));
	return limit;
}

/* A quota's limit, on a zone with no rate: refused at once past its
 * quota, never delayed. */
static char *limit_init_quota(ngx_conf_t *cf, ngx_http_sluice_limit_t *limit,
			      ngx_http_sluice_limit_args_t *args)
{
	char *rv;

	if (limit->zone->rate_text.len) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"quota\" on zone \"%V\", which "
				   "has a rate (declare the zone "
				   "without rate= for quotas)",
				   &args->zname);
		return NGX_CONF_ERROR;
	}
	rv = parse_quota(&args->quota, &args->tz, &args->align, &limit->limit);
	if (rv != NGX_CONF_OK) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", rv);
		return NGX_CONF_ERROR;
	}
	limit->nodelay = 1;
	return NGX_CONF_OK;
}

/* A rate's limit: capacity burst + 1 at the zone's rate. */
static char *limit_init_rate(ngx_conf_t *cf, ngx_http_sluice_limit_t *limit,
			     ngx_http_sluice_limit_args_t *args)
{
	ngx_http_sluice_zone_t *zone = limit->zone;
	char err[200];

	if (zone->rate_text.len == 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "zone \"%V\" has no rate: give it rate= or "
				   "this sluice_limit a quota=N/UNIT",
				   &args->zname);
		return NGX_CONF_ERROR;
	}
	if (sluice_limit_init(&limit->limit, (uint64_t)args->burst + 1,
			      &zone->rate, err, sizeof(err)) != 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "burst=%i at rate \"%V\": %s", args->burst,
				   &zone->rate_text, err);
		return NGX_CONF_ERROR;
	}
	return NGX_CONF_OK;
}

char *ngx_http_sluice_limit_cmd(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
	ngx_http_sluice_loc_conf_t *lcf = conf;
	ngx_http_sluice_main_conf_t *smcf;
	ngx_http_sluice_limit_args_t args;
	ngx_http_sluice_limit_t *limit;
	ngx_http_sluice_zone_t *zone;

	ngx_memzero(&args, sizeof(args));
	args.cost = 1;
	if (limit_read_args(cf, &args) != NGX_CONF_OK ||
	    limit_check_args(cf, cmd, &args) != NGX_CONF_OK)
		return NGX_CONF_ERROR;

	/* Zones are declared at the http level, before any server: the
	 * zone must be known here (limit_req's zones may come later; a
	 * zone here is a store to open, checked at once). */
	smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sluice_module);
	zone = zone_by_name(smcf, &args.zname);
	if (zone == NULL) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "unknown sluice_limit_zone \"%V\" (declare "
				   "it before it is used)",
				   &args.zname);
		return NGX_CONF_ERROR;
	}

	limit = limit_add(cf, lcf, zone, &args.zname);
	if (limit == NULL)
		return NGX_CONF_ERROR;
	limit->zone = zone;
	limit->delay = (ngx_uint_t)args.delay;
	limit->nodelay = args.nodelay;
	limit->cost = (ngx_uint_t)args.cost;
	limit->cost_cv = args.cost_cv;
	if (args.quota.data)
		return limit_init_quota(cf, limit, &args);
	return limit_init_rate(cf, limit, &args);
}
