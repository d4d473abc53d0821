/*
 * roc_rank_eval.c: the rank count behind rank.evaluate(): argument checks,
 * the owner of the counts (host memory, roc_rank_view), and dispatch to the
 * CPU backend (roc_rank_cpu.c) or the GPU's (cuda/roc_rank_kernel.cu) by the
 * device of the inputs, behind roc_rank_internal.h's calls.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc_internal.h"
#include "roc_math.h"
#include "roc_rank_internal.h"
#ifdef EXT_WITH_CUDA
#include "cuda/roc_eval_kernel.h"
#include "cuda/roc_rank_kernel.h"
#endif


struct roc_rank {
    char caller[32];
    roc_rank_source src;
    roc_rank_view view;
    int broken;        /* an earlier step failed half-way: the counts are not whole */
    int counting;      /* rows were counted: the mates are fixed */
    roc_rank_cpu *cpu;
#ifdef EXT_WITH_CUDA
    roc_rank_cuda *cuda;
#endif
};

#ifdef EXT_WITH_CUDA
/* The ext_status of a GPU backend call. */
static int cuda_status(const roc_rank *rank, int err)
{
    return err ? ext_cuda_fail(rank->caller, err) : EXT_OK;
}
#endif

// ---------------------------------------------------------------------------
// the view's memory

int roc_rank_view_alloc(roc_rank_view *v, int64_t n_query, int64_t n_mated, int64_t topk,
                        int64_t keep)
{
    const size_t Q = (size_t)n_query, P = (size_t)n_mated, k = (size_t)topk;
    memset(v, 0, sizeof *v);
    v->n_query = n_query;
    v->n_mated = n_mated;
    v->topk = topk;
    v->first = ext_malloc((Q + 1) * sizeof *v->first);
    v->mate_key = ext_malloc(P * sizeof *v->mate_key);
    v->mate_index = ext_malloc(P * sizeof *v->mate_index);
    v->above = ext_calloc(P, sizeof *v->above);
    v->tied = ext_calloc(P, sizeof *v->tied);
    v->best_key = ext_calloc(Q, sizeof *v->best_key);
    v->best_index = ext_malloc(Q * sizeof *v->best_index);
    v->n_nonmates = ext_calloc(Q, sizeof *v->n_nonmates);
    v->nan_mates = ext_calloc(Q, sizeof *v->nan_mates);
    v->topk_index = ext_malloc(Q * k * sizeof *v->topk_index);
    v->topk_score = ext_malloc(Q * k * sizeof *v->topk_score);
    v->kept_keys = ext_malloc((size_t)keep * sizeof *v->kept_keys);
    v->totals = ext_calloc(2, sizeof *v->totals);
    if (!v->first || !v->mate_key || !v->mate_index || !v->above || !v->tied || !v->best_key ||
        !v->best_index || !v->n_nonmates || !v->nan_mates || !v->topk_index ||
        !v->topk_score || !v->kept_keys || !v->totals)
        return EXT_ERR_NOMEM;
    for (size_t i = 0; i < Q; i++)
        v->best_index[i] = -1;
    for (size_t t = 0; t < Q * k; t++) {
        v->topk_index[t] = -1;
        v->topk_score[t] = NAN;
    }
    return EXT_OK;
}

void roc_rank_view_free(roc_rank_view *v)
{
    free(v->first);
    free(v->mate_key);
    free(v->mate_index);
    free(v->above);
    free(v->tied);
    free(v->best_key);
    free(v->best_index);
    free(v->n_nonmates);
    free(v->nan_mates);
    free(v->topk_index);
    free(v->topk_score);
    free(v->kept_keys);
    free(v->totals);
    memset(v, 0, sizeof *v);
}

// ---------------------------------------------------------------------------
// checks

