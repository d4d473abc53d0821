/*
 * roc_scores.cuh: one pair's score from features on the device, as the tile
 * product computes it (one fp32 FMA chain over k in order), for the pairs a
 * kernel scores one at a time: the genuine pairs of all pairs (FeatureRows)
 * and the pairs of a list (PairList). C++ only.
 */
#ifndef ROC_SCORES_CUH
#define ROC_SCORES_CUH

#include <stdint.h>

#include "../roc_math.h"
#include "ext_cuda.cuh"

namespace roc_gpu {

/* One pair's score from its rows a and b of `dim` values: the FMA chain over
 * k in order (roc_math.h), each value first scaled by its row's inverse norm
 * where inverse_a and inverse_b are given (cosine from raw rows; rows scaled
 * already, or dot, give none), so that it equals the tile product's score of
 * the same pair bit for bit (whose zero padding only turns a sum of -0 into
 * +0, one key). Rows of whole, 16-byte aligned groups of 8 values are read 32
 * bytes a step: whole sectors, though a warp's lanes read 32 different rows. */
__device__ __forceinline__ float pair_score(const float *a, const float *b, int64_t dim,
                                            const double *inverse_a, const double *inverse_b)
{
    const bool cosine = inverse_a != nullptr;
    const double scale_a = cosine ? *inverse_a : 1.0, scale_b = cosine ? *inverse_b : 1.0;
    float s = 0.0f;
    auto step = [&](float x, float y) {
        if (cosine) {
            x = roc_cosine_value(x, scale_a);
            y = roc_cosine_value(y, scale_b);
        }
        s = roc_dot_step(s, x, y);
    };
    int64_t k = 0;
    if (dim % 8 == 0 && ext_aligned16(a) && ext_aligned16(b)) {
        for (; k < dim; k += 8) {
            const float4 x0 = __ldg(reinterpret_cast<const float4 *>(a + k));
            const float4 x1 = __ldg(reinterpret_cast<const float4 *>(a + k + 4));
            const float4 y0 = __ldg(reinterpret_cast<const float4 *>(b + k));
            const float4 y1 = __ldg(reinterpret_cast<const float4 *>(b + k + 4));
            const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            const float y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
            for (int u = 0; u < 8; u++)
                step(x[u], y[u]);
        }
    }
    for (; k < dim; k++)
        step(__ldg(a + k), __ldg(b + k));
    return s;
}

/* The features of a genuine pair's two rows as the feature pass sees them:
 * raw (row-major), with their inverse norms for cosine. */
struct FeatureRows {
    const float *q, *g;
    const double *inverse_q, *inverse_g; /* null for dot */
    int64_t dim;

    __device__ float score(int64_t i, int64_t j) const
    {
        return pair_score(q + i * dim, g + j * dim, dim, inverse_q ? inverse_q + i : nullptr,
                          inverse_g ? inverse_g + j : nullptr);
    }
};

/* A list of pairs as the kernels read it: flags, and the score or the two
 * feature rows of each pair (row-major, scaled to unit length for cosine). */
struct PairList {
    const void *genuine, *index_a, *index_b;
    int genuine_dtype, index_dtype;
    const float *score, *a, *b;
    int64_t dim, n_a, n_b;

    __device__ __forceinline__ float score_of(int64_t t) const
    {
        if (score)
            return score[t];
        return pair_score(a + roc_int_at(index_a, index_dtype, t) * dim,
                          b + roc_int_at(index_b, index_dtype, t) * dim, dim, nullptr, nullptr);
    }
};

} // namespace roc_gpu

#endif /* ROC_SCORES_CUH */
