/*
 * roc_eval_cpu.c: the evaluator's CPU backend (C + OpenMP), behind the same
 * calls as the GPU's (roc_internal.h).
 *
 * Genuine pairs: the gallery sorted by label (then index), so the
 * genuine partners of a query are one contiguous group; their scores are
 * computed one by one, sorted and run-length encoded into the distinct
 * genuine levels. The counting pass walks tiles of (query rows x gallery
 * columns), scoring them from the features when there is no score matrix,
 * and counts every pair into thread-local counters merged after the pass.
 *
 * Every score from features is an fp32 dot product accumulated with fmaf in
 * index order (of L2-normalized rows, for cosine), as on the GPU, so the two
 * backends see bit-identical scores.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc_internal.h"
#include "roc_math.h"

#define LOW_LOCKS 4096 /* spin locks over nearest_sklearn's lists, gap p under p % LOW_LOCKS */

struct roc_eval_cpu {
    roc_source src;
    const char *caller;
    const float *feat_q, *feat_g;        /* normalized copies for cosine */
    float *owned_q, *owned_g;
    const roc_genuine_levels *levels;    /* set_levels' */
    const roc_level_index *index;
    unsigned char low_locks[LOW_LOCKS];
};

static int nomem(const roc_eval_cpu *b, const char *what)
{
    return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate %s", b->caller, what);
}

// ---------------------------------------------------------------------------
// scores (roc_scores_cpu.c)

#define TILE_ROWS ROC_CPU_TILE_ROWS
#define TILE_COLS ROC_CPU_TILE_COLS

int64_t roc_eval_cpu_row_tile(void) { return TILE_ROWS; }

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

// ---------------------------------------------------------------------------
// which pairs: rows of the query side, columns of the gallery

/* The gallery index of query row i when the queries are rows of the gallery's
 * own set (same_set). */
static inline int64_t set_row(const roc_source *s, int64_t i)
{
    return s->row_offset + i;
}

/* Whether pair (query row i, gallery column j) is counted: one set counts
 * j > i once (unordered) or every j != i (ordered). */
static inline int counted(const roc_source *s, int64_t i, int64_t j)
{
    if (s->same_set == ROC_SAME_SET_UNORDERED)
        return j > set_row(s, i);
    if (s->same_set == ROC_SAME_SET_ORDERED)
        return j != set_row(s, i);
    return 1;
}

// ---------------------------------------------------------------------------
// genuine pairs

/* The genuine partners of query row i: members[*first .. *last) of its label's
 * run (for one set, the members after it, or all of them, itself then
 * refused by `counted`), and how many pairs of them count. */
static int64_t partner_range(const roc_source *s, const roc_label_groups *groups, int64_t i,
                             int64_t *first, int64_t *last)
{
    const int64_t label = s->same_set ? roc_int_at(s->labels_g, s->label_dtype, set_row(s, i))
                                      : roc_int_at(s->labels_q, s->label_dtype, i);
    roc_label_run(groups, label, first, last);
    if (s->same_set == ROC_SAME_SET_UNORDERED)
        *first = groups->position[set_row(s, i)] + 1;
    return *last - *first - (s->same_set == ROC_SAME_SET_ORDERED);
}

static float pair_score(const roc_eval_cpu *b, int64_t i, int64_t j)
{
    const roc_source *s = &b->src;
    if (s->score)
        return s->score[i * s->n_gallery + j];
    return roc_cpu_dot(b->feat_q + i * s->dim, b->feat_g + j * s->dim, s->dim);
}

/* Sorts n genuine keys (tmp: scratch for n) and run-length encodes them into
 * the levels, n_nan of them NaN pairs (ROC_NO_KEY, sorted first). */
