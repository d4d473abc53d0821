"""The far rule InsightFace's IJB tables use (nearest_sklearn: the point of
scikit-learn's drop_intermediate curve nearest the target) in every mode and
entry point, and the curve functions' drop_intermediate, against scikit-learn's
roc_curve; GPU against scikit-learn on the GPU machine.

Exact mode knows the curve's corners but not how the impostor scores between
two genuine scores tie, which decides the inner points scikit-learn keeps there
(src/roc_summary.c): the CPU pass keeps the lowest scores of every gap, and a
row they cannot decide is decided by a pass that probes the scores it needs.
The tests force each way (lists short or absent, probes one key wide) with
`knobs`."""

import contextlib

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import roc_curve as sk_roc_curve

from _ext import roc
from _ext.roc import _evaluate
from test_roc_api import host_curve

# (CPU lists kept a gap, keys a probing pass counts): the defaults, no lists
# (every undecided row probed), lists of one or two keys then probes, probes of
# one key (a pass a key)
KNOBS = [(_evaluate.LOW_KEYS, _evaluate.PROBE_KEYS), (0, _evaluate.PROBE_KEYS), (1, 3), (2, 1),
         (0, 1)]


@contextlib.contextmanager
def knobs(low_keys, probe_keys):
    saved = _evaluate.LOW_KEYS, _evaluate.PROBE_KEYS
    _evaluate.LOW_KEYS, _evaluate.PROBE_KEYS = low_keys, probe_keys
    try:
        yield
    finally:
        _evaluate.LOW_KEYS, _evaluate.PROBE_KEYS = saved


def insightface_tars(genuine, score, fars):
    """InsightFace's IJB rule as its script computes it: scikit-learn's curve
    flipped, at each target the first minimum of (|fpr - far|, index)."""
    fpr, tpr, _ = sk_roc_curve(genuine, score)
    fpr, tpr = np.flipud(fpr), np.flipud(tpr)
    return [tpr[min(zip(np.abs(fpr - far), range(len(fpr))))[1]] for far in fars]


def targets(genuine, score, extra=()):
    """FAR targets where the rule is hard: every FPR of scikit-learn's curves,
    the points just beside them and the midpoints between them (the places
    where two points are equally near), plus `extra`."""
    fpr = sk_roc_curve(genuine, score, drop_intermediate=False)[0]
    mid = (fpr[1:] + fpr[:-1]) / 2
    fars = np.concatenate([fpr, np.nextafter(fpr, 2.0), np.nextafter(fpr, -1.0), mid,
                           np.asarray(extra, np.float64)])
    return tuple(np.unique(np.clip(fars, 0.0, 1.0)))


def runs_with_ties(rng, n_genuine, n_runs, positive_values=4):
    """Genuine scores on a few values, and between them runs of impostor scores
    whose pairs per score vary (1, 2 or 3) or repeat: the inner points
    scikit-learn keeps or drops."""
    levels = np.sort(rng.choice(np.arange(0, 200, 10), n_runs, replace=False))
    genuine_scores = rng.choice(levels[-positive_values:], n_genuine) + 5
    impostors = []
    for level in levels:
        values = level + np.sort(rng.choice(np.arange(1, 10), rng.integers(1, 6), replace=False))
        impostors += [v for v in values for _ in range(rng.choice([1, 1, 2, 3]))]
    score = np.concatenate([genuine_scores, impostors]).astype(np.float32) / 100
    genuine = np.r_[np.ones(n_genuine, bool), np.zeros(len(impostors), bool)]
    order = rng.permutation(len(score))
    return genuine[order], score[order]


def one_row(genuine, score):
    """The pairs as evaluate() sees them: one query against every entry, the
    genuine entries sharing its label."""
    labels_g = np.where(genuine, 0, np.arange(1, len(genuine) + 1))
    return np.zeros(1, np.int64), labels_g.astype(np.int64), score[None, :]


def accumulated(genuine, score, fars, **kwargs):
    accumulator = roc.RocAccumulator(fars=fars, far_rule="nearest_sklearn", **kwargs)
    half = len(score) // 2
    accumulator.update(genuine[:half], score[:half])
    accumulator.update(genuine[half:], score[half:])
    return accumulator.compute()


