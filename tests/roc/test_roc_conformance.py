"""Conformance with the peers' own test suites, run against this API:
scikit-learn's sklearn/metrics/tests/test_ranking.py (roc_curve,
roc_auc_score and its max_fpr, ties, thresholds, one class, infinities) and
torchmetrics' binary ROC / AUROC / EER tests (their inputs, their reference
formulas written out here in torch, float32 as torchmetrics computes them).
Every case is equal, or differs as the README's "Conformance" list says:
one class and NaN or infinite scores are handled differently on purpose, and
the AUC is the exactly rounded Mann-Whitney value, a few ulp from the
trapezoid sums."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sklearn import datasets
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from score_keys import score_key
from sklearn.metrics import roc_curve as sk_roc_curve

from _ext import roc
from _ext.roc import _evaluate

ULP_BOUND = 4   # scikit-learn's float trapezoid sums against the exactly rounded value


def scores(values):
    """Scores as the evaluator takes them (float32); scikit-learn is given the
    same float32 values."""
    return np.ascontiguousarray(values, dtype=np.float32)


def ulps(a, b):
    return abs(a - b) / np.spacing(max(abs(a), abs(b)))


# ---------------------------------------------------------------------------
# scikit-learn's test_ranking.py

def toy_prediction(binary=True):
    """The binary problem of test_ranking's make_prediction: iris classes 0
    and 1, shuffled, with 800 noise features so that a logistic regression
    trained on half errs on the other half; (y_true, y_pred, y_score)."""
    iris = datasets.load_iris()
    X, y = iris.data, iris.target
    if binary:
        X, y = X[y < 2], y[y < 2]
    order = np.arange(y.size)
    np.random.RandomState(37).shuffle(order)
    X, y = X[order], y[order]
    X = np.c_[X, np.random.RandomState(0).randn(y.size, 200 * iris.data.shape[1])]
    half = y.size // 2
    model = LogisticRegression(random_state=0).fit(X[:half], y[:half])
    return y[half:], model.predict(X[half:]), model.predict_proba(X[half:])[:, 1]


def mann_whitney(y_true, y_score):
    """test_ranking's _auc: pairs ranked right over all (ties count 0, so only
    for untied scores), and here exact: U / (P N) as a fraction."""
    pos, neg = y_score[y_true == 1], y_score[y_true != 1]
    diff = pos.reshape(1, -1) - neg.reshape(-1, 1)
    return Fraction(int(np.sum(diff > 0)) * 2 + int(np.sum(diff == 0)), 2 * pos.size * neg.size)


def test_roc_curve():
    y_true, _, y_score = toy_prediction()
    y_score = scores(y_score)
    fpr, tpr, thresholds = roc.roc_curve_pairs(y_true, y_score)
    expected = sk_roc_curve(y_true, y_score)
    for ours, theirs in zip((fpr, tpr, thresholds), expected):
        np.testing.assert_array_equal(ours, theirs)
    report = roc.evaluate_pairs(y_true, y_score)
    assert report.auc == float(mann_whitney(y_true, y_score))
    assert ulps(report.auc, roc_auc_score(y_true, y_score)) <= ULP_BOUND
    assert fpr.shape == tpr.shape == thresholds.shape


def test_roc_curve_end_points(rng):
    y_true = np.array([0] * 50 + [1] * 50)
    y_pred = scores(np.random.RandomState(0).randint(3, size=100))
    fpr, tpr, thresholds = roc.roc_curve_pairs(y_true, y_pred)
    assert fpr[0] == 0 and fpr[-1] == 1 and tpr[0] == 0 and tpr[-1] == 1
    assert fpr.shape == tpr.shape == thresholds.shape
    for ours, theirs in zip((fpr, tpr, thresholds), sk_roc_curve(y_true, y_pred)):
        np.testing.assert_array_equal(ours, theirs)


def test_roc_returns_consistency():
    """The TPR at each returned threshold is the share of genuine pairs scoring
    at or above it."""
    y_true, _, y_score = toy_prediction()
    y_score = scores(y_score)
    fpr, tpr, thresholds = roc.roc_curve_pairs(y_true, y_score)
    at_or_above = [np.mean(y_score[y_true == 1] >= t) for t in thresholds]
    np.testing.assert_array_equal(tpr, at_or_above)
    report = roc.evaluate_pairs(y_true, y_score)
    np.testing.assert_array_equal(report.true_accepts,
                                  [np.sum(y_score[y_true == 1] >= t) for t in report.thresholds])


def test_roc_curve_confidence():
    y_true, _, y_score = toy_prediction()
    shifted = scores(y_score - 0.5)
    report = roc.evaluate_pairs(y_true, shifted)
    assert round(report.auc, 2) == 0.90
    assert ulps(report.auc, roc_auc_score(y_true, shifted)) <= ULP_BOUND


def test_roc_curve_hard():
    y_true, y_pred, _ = toy_prediction()
    for constant in (np.ones(y_true.shape), np.zeros(y_true.shape)):
        fpr, tpr, thresholds = roc.roc_curve_pairs(y_true, scores(constant))
        np.testing.assert_array_equal(fpr, [0, 1])
        np.testing.assert_array_equal(tpr, [0, 1])
        assert roc.evaluate_pairs(y_true, scores(constant)).auc == 0.5
    report = roc.evaluate_pairs(y_true, scores(y_pred))
    assert round(report.auc, 2) == 0.78
    assert report.auc == float(mann_whitney(y_true, scores(y_pred)))


@pytest.mark.parametrize("y_true, y_score, kept", [
    ([0, 0, 0, 0, 1, 1], [0.0, 0.2, 0.5, 0.6, 0.7, 1.0], [np.inf, 1.0, 0.7, 0.0]),
    ([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1],
     [0.0, 0.1, 0.6, 0.6, 0.7, 0.8, 0.9, 0.6, 0.7, 0.8, 0.9, 0.9, 1.0],
     [np.inf, 1.0, 0.9, 0.7, 0.6, 0.0]),
])
def test_roc_curve_drop_intermediate(y_true, y_score, kept):
    """test_roc_curve_drop_intermediate's cases (distinct scores, then tied
    ones): the thresholds drop_intermediate=True keeps, on both curve
    functions; drop_intermediate=False keeps every distinct score."""
    y_true, y_score = np.array(y_true), scores(y_score)
    labels_q, labels_g = np.zeros(1, int), np.where(y_true == 1, 0, 1 + np.arange(y_true.size))
    for drop, expected in ((True, scores(kept)), (False, np.r_[np.inf, np.unique(y_score)[::-1]])):
        curves = (roc.roc_curve_pairs(y_true, y_score, drop_intermediate=drop),
                  roc.roc_curve(labels_q, labels_g, score=y_score[None, :],
                                drop_intermediate=drop))
        for curve in curves:
            np.testing.assert_array_equal(curve[2], expected)
            for ours, theirs in zip(curve, sk_roc_curve(y_true, y_score,
                                                        drop_intermediate=drop)):
                np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("y_true, y_score, fpr, tpr, auc", [
    ([0, 1], [0, 1], [0, 0, 1], [0, 1, 1], 1.0),
    ([0, 1], [1, 0], [0, 1, 1], [0, 0, 1], 0.0),
    ([1, 0], [1, 1], [0, 1], [0, 1], 0.5),
    ([1, 0], [1, 0], [0, 0, 1], [0, 1, 1], 1.0),
    ([1, 0], [0.5, 0.5], [0, 1], [0, 1], 0.5),
])
def test_roc_curve_toydata(y_true, y_score, fpr, tpr, auc):
    """test_roc_curve_toydata's binary cases (it names the outputs tpr, fpr in
    that order; the values here are the FPR and TPR)."""
    ours = roc.roc_curve_pairs(np.array(y_true), scores(y_score))
    np.testing.assert_array_equal(ours[0], fpr)
    np.testing.assert_array_equal(ours[1], tpr)
    for mode in ("exact", "curve", "binned"):
        assert roc.evaluate_pairs(np.array(y_true), scores(y_score), mode=mode).auc == auc


@pytest.mark.parametrize("y_true", [[1] * 10, [0] * 10, [0, 0], [1, 1]])
def test_one_class_is_an_error(y_true):
    """Difference: scikit-learn warns (UndefinedMetricWarning) and returns NaN
    rates and a NaN AUC; here a curve without genuine or without impostor
    pairs is a ValueError that says which, so that no NaN metric goes on
    unnoticed (README, Conformance)."""
    y_score = scores(np.arange(len(y_true)) % 2)
    kind = "genuine" if not any(y_true) else "impostor"
    for call in (lambda: roc.roc_curve_pairs(np.array(y_true), y_score),
                 lambda: roc.evaluate_pairs(np.array(y_true), y_score)):
        with pytest.raises(ValueError, match="there are no %s pairs" % kind):
            call()


def test_fpr_tpr_increasing(rng):
    """test_roc_curve_fpr_tpr_increasing, without its sample weights (the
    evaluator counts pairs; it takes no weights)."""
    for ties in (0, 2):
        y_true = rng.random(2000) < 0.4
        y_score = scores(np.round(rng.normal(size=2000) + y_true, ties) if ties else
                         rng.normal(size=2000) + y_true)
        for mode in ("exact", "curve", "binned"):
            report = roc.evaluate_pairs(y_true, y_score, mode=mode)
            assert (np.diff(report.fpr) >= 0).all() and (np.diff(report.tpr) >= 0).all()
            assert (np.diff(report.thresholds) < 0).all()


def test_score_scale_invariance():
    """test_score_scale_invariance with exact scalings (powers of two: the
    float32 scores keep their order and ties): the AUC depends on the order
    alone, bit for bit. (Scaling by 100 or 1e-6, or shifting, in float32 can
    merge neighbouring scores: then the pairs themselves differ.)"""
    y_true, _, y_score = toy_prediction()
    base = roc.evaluate_pairs(y_true, scores(y_score)).auc
    for scale in (2.0 ** 7, 2.0 ** -20):
        assert roc.evaluate_pairs(y_true, scores(y_score) * np.float32(scale)).auc == base


def test_thresholds_start_at_infinity(rng):
    """test_roc_curve_with_probability_estimates: thresholds[0] is +inf (not
    1 + max score), whatever the scores' range."""
    y_true = rng.integers(0, 2, 10)
    y_true[:2] = (0, 1)
    _, _, thresholds = roc.roc_curve_pairs(y_true, scores(rng.random(10)))
    assert np.isposinf(thresholds[0])
    assert np.isposinf(roc.evaluate_pairs(y_true, scores(rng.random(10))).thresholds[0])


