"""evaluate() and roc_curve() against scikit-learn and NumPy (float64
references), their errors, and the GPU against the CPU on the same inputs.
How the GPU counts (its strategies, steered through EXT_ROC_STRATEGY and the
sizes): test_roc_strategies_gpu.py."""

import gc
import json

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from _ext import roc
from _ext.roc import _evaluate

# the seeds of the file these tests were split from (conftest.py's rng)
SEED_FILE = "test_roc_eval.py"

RULES = ("max_tpr", "nearest", "first_above", "interpolate")
FARS = (0.0, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0)


# ---------------------------------------------------------------------------
# data and references

def sample(rng, n_query, n_gallery, n_ids=10, kind="random"):
    """labels and a (Q, G) float32 score matrix; genuine pairs score higher."""
    labels_q = rng.integers(0, n_ids, n_query)
    labels_g = rng.integers(0, n_ids, n_gallery)
    genuine = labels_q[:, None] == labels_g[None, :]
    score = rng.normal(0.0, 0.3, (n_query, n_gallery)) + 0.6 * genuine
    if kind == "ties":  # two decimals: genuine and impostor pairs share values
        score = np.round(score, 2)
    elif kind == "coarse":  # a handful of values
        score = np.round(score * 4) / 4
    return labels_q, labels_g, score.astype(np.float32)


def pairs(labels_q, labels_g, score, same_set=False):
    """The flattened pairs (y_true, y_score) scikit-learn sees."""
    genuine = np.asarray(labels_q)[:, None] == np.asarray(labels_g)[None, :]
    if same_set:
        upper = np.triu_indices(len(labels_q), 1)
        return genuine[upper], score[upper]
    return genuine.ravel(), score.ravel()


def reduce_runs(fpr, tpr, thresholds):
    """scikit-learn's curve less the inner points of horizontal runs: what exact
    mode returns (it does not know how impostors tie inside a run)."""
    n = len(fpr)
    keep = [k for k in range(n) if k <= 1 or k == n - 1 or not (tpr[k - 1] == tpr[k] == tpr[k + 1])]
    return fpr[keep], tpr[keep], thresholds[keep]


def reference_tar(fpr, tpr, thresholds, n_impostor, far, rule):
    """TAR@FAR by `rule` on a curve, the highest threshold reaching it, and the
    impostors at or above that threshold."""
    n = len(fpr)
    if rule == "nearest":
        k = int(np.argmin(np.abs(fpr - far)))
        tar = tpr[k]
    elif rule == "first_above":
        k = int(np.argmax(fpr >= far))
        tar = tpr[k]
    else:
        k = int(np.searchsorted(fpr, far, side="right")) - 1
        tar = tpr[k]
        if rule == "interpolate" and k < n - 1 and fpr[k] < far:
            tar = tpr[k] + (tpr[k + 1] - tpr[k]) * (far - fpr[k]) / (fpr[k + 1] - fpr[k])
    first = int(np.argmax(tpr >= tar))
    return tar, thresholds[first], int(round(fpr[first] * n_impostor))


def reference_eer(fpr, tpr, n_genuine, n_impostor):
    fps, tps = np.round(fpr * n_impostor), np.round(tpr * n_genuine)
    k = 1
    while k < len(fpr) - 1 and fps[k] * n_genuine < (n_genuine - tps[k]) * n_impostor:
        k += 1
    d0, d1 = (1 - tpr[k - 1]) - fpr[k - 1], (1 - tpr[k]) - fpr[k]
    t = d0 / (d0 - d1) if d0 - d1 > 0 else 1.0
    return fpr[k - 1] + t * (fpr[k] - fpr[k - 1]), k


def host_curve(curve):
    """A curve's arrays as NumPy (a GPU's come as float64 torch tensors on it)."""
    for a in curve:
        assert a.dtype in (np.float64, torch.float64)
    return [a.cpu().numpy() if torch.is_tensor(a) else a for a in curve]


def assert_curve_equal(got, expected):
    for name, a, b in zip(("fpr", "tpr", "thresholds"), host_curve(got), host_curve(expected)):
        assert len(a) == len(b), "%s: %d points, expected %d" % (name, len(a), len(b))
        np.testing.assert_array_equal(a, b, err_msg=name)