static int levels_from_keys(const roc_eval_cpu *b, uint32_t *keys, uint32_t *tmp, int64_t n,
                            uint64_t n_nan, roc_genuine_levels *genuine, roc_totals *totals)
{
    radix_sort_u32(keys, tmp, n);
    int64_t n_levels = 0;
    for (int64_t k = (int64_t)n_nan; k < n; k++)
        n_levels += k == (int64_t)n_nan || keys[k] != keys[k - 1];
    genuine->keys = ext_malloc((size_t)n_levels * sizeof(uint32_t));
    genuine->counts = ext_calloc((size_t)n_levels, sizeof(uint64_t));
    if (!genuine->keys || !genuine->counts)
        return nomem(b, "the genuine scores");
    int64_t u = -1;
    for (int64_t k = (int64_t)n_nan; k < n; k++) {
        if (k == (int64_t)n_nan || keys[k] != keys[k - 1])
            genuine->keys[++u] = keys[k];
        genuine->counts[u]++;
    }
    genuine->n_levels = n_levels;
    totals->n_genuine = (uint64_t)n - n_nan;
    totals->n_nan_genuine = n_nan;
    return EXT_OK;
}

/* The genuine scores of all (query, gallery) pairs as distinct sorted keys
 * with their counts. */
static int genuine_levels(roc_eval_cpu *b, roc_genuine_levels *genuine, roc_totals *totals)
{
    const roc_source *s = &b->src;
    roc_label_groups groups = {0};
    uint32_t *keys = NULL, *tmp = NULL;
    int64_t *offset = NULL;
    int st = roc_label_groups_make(s->labels_g, s->label_dtype, s->n_gallery, &groups);
    if (st) {
        st = nomem(b, "the label groups");
        goto done;
    }
    offset = ext_malloc((size_t)(s->n_query + 1) * sizeof *offset);
    if (!offset) {
        st = nomem(b, "the genuine pairs");
        goto done;
    }
    offset[0] = 0;
    for (int64_t i = 0; i < s->n_query; i++) {
        int64_t first, last;
        offset[i + 1] = offset[i] + partner_range(s, &groups, i, &first, &last);
    }
    const int64_t n_pairs = offset[s->n_query];
    keys = ext_malloc((size_t)n_pairs * sizeof *keys);
    tmp = ext_malloc((size_t)n_pairs * sizeof *tmp);
    if (!keys || !tmp) {
        st = nomem(b, "the genuine scores");
        goto done;
    }
    uint64_t n_nan = 0;
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : n_nan)
    for (int64_t i = 0; i < s->n_query; i++) {
        int64_t first, last, out = offset[i];
        partner_range(s, &groups, i, &first, &last);
        for (int64_t m = first; m < last; m++) {
            const int64_t j = groups.members[m];
            if (!counted(s, i, j))
                continue;
            const float score = pair_score(b, i, j);
            keys[out++] = isnan(score) ? ROC_NO_KEY : roc_score_key(score);
            n_nan += isnan(score);
        }
    }
    st = levels_from_keys(b, keys, tmp, n_pairs, n_nan, genuine, totals);
done:
    roc_label_groups_free(&groups);
    free(offset);
    free(keys);
    free(tmp);
    return st;
}

// ---------------------------------------------------------------------------
// a list of pairs

static float list_score(const roc_eval_cpu *b, int64_t t)
{
    const roc_source *s = &b->src;
    if (s->score)
        return s->score[t];
    return roc_cpu_dot(b->feat_q + roc_int_at(s->index_a, s->index_dtype, t) * s->dim,
                        b->feat_g + roc_int_at(s->index_b, s->index_dtype, t) * s->dim, s->dim);
}

/* Checks the list (flags 0/1, indices in range): the first bad position, or
 * -1 with the number of genuine pairs in *n_genuine. */
static void check_list(const roc_source *s, roc_bad_input *bad, int64_t *n_genuine)
{
    int64_t first_bad[3] = {INT64_MAX, INT64_MAX, INT64_MAX}, count = 0;
#pragma omp parallel for schedule(static) reduction(+ : count) \
    reduction(min : first_bad[:3])
    for (int64_t t = 0; t < s->n_query; t++) {
        const int64_t flag = roc_int_at(s->genuine, s->genuine_dtype, t);
        if (flag != 0 && flag != 1 && t < first_bad[0])
            first_bad[0] = t;
        count += flag == 1;
        if (s->index_a) {
            const int64_t a = roc_int_at(s->index_a, s->index_dtype, t);
            const int64_t g = roc_int_at(s->index_b, s->index_dtype, t);
            if ((a < 0 || a >= s->n_a) && t < first_bad[1])
                first_bad[1] = t;
            if ((g < 0 || g >= s->n_gallery) && t < first_bad[2])
                first_bad[2] = t;
        }
    }
    static const int kinds[3] = {ROC_BAD_GENUINE, ROC_BAD_INDEX_A, ROC_BAD_INDEX_B};
    for (int k = 0; k < 3 && !bad->kind; k++)
        if (first_bad[k] != INT64_MAX)
            *bad = (roc_bad_input){kinds[k], first_bad[k]};
    *n_genuine = count;
}

