/*
 * roc_math.h: how a score becomes a bin, a key and a genuine level, one
 * definition shared by the CPU code (C) and the kernels (CUDA) so that both
 * count every pair in the same place.
 */
#ifndef ROC_MATH_H
#define ROC_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ext_tensor.h"

#ifdef __CUDACC__
#define ROC_HD __host__ __device__ __forceinline__
#else
#define ROC_HD static inline
#endif

/* A read of memory no thread writes during the kernel: through the read-only
 * cache on the GPU. */
#ifdef __CUDA_ARCH__
#define ROC_LOAD(p) __ldg(p)
#else
#define ROC_LOAD(p) (*(p))
#endif

/*
 * Legacy binning of the 2018 gpu_roc: bin = trunc((s + 1) / 2 * (nbins - 1)),
 * evaluated in float64 (the blog wrote 1.0 * ..., which promotes to double),
 * with scores outside [-1, 1] (and +-inf) clamped into the edge bins instead
 * of indexing out of bounds. NaN is the caller's to skip. Every step is one
 * IEEE double operation, so NumPy's float64 evaluation of the same formula
 * gives the same bin.
 */
ROC_HD int64_t roc_legacy_bin(float score, int64_t nbins)
{
    if (!(score > -1.0f))
        return 0;
    if (score >= 1.0f)
        return nbins - 1;
    double position = ((double)score + 1.0) / 2.0 * (double)(nbins - 1);
    int64_t bin = (int64_t)position;
    return bin < nbins - 1 ? bin : nbins - 1;
}

/*
 * Exact mode compares scores through keys: uint32 values ordered as the
 * float32 scores are, with -0.0 folded onto +0.0 (equal scores, as NumPy and
 * scikit-learn see them). NaN has no key; key 0 (the key of one NaN bit
 * pattern) therefore never occurs and marks "no pair" in key buffers.
 */
#define ROC_NO_KEY 0u

