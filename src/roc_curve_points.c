/*
 * roc_curve_points.c: scikit-learn's roc_curve points from the curve mode's
 * host counts (every distinct key with its pairs, and the genuine levels,
 * whose keys are among them), highest key first: each point's key and the
 * impostor (fps) and genuine (tps) pairs at or above it. The GPU backend
 * builds the same points where its counts are (cuda/roc_curve_points.cu);
 * both keep a point by roc_sklearn_keeps (roc_math.h).
 */
#include "roc_internal.h"
#include "roc_math.h"

int64_t roc_curve_points_host(const roc_genuine_levels *genuine, const roc_key_counts *counts,
                              int every_point, uint32_t *keys, uint64_t *fps, uint64_t *tps)
{
    const int64_t n = counts->n_keys;
    int64_t u = genuine->n_levels - 1, kept = 0;
    uint64_t fp = 0, tp = 0;
    /* the step into key i, then the step into key i - 1 (the step out of i) */
    uint64_t gen = n > 0 && u >= 0 && genuine->keys[u] == counts->keys[n - 1]
                   ? genuine->counts[u--] : 0;
    uint64_t imp = n > 0 ? counts->counts[n - 1] - gen : 0;
    for (int64_t i = n - 1; i >= 0; i--) {
        uint64_t next_gen = 0, next_imp = 0;
        if (i > 0) {
            next_gen = u >= 0 && genuine->keys[u] == counts->keys[i - 1] ? genuine->counts[u--]
                                                                          : 0;
            next_imp = counts->counts[i - 1] - next_gen;
        }
        fp += imp;
        tp += gen;
        if (every_point || i == n - 1 || i == 0 || roc_sklearn_keeps(imp, gen, next_imp,
                                                                     next_gen)) {
            if (keys) {
                keys[kept] = counts->keys[i];
                fps[kept] = fp;
                tps[kept] = tp;
            }
            kept++;
        }
        imp = next_imp;
        gen = next_gen;
    }
    return kept;
}
