/*
 * roc_internal.h: between the evaluator's shim (roc_eval.c) and its two
 * backends, the CPU (roc_eval_cpu.c) and the GPU (cuda/roc_eval_kernel.cu):
 * the pairs to evaluate, what a pass counts, and what roc_summary.c turns
 * into a curve and its metrics. Host memory, plain C.
 *
 * Every pass counts *all* pairs, genuine and impostor alike; the genuine
 * pairs are known one by one beforehand (their scores computed apart), so
 * impostor counts are all-pair counts minus genuine counts. Scores are
 * compared through keys (roc_score_key): order-preserving uint32 values.
 */
#ifndef ROC_INTERNAL_H
#define ROC_INTERNAL_H

#include <stdint.h>

#include "ext_check.h"
#include "roc.h"

/* The distinct genuine scores (keys), ascending, and how many genuine pairs
 * each. */
typedef struct {
    int64_t n_levels;
    uint32_t *keys;
    uint64_t *counts;
} roc_genuine_levels;

/* The index over the levels that roc_find_level (roc_math.h) reads. */
typedef struct {
    uint32_t base;
    int shift;
    int64_t n_buckets;
    uint32_t *lut;       /* n_buckets + 1 */
} roc_level_index;

/*
 * Exact mode. With g[0] < ... < g[U-1] the distinct genuine keys, every pair
 * either sits on some g[u] (at[u]) or strictly inside one gap: gap p is
 * (g[p-1], g[p]), gap 0 below g[0], gap U above g[U-1]. Gaps hold impostor
 * pairs only. For each gap its lowest key (the threshold of the ROC corner
 * where the gap's horizontal run ends), and over all pairs the highest key
 * with its count (the curve's first point).
 */
typedef struct {
    uint64_t *at;        /* U: all pairs with key g[u], genuine included; the
                            block (roc_counts_alloc) that gap and gap_min are in */
    uint64_t *gap;       /* U + 1 */
    uint32_t *gap_min;   /* U + 1: lowest key in the gap; UINT32_MAX when empty */
    uint32_t top_key;    /* highest key of any pair; ROC_NO_KEY when none */
    uint64_t top_count;  /* pairs with that key */
    /* nearest_sklearn (roc_eval_config.low_keys, the CPU pass): the n_low lowest
     * distinct keys of each gap with their pairs, ascending (gap p at p * n_low);
     * ROC_LOW_NONE after the last where the gap has fewer; a count saturates at
     * UINT32_MAX. low_bound[p] is the list's last key once it is full, else
     * ROC_LOW_NONE: a key above it cannot enter the list. */
    int64_t n_low;
    uint32_t *low_keys;
    uint32_t *low_counts;
    uint32_t *low_bound;
} roc_exact_counts;

#define ROC_LOW_NONE UINT32_MAX /* a NaN's key: never a score's */

/* Exact mode, nearest_sklearn: what a probing pass found of one gap (roc.h's
 * roc_eval_set_gap_keys): every key from `from` through `through` with a pair,
 * ascending, and its pairs. */
typedef struct {
    int64_t gap;
    uint32_t from, through;
    int64_t n;
    uint32_t *keys;
    uint64_t *counts;
} roc_gap_keys;

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

/* Everything a pass counts: one set, in host memory, owned by the evaluator.
 * The CPU backend adds into it as it counts; the GPU backend counts on the
 * device and copies its totals here when fetched. */
typedef struct {
    roc_totals totals;
    roc_exact_counts exact;
    roc_binned_counts binned;
    roc_key_counts keys;
} roc_counts;

/* The pairs to evaluate, checked by the shim, on `device` (CUDA) or the CPU.
 *
 * All pairs (list = 0): (query i, gallery j) of a score matrix (Q, G) or of
 * features (Q, D) x (G, D); genuine where the labels (of label_dtype: int32 or
 * int64) are equal. With
 * same_set, the queries are rows row_offset .. row_offset + Q - 1 of the
 * gallery's set (a shard of it, or all of it).
 *
 * A list of pairs (list = 1): the "rows" are n_query = N pairs; pair t is
 * genuine when genuine[t] is 1 (0: impostor; of genuine_dtype, an ext_dtype),
 * and scores score[t], or the features' rows feat_q[index_a[t]] and
 * feat_g[index_b[t]] (of index_dtype; n_gallery is then feat_g's rows, n_a
 * feat_q's). */
