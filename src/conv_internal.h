/*
 * conv_internal.h: the geometry the conv shim (conv.c) hands its CPU
 * implementation and its CUDA launchers (cuda/conv_kernel.cu) once the
 * descriptors are checked. Plain C.
 */
#ifndef CONV_INTERNAL_H
#define CONV_INTERNAL_H

#include <stdint.h>

/* Images are `planes` contiguous (height, width) planes, planes = N * C.
 * Plane p uses kernel p % channels: channels = C for a per-channel kernel
 * (plane n * C + c is channel c), 1 for a shared one. */
typedef struct {
    int dtype;          /* EXT_FLOAT32 or EXT_FLOAT64 */
    int64_t planes;
    int64_t channels;   /* kernels in the (channels, K, K) kernel tensor */
    int64_t height;
    int64_t width;
    int radius;         /* R; K = 2R + 1 */
} conv_geometry;

#endif /* CONV_INTERNAL_H */
