/*
 * roc_internal.h: what the evaluator's passes count (on the CPU or the GPU)
 * and what roc_summary.c turns into a curve and its metrics. Host memory.
 *
 * Every pass counts *all* pairs, genuine and impostor alike; the genuine
 * pairs are known one by one from the labels (their scores computed apart),
 * so impostor counts are all-pair counts minus genuine counts. Scores are
 * compared through keys (roc_score_key): order-preserving uint32 values.
 */
#ifndef ROC_INTERNAL_H
#define ROC_INTERNAL_H

#include <stdint.h>

#include "roc.h"

/* The distinct genuine scores, ascending, and how many genuine pairs each. */
typedef struct {
    int64_t n_levels;
    uint32_t *keys;
    uint64_t *counts;
} roc_genuine_levels;

/*
 * Exact mode. With g[0] < ... < g[U-1] the distinct genuine keys, every pair
 * either sits on some g[u] (at[u]) or strictly inside one gap: gap p is
 * (g[p-1], g[p]), gap 0 below g[0], gap U above g[U-1]. Gaps hold impostor
 * pairs only. For each gap its lowest key (the threshold of the ROC corner
 * where the gap's horizontal run ends), and over all pairs the highest key
 * with its count (the curve's first point).
 */
typedef struct {
    uint64_t *at;        /* U: all pairs with key g[u], genuine included */
    uint64_t *gap;       /* U + 1 */
    uint32_t *gap_min;   /* U + 1: lowest key in the gap; UINT32_MAX when empty */
    uint32_t top_key;    /* highest key of any pair; ROC_NO_KEY when none */
    uint64_t top_count;  /* pairs with that key */
} roc_exact_counts;

/* Binned mode: all pairs per bin of numpy.histogram's uniform edges (the
 * arguments of roc_uniform_bin). */
typedef struct {
    int64_t n_bins;
    float *edges;        /* n_bins + 1 */
    float lo32, scale32;
    uint64_t *all;       /* n_bins */
    uint64_t below, above;
} roc_binned_counts;

/* Curve mode: every distinct key of all pairs with its count, ascending. */
typedef struct {
    int64_t n_keys;
    uint32_t *keys;
    uint64_t *counts;
} roc_key_counts;

/* Pair totals: NaN pairs are excluded from every count above. */
typedef struct {
    uint64_t n_pairs;          /* pairs visited, NaN included */
    uint64_t n_nan;            /* pairs with a NaN score */
    uint64_t n_genuine;        /* genuine pairs, NaN excluded */
    uint64_t n_nan_genuine;
} roc_totals;

/* The curve and metrics, built on the host (roc_summary.c). Returns an
 * ext_status; `out` is filled and owns its arrays. */
int roc_summarize_exact(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                        const roc_totals *totals, const double *fars, int64_t n_fars,
                        int far_rule, roc_summary *out);
int roc_summarize_binned(const roc_genuine_levels *genuine, const roc_binned_counts *counts,
                         const roc_totals *totals, const double *fars, int64_t n_fars,
                         int far_rule, roc_summary *out);
int roc_summarize_curve(const roc_genuine_levels *genuine, const roc_key_counts *counts,
                        const roc_totals *totals, const double *fars, int64_t n_fars,
                        int far_rule, roc_summary *out);

#endif /* ROC_INTERNAL_H */
