/*
 * roc_eval.c: the evaluator behind evaluate() and roc_curve(): argument
 * checks, the CPU implementation of its passes, and dispatch to the CUDA
 * launchers (cuda/roc_eval_kernel.cu) for CUDA tensors.
 *
 * Steps (roc.h): create finds the genuine pairs from the label codes and
 * computes their scores one by one (O(genuine pairs)); each add_rows call is
 * one streaming pass over a block of query rows that counts all pairs
 * (roc_internal.h); summarize turns the counts into the curve and metrics
 * (roc_summary.c). Scores from features are computed tile by tile and never
 * stored whole; every score, in a tile or for a genuine pair, is the same
 * fp32 dot product accumulated with fmaf in index order, so both paths see
 * bit-identical values (and so do the CPU and the GPU).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc_bins.h"
#include "roc_internal.h"
#ifdef EXT_WITH_CUDA
#include "cuda/roc_kernel.h"
#endif

struct roc_eval {
    roc_eval_config config;
    char caller[32];
    int device_type, device_index;
    void *stream;
    int64_t n_query, n_gallery, dim;
    const float *score;              /* score source, or NULL */
    const float *feat_q, *feat_g;    /* feature source (normalized copies for cosine) */
    float *owned_q, *owned_g;        /* CPU cosine copies */
    roc_genuine_levels genuine;
    roc_totals totals;
    roc_exact_counts exact;          /* CPU counts (GPU: fetched at summarize) */
    roc_binned_counts binned;
    roc_key_counts keys;
#ifdef EXT_WITH_CUDA
    roc_eval_cuda *cuda;
#endif
};

/* ------------------------------------------------------------------------- */
/* shared helpers */

static int nomem(const roc_eval *ev, const char *what)
{
    return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate %s", ev->caller, what);
}

/* numpy.linspace(lo, hi, n + 1) in float64, then float32, as numpy.histogram
 * makes its edges for float32 data. */
static void uniform_edges(roc_binned_counts *b, double lo, double hi)
{
    const int64_t n = b->n_bins;
    const double step = (hi - lo) / (double)n;
    for (int64_t i = 0; i < n; i++)
        b->edges[i] = (float)((double)i * step + lo);
    b->edges[n] = (float)hi;
    b->lo32 = (float)lo;
    b->scale32 = (float)((double)n / (hi - lo));
}

/* LSD radix sort of n keys, 11 bits a pass; tmp holds n keys. */
static void radix_sort_u32(uint32_t *keys, uint32_t *tmp, int64_t n)
{
    static const int bits = 11, passes = 3;
    uint32_t *src = keys, *dst = tmp;
    int64_t count[1 << 11];
    for (int pass = 0; pass < passes; pass++) {
        const int shift = pass * bits;
        memset(count, 0, sizeof count);
        for (int64_t i = 0; i < n; i++)
            count[(src[i] >> shift) & 2047]++;
        int64_t sum = 0;
        for (int d = 0; d < 2048; d++) {
            int64_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift) & 2047]++] = src[i];
        uint32_t *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != keys)
        memcpy(keys, src, (size_t)n * sizeof *keys);
}

/* ------------------------------------------------------------------------- */
/* CPU: scores */

/* sum of squares in float64 in index order, then x * (1 / sqrt(sum)) rounded
 * to float32; the GPU does the same IEEE operations. */
static void normalize_rows(const float *x, float *out, int64_t n, int64_t dim)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double sum = 0.0;
        for (int64_t k = 0; k < dim; k++)
            sum += (double)x[i * dim + k] * (double)x[i * dim + k];
        const double inverse = 1.0 / sqrt(sum);
        for (int64_t k = 0; k < dim; k++)
            out[i * dim + k] = (float)((double)x[i * dim + k] * inverse);
    }
}

__attribute__((target_clones("fma", "default")))
static float dot_in_order(const float *a, const float *b, int64_t dim)
{
    float acc = 0.0f;
    for (int64_t k = 0; k < dim; k++)
        acc = fmaf(a[k], b[k], acc);
    return acc;
}

/* Tile of scores: out[r * TILE_COLS + c] for query rows [r0, r0 + n_rows) and
 * gallery rows [c0, c0 + n_cols); gT is scratch for the transposed gallery
 * block, so the inner loop runs over contiguous columns. */