/* The genuine scores of a list of pairs as distinct sorted keys. */
static int list_genuine_levels(roc_eval_cpu *b, roc_genuine_levels *genuine, roc_totals *totals,
                               roc_bad_input *bad)
{
    const roc_source *s = &b->src;
    int64_t n_genuine = 0;
    check_list(s, bad, &n_genuine);
    if (bad->kind)
        return EXT_OK;
    uint32_t *keys = ext_malloc((size_t)n_genuine * sizeof *keys);
    uint32_t *tmp = ext_malloc((size_t)n_genuine * sizeof *tmp);
    int st = EXT_OK;
    if (!keys || !tmp) {
        st = nomem(b, "the genuine scores");
    } else {
        /* each of n_parts contiguous parts writes its genuine keys after the
         * parts before it */
        enum { n_parts = 256 };
        int64_t offset[n_parts + 1] = {0};
        const int64_t N = s->n_query, part = (N + n_parts - 1) / n_parts;
#pragma omp parallel for schedule(static)
        for (int p = 0; p < n_parts; p++) {
            const int64_t end = (p + 1) * part < N ? (p + 1) * part : N;
            for (int64_t t = p * part; t < end; t++)
                offset[p + 1] += roc_int_at(s->genuine, s->genuine_dtype, t) == 1;
        }
        for (int p = 0; p < n_parts; p++)
            offset[p + 1] += offset[p];
        uint64_t n_nan = 0;
#pragma omp parallel for schedule(static) reduction(+ : n_nan)
        for (int p = 0; p < n_parts; p++) {
            const int64_t end = (p + 1) * part < N ? (p + 1) * part : N;
            int64_t out = offset[p];
            for (int64_t t = p * part; t < end; t++) {
                if (roc_int_at(s->genuine, s->genuine_dtype, t) != 1)
                    continue;
                const float score = list_score(b, t);
                keys[out++] = isnan(score) ? ROC_NO_KEY : roc_score_key(score);
                n_nan += isnan(score);
            }
        }
        st = levels_from_keys(b, keys, tmp, n_genuine, n_nan, genuine, totals);
    }
    free(keys);
    free(tmp);
    return st;
}

// ---------------------------------------------------------------------------
// the counting pass

/* nearest_sklearn's lists (roc_internal.h), shared by the threads, each gap
 * under one of the backend's spin locks: `pairs` pairs of `key` meet gap p's
 * list. The key is counted if listed, else listed where it is among the
 * lowest so far (the last key leaving a full list). Each key of the final
 * list is counted at every one of its pairs: fewer keys than the list holds
 * lie below it at any time, so it is never refused nor pushed out. low_bound,
 * read by the pass without the lock, only falls: a stale read sends a key
 * here to be refused. */
static void list_add(roc_exact_counts *e, unsigned char *locks, int64_t p, uint32_t key,
                     uint64_t pairs)
{
    const int64_t K = e->n_low;
    uint32_t *keys = e->low_keys + p * K, *counts = e->low_counts + p * K;
    unsigned char *lock = locks + p % LOW_LOCKS;
    while (__atomic_test_and_set(lock, __ATOMIC_ACQUIRE))
        ;
    const int64_t lo = roc_first_key_at_least(keys, K, key); /* ROC_LOW_NONE pads the end */
    if (lo < K && keys[lo] != key) {
        memmove(keys + lo + 1, keys + lo, (size_t)(K - 1 - lo) * sizeof *keys);
        memmove(counts + lo + 1, counts + lo, (size_t)(K - 1 - lo) * sizeof *counts);
        keys[lo] = key;
        counts[lo] = 0;
        if (keys[K - 1] != ROC_LOW_NONE)
            __atomic_store_n(&e->low_bound[p], keys[K - 1], __ATOMIC_RELAXED);
    }
    if (lo < K)
        counts[lo] = pairs < (uint64_t)(UINT32_MAX - counts[lo]) ? counts[lo] + (uint32_t)pairs
                                                                   : UINT32_MAX;
    __atomic_clear(lock, __ATOMIC_RELEASE);
}

