/*
 * ext_check.h: argument checks for the C shims (the modern THArgCheck), and
 * the per-thread error message behind ext_last_error().
 *
 * Each check returns EXT_OK or an ext_status with the message set, so a shim
 * reads as a list of checks:
 *
 *     if ((st = ext_check_dtype(fn, "score", score, EXT_MASK(EXT_FLOAT32)))) return st;
 *
 * Internal to the shims: not part of the cdef.
 */
#ifndef EXT_CHECK_H
#define EXT_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "ext_tensor.h"

#define EXT_MASK(dtype) (1u << (dtype))

typedef struct {
    const char *name;       /* the argument's Python name, e.g. "labels_g" */
    const ext_tensor *t;
} ext_arg;

/* Set this thread's message (printf-style) and return `status`. */
int ext_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* malloc, calloc and realloc as the shims use them: never NULL for a size of
 * 0, and failing on demand for the tests (ext_test_fail_allocations). */
void *ext_malloc(size_t bytes);
void *ext_calloc(size_t count, size_t size);
void *ext_realloc(void *ptr, size_t bytes);

const char *ext_dtype_name(int dtype);
/* Bytes per element of an ext_dtype (0 for EXT_OTHER_DTYPE). */
size_t ext_dtype_size(int dtype);
/* The number of elements; INT64_MAX when the sizes' product overflows (which
 * ext_check_dtype refuses). */
int64_t ext_numel(const ext_tensor *t);
/* Row-major contiguity from sizes and strides, as THC computed it: dims of
 * size 1 may have any stride. */
int ext_is_contiguous(const ext_tensor *t);

/* Descriptor sanity (ndim, sizes, data pointer), then the dtype in `mask`,
 * then the data pointer's alignment to that dtype's elements. Every entry
 * point calls it for every descriptor before touching data. */
int ext_check_dtype(const char *fn, const char *name, const ext_tensor *t, unsigned mask);
int ext_check_contiguous(const char *fn, const char *name, const ext_tensor *t);
int ext_check_ndim(const char *fn, const char *name, const ext_tensor *t, int ndim);
/* t's sizes as "(2, 8, 16)" in out; returns out, for messages that name shapes. */
const char *ext_shape_string(const ext_tensor *t, char *out, size_t size);
/* t has ref's dtype and shape: "gelu: output must be float32 like input, got
 * float64", "gelu: output is (3, 2) but input is (2, 3); they must match". */
int ext_check_like(const char *fn, const char *name, const ext_tensor *t, const char *ref_name,
                   const ext_tensor *ref);
/* The status and message for a launcher's CUDA error `err`: EXT_ERR_NOMEM for
 * an allocation failure, else EXT_ERR_CUDA; "<fn>: CUDA error: <CUDA's string>".
 * Only in builds with CUDA. */
int ext_cuda_fail(const char *fn, int err);
/* The status and message of a CUDA entry point in a build without CUDA:
 * "<fn>: _ext.<module> was built without CUDA (<why>); <remedy>, or <instead>"
 * (NULL: "pass CPU tensors"). build.py sets EXT_MODULE, and EXT_NO_CUDA_WHY and
 * EXT_NO_CUDA_REMEDY from the cause (NVCC= on purpose, no nvcc found, ...).
 * Only in builds without CUDA. */
int ext_no_cuda(const char *fn, const char *instead);
/* All of `args` on `device_type`, and on the device of args[0]; `twin` (or
 * NULL) names the entry point to use for the other kind of device. */
int ext_check_devices(const char *fn, const ext_arg *args, int n_args, int device_type,
                      const char *twin);

#endif /* EXT_CHECK_H */
