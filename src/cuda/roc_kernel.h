/*
 * roc_kernel.h: launchers of the ROC kernels (roc_kernel.cu), called by the
 * shim in roc.c once it has checked every argument. Raw pointers, sizes, a
 * device ordinal and a stream; each returns a cudaError_t as int.
 */
#ifndef ROC_KERNEL_H
#define ROC_KERNEL_H

#include <stdint.h>

#include "../roc_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Legacy histogram: score is (n_query, n_gallery) row-major; labels are of
 * `label_dtype` (EXT_FLOAT32, EXT_INT32 or EXT_INT64); counts are added into
 * histo1 (all pairs) and histo2 (genuine pairs), each nbins elements of its
 * own dtype (EXT_FLOAT32, EXT_FLOAT64 or EXT_INT64). Synchronizes `stream`
 * before returning *n_nan.
 */
int roc_hist_launch(const float *score, int64_t n_query, int64_t n_gallery,
                    const void *labels_q, const void *labels_g, int label_dtype,
                    int64_t nbins, void *histo1, int histo1_dtype, void *histo2,
                    int histo2_dtype, int device, void *stream,
                    int64_t *n_nan /* OUT */);

/*
 * Evaluator (roc_eval_kernel.cu): the GPU half of roc_eval.c. Create finds the
 * genuine pairs and their scores and returns the distinct genuine scores on
 * the host; add_rows counts the pairs of query rows [row_begin, row_end) on
 * the device; fetch copies the counts to the host structs (allocated by the
 * caller to the sizes the levels imply; curve-mode keys are allocated here).
 */
typedef struct roc_eval_cuda roc_eval_cuda;

typedef struct {
    int mode, same_set, similarity, device;
    void *stream;
    int64_t n_query, n_gallery, dim, n_codes;
    const int32_t *codes_q, *codes_g;          /* device */
    const float *score, *feat_q, *feat_g;      /* device; one source */
    const roc_binned_counts *binned;           /* host: edges and constants */
} roc_eval_cuda_setup;

int roc_eval_cuda_create(roc_eval_cuda **out, const roc_eval_cuda_setup *setup,
                         roc_genuine_levels *genuine /* OUT: host arrays */,
                         roc_totals *totals /* OUT: the genuine totals */,
                         int *bad_code /* OUT: 1 if a code is outside [0, n_codes) */);
int roc_eval_cuda_add_rows(roc_eval_cuda *eval, int64_t row_begin, int64_t row_end);
int roc_eval_cuda_fetch(roc_eval_cuda *eval, roc_exact_counts *exact, roc_binned_counts *binned,
                        roc_key_counts *keys, roc_totals *totals);
int64_t roc_eval_cuda_peak_bytes(const roc_eval_cuda *eval);
void roc_eval_cuda_free(roc_eval_cuda *eval);

/* score (n_query, n_gallery) = the evaluator's scores from features. */
int roc_scores_launch(const float *feat_q, const float *feat_g, int64_t n_query,
                      int64_t n_gallery, int64_t dim, int similarity, float *score, int device,
                      void *stream);

#ifdef __cplusplus
}
#endif

#endif /* ROC_KERNEL_H */
