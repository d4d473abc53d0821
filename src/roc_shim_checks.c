/*
 * roc_shim_checks.c: the input checks both C shims share, the ROC
 * evaluator's (roc_eval.c) and the rank count's (roc_rank_eval.c): an
 * all-pairs source's shapes and dtypes, an evaluation still usable, rows in
 * range. Declared in roc_internal.h; each names the caller's function.
 */
#include "ext_check.h"
#include "roc_internal.h"

/* The shapes of an all-pairs source against the labels' n_query and
 * n_gallery: score (Q, G), or feat_q (Q, D) and feat_g (G, D); one set's
 * queries (same_set) rows of it from row_offset. Shared with the rank
 * count's shim (roc_rank_eval.c). */
int roc_check_pair_shapes(const char *fn, int64_t n_query, int64_t n_gallery,
                          const ext_tensor *score, const ext_tensor *feat_q,
                          const ext_tensor *feat_g, int same_set, int64_t row_offset)
{
    int st;
    if (score) {
        if ((st = ext_check_ndim(fn, "score", score, 2)))
            return st;
        if (score->sizes[0] != n_query || score->sizes[1] != n_gallery)
            return ext_fail(EXT_ERR_VALUE, "%s: score is (Q, G) = (%lld, %lld) but labels_q has "
                            "%lld elements and labels_g %lld", fn, (long long)score->sizes[0],
                            (long long)score->sizes[1], (long long)n_query, (long long)n_gallery);
    } else {
        if ((st = ext_check_ndim(fn, "feat_q", feat_q, 2)) ||
            (st = ext_check_ndim(fn, "feat_g", feat_g, 2)))
            return st;
        if (feat_q->sizes[1] != feat_g->sizes[1])
            return ext_fail(EXT_ERR_VALUE, "%s: feat_q is (%lld, %lld) but feat_g is (%lld, %lld): "
                            "the feature dimensions differ", fn, (long long)feat_q->sizes[0],
                            (long long)feat_q->sizes[1], (long long)feat_g->sizes[0],
                            (long long)feat_g->sizes[1]);
        if (feat_q->sizes[0] != n_query)
            return ext_fail(EXT_ERR_VALUE, "%s: feat_q has %lld rows but labels_q has %lld "
                            "elements", fn, (long long)feat_q->sizes[0], (long long)n_query);
        if (feat_g->sizes[0] != n_gallery)
            return ext_fail(EXT_ERR_VALUE, "%s: feat_g has %lld rows but labels_g has %lld "
                            "elements", fn, (long long)feat_g->sizes[0], (long long)n_gallery);
    }
    if (same_set &&
        (row_offset < 0 || row_offset > n_gallery - n_query))
        return ext_fail(EXT_ERR_VALUE, "%s: same_set: the %lld queries from row %lld are not "
                        "rows of the %lld-entry set", fn, (long long)n_query,
                        (long long)row_offset, (long long)n_gallery);
    return EXT_OK;
}

int roc_check_source_dtypes(const char *fn, const ext_tensor *score, const ext_tensor *feat_q,
                            const ext_tensor *feat_g, ext_arg *args, int *n_args)
{
    int st;
    if (score) {
        if ((st = ext_check_dtype(fn, "score", score, EXT_MASK(EXT_FLOAT32))))
            return st;
        args[(*n_args)++] = (ext_arg){"score", score};
        return EXT_OK;
    }
    if ((st = ext_check_dtype(fn, "feat_q", feat_q, EXT_MASK(EXT_FLOAT32))) ||
        (st = ext_check_dtype(fn, "feat_g", feat_g, EXT_MASK(EXT_FLOAT32))))
        return st;
    args[(*n_args)++] = (ext_arg){"feat_q", feat_q};
    args[(*n_args)++] = (ext_arg){"feat_g", feat_g};
    return EXT_OK;
}

int roc_check_usable(const char *caller, int broken)
{
    if (broken)
        return ext_fail(EXT_ERR_VALUE, "%s: this evaluation failed in an earlier step; its "
                        "counts are incomplete (start a new one)", caller);
    return EXT_OK;
}

int roc_check_rows(const char *caller, int64_t row_begin, int64_t row_end, int64_t n_rows)
{
    if (row_begin < 0 || row_end > n_rows || row_begin > row_end)
        return ext_fail(EXT_ERR_VALUE, "%s: rows [%lld, %lld) are outside [0, %lld)", caller,
                        (long long)row_begin, (long long)row_end, (long long)n_rows);
    return EXT_OK;
}