typedef struct {
    int mode, same_set, similarity;
    int device;                              /* CUDA ordinal */
    void *stream;                            /* cudaStream_t */
    int64_t n_query, n_gallery, dim, row_offset;
    int64_t step_rows;                       /* roc_eval_config's (0: not said) */
    const void *labels_q, *labels_g;
    int label_dtype;                         /* EXT_INT32 or EXT_INT64 */
    const float *score, *feat_q, *feat_g;    /* one source: score, or both features */
    int list;
    int64_t n_a;
    const void *genuine, *index_a, *index_b;
    int genuine_dtype, index_dtype;
} roc_source;

/* What the backends found wrong in the data (the shim words the message). */
typedef enum {
    ROC_BAD_NONE = 0,
    ROC_BAD_GENUINE = 2,   /* genuine[index] is neither 0 nor 1 */
    ROC_BAD_INDEX_A = 3,   /* index_a[index] is not a row of feat_a */
    ROC_BAD_INDEX_B = 4    /* index_b[index] is not a row of feat_b */
} roc_bad_kind;

typedef struct {
    int kind;          /* roc_bad_kind */
    int64_t index;     /* the first position found wrong */
} roc_bad_input;

/*
 * The backends, behind the same calls (the CUDA ones return a cudaError_t as
 * int, the CPU ones an ext_status with its message set, naming `caller`):
 *
 *   create      finds the genuine pairs and their scores: the distinct genuine
 *               keys (*genuine, host arrays the caller frees) and the genuine
 *               totals; *bad says what of the data is wrong, if anything
 *   set_levels  counts against these levels from now on: (re)allocates and
 *               zeroes the counters (levels and index stay the caller's, alive
 *               until the next set_levels or free)
 *   add_rows    counts the pairs of query rows (list: pairs) [begin, end) into `counts`
 *               (the GPU: into its device counters, copied over `counts` by
 *               roc_eval_cuda_fetch)
 *   free        releases everything the backend holds
 */
typedef struct roc_eval_cpu roc_eval_cpu;

int roc_eval_cpu_create(roc_eval_cpu **out, const roc_source *src, const roc_counts *counts,
                        const char *caller, roc_genuine_levels *genuine /* OUT */,
                        roc_totals *totals /* OUT */, roc_bad_input *bad /* OUT */);
int roc_eval_cpu_set_levels(roc_eval_cpu *backend, const roc_genuine_levels *levels,
                            const roc_level_index *index);
int roc_eval_cpu_add_rows(roc_eval_cpu *backend, roc_counts *counts, int64_t begin, int64_t end);
void roc_eval_cpu_free(roc_eval_cpu *backend);
/* the rows of the CPU's tile of scores from features */
int64_t roc_eval_cpu_row_tile(void);

/* Scores from features on the CPU (roc_scores_cpu.c), the FMA chain of
 * roc_math.h:
 *   roc_cpu_normalize_rows  out (n, dim) = each row of x scaled for cosine
 *   roc_cpu_dot             one pair's score
 *   roc_cpu_score_tile      out[r * ROC_CPU_TILE_COLS + c] = the score of query row
 *                           r0 + r and gallery row c0 + c, for r < n_rows <=
 *                           ROC_CPU_TILE_ROWS and c < n_cols <= ROC_CPU_TILE_COLS;
 *                           gT is scratch for dim x ROC_CPU_TILE_COLS floats
 *   roc_scores_cpu          pair_scores: score (n_query, n_gallery) */
#define ROC_CPU_TILE_ROWS 8
#define ROC_CPU_TILE_COLS 64
void roc_cpu_normalize_rows(const float *x, float *out, int64_t n, int64_t dim);
float roc_cpu_dot(const float *a, const float *b, int64_t dim);
void roc_cpu_score_tile(const float *feat_q, const float *feat_g, int64_t dim, int64_t r0,
                        int64_t n_rows, int64_t c0, int64_t n_cols, float *gT, float *out);
int roc_scores_cpu(const float *feat_q, const float *feat_g, int64_t n_query, int64_t n_gallery,
                   int64_t dim, int similarity, float *score);
/* A thread's scratch for roc_cpu_score_tile: the tile it scores and the
 * gallery rows transposed. alloc returns 0 where memory ran out (free frees
 * what it got; both take a zeroed struct). */
typedef struct {
    float *tile, *gT;
} roc_cpu_tile_scratch;
int roc_cpu_tile_scratch_alloc(roc_cpu_tile_scratch *s, int64_t dim);
void roc_cpu_tile_scratch_free(roc_cpu_tile_scratch *s);

/* roc_curve_points.c: scikit-learn's points (every point with every_point)
 * of curve-mode counts that roc_check_curve_counts accepted, highest key
 * first: written to keys, fps and tps where keys is not NULL. Returns how
 * many there are. */
int64_t roc_curve_points_host(const roc_genuine_levels *genuine, const roc_key_counts *counts,
                              int every_point, uint32_t *keys, uint64_t *fps, uint64_t *tps);