def entry_points(genuine, score, fars, device="cpu"):
    """The report of every entry point that takes nearest_sklearn, on these pairs."""
    labels_q, labels_g, matrix = one_row(genuine, score)
    if device != "cpu":
        genuine, score = torch.as_tensor(genuine, device=device), torch.as_tensor(score,
                                                                                   device=device)
        labels_q, labels_g, matrix = (torch.as_tensor(x, device=device)
                                      for x in (labels_q, labels_g, matrix))
    options = dict(fars=fars, far_rule="nearest_sklearn")
    return {"evaluate_pairs": roc.evaluate_pairs(genuine, score, **options),
            "evaluate": roc.evaluate(labels_q, labels_g, score=matrix, **options),
            "accumulator": accumulated(genuine, score, fars),
            "curve mode": roc.evaluate_pairs(genuine, score, mode="curve", **options)}


def check_rows(genuine, score, fars, device="cpu"):
    """Every entry point's rows: InsightFace's TAR, and the row (threshold,
    false accepts) that curve mode, which holds scikit-learn's whole curve,
    gives."""
    genuine, score = np.asarray(genuine), np.asarray(score, np.float32)
    expected = insightface_tars(genuine, score, fars)
    reports = entry_points(genuine, score, fars, device)
    curve_rows = reports["curve mode"].tar_at_far
    for name, report in reports.items():
        assert [row.tar for row in report.tar_at_far] == expected, name
        assert report.tar_at_far == curve_rows, name
    return reports


# ---------------------------------------------------------------------------
# nearest_sklearn against scikit-learn and InsightFace's script

def test_an_inner_point_nearer_than_every_corner():
    """Three genuine pairs and ten impostors; between the genuine scores 1.0 and
    0.2 lie impostors 0.9, 0.8 (x3), 0.7, 0.6, 0.5, where scikit-learn keeps the
    points at 0.8 and 0.7 (their pairs differ from the next lower score's).
    At FAR 0.5 its nearest point is (0.4, 2/3), at 0.8; exact mode's corners
    alone would give (0.7, 1.0)."""
    genuine = np.array([1, 1, 1] + [0] * 10, bool)
    score = np.array([1.0, 1.0, 0.2, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.5, 0.1, 0.1, 0.1],
                     np.float32)
    fars = (0.5, 0.55, 0.05)
    for low_keys, probe_keys in KNOBS:
        with knobs(low_keys, probe_keys):
            reports = check_rows(genuine, score, fars)
        exact = reports["evaluate_pairs"]
        assert exact.tar_at_far[0].tar == pytest.approx(2 / 3)
        assert exact.mode == "exact" and len(exact.fpr) == 5  # still exact mode's corners
        # the lists (three keys, or more) decide it in the pass; without them
        # the probes do, a pass or more
        assert (exact.passes == 1) == (low_keys >= 3)
        said = "%d passes over the pairs: where exact mode's corners cannot decide " \
               "nearest_sklearn's rows, further passes" % exact.passes
        assert (said in exact.table()) == (exact.passes > 1)


@pytest.mark.parametrize("setting", KNOBS)
def test_runs_of_tied_impostors(setting):
    rng = np.random.default_rng(sum(setting))
    with knobs(*setting):
        for _ in range(6):
            genuine, score = runs_with_ties(rng, int(rng.integers(1, 8)), int(rng.integers(2, 7)))
            check_rows(genuine, score, targets(genuine, score))


@given(st.data())
def test_nearest_sklearn_fuzzed(data):
    """Tiny lists of pairs on a few score values: one genuine pair or many,
    every score tied or none, targets anywhere on and between the curve's
    points; every entry point, with the lists and the probes each way."""
    n = data.draw(st.integers(2, 40), label="pairs")
    n_values = data.draw(st.integers(1, 8), label="distinct scores")
    values = data.draw(st.lists(st.integers(0, n_values - 1), min_size=n, max_size=n))
    genuine = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    if genuine.all() or not genuine.any():
        genuine[data.draw(st.integers(0, n - 1))] ^= True
    score = (np.asarray(values) / 4 - 0.5).astype(np.float32)
    extra = data.draw(st.lists(st.floats(0.0, 1.0), max_size=3))
    fars = targets(genuine, score, extra)
    with knobs(*data.draw(st.sampled_from(KNOBS), label="knobs")):
        check_rows(genuine, score, fars)


def test_infinite_scores_rank_as_extremes(rng):
    """scikit-learn refuses infinite scores; they rank beyond every finite one,
    so the rows equal those of stand-ins just beyond the finite scores."""
    for setting in KNOBS[:2]:
        genuine, score = runs_with_ties(rng, 6, 6)
        score[rng.choice(np.flatnonzero(~genuine), 6, replace=False)] = np.inf
        score[rng.choice(np.flatnonzero(~genuine), 6, replace=False)] = -np.inf
        stand_in = np.clip(score, -10, 10)
        fars = targets(genuine, stand_in)
        with knobs(*setting):
            got = roc.evaluate_pairs(genuine, score, fars=fars, far_rule="nearest_sklearn")
        assert [row.tar for row in got.tar_at_far] == insightface_tars(genuine, stand_in, fars)