/* A thread's pairs on its way to the lists, by (gap, key): where a gap's list
 * is not yet full every pair of the gap goes there, and on few distinct scores
 * the threads would queue at the same locks; counted here first, they reach
 * the lists a (gap, key) at a time (the lists' counts do not depend on when). */
#define LOW_PENDING 1024
typedef struct {
    int64_t gap;
    uint32_t key;
    uint64_t pairs; /* 0: empty */
} low_pending;

/* One thread's counts, added into the evaluator's after the pass; and the
 * lists it adds to (NULL where not kept). */
typedef struct {
    uint64_t *at, *gap, *bins; /* exact: at (U), gap (U + 1); binned: bins (n + 2) */
    uint32_t *gap_min;
    uint32_t top_key;
    uint64_t top_count, n_nan, n_pairs;
    roc_exact_counts *low;
    unsigned char *low_locks;
    low_pending *pending; /* LOW_PENDING */
} local_counts;

static void keep_low_key(local_counts *local, int64_t p, uint32_t key)
{
    const uint64_t hash = ((uint64_t)p * 0x9e3779b97f4a7c15ull) ^ (key * 0xff51afd7ed558ccdull);
    low_pending *slot = &local->pending[(hash >> 32) % LOW_PENDING];
    if (slot->pairs && slot->gap == p && slot->key == key) {
        slot->pairs++;
        return;
    }
    if (slot->pairs)
        list_add(local->low, local->low_locks, slot->gap, slot->key, slot->pairs);
    *slot = (low_pending){p, key, 1};
}

static void low_flush(local_counts *local)
{
    for (int i = 0; local->pending && i < LOW_PENDING; i++)
        if (local->pending[i].pairs) {
            list_add(local->low, local->low_locks, local->pending[i].gap, local->pending[i].key,
                     local->pending[i].pairs);
            local->pending[i].pairs = 0;
        }
}

/* Counts pair score s; curve mode stores its key in *key_slot instead. */
static inline void count_pair(const roc_eval_cpu *b, const roc_counts *counts,
                              local_counts *local, float s, uint32_t *key_slot)
{
    local->n_pairs++;
    if (isnan(s)) {
        local->n_nan++;
        if (key_slot)
            *key_slot = ROC_NO_KEY;
        return;
    }
    if (b->src.mode == ROC_MODE_BINNED) {
        const roc_binned_counts *bins = &counts->binned;
        local->bins[roc_uniform_bin(s, bins->edges, bins->n_bins, bins->lo32, bins->scale32) + 1]++;
        return;
    }
    const uint32_t key = roc_score_key(s);
    if (key_slot) {
        *key_slot = key;
        return;
    }
    const roc_level_index *index = b->index;
    const uint32_t *levels = b->levels->keys;
    const int64_t U = b->levels->n_levels;
    int at = 0;
    int64_t level = 0;
    if (key > levels[U - 1])
        level = U;
    else if (key >= levels[0])
        level = roc_find_level(levels, index->lut, index->base, index->shift, key, &at);
    if (at) {
        local->at[level]++;
    } else {
        local->gap[level]++;
        if (local->low) { /* the list's first key is the gap's lowest */
            if (key <= __atomic_load_n(&local->low->low_bound[level], __ATOMIC_RELAXED))
                keep_low_key(local, level, key);
        } else if (key < local->gap_min[level]) {
            local->gap_min[level] = key;
        }
    }
    if (key > local->top_key || local->top_count == 0) {
        local->top_key = key;
        local->top_count = 1;
    } else if (key == local->top_key) {
        local->top_count++;
    }
}

