/*
 * conv_kernel.h: launchers of the convolution kernels (conv_kernel.cu),
 * called by the shim in conv.c once it has checked every descriptor. Device
 * pointers on `device`, work on `stream` (not waited for); each returns a
 * cudaError_t as int.
 */
#ifndef CONV_KERNEL_H
#define CONV_KERNEL_H

#include "../conv_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = the correlation of `in` (planes, H, W) with the kernel (channels, K,
 * K), flipped in both axes when `flip` (the backward to the image). */
int conv2d_correlate_launch(const conv_geometry *geometry, const void *in, const void *kernel,
                            int flip, void *out, int device, void *stream);

/* grad_kernel (channels, K, K) from image and grad_out (planes, H, W). */
int conv2d_grad_kernel_launch(const conv_geometry *geometry, const void *image,
                              const void *grad_out, void *grad_kernel, int device, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* CONV_KERNEL_H */
