/*
 * roc_rank_summary.c: the 1:N metrics from the per-query counts of a
 * roc_rank_view (roc_rank.h), on the host.
 *
 * Ranks. A query's mates, highest key first, fall into runs of equal keys.
 * For a run of g mates tied with t non-mates, with `a` mates and `n`
 * non-mates strictly above it, the j-th mate of the run (j = 1 .. g, in the
 * order the ranked list shows them) is mate number a + j of the query and has
 * rank R = a + n + j + X, where X (0 .. t) is the number of tied non-mates
 * placed before it: t under ROC_TIES_PESSIMISTIC, 0 under ROC_TIES_OPTIMISTIC,
 * and under ROC_TIES_EXPECTED random, as in a uniformly random order of the
 * g + t tied entries: P(X = x) = C(x + j - 1, x) C(t - x + g - j, t - x) /
 * C(t + g, t) (a negative hypergeometric law). Every metric is a sum over the
 * mates of a function of (a + j, R), so its expectation is the sum of the
 * per-mate expectations over that law: the metrics under ROC_TIES_EXPECTED
 * are the peers' metrics averaged over every order of the ties.
 *
 * Per mated query (M scored mates, rank R of mate number m):
 *   AP "noninterpolated" (torchreid, fast-reid)  sum_m (m / R_m) / M
 *   AP "trapezoid" (layumi)   sum_m ((m - 1) / (R_m - 1), or 1 at R_m = 1, + m / R_m) / 2M
 *   INP (fast-reid)           M / R_M
 *   MAP@R (pytorch-metric-learning, R = M)   sum_{m: R_m <= M} (m / R_m) / M
 *   R-precision               #{m: R_m <= M} / M
 *   CMC[k - 1]                [R_1 <= k]; precision@1 = CMC[0]
 * each averaged over the mated queries. The TPIR rules are written by
 * tpir_rows below.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc_math.h"
#include "roc_rank_internal.h"

/* Expectations below a law's mode by this factor are left out: they change
 * no double (the law is log-concave, so its tails fall off geometrically). */
#define NEGLIGIBLE 1e-18

// ---------------------------------------------------------------------------
// one query

/* A run of equal mate keys: a mates and n non-mates above it, g mates, t
 * non-mates tied. */
typedef struct {
    int64_t a, n, g, t;
} run_shape;

/* Sums over a query's mates of the expected per-mate terms of the metrics. */
typedef struct {
    double precision;      /* m / R */
    double trapezoid;      /* layumi's (old precision + precision) / 2 */
    double precision_in_r; /* m / R where R <= r_limit */
    double in_r;           /* [R <= r_limit] */
} mate_terms;

static void add_terms(mate_terms *sum, double weight, int64_t m, int64_t rank, int64_t r_limit)
{
    const double R = (double)rank, mth = (double)m, precision = mth / R;
    sum->precision += weight * precision;
    sum->trapezoid += weight * ((rank > 1 ? (mth - 1.0) / (R - 1.0) : 1.0) + precision) / 2.0;
    if (rank <= r_limit) {
        sum->precision_in_r += weight * precision;
        sum->in_r += weight;
    }
}

/* P(X = x + 1) / P(X = x) for the j-th of g mates tied with t non-mates. */
static inline double law_ratio(int64_t x, int64_t j, int64_t g, int64_t t)
{
    return ((double)(x + j) * (double)(t - x)) / ((double)(x + 1) * (double)(t - x + g - j));
}

/* The j-th mate of `run` under ROC_TIES_EXPECTED: its terms, and E[1/R] in
 * *inverse_rank, summed over the law of X from its mode outwards, weights
 * relative to the mode's and normalized by their sum. */