def test_infinite_and_nan_scores(rng):
    """Difference: scikit-learn refuses NaN and infinite scores (ValueError);
    here NaN scores are left out and counted (n_nan), infinities are the most
    extreme scores. The curve equals scikit-learn's on the pairs without NaN,
    the infinities standing as finite scores beyond all others."""
    y_true = rng.random(500) < 0.3
    y_score = scores(rng.normal(size=500) + y_true)
    y_score[:6] = (np.inf, -np.inf, np.nan, np.inf, -np.inf, np.nan)
    with pytest.raises(ValueError), np.errstate(invalid="ignore"):
        sk_roc_curve(y_true, y_score)
    kept = ~np.isnan(y_score)
    stand_in = np.clip(y_score[kept].astype(np.float64), -1e30, 1e30)
    fpr, tpr, thresholds = roc.roc_curve_pairs(y_true, y_score)
    expected = sk_roc_curve(y_true[kept], stand_in)
    np.testing.assert_array_equal(fpr, expected[0])
    np.testing.assert_array_equal(tpr, expected[1])
    np.testing.assert_array_equal(np.clip(thresholds[1:], -1e30, 1e30), expected[2][1:])
    report = roc.evaluate_pairs(y_true, y_score)
    assert report.n_nan == 2
    assert report.auc == float(mann_whitney(y_true[kept], stand_in))


