/*
 * roc_eval.c: the evaluator behind evaluate() and roc_curve(): argument
 * checks, the owner of what the passes count (host memory), and dispatch to
 * the CPU backend (roc_eval_cpu.c) or the GPU backend
 * (cuda/roc_eval_kernel.cu) by the device of the inputs.
 *
 * Steps (roc.h): create finds the genuine pairs and their scores (O(genuine
 * pairs)) and indexes the distinct genuine scores (the levels); each add_rows
 * call is one streaming pass over a block of query rows that counts all pairs
 * (roc_internal.h); fetch completes the host counts, which a caller may reduce
 * across processes; summarize turns them into the curve and metrics
 * (roc_summary.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc_internal.h"
#include "roc_math.h"
#ifdef EXT_WITH_CUDA
#include "cuda/roc_eval_kernel.h"
#endif

struct roc_eval {
    roc_eval_config config;
    char caller[32];
    roc_source src;
    roc_genuine_levels genuine;
    roc_level_index index;
    roc_counts counts;
    roc_gap_keys *probed;  /* exact mode, nearest_sklearn: set_gap_keys' records */
    int64_t n_probed;
    int rows_added;   /* set_levels is refused once rows are counted */
    int fetched;      /* the host counts are complete (and may be reduced) */
    int64_t curve_points;  /* curve_size's answer (-1: not asked since the counts changed) */
    int curve_every;       /* ... for every point, or scikit-learn's */
    int broken;       /* an earlier step failed half-way: the counts are not whole */
    roc_eval_cpu *cpu;
#ifdef EXT_WITH_CUDA
    roc_eval_cuda *cuda;
#endif
};

static int nomem(const roc_eval *ev, const char *what)
{
    return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate %s", ev->caller, what);
}

#ifdef EXT_WITH_CUDA
/* The ext_status of a GPU backend call. */
static int cuda_status(const roc_eval *ev, int err)
{
    return err ? ext_cuda_fail(ev->caller, err) : EXT_OK;
}
#endif

// ---------------------------------------------------------------------------
// host counts and the level index

int roc_counts_alloc(roc_counts *c, int mode, int64_t n_levels, int64_t n_low)
{
    free(c->exact.at); /* with gap and gap_min */
    free(c->exact.low_keys);
    free(c->exact.low_counts);
    free(c->exact.low_bound);
    free(c->binned.all);
    memset(&c->exact, 0, sizeof c->exact);
    c->binned.all = NULL;
    c->binned.below = c->binned.above = 0;
    c->exact.top_key = ROC_NO_KEY;
    c->totals.n_pairs = c->totals.n_nan = 0;
    if (mode == ROC_MODE_EXACT) {
        /* one block, at[U + 1], gap[U + 1], gap_min[U + 1], laid out as the
         * GPU backend's counters so that one copy fetches all three */
        const size_t n = (size_t)n_levels + 1;
        uint64_t *block = ext_calloc(2 * n + (n + 1) / 2, sizeof(uint64_t));
        if (!block)
            return EXT_ERR_NOMEM;
        c->exact.at = block;
        c->exact.gap = block + n;
        c->exact.gap_min = (uint32_t *)(block + 2 * n);
        memset(c->exact.gap_min, 0xff, n * sizeof(uint32_t));
        if (n_low > 0) {
            c->exact.low_keys = ext_malloc(n * (size_t)n_low * sizeof(uint32_t));
            c->exact.low_counts = ext_calloc(n * (size_t)n_low, sizeof(uint32_t));
            c->exact.low_bound = ext_malloc(n * sizeof(uint32_t));
            if (!c->exact.low_keys || !c->exact.low_counts || !c->exact.low_bound)
                return EXT_ERR_NOMEM;
            memset(c->exact.low_keys, 0xff, n * (size_t)n_low * sizeof(uint32_t));
            memset(c->exact.low_bound, 0xff, n * sizeof(uint32_t));
            c->exact.n_low = n_low;
        }
    } else if (mode == ROC_MODE_BINNED) {
        c->binned.all = ext_calloc((size_t)c->binned.n_bins, sizeof(uint64_t));
        if (!c->binned.all)
            return EXT_ERR_NOMEM;
    }
    return EXT_OK;
}

void roc_counts_free(roc_counts *c)
{
    free(c->exact.at); /* with gap and gap_min */
    free(c->exact.low_keys);
    free(c->exact.low_counts);
    free(c->exact.low_bound);
    free(c->binned.all);
    free(c->binned.edges);
    free(c->keys.keys);
    free(c->keys.counts);
    memset(c, 0, sizeof *c);
}

/* At most 2^22 buckets (16 MiB of index), about four per level: most keys then
 * fall in a bucket with no level or one, whatever the number of levels. */
roc_level_index roc_level_index_shape(const roc_genuine_levels *levels)
{
    const int64_t U = levels->n_levels;
    roc_level_index index = {0};
    if (U == 0)
        return index;
    int64_t max_buckets = 256;
    while (max_buckets < 4 * U && max_buckets < ((int64_t)1 << 22))
        max_buckets *= 2;
    const uint32_t base = levels->keys[0], span = levels->keys[U - 1] - base;
    int shift = 0;
    while ((int64_t)((uint64_t)span >> shift) + 1 > max_buckets)
        shift++;
    index.base = base;
    index.shift = shift;
    index.n_buckets = (int64_t)((uint64_t)span >> shift) + 1;
    return index;
}