#define TILE_ROWS 8
#define TILE_COLS 64
__attribute__((target_clones("fma", "default")))
static void score_tile(const float *feat_q, const float *feat_g, int64_t dim, int64_t r0,
                       int64_t n_rows, int64_t c0, int64_t n_cols, float *gT, float *out)
{
    for (int64_t k = 0; k < dim; k++)
        for (int64_t c = 0; c < TILE_COLS; c++)
            gT[k * TILE_COLS + c] = c < n_cols ? feat_g[(c0 + c) * dim + k] : 0.0f;
    for (int64_t r = 0; r < n_rows; r++) {
        float acc[TILE_COLS] = {0};
        const float *q = feat_q + (r0 + r) * dim;
        for (int64_t k = 0; k < dim; k++) {
            const float qk = q[k];
            const float *g = gT + k * TILE_COLS;
            for (int c = 0; c < TILE_COLS; c++)
                acc[c] = fmaf(qk, g[c], acc[c]);
        }
        memcpy(out + r * TILE_COLS, acc, sizeof acc);
    }
}

/* ------------------------------------------------------------------------- */
/* CPU: genuine pairs */

/* Groups the gallery by code (stable counting sort) and walks every genuine
 * pair (i, j): its score goes through `visit`. */
typedef struct {
    int64_t n_codes;
    int64_t *start;     /* n_codes + 1 */
    int64_t *members;   /* gallery indices, grouped by code, ascending within */
    int64_t *position;  /* same set: where query i sits in its code's group */
} code_groups;

static int group_codes(const roc_eval *ev, const int32_t *codes_q, const int32_t *codes_g,
                       int64_t n_codes, code_groups *groups)
{
    groups->n_codes = n_codes;
    groups->start = calloc((size_t)n_codes + 1, sizeof(int64_t));
    groups->members = malloc((size_t)(ev->n_gallery > 0 ? ev->n_gallery : 1) * sizeof(int64_t));
    groups->position = malloc((size_t)(ev->n_gallery > 0 ? ev->n_gallery : 1) * sizeof(int64_t));
    if (!groups->start || !groups->members || !groups->position)
        return nomem(ev, "the label groups");
    for (int64_t i = 0; i < ev->n_query; i++)
        if (codes_q[i] < 0 || codes_q[i] >= n_codes)
            return ext_fail(EXT_ERR_VALUE, "%s: label code %d of query %lld is outside [0, %lld)",
                            ev->caller, codes_q[i], (long long)i, (long long)n_codes);
    for (int64_t j = 0; j < ev->n_gallery; j++) {
        if (codes_g[j] < 0 || codes_g[j] >= n_codes)
            return ext_fail(EXT_ERR_VALUE,
                            "%s: label code %d of gallery entry %lld is outside [0, %lld)",
                            ev->caller, codes_g[j], (long long)j, (long long)n_codes);
        groups->start[codes_g[j] + 1]++;
    }
    for (int64_t c = 0; c < n_codes; c++)
        groups->start[c + 1] += groups->start[c];
    int64_t *fill = malloc((size_t)(n_codes > 0 ? n_codes : 1) * sizeof(int64_t));
    if (!fill)
        return nomem(ev, "the label groups");
    memcpy(fill, groups->start, (size_t)n_codes * sizeof(int64_t));
    for (int64_t j = 0; j < ev->n_gallery; j++) {
        int64_t at = fill[codes_g[j]]++;
        groups->members[at] = j;
        groups->position[j] = at;
    }
    free(fill);
    return EXT_OK;
}

static void free_groups(code_groups *groups)
{
    free(groups->start);
    free(groups->members);
    free(groups->position);
}

/* Genuine pairs of query i: members[first .. last) of its code's group. */
static void genuine_range(const roc_eval *ev, const code_groups *groups, const int32_t *codes_q,
                          int64_t i, int64_t *first, int64_t *last)
{
    const int32_t c = codes_q[i];
    *first = ev->config.same_set ? groups->position[i] + 1 : groups->start[c];
    *last = groups->start[c + 1];
}

static float pair_score(const roc_eval *ev, int64_t i, int64_t j)
{
    if (ev->score)
        return ev->score[i * ev->n_gallery + j];
    return dot_in_order(ev->feat_q + i * ev->dim, ev->feat_g + j * ev->dim, ev->dim);
}

