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

/*
 * Evaluator (exact and binned ROC, and scikit-learn's curve), in steps so the
 * caller can show progress between them:
 *
 *   roc_eval_create     labels, and either a score matrix (Q, G) float32 or
 *                       features feat_q (Q, D) and feat_g (G, D) float32; finds
 *                       the genuine pairs and their scores
 *   roc_eval_add_rows   counts the pairs of query rows [row_begin, row_end)
 *   roc_eval_summarize  the curve, AUC, EER and TAR@FAR from the counts
 *
 * Labels come as dense codes: codes_q (Q,) and codes_g (G,) int32 in
 * [0, n_codes); pair (i, j) is genuine when codes_q[i] == codes_g[j]. With
 * same_set, the query set is the gallery (G = Q, codes_g = codes_q, feat_g =
 * feat_q) and only the pairs j > i count. The evaluator runs on the device of
 * codes_q (CPU or CUDA), on `stream` for CUDA; it keeps the descriptors' data
 * pointers, so the tensors must outlive it.
 *
 * Modes:
 *   ROC_MODE_EXACT   one pass, memory O(genuine pairs): the exact curve at all
 *                    of its corners, exact AUC, EER and TAR@FAR
 *   ROC_MODE_BINNED  one pass: numpy.histogram's uniform bins over [lo, hi]
 *   ROC_MODE_CURVE   scikit-learn's roc_curve point for point: counts every
 *                    distinct score, memory O(distinct scores)
 */
typedef struct roc_eval roc_eval;

typedef enum { ROC_MODE_EXACT = 0, ROC_MODE_BINNED = 1, ROC_MODE_CURVE = 2 } roc_mode;
typedef enum { ROC_COSINE = 0, ROC_DOT = 1 } roc_similarity;
typedef enum {
    ROC_FAR_MAX_TPR = 0,      /* the largest TPR whose FPR <= far */
    ROC_FAR_NEAREST = 1,      /* the curve point whose FPR is nearest far */
    ROC_FAR_FIRST_ABOVE = 2,  /* the first curve point whose FPR >= far */
    ROC_FAR_INTERPOLATE = 3   /* TPR linearly interpolated at FPR = far */
} roc_far_rule;

typedef struct {
    char caller[32];         /* the Python function, for messages: "evaluate" */
    int32_t mode;            /* roc_mode */
    int32_t same_set;        /* 0 or 1 */
    int32_t similarity;      /* roc_similarity, for features */
    int64_t bins;            /* binned mode */
    double range_lo;         /* binned mode */
    double range_hi;
} roc_eval_config;

/* The result; arrays are owned by it (roc_summary_free). */
typedef struct {
    int32_t mode;
    int64_t n_points;          /* the curve, thresholds descending */
    double *fpr;
    double *tpr;
    double *thresholds;        /* thresholds[0] = +inf */
    uint64_t *false_accepts;   /* impostor pairs at or above each threshold */
    uint64_t *true_accepts;    /* genuine pairs at or above each threshold */
    double auc;
    double eer;
    double eer_threshold;
    uint64_t n_genuine;        /* NaN pairs excluded */
    uint64_t n_impostor;
    uint64_t n_nan;            /* pairs with a NaN score, genuine or not */
    int64_t n_fars;
    double *far;               /* the targets */
    double *tar;
    double *far_threshold;     /* highest threshold with TPR >= tar */
    uint64_t *far_false_accepts;  /* impostor pairs at or above it */
    int64_t n_levels;          /* raw counts: exact, distinct genuine scores U; binned, bins */
    double *level_scores;      /* exact: the U genuine scores ascending; binned: n + 1 edges */
    uint64_t *genuine_counts;  /* per level (binned: per bin) */
    uint64_t *impostor_counts; /* exact: impostors on each genuine score; binned: per bin */
    uint64_t *impostor_between;     /* exact: U + 1 gaps (below level 0 .. above U - 1) */
    double *impostor_between_min;   /* exact: lowest impostor score per gap (NaN if empty) */
    uint64_t genuine_below, genuine_above, impostor_below, impostor_above;  /* binned */
    int64_t device_bytes_peak; /* the evaluator's own device memory at its peak */
} roc_summary;

int roc_eval_create(roc_eval **out /* OUT */, const roc_eval_config *config,
                    const ext_tensor *codes_q, const ext_tensor *codes_g, int64_t n_codes,
                    const ext_tensor *score, const ext_tensor *feat_q,
                    const ext_tensor *feat_g, void *stream);
int roc_eval_add_rows(roc_eval *eval, int64_t row_begin, int64_t row_end);
int roc_eval_summarize(roc_eval *eval, const double *fars, int64_t n_fars, int32_t far_rule,
                       roc_summary **out /* OUT */);
void roc_eval_free(roc_eval *eval);
void roc_summary_free(roc_summary *summary);

/* The scores the evaluator computes from features, as a (Q, G) matrix:
 * cosine or dot, each an fp32 dot product accumulated in index order. */
int roc_pair_scores(const ext_tensor *feat_q, const ext_tensor *feat_g, int32_t similarity,
                    const ext_tensor *score /* OUT: (Q, G) float32 */, void *stream);

#endif /* ROC_H */
