/*
 * ext_check.c: argument checks shared by every op family, the per-thread
 * error message, and the status names. Compiled into each _ext module.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#ifdef EXT_WITH_CUDA
#include "cuda/ext_cuda.h"
#endif

static _Thread_local char last_error[1024];

int ext_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

const char *ext_last_error(void) { return last_error; }

const char *ext_status_name(int status)
{
    switch (status) {
    case EXT_OK: return "success";
    case EXT_ERR_TYPE: return "an argument has the wrong dtype or kind";
    case EXT_ERR_VALUE: return "an argument has the wrong shape, layout or value";
    case EXT_ERR_DEVICE: return "an argument is on the wrong device";
    case EXT_ERR_NO_CUDA: return "this module was built without CUDA";
    case EXT_ERR_CUDA: return "the CUDA runtime reported an error";
    case EXT_ERR_NOMEM: return "out of memory";
    default: return "unknown status";
    }
}

#ifdef EXT_WITH_CUDA
int ext_cuda_fail(const char *fn, int err)
{
    return ext_fail(ext_cuda_error_is_oom(err) ? EXT_ERR_NOMEM : EXT_ERR_CUDA,
                    "%s: CUDA error: %s", fn, ext_cuda_error_string(err));
}
#endif

#ifndef EXT_WITH_CUDA
/* build.py says why this build has no CUDA and how to get it */
int ext_no_cuda(const char *fn, const char *instead)
{
    return ext_fail(EXT_ERR_NO_CUDA, "%s: _ext.%s was built without CUDA (%s); %s, or %s", fn,
                    EXT_MODULE, EXT_NO_CUDA_WHY, EXT_NO_CUDA_REMEDY,
                    instead ? instead : "pass CPU tensors");
}
#endif

/* the test hook's count of host allocations left to fail */
static atomic_int failing_host_allocations;

void ext_test_fail_allocations(int device, int host)
{
    atomic_store(&failing_host_allocations, host > 0 ? host : 0);
#ifdef EXT_WITH_CUDA
    ext_test_fail_device_allocations(device > 0 ? device : 0);
#else
    (void)device;
#endif
}

static int host_allocation_fails(void)
{
    int left = atomic_load(&failing_host_allocations);
    while (left > 0 && !atomic_compare_exchange_weak(&failing_host_allocations, &left, left - 1))
        ;
    return left > 0;
}

void *ext_malloc(size_t bytes)
{
    return host_allocation_fails() ? NULL : malloc(bytes ? bytes : 1);
}

void *ext_calloc(size_t count, size_t size)
{
    return host_allocation_fails() ? NULL : calloc(count ? count : 1, size ? size : 1);
}

void *ext_realloc(void *ptr, size_t bytes)
{
    return host_allocation_fails() ? NULL : realloc(ptr, bytes ? bytes : 1);
}

int ext_built_with_cuda(void)
{
#ifdef EXT_WITH_CUDA
    return 1;
#else
    return 0;
#endif
}

const char *ext_dtype_name(int dtype)
{
    switch (dtype) {
    case EXT_FLOAT32: return "float32";
    case EXT_FLOAT64: return "float64";
    case EXT_INT32: return "int32";
    case EXT_INT64: return "int64";
    case EXT_UINT8: return "uint8";
    case EXT_BOOL: return "bool";
    case EXT_FLOAT16: return "float16";
    case EXT_BFLOAT16: return "bfloat16";
    case EXT_INT16: return "int16";
    case EXT_INT8: return "int8";
    default: return "an unsupported dtype";
    }
}

size_t ext_dtype_size(int dtype)
{
    switch (dtype) {
    case EXT_FLOAT64: case EXT_INT64: return 8;
    case EXT_FLOAT32: case EXT_INT32: return 4;
    case EXT_FLOAT16: case EXT_BFLOAT16: case EXT_INT16: return 2;
    case EXT_UINT8: case EXT_BOOL: case EXT_INT8: return 1;
    default: return 0;
    }
}

/* The product of t's sizes in *n; 1 if it overflows int64 (sizes >= 0). */
static int numel_overflows(const ext_tensor *t, int64_t *n)
{
    *n = 1;
    for (int d = 0; d < t->ndim; d++)
        if (t->sizes[d] == 0) {
            *n = 0;
            return 0;
        }
    for (int d = 0; d < t->ndim; d++)
        if (__builtin_mul_overflow(*n, t->sizes[d], n))
            return 1;
    return 0;
}

int64_t ext_numel(const ext_tensor *t)
{
    int64_t n;
    return numel_overflows(t, &n) ? INT64_MAX : n;
}

int ext_is_contiguous(const ext_tensor *t)
{
    if (ext_numel(t) == 0)
        return 1;
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] == 1)
            continue;
        if (t->strides[d] != expected)
            return 0;
        expected *= t->sizes[d];
    }
    return 1;
}

/* Lists the dtypes of `mask` as "float32, float64 or int64". */
static void mask_names(unsigned mask, char *out, size_t size)
{
    int n = 0, total = __builtin_popcount(mask);
    out[0] = '\0';
    for (int dtype = 0; dtype < 32; dtype++) {
        if (!(mask & EXT_MASK(dtype)))
            continue;
        size_t used = strnlen(out, size);
        snprintf(out + used, size - used, "%s%s", n == 0 ? "" : (n == total - 1 ? " or " : ", "),
                 ext_dtype_name(dtype));
        n++;
    }
}

