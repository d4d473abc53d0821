/*
 * ext_tensor.h: the ABI between the Python wrappers and the C shims.
 *
 * The tensor descriptor is the modern THCudaTensor: a plain struct filled
 * from the DLPack tensor that the array's producer exports (torch, NumPy,
 * CuPy, JAX, MXNet...; ext_tensor_from_dlpack, called by _ext/_ffi.py):
 * data pointer, dtype, device, sizes and strides in elements. The shims
 * check everything they need from it (dtype, alignment, device, contiguity,
 * shapes) before touching data, as THArgCheck did. Device codes follow
 * DLPack's (kDLCPU = 1, kDLCUDA = 2).
 *
 * Every entry point returns an ext_status; on failure ext_last_error() holds
 * a message naming the function and the argument ("gpu_roc: score must be
 * float32, got float64"). Messages are per thread, since cffi releases the
 * GIL around calls.
 *
 * build.py feeds this header to cffi's cdef with preprocessor lines removed:
 * keep it plain C declarations (array sizes as literals, no macros).
 */
#ifndef EXT_TENSOR_H
#define EXT_TENSOR_H

#include <stdint.h>

typedef enum {
    EXT_OK = 0,           /* success */
    EXT_ERR_TYPE = 1,     /* an argument has the wrong dtype or kind (TypeError) */
    EXT_ERR_VALUE = 2,    /* wrong shape, layout or parameter value (ValueError) */
    EXT_ERR_DEVICE = 3,   /* wrong device, or tensors on two devices (RuntimeError) */
    EXT_ERR_NO_CUDA = 4,  /* a CUDA entry point of a CPU-only build (RuntimeError) */
    EXT_ERR_CUDA = 5,     /* the CUDA runtime reported an error (RuntimeError) */
    EXT_ERR_NOMEM = 6     /* a host or device allocation failed (MemoryError) */
} ext_status;

typedef enum {
    EXT_FLOAT32 = 0,
    EXT_FLOAT64 = 1,
    EXT_INT32 = 2,
    EXT_INT64 = 3,
    EXT_UINT8 = 4,
    EXT_BOOL = 5,
    EXT_FLOAT16 = 6,
    EXT_BFLOAT16 = 7,
    EXT_INT16 = 8,
    EXT_INT8 = 9,
    EXT_OTHER_DTYPE = 99
} ext_dtype;

typedef enum {
    EXT_CPU = 1,
    EXT_CUDA = 2
} ext_device_type;

/* EXT_MAX_DIMS = 8 dimensions at most (the arrays below). */
typedef struct {
    void *data;            /* address of element [0, ..., 0] */
    int32_t dtype;         /* ext_dtype */
    int32_t device_type;   /* ext_device_type */
    int32_t device_index;  /* CUDA ordinal; 0 on the CPU */
    int32_t ndim;          /* 0 .. 8 */
    int64_t sizes[8];
    int64_t strides[8];    /* in elements, not bytes */
} ext_tensor;

/*
 * Fill *out from the DLPack managed tensor at address `managed` (what
 * PyCapsule_GetPointer returned): a DLManagedTensorVersioned if `versioned`,
 * else a legacy DLManagedTensor. data is DLPack's data + byte_offset; no
 * strides means compact row-major. Fails, naming fn and name, on a DLPack
 * major version other than 1, a read-only (or producer-copied) tensor when
 * `writable`, a dtype or device that no entry point takes, or more than 8
 * dimensions. The managed tensor stays the caller's: release it with
 * ext_dlpack_release once *out is no longer used, on failure too.
 */
int ext_tensor_from_dlpack(ext_tensor *out, uintptr_t managed, int32_t versioned,
                           int32_t writable, const char *fn, const char *name);

/* Hand a managed tensor back to its producer (calls its deleter, if any). */
void ext_dlpack_release(uintptr_t managed, int32_t versioned);

/* The message of the last failed call on this thread ("" if none). */
const char *ext_last_error(void);

/* One-line English meaning of a status code. */
const char *ext_status_name(int status);

/* 1 if this module was built with CUDA kernels, else 0. */
int ext_built_with_cuda(void);

/* Test hook: the next `device` device allocations and the next `host` host
 * allocations of this module fail as out of memory; (0, 0) turns it off.
 * Lets the tests reach every entry point's out-of-memory path. */
void ext_test_fail_allocations(int device, int host);

#endif /* EXT_TENSOR_H */
