/*
 * roc_hist.c: the _ext.roc shim for the legacy histogram (cpu_roc / gpu_roc).
 *
 * Both entry points run the same checks on the descriptors (dtype, device,
 * contiguity, shapes), then the CPU implementation below or the CUDA
 * launcher in cuda/roc_hist_kernel.cu.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc.h"
#include "roc_math.h"
#ifdef EXT_WITH_CUDA
#include "cuda/roc_hist_kernel.h"
#endif

#define LABEL_DTYPES (EXT_MASK(EXT_FLOAT32) | EXT_MASK(EXT_INT32) | EXT_MASK(EXT_INT64))
#define HISTO_DTYPES (EXT_MASK(EXT_FLOAT32) | EXT_MASK(EXT_FLOAT64) | EXT_MASK(EXT_INT64))

/* ------------------------------------------------------------------------- */
/* argument checks shared by cpu_roc and gpu_roc */

static int check_hist_args(const char *fn, const ext_tensor *score, const ext_tensor *histo1,
                           const ext_tensor *histo2, const ext_tensor *labels_q,
                           const ext_tensor *labels_g, int device_type, const char *twin)
{
    const ext_arg args[] = {{"score", score}, {"histo1", histo1}, {"histo2", histo2},
                            {"labels_q", labels_q}, {"labels_g", labels_g}};
    int st;
    if ((st = ext_check_dtype(fn, "score", score, EXT_MASK(EXT_FLOAT32))) ||
        (st = ext_check_dtype(fn, "histo1", histo1, HISTO_DTYPES)) ||
        (st = ext_check_dtype(fn, "histo2", histo2, HISTO_DTYPES)) ||
        (st = ext_check_dtype(fn, "labels_q", labels_q, LABEL_DTYPES)) ||
        (st = ext_check_dtype(fn, "labels_g", labels_g, LABEL_DTYPES)))
        return st;
    if (labels_g->dtype != labels_q->dtype)
        return ext_fail(EXT_ERR_TYPE, "%s: labels_g must have the dtype of labels_q (%s), got %s",
                        fn, ext_dtype_name(labels_q->dtype), ext_dtype_name(labels_g->dtype));
    if ((st = ext_check_devices(fn, args, 5, device_type, twin)))
        return st;
    for (int i = 0; i < 5; i++)
        if ((st = ext_check_contiguous(fn, args[i].name, args[i].t)))
            return st;
    if ((st = ext_check_ndim(fn, "score", score, 2)))
        return st;

    int64_t n_query = score->sizes[0], n_gallery = score->sizes[1];
    if (ext_numel(labels_q) != n_query)
        return ext_fail(EXT_ERR_VALUE,
                        "%s: score is (Q, G) = (%lld, %lld) but labels_q has %lld elements", fn,
                        (long long)n_query, (long long)n_gallery, (long long)ext_numel(labels_q));
    if (ext_numel(labels_g) != n_gallery)
        return ext_fail(EXT_ERR_VALUE,
                        "%s: score is (Q, G) = (%lld, %lld) but labels_g has %lld elements", fn,
                        (long long)n_query, (long long)n_gallery, (long long)ext_numel(labels_g));
    int64_t nbins = ext_numel(histo1);
    if (nbins < 1)
        return ext_fail(EXT_ERR_VALUE, "%s: histo1 must have at least one element (its numel is "
                        "the number of bins)", fn);
    if (ext_numel(histo2) != nbins)
        return ext_fail(EXT_ERR_VALUE, "%s: histo2 has %lld elements but histo1 has %lld; both "
                        "hold nbins counts", fn, (long long)ext_numel(histo2), (long long)nbins);
    return EXT_OK;
}

/* ------------------------------------------------------------------------- */
/* CPU implementation */

/* Pairs counted by one task: large enough to amortize the per-task set-up,
 * small enough to balance threads when Q or G is small. */
#define HIST_TASK_PAIRS 65536

/* Counts flat pairs [begin, end) of score into counts[0..nbins) (all) and
 * counts[nbins..2 nbins) (genuine); one definition per label type. */
#define DEFINE_HIST_RANGE(suffix, label_t)                                                     \
    static int64_t hist_range_##suffix(const float *score, int64_t n_gallery, int64_t begin,  \
                                       int64_t end, const label_t *labels_q,                  \
                                       const label_t *labels_g, int64_t nbins,                \
                                       uint64_t *counts)                                      \
    {                                                                                          \
        int64_t n_nan = 0, i = begin / n_gallery, j = begin % n_gallery;                       \
        for (int64_t k = begin; k < end; i++, j = 0) {                                         \
            const label_t label = labels_q[i];                                                 \
            const float *row = score + i * n_gallery;                                          \
            for (; j < n_gallery && k < end; j++, k++) {                                       \
                float s = row[j];                                                              \
                if (isnan(s)) {                                                                \
                    n_nan++;                                                                   \
                    continue;                                                                  \
                }                                                                              \
                int64_t bin = roc_legacy_bin(s, nbins);                                        \
                counts[bin]++;                                                                 \
                counts[nbins + bin] += labels_g[j] == label;                                   \
            }                                                                                  \
        }                                                                                      \
        return n_nan;                                                                          \
    }

