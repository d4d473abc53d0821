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

/* The features of a genuine pair's two rows as the feature pass sees them:
 * raw (row-major), scaled by their inverse norms for cosine. */
struct FeatureRows {
    const float *q, *g;
    const double *inverse_q, *inverse_g; /* null for dot */
    int64_t dim;
    bool vectors; /* rows of whole, aligned float4s */

    /* The fmaf chain of FeatureTile::product over the values prepare_kernel
     * makes, so the two agree bit for bit (the product's zero padding only
     * turns a sum of -0 into +0, one key). */
    __device__ float score(int64_t i, int64_t j) const
    {
        const float *a = q + i * dim, *b = g + j * dim;
        const bool cosine = inverse_q != nullptr;
        const double scale_a = cosine ? inverse_q[i] : 1.0, scale_b = cosine ? inverse_g[j] : 1.0;
        float s = 0.0f;
        auto step = [&](float x, float y) {
            if (cosine) {
                x = float(__dmul_rn(double(x), scale_a));
                y = float(__dmul_rn(double(y), scale_b));
            }
            s = fmaf(x, y, s);
        };
        int64_t k = 0;
        if (vectors) { /* a quarter of the load instructions (threads read rows far apart) */
            for (; k < dim; k += 4) {
                const float4 x = *reinterpret_cast<const float4 *>(a + k);
                const float4 y = *reinterpret_cast<const float4 *>(b + k);
                step(x.x, y.x);
                step(x.y, y.y);
                step(x.z, y.z);
                step(x.w, y.w);
            }
        }
        for (; k < dim; k++)
            step(a[k], b[k]);
        return s;
    }
};

/* A list of pairs as the kernels read it: flags, and the score or the two
 * feature rows of each pair (row-major, scaled to unit length for cosine). */
struct PairList {
    const void *genuine, *index_a, *index_b;
    int genuine_dtype, index_dtype;
    const float *score, *a, *b;
    int64_t dim, n_a, n_b;

    /* The pair's score: one fmaf chain over k in order, as on the CPU. */
    __device__ __forceinline__ float score_of(int64_t t) const
    {
        if (score)
            return score[t];
        const float *ra = a + roc_int_at(index_a, index_dtype, t) * dim;
        const float *rb = b + roc_int_at(index_b, index_dtype, t) * dim;
        float s = 0.0f;
        if (dim % 8 == 0 && ext_aligned16(ra) && ext_aligned16(rb)) {
            /* 32 bytes of each row a step: whole sectors, though a warp's lanes
             * read 32 different rows */
            for (int64_t k = 0; k < dim; k += 8) {
                const float4 x0 = __ldg(reinterpret_cast<const float4 *>(ra + k));
                const float4 x1 = __ldg(reinterpret_cast<const float4 *>(ra + k + 4));
                const float4 y0 = __ldg(reinterpret_cast<const float4 *>(rb + k));
                const float4 y1 = __ldg(reinterpret_cast<const float4 *>(rb + k + 4));
                const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                const float y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
                for (int u = 0; u < 8; u++)
                    s = fmaf(x[u], y[u], s);
            }
        } else {
            for (int64_t k = 0; k < dim; k++)
                s = fmaf(__ldg(ra + k), __ldg(rb + k), s);
        }
        return s;
    }
};

} // namespace roc_gpu

#endif /* ROC_SCORES_CUH */
