/*
 * napi_host.c -- runs a sluice addon binary without node: a host that
 * provides the part of Node-API the memory store's calls use, registers
 * the addon as node would (napi_register_module_v1) and decides through
 * it.  test_node_package builds it with musl-gcc to run the musl prebuild
 * on musl's libc (Debian packages no musl node) and with cc to run the
 * glibc one: both must print the same decisions.  Every other name the
 * addon binds is a stub the test generates, which aborts if called.
 *
 *   napi_host ADDON
 *
 * policyNew("api", [100], ["2/s"], [null]), memoryNew(1000, out), then
 * memoryTake(store, key, policy, 1, now_us) at fixed instants; one line a
 * take: allowed and the decision array (limit, remaining, retry ms, reset
 * ms, which limit).  A value of the wrong kind where the addon wants
 * another is refused as node refuses it, so the addon's own checks run.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node_api.h"

enum kind { K_UNDEF, K_NULL, K_BOOL, K_NUM, K_STR, K_ARR, K_EXT, K_F64, K_FN };

#define MAX_PROPS 64

struct napi_value__ {
	enum kind kind;
	double num;		      /* K_NUM; K_BOOL: 0 or 1 */
	char *str;		      /* K_STR */
	size_t len;		      /* K_STR: bytes; K_F64: elements */
	napi_value *elems;	      /* K_ARR */
	uint32_t n;		      /* K_ARR */
	void *ext;		      /* K_EXT */
	double *f64;		      /* K_F64 */
	napi_callback fn;	      /* K_FN */
	const char *names[MAX_PROPS]; /* named properties (exports) */
	napi_value props[MAX_PROPS];
	uint32_t nprops;
};

struct napi_callback_info__ {
	size_t argc;
	napi_value *argv;
};

static int thrown;

static napi_value val(enum kind k)
{
	napi_value v = calloc(1, sizeof(*v));

	if (!v) {
		perror("calloc");
		exit(3);
	}
	v->kind = k;
	return v;
}

static napi_value num(double d)
{
	napi_value v = val(K_NUM);

	v->num = d;
	return v;
}

static napi_value str(const char *s, size_t len)
{
	napi_value v = val(K_STR);

	if (len == NAPI_AUTO_LENGTH)
		len = strlen(s);
	v->str = malloc(len + 1);
	if (!v->str)
		exit(3);
	memcpy(v->str, s, len);
	v->str[len] = '\0';
	v->len = len;
	return v;
}

static napi_value arr(uint32_t n)
{
	napi_value v = val(K_ARR);

	v->elems = calloc(n ? n : 1, sizeof(*v->elems));
	if (!v->elems)
		exit(3);
	v->n = n;
	return v;
}

napi_status napi_create_function(napi_env env, const char *name, size_t len,
				 napi_callback cb, void *data,
				 napi_value *result)
{
	*result = val(K_FN);
	(*result)->fn = cb;
	return napi_ok;
}

napi_status napi_set_named_property(napi_env env, napi_value object,
				    const char *name, napi_value value)
{
	if (object->nprops == MAX_PROPS)
		return napi_generic_failure;
	object->names[object->nprops] = strdup(name);
	object->props[object->nprops++] = value;
	return napi_ok;
}

napi_status napi_create_string_utf8(napi_env env, const char *s, size_t len,
				    napi_value *result)
{
	*result = str(s, len);
	return napi_ok;
}

napi_status napi_create_string_latin1(napi_env env, const char *s, size_t len,
				      napi_value *result)
{
	*result = str(s, len);
	return napi_ok;
}

napi_status napi_create_int32(napi_env env, int32_t i, napi_value *result)
{
	*result = num(i);
	return napi_ok;
}

napi_status napi_create_double(napi_env env, double d, napi_value *result)
{
	*result = num(d);
	return napi_ok;
}

napi_status napi_get_boolean(napi_env env, bool b, napi_value *result)
{
	*result = val(K_BOOL);
	(*result)->num = b;
	return napi_ok;
}

napi_status napi_get_null(napi_env env, napi_value *result)
{
	*result = val(K_NULL);
	return napi_ok;
}