int roc_level_index_build(const roc_genuine_levels *levels, roc_level_index *index)
{
    const int64_t U = levels->n_levels;
    free(index->lut);
    *index = roc_level_index_shape(levels);
    if (U == 0)
        return EXT_OK;
    index->lut = ext_malloc((size_t)(index->n_buckets + 1) * sizeof(uint32_t));
    if (!index->lut)
        return EXT_ERR_NOMEM;
    const int64_t entries = index->n_buckets + 1, run = 4096;
#pragma omp parallel for schedule(static)
    for (int64_t b0 = 0; b0 < entries; b0 += run)
        roc_level_index_fill(levels->keys, U, index->base, index->shift, b0,
                             b0 + run < entries ? b0 + run : entries, index->lut);
    return EXT_OK;
}

void roc_level_index_free(roc_level_index *index)
{
    free(index->lut);
    memset(index, 0, sizeof *index);
}

/* numpy.linspace(lo, hi, n + 1) in float64, then float32, as numpy.histogram
 * makes its edges for float32 data. */
static int uniform_edges(roc_eval *ev)
{
    roc_binned_counts *b = &ev->counts.binned;
    const int64_t n = ev->config.bins;
    const double lo = ev->config.range_lo, hi = ev->config.range_hi;
    b->n_bins = n;
    b->edges = ext_malloc(((size_t)n + 1) * sizeof(float));
    if (!b->edges)
        return nomem(ev, "the bins");
    const double step = (hi - lo) / (double)n;
    for (int64_t i = 0; i < n; i++)
        b->edges[i] = (float)((double)i * step + lo);
    b->edges[n] = (float)hi;
    b->lo32 = (float)lo;
    b->scale32 = (float)((double)n / (hi - lo));
    /* numpy.histogram refuses what cannot make finite, increasing float32
     * edges; a scale that overflows float32 would make every bin a search */
    int ok = isfinite(b->scale32) && b->scale32 > 0;
    for (int64_t i = 0; ok && i <= n; i++)
        ok = isfinite(b->edges[i]) && (i == 0 || b->edges[i - 1] < b->edges[i]);
    if (!ok)
        return ext_fail(EXT_ERR_VALUE, "%s: range (%g, %g) cannot be cut into %lld float32 bins "
                        "with finite, increasing edges (numpy.histogram refuses it too)",
                        ev->caller, lo, hi, (long long)n);
    return EXT_OK;
}

/* What set_gap_keys was told, forgotten. */
static void probed_free(roc_eval *ev)
{
    for (int64_t r = 0; r < ev->n_probed; r++) {
        free(ev->probed[r].keys);
        free(ev->probed[r].counts);
    }
    free(ev->probed);
    ev->probed = NULL;
    ev->n_probed = 0;
}

/* The lowest scores of each gap the CPU pass keeps for nearest_sklearn:
 * config.low_keys, fewer where the gaps are many, so that the lists stay
 * within 32 MiB (at least 4 a gap); none on the GPU, whose pass does not keep
 * them (a probing pass finds what nearest_sklearn needs there). */
#define LOW_KEYS_BYTES ((int64_t)32 << 20)
static int64_t low_keys_kept(const roc_eval *ev)
{
    if (ev->config.mode != ROC_MODE_EXACT || ev->config.low_keys <= 0 || !ev->cpu)
        return 0;
    int64_t fit = LOW_KEYS_BYTES / (2 * (int64_t)sizeof(uint32_t)) / (ev->genuine.n_levels + 1);
    if (fit < 4)
        fit = 4;
    return ev->config.low_keys < fit ? ev->config.low_keys : fit;
}

/* Counting against ev->genuine from now on: its index, the host counters and
 * the backend's. `found`: ev->genuine is what the backend's create found (the
 * GPU backend still holds those keys). */
static int use_levels(roc_eval *ev, int found)
{
    int st;
    if (ev->genuine.n_levels > INT32_MAX) /* the counting passes number gaps in 32 bits */
        return ext_fail(EXT_ERR_VALUE, "%s: %lld distinct genuine scores; at most 2^31 - 1 are "
                        "supported", ev->caller, (long long)ev->genuine.n_levels);
    probed_free(ev);
    if (roc_counts_alloc(&ev->counts, ev->config.mode, ev->genuine.n_levels,
                         low_keys_kept(ev)))
        return nomem(ev, "the counters");
#ifdef EXT_WITH_CUDA
    if (ev->cuda) { /* the index's table is made on the device */
        const roc_level_index shape = roc_level_index_shape(&ev->genuine);
        return cuda_status(ev, roc_eval_cuda_set_levels(ev->cuda, &ev->genuine, &shape, found));
    }
#endif
    if (ev->cpu && ev->config.mode == ROC_MODE_EXACT &&
        roc_level_index_build(&ev->genuine, &ev->index))
        return nomem(ev, "the index of the genuine scores");
    if (ev->cpu)
        st = roc_eval_cpu_set_levels(ev->cpu, &ev->genuine, &ev->index);
    else
        st = EXT_OK; /* counts only */
    return st;
}