def check_report(report, y_true, y_score, fars=FARS):
    """A report against scikit-learn on the same pairs, for every rule."""
    sk = sk_roc_curve(y_true, y_score)
    n_genuine, n_impostor = int(y_true.sum()), int((~y_true).sum())
    assert report.n_genuine == n_genuine and report.n_impostor == n_impostor
    assert_curve_equal((report.fpr, report.tpr, report.thresholds), reduce_runs(*sk))
    assert report.auc == pytest.approx(roc_auc_score(y_true, y_score), rel=1e-12, abs=0)
    eer, _ = reference_eer(sk[0], sk[1], n_genuine, n_impostor)
    assert report.eer == pytest.approx(eer, rel=1e-12, abs=1e-15)
    reduced = reduce_runs(*sk)
    _, k = reference_eer(reduced[0], reduced[1], n_genuine, n_impostor)
    assert report.eer_threshold == reduced[2][k]
    for row in report.tar_at_far:
        tar, threshold, false_accepts = reference_tar(*reduced, n_impostor, row.far,
                                                      report.far_rule)
        assert (row.tar, row.threshold, row.false_accepts) == (tar, threshold, false_accepts), \
            "far %g, rule %s" % (row.far, report.far_rule)
        if report.far_rule != "nearest":  # the others ignore inner run points
            assert row.tar == reference_tar(*sk, n_impostor, row.far, report.far_rule)[0]


# ---------------------------------------------------------------------------
# roc_curve: scikit-learn's curve, point for point

@pytest.mark.parametrize("kind", ["random", "ties", "coarse"])
@pytest.mark.parametrize("shape", [(1, 2), (2, 2), (7, 3), (40, 90), (300, 200)])
def test_roc_curve_equals_sklearn(rng, kind, shape):
    labels_q, labels_g, score = sample(rng, *shape, n_ids=3, kind=kind)
    y_true, y_score = pairs(labels_q, labels_g, score)
    if y_true.all() or not y_true.any():
        pytest.skip("one class only")
    assert_curve_equal(roc.roc_curve(labels_q, labels_g, score=score),
                       sk_roc_curve(y_true, y_score))


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_roc_curve_in_chunks(rng, chunk):
    """Steps of a few pairs merge into the same distinct keys."""
    labels_q, labels_g, score = sample(rng, 30, 40, kind="ties")
    assert_curve_equal(roc.roc_curve(labels_q, labels_g, score=score, chunk=chunk),
                       sk_roc_curve(*pairs(labels_q, labels_g, score)))


def test_roc_curve_lopsided(rng):
    """One genuine pair among thousands, and one impostor among many genuine."""
    score = rng.normal(size=(50, 60)).astype(np.float32)
    labels_q, labels_g = np.zeros(50), np.ones(60)
    labels_g[17] = 0.0
    labels_q[1:] = 5.0
    assert_curve_equal(roc.roc_curve(labels_q, labels_g, score=score),
                       sk_roc_curve(*pairs(labels_q, labels_g, score)))
    labels_q, labels_g = np.zeros(50), np.zeros(60)
    labels_g[3] = 1.0
    labels_q[:49] = 0.0
    labels_q[49] = 2.0
    labels_g[:] = 0.0
    labels_g[59] = 1.0
    assert_curve_equal(roc.roc_curve(labels_q, labels_g, score=score),
                       sk_roc_curve(*pairs(labels_q, labels_g, score)))


def test_signed_zeros_and_infinities(rng):
    """-0.0 equals 0.0; infinities are ordinary extreme scores (scikit-learn
    refuses them, so the reference replaces them by finite extremes)."""
    labels_q, labels_g, score = sample(rng, 20, 30, n_ids=4, kind="coarse")
    score.ravel()[::7] = -0.0
    score.ravel()[::11] = 0.0
    score.ravel()[3::13] = np.inf
    score.ravel()[5::17] = -np.inf
    fpr, tpr, thresholds = roc.roc_curve(labels_q, labels_g, score=score)
    finite = score.astype(np.float64)
    finite[np.isposinf(score)], finite[np.isneginf(score)] = 1e30, -1e30
    sk = sk_roc_curve(*pairs(labels_q, labels_g, finite))
    np.testing.assert_array_equal(fpr, sk[0])
    np.testing.assert_array_equal(tpr, sk[1])
    np.testing.assert_array_equal(thresholds[1:], np.where(sk[2][1:] == 1e30, np.inf,
                                                           np.where(sk[2][1:] == -1e30, -np.inf,
                                                                    sk[2][1:])))


