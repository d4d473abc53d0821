/*
 * trilinear.h: the C entry points of _ext.trilinear (also fed to cffi's cdef).
 *
 * Trilinear interpolation of features at the corners of N cubes:
 *   feats   (N, 8, F)  the features of each cube's 8 corners
 *   points  (N, 3)     one point per cube, local coordinates in [-1, 1]
 *   out     (N, F)
 * With u, v, w = (points + 1) / 2, corners 0..3 at u = 0 and 4..7 at u = 1,
 * and a = (1-v)(1-w), b = (1-v)w, c = v(1-w), d = 1 - a - b - c (= vw):
 *   out = (1-u) (a f0 + b f1 + c f2 + d f3) + u (a f4 + b f5 + c f6 + d f7)
 * All float32 or all float64, contiguous, on one device; outputs are
 * allocated by the caller.
 *
 * Backward, from grad_out (N, F):
 *   grad_feats  (N, 8, F)  grad_out times each corner's weight
 *   grad_points (N, 3)     sum over F of grad_out * d out / d points
 *                          (d u / d p = 1/2: the weights are in u, v, w)
 * Either output may be NULL when its gradient is not wanted, not both.
 *
 * Double backward: the gradients of the backward's outputs with respect to
 * grad_out, feats and points, from grad_grad_feats (N, 8, F) and
 * grad_grad_points (N, 3), the gradients that reach grad_feats and
 * grad_points (either may be NULL, not both: its terms are left out, and
 * grad_feats is 0 without grad_grad_points). With W_k(p) the corner weights
 * and, at each point, D_k = sum_j grad_grad_points[n, j] dW_k / dp_j and
 * M_ki = sum_j grad_grad_points[n, j] d2 W_k / dp_i dp_j:
 *   grad_grad_out (N, F)     sum_k grad_grad_feats[n, k, f] W_k + feats[n, k, f] D_k
 *   grad_feats    (N, 8, F)  grad_out[n, f] D_k
 *   grad_points   (N, 3)     sum over f and k of grad_out[n, f] *
 *                            (grad_grad_feats[n, k, f] dW_k / dp_i + feats[n, k, f] M_ki)
 * Any output may be NULL when it is not wanted, not all three.
 *
 * The CUDA twins run on the tensors' device and are queued on `stream` (a
 * cudaStream_t; NULL is the legacy default stream); they do not wait for it.
 */
#ifndef TRILINEAR_H
#define TRILINEAR_H

#include <stdint.h>

#include "ext_tensor.h"

int trilinear_forward_cpu(const ext_tensor *feats, const ext_tensor *points,
                          const ext_tensor *out /* OUT: (N, F) */);
int trilinear_forward_cuda(const ext_tensor *feats, const ext_tensor *points,
                           const ext_tensor *out /* OUT: (N, F) */, void *stream);

int trilinear_backward_cpu(const ext_tensor *grad_out, const ext_tensor *feats,
                           const ext_tensor *points,
                           const ext_tensor *grad_feats /* OUT: (N, 8, F) or NULL */,
                           const ext_tensor *grad_points /* OUT: (N, 3) or NULL */);
int trilinear_backward_cuda(const ext_tensor *grad_out, const ext_tensor *feats,
                            const ext_tensor *points,
                            const ext_tensor *grad_feats /* OUT: (N, 8, F) or NULL */,
                            const ext_tensor *grad_points /* OUT: (N, 3) or NULL */,
                            void *stream);

int trilinear_double_backward_cpu(const ext_tensor *grad_grad_feats /* or NULL */,
                                  const ext_tensor *grad_grad_points /* or NULL */,
                                  const ext_tensor *grad_out, const ext_tensor *feats,
                                  const ext_tensor *points,
                                  const ext_tensor *grad_grad_out /* OUT: (N, F) or NULL */,
                                  const ext_tensor *grad_feats /* OUT: (N, 8, F) or NULL */,
                                  const ext_tensor *grad_points /* OUT: (N, 3) or NULL */);
int trilinear_double_backward_cuda(const ext_tensor *grad_grad_feats /* or NULL */,
                                   const ext_tensor *grad_grad_points /* or NULL */,
                                   const ext_tensor *grad_out, const ext_tensor *feats,
                                   const ext_tensor *points,
                                   const ext_tensor *grad_grad_out /* OUT: (N, F) or NULL */,
                                   const ext_tensor *grad_feats /* OUT: (N, 8, F) or NULL */,
                                   const ext_tensor *grad_points /* OUT: (N, 3) or NULL */,
                                   void *stream);

#endif /* TRILINEAR_H */
