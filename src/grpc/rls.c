/*
 * rls.c -- envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit:
 * the protobuf-c RateLimitRequest becomes a sluice_rls_request_t, the RLS
 * engine (src/policy/envoy/rls.h) decides, and its sluice_rls_response_t
 * becomes the RateLimitResponse: overall_code, one status per descriptor in
 * order, the response headers the engine gives, and its dynamic_metadata
 * (envoy.response_dynamic_metadata) as a google.protobuf.Struct.
 */
#include "grpc/internal.h"

#include "policy/envoy/config.h"
#include "policy/envoy/meta.h"
#include "policy/envoy/rls.h"
#include "proto/envoy/service/ratelimit/v3/rls.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The string fields of a RateLimitRequest: domain (1); descriptors (2),
 * each with entries (1) of key (1) and value (2). */
static const grpc_wire_msg_t wire_entry = {(1u << 1) | (1u << 2), {{0}}};
static const grpc_wire_msg_t wire_descriptor = {0, {{1, &wire_entry}}};
static const grpc_wire_msg_t wire_request = {1u << 1, {{2, &wire_descriptor}}};

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest pb_request_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse pb_response_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus
	pb_status_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit pb_limit_t;
typedef Envoy__Config__Core__V3__HeaderValue pb_header_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor
	pb_descriptor_t;

/* What a call holds while the engine decides: the request must stay. */
typedef struct rls_call_s {
	grpc_call_t *call;
	pb_request_t *pb;
	sluice_rls_descriptor_t *descs;
	sluice_rls_entry_t *entries;
	sluice_rls_request_t req;
} rls_call_t;

static void rls_free(rls_call_t *st)
{
	if (st->pb)
		envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(
			st->pb, NULL);
	free(st->descs);
	free(st->entries);
	free(st);
}

/* --------------------------------------------------------------- answer */

/* The parts of a RateLimitResponse, allocated together. */
typedef struct answer_s {
	pb_response_t r;
	pb_status_t *st, **stp;
	pb_limit_t *lim;
	Google__Protobuf__Duration *dur;
	pb_header_t *hv, **hvp;
} answer_t;

/* ------------------------------------------------------ dynamic_metadata */

/* The engine's tree as a google.protobuf.Struct, every part malloc'd on
 * its own (strings too), so that free_unpacked(NULL) frees it all, a
 * part left NULL by a failed allocation included. */
static Google__Protobuf__Struct *pb_struct(const sluice_meta_t *m);

static Google__Protobuf__ListValue *pb_list(const sluice_meta_t *m);

static Google__Protobuf__Value *pb_value(const sluice_meta_t *m)
{
	Google__Protobuf__Value *v = malloc(sizeof(*v));

	if (!v)
		return NULL;
	google__protobuf__value__init(v);
	switch (m->kind) {
	case SLUICE_META_NULL:
		v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE;
		v->null_value = GOOGLE__PROTOBUF__NULL_VALUE__NULL_VALUE;
		return v;
	case SLUICE_META_NUMBER:
		v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
		v->number_value = m->number;
		return v;
	case SLUICE_META_BOOL:
		v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
		v->bool_value = m->boolean != 0;
		return v;
	case SLUICE_META_STRING:
		v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
		if (!(v->string_value = strdup(m->string)))
			break;
		return v;
	case SLUICE_META_STRUCT:
		v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
		if (!(v->struct_value = pb_struct(m)))
			break;
		return v;
	case SLUICE_META_LIST:
		v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE;
		if (!(v->list_value = pb_list(m)))
			break;
		return v;
	}
	free(v); /* (what it pointed to is freed or was never made) */
	return NULL;
}

static Google__Protobuf__ListValue *pb_list(const sluice_meta_t *m)
{
	Google__Protobuf__ListValue *l = malloc(sizeof(*l));
	size_t i;

	if (!l)
		return NULL;
	google__protobuf__list_value__init(l);
	if (m->n && !(l->values = calloc(m->n, sizeof(*l->values))))
		goto fail;
	for (i = 0; i < m->n; i++)
		if (!(l->values[l->n_values++] = pb_value(&m->items[i])))
			goto fail;
	return l;
fail:
	google__protobuf__list_value__free_unpacked(l, NULL);
	return NULL;
}