def test_nan_scores_are_excluded_and_counted(rng):
    labels_q, labels_g, score = sample(rng, 25, 35)
    score[3, :5] = np.nan
    score[::4, 7] = np.nan
    nan = np.isnan(score)
    y_true, y_score = pairs(labels_q, labels_g, score)
    keep = ~np.isnan(y_score)
    assert_curve_equal(roc.roc_curve(labels_q, labels_g, score=score),
                       sk_roc_curve(y_true[keep], y_score[keep]))
    report = roc.evaluate(labels_q, labels_g, score=score)
    assert report.n_nan == nan.sum()
    check_report(report, y_true[keep], y_score[keep])


# ---------------------------------------------------------------------------
# evaluate: exact mode

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("kind", ["random", "ties", "coarse"])
def test_evaluate_exact_equals_sklearn(rng, rule, kind):
    labels_q, labels_g, score = sample(rng, 120, 150, kind=kind)
    report = roc.evaluate(labels_q, labels_g, score=score, far_rule=rule, fars=FARS)
    check_report(report, *pairs(labels_q, labels_g, score))


def test_exact_curve_is_sklearns_without_impostor_ties(rng):
    """With distinct scores nothing ties inside a run: sklearn's curve exactly."""
    labels_q, labels_g = rng.integers(0, 5, 40), rng.integers(0, 5, 50)
    score = rng.permutation(np.arange(2000, dtype=np.float32)).reshape(40, 50) / 2000
    report = roc.evaluate(labels_q, labels_g, score=score)
    assert_curve_equal((report.fpr, report.tpr, report.thresholds),
                       sk_roc_curve(*pairs(labels_q, labels_g, score)))


def test_exact_raw_counts(rng):
    labels_q, labels_g, score = sample(rng, 50, 70, kind="ties")
    counts = roc.evaluate(labels_q, labels_g, score=score).counts
    y_true, y_score = pairs(labels_q, labels_g, score)
    levels, genuine = np.unique(y_score[y_true], return_counts=True)
    np.testing.assert_array_equal(counts["genuine_scores"], levels.astype(np.float64))
    np.testing.assert_array_equal(counts["genuine"], genuine)
    impostor = y_score[~y_true]
    np.testing.assert_array_equal(counts["impostor_at"], [(impostor == v).sum() for v in levels])
    edges = np.concatenate([[-np.inf], levels, [np.inf]])
    between = [((impostor > lo) & (impostor < hi)).sum() for lo, hi in zip(edges, edges[1:])]
    np.testing.assert_array_equal(counts["impostor_between"], between)


def test_tar_at_far_table(rng):
    labels_q, labels_g, score = sample(rng, 30, 30)
    report = roc.evaluate(labels_q, labels_g, score=score, fars=(1e-3, 0.1))
    text = report.table()
    assert "FAR" in text and "false accepts" in text and "AUC" in text
    assert len(report.tar_at_far) == 2 and report.tar_at_far[1].far == 0.1
    summary = report.to_dict()
    assert "thresholds" not in summary and summary["n_points"] == len(report.fpr)
    assert report.to_dict(curve=True)["thresholds"][0] is None  # +inf as JSON null
    json.dumps(report.to_dict(curve=True), allow_nan=False)


# ---------------------------------------------------------------------------
# evaluate: binned mode

@pytest.mark.parametrize("bins,bin_range", [(1024, (-1.0, 1.0)), (7, (-0.5, 0.75)),
                                            (1, (0.0, 1.0)), (300, (-2.0, 2.0))])
def test_binned_counts_equal_numpy_histogram(rng, bins, bin_range):
    labels_q, labels_g, score = sample(rng, 80, 90, kind="ties")
    score[0, :10] = [-1.0, 1.0, -0.5, 0.75, 0.0, -3.0, 3.0, np.inf, -np.inf, np.nan]
    report = roc.evaluate(labels_q, labels_g, score=score, mode="binned", bins=bins,
                          range=bin_range)
    y_true, y_score = pairs(labels_q, labels_g, score)
    valid = ~np.isnan(y_score)
    lo, hi = np.float32(bin_range[0]), np.float32(bin_range[1])
    for name, selected in (("genuine", y_true & valid), ("impostor", ~y_true & valid)):
        values = y_score[selected]
        expected, edges = np.histogram(values, bins=bins, range=bin_range)
        np.testing.assert_array_equal(report.counts[name], expected)
        np.testing.assert_array_equal(report.counts["edges"], edges.astype(np.float64))
        assert report.counts[name + "_below"] == (values < lo).sum()
        assert report.counts[name + "_above"] == (values > hi).sum()
    assert report.n_nan == 1