def test_one_class_is_refused_by_name():
    """scikit-learn warns and returns NaN rates for one class; the ROC is
    undefined, so every entry point refuses it, naming itself."""
    for genuine in (np.ones(5, bool), np.zeros(5, bool)):
        score = np.linspace(0, 1, 5).astype(np.float32)
        labels_q, labels_g, matrix = one_row(genuine, score)
        with pytest.raises(ValueError, match="^evaluate_pairs: .*undefined"):
            roc.evaluate_pairs(genuine, score, far_rule="nearest_sklearn")
        with pytest.raises(ValueError, match="^evaluate: .*undefined"):
            roc.evaluate(labels_q, labels_g, score=matrix, far_rule="nearest_sklearn")
        with pytest.raises(ValueError, match="^RocAccumulator: .*undefined"):
            accumulated(genuine, score, (0.1,))


def test_the_cpu_lists_decide_without_another_pass(rng):
    """Scores rounded to 1e-3 (ties everywhere): the lists of the CPU pass
    decide every row in the one pass, as the probes do in more."""
    genuine = rng.random(30000) < 0.05
    score = np.round(rng.normal(0.0, 0.25, genuine.size) + 0.6 * genuine, 3).astype(np.float32)
    fars = tuple(np.geomspace(1e-4, 0.5, 40))
    report = roc.evaluate_pairs(genuine, score, fars=fars, far_rule="nearest_sklearn")
    assert report.passes == 1
    with knobs(0, _evaluate.PROBE_KEYS):
        probed = roc.evaluate_pairs(genuine, score, fars=fars, far_rule="nearest_sklearn")
    assert probed.passes > 1  # some rows were left to the probes
    assert [row.tar for row in report.tar_at_far] == insightface_tars(genuine, score, fars)
    assert probed.tar_at_far == report.tar_at_far


def test_from_features_and_same_set(rng):
    """Scores computed from features, every pair of one set once, against the
    flattened upper triangle of pair_scores."""
    labels = rng.integers(0, 12, 90)
    feat = (rng.normal(size=(12, 8))[labels] + rng.normal(size=(90, 8))).astype(np.float32)
    upper = np.triu_indices(90, 1)
    genuine = (labels[:, None] == labels[None, :])[upper]
    score = roc.pair_scores(feat, feat)[upper]
    fars = targets(genuine, score)[::7]
    for setting in KNOBS[:2]:
        with knobs(*setting):
            report = roc.evaluate(labels, None, feat_q=feat, same_set=True, fars=fars,
                                  far_rule="nearest_sklearn")
        assert [row.tar for row in report.tar_at_far] == insightface_tars(genuine, score, fars)


def test_the_default_rule_is_untouched_by_the_lists(rng):
    """The lists are kept for nearest_sklearn alone: every other field of the
    report is the default rule's."""
    genuine, score = runs_with_ties(rng, 6, 6)
    fars = targets(genuine, score)
    plain = roc.evaluate_pairs(genuine, score, fars=fars)
    nearest = roc.evaluate_pairs(genuine, score, fars=fars, far_rule="nearest_sklearn")
    for name in ("fpr", "tpr", "thresholds", "false_accepts", "true_accepts"):
        np.testing.assert_array_equal(getattr(plain, name), getattr(nearest, name))
    assert (plain.auc, plain.eer, plain.eer_threshold) == (nearest.auc, nearest.eer,
                                                            nearest.eer_threshold)


# ---------------------------------------------------------------------------
# every pass shows progress

def test_progress_covers_every_pass():
    genuine = np.array([1, 1, 1] + [0] * 10, bool)
    score = np.array([1.0, 1.0, 0.2, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.5, 0.1, 0.1, 0.1],
                     np.float32)
    calls = []
    with knobs(0, 1):
        report = roc.evaluate_pairs(genuine, score, fars=(0.5,), far_rule="nearest_sklearn",
                                    chunk=4, progress=lambda done, total: calls.append((done,
                                                                                       total)))
    n = len(score)
    assert report.passes >= 3  # a pass for each key up to 0.8's, whose pairs decide it
    # each pass reports its steps, on a total that counts every pass so far
    for k in range(1, report.passes + 1):
        steps = [done for done, total in calls if total == k * n]
        assert steps == [(k - 1) * n + d for d in (4, 8, 12, 13)]
    assert calls[-1] == (report.passes * n, report.passes * n)