/* The genuine scores, as distinct sorted keys with their counts. */
static int genuine_levels_cpu(roc_eval *ev, const int32_t *codes_q, const int32_t *codes_g,
                              int64_t n_codes)
{
    code_groups groups = {0};
    uint32_t *keys = NULL, *tmp = NULL;
    int64_t *offset = NULL;
    int st = group_codes(ev, codes_q, codes_g, n_codes, &groups);
    if (st)
        goto done;
    offset = malloc((size_t)(ev->n_query + 1) * sizeof *offset);
    if (!offset) {
        st = nomem(ev, "the genuine pairs");
        goto done;
    }
    offset[0] = 0;
    for (int64_t i = 0; i < ev->n_query; i++) {
        int64_t first, last;
        genuine_range(ev, &groups, codes_q, i, &first, &last);
        offset[i + 1] = offset[i] + (last > first ? last - first : 0);
    }
    const int64_t n_pairs = offset[ev->n_query];
    keys = malloc((size_t)(n_pairs > 0 ? n_pairs : 1) * sizeof *keys);
    tmp = malloc((size_t)(n_pairs > 0 ? n_pairs : 1) * sizeof *tmp);
    if (!keys || !tmp) {
        st = nomem(ev, "the genuine scores");
        goto done;
    }
    uint64_t n_nan = 0;
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : n_nan)
    for (int64_t i = 0; i < ev->n_query; i++) {
        int64_t first, last;
        genuine_range(ev, &groups, codes_q, i, &first, &last);
        for (int64_t m = first, out = offset[i]; m < last; m++, out++) {
            float s = pair_score(ev, i, groups.members[m]);
            keys[out] = isnan(s) ? ROC_NO_KEY : roc_score_key(s);
            n_nan += isnan(s);
        }
    }
    radix_sort_u32(keys, tmp, n_pairs);
    /* NaN pairs sorted first as ROC_NO_KEY; the rest run-length encoded */
    int64_t n_levels = 0;
    for (int64_t k = (int64_t)n_nan; k < n_pairs; k++)
        n_levels += k == (int64_t)n_nan || keys[k] != keys[k - 1];
    ev->genuine.keys = malloc((size_t)(n_levels > 0 ? n_levels : 1) * sizeof(uint32_t));
    ev->genuine.counts = calloc((size_t)(n_levels > 0 ? n_levels : 1), sizeof(uint64_t));
    if (!ev->genuine.keys || !ev->genuine.counts) {
        st = nomem(ev, "the genuine scores");
        goto done;
    }
    int64_t u = -1;
    for (int64_t k = (int64_t)n_nan; k < n_pairs; k++) {
        if (k == (int64_t)n_nan || keys[k] != keys[k - 1])
            ev->genuine.keys[++u] = keys[k];
        ev->genuine.counts[u]++;
    }
    ev->genuine.n_levels = n_levels;
    ev->totals.n_genuine = (uint64_t)n_pairs - n_nan;
    ev->totals.n_nan_genuine = n_nan;
done:
    free_groups(&groups);
    free(offset);
    free(keys);
    free(tmp);
    return st;
}

/* ------------------------------------------------------------------------- */
/* CPU: the counting pass */

/* One thread's counts; merged into the evaluator's after each pass. */
typedef struct {
    uint64_t *at, *gap, *bins; /* exact: at (U), gap (U + 1); binned: bins (n + 2) */
    uint32_t *gap_min;
    uint32_t *keys;            /* curve: the keys of this block of rows */
    uint32_t top_key;
    uint64_t top_count, n_nan, n_pairs;
} local_counts;