static int local_alloc(roc_eval_cpu *b, roc_counts *counts, local_counts *local)
{
    const int64_t U = b->levels->n_levels;
    memset(local, 0, sizeof *local);
    if (b->src.mode == ROC_MODE_EXACT) {
        local->low = counts->exact.n_low ? &counts->exact : NULL;
        local->low_locks = b->low_locks;
        local->pending = local->low ? ext_calloc(LOW_PENDING, sizeof(low_pending)) : NULL;
        if (local->low && !local->pending)
            return EXT_ERR_NOMEM;
        local->at = ext_calloc((size_t)U, sizeof(uint64_t));
        local->gap = ext_calloc((size_t)U + 1, sizeof(uint64_t));
        local->gap_min = ext_malloc(((size_t)U + 1) * sizeof(uint32_t));
        if (!local->at || !local->gap || !local->gap_min)
            return EXT_ERR_NOMEM;
        memset(local->gap_min, 0xff, ((size_t)U + 1) * sizeof(uint32_t));
    } else if (b->src.mode == ROC_MODE_BINNED) {
        local->bins = ext_calloc((size_t)counts->binned.n_bins + 2, sizeof(uint64_t));
        if (!local->bins)
            return EXT_ERR_NOMEM;
    }
    return EXT_OK;
}

static void local_merge(const roc_eval_cpu *b, local_counts *local, roc_counts *counts)
{
    const int64_t U = b->levels->n_levels;
    counts->totals.n_pairs += local->n_pairs;
    counts->totals.n_nan += local->n_nan;
    if (b->src.mode == ROC_MODE_EXACT) {
        roc_exact_counts *e = &counts->exact;
        low_flush(local);
        for (int64_t u = 0; u < U; u++)
            e->at[u] += local->at[u];
        for (int64_t p = 0; p <= U; p++) {
            const uint32_t lowest = local->low ? local->low->low_keys[p * local->low->n_low]
                                               : local->gap_min[p];
            e->gap[p] += local->gap[p];
            if (lowest < e->gap_min[p])
                e->gap_min[p] = lowest;
        }
        if (local->top_count && (local->top_key > e->top_key || !e->top_count)) {
            e->top_key = local->top_key;
            e->top_count = local->top_count;
        } else if (local->top_count && local->top_key == e->top_key) {
            e->top_count += local->top_count;
        }
    } else if (b->src.mode == ROC_MODE_BINNED) {
        roc_binned_counts *bins = &counts->binned;
        bins->below += local->bins[0];
        for (int64_t k = 0; k < bins->n_bins; k++)
            bins->all[k] += local->bins[k + 1];
        bins->above += local->bins[bins->n_bins + 1];
    }
}

static void local_free(local_counts *local)
{
    free(local->pending);
    free(local->at);
    free(local->gap);
    free(local->gap_min);
    free(local->bins);
}

/* Curve mode: merges n sorted keys (NO_KEY first) into the distinct keys and
 * counts so far. */