# ---------------------------------------------------------------------------
# drop_intermediate

def check_curve(genuine, score, drop_intermediate):
    expected = sk_roc_curve(genuine, score, drop_intermediate=drop_intermediate)
    labels_q, labels_g, matrix = one_row(genuine, score)
    got = {"roc_curve_pairs": roc.roc_curve_pairs(genuine, score,
                                                  drop_intermediate=drop_intermediate),
           "roc_curve": roc.roc_curve(labels_q, labels_g, score=matrix,
                                      drop_intermediate=drop_intermediate)}
    for name, curve in got.items():
        assert curve[2][0] == np.inf, name
        for ours, theirs in zip(curve, expected):
            assert ours.dtype == np.float64, name
            np.testing.assert_array_equal(ours, theirs, err_msg=name)


@given(st.data())
def test_drop_intermediate_fuzzed(data):
    n = data.draw(st.integers(2, 60), label="pairs")
    n_values = data.draw(st.integers(1, 12), label="distinct scores")
    values = data.draw(st.lists(st.integers(0, n_values - 1), min_size=n, max_size=n))
    genuine = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    if genuine.all() or not genuine.any():
        genuine[0] ^= True
    score = (np.asarray(values) * 0.37 - 1).astype(np.float32)
    check_curve(genuine, score, data.draw(st.booleans(), label="drop_intermediate"))


@pytest.mark.parametrize("drop_intermediate", [True, False])
def test_drop_intermediate_on_runs_and_distinct_scores(rng, drop_intermediate):
    genuine, score = runs_with_ties(rng, 9, 8)
    check_curve(genuine, score, drop_intermediate)
    genuine = rng.random(3000) < 0.2
    check_curve(genuine, rng.normal(size=3000).astype(np.float32) + genuine, drop_intermediate)


def test_drop_intermediate_false_keeps_every_distinct_score(rng):
    genuine = rng.random(500) < 0.3
    score = np.round(rng.normal(size=500), 1).astype(np.float32)
    fpr, tpr, thresholds = roc.roc_curve_pairs(genuine, score, drop_intermediate=False)
    np.testing.assert_array_equal(thresholds[1:], np.unique(score)[::-1])
    assert len(roc.roc_curve_pairs(genuine, score)[0]) < len(fpr)


def test_drop_intermediate_must_be_a_bool():
    genuine, score = np.array([True, False]), np.array([0.5, 0.1], np.float32)
    with pytest.raises(TypeError, match="^roc_curve_pairs: drop_intermediate must be True or "
                                        "False, got 'no'"):
        roc.roc_curve_pairs(genuine, score, drop_intermediate="no")
    with pytest.raises(TypeError, match="^roc_curve: drop_intermediate must be True or False"):
        roc.roc_curve(np.zeros(1), np.zeros(2), score=score[None, :], drop_intermediate=None)


# ---------------------------------------------------------------------------
# the C calls behind them, misused

def counted_exact(genuine, score, far_rule="nearest_sklearn"):
    options = _evaluate.Options("evaluate_pairs", far_rule=far_rule, fars=(0.5,))
    counted = _evaluate.pair_list("evaluate_pairs", options, genuine, score, None, None, None,
                                  None, None, None)
    counted[0].counts()  # completes them
    return counted[0]


def test_set_gap_keys_refuses_what_does_not_continue_the_gap():
    genuine = np.array([1, 1, 1] + [0] * 10, bool)
    score = np.array([1.0, 1.0, 0.2, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.5, 0.1, 0.1, 0.1],
                     np.float32)
    with knobs(0, 1):
        evaluation = counted_exact(genuine, score)
    counts = evaluation.counts()
    low = int(counts["gap_min"][1])  # gap 1: between the genuine scores 0.2 and 1.0
    end = int(evaluation.levels()[0][1])
    bad = [(7, low, low, [low], [1], "is not a gap with pairs"),
           (1, low + 1, low + 1, [], [], "do not continue it"),
           (1, low, end, [low], [1], "do not continue it"),
           (1, low, low + 5, [low + 6], [1], "within"),
           (1, low, low + 5, [low, low], [1, 1], "ascending"),
           (1, low, low + 5, [low], [0], "each with a pair")]
    for gap, first, through, keys, pairs, message in bad:
        with pytest.raises(ValueError, match="^evaluate_pairs: set_gap_keys.*" + message):
            evaluation.set_gap_keys(gap, first, through, keys, pairs)
    lib, ffi = _evaluate.lib, _evaluate.ffi
    with pytest.raises(ValueError, match="^evaluate_pairs: set_gap_keys needs n >= 0 keys"):
        evaluation.check(lib.roc_eval_set_gap_keys(evaluation.handle, 1, low, low + 5, ffi.NULL,
                                                   ffi.NULL, 2))
    # a probe that contradicts the counts (one pair where the pass saw one at 0.5)
    evaluation.set_gap_keys(1, low, end - 1, [low], [1])
    with pytest.raises(ValueError, match="^evaluate_pairs: the scores known of gap 1 disagree"):
        evaluation.summarize((0.5,), "nearest_sklearn")


