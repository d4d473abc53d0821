"""verification_accuracy(): the k-fold protocol of InsightFace's
verification.py against its formulas written out loop for loop (in
insightface_verification.py), the exact variant against a brute force over
scikit-learn's ROC points, and the errors of its inputs."""

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from insightface_verification import (insightface_accuracy_at, insightface_evaluate,
                                      insightface_folds, scipy18_slinear)
from scipy.interpolate import interp1d
from sklearn.metrics import roc_curve as sk_roc_curve

from _ext import roc
from _ext.roc._verification import _slinear


def protocol_pairs(rng, folds=10, per_fold=30, dim=32, spread=0.9):
    """An LFW-like protocol: each fold `per_fold` genuine pairs then as many
    impostor pairs, of L2-normalized float64 embeddings (as verification.py's
    sklearn.preprocessing.normalize leaves them); InsightFace's distance."""
    centres = rng.normal(size=(folds * per_fold * 3, dim))
    issame = np.tile(np.r_[np.ones(per_fold, bool), np.zeros(per_fold, bool)], folds)
    a = rng.integers(0, centres.shape[0], issame.size)
    b = np.where(issame, a, (a + rng.integers(1, centres.shape[0], issame.size))
                 % centres.shape[0])
    e1 = centres[a] + spread * rng.normal(size=(issame.size, dim))
    e2 = centres[b] + spread * rng.normal(size=(issame.size, dim))
    e1 /= np.sqrt(np.einsum("ij,ij->i", e1, e1))[:, None]
    e2 /= np.sqrt(np.einsum("ij,ij->i", e2, e2))[:, None]
    dist = np.sum(np.square(np.subtract(e1, e2)), 1)
    return issame, dist, np.einsum("ij,ij->i", e1, e2)


def assert_as_insightface(result, expected):
    for name, value in expected.items():
        ours = getattr(result, name)
        if np.ndim(value):
            np.testing.assert_array_equal(ours, value, err_msg=name)
        else:
            assert ours == value, (name, ours, value)


# ---------------------------------------------------------------------------
# the grid: InsightFace digit for digit

@pytest.mark.parametrize("folds, per_fold", [(10, 30), (10, 50), (7, 23), (1, 40)])
def test_grid_equals_insightface(rng, folds, per_fold):
    issame, dist, _ = protocol_pairs(rng, folds, per_fold)
    result = roc.verification_accuracy(issame, distance=dist, folds=folds)
    assert_as_insightface(result, insightface_evaluate(dist, issame, folds))
    assert result.accept == "distance < t" and result.method == "grid"


def test_uneven_folds_as_kfold(rng):
    """N not a multiple of the folds: KFold's first N % folds folds are longer."""
    issame, dist, _ = protocol_pairs(rng, 10, 30)
    issame, dist = issame[:593], dist[:593]
    result = roc.verification_accuracy(issame, distance=dist, folds=10)
    assert_as_insightface(result, insightface_evaluate(dist, issame, 10))


def test_grid_ties_on_grid_points(rng):
    """Distances on the grid itself (and between its points) test the strict
    `dist < t`, the first-best threshold and the interpolation's repeats."""
    issame, _, _ = protocol_pairs(rng, 10, 30)
    dist = np.round(rng.uniform(0.3, 1.9, issame.size) - 0.4 * issame, 2)
    dist[::7] = np.arange(0, 4, 0.01)[np.rint(dist[::7] * 100).astype(int)]
    for far_target in (1e-3, 0.05, 0.2):
        result = roc.verification_accuracy(issame, distance=dist, far=far_target)
        assert_as_insightface(result, insightface_evaluate(dist, issame, 10, far_target))


def test_score_is_the_distance_two_minus_two_cosine(rng):
    issame, dist, cosine = protocol_pairs(rng, 10, 30)
    by_score = roc.verification_accuracy(issame, cosine)
    by_distance = roc.verification_accuracy(issame, distance=2.0 - 2.0 * cosine)
    assert by_score.to_dict() == by_distance.to_dict()
    assert_as_insightface(by_score, insightface_evaluate(2.0 - 2.0 * cosine, issame))
    # against InsightFace's own |a - b|^2, which differs from 2 - 2 cos by rounding
    assert abs(by_score.accuracy - insightface_evaluate(dist, issame)["accuracy"]) <= 1 / 600


@pytest.mark.parametrize("far_target", [0.0, 1e-3, 0.02, 0.5, 1.0])
def test_val_far_targets(rng, far_target):
    issame, dist, _ = protocol_pairs(rng, 10, 40, spread=1.2)
    result = roc.verification_accuracy(issame, distance=dist, far=far_target)
    assert_as_insightface(result, insightface_evaluate(dist, issame, 10, far_target))


def test_val_below_the_grid_when_far_never_reaches(rng):
    """A target above every training FAR on the grid: InsightFace's threshold 0."""
    issame, dist, _ = protocol_pairs(rng, 10, 30)
    dist = np.where(issame, dist, 4.5)    # impostors beyond the grid: FAR stays 0
    result = roc.verification_accuracy(issame, distance=dist, far=0.01)
    np.testing.assert_array_equal(result.fold_val_threshold, 0.0)
    assert_as_insightface(result, insightface_evaluate(dist, issame, 10, 0.01))