static int check_config(const roc_rank_config *config, const char *fn)
{
    if (config->similarity != ROC_COSINE && config->similarity != ROC_DOT)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown similarity %d", fn, config->similarity);
    if (config->same_set != 0 && config->same_set != 1)
        return ext_fail(EXT_ERR_VALUE, "%s: same_set must be 0 or 1, got %d", fn,
                        config->same_set);
    if (config->has_junk != 0 && config->has_junk != 1)
        return ext_fail(EXT_ERR_VALUE, "%s: has_junk must be 0 or 1, got %d", fn,
                        config->has_junk);
    if (config->topk < 0 || config->topk > ROC_RANK_MAX_TOPK)
        return ext_fail(EXT_ERR_VALUE, "%s: topk must lie in [0, %d], got %d", fn,
                        ROC_RANK_MAX_TOPK, config->topk);
    if (config->keep_nonmated < 0 || config->keep_nonmated > ((int64_t)1 << 40))
        return ext_fail(EXT_ERR_VALUE, "%s: keep_nonmated must lie in [0, 2^40], got %lld", fn,
                        (long long)config->keep_nonmated);
    return EXT_OK;
}

/* A pair of 1-D integer arrays of one dtype (labels, cameras) with n_query and
 * n_gallery elements. */
static int check_pair(const char *fn, const char *name_q, const ext_tensor *q,
                      const char *name_g, const ext_tensor *g)
{
    int st;
    const unsigned integers = EXT_MASK(EXT_INT32) | EXT_MASK(EXT_INT64);
    if ((st = ext_check_dtype(fn, name_q, q, integers)) ||
        (st = ext_check_dtype(fn, name_g, g, integers)))
        return st;
    if (q->dtype != g->dtype)
        return ext_fail(EXT_ERR_TYPE, "%s: %s is %s but %s is %s: give both one dtype", fn,
                        name_q, ext_dtype_name(q->dtype), name_g, ext_dtype_name(g->dtype));
    if ((st = ext_check_ndim(fn, name_q, q, 1)) || (st = ext_check_ndim(fn, name_g, g, 1)))
        return st;
    return EXT_OK;
}

static int check_create(const roc_rank_config *config, const ext_tensor *labels_q,
                        const ext_tensor *labels_g, const ext_tensor *cams_q,
                        const ext_tensor *cams_g, const ext_tensor *score,
                        const ext_tensor *feat_q, const ext_tensor *feat_g, const char *fn)
{
    int st;
    if ((st = check_config(config, fn)))
        return st;
    if ((score == NULL) == (feat_q == NULL) || (feat_q == NULL) != (feat_g == NULL))
        return ext_fail(EXT_ERR_VALUE, "%s: give either score, or feat_q and feat_g", fn);
    if ((cams_q == NULL) != (cams_g == NULL))
        return ext_fail(EXT_ERR_VALUE, "%s: give both cams_q and cams_g, or neither", fn);
    if ((st = check_pair(fn, "labels_q", labels_q, "labels_g", labels_g)))
        return st;
    ext_arg args[6] = {{"labels_q", labels_q}, {"labels_g", labels_g}};
    int n_args = 2;
    if (cams_q) {
        if ((st = check_pair(fn, "cams_q", cams_q, "cams_g", cams_g)))
            return st;
        args[n_args++] = (ext_arg){"cams_q", cams_q};
        args[n_args++] = (ext_arg){"cams_g", cams_g};
    }
    if ((st = roc_check_source_dtypes(fn, score, feat_q, feat_g, args, &n_args)))
        return st;
    if ((st = ext_check_devices(fn, args, n_args, labels_q->device_type, NULL)))
        return st;
    if (labels_q->device_type != EXT_CPU && labels_q->device_type != EXT_CUDA)
        return ext_fail(EXT_ERR_DEVICE, "%s: labels_q is on an unsupported device", fn);
    for (int a = 0; a < n_args; a++)
        if ((st = ext_check_contiguous(fn, args[a].name, args[a].t)))
            return st;
    const int64_t n_query = labels_q->sizes[0], n_gallery = labels_g->sizes[0];
    if (cams_q && cams_q->sizes[0] != n_query)
        return ext_fail(EXT_ERR_VALUE, "%s: cams_q has %lld elements but labels_q has %lld", fn,
                        (long long)cams_q->sizes[0], (long long)n_query);
    if (cams_g && cams_g->sizes[0] != n_gallery)
        return ext_fail(EXT_ERR_VALUE, "%s: cams_g has %lld elements but labels_g has %lld", fn,
                        (long long)cams_g->sizes[0], (long long)n_gallery);
    return roc_check_pair_shapes(fn, n_query, n_gallery, score, feat_q, feat_g,
                                 config->same_set, config->row_offset);
}