# ---------------------------------------------------------------------------
# roc_auc_score(max_fpr=): the partial AUC

def partial_auc_reference(y_true, y_score, max_fpr):
    """test_ranking's _partial_roc_auc_score, written out: scikit-learn's curve
    cut at max_fpr (its TPR interpolated there), the area by trapezoids, then
    McClish's formula (5) with fpr1 = 0, fpr2 = max_fpr."""
    fpr, tpr, _ = sk_roc_curve(y_true, y_score)
    inside = fpr <= max_fpr
    cut = np.argmax(fpr > max_fpr)
    new_fpr = np.append(fpr[inside], max_fpr)
    new_tpr = np.append(tpr[inside], np.interp(max_fpr, [fpr[cut - 1], fpr[cut]],
                                               [tpr[cut - 1], tpr[cut]]))
    area = np.trapezoid(new_tpr, new_fpr)
    min_area, max_area = 0.5 * max_fpr ** 2, max_fpr
    return 0.5 * (1 + (area - min_area) / (max_area - min_area))


def partial_auc_exact(y_true, y_score, max_fpr):
    """The same area on the same polyline in exact rationals."""
    fpr, tpr, _ = sk_roc_curve(y_true, y_score)
    p, n = int(np.sum(y_true == 1)), int(np.sum(y_true != 1))
    fa = [round(f * n) for f in fpr]
    ta = [round(t * p) for t in tpr]
    m = Fraction(max_fpr)
    cut, area = m * n, Fraction(0)
    for k in range(1, len(fa)):
        if fa[k] <= cut:
            area += Fraction((fa[k] - fa[k - 1]) * (ta[k] + ta[k - 1]), 2)
            continue
        d = cut - fa[k - 1]
        area += d * (ta[k - 1] + Fraction(ta[k] - ta[k - 1], fa[k] - fa[k - 1]) * d / 2)
        break
    a = area / (p * n)
    return (a + m * (1 - m)) / (m * (2 - m))


