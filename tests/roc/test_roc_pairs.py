"""Lists of pairs (evaluate_pairs, roc_curve_pairs), the pair conventions
(ordered same-set pairs), against scikit-learn; GPU against CPU on the GPU
machine. The nearest_sklearn rule: test_roc_far_rules.py; the accumulator's
batches of pairs: test_roc_accumulator.py; the GPU's sorted count:
test_roc_strategies_gpu.py."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from _ext import roc

RULES = ("max_tpr", "nearest", "first_above", "interpolate", "nearest_sklearn")


def flat_pairs(rng, n, kind="random", positive=0.1):
    genuine = rng.random(n) < positive
    score = rng.normal(0.0, 0.3, n) + 0.5 * genuine
    if kind == "ties":
        score = np.round(score, 2)
    elif kind == "special":  # NaN and infinities among the scores
        score[rng.integers(0, n, 5)] = np.nan
        score[rng.integers(0, n, 3)] = np.inf
        score[rng.integers(0, n, 3)] = -np.inf
    return genuine, score.astype(np.float32)


def insightface_tar(genuine, score, far):
    """InsightFace's IJB rule, as its script computes it with scikit-learn."""
    fpr, tpr, _ = sk_roc_curve(genuine, score)
    fpr, tpr = np.flipud(fpr), np.flipud(tpr)
    _, index = min(zip(np.abs(fpr - far), range(len(fpr))))
    return tpr[index]


# ---------------------------------------------------------------------------
# flat (genuine, score)

@pytest.mark.parametrize("kind", ["random", "ties", "special"])
def test_roc_curve_pairs_equals_sklearn(rng, kind):
    genuine, score = flat_pairs(rng, 4000, kind)
    fpr, tpr, thresholds = roc.roc_curve_pairs(genuine, score)
    kept = ~np.isnan(score)
    # scikit-learn refuses infinities: they rank like scores beyond every finite one
    stand_in = np.clip(score[kept].astype(np.float64), -1e30, 1e30)
    expected = sk_roc_curve(genuine[kept], stand_in)
    np.testing.assert_array_equal(fpr, expected[0])
    np.testing.assert_array_equal(tpr, expected[1])
    np.testing.assert_array_equal(np.clip(thresholds[1:], -1e30, 1e30), expected[2][1:])


@pytest.mark.parametrize("dtype", [np.bool_, np.int64, np.int32, np.uint8, np.int8])
def test_evaluate_pairs_auc_and_counts(rng, dtype):
    genuine, score = flat_pairs(rng, 3000, "ties")
    report = roc.evaluate_pairs(genuine.astype(dtype), score)
    assert report.n_genuine == genuine.sum() and report.n_impostor == (~genuine).sum()
    assert abs(report.auc - roc_auc_score(genuine, score)) < 1e-12
    assert report.pairs == "list"


@pytest.mark.parametrize("rule", RULES)
def test_evaluate_pairs_tar_rules_on_a_tie_free_curve(rng, rule):
    """Without impostor ties exact mode's corners are scikit-learn's whole curve,
    so every rule, nearest_sklearn included, gives scikit-learn's TAR."""
    genuine, score = flat_pairs(rng, 5000)
    fars = (1e-3, 0.01, 0.05, 0.2)
    report = roc.evaluate_pairs(genuine, score, fars=fars, far_rule=rule)
    curve = roc.evaluate_pairs(genuine, score, fars=fars, far_rule=rule, mode="curve")
    for got, want in zip(report.tar_at_far, curve.tar_at_far):
        assert got.tar == want.tar
    if rule == "nearest_sklearn":
        for row in curve.tar_at_far:
            assert row.tar == insightface_tar(genuine, score, row.far)


