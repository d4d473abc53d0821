/*
 * roc_eval_kernel.h: the evaluator's GPU backend (roc_eval_kernel.cu), the
 * same calls as the CPU's (roc_internal.h), each returning a cudaError_t as
 * int; and the scores the evaluator computes from features, as a matrix.
 */
#ifndef ROC_EVAL_KERNEL_H
#define ROC_EVAL_KERNEL_H

#include <stdint.h>

#include "../roc_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct roc_eval_cuda roc_eval_cuda;

int roc_eval_cuda_create(roc_eval_cuda **out, const roc_source *src, const roc_counts *counts,
                         roc_genuine_levels *genuine /* OUT: host arrays */,
                         roc_totals *totals /* OUT: the genuine totals */,
                         roc_bad_input *bad /* OUT */);
int roc_eval_cuda_set_levels(roc_eval_cuda *backend, const roc_genuine_levels *levels,
                             const roc_level_index *shape /* no table: made on the device */,
                             int found /* levels is what create found */);
int roc_eval_cuda_add_rows(roc_eval_cuda *backend, roc_counts *counts, int64_t begin,
                           int64_t end);
int roc_eval_cuda_fetch(roc_eval_cuda *backend, roc_counts *counts);
/* Curve mode, before any fetch: scikit-learn's points of the device's counts
 * (roc_eval_curve_size), their number, the genuine pairs among the distinct
 * scores and all their pairs (NaN excluded); then the points themselves,
 * written to device arrays of that many elements. */
int roc_eval_cuda_curve_size(roc_eval_cuda *backend, const roc_genuine_levels *levels,
                             int every_point, int64_t *n_points, uint64_t *n_genuine,
                             uint64_t *n_all);
int roc_eval_cuda_curve_points(roc_eval_cuda *backend, void *keys, void *fps, void *tps);
int64_t roc_eval_cuda_peak_bytes(const roc_eval_cuda *backend);
void roc_eval_cuda_free(roc_eval_cuda *backend);
/* the rows of the feature pass's tile (roc_gemm.cuh) */
int64_t roc_eval_cuda_row_tile(void);

/* score (n_query, n_gallery) = the evaluator's scores from features. */
int roc_scores_launch(const float *feat_q, const float *feat_g, int64_t n_query,
                      int64_t n_gallery, int64_t dim, int similarity, float *score, int device,
                      void *stream);

#ifdef __cplusplus
}
#endif

#endif /* ROC_EVAL_KERNEL_H */