static inline void count_pair(const roc_eval *ev, local_counts *local, float s,
                              uint32_t *key_slot)
{
    local->n_pairs++;
    if (isnan(s)) {
        local->n_nan++;
        if (key_slot)
            *key_slot = ROC_NO_KEY;
        return;
    }
    if (ev->config.mode == ROC_MODE_BINNED) {
        const roc_binned_counts *b = &ev->binned;
        local->bins[roc_uniform_bin(s, b->edges, b->n_bins, b->lo32, b->scale32) + 1]++;
        return;
    }
    const uint32_t key = roc_score_key(s);
    if (key_slot) {
        *key_slot = key;
        return;
    }
    const uint32_t *g = ev->genuine.keys;
    int64_t lo = 0, hi = ev->genuine.n_levels;
    while (lo < hi) { /* the first genuine key >= key */
        int64_t mid = lo + (hi - lo) / 2;
        if (g[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < ev->genuine.n_levels && g[lo] == key) {
        local->at[lo]++;
    } else {
        local->gap[lo]++;
        if (key < local->gap_min[lo])
            local->gap_min[lo] = key;
    }
    if (key > local->top_key || local->top_count == 0) {
        local->top_key = key;
        local->top_count = 1;
    } else if (key == local->top_key) {
        local->top_count++;
    }
}

static int local_alloc(const roc_eval *ev, local_counts *local)
{
    const int64_t U = ev->genuine.n_levels;
    memset(local, 0, sizeof *local);
    if (ev->config.mode == ROC_MODE_EXACT) {
        local->at = calloc((size_t)U + 1, sizeof(uint64_t));
        local->gap = calloc((size_t)U + 1, sizeof(uint64_t));
        local->gap_min = malloc(((size_t)U + 1) * sizeof(uint32_t));
        if (!local->at || !local->gap || !local->gap_min)
            return EXT_ERR_NOMEM;
        memset(local->gap_min, 0xff, ((size_t)U + 1) * sizeof(uint32_t));
    } else if (ev->config.mode == ROC_MODE_BINNED) {
        local->bins = calloc((size_t)ev->binned.n_bins + 2, sizeof(uint64_t));
        if (!local->bins)
            return EXT_ERR_NOMEM;
    }
    return EXT_OK;
}

static void local_merge(roc_eval *ev, local_counts *local)
{
    const int64_t U = ev->genuine.n_levels;
    ev->totals.n_pairs += local->n_pairs;
    ev->totals.n_nan += local->n_nan;
    if (ev->config.mode == ROC_MODE_EXACT) {
        for (int64_t u = 0; u < U; u++)
            ev->exact.at[u] += local->at[u];
        for (int64_t p = 0; p <= U; p++) {
            ev->exact.gap[p] += local->gap[p];
            if (local->gap_min[p] < ev->exact.gap_min[p])
                ev->exact.gap_min[p] = local->gap_min[p];
        }
        if (local->top_count && (local->top_key > ev->exact.top_key || !ev->exact.top_count)) {
            ev->exact.top_key = local->top_key;
            ev->exact.top_count = local->top_count;
        } else if (local->top_count && local->top_key == ev->exact.top_key) {
            ev->exact.top_count += local->top_count;
        }
    } else if (ev->config.mode == ROC_MODE_BINNED) {
        ev->binned.below += local->bins[0];
        for (int64_t b = 0; b < ev->binned.n_bins; b++)
            ev->binned.all[b] += local->bins[b + 1];
        ev->binned.above += local->bins[ev->binned.n_bins + 1];
    }
}

static void local_free(local_counts *local)
{
    free(local->at);
    free(local->gap);
    free(local->gap_min);
    free(local->bins);
}

/* First counted column of query row i: past the diagonal for one set. */
static inline int64_t first_column(const roc_eval *ev, int64_t i)
{
    return ev->config.same_set ? i + 1 : 0;
}

/* Curve mode: merges the sorted keys of one block (NO_KEY first) into the
 * evaluator's distinct keys and counts. */
static int merge_keys(roc_eval *ev, const uint32_t *keys, int64_t n)
{
    roc_key_counts *acc = &ev->keys;
    int64_t k = 0;
    while (k < n && keys[k] == ROC_NO_KEY)
        k++;
    int64_t capacity = acc->n_keys + (n - k);
    uint32_t *out_keys = malloc((size_t)(capacity > 0 ? capacity : 1) * sizeof *out_keys);
    uint64_t *out_counts = malloc((size_t)(capacity > 0 ? capacity : 1) * sizeof *out_counts);
    if (!out_keys || !out_counts) {
        free(out_keys);
        free(out_counts);
        return nomem(ev, "the distinct scores");
    }
    int64_t a = 0, m = 0;
    while (a < acc->n_keys || k < n) {
        uint32_t key;
        uint64_t count = 0;
        if (k >= n || (a < acc->n_keys && acc->keys[a] <= keys[k])) {
            key = acc->keys[a];
            count = acc->counts[a++];
        } else {
            key = keys[k];
        }
        while (k < n && keys[k] == key) {
            count++;
            k++;
        }
        out_keys[m] = key;
        out_counts[m++] = count;
    }
    free(acc->keys);
    free(acc->counts);
    acc->keys = out_keys;
    acc->counts = out_counts;
    acc->n_keys = m;
    return EXT_OK;
}

static int add_rows_cpu(roc_eval *ev, int64_t row_begin, int64_t row_end)
{
    const int64_t G = ev->n_gallery;
    const int features = ev->score == NULL;
    const int64_t n_col_tiles = (G + TILE_COLS - 1) / TILE_COLS;
    const int64_t n_row_tiles = (row_end - row_begin + TILE_ROWS - 1) / TILE_ROWS;
    const int64_t n_tiles = n_row_tiles * n_col_tiles;
    const int curve_mode = ev->config.mode == ROC_MODE_CURVE;
    uint32_t *keys = NULL;
    int st = EXT_OK, failed = 0;
    if (curve_mode) {
        keys = malloc((size_t)((row_end - row_begin) * G > 0 ? (row_end - row_begin) * G : 1) *
                      sizeof *keys);
        if (!keys)
            return nomem(ev, "the keys of a block of rows (lower chunk)");
    }

#pragma omp parallel
    {
        local_counts local;
        float *tile = features ? malloc(TILE_ROWS * TILE_COLS * sizeof(float)) : NULL;
        float *gT = features ? malloc((size_t)ev->dim * TILE_COLS * sizeof(float)) : NULL;
        int ok = local_alloc(ev, &local) == EXT_OK && (!features || (tile && gT));
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_tiles; t++) {
            if (!ok)
                continue;
            const int64_t r0 = row_begin + (t / n_col_tiles) * TILE_ROWS;
            const int64_t c0 = (t % n_col_tiles) * TILE_COLS;
            const int64_t n_rows = row_end - r0 < TILE_ROWS ? row_end - r0 : TILE_ROWS;
            const int64_t n_cols = G - c0 < TILE_COLS ? G - c0 : TILE_COLS;
            if (ev->config.same_set && c0 + n_cols <= r0 + 1)
                continue; /* tile wholly on or below the diagonal */
            if (features)
                score_tile(ev->feat_q, ev->feat_g, ev->dim, r0, n_rows, c0, n_cols, gT, tile);
            for (int64_t r = 0; r < n_rows; r++) {
                const int64_t i = r0 + r;
                const int64_t c_first = first_column(ev, i) > c0 ? first_column(ev, i) - c0 : 0;
                for (int64_t c = c_first; c < n_cols; c++) {
                    float s = features ? tile[r * TILE_COLS + c] : ev->score[i * G + c0 + c];
                    count_pair(ev, &local, s,
                               curve_mode ? &keys[(i - row_begin) * G + c0 + c] : NULL);
                }
            }
        }
        if (ok) {
#pragma omp critical(roc_eval_merge)
            local_merge(ev, &local);
        }
        local_free(&local);
        free(tile);
        free(gT);
    }
    if (failed)
        st = nomem(ev, "per-thread counters");
    if (!st && curve_mode) {
        /* pairs on or below the diagonal (same set) were never written */
        int64_t n = 0;
        for (int64_t i = row_begin; i < row_end; i++)
            for (int64_t j = first_column(ev, i); j < G; j++)
                keys[n++] = keys[(i - row_begin) * G + j];
        uint32_t *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
        if (!tmp) {
            st = nomem(ev, "the keys of a block of rows (lower chunk)");
        } else {
            radix_sort_u32(keys, tmp, n);
            free(tmp);
            st = merge_keys(ev, keys, n);
        }
    }
    free(keys);
    return st;
}

/* ------------------------------------------------------------------------- */
/* entry points */

static int check_create(const roc_eval_config *config, const ext_tensor *codes_q,
                        const ext_tensor *codes_g, int64_t n_codes, const ext_tensor *score,
                        const ext_tensor *feat_q, const ext_tensor *feat_g, const char *fn)
{
    int st;
    if (config->mode < ROC_MODE_EXACT || config->mode > ROC_MODE_CURVE)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown mode %d", fn, config->mode);
    if (config->mode == ROC_MODE_BINNED) {
        if (config->bins < 1)
            return ext_fail(EXT_ERR_VALUE, "%s: bins must be at least 1, got %lld", fn,
                            (long long)config->bins);
        if (!isfinite(config->range_lo) || !isfinite(config->range_hi) ||
            !(config->range_lo < config->range_hi))
            return ext_fail(EXT_ERR_VALUE, "%s: range must be finite with lo < hi, got (%g, %g)",
                            fn, config->range_lo, config->range_hi);
    }
    if (config->similarity != ROC_COSINE && config->similarity != ROC_DOT)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown similarity %d", fn, config->similarity);
    if ((score == NULL) == (feat_q == NULL) || (feat_q == NULL) != (feat_g == NULL))
        return ext_fail(EXT_ERR_VALUE, "%s: give either score, or feat_q and feat_g", fn);

    ext_arg args[4] = {{"labels_q", codes_q}, {"labels_g", codes_g}};
    int n_args = 2;
    if ((st = ext_check_dtype(fn, "labels_q", codes_q, EXT_MASK(EXT_INT32))) ||
        (st = ext_check_dtype(fn, "labels_g", codes_g, EXT_MASK(EXT_INT32))))
        return st;
    if (score) {
        if ((st = ext_check_dtype(fn, "score", score, EXT_MASK(EXT_FLOAT32))))
            return st;
        args[n_args++] = (ext_arg){"score", score};
    } else {
        if ((st = ext_check_dtype(fn, "feat_q", feat_q, EXT_MASK(EXT_FLOAT32))) ||
            (st = ext_check_dtype(fn, "feat_g", feat_g, EXT_MASK(EXT_FLOAT32))))
            return st;
        args[n_args++] = (ext_arg){"feat_q", feat_q};
        args[n_args++] = (ext_arg){"feat_g", feat_g};
    }
    if ((st = ext_check_devices(fn, args, n_args, codes_q->device_type, NULL)))
        return st;
    if (codes_q->device_type != EXT_CPU && codes_q->device_type != EXT_CUDA)
        return ext_fail(EXT_ERR_DEVICE, "%s: labels_q is on an unsupported device", fn);
    for (int a = 0; a < n_args; a++)
        if ((st = ext_check_contiguous(fn, args[a].name, args[a].t)))
            return st;
    if ((st = ext_check_ndim(fn, "labels_q", codes_q, 1)) ||
        (st = ext_check_ndim(fn, "labels_g", codes_g, 1)))
        return st;
    const int64_t n_query = codes_q->sizes[0], n_gallery = codes_g->sizes[0];
    if (score) {
        if ((st = ext_check_ndim(fn, "score", score, 2)))
            return st;
        if (score->sizes[0] != n_query || score->sizes[1] != n_gallery)
            return ext_fail(EXT_ERR_VALUE, "%s: score is (Q, G) = (%lld, %lld) but labels_q has "
                            "%lld elements and labels_g %lld", fn, (long long)score->sizes[0],
                            (long long)score->sizes[1], (long long)n_query, (long long)n_gallery);
    } else {
        if ((st = ext_check_ndim(fn, "feat_q", feat_q, 2)) ||
            (st = ext_check_ndim(fn, "feat_g", feat_g, 2)))
            return st;
        if (feat_q->sizes[1] != feat_g->sizes[1])
            return ext_fail(EXT_ERR_VALUE, "%s: feat_q is (%lld, %lld) but feat_g is (%lld, %lld): "
                            "the feature dimensions differ", fn, (long long)feat_q->sizes[0],
                            (long long)feat_q->sizes[1], (long long)feat_g->sizes[0],
                            (long long)feat_g->sizes[1]);
        if (feat_q->sizes[0] != n_query)
            return ext_fail(EXT_ERR_VALUE, "%s: feat_q has %lld rows but labels_q has %lld "
                            "elements", fn, (long long)feat_q->sizes[0], (long long)n_query);
        if (feat_g->sizes[0] != n_gallery)
            return ext_fail(EXT_ERR_VALUE, "%s: feat_g has %lld rows but labels_g has %lld "
                            "elements", fn, (long long)feat_g->sizes[0], (long long)n_gallery);
    }
    if (config->same_set && n_query != n_gallery)
        return ext_fail(EXT_ERR_VALUE, "%s: same_set needs one set: %lld queries but %lld "
                        "gallery entries", fn, (long long)n_query, (long long)n_gallery);
    if (n_codes < 0 || n_codes > INT32_MAX)
        return ext_fail(EXT_ERR_VALUE, "%s: n_codes must lie in [0, 2^31), got %lld", fn,
                        (long long)n_codes);
    return EXT_OK;
}

/* Binned mode's edges and counters (known from the config alone). */
static int alloc_binned(roc_eval *ev)
{
    if (ev->config.mode != ROC_MODE_BINNED)
        return EXT_OK;
    ev->binned.n_bins = ev->config.bins;
    ev->binned.all = calloc((size_t)ev->config.bins, sizeof(uint64_t));
    ev->binned.edges = malloc(((size_t)ev->config.bins + 1) * sizeof(float));
    if (!ev->binned.all || !ev->binned.edges)
        return nomem(ev, "the bins");
    uniform_edges(&ev->binned, ev->config.range_lo, ev->config.range_hi);
    return EXT_OK;
}

/* Exact mode's counters, once the genuine levels are known. */
static int alloc_exact(roc_eval *ev)
{
    const int64_t U = ev->genuine.n_levels;
    if (ev->config.mode != ROC_MODE_EXACT)
        return EXT_OK;
    ev->exact.at = calloc((size_t)U + 1, sizeof(uint64_t));
    ev->exact.gap = calloc((size_t)U + 1, sizeof(uint64_t));
    ev->exact.gap_min = malloc(((size_t)U + 1) * sizeof(uint32_t));
    if (!ev->exact.at || !ev->exact.gap || !ev->exact.gap_min)
        return nomem(ev, "the exact counters");
    memset(ev->exact.gap_min, 0xff, ((size_t)U + 1) * sizeof(uint32_t));
    return EXT_OK;
}

int roc_eval_create(roc_eval **out, const roc_eval_config *config, const ext_tensor *codes_q,
                    const ext_tensor *codes_g, int64_t n_codes, const ext_tensor *score,
                    const ext_tensor *feat_q, const ext_tensor *feat_g, void *stream)
{
    char fn[32];
    snprintf(fn, sizeof fn, "%.31s", config->caller[0] ? config->caller : "roc");
    *out = NULL;
    int st = check_create(config, codes_q, codes_g, n_codes, score, feat_q, feat_g, fn);
    if (st)
        return st;
#ifndef EXT_WITH_CUDA
    if (codes_q->device_type == EXT_CUDA)
        return ext_no_cuda(fn, NULL);
#endif
    roc_eval *ev = calloc(1, sizeof *ev);
    if (!ev)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the evaluator", fn);
    ev->config = *config;
    memcpy(ev->caller, fn, sizeof fn);
    ev->device_type = codes_q->device_type;
    ev->device_index = codes_q->device_index;
    ev->stream = stream;
    ev->n_query = codes_q->sizes[0];
    ev->n_gallery = codes_g->sizes[0];
    ev->dim = feat_q ? feat_q->sizes[1] : 0;
    ev->score = score ? score->data : NULL;
    ev->feat_q = feat_q ? feat_q->data : NULL;
    ev->feat_g = feat_g ? feat_g->data : NULL;
    ev->exact.top_key = ROC_NO_KEY;
    if ((st = alloc_binned(ev)))
        goto fail;
    if (ev->device_type == EXT_CPU) {
        if (feat_q && config->similarity == ROC_COSINE) {
            ev->owned_q = malloc((size_t)(ev->n_query * ev->dim > 0 ? ev->n_query * ev->dim : 1) *
                                 sizeof(float));
            ev->owned_g = config->same_set ? NULL : malloc(
                (size_t)(ev->n_gallery * ev->dim > 0 ? ev->n_gallery * ev->dim : 1) * sizeof(float));
            if (!ev->owned_q || (!config->same_set && !ev->owned_g)) {
                st = nomem(ev, "the normalized features");
                goto fail;
            }
            normalize_rows(ev->feat_q, ev->owned_q, ev->n_query, ev->dim);
            if (!config->same_set)
                normalize_rows(ev->feat_g, ev->owned_g, ev->n_gallery, ev->dim);
            ev->feat_q = ev->owned_q;
            ev->feat_g = config->same_set ? ev->owned_q : ev->owned_g;
        }
        if ((st = genuine_levels_cpu(ev, codes_q->data, codes_g->data, n_codes)) ||
            (st = alloc_exact(ev)))
            goto fail;
    }
#ifdef EXT_WITH_CUDA
    else {
        roc_eval_cuda_setup setup = {
            .mode = config->mode, .same_set = config->same_set,
            .similarity = config->similarity, .device = ev->device_index, .stream = stream,
            .n_query = ev->n_query, .n_gallery = ev->n_gallery, .dim = ev->dim,
            .n_codes = n_codes, .codes_q = codes_q->data, .codes_g = codes_g->data,
            .score = ev->score, .feat_q = ev->feat_q, .feat_g = ev->feat_g,
            .binned = &ev->binned};
        int bad_code = 0;
        int err = roc_eval_cuda_create(&ev->cuda, &setup, &ev->genuine, &ev->totals, &bad_code);
        if (err) {
            st = ext_cuda_fail(fn, err);
            goto fail;
        }
        if (bad_code) {
            st = ext_fail(EXT_ERR_VALUE, "%s: a label code is outside [0, %lld)", fn,
                          (long long)n_codes);
            goto fail;
        }
        /* the counters live on the device; these host copies are filled at
         * summarize */
        if ((st = alloc_exact(ev)))
            goto fail;
    }
#endif
    *out = ev;
    return EXT_OK;
fail:
    roc_eval_free(ev);
    return st;
}

int roc_eval_add_rows(roc_eval *ev, int64_t row_begin, int64_t row_end)
{
    if (row_begin < 0 || row_end > ev->n_query || row_begin > row_end)
        return ext_fail(EXT_ERR_VALUE, "%s: rows [%lld, %lld) are outside [0, %lld)", ev->caller,
                        (long long)row_begin, (long long)row_end, (long long)ev->n_query);
    if (row_begin == row_end || ev->n_gallery == 0)
        return EXT_OK;
#ifdef EXT_WITH_CUDA
    if (ev->cuda) {
        int err = roc_eval_cuda_add_rows(ev->cuda, row_begin, row_end);
        return err ? ext_cuda_fail(ev->caller, err) : EXT_OK;
    }
#endif
    return add_rows_cpu(ev, row_begin, row_end);
}

int roc_eval_summarize(roc_eval *ev, const double *fars, int64_t n_fars, int32_t far_rule,
                       roc_summary **out)
{
    int st;
    *out = NULL;
#ifdef EXT_WITH_CUDA
    if (ev->cuda) {
        int err = roc_eval_cuda_fetch(ev->cuda, &ev->exact, &ev->binned, &ev->keys, &ev->totals);
        if (err)
            return ext_cuda_fail(ev->caller, err);
    }
#endif
    roc_summary *s = calloc(1, sizeof *s);
    if (!s)
        return nomem(ev, "the summary");
    roc_totals totals = ev->totals;
    if (ev->config.mode == ROC_MODE_EXACT)
        st = roc_summarize_exact(&ev->genuine, &ev->exact, &totals, fars, n_fars, far_rule, s);
    else if (ev->config.mode == ROC_MODE_BINNED)
        st = roc_summarize_binned(&ev->genuine, &ev->binned, &totals, fars, n_fars, far_rule, s);
    else
        st = roc_summarize_curve(&ev->genuine, &ev->keys, &totals, fars, n_fars, far_rule, s);
    if (st) {
        /* the summarizers name no caller: prefix ours */
        char message[1024];
        snprintf(message, sizeof message, "%s", ext_last_error());
        const char *body = strncmp(message, "roc: ", 5) == 0 ? message + 5 : message;
        ext_fail(st, "%s: %s", ev->caller, body);
        roc_summary_free(s);
        return st;
    }
#ifdef EXT_WITH_CUDA
    if (ev->cuda)
        s->device_bytes_peak = roc_eval_cuda_peak_bytes(ev->cuda);
#endif
    *out = s;
    return EXT_OK;
}

void roc_eval_free(roc_eval *ev)
{
    if (ev == NULL)
        return;
#ifdef EXT_WITH_CUDA
    roc_eval_cuda_free(ev->cuda);
#endif
    free(ev->owned_q);
    free(ev->owned_g);
    free(ev->genuine.keys);
    free(ev->genuine.counts);
    free(ev->exact.at);
    free(ev->exact.gap);
    free(ev->exact.gap_min);
    free(ev->binned.all);
    free(ev->binned.edges);
    free(ev->keys.keys);
    free(ev->keys.counts);
    free(ev);
}

/* ------------------------------------------------------------------------- */
/* the score matrix the evaluator sees from features */

int roc_pair_scores(const ext_tensor *feat_q, const ext_tensor *feat_g, int32_t similarity,
                    const ext_tensor *score, void *stream)
{
    const char *fn = "pair_scores";
    const ext_arg args[] = {{"feat_q", feat_q}, {"feat_g", feat_g}, {"score", score}};
    int st;
    for (int a = 0; a < 3; a++)
        if ((st = ext_check_dtype(fn, args[a].name, args[a].t, EXT_MASK(EXT_FLOAT32))) ||
            (st = ext_check_contiguous(fn, args[a].name, args[a].t)) ||
            (st = ext_check_ndim(fn, args[a].name, args[a].t, 2)))
            return st;
    if ((st = ext_check_devices(fn, args, 3, feat_q->device_type, NULL)))
        return st;
    const int64_t Q = feat_q->sizes[0], G = feat_g->sizes[0], D = feat_q->sizes[1];
    if (feat_g->sizes[1] != D)
        return ext_fail(EXT_ERR_VALUE, "%s: feat_q is %lld-D but feat_g is %lld-D", fn,
                        (long long)D, (long long)feat_g->sizes[1]);
    if (score->sizes[0] != Q || score->sizes[1] != G)
        return ext_fail(EXT_ERR_VALUE, "%s: score must be (%lld, %lld)", fn, (long long)Q,
                        (long long)G);
    if (similarity != ROC_COSINE && similarity != ROC_DOT)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown similarity %d", fn, similarity);
    if (feat_q->device_type == EXT_CUDA) {
#ifdef EXT_WITH_CUDA
        int err = roc_scores_launch(feat_q->data, feat_g->data, Q, G, D, similarity, score->data,
                                    feat_q->device_index, stream);
        return err ? ext_cuda_fail(fn, err) : EXT_OK;
#else
        return ext_no_cuda(fn, NULL);
#endif
    }
    const float *fq = feat_q->data, *fg = feat_g->data;
    float *nq = NULL, *ng = NULL;
    if (similarity == ROC_COSINE) {
        nq = malloc((size_t)(Q * D > 0 ? Q * D : 1) * sizeof(float));
        ng = malloc((size_t)(G * D > 0 ? G * D : 1) * sizeof(float));
        if (!nq || !ng) {
            free(nq);
            free(ng);
            return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the normalized features", fn);
        }
        normalize_rows(fq, nq, Q, D);
        normalize_rows(fg, ng, G, D);
        fq = nq;
        fg = ng;
    }
    float *out = score->data;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < Q; i++)
        for (int64_t j = 0; j < G; j++)
            out[i * G + j] = dot_in_order(fq + i * D, fg + j * D, D);
    free(nq);
    free(ng);
    return EXT_OK;
}
