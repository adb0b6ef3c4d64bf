/*
 * xds_wire.c -- the xDS messages sluice's client exchanges: the
 * DiscoveryRequest it sends (node, type_url, version_info, nonce, the
 * NACK's error_detail), and the DiscoveryResponse it reads, whose
 * RateLimitConfig resources become the YAML text the envoyproxy/ratelimit
 * file loader reads (what envoyproxy/ratelimit does too: its
 * ConfigXdsProtoToYaml), so that a resource is checked exactly as a file.
 *
 * Bounded before protobuf-c sees them: a message's size (the caller's
 * SLUICE_XDS_MAX_MSG), the number of resources, and the nesting of
 * descriptors (protobuf-c unpacks nested messages recursively; a deep
 * tree in a few MiB would exhaust the stack), and of each descriptor's
 * metadata (a google.protobuf.Struct, as deep as a control plane makes
 * it), checked by a walk over the wire format that itself recurses at
 * most MAX_LEVELS + 3 * MAX_META_LEVELS + 2.
 */
#include "policy/envoy/config.h"
#include "sluice.h"
#include "xds/xds.h"

#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ the depth check */

/* Levels of descriptors a resource may nest: what a file can hold too
 * (the YAML reader's 32 levels of nested lists and mappings hold the
 * domain's mapping and 15 levels of a list and a mapping each), one
 * below SLUICE_ENVOY_MAX_DEPTH. */
#define MAX_LEVELS (SLUICE_ENVOY_MAX_DEPTH - 1)
/* Structs and lists nested in one metadata: what a YAML file may nest. */
#define MAX_META_LEVELS SLUICE_YAML_MAX_DEPTH

/* The messages the walk enters, and which field of each holds which. */
enum { M_CONFIG, M_DESC, M_STRUCT, M_ENTRY, M_VALUE, M_LIST, M_NONE };

static int inner(int kind, uint64_t field)
{
	static const struct {
		int kind;
		uint64_t field;
		int inner;
	} map[] = {{M_CONFIG, 3, M_DESC}, {M_DESC, 4, M_DESC},
		   {M_DESC, 8, M_STRUCT}, {M_STRUCT, 1, M_ENTRY},
		   {M_ENTRY, 2, M_VALUE}, {M_VALUE, 5, M_STRUCT},
		   {M_VALUE, 6, M_LIST},  {M_LIST, 1, M_VALUE}};
	size_t i;

	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].kind == kind && map[i].field == field)
			return map[i].inner;
	return M_NONE;
}

static int varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
	uint64_t v = 0;
	unsigned shift;

	for (shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;

		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -1;
}

/*
 * Walks one message (of `kind`) and the messages it holds: `level`
 * descriptors and `meta` structs and lists deep.  Returns 0, -1
 * (malformed), -2 (descriptors too deep) or -3 (metadata too deep).
 */
