/*
 * roc_summary.c: from the counts of a pass (roc_internal.h) to the ROC curve,
 * AUC, EER and TAR@FAR. Host code; time and memory O(curve points).
 *
 * The curve follows sklearn.metrics.roc_curve: thresholds descending, a first
 * point (0, 0) at threshold +inf, then one point per distinct score where the
 * step into it differs from the step out of it (drop_intermediate=True keeps
 * exactly those, plus the first and last scores: roc_sklearn_keeps). A step is the
 * pair (new impostors, new genuine pairs) that a threshold adds.
 *
 *   curve mode   every distinct score is known: the same points as sklearn, or
 *                every point (every_point: drop_intermediate=False)
 *   exact mode   between two consecutive genuine scores only impostors lie, a
 *                horizontal run whose pairs and lowest score are known but not
 *                how they tie; the run's end point (sklearn keeps it) is here,
 *                its inner points (sklearn keeps those where tie counts change)
 *                are not. Where no two impostors tie, that is sklearn's curve;
 *                always it is the same polyline, with the same AUC and EER.
 *                nearest_sklearn, the one rule those inner points can change,
 *                is decided apart (the section below says how)
 *   binned mode  one point per bin edge
 *
 * Everything below the curve is computed from that polyline the same way in
 * every mode (AUC as an exact integer trapezoid sum, which is Mann-Whitney's
 * statistic with ties counted half, rounded once; the partial AUC from the same
 * sums). The EER's nearest_mean rule needs every point of the full curve,
 * kept or not: each mode's walk shows them all to a nearest_point tracker.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc_math.h"
#include "roc_internal.h"

typedef unsigned __int128 u128;


// ---------------------------------------------------------------------------
// the curve under construction

typedef struct {
    int64_t n, capacity;
    double *thresholds;
    uint64_t *fps, *tps; /* cumulative impostor and genuine pairs */
} curve;

/* Room for `capacity` points. The summarizers reserve their most points
 * first: grown by doubling, the curve of 200,000 levels spent a tenth of its
 * time copying. */
static int curve_reserve(curve *c, int64_t capacity)
{
    if (capacity <= c->capacity)
        return EXT_OK;
    double *thresholds = ext_realloc(c->thresholds, (size_t)capacity * sizeof *thresholds);
    if (thresholds)
        c->thresholds = thresholds;
    uint64_t *fps_new = ext_realloc(c->fps, (size_t)capacity * sizeof *fps_new);
    if (fps_new)
        c->fps = fps_new;
    uint64_t *tps_new = ext_realloc(c->tps, (size_t)capacity * sizeof *tps_new);
    if (tps_new)
        c->tps = tps_new;
    if (!thresholds || !fps_new || !tps_new)
        return ext_fail(EXT_ERR_NOMEM, "roc: cannot allocate %lld curve points",
                        (long long)capacity);
    c->capacity = capacity;
    return EXT_OK;
}

static int curve_push(curve *c, double threshold, uint64_t fps, uint64_t tps)
{
    int st;
    if (c->n == c->capacity && (st = curve_reserve(c, c->capacity ? 2 * c->capacity : 1024)))
        return st;
    c->thresholds[c->n] = threshold;
    c->fps[c->n] = fps;
    c->tps[c->n] = tps;
    c->n++;
    return EXT_OK;
}

static void curve_free(curve *c)
{
    free(c->thresholds);
    free(c->fps);
    free(c->tps);
}

static int alloc_array(void **out, int64_t n, size_t size)
{
    *out = ext_calloc((size_t)n, size);
    return *out ? EXT_OK : ext_fail(EXT_ERR_NOMEM, "roc: cannot allocate %lld values", (long long)n);
}

// ---------------------------------------------------------------------------
// the point of the full curve nearest FPR = FNR (the nearest_mean EER)

/* Along the curve every point adds pairs, so D = fps P - (P - tps) N (FPR - FNR
 * in units of 1 / (P N)) strictly grows: |D| falls to the crossing and rises
 * after it, and the nearest point is the last with D < 0 or the first with
 * D >= 0 (the earlier of equals: torchmetrics' argmin keeps the first). D's two
 * terms are u128 (each a product of two counts), compared without a sign. */
typedef struct {
    int active;                       /* the EER rule is nearest_mean: else no point is seen */
    uint64_t n_genuine, n_impostor;
    int visited;                      /* a point was seen */
    int crossed;                      /* a point with D >= 0 was seen */
    uint64_t fps[2], tps[2];          /* [0]: last with D < 0, [1]: first with D >= 0 */
    double threshold[2];
    int undecided;                    /* see roc_summary.eer_undecided */
} nearest_point;

static u128 accepted_term(const nearest_point *e, uint64_t fps)
{
    return (u128)fps * e->n_genuine;
}

static u128 rejected_term(const nearest_point *e, uint64_t tps)
{
    return (u128)(e->n_genuine - tps) * e->n_impostor;
}