// ---------------------------------------------------------------------------
// entry points

int roc_rank_create(roc_rank **out, const roc_rank_config *config, const ext_tensor *labels_q,
                    const ext_tensor *labels_g, const ext_tensor *cams_q,
                    const ext_tensor *cams_g, const ext_tensor *score,
                    const ext_tensor *feat_q, const ext_tensor *feat_g, void *stream)
{
    char fn[32];
    snprintf(fn, sizeof fn, "%.31s", config->caller[0] ? config->caller : "rank");
    *out = NULL;
    int st = check_create(config, labels_q, labels_g, cams_q, cams_g, score, feat_q, feat_g, fn);
    if (st)
        return st;
    if (labels_q->device_type == EXT_CUDA) {
#ifdef EXT_WITH_CUDA
        /* the best non-mate's index shares a 64-bit word with its key */
        if (labels_g->sizes[0] >= (int64_t)UINT32_MAX)
            return ext_fail(EXT_ERR_VALUE, "%s: a gallery on the GPU holds fewer than 2^32 - 1 "
                            "entries, got %lld", fn, (long long)labels_g->sizes[0]);
#else
        return ext_no_cuda(fn, NULL);
#endif
    }
    roc_rank *rank = ext_calloc(1, sizeof *rank);
    if (!rank)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the evaluator", fn);
    memcpy(rank->caller, fn, sizeof fn);
    rank->src = (roc_rank_source){
        .similarity = config->similarity, .same_set = config->same_set,
        .has_junk = config->has_junk, .device = labels_q->device_index, .stream = stream,
        .n_query = labels_q->sizes[0], .n_gallery = labels_g->sizes[0],
        .dim = feat_q ? feat_q->sizes[1] : 0,
        .row_offset = config->same_set ? config->row_offset : 0, .junk = config->junk,
        .labels_q = labels_q->data, .labels_g = labels_g->data, .label_dtype = labels_q->dtype,
        .cams_q = cams_q ? cams_q->data : NULL, .cams_g = cams_g ? cams_g->data : NULL,
        .cam_dtype = cams_q ? cams_q->dtype : 0,
        .score = score ? score->data : NULL, .feat_q = feat_q ? feat_q->data : NULL,
        .feat_g = feat_g ? feat_g->data : NULL,
        .topk = config->topk, .keep_nonmated = config->keep_nonmated};
#ifdef EXT_WITH_CUDA
    if (labels_q->device_type == EXT_CUDA)
        st = cuda_status(rank, roc_rank_cuda_create(&rank->cuda, &rank->src, rank->caller,
                                                    &rank->view));
    else
#endif
        st = roc_rank_cpu_create(&rank->cpu, &rank->src, rank->caller, &rank->view);
    if (st) {
        roc_rank_free(rank);
        return st;
    }
    *out = rank;
    return EXT_OK;
}

static int check_usable(const roc_rank *rank)
{
    return roc_check_usable(rank->caller, rank->broken);
}

