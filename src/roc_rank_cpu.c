/*
 * roc_rank_cpu.c: the rank count's CPU backend (C + OpenMP), behind the calls
 * of roc_rank_internal.h.
 *
 * Mates: found from the labels (roc_rank_mates.c, shared with the GPU
 * backend), each scored with the pair score (roc_cpu_dot), NaN ones dropped
 * and counted, the rest sorted by key.
 *
 * The pass: each thread takes ROC_CPU_TILE_ROWS query rows at a time and
 * walks the whole gallery in tiles (scored by roc_cpu_score_tile from
 * features, or read from the score matrix), so a query's counters are
 * touched by one thread only and no score row is ever stored. A non-mate's
 * key is looked up among its query's sorted mate keys: it lands in a gap
 * between two of them (gap[first[i] + i + u], non-mates strictly between mate
 * keys u - 1 and u) or on one (tied[first[i] + u], on the first of equal
 * keys); finish turns the gaps into the non-mates above each mate.
 *
 * Memory beyond the inputs: the view (O(P + Q), O(Q k) with topk), the gaps
 * (P + Q), per thread a tile and a transposed gallery block (D x 64 floats)
 * and the kept keys (keep_nonmated); for cosine, normalized copies of the
 * features (as the evaluator makes them).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc_internal.h"
#include "roc_math.h"
#include "roc_rank_internal.h"

#define TILE_ROWS ROC_CPU_TILE_ROWS
#define TILE_COLS ROC_CPU_TILE_COLS

struct roc_rank_cpu {
    roc_rank_source src;
    const char *caller;
    const float *feat_q, *feat_g;        /* normalized copies for cosine */
    float *owned_q, *owned_g;
    uint64_t *gap;                       /* P + Q */
};

static int nomem(const roc_rank_cpu *b, const char *what)
{
    return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate %s", b->caller, what);
}

// ---------------------------------------------------------------------------
// which pairs

static inline int64_t label_q(const roc_rank_source *s, int64_t i)
{
    return roc_int_at(s->labels_q, s->label_dtype, i);
}

static inline int64_t label_g(const roc_rank_source *s, int64_t j)
{
    return roc_int_at(s->labels_g, s->label_dtype, j);
}

static float pair_score(const roc_rank_cpu *b, int64_t i, int64_t j)
{
    const roc_rank_source *s = &b->src;
    if (s->score)
        return s->score[i * s->n_gallery + j];
    return roc_cpu_dot(b->feat_q + i * s->dim, b->feat_g + j * s->dim, s->dim);
}

// ---------------------------------------------------------------------------
// mates

/* Every query's mates (roc_rank_mates.c) scored into the view. */
static int find_mates(roc_rank_cpu *b, roc_rank_view *view)
{
    const roc_rank_source *s = &b->src;
    roc_rank_candidates c;
    int st = roc_rank_candidates_make(s, b->caller, &c);
    if (st)
        return st;
    const int64_t n = c.slots[s->n_query];
    float *scores = ext_malloc((size_t)(n ? n : 1) * sizeof *scores);
    if (!scores) {
        roc_rank_candidates_free(&c);
        return nomem(b, "the mated pairs' scores");
    }
#pragma omp parallel for schedule(dynamic, 1024)
    for (int64_t t = 0; t < n; t++)
        scores[t] = pair_score(b, c.row[t], c.index[t]);
    st = roc_rank_mates_adopt(s, &c, scores, b->caller, view);
    free(scores);
    roc_rank_candidates_free(&c);
    return st;
}

// ---------------------------------------------------------------------------
// the pass

/* A thread's kept keys: a min-heap of at most `capacity` keys. */
typedef struct {
    uint32_t *keys;
    int64_t size, capacity;
} key_heap;

