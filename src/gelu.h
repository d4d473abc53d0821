/*
 * gelu.h: the C entry points of _ext.gelu (also fed to cffi's cdef).
 *
 * GELU, elementwise, on a tensor of any shape (contiguous, float32 or
 * float64); output and grad_input are allocated by the caller with the shape
 * and dtype of input. `approximate` picks the formula:
 *
 *   GELU_NONE     x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))      (torch's default)
 *   GELU_TANH     0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
 *   GELU_SIGMOID  x * sigmoid(1.702 x)                           (the seed's)
 *
 * Backward: grad_input = grad_output * dGELU/dx (input).
 *
 * Double backward: the gradients of the backward's grad_input with respect
 * to its two inputs, from grad_grad_input (the gradient that reaches
 * grad_input), in one pass over the three inputs:
 *   grad_grad_output = grad_grad_input * dGELU/dx (input)         (d / d grad_output)
 *   grad_input       = grad_grad_input * grad_output * d2GELU/dx2 (input)   (d / d input)
 * Either output may be NULL when it is not wanted, not both; every tensor
 * has input's shape and dtype.
 *
 * The CUDA twins run on the tensors' device and are queued on `stream` (a
 * cudaStream_t; NULL is the legacy default stream); they do not wait for it.
 */
#ifndef GELU_H
#define GELU_H

#include <stdint.h>

#include "ext_tensor.h"

typedef enum { GELU_NONE = 0, GELU_TANH = 1, GELU_SIGMOID = 2 } gelu_approximation;

int gelu_forward_cpu(const ext_tensor *input, const ext_tensor *output /* OUT */,
                     int32_t approximate);
int gelu_forward_cuda(const ext_tensor *input, const ext_tensor *output /* OUT */,
                      int32_t approximate, void *stream);

int gelu_backward_cpu(const ext_tensor *grad_output, const ext_tensor *input,
                      const ext_tensor *grad_input /* OUT */, int32_t approximate);
int gelu_backward_cuda(const ext_tensor *grad_output, const ext_tensor *input,
                       const ext_tensor *grad_input /* OUT */, int32_t approximate,
                       void *stream);

int gelu_double_backward_cpu(const ext_tensor *grad_grad_input, const ext_tensor *grad_output,
                             const ext_tensor *input,
                             const ext_tensor *grad_grad_output /* OUT or NULL */,
                             const ext_tensor *grad_input /* OUT or NULL */, int32_t approximate);
int gelu_double_backward_cuda(const ext_tensor *grad_grad_input, const ext_tensor *grad_output,
                              const ext_tensor *input,
                              const ext_tensor *grad_grad_output /* OUT or NULL */,
                              const ext_tensor *grad_input /* OUT or NULL */,
                              int32_t approximate, void *stream);

#endif /* GELU_H */
