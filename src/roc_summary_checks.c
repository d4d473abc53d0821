/*
 * roc_summary_checks.c: the counts a summary is given, checked before its
 * arithmetic trusts them (roc_summary.c calls these first).
 *
 * The counts may have been reduced across processes (or written over by a
 * caller). The summaries subtract counts that must include one another and
 * sum counts that must fit 64 bits: counts of ranks that disagree (binned over
 * other ranges, counted against other levels) would wrap around into curves
 * of 1e18 pairs. Each summarizer checks what its arithmetic assumes first.
 */
#include <stdio.h>

#include "ext_check.h"
#include "roc_internal.h"
#include "roc_math.h"

#define COUNTS_WRONG "roc: the counts cannot be right (reduced from processes that disagree?): "

/* *sum += x; 1 where the sum does not fit 64 bits. */
static int add_overflows(uint64_t *sum, uint64_t x)
{
    return __builtin_add_overflow(*sum, x, sum);
}

static int count_overflow(const char *what)
{
    return ext_fail(EXT_ERR_VALUE, COUNTS_WRONG "%s exceed 2^64", what);
}

/* The levels' genuine pairs add up to the genuine total (every summarizer's
 * first check: the genuine pairs of any part then fit 64 bits). */
int roc_check_genuine_total(const roc_genuine_levels *genuine, const roc_totals *totals)
{
    uint64_t n_genuine = 0;
    for (int64_t u = 0; u < genuine->n_levels; u++)
        if (add_overflows(&n_genuine, genuine->counts[u]))
            return count_overflow("the genuine pairs");
    if (n_genuine != totals->n_genuine)
        return ext_fail(EXT_ERR_VALUE, COUNTS_WRONG "the genuine levels hold %llu pairs but "
                        "the total is %llu", (unsigned long long)n_genuine,
                        (unsigned long long)totals->n_genuine);
    return EXT_OK;
}

/* Exact mode: each level's pairs include its genuine ones, each gap's lowest
 * key lies inside the gap, the top score's pairs are among the top gap's; the
 * impostor pairs (*n_impostor) fit 64 bits. */
int roc_check_exact_counts(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                           uint64_t *n_impostor /* OUT */)
{
    const int64_t U = genuine->n_levels;
    const uint32_t *g = genuine->keys;
    uint64_t n = 0;
    for (int64_t u = 0; u < U; u++) {
        if (counts->at[u] < genuine->counts[u])
            return ext_fail(EXT_ERR_VALUE, COUNTS_WRONG "score %.9g has %llu genuine pairs but "
                            "%llu pairs in all", roc_key_score(g[u]),
                            (unsigned long long)genuine->counts[u],
                            (unsigned long long)counts->at[u]);
        if (add_overflows(&n, counts->at[u] - genuine->counts[u]))
            return count_overflow("the impostor pairs");
    }
    for (int64_t p = 0; p <= U; p++) {
        if (counts->gap[p] == 0)
            continue;
        const uint32_t lowest = counts->gap_min[p];
        if ((p > 0 && lowest <= g[p - 1]) || (p < U && lowest >= g[p]))
            return ext_fail(EXT_ERR_VALUE, COUNTS_WRONG "the lowest score (%.9g) of the %llu "
                            "impostor pairs in gap %lld lies outside the gap",
                            roc_key_score(lowest), (unsigned long long)counts->gap[p],
                            (long long)p);
        if (add_overflows(&n, counts->gap[p]))
            return count_overflow("the impostor pairs");
    }
    if (counts->gap[U] > 0 && (counts->top_count == 0 || counts->top_count > counts->gap[U] ||
                               counts->top_key < counts->gap_min[U]))
        return ext_fail(EXT_ERR_VALUE, COUNTS_WRONG "the top score's %llu pairs are not among "
                        "the %llu impostor pairs above every genuine score",
                        (unsigned long long)counts->top_count, (unsigned long long)counts->gap[U]);
    *n_impostor = n;
    return EXT_OK;
}

/* Curve mode: the keys distinct and ascending, every genuine level one of
 * them, whose pairs include its genuine ones; all pairs (*n_all) fit 64 bits. */
int roc_check_curve_counts(const roc_genuine_levels *genuine, const roc_key_counts *counts,
                           uint64_t *n_all /* OUT */)
{
    for (int64_t k = 1; k < counts->n_keys; k++)
        if (counts->keys[k] <= counts->keys[k - 1])
            return ext_fail(EXT_ERR_VALUE, COUNTS_WRONG "the distinct scores are not distinct "
                            "and ascending");
    int64_t i = 0;
    for (int64_t u = 0; u < genuine->n_levels; u++) {
        const uint32_t key = genuine->keys[u];
        while (i < counts->n_keys && counts->keys[i] < key)
            i++;
        if (i == counts->n_keys || counts->keys[i] != key)
            return ext_fail(EXT_ERR_VALUE, COUNTS_WRONG "genuine score %.9g is not among the "
                            "distinct scores counted", roc_key_score(key));
        if (counts->counts[i] < genuine->counts[u])
            return ext_fail(EXT_ERR_VALUE, COUNTS_WRONG "score %.9g has %llu genuine pairs but "
                            "%llu pairs in all", roc_key_score(key),
                            (unsigned long long)genuine->counts[u],
                            (unsigned long long)counts->counts[i]);
    }
    uint64_t n = 0;
    for (int64_t k = 0; k < counts->n_keys; k++)
        if (add_overflows(&n, counts->counts[k]))
            return count_overflow("the pairs");
    *n_all = n;
    return EXT_OK;
}

/* Binned mode: each bin, and the range's outside, holds at least its genuine
 * pairs (gen_below, gen_bins (n_bins), gen_above); the impostor pairs
 * (*n_impostor) fit 64 bits. */
int roc_check_binned_counts(const roc_binned_counts *counts, uint64_t gen_below,
                            const uint64_t *gen_bins, uint64_t gen_above,
                            uint64_t *n_impostor /* OUT */)
{
    const int64_t n = counts->n_bins;
    uint64_t sum = 0;
    for (int64_t b = -1; b <= n; b++) {
        const uint64_t all = b < 0 ? counts->below : b == n ? counts->above : counts->all[b];
        const uint64_t gen = b < 0 ? gen_below : b == n ? gen_above : gen_bins[b];
        if (all < gen) {
            char where[64];
            if (b < 0 || b == n)
                snprintf(where, sizeof where, "%s the range", b < 0 ? "below" : "above");
            else
                snprintf(where, sizeof where, "bin %lld", (long long)b);
            return ext_fail(EXT_ERR_VALUE, COUNTS_WRONG "%s holds %llu genuine pairs but %llu "
                            "pairs in all", where, (unsigned long long)gen,
                            (unsigned long long)all);
        }
        if (add_overflows(&sum, all - gen))
            return count_overflow("the impostor pairs");
    }
    *n_impostor = sum;
    return EXT_OK;
}

/* Both classes present: else the ROC is undefined. */
int roc_check_totals(uint64_t n_genuine, uint64_t n_impostor)
{
    if (n_genuine == 0)
        return ext_fail(EXT_ERR_VALUE, "roc: there are no genuine pairs (no query shares a "
                        "label with a gallery entry, or all their scores are NaN); the ROC is "
                        "undefined");
    if (n_impostor == 0)
        return ext_fail(EXT_ERR_VALUE, "roc: there are no impostor pairs (every pair shares its "
                        "label, or all their scores are NaN); the ROC is undefined");
    return EXT_OK;
}