static void expected_terms(const run_shape *run, int64_t j, int64_t r_limit, mate_terms *sum,
                           double *inverse_rank)
{
    const int64_t g = run->g, t = run->t, m = run->a + j, base = run->a + run->n + j;
    int64_t mode = (int64_t)((double)j * (double)t / (double)(g + 1));
    mode = mode > t ? t : mode;
    while (mode < t && law_ratio(mode, j, g, t) > 1.0)
        mode++;
    while (mode > 0 && law_ratio(mode - 1, j, g, t) < 1.0)
        mode--;
    mate_terms own = {0};
    double total = 0.0, inverse = 0.0, p = 1.0;
    for (int64_t x = mode; x <= t; x++) {
        if (x > mode)
            p *= law_ratio(x - 1, j, g, t);
        if (p < NEGLIGIBLE)
            break;
        add_terms(&own, p, m, base + x, r_limit);
        inverse += p / (double)(base + x);
        total += p;
    }
    p = 1.0;
    for (int64_t x = mode - 1; x >= 0; x--) {
        p /= law_ratio(x, j, g, t);
        if (p < NEGLIGIBLE)
            break;
        add_terms(&own, p, m, base + x, r_limit);
        inverse += p / (double)(base + x);
        total += p;
    }
    sum->precision += own.precision / total;
    sum->trapezoid += own.trapezoid / total;
    sum->precision_in_r += own.precision_in_r / total;
    sum->in_r += own.in_r / total;
    *inverse_rank = inverse / total;
}

/* The placed-before count X of a policy that decides it. */
static int64_t fixed_ties(int ties, int64_t t)
{
    return ties == ROC_TIES_PESSIMISTIC ? t : 0;
}

/* What the summary keeps of one mated query. */
typedef struct {
    double ap, inp, map_at_r, r_precision;
    double rank1;          /* P(first mate at rank 1) */
    double first_rank;     /* E[rank of the first mate] */
} query_result;

/* Query i of the view (M > 0 scored mates): its metrics, and the mean rank of
 * each of its mated pairs into mate_rank[first[i] ..]. */
static query_result one_query(const roc_rank_view *v, int64_t i, const roc_rank_summary_options *o,
                              double *mate_rank)
{
    const int64_t first = v->first[i], M = v->first[i + 1] - first;
    const uint32_t *keys = v->mate_key + first;
    mate_terms sum = {0};
    double inverse_last = 0.0;
    query_result out = {0};
    /* runs from the highest key (stored last) down */
    for (int64_t end = M; end > 0;) {
        int64_t start = end - 1;
        while (start > 0 && keys[start - 1] == keys[end - 1])
            start--;
        const run_shape run = {M - end, (int64_t)v->above[first + start], end - start,
                               (int64_t)v->tied[first + start]};
        const int64_t base = run.a + run.n;
        const int last_run = start == 0;
        for (int64_t j = 1; j <= run.g; j++) {
            double inverse;
            if (o->ties == ROC_TIES_EXPECTED && run.t > 0) {
                expected_terms(&run, j, M, &sum, &inverse);
            } else {
                const int64_t rank = base + j + fixed_ties(o->ties, run.t);
                add_terms(&sum, 1.0, run.a + j, rank, M);
                inverse = 1.0 / (double)rank;
            }
            if (last_run && j == run.g)
                inverse_last = inverse;
        }
        for (int64_t u = start; u < end; u++) {
            /* a given mate of the run: the (u - start + 1)-th of its mates by gallery
             * index where the policy decides, else anywhere among the g + t tied */
            mate_rank[first + u] = o->ties == ROC_TIES_EXPECTED
                ? (double)base + (double)(run.g + run.t + 1) / 2.0
                : (double)(base + (u - start + 1) + fixed_ties(o->ties, run.t));
        }
        if (end == M) { /* the top run holds the first mate (j = 1) */
            if (o->ties == ROC_TIES_EXPECTED) {
                out.first_rank = (double)base + 1.0 + (double)run.t / (double)(run.g + 1);
                out.rank1 = base == 0 ? (double)run.g / (double)(run.g + run.t) : 0.0;
            } else {
                out.first_rank = (double)(base + 1 + fixed_ties(o->ties, run.t));
                out.rank1 = out.first_rank == 1.0;
            }
        }
        end = start;
    }
    out.ap = (o->ap == ROC_AP_TRAPEZOID ? sum.trapezoid : sum.precision) / (double)M;
    out.inp = (double)M * inverse_last;
    out.map_at_r = sum.precision_in_r / (double)M;
    out.r_precision = sum.in_r / (double)M;
    return out;
}