static Google__Protobuf__Struct *pb_struct(const sluice_meta_t *m)
{
	Google__Protobuf__Struct *s = malloc(sizeof(*s));
	Google__Protobuf__Struct__FieldsEntry *e;
	size_t i;

	if (!s)
		return NULL;
	google__protobuf__struct__init(s);
	if (m->n && !(s->fields = calloc(m->n, sizeof(*s->fields))))
		goto fail;
	for (i = 0; i < m->n; i++) {
		if (!(e = malloc(sizeof(*e))))
			goto fail;
		google__protobuf__struct__fields_entry__init(e);
		s->fields[s->n_fields++] = e;
		e->key = NULL; /* (init points it at a shared "") */
		if (!(e->key = strdup(m->keys[i])) ||
		    !(e->value = pb_value(&m->items[i])))
			goto fail;
	}
	return s;
fail:
	google__protobuf__struct__free_unpacked(s, NULL);
	return NULL;
}

/* ---------------------------------------------------------------------- */

static void answer_free(answer_t *a)
{
	if (a->r.dynamic_metadata)
		google__protobuf__struct__free_unpacked(a->r.dynamic_metadata,
							NULL);
	free(a->st);
	free(a->stp);
	free(a->lim);
	free(a->dur);
	free(a->hv);
	free(a->hvp);
}

static int answer_build(answer_t *a, const sluice_rls_response_t *resp)
{
	size_t n = resp->nstatuses, h = resp->nheaders, i;

	memset(a, 0, sizeof(*a));
	envoy__service__ratelimit__v3__rate_limit_response__init(&a->r);
	a->r.overall_code =
		(Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)
			resp->overall_code;
	a->st = calloc(n + 1, sizeof(*a->st));
	a->stp = calloc(n + 1, sizeof(*a->stp));
	a->lim = calloc(n + 1, sizeof(*a->lim));
	a->dur = calloc(n + 1, sizeof(*a->dur));
	a->hv = calloc(h + 1, sizeof(*a->hv));
	a->hvp = calloc(h + 1, sizeof(*a->hvp));
	if (!a->st || !a->stp || !a->lim || !a->dur || !a->hv || !a->hvp)
		return -1;
	for (i = 0; i < n; i++) {
		const sluice_rls_status_t *s = &resp->statuses[i];
		pb_status_t *p = &a->st[i];

		envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(
			p);
		p->code =
			(Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)
				s->code;
		p->limit_remaining = s->limit_remaining;
		if (s->has_limit) {
			envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(
				&a->lim[i]);
			/* protobuf-c packs "" for a NULL-free string. */
			a->lim[i].name =
				s->limit_name ? s->limit_name : (char *)"";
			a->lim[i].requests_per_unit = s->requests_per_unit;
			a->lim[i].unit =
				(Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)
					s->unit;
			p->current_limit = &a->lim[i];
		}
		if (s->duration_until_reset_ms) {
			google__protobuf__duration__init(&a->dur[i]);
			a->dur[i].seconds =
				(int64_t)(s->duration_until_reset_ms / 1000);
			a->dur[i].nanos =
				(int32_t)(s->duration_until_reset_ms % 1000) *
				1000000;
			p->duration_until_reset = &a->dur[i];
		}
		a->stp[i] = p;
	}
	a->r.n_statuses = n;
	a->r.statuses = a->stp;
	for (i = 0; i < h; i++) {
		envoy__config__core__v3__header_value__init(&a->hv[i]);
		a->hv[i].key = resp->headers[i].key ? resp->headers[i].key
						    : (char *)"";
		a->hv[i].value = resp->headers[i].value ? resp->headers[i].value
							: (char *)"";
		a->hvp[i] = &a->hv[i];
	}
	a->r.n_response_headers_to_add = h;
	a->r.response_headers_to_add = a->hvp;
	if (resp->dynamic_metadata &&
	    !(a->r.dynamic_metadata = pb_struct(resp->dynamic_metadata)))
		return -1;
	return 0;
}

static void on_decided(void *arg, sluice_rls_response_t *resp)
{
	rls_call_t *st = arg;
	answer_t a;

	if (resp->status < 0) {
		grpc_call_fail(st->call, GRPC_UNAVAILABLE, "%s",
			       resp->error ? resp->error
					   : "the store cannot be used");
	} else if (answer_build(&a, resp) < 0) {
		answer_free(&a);
		grpc_call_fail(st->call, GRPC_RESOURCE_EXHAUSTED,
			       "out of memory");
	} else {
		grpc_call_reply(st->call, &a.r.base);
		answer_free(&a);
	}
	sluice_rls_response_free(resp);
	rls_free(st);
}

/* -------------------------------------------------------------- request */

static size_t count_entries(const rls_call_t *st)
{
	size_t i, n = 0;

	for (i = 0; i < st->req.ndescriptors; i++)
		n += st->descs[i].nentries;
	return n;
}

/* 1 when the engine refuses the request for its counts at once (it is
 * never held, so the budget need not judge it first: the client hears
 * what is wrong with it). */