DEFINE_HIST_RANGE(f32, float)
DEFINE_HIST_RANGE(i32, int32_t)
DEFINE_HIST_RANGE(i64, int64_t)

static int64_t hist_range(const float *score, int64_t n_gallery, int64_t begin, int64_t end,
                          const void *labels_q, const void *labels_g, int label_dtype,
                          int64_t nbins, uint64_t *counts)
{
    switch (label_dtype) {
    case EXT_FLOAT32:
        return hist_range_f32(score, n_gallery, begin, end, labels_q, labels_g, nbins, counts);
    case EXT_INT32:
        return hist_range_i32(score, n_gallery, begin, end, labels_q, labels_g, nbins, counts);
    default:
        return hist_range_i64(score, n_gallery, begin, end, labels_q, labels_g, nbins, counts);
    }
}

/* histo[b] += count[b], in histo's dtype; a float32 bin is rounded once. */
static void add_counts(void *histo, int dtype, const uint64_t *count, int64_t nbins)
{
    for (int64_t b = 0; b < nbins; b++) {
        if (dtype == EXT_FLOAT32)
            ((float *)histo)[b] = (float)((double)((float *)histo)[b] + (double)count[b]);
        else if (dtype == EXT_FLOAT64)
            ((double *)histo)[b] += (double)count[b];
        else
            ((int64_t *)histo)[b] += (int64_t)count[b];
    }
}

int roc_hist_cpu(const ext_tensor *score, const ext_tensor *histo1, const ext_tensor *histo2,
                 const ext_tensor *labels_q, const ext_tensor *labels_g, int64_t *n_nan)
{
    const char *fn = "cpu_roc";
    int st = check_hist_args(fn, score, histo1, histo2, labels_q, labels_g, EXT_CPU, "gpu_roc");
    if (st)
        return st;
    int64_t n_query = score->sizes[0], n_gallery = score->sizes[1];
    int64_t nbins = ext_numel(histo1), n_pairs = n_query * n_gallery;
    uint64_t *counts = ext_calloc((size_t)(2 * nbins), sizeof *counts);
    if (counts == NULL)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate %lld bins", fn, (long long)nbins);

    int64_t nan_total = 0, n_tasks = (n_pairs + HIST_TASK_PAIRS - 1) / HIST_TASK_PAIRS;
    int out_of_memory = 0;
#pragma omp parallel if (n_tasks > 1) reduction(+ : nan_total)
    {
        uint64_t *local = ext_calloc((size_t)(2 * nbins), sizeof *local);
        if (local == NULL) {
#pragma omp atomic write
            out_of_memory = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < n_tasks; task++) {
            if (local == NULL)
                continue;
            int64_t begin = task * HIST_TASK_PAIRS;
            int64_t end = begin + HIST_TASK_PAIRS < n_pairs ? begin + HIST_TASK_PAIRS : n_pairs;
            nan_total += hist_range(score->data, n_gallery, begin, end, labels_q->data,
                                    labels_g->data, labels_q->dtype, nbins, local);
        }
        if (local != NULL) {
#pragma omp critical(roc_hist_merge)
            for (int64_t b = 0; b < 2 * nbins; b++)
                counts[b] += local[b];
            free(local);
        }
    }
    if (out_of_memory) {
        free(counts);
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate per-thread bins", fn);
    }
    add_counts(histo1->data, histo1->dtype, counts, nbins);
    add_counts(histo2->data, histo2->dtype, counts + nbins, nbins);
    free(counts);
    *n_nan = nan_total;
    return EXT_OK;
}

/* ------------------------------------------------------------------------- */
/* CUDA entry point */

int roc_hist_cuda(const ext_tensor *score, const ext_tensor *histo1, const ext_tensor *histo2,
                  const ext_tensor *labels_q, const ext_tensor *labels_g, void *stream,
                  int64_t *n_nan)
{
    const char *fn = "gpu_roc";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, "use cpu_roc");
#else
    int st = check_hist_args(fn, score, histo1, histo2, labels_q, labels_g, EXT_CUDA, "cpu_roc");
    if (st)
        return st;
    int err = roc_hist_launch(score->data, score->sizes[0], score->sizes[1], labels_q->data,
                              labels_g->data, labels_q->dtype, ext_numel(histo1), histo1->data,
                              histo1->dtype, histo2->data, histo2->dtype, score->device_index,
                              stream, n_nan);
    if (err)
        return ext_cuda_fail(fn, err);
    return EXT_OK;
#endif
}