// ---------------------------------------------------------------------------
// entry points

static int check_config(const roc_eval_config *config, const char *fn)
{
    if (config->mode < ROC_MODE_EXACT || config->mode > ROC_MODE_CURVE)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown mode %d", fn, config->mode);
    if (config->mode == ROC_MODE_BINNED) {
        if (config->bins < 1 || config->bins > ((int64_t)1 << 30))
            return ext_fail(EXT_ERR_VALUE, "%s: bins must lie in [1, 2^30], got %lld", fn,
                            (long long)config->bins);
        if (!isfinite(config->range_lo) || !isfinite(config->range_hi) ||
            !(config->range_lo < config->range_hi))
            return ext_fail(EXT_ERR_VALUE, "%s: range must be finite with lo < hi, got (%g, %g)",
                            fn, config->range_lo, config->range_hi);
    }
    if (config->similarity != ROC_COSINE && config->similarity != ROC_DOT)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown similarity %d", fn, config->similarity);
    if (config->same_set < ROC_PAIRS_ALL || config->same_set > ROC_SAME_SET_ORDERED)
        return ext_fail(EXT_ERR_VALUE, "%s: unknown same_set %d", fn, config->same_set);
    if (config->step_rows < 0)
        return ext_fail(EXT_ERR_VALUE, "%s: step_rows must be >= 0 (0: not said), got %lld", fn,
                        (long long)config->step_rows);
    if (config->low_keys < 0)
        return ext_fail(EXT_ERR_VALUE, "%s: low_keys must be >= 0, got %d", fn,
                        (int)config->low_keys);
    return EXT_OK;
}

/* Every argument on the first one's device, the CPU or a CUDA device, and
 * contiguous. */
static int check_placement(const char *fn, const ext_arg *args, int n_args)
{
    int st;
    const ext_tensor *first = args[0].t;
    if ((st = ext_check_devices(fn, args, n_args, first->device_type, NULL)))
        return st;
    if (first->device_type != EXT_CPU && first->device_type != EXT_CUDA)
        return ext_fail(EXT_ERR_DEVICE, "%s: %s is on an unsupported device", fn, args[0].name);
    for (int a = 0; a < n_args; a++)
        if ((st = ext_check_contiguous(fn, args[a].name, args[a].t)))
            return st;
    return EXT_OK;
}

static int check_create(const roc_eval_config *config, const ext_tensor *labels_q,
                        const ext_tensor *labels_g, const ext_tensor *score,
                        const ext_tensor *feat_q, const ext_tensor *feat_g, const char *fn)
{
    int st;
    if ((st = check_config(config, fn)))
        return st;
    if ((score == NULL) == (feat_q == NULL) || (feat_q == NULL) != (feat_g == NULL))
        return ext_fail(EXT_ERR_VALUE, "%s: give either score, or feat_q and feat_g", fn);

    ext_arg args[4] = {{"labels_q", labels_q}, {"labels_g", labels_g}};
    int n_args = 2;
    const unsigned label_dtypes = EXT_MASK(EXT_INT32) | EXT_MASK(EXT_INT64);
    if ((st = ext_check_dtype(fn, "labels_q", labels_q, label_dtypes)) ||
        (st = ext_check_dtype(fn, "labels_g", labels_g, label_dtypes)))
        return st;
    if (labels_q->dtype != labels_g->dtype)
        return ext_fail(EXT_ERR_TYPE, "%s: labels_q is %s but labels_g is %s: give both one "
                        "dtype", fn, ext_dtype_name(labels_q->dtype),
                        ext_dtype_name(labels_g->dtype));
    if ((st = roc_check_source_dtypes(fn, score, feat_q, feat_g, args, &n_args)))
        return st;
    if ((st = check_placement(fn, args, n_args)))
        return st;
    if ((st = ext_check_ndim(fn, "labels_q", labels_q, 1)) ||
        (st = ext_check_ndim(fn, "labels_g", labels_g, 1)))
        return st;
    const int64_t n_query = labels_q->sizes[0], n_gallery = labels_g->sizes[0];
    if ((st = roc_check_pair_shapes(fn, n_query, n_gallery, score, feat_q, feat_g,
                                    config->same_set, config->row_offset)))
        return st;
    return EXT_OK;
}

/* The message for what a backend found wrong in the data. */
static int bad_input(const roc_eval *ev, const roc_bad_input *bad)
{
    switch (bad->kind) {
    case ROC_BAD_GENUINE:
        return ext_fail(EXT_ERR_VALUE, "%s: genuine[%lld] is neither 0 nor 1 (genuine must hold "
                        "0 for impostor pairs and 1 for genuine ones, or be bool)", ev->caller,
                        (long long)bad->index);
    case ROC_BAD_INDEX_A:
        return ext_fail(EXT_ERR_VALUE, "%s: index_a[%lld] is not a row of feat_a (%lld rows)",
                        ev->caller, (long long)bad->index, (long long)ev->src.n_a);
    default: /* ROC_BAD_INDEX_B */
        return ext_fail(EXT_ERR_VALUE, "%s: index_b[%lld] is not a row of feat_b (%lld rows)",
                        ev->caller, (long long)bad->index, (long long)ev->src.n_gallery);
    }
}