def test_partial_roc_auc_score():
    """test_partial_roc_auc_score's cases, each mode."""
    y_true = np.array([0, 0, 1, 1])
    for mode in ("exact", "curve", "binned"):
        assert roc.evaluate_pairs(y_true, scores(y_true), max_fpr=1, mode=mode).partial_auc == 1
        assert roc.evaluate_pairs(y_true, scores(y_true), max_fpr=0.001,
                                  mode=mode).partial_auc == 1
    y_scores = scores([0.1, 0, 0.1, 0.01])
    report = roc.evaluate_pairs(y_true, y_scores, max_fpr=1)
    assert report.partial_auc == report.auc == roc_auc_score(y_true, y_scores)
    assert roc.evaluate_pairs(y_true, y_scores, max_fpr=0.3).partial_auc == 0.5
    for bad in (-0.1, 1.1, 0):
        with pytest.raises(ValueError, match=r"evaluate_pairs: max_fpr must lie in \(0, 1\]"):
            roc.evaluate_pairs(y_true, y_scores, max_fpr=bad)

    y_true, _, y_score = toy_prediction()
    y_score = scores(y_score)
    for max_fpr in np.linspace(1e-4, 1, 5):
        ours = roc.evaluate_pairs(y_true, y_score, max_fpr=max_fpr).partial_auc
        assert ulps(ours, partial_auc_reference(y_true, y_score, max_fpr)) <= ULP_BOUND
        assert ulps(ours, roc_auc_score(y_true, y_score, max_fpr=max_fpr)) <= ULP_BOUND


@pytest.mark.parametrize("mode", ["exact", "curve"])
def test_partial_auc_within_an_ulp_of_exact(rng, mode):
    for trial in range(15):
        n = int(rng.integers(10, 800))
        y_true = (rng.random(n) < rng.uniform(0.1, 0.9)).astype(int)
        y_true[:2] = (0, 1)
        y_score = scores(rng.normal(size=n) + y_true)
        if trial % 3 == 0:
            y_score = scores(np.round(y_score, 1))
        max_fpr = float(rng.choice([rng.uniform(1e-3, 1), 1e-4, 0.1, 0.5, 0.8]))
        report = roc.evaluate_pairs(y_true, y_score, max_fpr=max_fpr, mode=mode)
        exact = partial_auc_exact(y_true, y_score, max_fpr)
        assert abs(Fraction(report.partial_auc) - exact) <= Fraction(np.spacing(float(exact)))
        assert ulps(report.partial_auc, roc_auc_score(y_true, y_score, max_fpr=max_fpr)) \
            <= ULP_BOUND


@pytest.mark.parametrize("mode", ["exact", "curve"])
def test_auc_is_the_exactly_rounded_mann_whitney_value(rng, mode):
    """report.auc = U / (P N) rounded once (to nearest, ties to even), and a
    few ulp from roc_auc_score, whose trapezoid sum rounds at every step."""
    for trial in range(15):
        n = int(rng.integers(2, 1500))
        y_true = (rng.random(n) < rng.uniform(0.05, 0.95)).astype(int)
        y_true[:2] = (0, 1)
        y_score = scores(rng.normal(size=n) + rng.uniform(0, 2) * y_true)
        if trial % 2:
            y_score = scores(np.round(y_score, 1))
        auc = roc.evaluate_pairs(y_true, y_score, mode=mode).auc
        assert auc == float(mann_whitney(y_true, y_score))
        assert ulps(auc, roc_auc_score(y_true, y_score)) <= ULP_BOUND