/* |D| of a point */
static u128 nearest_distance(const nearest_point *e, uint64_t fps, uint64_t tps)
{
    const u128 a = accepted_term(e, fps), r = rejected_term(e, tps);
    return a >= r ? a - r : r - a;
}

static void nearest_visit(nearest_point *e, uint64_t fps, uint64_t tps, double threshold)
{
    if (!e->active)
        return;
    const int side = accepted_term(e, fps) >= rejected_term(e, tps);
    /* a repeated point (binned mode's empty bins) keeps its first threshold */
    if ((side && e->crossed) || (e->visited && e->fps[side] == fps && e->tps[side] == tps))
        return;
    e->visited = 1;
    e->crossed |= side;
    e->fps[side] = fps;
    e->tps[side] = tps;
    e->threshold[side] = threshold;
}

/* Exact mode: a horizontal run of `run` impostors, from the known point
 * (fps, tps), whose ties are not counted, so which of the points fps + 1 ..
 * fps + run - 1 exist is unknown (each adds P to D). If the crossing lies
 * inside the run and one of them could be nearer than both ends, only curve
 * mode can decide. */
static void nearest_run(nearest_point *e, uint64_t fps, uint64_t tps, uint64_t run)
{
    if (!e->active)
        return;
    const u128 start = accepted_term(e, fps), rejected = rejected_term(e, tps);
    const u128 step = e->n_genuine, span = step * run;
    if (run < 2 || start >= rejected || start + span <= rejected)
        return;
    const u128 below = rejected - start;          /* -D at the run's start */
    const u128 above = start + span - rejected;   /* D at its end */
    for (u128 k = below / step; k <= below / step + 1; k++) {
        const u128 distance = k * step > below ? k * step - below : below - k * step;
        if (k >= 1 && k <= (u128)run - 1 && distance < below && distance <= above)
            e->undecided = 1;
    }
}

// ---------------------------------------------------------------------------
// metrics of a finished curve (common to every mode)

/* num / den rounded to the nearest double (ties to even), 0 <= num <= den, den >
 * 0 (num = den: 1 exactly): the quotient's bits by long division (2 r computed as r - (den - r) so that
 * nothing overflows), 53 of them from the first 1, a guard bit and the
 * remainder as sticky bit. */
static double ratio_rounded(u128 num, u128 den)
{
    if (num == 0 || num >= den) /* num > den: counts that contradict each other */
        return num == 0 ? 0.0 : (double)((long double)num / (long double)den);
    int exponent = 0;
    u128 r = num;
    while (r < den - r) { /* the next bit is 0 */
        r += r;
        exponent--;
    }
    uint64_t q = 0;
    for (int bit = 0; bit < 54; bit++) {
        const int one = r >= den - r;
        r = one ? r - (den - r) : r + r;
        q = 2 * q + (uint64_t)one;
    }
    const uint64_t guard = q & 1;
    q >>= 1;
    if (guard && (r != 0 || (q & 1)))
        q++;
    return ldexp((double)q, exponent - 53);
}

/* The area under the polyline over FPR in [0, m], standardized as McClish's
 * (and roc_auc_score(max_fpr=)): 0.5 (1 + (A - m^2 / 2) / (m - m^2 / 2)) =
 * (A + m (1 - m)) / (m (2 - m)), A the area in rates. The whole segments are
 * summed exactly in integers; the segment that m cuts (its end linearly
 * interpolated) and the standardization in long double, from those sums. */
static double partial_auc(const roc_summary *s, double m)
{
    const uint64_t *fa = s->false_accepts, *ta = s->true_accepts;
    const long double cut = (long double)m * (long double)s->n_impostor;
    u128 twice = 0;
    int64_t k = 1;
    for (; k < s->n_points && (long double)fa[k] <= cut; k++)
        twice += (u128)(fa[k] - fa[k - 1]) * (u128)(ta[k] + ta[k - 1]);
    long double area = (long double)twice / 2;
    if (k < s->n_points) {
        const long double d = cut - (long double)fa[k - 1];
        const long double slope = (long double)(ta[k] - ta[k - 1]) / (long double)(fa[k] - fa[k - 1]);
        area += d * ((long double)ta[k - 1] + slope * d / 2);
    }
    const long double mm = m;
    const long double rate_area = area / ((long double)s->n_genuine * (long double)s->n_impostor);
    return (double)((rate_area + mm * (1 - mm)) / (mm * (2 - mm)));
}

/* The first i in [lo, hi) with x[i] >= v (x[i] > v where `strict`), else
 * hi; x non-decreasing there, as a curve's fpr and tpr are. Walked point by
 * point from the first, six FAR targets took a tenth of the summary of
 * 200,000 levels. */
