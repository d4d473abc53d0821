/*
 * conv.h: the C entry points of _ext.conv (also fed to cffi's cdef): a 2-D
 * image convolution with a (2R+1) x (2R+1) kernel and zero padding, output
 * the size of the input (the seed's niv_conv), forward and backward, on the
 * CPU and on CUDA.
 *
 *   image        (H, W) or (N, C, H, W), float32 or float64, contiguous
 *   kernel       (K, K), K = 2R + 1 (R >= 0), shared by every channel, or
 *                (C, K, K), one per channel (C = 1 for an (H, W) image);
 *                image's dtype
 *   out, grad_*  like image (grad_kernel like kernel); allocated by the caller
 *
 * As niv_conv (and torch.nn.functional.conv2d with padding R, groups C), it
 * is a cross-correlation; pixels outside the image count as 0:
 *
 *   out[n, c, y, x] = sum over i, j in [0, K) of
 *                     kernel[c, i, j] * image[n, c, y + i - R, x + j - R]
 *
 * Backward, from grad_out (image's shape):
 *   grad_image[n, c, y, x] = sum over i, j of
 *                            kernel[c, i, j] * grad_out[n, c, y - i + R, x - j + R]
 *                            (the same correlation, kernel flipped in both axes)
 *   grad_kernel[c, i, j]   = sum over n, y, x (and c, for a shared kernel) of
 *                            grad_out[n, c, y, x] * image[n, c, y + i - R, x + j - R]
 * grad_image or grad_kernel may be NULL when it is not wanted. grad_kernel
 * sums in double and is deterministic (no atomics), on the CPU and the GPU.
 *
 * The CUDA entry points run on `stream` (a cudaStream_t; NULL is the legacy
 * default stream) and return without waiting for it.
 */
#ifndef CONV_H
#define CONV_H

#include "ext_tensor.h"

int conv2d_forward_cpu(const ext_tensor *image, const ext_tensor *kernel,
                       const ext_tensor *out /* OUT */);
int conv2d_forward_cuda(const ext_tensor *image, const ext_tensor *kernel,
                        const ext_tensor *out /* OUT */, void *stream);

int conv2d_backward_cpu(const ext_tensor *image, const ext_tensor *kernel,
                        const ext_tensor *grad_out, const ext_tensor *grad_image /* OUT or NULL */,
                        const ext_tensor *grad_kernel /* OUT or NULL */);
int conv2d_backward_cuda(const ext_tensor *image, const ext_tensor *kernel,
                         const ext_tensor *grad_out, const ext_tensor *grad_image /* OUT or NULL */,
                         const ext_tensor *grad_kernel /* OUT or NULL */, void *stream);

#endif /* CONV_H */