def test_auc_rounded_once_where_extended_precision_rounds_twice():
    """U / (P N) with N near 2^62 and the quotient within 2^-64 of a midpoint
    between two doubles: a long double quotient rounded again to double lands
    on the wrong side (0.9563777886388609); the long division does not. One
    genuine pair among N impostors: b below it, c tied with it and a above
    give U = b + c / 2, counts written into an evaluator with no pairs."""
    n, twice_u = 4181116504875190823, 7997453913947955799
    c = 1 if twice_u % 2 else 2
    b = (twice_u - c) // 2
    evaluation = _evaluate.counts_only("evaluate_pairs", "exact")
    evaluation.set_levels(np.array([score_key(0.5)]), np.array([1], np.uint64), 0)
    counts = evaluation.counts()
    counts["totals"][:] = (n + 1, 0, 1, 0)
    counts["at"][0], counts["gap"][:] = 1 + c, (b, n - b - c)
    counts["gap_min"][:] = (score_key(0.25), score_key(0.75))
    counts["top_key"][0], counts["top_count"][0] = score_key(0.9), 1
    summary = evaluation.summarize((), "max_tpr")
    assert summary.n_impostor == n
    assert summary.auc == float(Fraction(twice_u, 2 * n)) == 0.9563777886388608


# ---------------------------------------------------------------------------
# torchmetrics' binary ROC / AUROC / EER

def torchmetrics_inputs(kind, seed):
    """The shapes of torchmetrics' _binary_cases 1, 2, 4 and 5 (4 batches of
    32, or of 32 x 3): probabilities, or logits (the inverse sigmoid of
    probabilities); targets 0 or 1."""
    generator = torch.Generator().manual_seed(seed)
    shape = (4, 32) if kind.startswith("single") else (4, 32, 3)
    preds = torch.rand(shape, generator=generator)
    if kind.endswith("logits"):
        preds = (preds / (1 - preds)).log()
    return preds, torch.randint(0, 2, shape, generator=generator)


def torchmetrics_roc(preds, target):
    """binary_roc(thresholds=None) as torchmetrics computes it: scores outside
    [0, 1] through a sigmoid; one point per distinct score (nothing dropped),
    the counts as float32 cumulative sums, the rates float32."""
    preds, target = preds.flatten(), target.flatten()
    if not torch.all((preds >= 0) & (preds <= 1)):
        preds = preds.sigmoid()
    order = torch.argsort(preds, descending=True)
    preds, target = preds[order], target[order]
    ends = torch.cat([torch.where(preds[1:] - preds[:-1])[0],
                      torch.tensor([target.numel() - 1])])
    tps = torch.cumsum((target == 1).long() * 1.0, dim=0)[ends]
    fps = 1 + ends - tps
    tps, fps = torch.cat([torch.zeros(1), tps]), torch.cat([torch.zeros(1), fps])
    return fps / fps[-1], tps / tps[-1]


def torchmetrics_auroc(fpr, tpr, max_fpr=None):
    """_binary_auroc_compute: the trapezoid area, or with max_fpr the curve cut
    there (bucketize, lerp) and McClish's standardization."""
    if max_fpr is None or max_fpr == 1 or fpr.sum() == 0 or tpr.sum() == 0:
        return torch.trapz(tpr, fpr)
    max_area = torch.tensor(max_fpr)
    stop = torch.bucketize(max_area, fpr, out_int32=True, right=True)
    weight = (max_area - fpr[stop - 1]) / (fpr[stop] - fpr[stop - 1])
    tpr = torch.cat([tpr[:stop], torch.lerp(tpr[stop - 1], tpr[stop], weight).view(1)])
    fpr = torch.cat([fpr[:stop], max_area.view(1)])
    min_area = 0.5 * max_area ** 2
    return 0.5 * (1 + (torch.trapz(tpr, fpr) - min_area) / (max_area - min_area))


def torchmetrics_eer(fpr, tpr):
    """_binary_eer_compute (torchmetrics 1.8 to 1.9): (FPR + FNR) / 2 at the
    first argmin of |FPR - (1 - TPR)|."""
    idx = torch.argmin(torch.abs(fpr - (1 - tpr)))
    return (fpr[idx] + (1 - tpr[idx])) / 2


