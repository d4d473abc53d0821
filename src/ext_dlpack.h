/*
 * ext_dlpack.h: the DLPack structs (DLPack 1.x, and the legacy 0.x managed
 * tensor) as ext_dlpack.c reads them. These mirror the C ABI of DLPack's
 * dlpack.h field for field; the names carry an ext_ prefix so that a file
 * that also includes dlpack.h still compiles.
 *
 * Internal to the shims: not part of the cdef. The Python side only ever
 * holds the managed tensor's address.
 */
#ifndef EXT_DLPACK_H
#define EXT_DLPACK_H

#include <stdint.h>

/* DLDeviceType values _ext knows by name */
enum {
    EXT_DL_CPU = 1,
    EXT_DL_CUDA = 2,
    EXT_DL_CUDA_HOST = 3   /* pinned host memory (cudaMallocHost): ordinary CPU memory */
};

/* DLDataTypeCode values */
enum {
    EXT_DL_INT = 0,
    EXT_DL_UINT = 1,
    EXT_DL_FLOAT = 2,
    EXT_DL_OPAQUE_HANDLE = 3,
    EXT_DL_BFLOAT = 4,
    EXT_DL_COMPLEX = 5,
    EXT_DL_BOOL = 6
};

/* DLManagedTensorVersioned.flags bits */
#define EXT_DL_FLAG_READ_ONLY (1ull << 0)
#define EXT_DL_FLAG_IS_COPIED (1ull << 1)

typedef struct {
    int32_t device_type;   /* DLDeviceType (an enum: int-sized) */
    int32_t device_id;
} ext_dl_device;

typedef struct {
    uint8_t code;          /* DLDataTypeCode */
    uint8_t bits;
    uint16_t lanes;
} ext_dl_dtype;

/* DLTensor */
typedef struct {
    void *data;
    ext_dl_device device;
    int32_t ndim;
    ext_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;      /* in elements; NULL: compact row-major */
    uint64_t byte_offset;
} ext_dl_tensor;

/* DLManagedTensor: the legacy capsule "dltensor" */
typedef struct ext_dl_managed {
    ext_dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct ext_dl_managed *self);
} ext_dl_managed;

/* DLPackVersion */
typedef struct {
    uint32_t major;
    uint32_t minor;
} ext_dl_version;

/* DLManagedTensorVersioned: the capsule "dltensor_versioned" */
typedef struct ext_dl_managed_versioned {
    ext_dl_version version;
    void *manager_ctx;
    void (*deleter)(struct ext_dl_managed_versioned *self);
    uint64_t flags;
    ext_dl_tensor dl_tensor;
} ext_dl_managed_versioned;

#endif /* EXT_DLPACK_H */
