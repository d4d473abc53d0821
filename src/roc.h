/*
 * roc.h: the C entry points of _ext.roc (also fed to cffi's cdef).
 *
 * Legacy histogram (the 2018 gpu_roc, rebuilt):
 *   score     (Q, G) float32, contiguous, row-major
 *   labels_q  Q elements, labels_g G elements; float32, int32 or int64, one dtype
 *   histo1    nbins elements (nbins = its numel): every pair is added here
 *   histo2    nbins elements: the genuine pairs (labels_q[i] == labels_g[j])
 *   histo1/2  float32, float64 or int64; counts are kept in 64-bit integers
 *             and added into the caller's values once at the end
 * Bins follow roc_legacy_bin() in roc_bins.h; NaN scores are skipped and
 * counted in *n_nan. The CUDA twin runs on the tensors' device, on `stream`
 * (a cudaStream_t; NULL is the legacy default stream), and returns after the
 * stream has finished the work.
 */
#ifndef ROC_H
#define ROC_H

#include <stdint.h>

#include "ext_tensor.h"

int roc_hist_cpu(const ext_tensor *score, const ext_tensor *histo1, const ext_tensor *histo2,
                 const ext_tensor *labels_q, const ext_tensor *labels_g,
                 int64_t *n_nan /* OUT: NaN scores skipped */);

int roc_hist_cuda(const ext_tensor *score, const ext_tensor *histo1, const ext_tensor *histo2,
                  const ext_tensor *labels_q, const ext_tensor *labels_g, void *stream,
                  int64_t *n_nan /* OUT: NaN scores skipped */);

#endif /* ROC_H */
