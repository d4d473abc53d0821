/*
 * trilinear_kernel.h: launchers of the trilinear interpolation kernels
 * (trilinear_kernel.cu), called by the shim in trilinear.c once it has
 * checked every argument. Raw pointers, sizes, the dtype (EXT_FLOAT32 or
 * EXT_FLOAT64), a device ordinal and a stream; each queues its work and
 * returns a cudaError_t as int.
 */
#ifndef TRILINEAR_KERNEL_H
#define TRILINEAR_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* feats (n_points, 8, n_feats), points (n_points, 3) -> out (n_points, n_feats). */
int trilinear_forward_launch(const void *feats, const void *points, void *out, int dtype,
                             int64_t n_points, int64_t n_feats, int device, void *stream);

/* grad_out (n_points, n_feats) -> grad_feats (n_points, 8, n_feats) and
 * grad_points (n_points, 3); either may be NULL. */
int trilinear_backward_launch(const void *grad_out, const void *feats, const void *points,
                              void *grad_feats, void *grad_points, int dtype, int64_t n_points,
                              int64_t n_feats, int device, void *stream);

/* The double backward (trilinear.h): grad_grad_feats (n_points, 8, n_feats)
 * and grad_grad_points (n_points, 3), either NULL (its terms left out) ->
 * grad_grad_out (n_points, n_feats), grad_feats and grad_points, each NULL
 * when not wanted. */
int trilinear_double_backward_launch(const void *grad_grad_feats, const void *grad_grad_points,
                                     const void *grad_out, const void *feats, const void *points,
                                     void *grad_grad_out, void *grad_feats, void *grad_points,
                                     int dtype, int64_t n_points, int64_t n_feats, int device,
                                     void *stream);

#ifdef __cplusplus
}
#endif

#endif /* TRILINEAR_KERNEL_H */