/* The evaluator of checked `src` on its device: the genuine levels found and
 * indexed, the counters ready. */
static int create(roc_eval **out, const roc_eval_config *config, const char *fn,
                  const roc_source *src, int device_type)
{
    int st;
    *out = NULL;
#ifndef EXT_WITH_CUDA
    if (device_type == EXT_CUDA)
        return ext_no_cuda(fn, NULL);
#endif
    roc_eval *ev = ext_calloc(1, sizeof *ev);
    if (!ev)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the evaluator", fn);
    ev->curve_points = -1;
    ev->config = *config;
    snprintf(ev->caller, sizeof ev->caller, "%s", fn);
    ev->src = *src;
    ev->counts.exact.top_key = ROC_NO_KEY;
    if (config->mode == ROC_MODE_BINNED && (st = uniform_edges(ev)))
        goto fail;
    roc_bad_input bad = {ROC_BAD_NONE, -1};
#ifdef EXT_WITH_CUDA
    if (device_type == EXT_CUDA)
        st = cuda_status(ev, roc_eval_cuda_create(&ev->cuda, &ev->src, &ev->counts, &ev->genuine,
                                                  &ev->counts.totals, &bad));
    else
#endif
        st = roc_eval_cpu_create(&ev->cpu, &ev->src, &ev->counts, ev->caller, &ev->genuine,
                                 &ev->counts.totals, &bad);
    if (st)
        goto fail;
    if (bad.kind) {
        st = bad_input(ev, &bad);
        goto fail;
    }
    if ((st = use_levels(ev, 1)))
        goto fail;
    *out = ev;
    return EXT_OK;
fail:
    roc_eval_free(ev);
    return st;
}

static void caller_name(const roc_eval_config *config, char fn[32])
{
    snprintf(fn, 32, "%.31s", config->caller[0] ? config->caller : "roc");
}

int roc_eval_create(roc_eval **out, const roc_eval_config *config, const ext_tensor *labels_q,
                    const ext_tensor *labels_g, const ext_tensor *score,
                    const ext_tensor *feat_q, const ext_tensor *feat_g, void *stream)
{
    char fn[32];
    caller_name(config, fn);
    *out = NULL;
    int st = check_create(config, labels_q, labels_g, score, feat_q, feat_g, fn);
    if (st)
        return st;
    const roc_source src = {
        .mode = config->mode, .same_set = config->same_set, .similarity = config->similarity,
        .device = labels_q->device_index, .stream = stream,
        .n_query = labels_q->sizes[0], .n_gallery = labels_g->sizes[0],
        .dim = feat_q ? feat_q->sizes[1] : 0, .row_offset = config->same_set ? config->row_offset : 0,
        .step_rows = config->step_rows,
        .labels_q = labels_q->data, .labels_g = labels_g->data, .label_dtype = labels_q->dtype,
        .score = score ? score->data : NULL, .feat_q = feat_q ? feat_q->data : NULL,
        .feat_g = feat_g ? feat_g->data : NULL};
    return create(out, config, fn, &src, labels_q->device_type);
}