/* Query i's first mate into the CMC's histogram: hist[k - 1] += P(R_1 = k)
 * for k <= max_rank. The first mate is the first of the top run's g mates
 * among its g + t tied entries: P(X = x) = prod_{y < x} (t - y) / (t + g - y)
 * * g / (t + g - x). */
static void first_mate_histogram(const roc_rank_view *v, int64_t i, int ties, int64_t max_rank,
                                 double *hist)
{
    const int64_t first = v->first[i], M = v->first[i + 1] - first;
    const uint32_t *keys = v->mate_key + first;
    int64_t start = M - 1;
    while (start > 0 && keys[start - 1] == keys[M - 1])
        start--;
    const int64_t n = (int64_t)v->above[first + M - 1], t = (int64_t)v->tied[first + M - 1];
    const int64_t g = M - start;
    if (ties != ROC_TIES_EXPECTED || t == 0) {
        const int64_t rank = n + 1 + fixed_ties(ties, t);
        if (rank <= max_rank)
            hist[rank - 1] += 1.0;
        return;
    }
    double none_yet = 1.0; /* P(X >= x) */
    for (int64_t x = 0; x <= t && n + 1 + x <= max_rank; x++) {
        hist[n + x] += none_yet * (double)g / (double)(t + g - x);
        none_yet *= (double)(t - x) / (double)(t + g - x);
    }
}

// ---------------------------------------------------------------------------
// TPIR at FPIR

static int descending_keys(const void *x, const void *y)
{
    const uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a < b) - (a > b);
}

/* What the TPIR rules read, by query. */
typedef struct {
    int64_t n_queries, n_mated;
    const uint32_t *top_key;   /* Q: the highest mate key, 0 where no scored mate */
    const double *rank1;       /* Q: P(the first mate at rank 1) */
    const uint32_t *best_key;  /* Q: the highest non-mate key, 0 where none */
    const int *unmated;        /* Q: no mate at all (a non-mated search) */
} searches;

typedef struct {
    double tpir, threshold, achieved;
    int below;
} tpir_row;

static const tpir_row NO_ANSWER = {NAN, NAN, NAN, 1};

static double score_of(uint32_t key)
{
    return key == ROC_NO_KEY ? -INFINITY : (double)roc_key_score(key);
}

/* keys[0 .. n) sorted descending (the caller's copy). */
static void sort_descending(uint32_t *keys, int64_t n)
{
    qsort(keys, (size_t)n, sizeof *keys, descending_keys);
}

/* How many of the n descending keys are strictly above `key`. */
static int64_t count_above(const uint32_t *keys, int64_t n, uint32_t key)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] > key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* NIST FRVT: over the N non-mated searches' best scores B (descending), the
 * lowest threshold T with #{B >= T} <= floor(fpir N): T just above B[k], k =
 * floor(fpir N) (every score, where k >= N); a mated search hits where its mate
 * is at rank 1 (by the ties policy) and scores >= T. */
static tpir_row nist_row(const searches *s, const uint32_t *B, int64_t N, double fpir)
{
    if (N == 0 || s->n_mated == 0)
        return NO_ANSWER;
    const int64_t k = (int64_t)floor(fpir * (double)N);
    const uint32_t v = k < N ? B[k] : ROC_NO_KEY;
    double hits = 0.0;
    for (int64_t q = 0; q < s->n_queries; q++)
        if (s->top_key[q] != ROC_NO_KEY && s->top_key[q] > v)
            hits += s->rank1[q];
    return (tpir_row){hits / (double)s->n_mated,
                      v == ROC_NO_KEY ? -INFINITY : (double)nextafterf(roc_key_score(v), INFINITY),
                      (double)count_above(B, N, v) / (double)N, fpir > 0 && fpir * (double)N < 1.0};
}