static void heap_offer(key_heap *h, uint32_t key)
{
    if (h->capacity == 0)
        return;
    int64_t at;
    if (h->size < h->capacity) {
        at = h->size++;
        while (at > 0 && h->keys[(at - 1) / 2] > key) {
            h->keys[at] = h->keys[(at - 1) / 2];
            at = (at - 1) / 2;
        }
        h->keys[at] = key;
        return;
    }
    if (key <= h->keys[0])
        return;
    at = 0;
    for (;;) {
        int64_t child = 2 * at + 1;
        if (child >= h->size)
            break;
        if (child + 1 < h->size && h->keys[child + 1] < h->keys[child])
            child++;
        if (h->keys[child] >= key)
            break;
        h->keys[at] = h->keys[child];
        at = child;
    }
    h->keys[at] = key;
}

static int descending(const void *x, const void *y)
{
    const uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a < b) - (a > b);
}

/* The view's kept keys and the threads' heaps merged: the highest
 * keep_nonmated of them. */
static int merge_kept(const roc_rank_cpu *b, roc_rank_view *view, const key_heap *heaps,
                      int n_heaps)
{
    int64_t n = view->n_kept;
    for (int t = 0; t < n_heaps; t++)
        n += heaps[t].size;
    uint32_t *all = ext_malloc((size_t)n * sizeof *all);
    if (!all)
        return nomem(b, "the kept non-mated scores");
    int64_t at = view->n_kept;
    if (at)
        memcpy(all, view->kept_keys, (size_t)at * sizeof *all);
    for (int t = 0; t < n_heaps; t++) {
        if (heaps[t].size)
            memcpy(all + at, heaps[t].keys, (size_t)heaps[t].size * sizeof *all);
        at += heaps[t].size;
    }
    qsort(all, (size_t)n, sizeof *all, descending);
    view->n_kept = n < b->src.keep_nonmated ? n : b->src.keep_nonmated;
    if (view->n_kept)
        memcpy(view->kept_keys, all, (size_t)view->n_kept * sizeof *all);
    free(all);
    return EXT_OK;
}

/* What one query row holds during the pass. */
typedef struct {
    int64_t i, label;
    int64_t n_mates;
    const uint32_t *keys;      /* its mate keys, ascending */
    uint64_t *gap, *tied;      /* its gap[0 .. n_mates], tied[0 .. n_mates - 1] */
    uint32_t best_key;
    int64_t best_index;
    uint64_t n_nonmates;
    int64_t *topk_index;       /* its k slots */
    float *topk_score;
    int64_t n_top;             /* slots filled */
} row_state;

static void row_open(const roc_rank_cpu *b, roc_rank_view *view, int64_t i, row_state *r)
{
    const roc_rank_source *s = &b->src;
    const int64_t first = view->first[i];
    r->i = i;
    r->label = label_q(s, i);
    r->n_mates = view->first[i + 1] - first;
    r->keys = view->mate_key + first;
    r->gap = b->gap + first + i;
    r->tied = view->tied + first;
    r->best_key = view->best_key[i];
    r->best_index = view->best_index[i];
    r->n_nonmates = view->n_nonmates[i];
    r->topk_index = view->topk_index + i * s->topk;
    r->topk_score = view->topk_score + i * s->topk;
    r->n_top = 0;
    while (r->n_top < s->topk && r->topk_index[r->n_top] >= 0)
        r->n_top++;
}

static void row_close(roc_rank_view *view, const row_state *r)
{
    view->best_key[r->i] = r->best_key;
    view->best_index[r->i] = r->best_index;
    view->n_nonmates[r->i] = r->n_nonmates;
}

/* Entry j with `score` into the row's top k (score descending, then index
 * ascending: the gallery is visited in index order, so an equal score already
 * held stays first). */
static void top_offer(row_state *r, int64_t k, int64_t j, float score)
{
    if (k == 0 || (r->n_top == k && !(score > r->topk_score[k - 1])))
        return;
    int64_t at = r->n_top < k ? r->n_top++ : k - 1;
    while (at > 0 && score > r->topk_score[at - 1]) {
        r->topk_score[at] = r->topk_score[at - 1];
        r->topk_index[at] = r->topk_index[at - 1];
        at--;
    }
    r->topk_score[at] = score;
    r->topk_index[at] = j;
}