napi_status napi_get_cb_info(napi_env env, napi_callback_info info,
			     size_t *argc, napi_value *argv,
			     napi_value *this_arg, void **data)
{
	size_t i;

	for (i = 0; argc && argv && i < *argc; i++)
		argv[i] = i < info->argc ? info->argv[i] : val(K_UNDEF);
	if (argc)
		*argc = info->argc;
	if (this_arg)
		*this_arg = val(K_UNDEF);
	if (data)
		*data = NULL;
	return napi_ok;
}

napi_status napi_get_array_length(napi_env env, napi_value v, uint32_t *result)
{
	if (v->kind != K_ARR)
		return napi_array_expected;
	*result = v->n;
	return napi_ok;
}

napi_status napi_create_array_with_length(napi_env env, size_t n,
					  napi_value *result)
{
	*result = arr((uint32_t)n);
	return napi_ok;
}

napi_status napi_get_element(napi_env env, napi_value v, uint32_t i,
			     napi_value *result)
{
	if (v->kind != K_ARR)
		return napi_object_expected;
	*result = i < v->n ? v->elems[i] : val(K_UNDEF);
	return napi_ok;
}

napi_status napi_set_element(napi_env env, napi_value v, uint32_t i,
			     napi_value value)
{
	if (v->kind != K_ARR || i >= v->n)
		return napi_generic_failure;
	v->elems[i] = value;
	return napi_ok;
}

napi_status napi_get_value_string_utf8(napi_env env, napi_value v, char *buf,
				       size_t size, size_t *result)
{
	size_t n;

	if (v->kind != K_STR)
		return napi_string_expected;
	if (!buf) {
		*result = v->len;
		return napi_ok;
	}
	n = size == 0 ? 0 : v->len < size - 1 ? v->len : size - 1;
	memcpy(buf, v->str, n);
	if (size)
		buf[n] = '\0';
	if (result)
		*result = n;
	return napi_ok;
}

napi_status napi_get_value_double(napi_env env, napi_value v, double *result)
{
	if (v->kind != K_NUM)
		return napi_number_expected;
	*result = v->num;
	return napi_ok;
}

napi_status napi_get_value_int64(napi_env env, napi_value v, int64_t *result)
{
	if (v->kind != K_NUM)
		return napi_number_expected;
	*result = (int64_t)v->num;
	return napi_ok;
}

napi_status napi_typeof(napi_env env, napi_value v, napi_valuetype *result)
{
	static const napi_valuetype types[] = {
		[K_UNDEF] = napi_undefined, [K_NULL] = napi_null,
		[K_BOOL] = napi_boolean,    [K_NUM] = napi_number,
		[K_STR] = napi_string,	    [K_ARR] = napi_object,
		[K_EXT] = napi_external,    [K_F64] = napi_object,
		[K_FN] = napi_function,
	};

	*result = types[v->kind];
	return napi_ok;
}

napi_status napi_create_external(napi_env env, void *data,
				 napi_finalize finalize_cb, void *hint,
				 napi_value *result)
{
	*result = val(K_EXT);
	(*result)->ext = data;
	return napi_ok;
}

napi_status napi_get_value_external(napi_env env, napi_value v, void **result)
{
	if (v->kind != K_EXT)
		return napi_invalid_arg;
	*result = v->ext;
	return napi_ok;
}

napi_status napi_get_buffer_info(napi_env env, napi_value v, void **data,
				 size_t *length)
{
	/* No value of this host is a Buffer. */
	return napi_invalid_arg;
}

napi_status napi_is_typedarray(napi_env env, napi_value v, bool *result)
{
	*result = v->kind == K_F64;
	return napi_ok;
}

napi_status napi_get_typedarray_info(napi_env env, napi_value v,
				     napi_typedarray_type *type, size_t *length,
				     void **data, napi_value *arraybuffer,
				     size_t *byte_offset)
{
	if (v->kind != K_F64)
		return napi_invalid_arg;
	if (type)
		*type = napi_float64_array;
	if (length)
		*length = v->len;
	if (data)
		*data = v->f64;
	if (arraybuffer)
		*arraybuffer = val(K_UNDEF);
	if (byte_offset)
		*byte_offset = 0;
	return napi_ok;
}

napi_status napi_create_reference(napi_env env, napi_value v, uint32_t count,
				  napi_ref *result)
{
	/* Nothing here is ever collected: any non-NULL reference will do. */
	*result = (napi_ref)v;
	return napi_ok;
}