int roc_rank_add_rows(roc_rank *rank, int64_t row_begin, int64_t row_end)
{
    int st;
    if ((st = check_usable(rank)))
        return st;
    if ((st = roc_check_rows(rank->caller, row_begin, row_end, rank->src.n_query)))
        return st;
    if (row_begin == row_end || rank->src.n_gallery == 0)
        return EXT_OK;
    rank->counting = 1;
#ifdef EXT_WITH_CUDA
    if (rank->cuda)
        st = cuda_status(rank, roc_rank_cuda_add_rows(rank->cuda, &rank->view, row_begin,
                                                      row_end));
    else
#endif
        st = roc_rank_cpu_add_rows(rank->cpu, &rank->view, row_begin, row_end);
    if (st)
        rank->broken = 1;
    return st;
}

/* A copy of n elements of `size` bytes (one element where n is 0). */
static void *copy_of(const void *from, int64_t n, size_t size)
{
    void *out = ext_malloc((size_t)(n ? n : 1) * size);
    if (out && n)
        memcpy(out, from, (size_t)n * size);
    return out;
}

int roc_rank_set_mates(roc_rank *rank, const int64_t *first, const uint32_t *mate_key,
                       const int64_t *mate_index, int64_t n_mated)
{
    const char *fn = rank->caller;
    const int64_t Q = rank->src.n_query;
    int st;
    if ((st = check_usable(rank)))
        return st;
    if (rank->counting)
        return ext_fail(EXT_ERR_VALUE, "%s: the mates are set before any rows are counted", fn);
    if (n_mated < 0 || !first || (n_mated > 0 && (!mate_key || !mate_index)))
        return ext_fail(EXT_ERR_VALUE, "%s: the mates lack an array", fn);
    if ((st = roc_rank_check_mates(Q, n_mated, first, mate_key, fn)))
        return st;
    for (int64_t p = 0; p < n_mated; p++)
        if (mate_index[p] < 0)
            return ext_fail(EXT_ERR_VALUE, "%s: mated pair %lld has a negative gallery index",
                            fn, (long long)p);
    roc_rank_view *v = &rank->view;
    int64_t *first_new = copy_of(first, Q + 1, sizeof *first);
    uint32_t *key_new = copy_of(mate_key, n_mated, sizeof *mate_key);
    int64_t *index_new = copy_of(mate_index, n_mated, sizeof *mate_index);
    uint64_t *above_new = ext_calloc((size_t)(n_mated ? n_mated : 1), sizeof *above_new);
    uint64_t *tied_new = ext_calloc((size_t)(n_mated ? n_mated : 1), sizeof *tied_new);
    if (!first_new || !key_new || !index_new || !above_new || !tied_new) {
        free(first_new);
        free(key_new);
        free(index_new);
        free(above_new);
        free(tied_new);
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate %lld mated pairs", fn,
                        (long long)n_mated);
    }
    free(v->first);
    free(v->mate_key);
    free(v->mate_index);
    free(v->above);
    free(v->tied);
    v->first = first_new;
    v->mate_key = key_new;
    v->mate_index = index_new;
    v->above = above_new;
    v->tied = tied_new;
    v->n_mated = n_mated;
#ifdef EXT_WITH_CUDA
    if (rank->cuda)
        st = cuda_status(rank, roc_rank_cuda_set_mates(rank->cuda, v));
    else
#endif
        st = roc_rank_cpu_set_mates(rank->cpu, v);
    if (st)
        rank->broken = 1;
    return st;
}

int64_t roc_rank_row_tile(int32_t device_type)
{
#ifdef EXT_WITH_CUDA
    if (device_type == EXT_CUDA)
        return roc_eval_cuda_row_tile();
#endif
    (void)device_type;
    return ROC_CPU_TILE_ROWS;
}

int roc_rank_counts(roc_rank *rank, roc_rank_view *out)
{
    int st;
    if ((st = check_usable(rank)))
        return st;
#ifdef EXT_WITH_CUDA
    if (rank->cuda && (st = cuda_status(rank, roc_rank_cuda_finish(rank->cuda, &rank->view)))) {
        rank->broken = 1;
        return st;
    }
#endif
    if (rank->cpu)
        roc_rank_cpu_finish(rank->cpu, &rank->view);
    *out = rank->view;
    return EXT_OK;
}