static int check_create_pairs(const roc_eval_config *config, const ext_tensor *genuine,
                              const ext_tensor *score, const ext_tensor *feat_a,
                              const ext_tensor *feat_b, const ext_tensor *index_a,
                              const ext_tensor *index_b, const char *fn)
{
    int st;
    if ((st = check_config(config, fn)))
        return st;
    if (config->same_set)
        return ext_fail(EXT_ERR_VALUE, "%s: same_set does not apply to a list of pairs", fn);
    const int features = feat_a || feat_b || index_a || index_b;
    if ((score == NULL) == !features || (features && !(feat_a && feat_b && index_a && index_b)))
        return ext_fail(EXT_ERR_VALUE, "%s: give either score, or feat_a, feat_b, index_a and "
                        "index_b", fn);
    const unsigned flags = EXT_MASK(EXT_BOOL) | EXT_MASK(EXT_UINT8) | EXT_MASK(EXT_INT8) |
                           EXT_MASK(EXT_INT32) | EXT_MASK(EXT_INT64);
    ext_arg args[5] = {{"genuine", genuine}};
    int n_args = 1;
    if ((st = ext_check_dtype(fn, "genuine", genuine, flags)))
        return st;
    if (score) {
        if ((st = ext_check_dtype(fn, "score", score, EXT_MASK(EXT_FLOAT32))))
            return st;
        args[n_args++] = (ext_arg){"score", score};
    } else {
        const unsigned indices = EXT_MASK(EXT_INT32) | EXT_MASK(EXT_INT64);
        if ((st = ext_check_dtype(fn, "feat_a", feat_a, EXT_MASK(EXT_FLOAT32))) ||
            (st = ext_check_dtype(fn, "feat_b", feat_b, EXT_MASK(EXT_FLOAT32))) ||
            (st = ext_check_dtype(fn, "index_a", index_a, indices)) ||
            (st = ext_check_dtype(fn, "index_b", index_b, indices)))
            return st;
        if (index_a->dtype != index_b->dtype)
            return ext_fail(EXT_ERR_TYPE, "%s: index_a is %s but index_b is %s; they must have "
                            "one dtype", fn, ext_dtype_name(index_a->dtype),
                            ext_dtype_name(index_b->dtype));
        args[n_args++] = (ext_arg){"feat_a", feat_a};
        args[n_args++] = (ext_arg){"feat_b", feat_b};
        args[n_args++] = (ext_arg){"index_a", index_a};
        args[n_args++] = (ext_arg){"index_b", index_b};
    }
    if ((st = check_placement(fn, args, n_args)))
        return st;
    if ((st = ext_check_ndim(fn, "genuine", genuine, 1)))
        return st;
    const int64_t n = genuine->sizes[0];
    if (score) {
        if ((st = ext_check_ndim(fn, "score", score, 1)))
            return st;
        if (score->sizes[0] != n)
            return ext_fail(EXT_ERR_VALUE, "%s: score has %lld elements but genuine has %lld", fn,
                            (long long)score->sizes[0], (long long)n);
        return EXT_OK;
    }
    if ((st = ext_check_ndim(fn, "feat_a", feat_a, 2)) ||
        (st = ext_check_ndim(fn, "feat_b", feat_b, 2)) ||
        (st = ext_check_ndim(fn, "index_a", index_a, 1)) ||
        (st = ext_check_ndim(fn, "index_b", index_b, 1)))
        return st;
    if (feat_a->sizes[1] != feat_b->sizes[1])
        return ext_fail(EXT_ERR_VALUE, "%s: feat_a is (%lld, %lld) but feat_b is (%lld, %lld): "
                        "the feature dimensions differ", fn, (long long)feat_a->sizes[0],
                        (long long)feat_a->sizes[1], (long long)feat_b->sizes[0],
                        (long long)feat_b->sizes[1]);
    if (index_a->sizes[0] != n || index_b->sizes[0] != n)
        return ext_fail(EXT_ERR_VALUE, "%s: index_a and index_b have %lld and %lld elements but "
                        "genuine has %lld", fn, (long long)index_a->sizes[0],
                        (long long)index_b->sizes[0], (long long)n);
    return EXT_OK;
}

int roc_eval_create_pairs(roc_eval **out, const roc_eval_config *config,
                          const ext_tensor *genuine, const ext_tensor *score,
                          const ext_tensor *feat_a, const ext_tensor *feat_b,
                          const ext_tensor *index_a, const ext_tensor *index_b, void *stream)
{
    char fn[32];
    caller_name(config, fn);
    *out = NULL;
    int st = check_create_pairs(config, genuine, score, feat_a, feat_b, index_a, index_b, fn);
    if (st)
        return st;
    const roc_source src = {
        .mode = config->mode, .similarity = config->similarity,
        .device = genuine->device_index, .stream = stream,
        .n_query = genuine->sizes[0], .n_gallery = feat_b ? feat_b->sizes[0] : 1,
        .dim = feat_a ? feat_a->sizes[1] : 0,
        .score = score ? score->data : NULL, .feat_q = feat_a ? feat_a->data : NULL,
        .feat_g = feat_b ? feat_b->data : NULL,
        .list = 1, .n_a = feat_a ? feat_a->sizes[0] : 0, .genuine = genuine->data,
        .genuine_dtype = genuine->dtype, .index_a = index_a ? index_a->data : NULL,
        .index_b = index_b ? index_b->data : NULL, .index_dtype = index_a ? index_a->dtype : 0};
    return create(out, config, fn, &src, genuine->device_type);
}

int roc_eval_create_counts(roc_eval **out, const roc_eval_config *config)
{
    char fn[32];
    caller_name(config, fn);
    *out = NULL;
    int st = check_config(config, fn);
    if (st)
        return st;
    roc_eval *ev = ext_calloc(1, sizeof *ev);
    if (!ev)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the evaluator", fn);
    ev->curve_points = -1;
    ev->config = *config;
    snprintf(ev->caller, sizeof ev->caller, "%s", fn);
    ev->src.mode = config->mode;
    ev->counts.exact.top_key = ROC_NO_KEY;
    if ((config->mode == ROC_MODE_BINNED && (st = uniform_edges(ev))) ||
        (st = use_levels(ev, 0))) {
        roc_eval_free(ev);
        return st;
    }
    *out = ev;
    return EXT_OK;
}

static int check_usable(const roc_eval *ev)
{
    return roc_check_usable(ev->caller, ev->broken);
}

