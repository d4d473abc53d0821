/*
 * roc_pair_scores.c: roc_pair_scores (roc.h), the score matrix the
 * evaluator sees from features, the same fp32 bits: on the CPU
 * (roc_scores_cpu.c) or the GPU (cuda/roc_eval_kernel.cu's
 * roc_scores_launch) by the device of the features.
 */
#include "ext_check.h"
#include "roc_internal.h"

#ifdef EXT_WITH_CUDA
#include "cuda/roc_eval_kernel.h"
#endif

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
    return roc_scores_cpu(feat_q->data, feat_g->data, Q, G, D, similarity, score->data);
}
