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
 * Bins follow roc_legacy_bin() in roc_math.h; NaN scores are skipped and
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
 * caller can show progress between them and, across processes, reduce what
 * each one counted:
 *
 *   roc_eval_create       labels, and either a score matrix (Q, G) float32 or
 *                         features feat_q (Q, D) and feat_g (G, D) float32; finds
 *                         the genuine pairs and their scores (the levels)
 *   roc_eval_set_levels   optional, before any rows: count against these levels
 *                         instead (every process's genuine levels, merged)
 *   roc_eval_add_rows     counts the pairs of query rows [row_begin, row_end)
 *   roc_eval_fetch        completes the host counts (roc_eval_counts views them;
 *                         the caller may reduce them in place across processes)
 *   roc_eval_summarize    the curve, AUC, EER and TAR@FAR from the host counts
 *                         (roc_summary_options: the rules of the EER and TAR@FAR,
 *                         a partial AUC, every point of the curve)
 *   roc_eval_set_gap_keys exact mode, nearest_sklearn: what a further pass over
 *                         the same pairs found of the rows a summary left pending
 *                         (roc_summary.far_pending_gap), for the next summary
 *
 * Labels come as integers: labels_q (Q,) and labels_g (G,), both int32 or both
 * int64, any values; pair (i, j) is genuine when labels_q[i] == labels_g[j].
 * (The Python side passes integer labels as they are, float labels as the
 * bits of their float64 value.) With same_set, the queries are rows
 * row_offset .. row_offset + Q - 1 of the gallery's own set (all of it, or one
 * process's shard): labels_q and feat_q are those rows of labels_g and feat_g
 * (or of the score matrix's set), pair
 * (i, j) means set entries (row_offset + i, j), and only j > row_offset + i
 * counts (ROC_SAME_SET_UNORDERED, each unordered pair once) or every
 * j != row_offset + i (ROC_SAME_SET_ORDERED, each unordered pair twice, as
 * IFRT counts). The evaluator runs on the device of labels_q (CPU or CUDA), on
 * `stream` for CUDA; it keeps the descriptors' data pointers, so the tensors
 * must outlive it.
 *
 * Modes:
 *   ROC_MODE_EXACT   one pass, memory O(genuine pairs): the exact curve at all
 *                    of its corners, exact AUC, EER and TAR@FAR (nearest_sklearn
 *                    may leave rows to further passes: roc_eval_set_gap_keys)
 *   ROC_MODE_BINNED  one pass: numpy.histogram's uniform bins over [lo, hi]
 *   ROC_MODE_CURVE   scikit-learn's roc_curve point for point: counts every
 *                    distinct score, memory O(distinct scores)
 */
typedef struct roc_eval roc_eval;

typedef enum { ROC_MODE_EXACT = 0, ROC_MODE_BINNED = 1, ROC_MODE_CURVE = 2 } roc_mode;
typedef enum { ROC_COSINE = 0, ROC_DOT = 1 } roc_similarity;
typedef enum {
    ROC_PAIRS_ALL = 0,           /* every (query, gallery) pair */
    ROC_SAME_SET_UNORDERED = 1,  /* one set: each unordered pair once */
    ROC_SAME_SET_ORDERED = 2     /* one set: each unordered pair twice */
} roc_same_set;
typedef enum {
    ROC_FAR_MAX_TPR = 0,      /* the largest TPR whose FPR <= far */
    ROC_FAR_NEAREST = 1,      /* the curve point whose FPR is nearest far */
    ROC_FAR_FIRST_ABOVE = 2,  /* the first curve point whose FPR >= far */
    ROC_FAR_INTERPOLATE = 3,  /* TPR linearly interpolated at FPR = far */
    ROC_FAR_NEAREST_SKLEARN = 4  /* InsightFace's IJB rule: the point nearest far, the
                                    highest TPR among equally near ones */
} roc_far_rule;
/* The EER, with P genuine and N impostor pairs, FPR = fps / N, FNR = 1 - tps / P: */
typedef enum {
    ROC_EER_CROSSING = 0,     /* where the curve's polyline crosses FPR = FNR: on the
                                 segment from the last point with FPR < FNR to the next,
                                 FPR linearly interpolated there */
    ROC_EER_NEAREST_MEAN = 1  /* torchmetrics' binary_eer: (FPR + FNR) / 2 at the point
                                 of the full curve (every distinct score) minimizing
                                 |FPR - FNR|, the first (lowest FPR) of equals; the
                                 comparison is exact (integers) */
} roc_eer_rule;

typedef struct {
    char caller[32];         /* the Python function, for messages: "evaluate" */
    int32_t mode;            /* roc_mode */
    int32_t same_set;        /* roc_same_set */
    int32_t similarity;      /* roc_similarity, for features */
    int64_t row_offset;      /* same_set: the set's row of query 0 */
    int64_t bins;            /* binned mode */
    double range_lo;         /* binned mode */
    double range_hi;
    int64_t step_rows;       /* rows each roc_eval_add_rows call is given, from row 0, where
                                the caller knows (0: not said): the GPU's feature pass may
                                start on the first call's rows before it comes */
    int32_t low_keys;        /* exact mode, the CPU: keep up to this many of the lowest
                                distinct scores of every gap between genuine scores, with
                                their pairs (fewer where the levels are many; 0: none), for
                                nearest_sklearn (roc_eval_set_gap_keys says why) */
} roc_eval_config;

/* An evaluator's levels and counts, for a caller that reduces them across
 * processes: pointers into the evaluator's host arrays, valid until the next
 * call on it that is not roc_eval_counts. Reduce with SUM: the totals, at,
 * gap, bins, below, above; MIN: gap_min; MAX: top_key, then top_count = SUM
 * of the counts of the processes whose top_key is the maximum. */
typedef struct {
    int32_t mode;
    int64_t n_levels;          /* U, the distinct genuine scores */
    uint32_t *level_keys;      /* U: their keys (roc_math.h), ascending */
    uint64_t *level_counts;    /* U: genuine pairs on each */
    uint64_t *totals;          /* 4: pairs, NaN pairs, genuine pairs, NaN genuine pairs */
    uint64_t *at;              /* exact, U: all pairs on each level */
    uint64_t *gap;             /* exact, U + 1 */
    uint32_t *gap_min;         /* exact, U + 1 */
    uint32_t *top_key;         /* exact, 1 */
    uint64_t *top_count;       /* exact, 1 */
    int64_t n_bins;
    uint64_t *bins;            /* binned, n_bins */
    uint64_t *below;           /* binned, 1 */
    uint64_t *above;           /* binned, 1 */
    int64_t n_keys;
    uint32_t *keys;            /* curve, n_keys: every distinct key, ascending */
    uint64_t *key_counts;      /* curve, n_keys */
} roc_counts_view;

/* What a summary reports beyond the curve and its AUC. */
typedef struct {
    const double *fars;        /* n_fars TAR@FAR targets, each in [0, 1] */
    int64_t n_fars;
    int32_t far_rule;          /* roc_far_rule */
    int32_t eer_rule;          /* roc_eer_rule */
    double max_fpr;            /* partial AUC over FPR in [0, max_fpr], max_fpr in (0, 1];
                                  0: none */
    int32_t every_point;       /* curve mode: a point at every distinct score, as
                                  scikit-learn's roc_curve(drop_intermediate=False), instead
                                  of drop_intermediate's; no FAR targets then (the rules are
                                  defined on drop_intermediate's points) */
} roc_summary_options;

/* The result; arrays are owned by it (roc_summary_free). */
typedef struct {
    int32_t mode;
    int64_t n_points;          /* the curve, thresholds descending */
    double *fpr;
    double *tpr;
    double *thresholds;        /* thresholds[0] = +inf */
    uint64_t *false_accepts;   /* impostor pairs at or above each threshold */
    uint64_t *true_accepts;    /* genuine pairs at or above each threshold */
    double auc;                /* the Mann-Whitney statistic U / (P N), ties counted half,
                                  rounded once from its exact integers */
    double partial_auc;        /* over FPR in [0, max_fpr], McClish-standardized as
                                  roc_auc_score(max_fpr=); NaN without max_fpr */
    double eer;                /* by the options' eer_rule */
    double eer_threshold;      /* the threshold of the point it stands on (crossing: the
                                  segment's end) */
    int32_t eer_undecided;     /* exact mode, ROC_EER_NEAREST_MEAN: the point nearest FPR =
                                  FNR may lie inside a run of impostors whose ties exact mode
                                  does not count; curve mode's summary decides it */
    uint64_t n_genuine;        /* NaN pairs excluded */
    uint64_t n_impostor;
    uint64_t n_nan;            /* pairs with a NaN score, genuine or not */
    int64_t n_fars;
    double *far;               /* the targets */
    double *tar;
    double *far_threshold;     /* highest threshold with TPR >= tar */
    uint64_t *far_false_accepts;  /* impostor pairs at or above it */
    int64_t *far_pending_gap;  /* exact mode, nearest_sklearn: -1 where the row is decided;
                                  else the gap whose scores from far_pending_from (a key) up
                                  to far_pending_end (excluded) decide it, and the row's tar
                                  and threshold are NaN until roc_eval_set_gap_keys gives them */
    uint32_t *far_pending_from;
    uint32_t *far_pending_end;
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
                    const ext_tensor *labels_q, const ext_tensor *labels_g,
                    const ext_tensor *score, const ext_tensor *feat_q,
                    const ext_tensor *feat_g, void *stream);
/* The evaluator of a list of N pairs instead of all (query, gallery) pairs:
 * genuine (N,) bool, uint8, int8, int32 or int64 holding 1 for a genuine pair
 * and 0 for an impostor; and either score (N,) float32, or features feat_a
 * (A, D) and feat_b (B, D) float32 with index_a (N,) and index_b (N,) int32
 * or int64 (one dtype): pair t is rows feat_a[index_a[t]] and
 * feat_b[index_b[t]], scored as roc_pair_scores would. The "rows" of
 * roc_eval_add_rows are then pairs; N may exceed 2^31. */
int roc_eval_create_pairs(roc_eval **out /* OUT */, const roc_eval_config *config,
                          const ext_tensor *genuine, const ext_tensor *score,
                          const ext_tensor *feat_a, const ext_tensor *feat_b,
                          const ext_tensor *index_a, const ext_tensor *index_b, void *stream);
/* An evaluator with no pairs of its own, for counts made elsewhere (streamed
 * batches, say): the caller sets its levels, writes the counts through
 * roc_eval_counts, and summarizes. */
int roc_eval_create_counts(roc_eval **out /* OUT */, const roc_eval_config *config);
int roc_eval_set_levels(roc_eval *eval, const uint32_t *keys, const uint64_t *counts,
                        int64_t n_levels, uint64_t n_nan_genuine);
int roc_eval_add_rows(roc_eval *eval, int64_t row_begin, int64_t row_end);
/* The rows of the feature pass's tile on a device of `device_type` (EXT_CPU,
 * EXT_CUDA): add_rows steps from features that cover whole multiples of it
 * never compute a tile twice (a step that ends inside one leaves the next
 * step to compute it again). */
int64_t roc_eval_row_tile(int32_t device_type);
int roc_eval_fetch(roc_eval *eval);
int roc_eval_counts(roc_eval *eval, roc_counts_view *out /* OUT */);
/* Curve mode: replaces the distinct keys and counts (merged across processes). */
int roc_eval_set_keys(roc_eval *eval, const uint32_t *keys, const uint64_t *counts,
                      int64_t n_keys);
/*
 * Exact mode, nearest_sklearn: the distinct scores of gap `gap` (the scores
 * strictly between genuine levels gap - 1 and gap, as roc_counts_view's gap[];
 * here keys `from` through `through`) with the pairs on each, ascending, every
 * score of that range with a pair listed; `from` is the row's
 * far_pending_from, so that what is known of the gap grows in order from its
 * lowest score. Found by an exact pass over the same pairs whose levels probe
 * those keys. InsightFace's rule takes the point of scikit-learn's
 * drop_intermediate curve nearest the target; inside a horizontal run of
 * impostor-only scores that curve keeps the scores whose pair count differs
 * from the next lower one's, which only these counts tell (roc_summary.c
 * proves which of them matter).
 */
int roc_eval_set_gap_keys(roc_eval *eval, int64_t gap, uint32_t from, uint32_t through,
                          const uint32_t *keys, const uint64_t *counts, int64_t n);
int roc_eval_summarize(roc_eval *eval, const roc_summary_options *options,
                       roc_summary **out /* OUT */);
/*
 * Curve mode: scikit-learn's roc_curve points (every_point 0: those its
 * drop_intermediate keeps; 1: one at every distinct score), highest score
 * first, without its leading (0, 0) point at +inf: each point's key
 * (roc_math.h's roc_score_key) and the impostor (fps) and genuine (tps) pairs
 * scoring at or above it. roc_eval_curve_size finds them and says how many;
 * then roc_eval_curve_points writes them into keys (int32 holding the uint32
 * keys' bits), fps and tps (int64), 1-D contiguous tensors of that many
 * elements. The GPU backend
 * builds them where it counted, into tensors on its device (only the points
 * leave it, not every distinct score); once the counts are on the host
 * (fetched: roc_eval_counts, set_keys), into CPU tensors, as the CPU backend.
 */
int roc_eval_curve_size(roc_eval *eval, int32_t every_point, int64_t *n_points /* OUT */);
int roc_eval_curve_points(roc_eval *eval, const ext_tensor *keys, const ext_tensor *fps,
                          const ext_tensor *tps);
void roc_eval_free(roc_eval *eval);
void roc_summary_free(roc_summary *summary);

/* The scores the evaluator computes from features, as a (Q, G) matrix:
 * cosine or dot, each an fp32 dot product accumulated in index order. */
int roc_pair_scores(const ext_tensor *feat_q, const ext_tensor *feat_g, int32_t similarity,
                    const ext_tensor *score /* OUT: (Q, G) float32 */, void *stream);

/* 1:N identification and re-ID ranking: roc_rank.h (cdef'd after this header). */
#include "roc_rank.h"

#endif /* ROC_H */