int roc_eval_set_levels(roc_eval *ev, const uint32_t *keys, const uint64_t *counts,
                        int64_t n_levels, uint64_t n_nan_genuine)
{
    int st;
    if ((st = check_usable(ev)))
        return st;
    if (ev->rows_added)
        return ext_fail(EXT_ERR_VALUE, "%s: the levels must be set before any rows are counted",
                        ev->caller);
    if (n_levels < 0 || (n_levels > 0 && (keys == NULL || counts == NULL)))
        return ext_fail(EXT_ERR_VALUE, "%s: set_levels needs n_levels >= 0 keys and counts",
                        ev->caller);
    uint64_t n_genuine = 0;
    for (int64_t u = 0; u < n_levels; u++) {
        if ((u > 0 && keys[u] <= keys[u - 1]) || keys[u] == ROC_NO_KEY)
            return ext_fail(EXT_ERR_VALUE, "%s: the levels' keys must be distinct score keys, "
                            "ascending", ev->caller);
        n_genuine += counts[u];
    }
    uint32_t *own_keys = ext_malloc((size_t)n_levels * sizeof *own_keys);
    uint64_t *own_counts = ext_malloc((size_t)n_levels * sizeof *own_counts);
    if (!own_keys || !own_counts) {
        free(own_keys);
        free(own_counts);
        return nomem(ev, "the genuine levels");
    }
    if (n_levels > 0) { /* (memcpy from NULL is undefined, even of 0 bytes) */
        memcpy(own_keys, keys, (size_t)n_levels * sizeof *own_keys);
        memcpy(own_counts, counts, (size_t)n_levels * sizeof *own_counts);
    }
    free(ev->genuine.keys);
    free(ev->genuine.counts);
    ev->genuine = (roc_genuine_levels){n_levels, own_keys, own_counts};
    ev->counts.totals.n_genuine = n_genuine;
    ev->counts.totals.n_nan_genuine = n_nan_genuine;
    if ((st = use_levels(ev, 0)))
        ev->broken = 1;
    return st;
}

int roc_eval_add_rows(roc_eval *ev, int64_t row_begin, int64_t row_end)
{
    int st;
    if ((st = check_usable(ev)))
        return st;
    if ((st = roc_check_rows(ev->caller, row_begin, row_end, ev->src.n_query)))
        return st;
    ev->rows_added = 1;
    ev->fetched = 0;
    ev->curve_points = -1;
    if (row_begin == row_end || ev->src.n_gallery == 0)
        return EXT_OK; /* (a list of pairs has n_gallery >= 1, or is scored from features) */
    if (ev->config.mode == ROC_MODE_EXACT && ev->genuine.n_levels == 0)
        return EXT_OK; /* no genuine pairs: summarize says so */
#ifdef EXT_WITH_CUDA
    if (ev->cuda)
        st = cuda_status(ev, roc_eval_cuda_add_rows(ev->cuda, &ev->counts, row_begin, row_end));
    else
#endif
        st = roc_eval_cpu_add_rows(ev->cpu, &ev->counts, row_begin, row_end);
    if (st)
        ev->broken = 1;
    return st;
}

int roc_eval_fetch(roc_eval *ev)
{
    int st;
    if ((st = check_usable(ev)))
        return st;
#ifdef EXT_WITH_CUDA
    if (ev->cuda && !ev->fetched && (st = cuda_status(ev, roc_eval_cuda_fetch(ev->cuda,
                                                                             &ev->counts))))
        return st;
#endif
    ev->fetched = 1;
    return EXT_OK;
}

int roc_eval_counts(roc_eval *ev, roc_counts_view *out)
{
    int st;
    if ((st = roc_eval_fetch(ev)))
        return st;
    roc_counts *c = &ev->counts;
    *out = (roc_counts_view){
        .mode = ev->config.mode, .n_levels = ev->genuine.n_levels,
        .level_keys = ev->genuine.keys, .level_counts = ev->genuine.counts,
        .totals = &c->totals.n_pairs,
        .at = c->exact.at, .gap = c->exact.gap, .gap_min = c->exact.gap_min,
        .top_key = &c->exact.top_key, .top_count = &c->exact.top_count,
        .n_bins = c->binned.n_bins, .bins = c->binned.all, .below = &c->binned.below,
        .above = &c->binned.above,
        .n_keys = c->keys.n_keys, .keys = c->keys.keys, .key_counts = c->keys.counts};
    return EXT_OK;
}

int roc_eval_set_keys(roc_eval *ev, const uint32_t *keys, const uint64_t *counts, int64_t n_keys)
{
    int st;
    if ((st = roc_eval_fetch(ev)))
        return st;
    if (ev->config.mode != ROC_MODE_CURVE)
        return ext_fail(EXT_ERR_VALUE, "%s: set_keys is for the curve mode", ev->caller);
    if (n_keys < 0 || (n_keys > 0 && (keys == NULL || counts == NULL)))
        return ext_fail(EXT_ERR_VALUE, "%s: set_keys needs n_keys >= 0 keys and counts",
                        ev->caller);
    for (int64_t k = 1; k < n_keys; k++)
        if (keys[k] <= keys[k - 1])
            return ext_fail(EXT_ERR_VALUE, "%s: the keys must be distinct, ascending", ev->caller);
    uint32_t *own_keys = ext_malloc((size_t)n_keys * sizeof *own_keys);
    uint64_t *own_counts = ext_malloc((size_t)n_keys * sizeof *own_counts);
    if (!own_keys || !own_counts) {
        free(own_keys);
        free(own_counts);
        return nomem(ev, "the distinct scores");
    }
    if (n_keys > 0) { /* (memcpy from NULL is undefined, even of 0 bytes) */
        memcpy(own_keys, keys, (size_t)n_keys * sizeof *own_keys);
        memcpy(own_counts, counts, (size_t)n_keys * sizeof *own_counts);
    }
    roc_key_counts *acc = &ev->counts.keys;
    free(acc->keys);
    free(acc->counts);
    *acc = (roc_key_counts){n_keys, own_keys, own_counts};
    ev->curve_points = -1;
    return EXT_OK;
}