/* InsightFace's ijb_evals.py evaluation_1N: threshold B[max(int(N fpir) - 1, 0)]
 * of the non-mated searches' best scores (descending); a mated search hits
 * where its best mate scores above both the threshold and its best non-mate
 * (strictly: no ties policy). */
static tpir_row ijb_row(const searches *s, const uint32_t *B, int64_t N, double fpir)
{
    if (N == 0 || s->n_mated == 0)
        return NO_ANSWER;
    const int64_t allowed = (int64_t)((double)N * fpir);
    const uint32_t v = B[allowed - 1 > 0 ? allowed - 1 : 0];
    int64_t hits = 0;
    for (int64_t q = 0; q < s->n_queries; q++)
        hits += s->top_key[q] != ROC_NO_KEY && s->top_key[q] > v &&
                s->top_key[q] > s->best_key[q];
    return (tpir_row){(double)hits / (double)s->n_mated, score_of(v),
                      (double)count_above(B, N, v) / (double)N, fpir > 0 && allowed < 1};
}

/* InsightFace's ijb_1n.py: threshold the K-th highest of every non-mated pair
 * score of the mated queries, K = ceil(n_mated fpir); a mated query hits where
 * its best mate scores above it (rank not asked). `kept` holds the highest
 * non-mated keys, descending. */
static int legacy_row(const searches *s, const uint32_t *kept, int64_t n_kept,
                      uint64_t n_nonmated, double fpir, const char *fn, tpir_row *row)
{
    const int64_t K = (int64_t)ceil((double)s->n_mated * fpir);
    if (s->n_mated == 0 || K == 0 || (uint64_t)K > n_nonmated) {
        *row = NO_ANSWER;
        return EXT_OK;
    }
    if (K > n_kept)
        return ext_fail(EXT_ERR_VALUE, "%s: fpir %g under insightface_1n_legacy needs the %lld "
                        "highest non-mated scores but %lld were kept (keep_nonmated)", fn, fpir,
                        (long long)K, (long long)n_kept);
    const uint32_t v = kept[K - 1];
    int64_t hits = 0;
    for (int64_t q = 0; q < s->n_queries; q++)
        hits += s->top_key[q] != ROC_NO_KEY && s->top_key[q] > v;
    *row = (tpir_row){(double)hits / (double)s->n_mated, score_of(v),
                      (double)count_above(kept, n_kept, v) / (double)s->n_mated, 0};
    return EXT_OK;
}

/* InsightFace 1.0's evaluation studio: negatives are every mated query's best
 * non-mate and every non-mated search's best score (N of them, descending),
 * positives the best mate of each mated query whose first mate is at rank 1
 * (by the ties policy); with floor(fpir N) false positives allowed (none:
 * insufficient data), the threshold is the lowest candidate score (a
 * positive, a negative, or the double just above the highest negative) that
 * keeps within them, and TPIR the positives at or above it over the mated
 * queries. */
static tpir_row studio_row(const searches *s, const uint32_t *negatives, int64_t N, double fpir)
{
    const int64_t allowed = (int64_t)floor(fpir * (double)N);
    if (N == 0 || s->n_mated == 0 || allowed == 0)
        return NO_ANSWER;
    const uint32_t v = allowed < N ? negatives[allowed] : ROC_NO_KEY;
    double threshold = nextafter((double)roc_key_score(negatives[0]), INFINITY), hits = 0.0;
    for (int64_t q = 0; q < s->n_queries; q++)
        if (s->top_key[q] != ROC_NO_KEY && s->rank1[q] > 0 && s->top_key[q] > v) {
            hits += s->rank1[q];
            threshold = fmin(threshold, (double)roc_key_score(s->top_key[q]));
        }
    const int64_t above = count_above(negatives, N, v);
    if (above > 0)
        threshold = fmin(threshold, (double)roc_key_score(negatives[above - 1]));
    return (tpir_row){hits / (double)s->n_mated, threshold, (double)above / (double)N, 0};
}