def test_binned_curve_and_totals(rng):
    labels_q, labels_g, score = sample(rng, 60, 60)
    exact = roc.evaluate(labels_q, labels_g, score=score)
    binned = roc.evaluate(labels_q, labels_g, score=score, mode="binned", bins=2048)
    assert (binned.n_genuine, binned.n_impostor) == (exact.n_genuine, exact.n_impostor)
    assert binned.tpr[-1] == binned.fpr[-1] == 1.0 and binned.thresholds[0] == np.inf
    assert abs(binned.auc - exact.auc) < 1e-3
    assert np.all(np.diff(binned.thresholds) < 0)


# ---------------------------------------------------------------------------
# features, same set, labels

@pytest.mark.parametrize("similarity", ["cosine", "dot"])
@pytest.mark.parametrize("mode", ["exact", "binned", "curve"])
def test_features_equal_scores(rng, similarity, mode):
    """From features, the pairs are scored tile by tile; pair_scores gives the
    same scores as a matrix, and both paths give the same result."""
    labels_q, labels_g = rng.integers(0, 6, 70), rng.integers(0, 6, 130)
    feat_q = rng.normal(size=(70, 33)).astype(np.float32)
    feat_g = rng.normal(size=(130, 33)).astype(np.float32)
    score = roc.pair_scores(feat_q, feat_g, similarity)
    if mode == "curve":
        got = roc.roc_curve(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g,
                            similarity=similarity)
        assert_curve_equal(got, roc.roc_curve(labels_q, labels_g, score=score))
        assert_curve_equal(got, sk_roc_curve(*pairs(labels_q, labels_g, score)))
        return
    a = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode,
                     similarity=similarity)
    b = roc.evaluate(labels_q, labels_g, score=score, mode=mode)
    assert_reports_equal(a, b)


def test_pair_scores_are_float32_dot_products(rng):
    feat_q = rng.normal(size=(20, 50)).astype(np.float32)
    feat_g = rng.normal(size=(30, 50)).astype(np.float32)
    reference = (feat_q.astype(np.float64) @ feat_g.T.astype(np.float64))
    np.testing.assert_allclose(roc.pair_scores(feat_q, feat_g, "dot"), reference, rtol=1e-5,
                               atol=1e-5)
    unit_q = feat_q / np.linalg.norm(feat_q.astype(np.float64), axis=1, keepdims=True)
    unit_g = feat_g / np.linalg.norm(feat_g.astype(np.float64), axis=1, keepdims=True)
    np.testing.assert_allclose(roc.pair_scores(feat_q, feat_g), unit_q @ unit_g.T, rtol=1e-5,
                               atol=1e-6)


def test_features_with_exact_products(rng):
    """Small integer features: every order of summation is exact, so the
    features path equals a float64 matrix product given as score."""
    labels_q, labels_g = rng.integers(0, 4, 40), rng.integers(0, 4, 45)
    feat_q = rng.integers(-3, 4, (40, 12)).astype(np.float32)
    feat_g = rng.integers(-3, 4, (45, 12)).astype(np.float32)
    score = (feat_q.astype(np.float64) @ feat_g.T.astype(np.float64)).astype(np.float32)
    assert_curve_equal(roc.roc_curve(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g,
                                     similarity="dot"),
                       sk_roc_curve(*pairs(labels_q, labels_g, score)))


@pytest.mark.parametrize("source", ["score", "features"])
def test_same_set_equals_brute_force(rng, source):
    labels = rng.integers(0, 9, 90)
    feats = rng.normal(size=(90, 20)).astype(np.float32)
    score = roc.pair_scores(feats, feats)
    kwargs = {"score": score} if source == "score" else {"feat_q": feats}
    y_true, y_score = pairs(labels, labels, score, same_set=True)
    assert_curve_equal(roc.roc_curve(labels, None, same_set=True, **kwargs),
                       sk_roc_curve(y_true, y_score))
    report = roc.evaluate(labels, labels, same_set=True, **kwargs)
    check_report(report, y_true, y_score)


