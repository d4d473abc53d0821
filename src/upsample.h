/*
 * upsample.h: the C entry points of _ext.upsample (also fed to cffi's cdef).
 *
 * Bilinear resampling of NCHW tensors (float32 or float64, contiguous):
 *   input   (N, C, H, W)
 *   output  (N, C, OH, OW), allocated by the caller; its size is the target
 * Along each axis, output index o reads input position src(o), with the
 * coordinate modes of ONNX Resize (in = input size, out = output size):
 *
 *   UPSAMPLE_HALF_PIXEL     src = max(0, (o + 0.5) r - 0.5)   torch align_corners=False
 *   UPSAMPLE_ALIGN_CORNERS  src = o (in - 1) / (out - 1)      torch and TF1 align_corners=True
 *   UPSAMPLE_ASYMMETRIC     src = o r                         TF1 resize_bilinear default
 *
 * r is 1 / scale when the caller gives the axis' scale factor (scale > 0),
 * else in / out, as torch does when recompute_scale_factor is not set; pass
 * 0 for "no scale factor". align_corners ignores the scale factors (and maps
 * everything to 0 when out = 1). In every mode an axis whose size does not
 * change is copied, whatever the scale factor (torch's CPU kernel does so;
 * onnxruntime only when no axis changes). Otherwise i0 =
 * min(floor(src), in - 1), i1 = min(i0 + 1, in - 1), l = clamp(src - i0, 0, 1),
 * and the output is (1 - l) input[i0] + l input[i1] along each axis.
 *
 * Backward: grad_input (N, C, H, W) from grad_output (N, C, OH, OW), with the
 * same mode and scales; it is written whole (no need to zero it), and each
 * element is a sum in a fixed order, so the result is deterministic on the
 * CPU and on the GPU.
 *
 * The CUDA twins run on the tensors' device and are queued on `stream` (a
 * cudaStream_t; NULL is the legacy default stream); they do not wait for it.
 */
#ifndef UPSAMPLE_H
#define UPSAMPLE_H

#include <stdint.h>

#include "ext_tensor.h"

typedef enum {
    UPSAMPLE_HALF_PIXEL = 0,
    UPSAMPLE_ALIGN_CORNERS = 1,
    UPSAMPLE_ASYMMETRIC = 2
} upsample_coordinate_mode;

int upsample_bilinear_forward_cpu(const ext_tensor *input, const ext_tensor *output /* OUT */,
                                  int32_t mode, double scale_h, double scale_w);
int upsample_bilinear_forward_cuda(const ext_tensor *input, const ext_tensor *output /* OUT */,
                                   int32_t mode, double scale_h, double scale_w, void *stream);

int upsample_bilinear_backward_cpu(const ext_tensor *grad_output,
                                   const ext_tensor *grad_input /* OUT */, int32_t mode,
                                   double scale_h, double scale_w);
int upsample_bilinear_backward_cuda(const ext_tensor *grad_output,
                                    const ext_tensor *grad_input /* OUT */, int32_t mode,
                                    double scale_h, double scale_w, void *stream);

#endif /* UPSAMPLE_H */