/* One row per target, by the options' rule, into the summary. */
static int tpir_rows(const roc_rank_view *v, const searches *s,
                     const roc_rank_summary_options *o, const char *fn, roc_rank_summary *out)
{
    const int64_t Q = s->n_queries;
    uint32_t *keys = ext_malloc((size_t)(Q > v->n_kept ? Q : v->n_kept) * sizeof *keys);
    if (!keys)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the TPIR rows", fn);
    int64_t N = 0;
    uint64_t n_nonmated = 0;
    switch (o->fpir_rule) {
    case ROC_FPIR_NIST:
    case ROC_FPIR_INSIGHTFACE_IJB:
        for (int64_t q = 0; q < Q; q++)
            if (s->unmated[q])
                keys[N++] = s->best_key[q];
        break;
    case ROC_FPIR_INSIGHTFACE_STUDIO:
        for (int64_t q = 0; q < Q; q++)
            if ((s->unmated[q] || s->top_key[q] != ROC_NO_KEY) && s->best_key[q] != ROC_NO_KEY)
                keys[N++] = s->best_key[q];
        break;
    default: /* ROC_FPIR_INSIGHTFACE_1N_LEGACY */
        N = v->n_kept;
        if (N)
            memcpy(keys, v->kept_keys, (size_t)N * sizeof *keys);
        for (int64_t q = 0; q < Q; q++)
            if (s->top_key[q] != ROC_NO_KEY)
                n_nonmated += v->n_nonmates[q];
    }
    sort_descending(keys, N);
    int st = EXT_OK;
    for (int64_t f = 0; f < o->n_fpirs && !st; f++) {
        const double fpir = o->fpirs[f];
        tpir_row row;
        switch (o->fpir_rule) {
        case ROC_FPIR_NIST: row = nist_row(s, keys, N, fpir); break;
        case ROC_FPIR_INSIGHTFACE_IJB: row = ijb_row(s, keys, N, fpir); break;
        case ROC_FPIR_INSIGHTFACE_STUDIO: row = studio_row(s, keys, N, fpir); break;
        default: st = legacy_row(s, keys, N, n_nonmated, fpir, fn, &row);
        }
        if (st)
            break;
        out->fpir[f] = fpir;
        out->tpir[f] = row.tpir;
        out->threshold[f] = row.threshold;
        out->achieved_fpir[f] = row.achieved;
        out->below_resolution[f] = row.below;
    }
    free(keys);
    return st;
}

// ---------------------------------------------------------------------------
// the summary

