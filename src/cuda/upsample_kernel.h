/*
 * upsample_kernel.h: launchers of the bilinear resampling kernels
 * (upsample_kernel.cu), called by the shim in upsample.c once it has checked
 * every argument. Raw pointers, sizes, the dtype (EXT_FLOAT32 or
 * EXT_FLOAT64), the coordinate mode and scale factors of upsample.h, a device
 * ordinal and a stream; each queues its work and returns a cudaError_t as int.
 */
#ifndef UPSAMPLE_KERNEL_H
#define UPSAMPLE_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* input (planes, in_h, in_w) -> output (planes, out_h, out_w). */
int upsample_forward_launch(const void *input, void *output, int dtype, int64_t planes,
                            int32_t in_h, int32_t in_w, int32_t out_h, int32_t out_w,
                            int32_t mode, double scale_h, double scale_w, int device,
                            void *stream);

/* grad_output (planes, out_h, out_w) -> grad_input (planes, in_h, in_w), every
 * element written. */
int upsample_backward_launch(const void *grad_output, void *grad_input, int dtype,
                             int64_t planes, int32_t in_h, int32_t in_w, int32_t out_h,
                             int32_t out_w, int32_t mode, double scale_h, double scale_w,
                             int device, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* UPSAMPLE_KERNEL_H */