def test_slinear_as_scipy_before_1_9(rng):
    """_slinear against SciPy's B-spline with repeated knots (what interp1d
    built up to 1.8), and against today's interp1d where x has no repeats."""
    for _ in range(1000):
        m = int(rng.integers(2, 12))
        x = np.sort(rng.integers(0, 6, m) / rng.integers(1, 7)).astype(np.float64)
        y = np.sort(rng.random(m))
        targets = np.r_[x, rng.uniform(x[0], x[-1], 3)]
        old = scipy18_slinear(x, y)
        for t in targets:
            assert _slinear(x, y, t) == old(t), (x, y, t)
        if np.unique(x).size == m:
            new = interp1d(x, y, kind="slinear")
            for t in targets:
                assert _slinear(x, y, t) == new(t), (x, y, t)
    with pytest.raises(ValueError, match="outside the FARs"):
        _slinear(np.array([0.1, 0.2]), np.array([0.0, 1.0]), 0.05)


@given(st.data())
def test_grid_property(data):
    """Small protocols with coarse distances (many ties, some on grid points)."""
    folds = data.draw(st.integers(2, 5))
    per_fold = data.draw(st.integers(1, 6))
    cells = data.draw(st.lists(st.integers(0, 399), min_size=2 * folds * per_fold,
                               max_size=2 * folds * per_fold))
    issame = np.tile(np.r_[np.ones(per_fold, bool), np.zeros(per_fold, bool)], folds)
    dist = np.array(cells) / 100.0
    far_target = data.draw(st.sampled_from([1e-3, 0.1, 0.5]))
    result = roc.verification_accuracy(issame, distance=dist, folds=folds, far=far_target)
    assert_as_insightface(result, insightface_evaluate(dist, issame, folds, far_target))


# ---------------------------------------------------------------------------
# the exact variant

def brute_force_exact(score, genuine, folds, far_target):
    """Every training ROC point (scikit-learn's thresholds, drop_intermediate=
    False) as a candidate: the best (tp + tn), the first (highest threshold)
    of equals; VAL at the last point with FPR <= far_target."""
    accuracy, best, val, far = [], [], [], []
    for train, test in insightface_folds(len(genuine), folds):
        fpr, tpr, thresholds = sk_roc_curve(genuine[train], score[train],
                                            drop_intermediate=False)
        p, n = genuine[train].sum(), (~genuine[train]).sum()
        right = np.rint(tpr * p).astype(int) + n - np.rint(fpr * n).astype(int)
        t = thresholds[np.argmax(right)]
        best.append(t)
        accuracy.append(np.mean((score[test] >= t) == genuine[test]))
        t = thresholds[np.flatnonzero(fpr <= far_target)[-1]]
        accepted = score[test] >= t
        val.append(accepted[genuine[test]].mean())
        far.append(accepted[~genuine[test]].mean())
    return np.array(accuracy), np.array(best), np.array(val), np.array(far)


@pytest.mark.parametrize("ties", [False, True])
def test_exact_against_brute_force(rng, ties):
    issame, _, cosine = protocol_pairs(rng, 10, 30, spread=1.1)
    if ties:
        cosine = np.round(cosine, 2)
    result = roc.verification_accuracy(issame, cosine, method="exact", far=0.05)
    accuracy, best, val, far = brute_force_exact(cosine, issame, 10, 0.05)
    np.testing.assert_array_equal(result.fold_accuracy, accuracy)
    np.testing.assert_array_equal(result.fold_threshold, best)
    np.testing.assert_array_equal(result.fold_val, val)
    np.testing.assert_array_equal(result.fold_far, far)
    assert result.accept == "score >= t"


def test_exact_reaches_at_least_the_grid_on_training_folds(rng):
    """Every grid threshold splits the training pairs as some distinct score
    does, so the exact variant's training accuracy is never lower."""
    issame, dist, _ = protocol_pairs(rng, 10, 30, spread=1.1)
    for train, _ in insightface_folds(issame.size, 10):
        grid = insightface_accuracy_at(np.arange(0, 4, 0.01), dist[train], issame[train]).max()
        result = roc.verification_accuracy(issame[train], distance=dist[train], folds=1,
                                           method="exact", far=None)
        assert result.accuracy >= grid


def test_exact_distance_form_mirrors_scores(rng):
    issame, _, cosine = protocol_pairs(rng, 10, 30, spread=1.1)
    by_score = roc.verification_accuracy(issame, cosine, method="exact")
    by_distance = roc.verification_accuracy(issame, distance=-cosine, method="exact")
    np.testing.assert_array_equal(by_distance.fold_accuracy, by_score.fold_accuracy)
    np.testing.assert_array_equal(by_distance.fold_threshold, -by_score.fold_threshold)
    assert by_distance.accept == "distance <= t"