@pytest.mark.parametrize("convert", [
    lambda x: x, lambda x: x.astype(np.float32), lambda x: x.astype(np.int32),
    lambda x: torch.from_numpy(x), lambda x: torch.from_numpy(x).double(),
    lambda x: list(x)])
def test_label_types(rng, convert):
    labels_q, labels_g, score = sample(rng, 30, 40)
    expected = roc.evaluate(labels_q, labels_g, score=score)
    got = roc.evaluate(convert(labels_q), convert(labels_g), score=torch.from_numpy(score))
    assert_reports_equal(got, expected)


def test_mixed_int_and_float_labels(rng):
    labels_q, labels_g, score = sample(rng, 30, 40)
    a = roc.evaluate(labels_q.astype(np.int64), labels_g.astype(np.float32), score=score)
    b = roc.evaluate(labels_q, labels_g, score=score)
    assert_reports_equal(a, b)


def _float_labels(ids):
    """Identity 0 as -0.0 and +0.0 in turn; the others integers held by
    floats that differ in the last bit, at the ends of int64 and uint64, or
    beyond them."""
    values = np.array([0.0, 1.0, 2.0 ** 53, 2.0 ** 53 + 2, -2.0 ** 63, 2.0 ** 63, 2.0 ** 64,
                       1e300, -1e300, 3.0])[ids]
    values[(ids == 0) & (np.arange(len(ids)) % 2 == 1)] = -0.0
    return values


