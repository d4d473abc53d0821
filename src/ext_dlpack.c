/*
 * ext_dlpack.c: the one way a descriptor is filled. _ext/_ffi.py asks the
 * array's producer for a DLPack capsule (torch, NumPy, CuPy, JAX, MXNet...),
 * takes the managed tensor's address out of it and hands it here; the
 * descriptor gets its data pointer, dtype, device, sizes and strides, and the
 * managed tensor goes back to its producer (ext_dlpack_release) once the
 * descriptor is no longer used. Compiled into each _ext module.
 */
#include <stdio.h>

#include "ext_check.h"
#include "ext_dlpack.h"

/* ------------------------------------------------------------------------- */
/* dtype */

static const struct {
    uint8_t code, bits;
    int32_t dtype;
} known_dtypes[] = {
    {EXT_DL_FLOAT, 32, EXT_FLOAT32}, {EXT_DL_FLOAT, 64, EXT_FLOAT64},
    {EXT_DL_FLOAT, 16, EXT_FLOAT16}, {EXT_DL_BFLOAT, 16, EXT_BFLOAT16},
    {EXT_DL_INT, 32, EXT_INT32},     {EXT_DL_INT, 64, EXT_INT64},
    {EXT_DL_INT, 16, EXT_INT16},     {EXT_DL_INT, 8, EXT_INT8},
    {EXT_DL_UINT, 8, EXT_UINT8},     {EXT_DL_BOOL, 8, EXT_BOOL},
};

/* The ext_dtype of a DLPack dtype, or -1 when no entry point could take it
 * (complex, unsigned wider than 8 bits, float8 and narrower, vector lanes). */
static int dtype_of(ext_dl_dtype dt)
{
    if (dt.lanes != 1)
        return -1;
    for (size_t i = 0; i < sizeof known_dtypes / sizeof known_dtypes[0]; i++)
        if (known_dtypes[i].code == dt.code && known_dtypes[i].bits == dt.bits)
            return known_dtypes[i].dtype;
    return -1;
}

/* "complex64", "uint16", "float32 in 4 lanes", "DLPack type code 9 (8 bits)" */
static void dl_dtype_name(ext_dl_dtype dt, char *out, size_t size)
{
    static const char *const codes[] = {"int", "uint", "float", "opaque handle", "bfloat",
                                        "complex", "bool"};
    int used;
    if (dt.code < sizeof codes / sizeof codes[0])
        used = snprintf(out, size, "%s%u", codes[dt.code], (unsigned)dt.bits);
    else
        used = snprintf(out, size, "DLPack type code %u (%u bits)", (unsigned)dt.code,
                        (unsigned)dt.bits);
    if (dt.lanes != 1 && used >= 0 && (size_t)used < size)
        snprintf(out + used, size - used, " in %u lanes", (unsigned)dt.lanes);
}

/* ------------------------------------------------------------------------- */
/* device */

static const char *dl_device_name(int32_t device_type)
{
    switch (device_type) {
    case 4: return "OpenCL";
    case 7: return "Vulkan";
    case 8: return "Metal";
    case 10: return "ROCm";
    case 11: return "ROCm pinned host memory";
    case 13: return "CUDA managed memory";
    case 14: return "oneAPI";
    case 15: return "WebGPU";
    default: return "not CPU or CUDA";
    }
}

/* ------------------------------------------------------------------------- */
/* the descriptor */

int ext_tensor_from_dlpack(ext_tensor *out, uintptr_t managed, int32_t versioned,
                           int32_t writable, const char *fn, const char *name)
{
    const ext_dl_tensor *dl;
    if (versioned) {
        const ext_dl_managed_versioned *m = (const ext_dl_managed_versioned *)managed;
        if (m->version.major != 1)
            return ext_fail(EXT_ERR_TYPE, "%s: %s is a DLPack %u.%u tensor; _ext reads DLPack 1.x "
                            "and the legacy unversioned capsules", fn, name,
                            (unsigned)m->version.major, (unsigned)m->version.minor);
        if (writable && (m->flags & EXT_DL_FLAG_READ_ONLY))
            return ext_fail(EXT_ERR_VALUE, "%s: %s is read-only", fn, name);
        if (writable && (m->flags & EXT_DL_FLAG_IS_COPIED))
            return ext_fail(EXT_ERR_VALUE, "%s: %s is a copy that its producer made for the "
                            "export, so what is written to it would be lost", fn, name);
        dl = &m->dl_tensor;
    } else {
        dl = &((const ext_dl_managed *)managed)->dl_tensor;
    }

    const int dtype = dtype_of(dl->dtype);
    if (dtype < 0) {
        char dtype_name[64];
        dl_dtype_name(dl->dtype, dtype_name, sizeof dtype_name);
        return ext_fail(EXT_ERR_TYPE, "%s: %s is %s; _ext takes float16, bfloat16, float32, "
                        "float64, int8, int16, int32, int64, uint8 and bool arrays", fn, name,
                        dtype_name);
    }
    switch (dl->device.device_type) {
    case EXT_DL_CPU:
    case EXT_DL_CUDA_HOST:
        out->device_type = EXT_CPU;
        out->device_index = 0;
        break;
    case EXT_DL_CUDA:
        out->device_type = EXT_CUDA;
        out->device_index = dl->device.device_id;
        break;
    default:
        return ext_fail(EXT_ERR_DEVICE, "%s: %s is on DLPack device type %d (%s); _ext takes "
                        "CPU and CUDA arrays", fn, name, (int)dl->device.device_type,
                        dl_device_name(dl->device.device_type));
    }
    if (dl->ndim < 0 || dl->ndim > 8)
        return ext_fail(EXT_ERR_VALUE, "%s: %s has %d dimensions; at most 8 are supported", fn,
                        name, (int)dl->ndim);
    if (dl->ndim > 0 && dl->shape == NULL)
        return ext_fail(EXT_ERR_VALUE, "%s: %s is a DLPack tensor without a shape", fn, name);

    out->data = (char *)dl->data + dl->byte_offset;
    out->dtype = dtype;
    out->ndim = dl->ndim;
    /* unsigned: sizes whose product overflows are refused by ext_check_dtype */
    uint64_t compact = 1;
    for (int d = dl->ndim - 1; d >= 0; d--) {
        out->sizes[d] = dl->shape[d];
        out->strides[d] = dl->strides ? dl->strides[d] : (int64_t)compact;
        compact *= (uint64_t)dl->shape[d];
    }
    return EXT_OK;
}

void ext_dlpack_release(uintptr_t managed, int32_t versioned)
{
    if (versioned) {
        ext_dl_managed_versioned *m = (ext_dl_managed_versioned *)managed;
        if (m->deleter)
            m->deleter(m);
    } else {
        ext_dl_managed *m = (ext_dl_managed *)managed;
        if (m->deleter)
            m->deleter(m);
    }
}