int roc_eval_set_gap_keys(roc_eval *ev, int64_t gap, uint32_t from, uint32_t through,
                          const uint32_t *keys, const uint64_t *counts, int64_t n)
{
    int st;
    if ((st = roc_eval_fetch(ev)))
        return st;
    const roc_exact_counts *e = &ev->counts.exact;
    if (ev->config.mode != ROC_MODE_EXACT)
        return ext_fail(EXT_ERR_VALUE, "%s: set_gap_keys is for the exact mode", ev->caller);
    if (gap < 0 || gap > ev->genuine.n_levels || e->gap[gap] == 0)
        return ext_fail(EXT_ERR_VALUE, "%s: set_gap_keys: gap %lld is not a gap with pairs",
                        ev->caller, (long long)gap);
    const uint32_t known = roc_gap_known_through(&ev->genuine, e, ev->probed, ev->n_probed, gap);
    const uint32_t end = roc_gap_end(&ev->genuine, e, gap);
    if (from != known + 1 || through < from || through >= end)
        return ext_fail(EXT_ERR_VALUE, "%s: set_gap_keys: gap %lld is known through key %u and "
                        "ends before key %u; keys %u..%u do not continue it", ev->caller,
                        (long long)gap, known, end, from, through);
    if (n < 0 || (n > 0 && (keys == NULL || counts == NULL)))
        return ext_fail(EXT_ERR_VALUE, "%s: set_gap_keys needs n >= 0 keys and counts",
                        ev->caller);
    for (int64_t j = 0; j < n; j++)
        if (keys[j] < from || keys[j] > through || (j > 0 && keys[j] <= keys[j - 1]) ||
            counts[j] == 0)
            return ext_fail(EXT_ERR_VALUE, "%s: set_gap_keys: the keys must be distinct, "
                            "ascending, within %u..%u, each with a pair", ev->caller, from,
                            through);
    roc_gap_keys *grown = ext_realloc(ev->probed, (size_t)(ev->n_probed + 1) * sizeof *grown);
    if (!grown)
        return nomem(ev, "the probed scores");
    ev->probed = grown;
    roc_gap_keys *r = &ev->probed[ev->n_probed];
    *r = (roc_gap_keys){gap, from, through, n, ext_malloc((size_t)(n ? n : 1) * sizeof *keys),
                        ext_malloc((size_t)(n ? n : 1) * sizeof *counts)};
    if (!r->keys || !r->counts) {
        free(r->keys);
        free(r->counts);
        return nomem(ev, "the probed scores");
    }
    if (n > 0) { /* (memcpy from NULL is undefined, even of 0 bytes) */
        memcpy(r->keys, keys, (size_t)n * sizeof *keys);
        memcpy(r->counts, counts, (size_t)n * sizeof *counts);
    }
    ev->n_probed++;
    return EXT_OK;
}

/* Failure `st` of a summarizer or a check, which name no caller ("roc: ..."),
 * its message prefixed with ours. */
static int with_caller(const roc_eval *ev, int st)
{
    char message[1024];
    snprintf(message, sizeof message, "%s", ext_last_error());
    const char *body = strncmp(message, "roc: ", 5) == 0 ? message + 5 : message;
    return ext_fail(st, "%s: %s", ev->caller, body);
}

/* Curve mode's points (roc.h): on the device where the GPU backend still
 * holds its counts, else from the host counts. */
int roc_eval_curve_size(roc_eval *ev, int32_t every_point, int64_t *n_points)
{
    int st;
    if (n_points == NULL)
        return ext_fail(EXT_ERR_VALUE, "%s: curve_size's n_points is NULL", ev->caller);
    *n_points = 0;
    if ((st = check_usable(ev)))
        return st;
    if (ev->config.mode != ROC_MODE_CURVE)
        return ext_fail(EXT_ERR_VALUE, "%s: curve points are for the curve mode", ev->caller);
    ev->curve_points = -1;
    ev->curve_every = every_point != 0;
    const roc_totals *totals = &ev->counts.totals;
    uint64_t n_all = 0;
#ifdef EXT_WITH_CUDA
    if (ev->cuda && !ev->fetched) {
        uint64_t n_genuine = 0;
        if ((st = cuda_status(ev, roc_eval_cuda_curve_size(ev->cuda, &ev->genuine,
                                                           ev->curve_every, n_points,
                                                           &n_genuine, &n_all))))
            return st;
        if (n_genuine == UINT64_MAX)
            return ext_fail(EXT_ERR_VALUE, "%s: the counts cannot be right: a distinct score "
                            "holds fewer pairs than its genuine ones", ev->caller);
        if (n_genuine != totals->n_genuine)
            return ext_fail(EXT_ERR_VALUE, "%s: the counts cannot be right: the distinct "
                            "scores hold %llu genuine pairs but the levels %llu", ev->caller,
                            (unsigned long long)n_genuine,
                            (unsigned long long)totals->n_genuine);
    } else
#endif
    {
        if ((st = roc_eval_fetch(ev)) ||
            (st = roc_check_genuine_total(&ev->genuine, totals)) ||
            (st = roc_check_curve_counts(&ev->genuine, &ev->counts.keys, &n_all)))
            return st;
        *n_points = roc_curve_points_host(&ev->genuine, &ev->counts.keys, ev->curve_every,
                                          NULL, NULL, NULL);
    }
    if ((st = roc_check_totals(totals->n_genuine, n_all - totals->n_genuine))) {
        *n_points = 0;
        return with_caller(ev, st);
    }
    ev->curve_points = *n_points;
    return EXT_OK;
}