ROC_HD uint32_t roc_score_key(float score)
{
    uint32_t bits;
    if (score == 0.0f)
        score = 0.0f;
    memcpy(&bits, &score, sizeof bits);
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

ROC_HD float roc_key_score(uint32_t key)
{
    uint32_t bits = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
    float score;
    memcpy(&score, &bits, sizeof score);
    return score;
}

/*
 * Binned mode: uniform bins as numpy.histogram(score, bins=n, range=(lo, hi))
 * makes them for float32 scores: edges[0..n] = float32(linspace(lo, hi, n + 1)),
 * bin b holds edges[b] <= score < edges[b + 1], the last bin also edges[n].
 * An estimate from scale32 = float32(n / (hi - lo)) is corrected against the
 * edges, so the bin is the one whose edges hold the score, which is NumPy's
 * answer (NumPy corrects its own estimate the same way). Returns -1 below
 * edges[0], n above edges[n] (NumPy drops both). NaN is the caller's to skip.
 */
ROC_HD int64_t roc_uniform_bin(float score, const float *edges, int64_t n, float lo32,
                               float scale32)
{
    if (score < edges[0])
        return -1;
    if (score > edges[n])
        return n;
    float estimate = (score - lo32) * scale32;
    int64_t bin = estimate < (float)n ? (int64_t)estimate : n - 1;
    while (bin > 0 && score < edges[bin])
        bin--;
    while (bin < n - 1 && score >= edges[bin + 1])
        bin++;
    return bin;
}

/*
 * The genuine levels (distinct genuine keys, ascending) are found through an
 * index keyed by the score's key, so that a pair costs the same whatever the
 * number of levels: bucket b of the index covers the keys [base + (b << shift),
 * base + ((b + 1) << shift)), and lut[b] is the first level at or above the
 * bucket's start (lut has n_buckets + 1 entries, the last = n_levels). A key's
 * level is then among lut[b] .. lut[b + 1], a handful at most where the levels
 * are no denser than the buckets.
 *
 * For levels[0] <= key <= levels[n_levels - 1] (the callers take the keys
 * outside first): the first level >= key, and *at = whether it equals key.
 */
ROC_HD int64_t roc_find_level(const uint32_t *levels, const uint32_t *lut, uint32_t base,
                              int shift, uint32_t key, int *at)
{
    const uint32_t bucket = (key - base) >> shift;
    int64_t lo = ROC_LOAD(lut + bucket), hi = ROC_LOAD(lut + bucket + 1);
    if (lo == hi) { /* no level in the bucket: the key is inside gap lo */
        *at = 0;
        return lo;
    }
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (ROC_LOAD(levels + mid) < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    *at = ROC_LOAD(levels + lo) == key;
    return lo;
}

/* The lowest key of bucket b of a level index (in 64 bits: past the last
 * bucket it may exceed every key). */
ROC_HD uint64_t roc_bucket_start(uint32_t base, int shift, int64_t b)
{
    return (uint64_t)base + ((uint64_t)b << shift);
}

/*
 * Scores from features. Every score, on the CPU and the GPU, from the tile
 * product or one pair at a time, is the fp32 FMA chain acc = fmaf(a_k, b_k,
 * acc) over k in index order from acc = 0 (roc_dot_step). For cosine each
 * value is first scaled by its row's inverse norm (roc_cosine_value), which
 * comes from the sum of the row's squares in float64, in index order
 * (roc_square_step, roc_inverse_norm). Each step is one IEEE operation with
 * one rounding, never contracted, so the CPU and the GPU give the same bits.
 */
#ifdef __CUDA_ARCH__
#define ROC_DMUL(a, b) __dmul_rn(a, b)
#define ROC_DADD(a, b) __dadd_rn(a, b)
#else /* the C is built with -ffp-contract=off */
#define ROC_DMUL(a, b) ((a) * (b))
#define ROC_DADD(a, b) ((a) + (b))
#endif

ROC_HD float roc_dot_step(float acc, float a, float b) { return fmaf(a, b, acc); }

ROC_HD double roc_square_step(double sum, float x)
{
    return ROC_DADD(sum, ROC_DMUL((double)x, (double)x));
}

ROC_HD double roc_inverse_norm(double square_sum)
{
#ifdef __CUDA_ARCH__
    return __ddiv_rn(1.0, __dsqrt_rn(square_sum));
#else
    return 1.0 / sqrt(square_sum);
#endif
}

ROC_HD float roc_cosine_value(float x, double inverse_norm)
{
    return (float)ROC_DMUL((double)x, inverse_norm);
}

/* Entries [b0, b1) of a level index's table (roc_find_level's lut): entry b
 * is the first of the n sorted levels at or above bucket b's start, n where
 * none is; the first entry by bisection, the others by walking on from it.
 * The CPU and the GPU fill their tables with it, a run of entries a thread. */
ROC_HD void roc_level_index_fill(const uint32_t *levels, int64_t n, uint32_t base, int shift,
                                 int64_t b0, int64_t b1, uint32_t *lut)
{
    const uint64_t first = roc_bucket_start(base, shift, b0);
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (ROC_LOAD(levels + mid) < first)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int64_t b = b0; b < b1; b++) {
        const uint64_t start = roc_bucket_start(base, shift, b);
        while (lo < n && ROC_LOAD(levels + lo) < start)
            lo++;
        lut[b] = (uint32_t)lo;
    }
}

/* Element t of an integer or bool array of ext_dtype `dtype` (a pair list's
 * flags and indices, the labels). */
ROC_HD int64_t roc_int_at(const void *p, int dtype, int64_t t)
{
    switch (dtype) {
    case EXT_INT64: return ((const int64_t *)p)[t];
    case EXT_INT32: return ((const int32_t *)p)[t];
    case EXT_INT8: return ((const int8_t *)p)[t];
    default: return ((const uint8_t *)p)[t]; /* EXT_UINT8, EXT_BOOL */
    }
}

/* The first of n ascending keys at or above `key`, else n. */
ROC_HD int64_t roc_first_key_at_least(const uint32_t *keys, int64_t n, uint32_t key)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* scikit-learn's drop_intermediate: of the curve with a point at every
 * distinct score, a point (not the first or the last) stays where the step
 * into it, (imp, gen) new impostor and genuine pairs, differs from the step
 * out of it, (next_imp, next_gen): roc_curve's np.diff(fps, 2) and
 * np.diff(tps, 2) are those differences. The host's summary and the GPU's
 * curve points both keep points by it. */
ROC_HD int roc_sklearn_keeps(uint64_t imp, uint64_t gen, uint64_t next_imp, uint64_t next_gen)
{
    return imp != next_imp || gen != next_gen;
}

#endif /* ROC_MATH_H */