def sklearn_eer(y_true, y_score):
    """torchmetrics' test reference for binary_eer: the same formula in float64
    on scikit-learn's full curve (drop_intermediate=False), numpy's first
    argmin; with the index of the point and whether its distance exactly ties
    the next point's (the rates' rounding then picks either)."""
    fpr, tpr, _ = sk_roc_curve(y_true, y_score, drop_intermediate=False)
    idx = int(np.argmin(np.abs(fpr - (1 - tpr))))
    p, n = int(np.sum(y_true == 1)), int(np.sum(y_true != 1))
    distance = np.abs(np.rint(fpr * n).astype(np.int64) * p -
                      (p - np.rint(tpr * p).astype(np.int64)) * n)
    tied = np.flatnonzero(distance == distance.min())
    return (fpr[idx] + (1 - tpr[idx])) / 2, tied.size > 1


CASES = ["single-probs", "single-logits", "multi-probs", "multi-logits"]


def as_probabilities(preds):
    """What torchmetrics ranks: logits through its float32 sigmoid."""
    flat = preds.flatten()
    return flat if torch.all((flat >= 0) & (flat <= 1)) else flat.sigmoid()


@pytest.mark.parametrize("kind", CASES)
@pytest.mark.parametrize("max_fpr", [None, 0.8, 0.5])
@pytest.mark.parametrize("batch", [None, 0, 3])
def test_torchmetrics_binary_auroc(kind, max_fpr, batch):
    """test_auroc's binary cases (the whole input, and single batches as its
    functional test): the AUC and partial AUC equal scikit-learn's, the
    reference of torchmetrics' tests, within ULP_BOUND, and torchmetrics'
    float32 value within float32 rounding."""
    preds, target = torchmetrics_inputs(kind, 42)
    if batch is not None:
        preds, target = preds[batch], target[batch]
    probs = as_probabilities(preds)
    y_true, y_score = target.flatten().numpy(), probs.numpy()
    report = roc.evaluate_pairs(y_true, probs, max_fpr=max_fpr)
    ours = report.auc if max_fpr is None else report.partial_auc
    assert ulps(ours, roc_auc_score(y_true, y_score, max_fpr=max_fpr)) <= ULP_BOUND
    theirs = float(torchmetrics_auroc(*torchmetrics_roc(preds, target), max_fpr))
    assert abs(ours - theirs) <= 4e-7


@pytest.mark.parametrize("kind", CASES)
@pytest.mark.parametrize("batch", [None, 0, 1, 2, 3])
@pytest.mark.parametrize("mode", ["exact", "curve"])
def test_torchmetrics_binary_eer(kind, batch, mode):
    """test_eer's binary cases: eer_rule="nearest_mean" equals the test's
    float64 reference, but where two points are exactly as near (their
    rounded rates then choose either; we keep the first, argmin's rule), and
    torchmetrics' float32 value within float32 rounding of its own point."""
    preds, target = torchmetrics_inputs(kind, 42)
    if batch is not None:
        preds, target = preds[batch], target[batch]
    probs = as_probabilities(preds)
    y_true = target.flatten().numpy()
    report = roc.evaluate_pairs(y_true, probs, eer_rule="nearest_mean", mode=mode)
    reference, tied = sklearn_eer(y_true, probs.numpy())
    if not tied:
        assert report.eer == reference
        assert abs(report.eer - float(torchmetrics_eer(*torchmetrics_roc(preds, target)))) \
            <= 2e-7
    crossing = roc.evaluate_pairs(y_true, probs, mode=mode)
    assert crossing.eer_rule == "crossing" and report.eer_rule == "nearest_mean"
    # the nearest point lies on a segment that the crossing's interpolation uses
    assert abs(report.eer - crossing.eer) <= 0.5 / min(report.n_genuine, report.n_impostor)


def test_nearest_mean_keeps_the_first_of_exact_ties():
    """Two points exactly as near FPR = FNR: P = 3, N = 2; the points (FPR,
    TPR) (1/2, 1/3) and (1/2, 2/3)... are at |FPR - FNR| 1/6 both; the first
    (the lower FPR + TPR) is kept, as argmin keeps the first."""
    y_true = np.array([1, 0, 1, 1, 0])
    y_score = scores([5, 4, 3, 2, 1])
    fpr, tpr, _ = sk_roc_curve(y_true, y_score, drop_intermediate=False)
    distance = [Fraction(round(f * 2), 2) - (1 - Fraction(round(t * 3), 3))
                for f, t in zip(fpr, tpr)]
    nearest = min(abs(d) for d in distance)
    first = [abs(d) for d in distance].index(nearest)
    assert [abs(d) for d in distance].count(nearest) == 2
    for mode in ("exact", "curve"):
        report = roc.evaluate_pairs(y_true, y_score, eer_rule="nearest_mean", mode=mode)
        assert report.eer == (fpr[first] + (1 - tpr[first])) / 2
        assert report.eer_threshold == y_score[first - 1]