def test_listed_pairs_score_like_pair_scores(rng):
    feat = rng.normal(size=(60, 24)).astype(np.float32)
    other = rng.normal(size=(40, 24)).astype(np.float32)
    index_a, index_b = rng.integers(0, 60, 3000), rng.integers(0, 40, 3000)
    genuine = (index_a % 7) == (index_b % 7)
    for similarity in ("cosine", "dot"):
        scores = roc.pair_scores(feat, other, similarity=similarity)[index_a, index_b]
        listed = roc.evaluate_pairs(genuine, feat_a=feat, feat_b=other, index_a=index_a,
                                    index_b=index_b.astype(np.int64), similarity=similarity)
        flat = roc.evaluate_pairs(genuine, scores)
        np.testing.assert_array_equal(listed.fpr, flat.fpr)
        np.testing.assert_array_equal(listed.thresholds, flat.thresholds)
        assert listed.auc == flat.auc
    one_set = roc.evaluate_pairs(genuine, feat_a=feat, feat_b=feat, index_a=index_a,
                                 index_b=index_b)
    scores = roc.pair_scores(feat, feat)[index_a, index_b]
    assert one_set.auc == roc.evaluate_pairs(genuine, scores).auc


def test_binned_pairs_equal_numpy_histogram(rng):
    genuine, score = flat_pairs(rng, 5000)
    report = roc.evaluate_pairs(genuine, score, mode="binned", bins=64, range=(-1.0, 1.5))
    expected, _ = np.histogram(score[genuine], bins=64, range=(-1.0, 1.5))
    np.testing.assert_array_equal(report.counts["genuine"], expected)
    expected, _ = np.histogram(score[~genuine], bins=64, range=(-1.0, 1.5))
    np.testing.assert_array_equal(report.counts["impostor"], expected)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(genuine=np.array([0, 2, 1]), score=np.zeros(3, np.float32)), ValueError,
     r"evaluate_pairs: genuine takes values in \{0, 1, 2\} and pos_label is not given"),
    (dict(genuine=np.array([0, 1, 1]), score=np.zeros(4, np.float32)), ValueError,
     "evaluate_pairs: score has 4 elements but genuine has 3"),
    (dict(genuine=np.array([0, 1]), score=np.zeros(2, np.int32)), TypeError,
     "evaluate_pairs: score must be float64, float32, float16 or bfloat16"),
    (dict(genuine=np.array([0.0, 0.5]), score=np.zeros(2, np.float32)), ValueError,
     "evaluate_pairs: genuine holds 0.5, which is not an integer"),
    (dict(genuine=np.array([0, 1]), score=None), ValueError, "evaluate_pairs: give either score="),
    (dict(genuine=None, score=np.zeros(2, np.float32)), TypeError,
     "evaluate_pairs: genuine must be an array"),
    (dict(genuine=np.array([0, 1]), feat_a=np.zeros((3, 4), np.float32),
          feat_b=np.zeros((3, 4), np.float32), index_a=np.array([0, 3]),
          index_b=np.array([0, 1])), ValueError,
     r"evaluate_pairs: index_a\[1\] is not a row of feat_a \(3 rows\)"),
    (dict(genuine=np.array([0, 1]), feat_a=np.zeros((3, 4), np.float32),
          feat_b=np.zeros((3, 4), np.float32), index_a=np.array([0, 1]),
          index_b=np.array([-1, 1])), ValueError, r"index_b\[0\] is not a row of feat_b"),
    (dict(genuine=np.array([0, 1]), feat_a=np.zeros((3, 4), np.float32),
          feat_b=np.zeros((3, 5), np.float32), index_a=np.array([0, 1]),
          index_b=np.array([0, 1])), ValueError, "the feature dimensions differ"),
])
def test_pairs_errors(kwargs, error, message):
    genuine = kwargs.pop("genuine")
    with pytest.raises(error, match=message):
        roc.evaluate_pairs(genuine, **kwargs)


def test_pairs_need_both_kinds():
    with pytest.raises(ValueError, match="evaluate_pairs: there are no impostor pairs"):
        roc.evaluate_pairs(np.ones(4, np.bool_), np.zeros(4, np.float32))


# ---------------------------------------------------------------------------
# one set, ordered pairs (IFRT's convention)

def test_ordered_same_set_counts_each_pair_twice(rng):
    labels = rng.integers(0, 6, 90)
    feat = rng.normal(size=(90, 12)).astype(np.float32)
    once = roc.evaluate(labels, None, feat_q=feat, same_set=True)
    twice = roc.evaluate(labels, None, feat_q=feat, same_set="ordered")
    assert twice.n_genuine == 2 * once.n_genuine and twice.n_impostor == 2 * once.n_impostor
    assert twice.auc == once.auc and twice.pairs == "ordered"
    np.testing.assert_array_equal(twice.false_accepts, 2 * once.false_accepts)