def test_the_c_calls_refuse_other_modes_and_negative_lists():
    genuine, score = np.array([True, False, False]), np.array([0.5, 0.1, 0.2], np.float32)
    options = _evaluate.Options("roc_curve", mode="curve", fars=(), modes=("curve",))
    curve = _evaluate.pair_list("roc_curve", options, genuine, score, None, None, None, None,
                                None, None)[0]
    with pytest.raises(ValueError, match="^roc_curve: set_gap_keys is for the exact mode"):
        curve.set_gap_keys(0, 0, 0, [], [])
    config = _evaluate._config("evaluate_pairs", "exact", low_keys=-1)
    with pytest.raises(ValueError, match="^evaluate_pairs: low_keys must be >= 0, got -1"):
        _evaluate._ffi.check(_evaluate.ffi, _evaluate.lib, _evaluate.lib.roc_eval_create_counts(
            _evaluate.ffi.new("roc_eval **"), config))


def test_every_point_is_a_curve_mode_summary_without_targets():
    """The summary of every point (drop_intermediate=False) takes no FAR
    targets (the rules are defined on scikit-learn's points) and needs the
    curve mode's counts of every distinct score."""
    genuine, score = np.array([True, False]), np.array([0.5, 0.1], np.float32)
    options = _evaluate.Options("roc_curve", mode="curve", fars=(), modes=("curve",))
    curve = _evaluate.pair_list("roc_curve", options, genuine, score, None, None, None, None,
                                None, None)[0]
    with pytest.raises(ValueError, match="^roc_curve: a curve of every point takes no FAR"):
        curve.summarize((0.1,), "max_tpr", every_point=True)
    assert curve.summarize((), "max_tpr", every_point=True).n_points == 3
    for mode in ("exact", "binned"):
        options = _evaluate.Options("evaluate_pairs", mode=mode, fars=())
        evaluation = _evaluate.pair_list("evaluate_pairs", options, genuine, score, None, None,
                                         None, None, None, None)[0]
        with pytest.raises(ValueError, match="^evaluate_pairs: every_point is for the curve"):
            evaluation.summarize((), "max_tpr", every_point=True)


# ---------------------------------------------------------------------------
# the GPU (its pass keeps no lists: the probing passes decide)

@pytest.mark.gpu
@pytest.mark.parametrize("setting", KNOBS[:2] + KNOBS[-1:])
def test_nearest_sklearn_gpu(setting):
    rng = np.random.default_rng(5)
    with knobs(*setting):
        for _ in range(4):
            genuine, score = runs_with_ties(rng, int(rng.integers(1, 8)), int(rng.integers(2, 7)))
            reports = check_rows(genuine, score, targets(genuine, score), device="cuda")
            assert reports["evaluate_pairs"].device_bytes_peak > 0  # it ran on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("drop_intermediate", [True, False])
def test_drop_intermediate_gpu(rng, drop_intermediate):
    genuine, score = runs_with_ties(rng, 9, 8)
    expected = sk_roc_curve(genuine, score, drop_intermediate=drop_intermediate)
    labels_q, labels_g, matrix = one_row(genuine, score)
    device = torch.device("cuda")
    curves = [roc.roc_curve_pairs(torch.as_tensor(genuine, device=device),
                                  torch.as_tensor(score, device=device),
                                  drop_intermediate=drop_intermediate),
              roc.roc_curve(torch.as_tensor(labels_q, device=device),
                            torch.as_tensor(labels_g, device=device),
                            score=torch.as_tensor(matrix, device=device),
                            drop_intermediate=drop_intermediate)]
    for curve in curves:
        for ours, theirs in zip(host_curve(curve), expected):
            np.testing.assert_array_equal(ours, theirs)