def crossing_reference(y_true, y_score):
    """The crossing EER on scikit-learn's curve: the first point with FPR >=
    FNR (in counts), FPR linearly interpolated where FPR - FNR changes sign."""
    fpr, tpr, thresholds = sk_roc_curve(y_true, y_score)
    p, n = int(np.sum(y_true == 1)), int(np.sum(y_true != 1))
    fa, ta = np.rint(fpr * n).astype(np.int64), np.rint(tpr * p).astype(np.int64)
    k = 1
    while k < fpr.size - 1 and fa[k] * p < (p - ta[k]) * n:
        k += 1
    d0, d1 = (1.0 - tpr[k - 1]) - fpr[k - 1], (1.0 - tpr[k]) - fpr[k]
    t = d0 / (d0 - d1) if d0 - d1 > 0 else 1.0
    return fpr[k - 1] + t * (fpr[k] - fpr[k - 1]), thresholds[k]


@pytest.mark.parametrize("kind", CASES)
def test_crossing_eer(kind):
    """The default rule, on torchmetrics' inputs: the polyline's crossing,
    curve mode on scikit-learn's own points; exact mode's runs of impostors
    are whole segments (the same line, rounded otherwise)."""
    preds, target = torchmetrics_inputs(kind, 7)
    probs = as_probabilities(preds)
    y_true = target.flatten().numpy()
    eer, threshold = crossing_reference(y_true, probs.numpy())
    curve = roc.evaluate_pairs(y_true, probs, mode="curve")
    assert (curve.eer, curve.eer_threshold) == (eer, threshold)
    assert ulps(roc.evaluate_pairs(y_true, probs).eer, eer) <= ULP_BOUND


@pytest.mark.parametrize("tie", [1, 3])
def test_nearest_mean_inside_a_run_of_impostors(tie):
    """Two genuine pairs (scores 10 and 0) around 100 impostors: FPR = FNR falls
    inside the run of impostors between them, at the 50th impostor where each
    scores alone, at the 51st where they tie in threes; exact mode counts the
    run but not its ties. Its first pass says so, and evaluate_pairs takes the
    EER from a second pass in curve mode."""
    impostors = 9 - np.arange(100) // tie * 0.05
    y_true = np.r_[1, 1, np.zeros(100, int)]
    y_score = scores(np.r_[10, 0, impostors])
    options = _evaluate.Options("evaluate_pairs", eer_rule="nearest_mean")
    first = _evaluate.finish(_evaluate.pair_list(
        "evaluate_pairs", options, y_true, y_score, None, None, None, None, None, None),
        options)[0]
    assert first._eer_undecided
    reference, tied = sklearn_eer(y_true, y_score)
    nearest = 50 if tie == 1 else 51
    assert not tied and reference == (nearest / 100 + 0.5) / 2
    for mode in ("exact", "curve"):
        report = roc.evaluate_pairs(y_true, y_score, eer_rule="nearest_mean", mode=mode)
        assert report.eer == reference and not report._eer_undecided
        assert report.eer_threshold == y_score[2 + nearest - 1]
        assert report.passes == (2 if mode == "exact" else 1)
        assert ("2 passes over the pairs: where exact mode's corners cannot decide "
                "nearest_mean's EER" in report.table()) == (mode == "exact")


def test_binned_mode_takes_the_rules_on_its_own_curve(rng):
    y_true = rng.random(2000) < 0.3
    y_score = scores(rng.uniform(-1, 1, 2000) * 0.7 + 0.3 * y_true)
    report = roc.evaluate_pairs(y_true, y_score, mode="binned", bins=64,
                                eer_rule="nearest_mean", max_fpr=0.25)
    fpr, tpr = report.fpr, report.tpr
    idx = int(np.argmin(np.abs(fpr - (1 - tpr))))
    assert report.eer == (fpr[idx] + (1 - tpr[idx])) / 2
    stop = np.searchsorted(fpr, 0.25, "right")
    cut = np.interp(0.25, fpr[stop - 1:stop + 1], tpr[stop - 1:stop + 1])
    area = np.trapezoid(np.r_[tpr[:stop], cut], np.r_[fpr[:stop], 0.25])
    assert abs(report.partial_auc - 0.5 * (1 + (area - 0.25 ** 2 / 2) / (0.25 - 0.25 ** 2 / 2))) \
        < 1e-14