int ext_check_dtype(const char *fn, const char *name, const ext_tensor *t, unsigned mask)
{
    if (t == NULL)
        return ext_fail(EXT_ERR_TYPE, "%s: %s is missing", fn, name);
    if (t->ndim < 0 || t->ndim > 8)
        return ext_fail(EXT_ERR_VALUE, "%s: %s has %d dimensions; at most 8 are supported",
                        fn, name, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        if (t->sizes[d] < 0)
            return ext_fail(EXT_ERR_VALUE, "%s: %s has a negative size", fn, name);
    int64_t numel;
    if (numel_overflows(t, &numel)) {
        char shape[256];
        return ext_fail(EXT_ERR_VALUE, "%s: %s is %s: more elements than a 64-bit count holds",
                        fn, name, ext_shape_string(t, shape, sizeof shape));
    }
    if (t->data == NULL && numel > 0)
        return ext_fail(EXT_ERR_VALUE, "%s: %s has no data pointer", fn, name);
    if (t->dtype < 0 || t->dtype >= 32 || !(mask & EXT_MASK(t->dtype))) {
        char expected[128];
        mask_names(mask, expected, sizeof expected);
        return ext_fail(EXT_ERR_TYPE, "%s: %s must be %s, got %s", fn, name, expected,
                        ext_dtype_name(t->dtype));
    }
    /* A misaligned view (a float32 view of bytes [1:]) would be read through
     * misaligned pointers: undefined behaviour in C, a fault in CUDA. */
    const size_t size = ext_dtype_size(t->dtype), misalignment = (uintptr_t)t->data % size;
    if (numel > 0 && misalignment)
        return ext_fail(EXT_ERR_VALUE, "%s: %s is not aligned to its %zu-byte elements (its "
                        "address is %zu mod %zu); pass a copy", fn, name, size, misalignment,
                        size);
    return EXT_OK;
}

int ext_check_contiguous(const char *fn, const char *name, const ext_tensor *t)
{
    if (!ext_is_contiguous(t))
        return ext_fail(EXT_ERR_VALUE, "%s: %s must be contiguous (call .contiguous() on it)",
                        fn, name);
    return EXT_OK;
}

int ext_check_ndim(const char *fn, const char *name, const ext_tensor *t, int ndim)
{
    if (t->ndim != ndim)
        return ext_fail(EXT_ERR_VALUE, "%s: %s must be %d-D, got %d-D", fn, name, ndim, t->ndim);
    return EXT_OK;
}

const char *ext_shape_string(const ext_tensor *t, char *out, size_t size)
{
    size_t used = (size_t)snprintf(out, size, "(");
    for (int d = 0; d < t->ndim && used < size; d++)
        used += (size_t)snprintf(out + used, size - used, "%s%lld", d ? ", " : "",
                                 (long long)t->sizes[d]);
    if (used < size)
        snprintf(out + used, size - used, "%s)", t->ndim == 1 ? "," : "");
    return out;
}

int ext_check_like(const char *fn, const char *name, const ext_tensor *t, const char *ref_name,
                   const ext_tensor *ref)
{
    if (t->dtype != ref->dtype)
        return ext_fail(EXT_ERR_TYPE, "%s: %s must be %s like %s, got %s", fn, name,
                        ext_dtype_name(ref->dtype), ref_name, ext_dtype_name(t->dtype));
    int same = t->ndim == ref->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = t->sizes[d] == ref->sizes[d];
    if (!same) {
        char shape[160], ref_shape[160];
        return ext_fail(EXT_ERR_VALUE, "%s: %s is %s but %s is %s; they must match", fn, name,
                        ext_shape_string(t, shape, sizeof shape), ref_name,
                        ext_shape_string(ref, ref_shape, sizeof ref_shape));
    }
    return EXT_OK;
}

static void device_name(const ext_tensor *t, char *out, size_t size)
{
    if (t->device_type == EXT_CPU)
        snprintf(out, size, "cpu");
    else if (t->device_type == EXT_CUDA)
        snprintf(out, size, "cuda:%d", t->device_index);
    else
        snprintf(out, size, "an unsupported device (type %d)", t->device_type);
}

int ext_check_devices(const char *fn, const ext_arg *args, int n_args, int device_type,
                      const char *twin)
{
    char where[64], first[64];
    for (int i = 0; i < n_args; i++) {
        const ext_tensor *t = args[i].t;
        if (t->device_type != device_type) {
            const char *wanted = device_type == EXT_CUDA ? "CUDA" : "CPU";
            const char *other = device_type == EXT_CUDA ? "CPU" : "CUDA";
            device_name(t, where, sizeof where);
            if (twin)
                return ext_fail(EXT_ERR_DEVICE, "%s: %s is on %s; %s needs %s tensors (use %s "
                                "for %s tensors)", fn, args[i].name, where, fn, wanted, twin, other);
            return ext_fail(EXT_ERR_DEVICE, "%s: %s is on %s; %s needs %s tensors", fn,
                            args[i].name, where, fn, wanted);
        }
        if (t->device_index != args[0].t->device_index) {
            device_name(t, where, sizeof where);
            device_name(args[0].t, first, sizeof first);
            return ext_fail(EXT_ERR_DEVICE,
                            "%s: %s is on %s but %s is on %s; all tensors must be on one device",
                            fn, args[i].name, where, args[0].name, first);
        }
    }
    return EXT_OK;
}