static int64_t first_reaching(const double *x, int64_t lo, int64_t hi, double v, int strict)
{
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (strict ? x[mid] <= v : x[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The point of the curve nearest `far` (|fpr - far| in float64, as
 * InsightFace computes it); of equally near ones the first, or with `last`
 * the last. */
static int64_t nearest_to_far(const roc_summary *s, double far, int last)
{
    int64_t k = 0;
    double best = INFINITY;
    for (int64_t i = 0; i < s->n_points; i++) {
        const double distance = fabs(s->fpr[i] - far);
        if (distance < best || (last && distance == best)) {
            best = distance;
            k = i;
        }
    }
    return k;
}

/* A TAR@FAR row of TAR `value`: the threshold of the first point whose TPR
 * reaches it (the highest threshold that does) and its false accepts. */
static void tar_row(const roc_summary *s, double value, double *tar, double *threshold,
                    uint64_t *false_accepts)
{
    const int64_t first = first_reaching(s->tpr, 0, s->n_points - 1, value, 0);
    *tar = value;
    *threshold = s->thresholds[first];
    *false_accepts = s->false_accepts[first];
}

/* TAR at one FAR target under `rule` (see tar_row for the threshold). */
static void tar_at_far(const roc_summary *s, double far, int rule, double *tar,
                       double *threshold, uint64_t *false_accepts)
{
    const int64_t n = s->n_points;
    int64_t k = 0;
    double value;
    if (rule == ROC_FAR_NEAREST || rule == ROC_FAR_NEAREST_SKLEARN) {
        /* InsightFace flips scikit-learn's curve and takes the first nearest
         * point: of equally near ones, the last (highest TPR) */
        k = nearest_to_far(s, far, rule == ROC_FAR_NEAREST_SKLEARN);
        value = s->tpr[k];
    } else if (rule == ROC_FAR_FIRST_ABOVE) { /* the first point with fpr >= far */
        k = first_reaching(s->fpr, 0, n - 1, far, 0);
        value = s->tpr[k];
    } else { /* max_tpr and interpolate: the last point with fpr <= far */
        k = n > 1 ? first_reaching(s->fpr, 1, n, far, 1) - 1 : 0;
        value = s->tpr[k];
        if (rule == ROC_FAR_INTERPOLATE && k < n - 1 && s->fpr[k] < far)
            value += (s->tpr[k + 1] - s->tpr[k]) * (far - s->fpr[k]) /
                     (s->fpr[k + 1] - s->fpr[k]);
    }
    tar_row(s, value, tar, threshold, false_accepts);
}

/* Moves the curve into `s` and computes fpr, tpr, AUC, EER and TAR@FAR; the
 * nearest_mean EER from `nearest`, which has seen every point of the curve. */
static int finish(curve *c, uint64_t n_genuine, uint64_t n_impostor, uint64_t n_nan,
                  const roc_summary_options *options, const nearest_point *nearest,
                  roc_summary *s)
{
    const double *fars = options->fars;
    const int64_t n_fars = options->n_fars;
    int st;
    s->n_points = c->n;
    s->thresholds = c->thresholds;
    s->false_accepts = c->fps;
    s->true_accepts = c->tps;
    memset(c, 0, sizeof *c);
    s->n_genuine = n_genuine;
    s->n_impostor = n_impostor;
    s->n_nan = n_nan;
    if ((st = alloc_array((void **)&s->fpr, s->n_points, sizeof(double))) ||
        (st = alloc_array((void **)&s->tpr, s->n_points, sizeof(double))))
        return st;
    for (int64_t k = 0; k < s->n_points; k++) {
        s->fpr[k] = (double)s->false_accepts[k] / (double)n_impostor;
        s->tpr[k] = (double)s->true_accepts[k] / (double)n_genuine;
    }

    /* AUC: the trapezoid sum, exact in integers, over 2 P N */
    u128 area = 0;
    for (int64_t k = 1; k < s->n_points; k++)
        area += (u128)(s->false_accepts[k] - s->false_accepts[k - 1]) *
                (u128)(s->true_accepts[k] + s->true_accepts[k - 1]);
    s->auc = ratio_rounded(area, (u128)2 * n_genuine * n_impostor);
    s->partial_auc = options->max_fpr == 0 ? NAN
                     : options->max_fpr == 1 ? s->auc : partial_auc(s, options->max_fpr);

    if (options->eer_rule == ROC_EER_NEAREST_MEAN) {
        /* torchmetrics' formula, on this point's rates */
        const int k = nearest->crossed &&
                      nearest_distance(nearest, nearest->fps[1], nearest->tps[1]) <
                          nearest_distance(nearest, nearest->fps[0], nearest->tps[0]);
        const double fpr = (double)nearest->fps[k] / (double)n_impostor;
        const double tpr = (double)nearest->tps[k] / (double)n_genuine;
        s->eer = (fpr + (1.0 - tpr)) / 2;
        s->eer_threshold = nearest->threshold[k];
        s->eer_undecided = nearest->undecided;
    } else {
        /* where the polyline crosses FPR = FNR; the first point with FPR >= FNR,
         * found in integers (fps P >= (P - tps) N), and linear interpolation */
        int64_t k = 1;
        while (k < s->n_points - 1 &&
               (u128)s->false_accepts[k] * n_genuine <
                   (u128)(n_genuine - s->true_accepts[k]) * n_impostor)
            k++;
        double d0 = (1.0 - s->tpr[k - 1]) - s->fpr[k - 1], d1 = (1.0 - s->tpr[k]) - s->fpr[k];
        double t = d0 - d1 > 0 ? d0 / (d0 - d1) : 1.0;
        s->eer = s->fpr[k - 1] + t * (s->fpr[k] - s->fpr[k - 1]);
        s->eer_threshold = s->thresholds[k];
    }

    s->n_fars = n_fars;
    if ((st = alloc_array((void **)&s->far, n_fars, sizeof(double))) ||
        (st = alloc_array((void **)&s->tar, n_fars, sizeof(double))) ||
        (st = alloc_array((void **)&s->far_threshold, n_fars, sizeof(double))) ||
        (st = alloc_array((void **)&s->far_false_accepts, n_fars, sizeof(uint64_t))) ||
        (st = alloc_array((void **)&s->far_pending_gap, n_fars, sizeof(int64_t))) ||
        (st = alloc_array((void **)&s->far_pending_from, n_fars, sizeof(uint32_t))) ||
        (st = alloc_array((void **)&s->far_pending_end, n_fars, sizeof(uint32_t))))
        return st;
    for (int64_t i = 0; i < n_fars; i++) {
        s->far[i] = fars[i];
        s->far_pending_gap[i] = -1;
        tar_at_far(s, fars[i], options->far_rule, &s->tar[i], &s->far_threshold[i],
                   &s->far_false_accepts[i]);
    }
    return EXT_OK;
}

/* The options, for a summary of `mode`. */
static int check_options(const roc_summary_options *o, int mode)
{
    if (o == NULL)
        return ext_fail(EXT_ERR_VALUE, "roc: the summary options are NULL");
    if (o->every_point && mode != ROC_MODE_CURVE)
        return ext_fail(EXT_ERR_VALUE, "roc: every_point is for the curve mode (the others do "
                        "not count every distinct score)");
    if (o->every_point && o->n_fars > 0) /* the rules are defined on scikit-learn's points */
        return ext_fail(EXT_ERR_VALUE, "roc: a curve of every point takes no FAR targets");
    if (o->n_fars < 0 || (o->n_fars > 0 && o->fars == NULL))
        return ext_fail(EXT_ERR_VALUE, "roc: %lld FAR targets at NULL", (long long)o->n_fars);
    if (o->far_rule < ROC_FAR_MAX_TPR || o->far_rule > ROC_FAR_NEAREST_SKLEARN)
        return ext_fail(EXT_ERR_VALUE, "roc: unknown far_rule %d", o->far_rule);
    for (int64_t i = 0; i < o->n_fars; i++)
        if (!(o->fars[i] >= 0.0 && o->fars[i] <= 1.0))
            return ext_fail(EXT_ERR_VALUE, "roc: fars must lie in [0, 1], got %g", o->fars[i]);
    if (o->eer_rule != ROC_EER_CROSSING && o->eer_rule != ROC_EER_NEAREST_MEAN)
        return ext_fail(EXT_ERR_VALUE, "roc: unknown eer_rule %d", o->eer_rule);
    if (!(o->max_fpr == 0 || (o->max_fpr > 0 && o->max_fpr <= 1)))
        return ext_fail(EXT_ERR_VALUE, "roc: max_fpr must lie in (0, 1] (0: no partial AUC), "
                        "got %g", o->max_fpr);
    return EXT_OK;
}

// ---------------------------------------------------------------------------
// nearest_sklearn in exact mode
//
// InsightFace's rule takes, on scikit-learn's drop_intermediate curve, the
// point nearest the target f (|fpr - f| in float64), the last of equally near
// ones. That curve is exact mode's plus the inner points of horizontal runs.
// In gap p (between genuine scores g[p-1] < g[p], or above the highest) lie
// impostor-only scores k_1 < ... < k_m (k_1 = gap_min[p]) with c_1, ..., c_m
// pairs. With F the false accepts at k_1 and S_j = c_1 + ... + c_j, the point
// at k_j has F - S_{j-1} false accepts, and for 1 < j it survives exactly
// where c_j != c_{j-1} (roc_sklearn_keeps: the step into it is (c_j, 0), the step
// out of it (c_{j-1}, 0)); above k_m comes g[p], whose step adds genuine pairs,
// or, in the top gap, nothing (k_m is the first point). Exact mode's curve
// has k_1's point (the step below it adds genuine pairs, or it is the last),
// g[p]'s and the top score's, not the inner ones.
//
// Claim: with k the last point of exact mode's curve nearest f and d its
// distance, the rule's TAR on scikit-learn's curve is tpr[k], unless
//   (1) f lies inside a horizontal segment a -> b of exact mode's curve
//       (fpr[a] < f < fpr[b], tpr[a] == tpr[b]) whose end b is k_1 of a gap p,
//   (2) tpr[k] != tpr[b], and
//   (3) a surviving inner point of gap p lies strictly nearer f than d;
// then it is tpr[b].
// Proof: fpr does not decrease along the curve, and in float64 x -> |x - f|
// does not increase below f nor decrease above it. An inner point q of a run
// with f outside (fpr[a'], fpr[b']) is no nearer than that run's end on f's
// side; where it is as near, that end is among the nearest, so k lies at or
// after it: k = a' gives q's TPR, tpr[a'] (the same TAR), and k >= b' stays
// the last. In the run that holds f, the winner is k or an inner point, of
// TPR tpr[b]: only (2) can change the TAR. Under (2) k is not a (else its
// TPR is tpr[b]), so dist(b) <= dist(a), d = dist(b) and k comes at or after
// b; an inner point, earlier than k, wins only strictly nearer: (3).
//
// Deciding (3) walks the gap up from k_1: the point at k_j for j = 2, 3, ...,
// false accepts F - S_{j-1} (falling with j). The first surviving one nearer
// than d proves (3). Once a point at or below f (fpr <= f) is no nearer than
// d, no later one is: (3) fails; so it does when the walk reaches the run's
// top (S_j = gap[p]: g[p]'s point, or the top score's, is exact mode's). The
// walk reads c_1, c_2, ... only so far: from the lists of the lowest scores
// of each gap that the CPU pass keeps (roc_eval_config.low_keys), then from
// what probing passes found (roc_gap_keys). A row whose walk needs a score
// not yet known stays pending (tar NaN), naming the gap and the keys to probe.

uint32_t roc_gap_end(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                     int64_t p)
{
    return p < genuine->n_levels ? genuine->keys[p] : counts->top_key + 1;
}

/* The usable head of gap p's list: its keys before the first saturated count
 * (*n of them), and through which key that knows the gap (its last key, or
 * the key before the saturated one; all of the gap where the list is short). */
static uint32_t list_head(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                          int64_t p, int64_t *n)
{
    const int64_t K = counts->n_low;
    const uint32_t *keys = counts->low_keys + p * K, *pairs = counts->low_counts + p * K;
    int64_t j = 0;
    while (j < K && keys[j] != ROC_LOW_NONE && pairs[j] != UINT32_MAX)
        j++;
    *n = j;
    if (j < K && keys[j] == ROC_LOW_NONE)
        return roc_gap_end(genuine, counts, p) - 1;
    return j < K ? keys[j] - 1 : keys[K - 1];
}

uint32_t roc_gap_known_through(const roc_genuine_levels *genuine,
                               const roc_exact_counts *counts, const roc_gap_keys *probed,
                               int64_t n_probed, int64_t p)
{
    int64_t n = 0;
    uint32_t through = counts->n_low ? list_head(genuine, counts, p, &n) : counts->gap_min[p] - 1;
    for (int64_t r = 0; r < n_probed; r++)
        if (probed[r].gap == p)
            through = probed[r].through;
    return through;
}

/* The known keys of gap p with their pairs, ascending from its lowest
 * (*keys and *pairs allocated, *n of them), and through which key. */
static int gap_known(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                     const roc_gap_keys *probed, int64_t n_probed, int64_t p, uint32_t **keys,
                     uint64_t **pairs, int64_t *n, uint32_t *through)
{
    int64_t n_list = 0;
    if (counts->n_low)
        list_head(genuine, counts, p, &n_list);
    int64_t total = n_list;
    for (int64_t r = 0; r < n_probed; r++)
        if (probed[r].gap == p)
            total += probed[r].n;
    *keys = ext_malloc((size_t)(total ? total : 1) * sizeof **keys);
    *pairs = ext_malloc((size_t)(total ? total : 1) * sizeof **pairs);
    if (!*keys || !*pairs)
        return ext_fail(EXT_ERR_NOMEM, "roc: cannot allocate the scores of a gap");
    for (int64_t j = 0; j < n_list; j++) {
        (*keys)[j] = counts->low_keys[p * counts->n_low + j];
        (*pairs)[j] = counts->low_counts[p * counts->n_low + j];
    }
    *n = n_list;
    for (int64_t r = 0; r < n_probed; r++) {
        if (probed[r].gap != p)
            continue;
        memcpy(*keys + *n, probed[r].keys, (size_t)probed[r].n * sizeof **keys);
        memcpy(*pairs + *n, probed[r].counts, (size_t)probed[r].n * sizeof **pairs);
        *n += probed[r].n;
    }
    *through = roc_gap_known_through(genuine, counts, probed, n_probed, p);
    return EXT_OK;
}

enum { WALK_NOT_NEARER, WALK_NEARER, WALK_PENDING };

/* Condition (3) for gap p, whose run ends at false accepts F, against
 * distance d from target f; WALK_PENDING where a needed score is unknown
 * (*from: the first key to learn). */
static int walk_gap(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                    const roc_gap_keys *probed, int64_t n_probed, int64_t p, uint64_t F,
                    uint64_t n_impostor, double f, double d, int *result, uint32_t *from)
{
    uint32_t *keys = NULL, through = 0;
    uint64_t *pairs = NULL;
    int64_t n = 0;
    int st = gap_known(genuine, counts, probed, n_probed, p, &keys, &pairs, &n, &through);
    const uint64_t run = counts->gap[p];
    const uint32_t end = roc_gap_end(genuine, counts, p);
    if (st)
        goto done;
    *result = WALK_PENDING;
    *from = through + 1;
    if (n == 0)
        goto done;
    if (keys[0] != counts->gap_min[p])
        goto inconsistent;
    uint64_t S = pairs[0], previous = pairs[0];
    for (int64_t j = 1;; j++) {
        if (S >= run) {
            if (S > run)
                goto inconsistent;
            *result = WALK_NOT_NEARER;
            break;
        }
        const double x = (double)(F - S) / (double)n_impostor, distance = fabs(x - f);
        if (x <= f && distance >= d) {
            *result = WALK_NOT_NEARER;
            break;
        }
        if (j == n) {
            if (through >= end - 1) /* every score of the gap known, yet fewer pairs */
                goto inconsistent;
            break;
        }
        if (roc_sklearn_keeps(pairs[j], 0, previous, 0) && distance < d) {
            *result = WALK_NEARER;
            break;
        }
        S += pairs[j];
        previous = pairs[j];
    }
    goto done;
inconsistent:
    st = ext_fail(EXT_ERR_VALUE, "roc: the scores known of gap %lld disagree with its %llu "
                  "pairs (the counts of a probing pass are not this evaluation's)",
                  (long long)p, (unsigned long long)run);
done:
    free(keys);
    free(pairs);
    return st;
}

/* Every nearest_sklearn row of a finished exact summary, on scikit-learn's
 * curve (the claim above), or pending. */
static int nearest_sklearn_rows(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                                const roc_gap_keys *probed, int64_t n_probed, roc_summary *s)
{
    const int64_t n = s->n_points;
    for (int64_t i = 0; i < s->n_fars; i++) {
        const double f = s->far[i];
        const int64_t k = nearest_to_far(s, f, 1);
        const double d = fabs(s->fpr[k] - f);
        const int64_t b = first_reaching(s->fpr, 0, n, f, 1), a = b - 1;
        if (b == 0 || b == n || !(s->fpr[a] < f) || s->true_accepts[a] != s->true_accepts[b] ||
            s->tpr[k] == s->tpr[b])
            continue; /* (1) or (2) fails: tar_at_far's row stands */
        /* b is a gap's lowest score where that key opens a gap; else b is the
         * top score after (0, 0), with no inner point between */
        const uint32_t key = roc_score_key((float)s->thresholds[b]);
        const int64_t p = roc_first_key_at_least(genuine->keys, genuine->n_levels, key);
        if (counts->gap[p] < 2 || counts->gap_min[p] != key ||
            (p == genuine->n_levels && key == counts->top_key))
            continue; /* no inner point: one pair, or one score */
        int result, st;
        uint32_t from;
        if ((st = walk_gap(genuine, counts, probed, n_probed, p, s->false_accepts[b],
                           s->n_impostor, f, d, &result, &from)))
            return st;
        if (result == WALK_NEARER) {
            tar_row(s, s->tpr[b], &s->tar[i], &s->far_threshold[i], &s->far_false_accepts[i]);
        } else if (result == WALK_PENDING) {
            s->tar[i] = s->far_threshold[i] = NAN;
            s->far_false_accepts[i] = 0;
            s->far_pending_gap[i] = p;
            s->far_pending_from[i] = from;
            s->far_pending_end[i] = roc_gap_end(genuine, counts, p);
        }
    }
    return EXT_OK;
}

// ---------------------------------------------------------------------------
// exact mode

int roc_summarize_exact(const roc_genuine_levels *genuine, const roc_exact_counts *counts,
                        const roc_totals *totals, const roc_summary_options *options,
                        const roc_gap_keys *probed, int64_t n_probed, roc_summary *out)
{
    const int64_t U = genuine->n_levels;
    const uint32_t *g = genuine->keys;
    const uint64_t *gen = genuine->counts, *at = counts->at, *gap = counts->gap;
    uint64_t n_impostor = 0;
    int st;
    if ((st = check_options(options, ROC_MODE_EXACT)) ||
        (st = roc_check_genuine_total(genuine, totals)) ||
        (st = roc_check_exact_counts(genuine, counts, &n_impostor)) ||
        (st = roc_check_totals(totals->n_genuine, n_impostor)))
        return st;

    curve c = {0};
    nearest_point nearest = {.active = options->eer_rule == ROC_EER_NEAREST_MEAN,
                             .n_genuine = totals->n_genuine, .n_impostor = n_impostor};
    uint64_t fps = 0, tps = 0;
    nearest_visit(&nearest, 0, 0, INFINITY);
    /* at most the first point, two for the top gap and two a level */
    if ((st = curve_reserve(&c, 2 * U + 3)) || (st = curve_push(&c, INFINITY, 0, 0)))
        goto fail;
    if (gap[U] > 0) { /* impostors above every genuine score: the top score comes first */
        const double top = roc_key_score(counts->top_key);
        if ((st = curve_push(&c, top, counts->top_count, 0)))
            goto fail;
        nearest_visit(&nearest, counts->top_count, 0, top);
        nearest_run(&nearest, counts->top_count, 0, gap[U] - counts->top_count);
        fps = gap[U];
        if (counts->gap_min[U] != counts->top_key) {
            if ((st = curve_push(&c, roc_key_score(counts->gap_min[U]), fps, 0)))
                goto fail;
            nearest_visit(&nearest, fps, 0, roc_key_score(counts->gap_min[U]));
        }
    }
    for (int64_t u = U - 1; u >= 0; u--) {
        const uint64_t imp = at[u] - gen[u];
        fps += imp;
        tps += gen[u];
        /* kept unless the next score adds the very same step; a gap below it
         * adds impostors only, which is never this step (it adds genuine pairs) */
        int keep = gap[u] > 0 || u == 0 || (u == U - 1 && gap[U] == 0) ||
                   roc_sklearn_keeps(imp, gen[u], at[u - 1] - gen[u - 1], gen[u - 1]);
        if (keep && (st = curve_push(&c, roc_key_score(g[u]), fps, tps)))
            goto fail;
        nearest_visit(&nearest, fps, tps, roc_key_score(g[u]));
        if (gap[u] > 0) {
            nearest_run(&nearest, fps, tps, gap[u]);
            fps += gap[u];
            if ((st = curve_push(&c, roc_key_score(counts->gap_min[u]), fps, tps)))
                goto fail;
            nearest_visit(&nearest, fps, tps, roc_key_score(counts->gap_min[u]));
        }
    }
    out->mode = ROC_MODE_EXACT;
    if ((st = finish(&c, totals->n_genuine, n_impostor, totals->n_nan, options, &nearest,
                     out)) ||
        (options->far_rule == ROC_FAR_NEAREST_SKLEARN &&
         (st = nearest_sklearn_rows(genuine, counts, probed, n_probed, out))))
        goto fail;

    out->n_levels = U;
    if ((st = alloc_array((void **)&out->level_scores, U, sizeof(double))) ||
        (st = alloc_array((void **)&out->genuine_counts, U, sizeof(uint64_t))) ||
        (st = alloc_array((void **)&out->impostor_counts, U, sizeof(uint64_t))) ||
        (st = alloc_array((void **)&out->impostor_between, U + 1, sizeof(uint64_t))) ||
        (st = alloc_array((void **)&out->impostor_between_min, U + 1, sizeof(double))))
        goto fail;
    for (int64_t u = 0; u < U; u++) {
        out->level_scores[u] = roc_key_score(g[u]);
        out->genuine_counts[u] = gen[u];
        out->impostor_counts[u] = at[u] - gen[u];
    }
    for (int64_t p = 0; p <= U; p++) {
        out->impostor_between[p] = gap[p];
        out->impostor_between_min[p] = gap[p] ? roc_key_score(counts->gap_min[p]) : NAN;
    }
    return EXT_OK;
fail:
    curve_free(&c);
    return st;
}

// ---------------------------------------------------------------------------
// curve mode (scikit-learn's points)

int roc_summarize_curve(const roc_genuine_levels *genuine, const roc_key_counts *counts,
                        const roc_totals *totals, const roc_summary_options *options,
                        roc_summary *out)
{
    const int64_t n = counts->n_keys;
    uint64_t n_all = 0;
    int st;
    if ((st = check_options(options, ROC_MODE_CURVE)) ||
        (st = roc_check_genuine_total(genuine, totals)) ||
        (st = roc_check_curve_counts(genuine, counts, &n_all)) ||
        (st = roc_check_totals(totals->n_genuine, n_all - totals->n_genuine)))
        return st;

    /* the step each distinct key adds, walking down from the highest; the
     * genuine levels are a subset of the keys */
    curve c = {0};
    nearest_point nearest = {.active = options->eer_rule == ROC_EER_NEAREST_MEAN,
                             .n_genuine = totals->n_genuine,
                             .n_impostor = n_all - totals->n_genuine};
    nearest_visit(&nearest, 0, 0, INFINITY);
    uint64_t fps = 0, tps = 0;
    int64_t u = genuine->n_levels - 1;
    uint64_t imp = 0, gen = 0, next_imp = 0, next_gen = 0;
    if ((st = curve_reserve(&c, n + 1)) || (st = curve_push(&c, INFINITY, 0, 0)))
        goto fail;
    for (int64_t i = n - 1; i >= 0; i--) {
        if (i == n - 1) { /* the first step, then one step of lookahead */
            gen = u >= 0 && genuine->keys[u] == counts->keys[i] ? genuine->counts[u--] : 0;
            imp = counts->counts[i] - gen;
        } else {
            imp = next_imp;
            gen = next_gen;
        }
        if (i > 0) {
            next_gen = u >= 0 && genuine->keys[u] == counts->keys[i - 1] ? genuine->counts[u--] : 0;
            next_imp = counts->counts[i - 1] - next_gen;
        }
        fps += imp;
        tps += gen;
        const int keep = options->every_point || i == n - 1 || i == 0 ||
                         roc_sklearn_keeps(imp, gen, next_imp, next_gen);
        if (keep && (st = curve_push(&c, roc_key_score(counts->keys[i]), fps, tps)))
            goto fail;
        nearest_visit(&nearest, fps, tps, roc_key_score(counts->keys[i]));
    }
    out->mode = ROC_MODE_CURVE;
    if ((st = finish(&c, totals->n_genuine, n_all - totals->n_genuine, totals->n_nan, options,
                     &nearest, out)))
        goto fail;
    return EXT_OK;
fail:
    curve_free(&c);
    return st;
}

// ---------------------------------------------------------------------------
// binned mode

int roc_summarize_binned(const roc_genuine_levels *genuine, const roc_binned_counts *counts,
                         const roc_totals *totals, const roc_summary_options *options,
                         roc_summary *out)
{
    const int64_t n = counts->n_bins;
    const float *edges = counts->edges;
    int st;
    if ((st = check_options(options, ROC_MODE_BINNED)) ||
        (st = roc_check_genuine_total(genuine, totals)))
        return st;
    out->mode = ROC_MODE_BINNED;
    out->n_levels = n;
    if ((st = alloc_array((void **)&out->level_scores, n + 1, sizeof(double))) ||
        (st = alloc_array((void **)&out->genuine_counts, n, sizeof(uint64_t))) ||
        (st = alloc_array((void **)&out->impostor_counts, n, sizeof(uint64_t))))
        return st;

    /* genuine pairs per bin, from their scores; impostors are the rest */
    uint64_t gen_below = 0, gen_above = 0;
    for (int64_t u = 0; u < genuine->n_levels; u++) {
        int64_t bin = roc_uniform_bin(roc_key_score(genuine->keys[u]), edges, n, counts->lo32,
                                      counts->scale32);
        if (bin < 0)
            gen_below += genuine->counts[u];
        else if (bin >= n)
            gen_above += genuine->counts[u];
        else
            out->genuine_counts[bin] += genuine->counts[u];
    }
    uint64_t n_impostor = 0;
    if ((st = roc_check_binned_counts(counts, gen_below, out->genuine_counts, gen_above,
                                      &n_impostor)))
        return st;
    for (int64_t b = 0; b < n; b++)
        out->impostor_counts[b] = counts->all[b] - out->genuine_counts[b];
    for (int64_t b = 0; b <= n; b++)
        out->level_scores[b] = edges[b];
    out->genuine_below = gen_below;
    out->genuine_above = gen_above;
    out->impostor_below = counts->below - gen_below;
    out->impostor_above = counts->above - gen_above;
    if ((st = roc_check_totals(totals->n_genuine, n_impostor)))
        return st;

    curve c = {0};
    uint64_t fps = out->impostor_above, tps = gen_above;
    if ((st = curve_reserve(&c, n + 3)) || (st = curve_push(&c, INFINITY, 0, 0)) ||
        (st = curve_push(&c, nextafterf(edges[n], INFINITY), fps, tps)))
        goto fail;
    for (int64_t b = n - 1; b >= 0; b--) {
        fps += out->impostor_counts[b];
        tps += out->genuine_counts[b];
        if ((st = curve_push(&c, edges[b], fps, tps)))
            goto fail;
    }
    if ((st = curve_push(&c, -INFINITY, fps + out->impostor_below, tps + gen_below)))
        goto fail;
    /* every point of the binned curve is kept: the tracker sees them all */
    nearest_point nearest = {.active = options->eer_rule == ROC_EER_NEAREST_MEAN,
                             .n_genuine = totals->n_genuine, .n_impostor = n_impostor};
    for (int64_t k = 0; k < c.n; k++)
        nearest_visit(&nearest, c.fps[k], c.tps[k], c.thresholds[k]);
    if ((st = finish(&c, totals->n_genuine, n_impostor, totals->n_nan, options, &nearest, out)))
        goto fail;
    return EXT_OK;
fail:
    curve_free(&c);
    return st;
}

void roc_summary_free(roc_summary *s)
{
    if (s == NULL)
        return;
    free(s->fpr);
    free(s->tpr);
    free(s->thresholds);
    free(s->false_accepts);
    free(s->true_accepts);
    free(s->far);
    free(s->tar);
    free(s->far_threshold);
    free(s->far_false_accepts);
    free(s->far_pending_gap);
    free(s->far_pending_from);
    free(s->far_pending_end);
    free(s->level_scores);
    free(s->genuine_counts);
    free(s->impostor_counts);
    free(s->impostor_between);
    free(s->impostor_between_min);
    free(s);
}