int roc_rank_summarize_view(const roc_rank_view *v, const roc_rank_summary_options *o,
                            const char *fn, roc_rank_summary *out)
{
    const int64_t Q = v->n_query, P = v->n_mated, F = o->n_fpirs;
    out->n_queries = Q;
    out->max_rank = o->max_rank;
    out->n_fpirs = F;
    out->n_mated_pairs = (uint64_t)P;
    out->cmc = ext_calloc((size_t)o->max_rank, sizeof *out->cmc);
    out->fpir = ext_malloc((size_t)F * sizeof *out->fpir);
    out->tpir = ext_malloc((size_t)F * sizeof *out->tpir);
    out->threshold = ext_malloc((size_t)F * sizeof *out->threshold);
    out->achieved_fpir = ext_malloc((size_t)F * sizeof *out->achieved_fpir);
    out->below_resolution = ext_malloc((size_t)F * sizeof *out->below_resolution);
    out->first_rank = ext_malloc((size_t)Q * sizeof *out->first_rank);
    out->average_precision = ext_malloc((size_t)Q * sizeof *out->average_precision);
    out->best_nonmate_score = ext_malloc((size_t)Q * sizeof *out->best_nonmate_score);
    out->mate_score = ext_malloc((size_t)P * sizeof *out->mate_score);
    out->mate_rank = ext_malloc((size_t)P * sizeof *out->mate_rank);
    query_result *results = ext_malloc((size_t)Q * sizeof *results);
    uint32_t *top_key = ext_malloc((size_t)Q * sizeof *top_key);
    double *rank1 = ext_malloc((size_t)Q * sizeof *rank1);
    int *unmated = ext_malloc((size_t)Q * sizeof *unmated);
    int st = EXT_OK;
    if (!out->cmc || !out->fpir || !out->tpir || !out->threshold || !out->achieved_fpir ||
        !out->below_resolution || !out->first_rank || !out->average_precision ||
        !out->best_nonmate_score || !out->mate_score || !out->mate_rank || !results ||
        !top_key || !rank1 || !unmated) {
        st = ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the summary", fn);
        goto done;
    }
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t i = 0; i < Q; i++) {
        const int64_t M = v->first[i + 1] - v->first[i];
        if (M > 0)
            results[i] = one_query(v, i, o, out->mate_rank);
    }
    int64_t n_mated = 0, n_unmated = 0;
    double ap = 0.0, inp = 0.0, map_at_r = 0.0, r_precision = 0.0, precision_at_1 = 0.0;
    uint64_t n_nonmated = 0, n_nan = v->totals[1];
    for (int64_t i = 0; i < Q; i++) {
        const int64_t M = v->first[i + 1] - v->first[i];
        n_nonmated += v->n_nonmates[i];
        n_nan += v->nan_mates[i];
        unmated[i] = M == 0 && v->nan_mates[i] == 0;
        n_unmated += unmated[i];
        out->best_nonmate_score[i] = v->best_key[i] == ROC_NO_KEY ? NAN
                                                                  : roc_key_score(v->best_key[i]);
        top_key[i] = M > 0 ? v->mate_key[v->first[i + 1] - 1] : ROC_NO_KEY;
        rank1[i] = M > 0 ? results[i].rank1 : 0.0;
        if (M == 0) {
            out->first_rank[i] = out->average_precision[i] = NAN;
            continue;
        }
        n_mated++;
        ap += results[i].ap;
        inp += results[i].inp;
        map_at_r += results[i].map_at_r;
        r_precision += results[i].r_precision;
        precision_at_1 += results[i].rank1;
        out->first_rank[i] = results[i].first_rank;
        out->average_precision[i] = results[i].ap;
        first_mate_histogram(v, i, o->ties, o->max_rank, out->cmc);
    }
    for (int64_t p = 0; p < P; p++)
        out->mate_score[p] = roc_key_score(v->mate_key[p]);
    out->n_mated = n_mated;
    out->n_unmated = n_unmated;
    out->n_skipped = Q - n_mated;
    out->n_nonmated_pairs = n_nonmated;
    out->n_nan = n_nan;
    double reached = 0.0;
    for (int64_t k = 0; k < o->max_rank; k++) {
        reached += out->cmc[k];
        out->cmc[k] = n_mated ? reached / (double)n_mated : NAN;
    }
    out->mean_ap = n_mated ? ap / (double)n_mated : NAN;
    out->mean_inp = n_mated ? inp / (double)n_mated : NAN;
    out->map_at_r = n_mated ? map_at_r / (double)n_mated : NAN;
    out->r_precision = n_mated ? r_precision / (double)n_mated : NAN;
    out->precision_at_1 = n_mated ? precision_at_1 / (double)n_mated : NAN;
    const searches s = {Q, n_mated, top_key, rank1, v->best_key, unmated};
    st = tpir_rows(v, &s, o, fn, out);
done:
    free(results);
    free(top_key);
    free(rank1);
    free(unmated);
    return st;
}

void roc_rank_summary_free(roc_rank_summary *s)
{
    if (s == NULL)
        return;
    free(s->cmc);
    free(s->fpir);
    free(s->tpir);
    free(s->threshold);
    free(s->achieved_fpir);
    free(s->below_resolution);
    free(s->first_rank);
    free(s->average_precision);
    free(s->best_nonmate_score);
    free(s->mate_score);
    free(s->mate_rank);
    free(s);
}