/* A non-mate's key against the row's mate keys. */
static inline void count_nonmate(row_state *r, uint32_t key, int64_t j)
{
    const int64_t m = r->n_mates;
    if (m == 0 || key < r->keys[0]) {
        r->gap[0]++;
    } else if (key > r->keys[m - 1]) {
        r->gap[m]++;
    } else {
        int64_t lo = 0, hi = m - 1;  /* the first mate key >= key */
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (r->keys[mid] < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (r->keys[lo] == key)
            r->tied[lo]++;
        else
            r->gap[lo]++;
    }
    if (key > r->best_key) {
        r->best_key = key;
        r->best_index = j;
    }
    r->n_nonmates++;
}

/* Pair (row r, gallery j) with `score`: excluded, a mate (counted at create),
 * or a non-mate. */
static inline void count_pair(const roc_rank_source *s, row_state *r, key_heap *heap,
                              uint64_t *n_pairs, uint64_t *n_nan, int64_t j, float score)
{
    const int64_t label = label_g(s, j);
    if (roc_rank_excluded(s, r->i, r->label, label, j))
        return;
    (*n_pairs)++;
    if (label == r->label) {
        if (!isnan(score))
            top_offer(r, s->topk, j, score);
        return; /* a NaN mate was counted when the mates were scored */
    }
    if (isnan(score)) {
        (*n_nan)++;
        return;
    }
    top_offer(r, s->topk, j, score);
    const uint32_t key = roc_score_key(score);
    count_nonmate(r, key, j);
    if (r->n_mates)
        heap_offer(heap, key);
}

int roc_rank_cpu_add_rows(roc_rank_cpu *b, roc_rank_view *view, int64_t row_begin,
                          int64_t row_end)
{
    const roc_rank_source *s = &b->src;
    const int64_t G = s->n_gallery;
    const int features = s->score == NULL;
    const int64_t n_blocks = (row_end - row_begin + TILE_ROWS - 1) / TILE_ROWS;
    int failed = 0, n_threads = 1;
    key_heap *heaps = NULL;
    roc_cpu_tile_scratch *scratch = NULL;
    uint64_t n_pairs = 0, n_nan = 0;

    /* every thread allocates first; the pass runs only if all of them could */
#pragma omp parallel reduction(+ : n_pairs, n_nan)
    {
#pragma omp single
        {
            n_threads = omp_get_num_threads();
            heaps = ext_calloc((size_t)n_threads, sizeof *heaps);
            scratch = ext_calloc((size_t)n_threads, sizeof *scratch);
            failed = !heaps || !scratch;
        }
        const int t = omp_get_thread_num();
        if (!failed) {
            heaps[t].capacity = s->keep_nonmated;
            heaps[t].keys = ext_malloc((size_t)s->keep_nonmated * sizeof(uint32_t));
            const int ok = heaps[t].keys != NULL &&
                           (!features || roc_cpu_tile_scratch_alloc(&scratch[t], s->dim));
            if (!ok) {
#pragma omp atomic write
                failed = 1;
            }
        }
#pragma omp barrier
        if (!failed) {
            float *tile = scratch[t].tile, *gT = scratch[t].gT; /* NULL from a score matrix */
            row_state rows[TILE_ROWS];
#pragma omp for schedule(dynamic, 1)
            for (int64_t block = 0; block < n_blocks; block++) {
                const int64_t r0 = row_begin + block * TILE_ROWS;
                const int64_t n_rows = row_end - r0 < TILE_ROWS ? row_end - r0 : TILE_ROWS;
                for (int64_t r = 0; r < n_rows; r++)
                    row_open(b, view, r0 + r, &rows[r]);
                for (int64_t c0 = 0; c0 < G; c0 += TILE_COLS) {
                    const int64_t n_cols = G - c0 < TILE_COLS ? G - c0 : TILE_COLS;
                    if (features)
                        roc_cpu_score_tile(b->feat_q, b->feat_g, s->dim, r0, n_rows, c0, n_cols,
                                           gT, tile);
                    for (int64_t r = 0; r < n_rows; r++) {
                        const float *scores = features ? tile + r * TILE_COLS
                                                       : s->score + (r0 + r) * G + c0;
                        for (int64_t c = 0; c < n_cols; c++)
                            count_pair(s, &rows[r], &heaps[t], &n_pairs, &n_nan, c0 + c,
                                       scores[c]);
                    }
                }
                for (int64_t r = 0; r < n_rows; r++)
                    row_close(view, &rows[r]);
            }
        }
    }
    int st = EXT_OK;
    if (failed) {
        st = nomem(b, "per-thread scratch");
    } else {
        view->totals[0] += n_pairs;
        view->totals[1] += n_nan;
        if (s->keep_nonmated)
            st = merge_kept(b, view, heaps, n_threads);
    }
    for (int t = 0; heaps && t < n_threads; t++)
        free(heaps[t].keys);
    for (int t = 0; scratch && t < n_threads; t++)
        roc_cpu_tile_scratch_free(&scratch[t]);
    free(heaps);
    free(scratch);
    return st;
}

/* The gaps for the view's new mate lists (a query's pairs still tell its own
 * mates from its non-mates by label). */
int roc_rank_cpu_set_mates(roc_rank_cpu *b, const roc_rank_view *view)
{
    uint64_t *gap = ext_calloc((size_t)(view->n_mated + b->src.n_query), sizeof *gap);
    if (!gap)
        return nomem(b, "the counts");
    free(b->gap);
    b->gap = gap;
    return EXT_OK;
}

void roc_rank_cpu_finish(roc_rank_cpu *b, roc_rank_view *view)
{
    roc_rank_gaps_to_counts(view, b->gap);
}

// ---------------------------------------------------------------------------
// the backend's life

int roc_rank_cpu_create(roc_rank_cpu **out, const roc_rank_source *src, const char *caller,
                        roc_rank_view *view)
{
    *out = NULL;
    roc_rank_cpu *b = ext_calloc(1, sizeof *b);
    if (!b)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the evaluator", caller);
    b->src = *src;
    b->caller = caller;
    b->feat_q = src->feat_q;
    b->feat_g = src->feat_g;
    int st = EXT_OK;
    if (src->feat_q && src->similarity == ROC_COSINE) {
        /* one copy when the queries are the whole gallery */
        const int shared = src->feat_q == src->feat_g && src->n_query == src->n_gallery;
        b->owned_q = ext_malloc((size_t)(src->n_query * src->dim) * sizeof(float));
        b->owned_g = shared ? NULL
                            : ext_malloc((size_t)(src->n_gallery * src->dim) * sizeof(float));
        if (!b->owned_q || (!shared && !b->owned_g)) {
            st = nomem(b, "the normalized features");
            goto fail;
        }
        roc_cpu_normalize_rows(src->feat_q, b->owned_q, src->n_query, src->dim);
        if (!shared)
            roc_cpu_normalize_rows(src->feat_g, b->owned_g, src->n_gallery, src->dim);
        b->feat_q = b->owned_q;
        b->feat_g = shared ? b->owned_q : b->owned_g;
    }
    if ((st = find_mates(b, view)))
        goto fail;
    b->gap = ext_calloc((size_t)(view->n_mated + src->n_query), sizeof *b->gap);
    if (!b->gap) {
        st = nomem(b, "the counts");
        goto fail;
    }
    *out = b;
    return EXT_OK;
fail:
    roc_rank_cpu_free(b);
    return st;
}

void roc_rank_cpu_free(roc_rank_cpu *b)
{
    if (b == NULL)
        return;
    free(b->owned_q);
    free(b->owned_g);
    free(b->gap);
    free(b);
}