static int merge_keys(const roc_eval_cpu *b, roc_key_counts *acc, const uint32_t *keys, int64_t n)
{
    int64_t k = 0;
    while (k < n && keys[k] == ROC_NO_KEY)
        k++;
    const int64_t capacity = acc->n_keys + (n - k);
    uint32_t *out_keys = ext_malloc((size_t)capacity * sizeof *out_keys);
    uint64_t *out_counts = ext_malloc((size_t)capacity * sizeof *out_counts);
    if (!out_keys || !out_counts) {
        free(out_keys);
        free(out_counts);
        return nomem(b, "the distinct scores");
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

/* Curve mode: n keys of a step sorted and merged into counts->keys. */
static int sort_merge_keys(const roc_eval_cpu *b, roc_counts *counts, uint32_t *keys, int64_t n)
{
    uint32_t *tmp = ext_malloc((size_t)n * sizeof *tmp);
    if (!tmp)
        return nomem(b, "the keys of a step (use a smaller chunk)");
    radix_sort_u32(keys, tmp, n);
    free(tmp);
    return merge_keys(b, &counts->keys, keys, n);
}

/* Curve mode: the keys of rows [row_begin, row_end), counted pairs only,
 * sorted and merged into counts->keys. */
static int merge_row_keys(const roc_eval_cpu *b, roc_counts *counts, uint32_t *keys,
                          int64_t row_begin, int64_t row_end)
{
    const roc_source *s = &b->src;
    const int64_t G = s->n_gallery;
    int64_t n = 0;
    for (int64_t i = row_begin; i < row_end; i++)
        for (int64_t j = 0; j < G; j++)
            if (counted(s, i, j))
                keys[n++] = keys[(i - row_begin) * G + j];
    return sort_merge_keys(b, counts, keys, n);
}

/* A list of pairs: pairs [begin, end), each thread over a contiguous part. */
static int add_list(roc_eval_cpu *b, roc_counts *counts, int64_t begin, int64_t end)
{
    const int curve_mode = b->src.mode == ROC_MODE_CURVE;
    uint32_t *keys = NULL;
    local_counts *locals = NULL;
    int n_threads = omp_get_max_threads(), failed = 0;
    locals = ext_calloc((size_t)n_threads, sizeof *locals);
    if (curve_mode)
        keys = ext_malloc((size_t)(end - begin) * sizeof *keys);
    failed = !locals || (curve_mode && !keys);
    for (int t = 0; !failed && t < n_threads; t++)
        failed = local_alloc(b, counts, &locals[t]) != EXT_OK;
    if (!failed) {
#pragma omp parallel for schedule(static)
        for (int64_t t = begin; t < end; t++)
            count_pair(b, counts, &locals[omp_get_thread_num()], list_score(b, t),
                       curve_mode ? &keys[t - begin] : NULL);
    }
    int st = EXT_OK;
    if (failed) {
        st = nomem(b, "per-thread counters");
    } else {
        for (int t = 0; t < n_threads; t++)
            local_merge(b, &locals[t], counts);
        if (curve_mode)
            st = sort_merge_keys(b, counts, keys, end - begin);
    }
    for (int t = 0; locals && t < n_threads; t++)
        local_free(&locals[t]);
    free(locals);
    free(keys);
    return st;
}

int roc_eval_cpu_add_rows(roc_eval_cpu *b, roc_counts *counts, int64_t row_begin, int64_t row_end)
{
    const roc_source *s = &b->src;
    if (s->list)
        return add_list(b, counts, row_begin, row_end);
    const int64_t G = s->n_gallery;
    const int features = s->score == NULL;
    const int64_t n_col_tiles = (G + TILE_COLS - 1) / TILE_COLS;
    const int64_t n_row_tiles = (row_end - row_begin + TILE_ROWS - 1) / TILE_ROWS;
    const int64_t n_tiles = n_row_tiles * n_col_tiles;
    const int curve_mode = s->mode == ROC_MODE_CURVE;
    uint32_t *keys = NULL;
    int failed = 0;
    if (curve_mode) {
        keys = ext_malloc((size_t)((row_end - row_begin) * G) * sizeof *keys);
        if (!keys)
            return nomem(b, "the keys of a block of rows (use a smaller chunk)");
    }

    /* every thread allocates first; the pass runs only if all of them could */
    local_counts *locals = NULL;
    roc_cpu_tile_scratch *scratch = NULL;
    int n_threads = 1;
#pragma omp parallel
    {
#pragma omp single
        {
            n_threads = omp_get_num_threads();
            locals = ext_calloc((size_t)n_threads, sizeof *locals);
            scratch = ext_calloc((size_t)n_threads, sizeof *scratch);
            failed = !locals || !scratch;
        }
        const int t = omp_get_thread_num();
        if (!failed) {
            const int ok = local_alloc(b, counts, &locals[t]) == EXT_OK &&
                           (!features || roc_cpu_tile_scratch_alloc(&scratch[t], s->dim));
            if (!ok) {
#pragma omp atomic write
                failed = 1;
            }
        }
#pragma omp barrier
        if (!failed) {
            float *tile = scratch[t].tile, *gT = scratch[t].gT; /* NULL from a score matrix */
#pragma omp for schedule(dynamic, 1)
            for (int64_t k = 0; k < n_tiles; k++) {
                const int64_t r0 = row_begin + (k / n_col_tiles) * TILE_ROWS;
                const int64_t c0 = (k % n_col_tiles) * TILE_COLS;
                const int64_t n_rows = row_end - r0 < TILE_ROWS ? row_end - r0 : TILE_ROWS;
                const int64_t n_cols = G - c0 < TILE_COLS ? G - c0 : TILE_COLS;
                if (s->same_set == ROC_SAME_SET_UNORDERED && c0 + n_cols <= set_row(s, r0) + 1)
                    continue; /* every column at or left of every row's diagonal */
                if (features)
                    roc_cpu_score_tile(b->feat_q, b->feat_g, s->dim, r0, n_rows, c0, n_cols, gT,
                                       tile);
                for (int64_t r = 0; r < n_rows; r++) {
                    const int64_t i = r0 + r;
                    for (int64_t c = 0; c < n_cols; c++) {
                        if (!counted(s, i, c0 + c))
                            continue;
                        const float score = features ? tile[r * TILE_COLS + c]
                                                     : s->score[i * G + c0 + c];
                        count_pair(b, counts, &locals[t], score,
                                   curve_mode ? &keys[(i - row_begin) * G + c0 + c] : NULL);
                    }
                }
            }
        }
    }
    int st = EXT_OK;
    if (failed) {
        st = nomem(b, "per-thread counters");
    } else {
        for (int t = 0; t < n_threads; t++)
            local_merge(b, &locals[t], counts);
        if (curve_mode)
            st = merge_row_keys(b, counts, keys, row_begin, row_end);
    }
    for (int t = 0; locals && t < n_threads; t++)
        local_free(&locals[t]);
    for (int t = 0; scratch && t < n_threads; t++)
        roc_cpu_tile_scratch_free(&scratch[t]);
    free(locals);
    free(scratch);
    free(keys);
    return st;
}

// ---------------------------------------------------------------------------
// the backend's life

int roc_eval_cpu_create(roc_eval_cpu **out, const roc_source *src, const roc_counts *counts,
                        const char *caller, roc_genuine_levels *genuine, roc_totals *totals,
                        roc_bad_input *bad)
{
    (void)counts; /* the CPU reads the bins' edges from the counts as it counts */
    *out = NULL;
    *bad = (roc_bad_input){ROC_BAD_NONE, -1};
    roc_eval_cpu *b = ext_calloc(1, sizeof *b);
    if (!b)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the evaluator", caller);
    b->src = *src;
    b->caller = caller;
    b->feat_q = src->feat_q;
    b->feat_g = src->feat_g;
    int st = EXT_OK;
    if (src->feat_q && src->similarity == ROC_COSINE) {
        /* one copy when the queries are the whole gallery */
        const int64_t n_q = src->list ? src->n_a : src->n_query;
        const int shared = src->feat_q == src->feat_g && n_q == src->n_gallery;
        b->owned_q = ext_malloc((size_t)(n_q * src->dim) * sizeof(float));
        b->owned_g = shared ? NULL : ext_malloc((size_t)(src->n_gallery * src->dim) * sizeof(float));
        if (!b->owned_q || (!shared && !b->owned_g)) {
            st = nomem(b, "the normalized features");
            goto fail;
        }
        roc_cpu_normalize_rows(src->feat_q, b->owned_q, n_q, src->dim);
        if (!shared)
            roc_cpu_normalize_rows(src->feat_g, b->owned_g, src->n_gallery, src->dim);
        b->feat_q = b->owned_q;
        b->feat_g = shared ? b->owned_q : b->owned_g;
    }
    st = src->list ? list_genuine_levels(b, genuine, totals, bad)
                   : genuine_levels(b, genuine, totals);
    if (st || bad->kind)
        goto fail;
    *out = b;
    return EXT_OK;
fail:
    roc_eval_cpu_free(b);
    return st;
}

int roc_eval_cpu_set_levels(roc_eval_cpu *b, const roc_genuine_levels *levels,
                            const roc_level_index *index)
{
    b->levels = levels;
    b->index = index;
    return EXT_OK;
}

void roc_eval_cpu_free(roc_eval_cpu *b)
{
    if (b == NULL)
        return;
    free(b->owned_q);
    free(b->owned_g);
    free(b);
}