def test_ordered_same_set_reads_both_triangles(rng):
    """A score matrix need not be symmetric: ordered pairs are every (i, j != i)."""
    labels = rng.integers(0, 5, 40)
    score = rng.normal(size=(40, 40)).astype(np.float32)
    report = roc.evaluate(labels, None, score=score, same_set="ordered", mode="curve")
    off = ~np.eye(40, dtype=bool)
    genuine = (labels[:, None] == labels[None, :])[off]
    fpr, tpr, _ = sk_roc_curve(genuine, score[off])
    np.testing.assert_array_equal(report.fpr, fpr)
    np.testing.assert_array_equal(report.tpr, tpr)


# ---------------------------------------------------------------------------
# GPU against CPU (GPU machine)

@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["exact", "binned", "curve"])
def test_gpu_pairs_equal_cpu(rng, mode):
    genuine, score = flat_pairs(rng, 200_000, "special")
    cpu = roc.evaluate_pairs(genuine, score, mode=mode)
    gpu = roc.evaluate_pairs(torch.from_numpy(genuine).cuda(), torch.from_numpy(score).cuda(),
                             mode=mode, chunk=30_000)
    np.testing.assert_array_equal(gpu.false_accepts, cpu.false_accepts)
    np.testing.assert_array_equal(gpu.true_accepts, cpu.true_accepts)
    np.testing.assert_array_equal(gpu.thresholds, cpu.thresholds)
    assert gpu.n_nan == cpu.n_nan and gpu.auc == cpu.auc


@pytest.mark.gpu
@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_gpu_listed_pairs_equal_cpu(rng, similarity):
    feat = rng.normal(size=(300, 70)).astype(np.float32)
    index_a, index_b = rng.integers(0, 300, 50_000), rng.integers(0, 300, 50_000)
    genuine = (index_a % 11 == index_b % 11).astype(np.int32)
    cpu = roc.evaluate_pairs(genuine, feat_a=feat, feat_b=feat, index_a=index_a,
                             index_b=index_b, similarity=similarity)
    cuda = {k: torch.from_numpy(v).cuda() for k, v in
            dict(genuine=genuine, feat=feat, a=index_a, b=index_b).items()}
    gpu = roc.evaluate_pairs(cuda["genuine"], feat_a=cuda["feat"], feat_b=cuda["feat"],
                             index_a=cuda["a"], index_b=cuda["b"], similarity=similarity)
    np.testing.assert_array_equal(gpu.false_accepts, cpu.false_accepts)
    np.testing.assert_array_equal(gpu.thresholds, cpu.thresholds)


@pytest.mark.gpu
@pytest.mark.parametrize("source", ["score", "features"])
def test_gpu_ordered_same_set_equals_cpu(rng, source):
    labels = rng.integers(0, 9, 300)
    feat = rng.normal(size=(300, 20)).astype(np.float32)
    kwargs = dict(score=roc.pair_scores(feat, feat)) if source == "score" else dict(feat_q=feat)
    cpu = roc.evaluate(labels, None, same_set="ordered", **kwargs)
    gpu = roc.evaluate(torch.from_numpy(labels).cuda(), None, same_set="ordered",
                       **{k: torch.from_numpy(v).cuda() for k, v in kwargs.items()})
    np.testing.assert_array_equal(gpu.false_accepts, cpu.false_accepts)
    np.testing.assert_array_equal(gpu.true_accepts, cpu.true_accepts)


def test_json_summary_stays_small_whatever_the_curve(rng):
    """to_dict() (the CLI's --json) holds no per-point arrays: a report of
    800,000 curve points still writes a few kilobytes, in milliseconds."""
    import json
    import time
    genuine = rng.random(2_000_000) < 0.5
    score = rng.normal(size=2_000_000).astype(np.float32) + genuine
    report = roc.evaluate_pairs(genuine, score)
    assert len(report.fpr) > 500_000
    start = time.perf_counter()
    text = json.dumps(report.to_dict(), allow_nan=False)
    assert len(text) < 10_000 and time.perf_counter() - start < 1.0
