/*
 * roc_hist_kernel.h: the launcher of the legacy ROC histogram
 * (roc_hist_kernel.cu), called by the shim in roc_hist.c once it has checked
 * every argument. Raw pointers, sizes, a device ordinal and a stream; returns
 * a cudaError_t as int.
 */
#ifndef ROC_HIST_KERNEL_H
#define ROC_HIST_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * score is (n_query, n_gallery) row-major; labels are of `label_dtype`
 * (EXT_FLOAT32, EXT_INT32 or EXT_INT64); counts are added into histo1 (all
 * pairs) and histo2 (genuine pairs), each nbins elements of its own dtype
 * (EXT_FLOAT32, EXT_FLOAT64 or EXT_INT64). Synchronizes `stream` before
 * returning *n_nan.
 */
int roc_hist_launch(const float *score, int64_t n_query, int64_t n_gallery,
                    const void *labels_q, const void *labels_g, int label_dtype,
                    int64_t nbins, void *histo1, int histo1_dtype, void *histo2,
                    int histo2_dtype, int device, void *stream,
                    int64_t *n_nan /* OUT */);

#ifdef __cplusplus
}
#endif

#endif /* ROC_HIST_KERNEL_H */