SPARSE_LABELS = {
    "int64 near both ends": lambda ids: np.array([-2 ** 63, 2 ** 63 - 1, -1, 0, 2 ** 40, -2 ** 40,
                                                  7, 2 ** 62, -2 ** 62, 3])[ids],
    "uint64 above 2^63": lambda ids: np.uint64(2 ** 64 - 1) - ids.astype(np.uint64) * np.uint64(
        2 ** 59),
    "float -0, +0 and neighbours": _float_labels,
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("spread", list(SPARSE_LABELS))
def test_sparse_and_extreme_labels(rng, spread, device):
    """Labels far apart, at the ends of int64 and uint64, and float labels
    where -0 and +0 are one identity: the same report as the same identities
    numbered 0 to 9, whatever the labels' values."""
    labels_q, labels_g, score = sample(rng, 40, 60)
    expected = roc.evaluate(labels_q, labels_g, score=score)
    values = SPARSE_LABELS[spread]
    got = roc.evaluate(torch.from_numpy(values(labels_q)).to(device),
                       torch.from_numpy(values(labels_g)).to(device),
                       score=torch.from_numpy(score).to(device))
    assert_reports_equal(got, expected)


def test_progress_is_reported(rng):
    labels_q, labels_g, score = sample(rng, 50, 20)
    seen = []
    roc.evaluate(labels_q, labels_g, score=score, chunk=100, progress=lambda d, t: seen.append((d, t)))
    assert len(seen) == 10 and seen[-1] == (1000, 1000)
    seen.clear()
    roc.evaluate(labels_q, None, feat_q=np.eye(50, dtype=np.float32), same_set=True, chunk=200,
                 progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (50 * 49 // 2, 50 * 49 // 2)


@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_report_arrays_outlive_the_report(rng, mode):
    """The report's arrays view the C summary's memory without a copy: taken
    from a report that is then dropped (and the memory churned), they still
    hold its values, and roc_curve's arrays too."""
    labels_q, labels_g, score = sample(rng, 60, 80)
    expected = roc.evaluate(labels_q, labels_g, score=score, mode=mode)
    report = roc.evaluate(labels_q, labels_g, score=score, mode=mode)
    fpr, counts = report.fpr, report.counts
    curve = roc.roc_curve(labels_q, labels_g, score=score)
    sk = sk_roc_curve((labels_q[:, None] == labels_g[None, :]).ravel(), score.ravel())
    del report
    gc.collect()
    for _ in range(3):  # reports made and freed: their memory is reused
        roc.evaluate(labels_q, labels_g, score=score[::-1].copy(), mode=mode)
    np.testing.assert_array_equal(fpr, expected.fpr)
    for key in counts:
        np.testing.assert_array_equal(counts[key], expected.counts[key], err_msg=key)
    np.testing.assert_array_equal(curve[0], sk[0])
    np.testing.assert_array_equal(curve[1], sk[1])


def assert_reports_equal(a, b):
    for name in ("fpr", "tpr", "thresholds", "false_accepts", "true_accepts"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert (a.auc, a.eer, a.eer_threshold, a.n_genuine, a.n_impostor, a.n_nan) == \
        (b.auc, b.eer, b.eer_threshold, b.n_genuine, b.n_impostor, b.n_nan)
    assert a.tar_at_far == b.tar_at_far
    assert a.counts.keys() == b.counts.keys()
    for key in a.counts:
        np.testing.assert_array_equal(a.counts[key], b.counts[key], err_msg=key)


# ---------------------------------------------------------------------------
# errors

def test_no_genuine_or_no_impostor_pairs(rng):
    score = rng.normal(size=(4, 5)).astype(np.float32)
    with pytest.raises(ValueError, match="evaluate: there are no genuine pairs"):
        roc.evaluate(np.zeros(4), np.ones(5), score=score)
    with pytest.raises(ValueError, match="roc_curve: there are no impostor pairs"):
        roc.roc_curve(np.zeros(4), np.zeros(5), score=score)
    with pytest.raises(ValueError, match="no genuine pairs"):
        roc.evaluate(np.zeros(4), np.ones(5), score=score, mode="binned")
    nan_genuine = score.copy()
    nan_genuine[:, 0] = np.nan
    labels_g = np.array([0, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="no genuine pairs"):
        roc.evaluate(np.zeros(4), labels_g, score=nan_genuine)


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(score=np.zeros((3, 4), np.int32)), TypeError,
     "evaluate: score must be float64, float32, float16 or bfloat16"),
    (dict(score=np.zeros((3, 5), np.float32)), ValueError,
     r"labels_g has 4 elements but there are 5 gallery entries"),
    (dict(score=np.zeros((4, 3), np.float32).T), ValueError, "score must be contiguous"),
    (dict(feat_q=np.zeros((3, 8), np.float32), feat_g=np.zeros((4, 9), np.float32)), ValueError,
     "the feature dimensions differ"),
    (dict(feat_q=np.zeros((3, 8)), feat_g=np.zeros((4, 8), np.float32)), TypeError,
     r"evaluate: feat_q is float64, but features are scored in float32 .*: cast them with "
     r"feat_q.astype\(numpy.float32\) or feat_q.float\(\)"),
    (dict(score=np.zeros((3, 4), np.float32), mode="fast"), ValueError,
     "mode must be one of 'exact', 'binned'"),
    (dict(score=np.zeros((3, 4), np.float32), far_rule="closest"), ValueError,
     "far_rule must be one of"),
    (dict(score=np.zeros((3, 4), np.float32), fars=(1.5,)), ValueError, r"fars must lie in \[0, 1\]"),
    (dict(score=np.zeros((3, 4), np.float32), mode="binned", bins=0), ValueError,
     r"bins must lie in \[1, 2\^30\]"),
    (dict(score=np.zeros((3, 4), np.float32), mode="binned", range=(1.0, -1.0)), ValueError,
     "range must be finite with lo < hi"),
    (dict(), ValueError, "give either score=, or feat_q="),
    (dict(score=np.zeros((3, 3), np.float32), same_set=True), ValueError,
     "same_set=True means one set: labels_g must be labels_q"),
    (dict(score=np.zeros((3, 4), np.float32), same_set=True), ValueError,
     "same_set needs one set: score must be square"),
    (dict(score=np.zeros((3, 4), np.float32), chunk=0), ValueError, "chunk must be a positive"),
])
def test_bad_arguments(kwargs, error, message):
    labels_q, labels_g = np.array([0, 1, 2]), np.array([0, 1, 2, 2])
    with pytest.raises(error, match=message):
        roc.evaluate(labels_q, labels_g, **kwargs)


def hint_rows(monkeypatch, rows):
    """Evaluators created from now on told that each add_rows call counts
    `rows` rows (roc_eval_config.step_rows), whatever the calls count."""
    config = _evaluate._config

    def hinted(*args, **kwargs):
        made = config(*args, **kwargs)
        made.step_rows = rows
        return made
    monkeypatch.setattr(_evaluate, "_config", hinted)


def test_bad_step_rows(monkeypatch):
    hint_rows(monkeypatch, -1)
    with pytest.raises(ValueError, match=r"evaluate: step_rows must be >= 0 \(0: not said\), "
                                         "got -1"):
        roc.evaluate(np.array([0, 1]), np.array([0, 1]), feat_q=np.ones((2, 3), np.float32),
                     feat_g=np.ones((2, 3), np.float32))


def test_bad_labels():
    score = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match="labels_q contains NaN"):
        roc.evaluate(np.array([0, np.nan, 1]), np.zeros(4), score=score)
    with pytest.raises(ValueError, match="labels_q has 2 elements but there are 3 queries"):
        roc.evaluate(np.zeros(2), np.zeros(4), score=score)
    with pytest.raises(TypeError, match="labels_g must hold bool, integers, or floats holding "
                                        "integers"):
        roc.evaluate(np.zeros(3), np.array(["a", "b", "c", "d"]), score=score)


def test_same_set_needs_one_set():
    with pytest.raises(ValueError, match="same_set needs one set"):
        roc.evaluate(np.zeros(3), None, score=np.zeros((3, 4), np.float32), same_set=True)
    with pytest.raises(ValueError, match="feat_g must be feat_q"):
        roc.evaluate(np.zeros(3), None, feat_q=np.zeros((3, 2), np.float32),
                     feat_g=np.ones((3, 2), np.float32), same_set=True)


# ---------------------------------------------------------------------------
# GPU against CPU (GPU machine)

def gpu_cpu_pair(fn, **kwargs):
    cpu = fn(**kwargs)
    moved = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
             for k, v in kwargs.items()}
    gpu = fn(**moved)
    return cpu, gpu


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["exact", "binned"])
@pytest.mark.parametrize("kind", ["random", "ties", "coarse"])
@pytest.mark.parametrize("source", ["score", "features", "same_set"])
def test_gpu_equals_cpu(rng, mode, kind, source):
    labels_q, labels_g, score = sample(rng, 300, 500, n_ids=40, kind=kind)
    score[5, 7:20] = np.nan
    feat_q = rng.normal(size=(300, 40)).astype(np.float32)
    feat_g = rng.normal(size=(500, 40)).astype(np.float32)
    if source == "score":
        kwargs = dict(labels_q=labels_q, labels_g=labels_g, score=score)
    elif source == "features":
        kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g)
    else:
        kwargs = dict(labels_q=labels_q, labels_g=labels_q, feat_q=feat_q, same_set=True)
    for rule in RULES:
        cpu, gpu = gpu_cpu_pair(roc.evaluate, mode=mode, far_rule=rule, **kwargs)
        assert_reports_equal(gpu, cpu)