int64_t roc_rank_device_bytes_peak(const roc_rank *rank)
{
#ifdef EXT_WITH_CUDA
    if (rank->cuda)
        return roc_rank_cuda_peak_bytes(rank->cuda);
#endif
    (void)rank;
    return 0;
}

void roc_rank_free(roc_rank *rank)
{
    if (rank == NULL)
        return;
    roc_rank_cpu_free(rank->cpu);
#ifdef EXT_WITH_CUDA
    roc_rank_cuda_free(rank->cuda);
#endif
    roc_rank_view_free(&rank->view);
    free(rank);
}

// ---------------------------------------------------------------------------
// the summary

/* A view made by a caller (several processes' concatenated) is checked before
 * anything indexes through it. */
static int check_view(const roc_rank_view *v, const char *fn)
{
    if (v->n_query < 0 || v->n_mated < 0 || v->topk < 0 || v->topk > ROC_RANK_MAX_TOPK ||
        v->n_kept < 0)
        return ext_fail(EXT_ERR_VALUE, "%s: the counts' sizes are negative or out of range", fn);
    const int has_queries = v->n_query > 0, has_mates = v->n_mated > 0;
    if (!v->first || !v->totals || (has_mates && (!v->mate_key || !v->above || !v->tied)) ||
        (has_queries && (!v->best_key || !v->n_nonmates || !v->nan_mates)) ||
        (v->n_kept > 0 && !v->kept_keys))
        return ext_fail(EXT_ERR_VALUE, "%s: the counts lack an array", fn);
    return roc_rank_check_mates(v->n_query, v->n_mated, v->first, v->mate_key, fn);
}

static int check_options(const roc_rank_summary_options *o, const char *fn)
{
    if (o->ties < ROC_TIES_PESSIMISTIC || o->ties > ROC_TIES_EXPECTED)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown ties policy %d", fn, o->ties);
    if (o->ap != ROC_AP_NONINTERPOLATED && o->ap != ROC_AP_TRAPEZOID)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown ap convention %d", fn, o->ap);
    if (o->fpir_rule < ROC_FPIR_NIST || o->fpir_rule > ROC_FPIR_INSIGHTFACE_STUDIO)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown fpir_rule %d", fn, o->fpir_rule);
    if (o->max_rank < 1 || o->max_rank > ((int64_t)1 << 31))
        return ext_fail(EXT_ERR_VALUE, "%s: max_rank must lie in [1, 2^31], got %lld", fn,
                        (long long)o->max_rank);
    if (o->n_fpirs < 0 || (o->n_fpirs > 0 && o->fpirs == NULL))
        return ext_fail(EXT_ERR_VALUE, "%s: n_fpirs targets must be given", fn);
    for (int64_t f = 0; f < o->n_fpirs; f++)
        if (!(o->fpirs[f] >= 0.0 && o->fpirs[f] <= 1.0))
            return ext_fail(EXT_ERR_VALUE, "%s: fpirs must lie in [0, 1], got %g", fn,
                            o->fpirs[f]);
    return EXT_OK;
}

int roc_rank_summarize(const roc_rank_view *counts, const roc_rank_summary_options *options,
                       const char *caller, roc_rank_summary **out)
{
    const char *fn = caller && caller[0] ? caller : "rank";
    int st;
    *out = NULL;
    if (counts == NULL || options == NULL)
        return ext_fail(EXT_ERR_VALUE, "%s: summarize needs the counts and the options", fn);
    if ((st = check_view(counts, fn)) || (st = check_options(options, fn)))
        return st;
    roc_rank_summary *s = ext_calloc(1, sizeof *s);
    if (!s)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the summary", fn);
    if ((st = roc_rank_summarize_view(counts, options, fn, s))) {
        roc_rank_summary_free(s);
        return st;
    }
    *out = s;
    return EXT_OK;
}
