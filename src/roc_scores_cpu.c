/*
 * roc_scores_cpu.c: scores from features on the CPU, shared by the
 * evaluator's backend (roc_eval_cpu.c), the rank count (roc_rank_cpu.c) and
 * pair_scores.
 *
 * Every score is the fp32 FMA chain of roc_math.h (roc_dot_step over k in
 * index order, from 0), of rows scaled for cosine as the GPU scales them, so
 * every CPU path and the GPU see bit-identical scores. The tile is the unit
 * of the counting passes: ROC_CPU_TILE_ROWS query rows x ROC_CPU_TILE_COLS
 * gallery rows, the gallery block transposed so that the inner loop runs over
 * contiguous columns.
 */
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc_internal.h"
#include "roc_math.h"

void roc_cpu_normalize_rows(const float *x, float *out, int64_t n, int64_t dim)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double sum = 0.0;
        for (int64_t k = 0; k < dim; k++)
            sum = roc_square_step(sum, x[i * dim + k]);
        const double inverse = roc_inverse_norm(sum);
        for (int64_t k = 0; k < dim; k++)
            out[i * dim + k] = roc_cosine_value(x[i * dim + k], inverse);
    }
}

__attribute__((target_clones("fma", "default")))
float roc_cpu_dot(const float *a, const float *b, int64_t dim)
{
    float acc = 0.0f;
    for (int64_t k = 0; k < dim; k++)
        acc = roc_dot_step(acc, a[k], b[k]);
    return acc;
}

__attribute__((target_clones("fma", "default")))
void roc_cpu_score_tile(const float *feat_q, const float *feat_g, int64_t dim, int64_t r0,
                        int64_t n_rows, int64_t c0, int64_t n_cols, float *gT, float *out)
{
    enum { COLS = ROC_CPU_TILE_COLS };
    for (int64_t k = 0; k < dim; k++)
        for (int64_t c = 0; c < COLS; c++)
            gT[k * COLS + c] = c < n_cols ? feat_g[(c0 + c) * dim + k] : 0.0f;
    for (int64_t r = 0; r < n_rows; r++) {
        float acc[COLS] = {0};
        const float *q = feat_q + (r0 + r) * dim;
        for (int64_t k = 0; k < dim; k++) {
            const float qk = q[k];
            const float *g = gT + k * COLS;
            for (int c = 0; c < COLS; c++)
                acc[c] = roc_dot_step(acc[c], qk, g[c]);
        }
        memcpy(out + r * COLS, acc, sizeof acc);
    }
}

int roc_scores_cpu(const float *feat_q, const float *feat_g, int64_t n_query, int64_t n_gallery,
                   int64_t dim, int similarity, float *score)
{
    const float *fq = feat_q, *fg = feat_g;
    float *nq = NULL, *ng = NULL;
    if (similarity == ROC_COSINE) {
        nq = ext_malloc((size_t)(n_query * dim) * sizeof(float));
        ng = ext_malloc((size_t)(n_gallery * dim) * sizeof(float));
        if (!nq || !ng) {
            free(nq);
            free(ng);
            return ext_fail(EXT_ERR_NOMEM, "pair_scores: cannot allocate the normalized features");
        }
        roc_cpu_normalize_rows(feat_q, nq, n_query, dim);
        roc_cpu_normalize_rows(feat_g, ng, n_gallery, dim);
        fq = nq;
        fg = ng;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n_query; i++)
        for (int64_t j = 0; j < n_gallery; j++)
            score[i * n_gallery + j] = roc_cpu_dot(fq + i * dim, fg + j * dim, dim);
    free(nq);
    free(ng);
    return EXT_OK;
}

int roc_cpu_tile_scratch_alloc(roc_cpu_tile_scratch *s, int64_t dim)
{
    s->tile = ext_malloc(ROC_CPU_TILE_ROWS * ROC_CPU_TILE_COLS * sizeof(float));
    s->gT = ext_malloc((size_t)dim * ROC_CPU_TILE_COLS * sizeof(float));
    return s->tile && s->gT;
}

void roc_cpu_tile_scratch_free(roc_cpu_tile_scratch *s)
{
    free(s->tile);
    free(s->gT);
}