@pytest.mark.gpu
@pytest.mark.parametrize("source", ["score", "features", "same_set"])
def test_gpu_roc_curve_equals_sklearn(rng, source):
    labels_q, labels_g, score = sample(rng, 200, 300, n_ids=20, kind="ties")
    feat_q = rng.normal(size=(200, 24)).astype(np.float32)
    feat_g = rng.normal(size=(300, 24)).astype(np.float32)
    if source == "score":
        kwargs = dict(labels_q=labels_q, labels_g=labels_g, score=score)
        y = pairs(labels_q, labels_g, score)
    elif source == "features":
        kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g)
        y = pairs(labels_q, labels_g, roc.pair_scores(feat_q, feat_g))
    else:
        kwargs = dict(labels_q=labels_q, labels_g=None, feat_q=feat_q, same_set=True)
        y = pairs(labels_q, labels_q, roc.pair_scores(feat_q, feat_q), same_set=True)
    cpu, gpu = gpu_cpu_pair(roc.roc_curve, chunk=5000, **kwargs)
    assert_curve_equal(gpu, cpu)
    assert_curve_equal(gpu, sk_roc_curve(*y))


@pytest.mark.gpu
def test_gpu_pair_scores_equal_cpu(rng):
    for shape in [(1, 1, 1), (5, 7, 3), (130, 260, 129), (257, 129, 512)]:
        feat_q = rng.normal(size=shape[::2]).astype(np.float32)
        feat_g = rng.normal(size=shape[1:]).astype(np.float32)
        for similarity in ("cosine", "dot"):
            cpu = roc.pair_scores(feat_q, feat_g, similarity)
            gpu = roc.pair_scores(torch.from_numpy(feat_q).cuda(), torch.from_numpy(feat_g).cuda(),
                                  similarity)
            np.testing.assert_array_equal(gpu.cpu().numpy(), cpu)


# ---------------------------------------------------------------------------
# many genuine levels inside the impostor mass (the hard case at scale)