static napi_status throw(const char *what, const char *code, const char *msg)
{
	printf("%s %s: %s\n", what, code ? code : "-", msg);
	thrown = 1;
	return napi_ok;
}

napi_status napi_throw_error(napi_env env, const char *code, const char *msg)
{
	return throw("Error", code, msg);
}

napi_status napi_throw_type_error(napi_env env, const char *code,
				  const char *msg)
{
	return throw("TypeError", code, msg);
}

napi_status napi_throw_range_error(napi_env env, const char *code,
				   const char *msg)
{
	return throw("RangeError", code, msg);
}

napi_status napi_is_exception_pending(napi_env env, bool *result)
{
	*result = thrown;
	return napi_ok;
}

napi_status napi_get_last_error_info(napi_env env,
				     const napi_extended_error_info **result)
{
	static const napi_extended_error_info info = {
		.error_message = "a Node-API call of the host failed",
		.error_code = napi_generic_failure,
	};

	*result = &info;
	return napi_ok;
}

/* exports.name, which must be a function. */
static napi_value fn(napi_value exports, const char *name)
{
	uint32_t i;

	for (i = 0; i < exports->nprops; i++)
		if (strcmp(exports->names[i], name) == 0 &&
		    exports->props[i]->kind == K_FN)
			return exports->props[i];
	printf("the addon exports no function %s\n", name);
	exit(2);
}

/* f(argv[0..argc-1]); an exception ends the run. */
static napi_value call(napi_value f, size_t argc, napi_value *argv)
{
	struct napi_callback_info__ info = {argc, argv};
	napi_value r = f->fn(NULL, &info);

	if (thrown || !r) {
		printf("the call threw\n");
		exit(2);
	}
	return r;
}

int main(int argc, char **argv)
{
	napi_value (*reg)(napi_env, napi_value);
	napi_value exports = val(K_UNDEF), out = val(K_F64), pol, store, take;
	napi_value a[5];
	void *h;
	int i;

	if (argc != 2) {
		fprintf(stderr, "usage: napi_host ADDON\n");
		return 2;
	}
	h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		printf("%s\n", dlerror());
		return 1;
	}
	*(void **)&reg = dlsym(h, "napi_register_module_v1");
	if (!reg) {
		printf("no napi_register_module_v1\n");
		return 1;
	}
	if (reg(NULL, exports) != exports || thrown)
		return 2;

	a[0] = str("api", NAPI_AUTO_LENGTH);
	a[1] = arr(1);
	a[1]->elems[0] = num(100);
	a[2] = arr(1);
	a[2]->elems[0] = str("2/s", NAPI_AUTO_LENGTH);
	a[3] = arr(1);
	a[3]->elems[0] = val(K_NULL);
	pol = call(fn(exports, "policyNew"), 4, a);
	if (pol->kind != K_ARR || pol->n != 2 || pol->elems[0]->kind != K_EXT)
		return 2;
	printf("window %g\n", pol->elems[1]->elems[0]->num);

	out->len = 8;
	out->f64 = calloc(out->len, sizeof(double));
	a[0] = num(1000);
	a[1] = out;
	store = call(fn(exports, "memoryNew"), 2, a);

	/* 102 takes at one instant, then one 499 ms and one 500 ms later:
	 * the bucket of 100 refills one token in 500 ms. */
	take = fn(exports, "memoryTake");
	for (i = 0; i < 104; i++) {
		napi_value r;

		a[0] = store;
		a[1] = str("user-1", NAPI_AUTO_LENGTH);
		a[2] = pol->elems[0];
		a[3] = num(1);
		a[4] = num(1.7e15 + (i < 102 ? 0 : i == 102 ? 499000 : 500000));
		r = call(take, 5, a);
		printf("%d %g %g %g %g %g\n", r->kind == K_BOOL && r->num,
		       out->f64[0], out->f64[1], out->f64[2], out->f64[3],
		       out->f64[4]);
	}
	/* A key of the wrong kind is the addon's to refuse. */
	a[1] = num(7);
	take->fn(NULL, &(struct napi_callback_info__){5, a});
	return thrown ? 0 : 2;
}