static int walk(const uint8_t *p, const uint8_t *end, int kind, int level,
		int meta)
{
	uint64_t key, len;
	int rc, in;

	if (level > MAX_LEVELS)
		return -2;
	if (meta > MAX_META_LEVELS)
		return -3;
	while (p < end) {
		if (varint(&p, end, &key) < 0)
			return -1;
		switch (key & 7) {
		case 0:
			if (varint(&p, end, &len) < 0)
				return -1;
			break;
		case 1:
			if (end - p < 8)
				return -1;
			p += 8;
			break;
		case 5:
			if (end - p < 4)
				return -1;
			p += 4;
			break;
		case 2:
			if (varint(&p, end, &len) < 0 ||
			    len > (uint64_t)(end - p))
				return -1;
			in = inner(kind, key >> 3);
			if (in != M_NONE &&
			    (rc = walk(p, p + len, in, level + (in == M_DESC),
				       meta + (in == M_STRUCT ||
					       in == M_LIST))) < 0)
				return rc;
			p += len;
			break;
		default: /* groups: not in these messages */
			return -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ the YAML */

/* A YAML double-quoted scalar (JSON's escapes are YAML's): whatever the
 * string holds, it is one scalar, never YAML of its own. */
static void quoted(sluice_buf_t *b, const char *s)
{
	sluice_buf_puts(b, "\"");
	sluice_buf_json_str(b, s ? s : "", s ? strlen(s) : 0);
	sluice_buf_puts(b, "\"");
}

static void indent(sluice_buf_t *b, int n)
{
	while (n-- > 0)
		sluice_buf_puts(b, " ");
}

static const char *unit_name(int unit)
{
	static const char *const names[] = {"UNKNOWN", "SECOND", "MINUTE",
					    "HOUR",    "DAY",	 "MONTH",
					    "YEAR",    "WEEK"};

	return unit >= 0 && unit < 8 ? names[unit] : NULL;
}

/* A google.protobuf.Struct as JSON, which YAML reads as a flow mapping:
 * what envoyproxy/ratelimit's ConfigXdsProtoToYaml passes through as the
 * descriptor's metadata. */
static void json_struct(sluice_buf_t *b, const Google__Protobuf__Struct *s);

static void json_value(sluice_buf_t *b, const Google__Protobuf__Value *v)
{
	size_t i;

	switch (v ? v->kind_case : GOOGLE__PROTOBUF__VALUE__KIND__NOT_SET) {
	case GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE:
		/* (NaN and the infinities have no JSON: null) */
		if (v->number_value != v->number_value ||
		    v->number_value - v->number_value != 0)
			sluice_buf_puts(b, "null");
		else
			sluice_buf_printf(b, "%.17g", v->number_value);
		return;
	case GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE:
		quoted(b, v->string_value);
		return;
	case GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE:
		sluice_buf_puts(b, v->bool_value ? "true" : "false");
		return;
	case GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE:
		json_struct(b, v->struct_value);
		return;
	case GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE:
		sluice_buf_puts(b, "[");
		for (i = 0; v->list_value && i < v->list_value->n_values; i++) {
			if (i)
				sluice_buf_puts(b, ", ");
			json_value(b, v->list_value->values[i]);
		}
		sluice_buf_puts(b, "]");
		return;
	default:
		sluice_buf_puts(b, "null");
		return;
	}
}

static void json_struct(sluice_buf_t *b, const Google__Protobuf__Struct *s)
{
	size_t i;

	sluice_buf_puts(b, "{");
	for (i = 0; s && i < s->n_fields; i++) {
		if (i)
			sluice_buf_puts(b, ", ");
		quoted(b, s->fields[i]->key);
		sluice_buf_puts(b, ": ");
		json_value(b, s->fields[i]->value);
	}
	sluice_buf_puts(b, "}");
}

/* A descriptor's rate_limit: block, its fields at column in. */
static void
render_rate_limit(sluice_buf_t *b,
		  const Ratelimit__Config__Ratelimit__V3__RateLimitPolicy *r,
		  int in)
{
	const char *u = unit_name((int)r->unit);
	size_t j;

	/* UNKNOWN (0) is no unit, as envoyproxy/ratelimit reads it: right
	 * for unlimited, an error else. */
	if (r->unit != 0) {
		indent(b, in);
		if (u)
			sluice_buf_printf(b, "unit: %s\n", u);
		else
			sluice_buf_printf(b, "unit: \"%d\"\n", (int)r->unit);
	}
	if (!r->unlimited || r->requests_per_unit) {
		indent(b, in);
		sluice_buf_printf(b, "requests_per_unit: %u\n",
				  (unsigned)r->requests_per_unit);
	}
	if (r->unlimited) {
		indent(b, in);
		sluice_buf_puts(b, "unlimited: true\n");
	}
	if (r->name && *r->name) {
		indent(b, in);
		sluice_buf_puts(b, "name: ");
		quoted(b, r->name);
		sluice_buf_puts(b, "\n");
	}
	if (r->n_replaces) {
		indent(b, in);
		sluice_buf_puts(b, "replaces:\n");
	}
	for (j = 0; j < r->n_replaces; j++) {
		indent(b, in);
		sluice_buf_puts(b, "- name: ");
		quoted(b, r->replaces[j]->name);
		sluice_buf_puts(b, "\n");
	}
}

/* A flag of a descriptor, written only when set. */
static void render_flag(sluice_buf_t *b, int in, const char *name, int on)
{
	if (!on)
		return;
	indent(b, in);
	sluice_buf_printf(b, "%s: true\n", name);
}

static void render_descriptors(
	sluice_buf_t *b,
	Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor *const *v,
	size_t n, int in)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor *d =
			v[i];

		indent(b, in);
		sluice_buf_puts(b, "- key: ");
		quoted(b, d->key);
		sluice_buf_puts(b, "\n");
		if (d->value && *d->value) {
			indent(b, in + 2);
			sluice_buf_puts(b, "value: ");
			quoted(b, d->value);
			sluice_buf_puts(b, "\n");
		}
		render_flag(b, in + 2, "shadow_mode", d->shadow_mode);
		render_flag(b, in + 2, "detailed_metric", d->detailed_metric);
		render_flag(b, in + 2, "quota_mode", d->quota_mode);
		if (d->metadata) {
			indent(b, in + 2);
			sluice_buf_puts(b, "metadata: ");
			json_struct(b, d->metadata);
			sluice_buf_puts(b, "\n");
		}
		if (d->rate_limit) {
			indent(b, in + 2);
			sluice_buf_puts(b, "rate_limit:\n");
			render_rate_limit(b, d->rate_limit, in + 4);
		}
		if (d->n_descriptors) {
			indent(b, in + 2);
			sluice_buf_puts(b, "descriptors:\n");
			render_descriptors(b, d->descriptors, d->n_descriptors,
					   in + 2);
		}
	}
}

/* One RateLimitConfig as an envoyproxy/ratelimit YAML file. */
static void render(sluice_buf_t *b,
		   const Ratelimit__Config__Ratelimit__V3__RateLimitConfig *c)
{
	sluice_buf_puts(b, "domain: ");
	quoted(b, c->domain);
	sluice_buf_puts(b, "\n");
	if (c->n_descriptors) {
		sluice_buf_puts(b, "descriptors:\n");
		render_descriptors(b, c->descriptors, c->n_descriptors, 0);
	}
}

/* ----------------------------------------------------------- responses */

void sluice_xds_response_free(sluice_xds_response_t *r)
{
	free(r->version);
	free(r->nonce);
	free(r->type_url);
	sluice_envoy_texts_free(r->texts, r->ntexts);
	memset(r, 0, sizeof(*r));
}

/* One resource into texts[i]; 0, or -1 with err. */
static int one_resource(const Google__Protobuf__Any *any, size_t i,
			sluice_envoy_text_t *t, char *err, size_t errlen)
{
	Ratelimit__Config__Ratelimit__V3__RateLimitConfig *c;
	sluice_buf_t b = {0};
	char name[300];
	int rc;

	if (!any->type_url || strcmp(any->type_url, SLUICE_XDS_TYPE_URL)) {
		snprintf(err, errlen,
			 "resource %zu has type %.100s; "
			 "expected " SLUICE_XDS_TYPE_URL,
			 i, any->type_url ? any->type_url : "");
		return -1;
	}
	/* (an empty value is a NULL pointer: no arithmetic on it) */
	rc = any->value.len
		     ? walk(any->value.data, any->value.data + any->value.len,
			    M_CONFIG, 0, 0)
		     : 0;
	if (rc == -3) {
		snprintf(err, errlen,
			 "resource %zu: metadata nested more than %d deep; "
			 "expected fewer levels",
			 i, MAX_META_LEVELS);
		return -1;
	}
	if (rc < 0) {
		snprintf(err, errlen,
			 rc == -2 ? "resource %zu: descriptors nested more "
				    "than %d deep; expected fewer levels"
				  : "resource %zu: not a RateLimitConfig "
				    "(malformed protobuf)",
			 i, MAX_LEVELS);
		return -1;
	}
	c = ratelimit__config__ratelimit__v3__rate_limit_config__unpack(
		NULL, any->value.len, any->value.data);
	if (!c) {
		snprintf(err, errlen,
			 "resource %zu: not a RateLimitConfig (malformed "
			 "protobuf)",
			 i);
		return -1;
	}
	/* Errors name the resource: "xds:NAME:LINE: ...". */
	if (c->name && *c->name)
		snprintf(name, sizeof(name), "xds:%.200s", c->name);
	else
		snprintf(name, sizeof(name), "xds:resource-%zu", i);
	render(&b, c);
	ratelimit__config__ratelimit__v3__rate_limit_config__free_unpacked(
		c, NULL);
	if (b.oom || !(t->name = strdup(name))) {
		sluice_buf_free(&b);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	t->text = b.data;
	t->len = b.len;
	return 0;
}

int sluice_xds_decode(const uint8_t *msg, size_t len, sluice_xds_response_t *r,
		      char *err, size_t errlen)
{
	Envoy__Service__Discovery__V3__DiscoveryResponse *m;
	size_t i;
	int rc = 0;

	memset(r, 0, sizeof(*r));
	m = envoy__service__discovery__v3__discovery_response__unpack(NULL, len,
								      msg);
	if (!m) {
		snprintf(err, errlen,
			 "not a DiscoveryResponse (malformed protobuf)");
		return -1;
	}
	r->version = strdup(m->version_info ? m->version_info : "");
	r->nonce = strdup(m->nonce ? m->nonce : "");
	r->type_url = strdup(m->type_url ? m->type_url : "");
	if (!r->version || !r->nonce || !r->type_url) {
		snprintf(err, errlen, "out of memory");
		rc = -1;
	} else if (strcmp(r->type_url, SLUICE_XDS_TYPE_URL) != 0) {
		snprintf(err, errlen,
			 "type_url %.100s; expected " SLUICE_XDS_TYPE_URL,
			 r->type_url);
		rc = -1;
	} else if (m->n_resources > SLUICE_ENVOY_MAX_FILES) {
		snprintf(err, errlen, "%zu resources; expected at most %d",
			 m->n_resources, SLUICE_ENVOY_MAX_FILES);
		rc = -1;
	} else if (!(r->texts = calloc(m->n_resources ? m->n_resources : 1,
				       sizeof(*r->texts)))) {
		snprintf(err, errlen, "out of memory");
		rc = -1;
	}
	for (i = 0; rc == 0 && i < m->n_resources; i++) {
		rc = one_resource(m->resources[i], i, &r->texts[i], err,
				  errlen);
		r->ntexts = i + 1;
	}
	envoy__service__discovery__v3__discovery_response__free_unpacked(m,
									 NULL);
	return rc;
}

/* ------------------------------------------------------------ requests */

size_t sluice_xds_call_headers(const sluice_envoy_xds_t *s, const char *names[],
			       const char *values[])
{
	static const char *const own[][2] = {
		{":method", "POST"},
		{":scheme", NULL}, /* http or https */
		{":path",
		 "/envoy.service.discovery.v3.AggregatedDiscoveryService"
		 "/StreamAggregatedResources"},
		{":authority", NULL}, /* the server as written */
		{"content-type", "application/grpc"},
		{"te", "trailers"},
		{"user-agent", "sluice-xds/" SLUICE_VERSION},
	};
	size_t n, i;

	_Static_assert(sizeof(own) / sizeof(own[0]) + SLUICE_XDS_MAX_HEADERS ==
			       SLUICE_XDS_CALL_HEADERS,
		       "room for the call's own headers and envoy.xds's");
	for (n = 0; n < sizeof(own) / sizeof(own[0]); n++) {
		names[n] = own[n][0];
		values[n] = own[n][1];
	}
	values[1] = s->tls ? "https" : "http";
	values[3] = s->server;
	/* Checked when parsed: lowercase, none of the above, at most
	 * SLUICE_XDS_MAX_HEADERS. */
	for (i = 0; i < s->nheaders && i < SLUICE_XDS_MAX_HEADERS; i++, n++) {
		names[n] = s->header_names[i];
		values[n] = s->header_values[i];
	}
	return n;
}

uint8_t *sluice_xds_request(const sluice_envoy_xds_t *s, const char *version,
			    const char *nonce, const char *error, size_t *len)
{
	Envoy__Service__Discovery__V3__DiscoveryRequest req =
		ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_REQUEST__INIT;
	Envoy__Config__Core__V3__Node node =
		ENVOY__CONFIG__CORE__V3__NODE__INIT;
	Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
	/* node_metadata: Node.metadata, string values (at most
	 * SLUICE_XDS_MAX_NODE_META, checked when parsed). */
	Google__Protobuf__Struct meta = GOOGLE__PROTOBUF__STRUCT__INIT;
	Google__Protobuf__Struct__FieldsEntry fe[SLUICE_XDS_MAX_NODE_META],
		*fp[SLUICE_XDS_MAX_NODE_META];
	Google__Protobuf__Value fv[SLUICE_XDS_MAX_NODE_META];
	size_t n, i;
	uint8_t *out;

	for (i = 0; i < s->nmeta && i < SLUICE_XDS_MAX_NODE_META; i++) {
		google__protobuf__struct__fields_entry__init(&fe[i]);
		google__protobuf__value__init(&fv[i]);
		fv[i].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
		fv[i].string_value = s->meta_values[i];
		fe[i].key = s->meta_keys[i];
		fe[i].value = &fv[i];
		fp[i] = &fe[i];
	}
	meta.n_fields = i;
	meta.fields = fp;

	node.id = s->node_id;
	node.cluster = s->cluster;
	node.metadata = &meta;
	node.user_agent_name = "sluice";
	node.user_agent_version_type_case =
		ENVOY__CONFIG__CORE__V3__NODE__USER_AGENT_VERSION_TYPE_USER_AGENT_VERSION;
	node.user_agent_version = SLUICE_VERSION;
	req.node = &node;
	req.type_url = SLUICE_XDS_TYPE_URL;
	req.version_info = (char *)(version ? version : "");
	req.response_nonce = (char *)(nonce ? nonce : "");
	if (error) {
		st.code =
			3; /* INVALID_ARGUMENT, as go-control-plane's clients */
		st.message = (char *)error;
		req.error_detail = &st;
	}
	n = envoy__service__discovery__v3__discovery_request__get_packed_size(
		&req);
	if (!(out = malloc(n + 5)))
		return NULL;
	out[0] = 0; /* not compressed */
	out[1] = (uint8_t)(n >> 24);
	out[2] = (uint8_t)(n >> 16);
	out[3] = (uint8_t)(n >> 8);
	out[4] = (uint8_t)n;
	envoy__service__discovery__v3__discovery_request__pack(&req, out + 5);
	*len = n + 5;
	return out;
}