def hard_pairs(rng, n_query, n_gallery, per_id=4):
    """Gallery identities of per_id images, queries near image 0 of theirs and
    the other images random: 3 of 4 genuine scores lie among the impostors; and
    a few impostors scored exactly like genuine levels (ties at the boundaries)."""
    n_ids = n_gallery // per_id
    labels_g = np.repeat(np.arange(n_ids), per_id)
    labels_q = rng.integers(0, n_ids, n_query)
    score = rng.normal(0.0, 0.1, (n_query, n_gallery))
    first = labels_g[None, :] == labels_q[:, None]
    first &= (np.arange(n_gallery) % per_id == 0)[None, :]
    score[first] += 0.6
    score = np.round(score, 3).astype(np.float32)  # ties between and within the kinds
    genuine = labels_q[:, None] == labels_g[None, :]
    levels = np.unique(score[genuine])
    impostors = np.flatnonzero(~genuine.ravel())
    score.ravel()[rng.choice(impostors, 50)] = rng.choice(levels, 50)  # on a level exactly
    return labels_q, labels_g, score


@pytest.mark.parametrize("source", ["score", "features"])
def test_many_levels_inside_the_impostor_mass(rng, source):
    labels_q, labels_g, score = hard_pairs(rng, 150, 400)
    if source == "features":  # random features: every genuine score among the impostors
        feat_q = rng.normal(size=(150, 6)).astype(np.float32)
        feat_g = rng.normal(size=(400, 6)).astype(np.float32)
        score = roc.pair_scores(feat_q, feat_g)
        kwargs = dict(feat_q=feat_q, feat_g=feat_g)
    else:
        kwargs = dict(score=score)
    genuine, s = pairs(labels_q, labels_g, score)
    report = roc.evaluate(labels_q, labels_g, **kwargs)
    assert len(report.counts["genuine_scores"]) > 300
    assert abs(report.auc - roc_auc_score(genuine, s)) < 1e-12
    curve = roc.evaluate(labels_q, labels_g, mode="curve", **kwargs)
    fpr, tpr, _ = sk_roc_curve(genuine, s)
    np.testing.assert_array_equal(curve.fpr, fpr)
    np.testing.assert_array_equal(curve.tpr, tpr)
    assert_curve_equal((report.fpr, report.tpr, report.thresholds),
                       reduce_runs(*sk_roc_curve(genuine, s)))


def spread_scores(rng, spread, n_query=120, n_gallery=500):
    """Labels and scores that load the level index (roc_math.h) two ways:
    "similarity", N(0, 0.044) like cosine impostors, whose levels crowd a few
    binades of the key (ten or so to a bucket: bisection); "binades", magnitudes
    from 1e-30 to 1e30 of both signs (most buckets empty). Impostors sit on
    levels, one float32 step beside them, and on +-0."""
    labels_q = rng.integers(0, 40, n_query)
    labels_g = rng.integers(0, 40, n_gallery)
    if spread == "similarity":
        score = rng.normal(0.0, 0.044, (n_query, n_gallery))
    else:
        score = rng.choice([-1.0, 1.0], (n_query, n_gallery)) * 10.0 ** rng.uniform(
            -30, 30, (n_query, n_gallery))
    score = score.astype(np.float32)
    genuine = labels_q[:, None] == labels_g[None, :]
    levels = np.unique(score[genuine])
    impostors = np.flatnonzero(~genuine.ravel())
    picks = rng.choice(impostors, 900, replace=False)
    near = rng.choice(levels, 900)
    score.ravel()[picks[:300]] = near[:300]
    score.ravel()[picks[300:600]] = np.nextafter(near[300:600], np.float32(np.inf))
    score.ravel()[picks[600:890]] = np.nextafter(near[600:890], np.float32(-np.inf))
    score.ravel()[picks[890:895]] = 0.0
    score.ravel()[picks[895:]] = -0.0
    return labels_q, labels_g, score


@pytest.mark.parametrize("spread", ["similarity", "binades"])
def test_level_index_loads_equal_sklearn(rng, spread):
    labels_q, labels_g, score = spread_scores(rng, spread)
    y_true, y_score = pairs(labels_q, labels_g, score)
    report = roc.evaluate(labels_q, labels_g, score=score)
    assert len(report.counts["genuine_scores"]) > 1000
    check_report(report, y_true, y_score)