def test_exact_threshold_inf_accepts_nothing():
    """Scores that rank impostors above genuine pairs: accepting nothing is best."""
    genuine = np.array([1, 0, 1, 0, 0, 0] * 2, bool)
    score = np.where(genuine, 0.1, 0.9)
    result = roc.verification_accuracy(genuine, score, folds=2, method="exact", far=None)
    np.testing.assert_array_equal(result.fold_threshold, np.inf)
    assert result.accuracy == 4 / 6


# ---------------------------------------------------------------------------
# inputs, result

def test_inputs_of_any_framework_and_dtype(rng):
    issame, _, cosine = protocol_pairs(rng, 10, 20)
    expected = roc.verification_accuracy(issame, cosine).to_dict()
    assert roc.verification_accuracy(torch.from_numpy(issame), torch.from_numpy(cosine)
                                     ).to_dict() == expected
    assert roc.verification_accuracy(issame.astype(np.int64).tolist(), cosine.tolist()
                                     ).to_dict() == expected
    assert roc.verification_accuracy(issame.astype(np.float32), cosine).to_dict() == expected
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        half = torch.from_numpy(cosine).to(dtype)
        widened = half.double().numpy()
        assert roc.verification_accuracy(issame, half).to_dict() == \
            roc.verification_accuracy(issame, widened).to_dict()


def test_result_to_dict_is_json(rng):
    issame, _, cosine = protocol_pairs(rng, 10, 20)
    for far in (1e-3, None):
        out = roc.verification_accuracy(issame, cosine, far=far).to_dict()
        assert json.loads(json.dumps(out, allow_nan=False)) == out
        assert len(out["fold_accuracy"]) == 10
        assert (out["val"] is None) == (far is None)
    text = repr(roc.verification_accuracy(issame, cosine))
    assert text.startswith("VerificationResult(accuracy=") and "val=" in text


@pytest.mark.parametrize("call, error, message", [
    (lambda g, s: roc.verification_accuracy(g, s[:-1]), ValueError, "score must be \\(N,\\)"),
    (lambda g, s: roc.verification_accuracy(g[:, None], s), ValueError, "genuine must be 1-D"),
    (lambda g, s: roc.verification_accuracy(g * 2, s), ValueError, "1 \\(genuine\\) or 0"),
    (lambda g, s: roc.verification_accuracy(g, np.where(g, np.nan, s)), ValueError, "NaN"),
    (lambda g, s: roc.verification_accuracy(g), ValueError, "either score="),
    (lambda g, s: roc.verification_accuracy(g, s, distance=s), ValueError, "either score="),
    (lambda g, s: roc.verification_accuracy(g, s, folds=0), ValueError, "folds"),
    (lambda g, s: roc.verification_accuracy(g, s, folds=2.5), TypeError, "folds"),
    (lambda g, s: roc.verification_accuracy(g, s, folds=10 ** 6), ValueError, "only 400"),
    (lambda g, s: roc.verification_accuracy(g, s, method="best"), ValueError, "method"),
    (lambda g, s: roc.verification_accuracy(g, s, far=2), ValueError, "far must lie"),
    (lambda g, s: roc.verification_accuracy(g, s, far="x"), TypeError, "far must be"),
    (lambda g, s: roc.verification_accuracy("g", s), TypeError, "genuine must be an array"),
    (lambda g, s: roc.verification_accuracy(g, s.astype(str)), TypeError, "real numbers"),
    (lambda g, s: roc.verification_accuracy(np.sort(g), s), ValueError,
     "fold 0's test pairs are all impostors"),
])
def test_errors_name_the_argument(rng, call, error, message):
    issame, _, cosine = protocol_pairs(rng, 10, 20)
    with pytest.raises(error, match="verification_accuracy: .*" + message):
        call(issame, cosine)


@given(st.lists(st.one_of(st.integers(-2, 3), st.floats(allow_nan=True), st.booleans()),
                min_size=1, max_size=12),
       st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=12),
       st.integers(-1, 13), st.sampled_from(["grid", "exact"]))
def test_inputs_accepted_or_refused_by_name(genuine, score, folds, method):
    """Whatever the values: a result, or a TypeError / ValueError whose message
    starts with the function's name (no other exception, no NaN result)."""
    try:
        result = roc.verification_accuracy(np.array(genuine), np.array(score), folds=folds,
                                           method=method, far=None)
    except (TypeError, ValueError) as error:
        assert str(error).startswith("verification_accuracy: "), error
        return
    assert 0.0 <= result.accuracy <= 1.0 and len(result.fold_accuracy) == folds


def test_sorted_pairs_without_val(rng):
    """Pairs sorted by kind leave folds of one kind: accuracy still works."""
    issame, _, cosine = protocol_pairs(rng, 10, 20)
    order = np.argsort(~issame, kind="stable")
    result = roc.verification_accuracy(issame[order], cosine[order], far=None)
    assert_as_insightface(result, insightface_evaluate(2.0 - 2.0 * cosine[order],
                                                       issame[order], far_target=None))
    assert result.val is None and result.fold_val is None
