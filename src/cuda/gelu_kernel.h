/*
 * gelu_kernel.h: launchers of the GELU kernels (gelu_kernel.cu), called by
 * the shim in gelu.c once it has checked every argument. Raw pointers, the
 * element count, the dtype (EXT_FLOAT32 or EXT_FLOAT64), a device ordinal and
 * a stream; each queues its work and returns a cudaError_t as int.
 */
#ifndef GELU_KERNEL_H
#define GELU_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* output[i] = GELU(input[i]), i < n. */
int gelu_forward_launch(const void *input, void *output, int dtype, int64_t n, int approximate,
                        int device, void *stream);

/* grad_input[i] = grad_output[i] * GELU'(input[i]), i < n. */
int gelu_backward_launch(const void *grad_output, const void *input, void *grad_input, int dtype,
                         int64_t n, int approximate, int device, void *stream);

/* grad_grad_output[i] = grad_grad_input[i] * GELU'(input[i]) and
 * grad_input[i] = grad_grad_input[i] * grad_output[i] * GELU''(input[i]),
 * i < n, in one pass; either output may be NULL, not both. */
int gelu_double_backward_launch(const void *grad_grad_input, const void *grad_output,
                                const void *input, void *grad_grad_output, void *grad_input,
                                int dtype, int64_t n, int approximate, int device, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* GELU_KERNEL_H */