/* roc_summary_checks.c: the counts a summary is given, checked first (each
 * an ext_status with its message). */
int roc_check_genuine_total(const roc_genuine_levels *genuine, const roc_totals *totals);
int roc_check_totals(uint64_t n_genuine, uint64_t n_impostor);
int roc_check_exact_counts(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                           uint64_t *n_impostor /* OUT */);
int roc_check_curve_counts(const roc_genuine_levels *genuine, const roc_key_counts *counts,
                           uint64_t *n_all /* OUT */);
int roc_check_binned_counts(const roc_binned_counts *counts, uint64_t gen_below,
                            const uint64_t *gen_bins, uint64_t gen_above,
                            uint64_t *n_impostor /* OUT */);

/* A step's checks, shared by the evaluators' shims (roc_shim_checks.c): an
 * evaluation an earlier step left broken is refused; rows [row_begin,
 * row_end) must lie in [0, n_rows). Each an ext_status naming caller. */
int roc_check_usable(const char *caller, int broken);
int roc_check_rows(const char *caller, int64_t row_begin, int64_t row_end, int64_t n_rows);

/* The shapes of an all-pairs source (score, or feat_q and feat_g) against
 * the labels' sizes, and one set's rows (roc_shim_checks.c); an ext_status
 * naming fn. */
int roc_check_pair_shapes(const char *fn, int64_t n_query, int64_t n_gallery,
                          const ext_tensor *score, const ext_tensor *feat_q,
                          const ext_tensor *feat_g, int same_set, int64_t row_offset);
/* The source's dtype (float32: score, else feat_q and feat_g), its arrays
 * appended to args[*n_args] for the placement checks. */
int roc_check_source_dtypes(const char *fn, const ext_tensor *score, const ext_tensor *feat_q,
                            const ext_tensor *feat_g, ext_arg *args, int *n_args);

/* A gallery of n labels grouped by label (roc_label_groups.c): members[t] is a
 * gallery index, sorted[t] its label, and entry j sits at members[position[j]];
 * each label's entries are one run, in index order. make returns EXT_OK or
 * EXT_ERR_NOMEM (no message: the caller words it); roc_label_run gives the run
 * [*first, *last) of `label` (empty where no entry has it). */
typedef struct {
    int64_t n;
    int64_t *members;
    int64_t *sorted;
    int64_t *position;
} roc_label_groups;

int roc_label_groups_make(const void *labels, int label_dtype, int64_t n,
                          roc_label_groups *groups /* OUT */);
void roc_label_run(const roc_label_groups *groups, int64_t label, int64_t *first, int64_t *last);
void roc_label_groups_free(roc_label_groups *groups);

/* The host arrays of `counts` for `mode` and U levels (or the bins
 * counts->binned.n_bins), zeroed, with n_low keys a gap kept in exact mode;
 * and their release. */
int roc_counts_alloc(roc_counts *counts, int mode, int64_t n_levels, int64_t n_low);
void roc_counts_free(roc_counts *counts);

/* The index's buckets over `levels` (no table), and the index with its table
 * (host); roc_level_index_free releases it. Table entry b is the first level
 * at or above roc_bucket_start(base, shift, b), for b = 0 .. n_buckets. */
roc_level_index roc_level_index_shape(const roc_genuine_levels *levels);
int roc_level_index_build(const roc_genuine_levels *levels, roc_level_index *index);
void roc_level_index_free(roc_level_index *index);

/* The curve and metrics, built on the host (roc_summary.c). Returns an
 * ext_status; `out` is filled and owns its arrays. */
int roc_summarize_exact(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                        const roc_totals *totals, const roc_summary_options *options,
                        const roc_gap_keys *probed, int64_t n_probed, roc_summary *out);
int roc_summarize_binned(const roc_genuine_levels *genuine, const roc_binned_counts *counts,
                         const roc_totals *totals, const roc_summary_options *options,
                         roc_summary *out);
int roc_summarize_curve(const roc_genuine_levels *genuine, const roc_key_counts *counts,
                        const roc_totals *totals, const roc_summary_options *options,
                        roc_summary *out);
/* Exact mode, nearest_sklearn: through which key gap p's keys are known, from
 * its lowest, by the pass's list and `probed` (n_probed records, in the order
 * given). */
uint32_t roc_gap_known_through(const roc_genuine_levels *genuine,
                               const roc_exact_counts *counts, const roc_gap_keys *probed,
                               int64_t n_probed, int64_t p);
/* The key that ends gap p (excluded): the level above it, or past the top key. */
uint32_t roc_gap_end(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                     int64_t p);

#endif /* ROC_INTERNAL_H */