static int too_many(const rls_call_t *st)
{
	size_t i;

	if (st->req.ndescriptors > SLUICE_ENVOY_MAX_DESCRIPTORS)
		return 1;
	for (i = 0; i < st->req.ndescriptors; i++)
		if (st->descs[i].nentries > SLUICE_ENVOY_MAX_ENTRIES)
			return 1;
	return 0;
}

/* Points the engine's request at the unpacked message. */
static int convert(rls_call_t *st, char *err, size_t errlen)
{
	const pb_request_t *pb = st->pb;
	size_t i, j, nent = 0, e = 0;

	/* The count is the engine's to judge (one cap for both front ends,
	 * SLUICE_ENVOY_MAX_DESCRIPTORS); what protobuf-c unpacked is
	 * already bounded by the message size cap. */
	for (i = 0; i < pb->n_descriptors; i++)
		nent += pb->descriptors[i]->n_entries;
	st->descs = calloc(pb->n_descriptors + 1, sizeof(*st->descs));
	st->entries = calloc(nent + 1, sizeof(*st->entries));
	if (!st->descs || !st->entries) {
		snprintf(err, errlen, "out of memory");
		return GRPC_RESOURCE_EXHAUSTED;
	}
	for (i = 0; i < pb->n_descriptors; i++) {
		const pb_descriptor_t *d = pb->descriptors[i];
		sluice_rls_descriptor_t *o = &st->descs[i];

		o->entries = &st->entries[e];
		o->nentries = d->n_entries;
		for (j = 0; j < d->n_entries; j++, e++) {
			st->entries[e].key = d->entries[j]->key;
			st->entries[e].value = d->entries[j]->value;
		}
		if (d->limit) {
			o->has_limit = 1;
			o->limit_requests_per_unit =
				d->limit->requests_per_unit;
			o->limit_unit = (sluice_rls_unit_t)d->limit->unit;
		}
		if (d->hits_addend) {
			o->has_hits_addend = 1;
			o->hits_addend = d->hits_addend->value;
		}
	}
	st->req.domain = pb->domain;
	st->req.descriptors = st->descs;
	st->req.ndescriptors = pb->n_descriptors;
	st->req.hits_addend = pb->hits_addend;
	return 0;
}

/* protobuf-c's allocations counted (its default allocator's malloc and
 * free, so free_unpacked(NULL) frees them). */
static void *count_alloc(void *data, size_t size)
{
	*(size_t *)data += size;
	return malloc(size);
}

static void count_free(void *data, void *p)
{
	free(p);
}

void grpc_rls_should_rate_limit(grpc_call_t *call, const uint8_t *msg,
				size_t len)
{
	rls_call_t *st = calloc(1, sizeof(*st));
	size_t unpacked = 0;
	ProtobufCAllocator counting = {count_alloc, count_free, &unpacked};
	char err[256];
	int r;

	if (!st) {
		grpc_call_fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	st->call = call;
	st->pb = envoy__service__ratelimit__v3__rate_limit_request__unpack(
		&counting, len, msg);
	if (!st->pb) {
		rls_free(st);
		grpc_call_fail(call, GRPC_INVALID_ARGUMENT,
			       "the RateLimitRequest message does not parse");
		return;
	}
	if (grpc_wire_has_nul(msg, len, &wire_request)) {
		rls_free(st);
		grpc_call_fail(call, GRPC_INVALID_ARGUMENT,
			       "a domain, key or value holds a NUL byte");
		return;
	}
	if ((r = convert(st, err, sizeof(err))) != 0) {
		rls_free(st);
		grpc_call_fail(call, r, "%s", err);
		return;
	}
	/* What the call holds while the store answers (a store that is
	 * down holds it for its whole timeout) counts in the budget the
	 * request bytes did: past it, RESOURCE_EXHAUSTED now. */
	if (grpc_call_charge(
		    call,
		    sizeof(*st) + unpacked +
			    (st->req.ndescriptors + 1) * sizeof(*st->descs) +
			    (count_entries(st) + 1) * sizeof(*st->entries),
		    too_many(st)) < 0) {
		rls_free(st);
		grpc_call_fail(call, GRPC_RESOURCE_EXHAUSTED,
			       "too many request bytes in flight");
		return;
	}
	grpc_call_hold(call);
	if (sluice_rls_decide(grpc_call_svc(call), &st->req, on_decided, st,
			      err, sizeof(err)) < 0) {
		rls_free(st);
		grpc_call_fail(call, GRPC_INVALID_ARGUMENT, "%s", err);
	}
	/* else on_decided answers, maybe already did */
}