# ---------------------------------------------------------------------------
# the options: errors, reports

@given(st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True), st.integers(-2, 3),
                 st.text(max_size=3)))
def test_max_fpr_values(value):
    y_true, y_score = np.array([0, 1, 0, 1]), scores([0.1, 0.9, 0.4, 0.3])
    valid = (value is None or (not isinstance(value, (bool, str)) and 0 < value <= 1))
    if valid:
        report = roc.evaluate_pairs(y_true, y_score, max_fpr=value)
        assert (report.partial_auc is None) == (value is None)
        return
    error = TypeError if isinstance(value, (bool, str)) else ValueError
    with pytest.raises(error, match="evaluate_pairs: max_fpr must"):
        roc.evaluate_pairs(y_true, y_score, max_fpr=value)


@pytest.mark.parametrize("value", ["torchmetrics", None, 1, "Crossing"])
def test_eer_rule_names(value):
    with pytest.raises(ValueError, match="evaluate: eer_rule must be one of 'crossing', "
                                         "'nearest_mean'"):
        roc.evaluate(np.array([0, 1]), np.array([0, 1]), score=np.eye(2, dtype=np.float32),
                     eer_rule=value)


@pytest.mark.parametrize("field, value, message", [
    ("eer_rule", 7, "unknown eer_rule 7"),
    ("max_fpr", 1.5, r"max_fpr must lie in \(0, 1\]"),
    ("max_fpr", float("nan"), r"max_fpr must lie in \(0, 1\]"),
    ("far_rule", -1, "unknown far_rule -1"),
    ("n_fars", 2, "2 FAR targets at NULL"),
])
def test_summary_options_checked_in_c(field, value, message):
    """roc_eval_summarize's own checks (a C caller has no Python in front)."""
    evaluation = _evaluate.counts_only("evaluate_pairs", "exact")
    options = _evaluate.ffi.new("roc_summary_options *")
    setattr(options, field, value)
    out = _evaluate.ffi.new("roc_summary **")
    with pytest.raises(ValueError, match="evaluate_pairs: " + message):
        evaluation.check(_evaluate.lib.roc_eval_summarize(evaluation.handle, options, out))
    with pytest.raises(ValueError, match="evaluate_pairs: the summary options are NULL"):
        evaluation.check(_evaluate.lib.roc_eval_summarize(evaluation.handle,
                                                          _evaluate.ffi.NULL, out))


def test_report_carries_the_rules(rng):
    y_true = rng.random(300) < 0.4
    y_score = scores(rng.normal(size=300) + y_true)
    report = roc.evaluate_pairs(y_true, y_score, eer_rule="nearest_mean", max_fpr=0.2)
    out = report.to_dict()
    assert (out["eer_rule"], out["max_fpr"]) == ("nearest_mean", 0.2)
    assert out["partial_auc"] == report.partial_auc and not math.isnan(report.partial_auc)
    assert "partial AUC over FPR <= 0.2" in report.table() and "eer_rule=nearest_mean" in \
        report.table()
    plain = roc.evaluate_pairs(y_true, y_score).to_dict()
    assert plain["partial_auc"] is None and plain["max_fpr"] is None


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["exact", "curve"])
def test_rules_on_the_gpu_equal_the_cpu(rng, mode):
    """The summary is host code, from the counts: the GPU's counts (and its
    second pass, in curve mode) give the CPU's EER and partial AUC."""
    y_true = rng.random(20000) < 0.01
    y_score = scores(rng.normal(size=20000) + 2 * y_true)
    cpu = roc.evaluate_pairs(y_true, y_score, eer_rule="nearest_mean", max_fpr=0.1, mode=mode)
    gpu = roc.evaluate_pairs(torch.from_numpy(y_true).cuda(), torch.from_numpy(y_score).cuda(),
                             eer_rule="nearest_mean", max_fpr=0.1, mode=mode)
    assert (gpu.eer, gpu.eer_threshold, gpu.partial_auc, gpu.auc) == \
        (cpu.eer, cpu.eer_threshold, cpu.partial_auc, cpu.auc)