int roc_eval_curve_points(roc_eval *ev, const ext_tensor *keys, const ext_tensor *fps,
                          const ext_tensor *tps)
{
    int st;
    if ((st = check_usable(ev)))
        return st;
    if (ev->curve_points < 0)
        return ext_fail(EXT_ERR_VALUE, "%s: curve_points comes after curve_size", ev->caller);
    const ext_arg args[] = {{"keys", keys}, {"fps", fps}, {"tps", tps}};
    const char *fn = ev->caller;
    /* keys hold the uint32 keys' bits; fps and tps the counts (below 2^63) */
    if ((st = ext_check_dtype(fn, "keys", keys, EXT_MASK(EXT_INT32))) ||
        (st = ext_check_dtype(fn, "fps", fps, EXT_MASK(EXT_INT64))) ||
        (st = ext_check_dtype(fn, "tps", tps, EXT_MASK(EXT_INT64))) ||
        (st = ext_check_ndim(fn, "keys", keys, 1)) || (st = ext_check_ndim(fn, "fps", fps, 1)) ||
        (st = ext_check_ndim(fn, "tps", tps, 1)) || (st = check_placement(fn, args, 3)))
        return st;
    for (int a = 0; a < 3; a++)
        if (args[a].t->sizes[0] != ev->curve_points)
            return ext_fail(EXT_ERR_VALUE, "%s: %s has %lld elements but the curve %lld points",
                            fn, args[a].name, (long long)args[a].t->sizes[0],
                            (long long)ev->curve_points);
    const int on_device = keys->device_type == EXT_CUDA;
#ifdef EXT_WITH_CUDA
    if (ev->cuda && !ev->fetched) {
        if (!on_device || keys->device_index != ev->src.device)
            return ext_fail(EXT_ERR_DEVICE, "%s: the curve points go to the evaluator's device, "
                            "cuda:%d", fn, ev->src.device);
        st = cuda_status(ev, roc_eval_cuda_curve_points(ev->cuda, keys->data, fps->data,
                                                        tps->data));
        ev->curve_points = -1;
        return st;
    }
#endif
    if (on_device)
        return ext_fail(EXT_ERR_DEVICE, "%s: the curve points of host counts go to the CPU",
                        fn);
    roc_curve_points_host(&ev->genuine, &ev->counts.keys, ev->curve_every, keys->data,
                          fps->data, tps->data);
    ev->curve_points = -1;
    return EXT_OK;
}

int roc_eval_summarize(roc_eval *ev, const roc_summary_options *options, roc_summary **out)
{
    int st;
    *out = NULL;
    if ((st = roc_eval_fetch(ev)))
        return st;
    roc_summary *s = ext_calloc(1, sizeof *s);
    if (!s)
        return nomem(ev, "the summary");
    const roc_counts *c = &ev->counts;
    if (ev->config.mode == ROC_MODE_EXACT)
        st = roc_summarize_exact(&ev->genuine, &c->exact, &c->totals, options, ev->probed,
                                 ev->n_probed, s);
    else if (ev->config.mode == ROC_MODE_BINNED)
        st = roc_summarize_binned(&ev->genuine, &c->binned, &c->totals, options, s);
    else
        st = roc_summarize_curve(&ev->genuine, &c->keys, &c->totals, options, s);
    if (st) {
        roc_summary_free(s);
        return with_caller(ev, st);
    }
#ifdef EXT_WITH_CUDA
    if (ev->cuda)
        s->device_bytes_peak = roc_eval_cuda_peak_bytes(ev->cuda);
#endif
    *out = s;
    return EXT_OK;
}

int64_t roc_eval_row_tile(int32_t device_type)
{
#ifdef EXT_WITH_CUDA
    if (device_type == EXT_CUDA)
        return roc_eval_cuda_row_tile();
#endif
    (void)device_type;
    return roc_eval_cpu_row_tile();
}

void roc_eval_free(roc_eval *ev)
{
    if (ev == NULL)
        return;
#ifdef EXT_WITH_CUDA
    roc_eval_cuda_free(ev->cuda);
#endif
    roc_eval_cpu_free(ev->cpu);
    probed_free(ev);
    free(ev->genuine.keys);
    free(ev->genuine.counts);
    roc_level_index_free(&ev->index);
    roc_counts_free(&ev->counts);
    free(ev);
}
