"""The evaluator's bad-input sweep findings, each as its reproducer: every bad
input is a named error (TypeError / ValueError / RuntimeError whose message
starts with the function), and what is accepted is counted exactly."""

import numpy as np
import pytest
import torch

from _ext import roc

EYE = np.eye(2, dtype=np.float32)


def test_labels_of_two_kinds():
    """A torch tensor and a NumPy array as labels (the README allows either)."""
    for labels_q, labels_g in ((torch.tensor([0, 1]), np.array([0, 1])),
                               (np.array([0, 1]), torch.tensor([0, 1])),
                               (np.array([0, 1], np.int32), np.array([0.0, 1.0]))):
        report = roc.evaluate(labels_q, labels_g, score=EYE)
        assert (report.n_genuine, report.n_impostor, report.auc) == (2, 2, 1.0)
        fpr, tpr, _ = roc.roc_curve(labels_q, labels_g, score=EYE)
        assert tpr[-1] == 1.0


@pytest.mark.parametrize("dtype_q, dtype_g", [(np.int64, np.int64), (np.int64, np.uint64),
                                              (np.uint64, np.uint64)])
def test_integer_labels_beyond_2_53_stay_apart(dtype_q, dtype_g):
    labels = np.array([2 ** 60, 2 ** 60 + 1, 2 ** 60 + 2])
    report = roc.evaluate(labels.astype(dtype_q), labels.astype(dtype_g),
                          score=np.eye(3, dtype=np.float32))
    assert (report.n_genuine, report.n_impostor) == (3, 6)


def test_uint64_beyond_int64_against_negative_int64():
    labels_q = np.array([2 ** 64 - 1, 5], np.uint64)
    labels_g = np.array([-1, 5], np.int64)
    report = roc.evaluate(labels_q, labels_g, score=EYE)
    assert report.n_genuine == 1  # only 5 == 5; 2^64 - 1 is not -1


def test_fractional_float_labels_against_huge_integers_are_refused():
    with pytest.raises(ValueError, match="evaluate: labels_q is int64 and labels_g is float64"):
        roc.evaluate(np.array([2 ** 60, 1]), np.array([0.5, 1.0]), score=EYE)
    report = roc.evaluate(np.array([2 ** 60, 1]), np.array([float(2 ** 60), 1.0]), score=EYE)
    assert report.n_genuine == 2


@pytest.mark.parametrize("bin_range", [(-1e308, 1e308), (0.0, 1e-45), (0.0, 1e-300)])
def test_ranges_numpy_refuses(bin_range):
    x = np.zeros(1, np.float32)
    with pytest.raises(ValueError):
        np.histogram(x, bins=1024, range=bin_range)
    with pytest.raises(ValueError, match=r"evaluate: range .* cannot be cut into 1024 float32 "
                                         r"bins"):
        roc.evaluate(np.array([0, 1]), np.array([0, 1]), score=EYE, mode="binned",
                     range=bin_range)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(bins=2.5, mode="binned"), TypeError, "evaluate: bins must be an integer"),
    (dict(bins="8", mode="binned"), TypeError, "evaluate: bins must be an integer"),
    (dict(bins=True, mode="binned"), TypeError, "evaluate: bins must be an integer"),
    (dict(bins=2 ** 40, mode="binned"), ValueError, r"evaluate: bins must lie in \[1, 2\^30\]"),
    (dict(chunk=-3), ValueError, "evaluate: chunk must be a positive integer"),
    (dict(chunk=1.5), TypeError, "evaluate: chunk must be an integer"),
    (dict(fars="1e-3"), TypeError, "evaluate: fars must be a number or a sequence"),
    (dict(fars=[0.1, None]), TypeError, "evaluate: fars must be a number or a sequence"),
    (dict(fars=float("nan")), ValueError, r"evaluate: fars must lie in \[0, 1\]"),
    (dict(range=(0, 1, 2), mode="binned"), TypeError, r"evaluate: range must be two numbers"),
    (dict(range=None, mode="binned"), TypeError, r"evaluate: range must be two numbers"),
    (dict(range=(0.0, float("inf")), mode="binned"), ValueError,
     "evaluate: range must be finite with lo < hi"),
    (dict(progress=3), TypeError, "evaluate: progress must be callable"),
    (dict(same_set="yes"), ValueError, "evaluate: same_set must be False, True, 'unordered'"),
    (dict(similarity=None), ValueError, "evaluate: similarity must be one of"),
    (dict(device="meta"), ValueError, "evaluate: device must be 'cpu', 'cuda' or 'cuda:N', got 'meta'"),
    (dict(device="gpu0"), ValueError, "evaluate: device must be 'cpu', 'cuda' or 'cuda:N'"),
    (dict(device=7), ValueError, "evaluate: device must be"),
])
def test_bad_options_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        roc.evaluate(np.array([0, 1]), np.array([0, 1]), score=EYE, **kwargs)


def test_scalar_far_is_one_target():
    report = roc.evaluate(np.array([0, 1]), np.array([0, 1]), score=EYE, fars=0.5)
    assert [row.far for row in report.tar_at_far] == [0.5]


@pytest.mark.parametrize("score", [[[1.0, 0.0], [0.0, 1.0]], None, 3.0, "scores"])
def test_score_that_is_not_an_array(score):
    with pytest.raises((TypeError, ValueError), match="^evaluate: "):
        roc.evaluate(np.array([0, 1]), np.array([0, 1]), score=score)


@pytest.mark.parametrize("feat_q, feat_g", [([[1.0]], np.ones((1, 1), np.float32)),
                                            (None, np.ones((1, 1), np.float32)),
                                            (np.ones((1, 1), np.float32), "x")])
def test_pair_scores_refuses_what_is_not_an_array(feat_q, feat_g):
    with pytest.raises(TypeError, match="^pair_scores: feat_[qg] must be an array"):
        roc.pair_scores(feat_q, feat_g)


def test_labels_that_are_not_arrays():
    with pytest.raises(TypeError, match="^evaluate: labels_q must be an array"):
        roc.evaluate(None, np.array([0, 1]), score=EYE)
    with pytest.raises(TypeError, match="^evaluate: labels_g must hold integers or floats"):
        roc.evaluate(np.array([0, 1]), np.array([1 + 1j, 0]), score=EYE)


def test_meta_tensors_are_refused():
    with pytest.raises((RuntimeError, ValueError), match="^evaluate: "):
        roc.evaluate(np.array([0, 1]), np.array([0, 1]),
                     score=torch.empty(2, 2, device="meta"))


def test_an_evaluation_that_failed_half_way_is_not_reused(rng):
    """A failed step leaves the evaluator refusing further steps (its counts are
    incomplete), instead of summarizing half of them."""
    from _ext.roc import _evaluate
    options = _evaluate.Options("evaluate")
    labels = rng.integers(0, 3, 20)
    score = rng.normal(size=(20, 20)).astype(np.float32)
    evaluation = _evaluate.all_pairs("evaluate", options, labels, labels, score, None, None,
                                     False, None, None)[0]
    with pytest.raises(ValueError, match=r"evaluate: rows \[5, 30\) are outside \[0, 20\)"):
        evaluation.add_rows(5, 30)
    roc.lib.ext_test_fail_allocations(0, 1)
    try:
        with pytest.raises(MemoryError, match="^evaluate: cannot allocate"):
            evaluation.add_rows(0, 20)
    finally:
        roc.lib.ext_test_fail_allocations(0, 0)
    with pytest.raises(ValueError, match="evaluate: this evaluation failed in an earlier step"):
        evaluation.summarize((0.1,), "max_tpr")


@pytest.mark.parametrize("host_failures", [1, 2, 3, 5, 8, 13])
def test_host_allocation_failures_are_memory_errors(rng, host_failures):
    """The n-th host allocation of an evaluation fails: MemoryError naming the
    function, then the next call works (CPU backend)."""
    labels_q, labels_g = rng.integers(0, 4, 30), rng.integers(0, 4, 40)
    feat_q = rng.normal(size=(30, 8)).astype(np.float32)
    feat_g = rng.normal(size=(40, 8)).astype(np.float32)
    for mode in ("exact", "binned", "curve"):
        roc.lib.ext_test_fail_allocations(0, host_failures)
        try:
            roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode)
        except MemoryError as error:
            assert str(error).startswith("evaluate: ")
        finally:
            roc.lib.ext_test_fail_allocations(0, 0)
        report = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode)
        assert report.n_genuine + report.n_impostor == 30 * 40


@pytest.mark.parametrize("entry", ["set_keys", "set_levels"])
def test_counts_set_from_elsewhere_need_arrays_and_a_count(entry):
    """roc_eval_set_keys and roc_eval_set_levels (what a group's reduction
    calls) refuse a negative count and NULL arrays before reading them."""
    from _ext.roc import _evaluate
    evaluation = _evaluate.counts_only("evaluate", "curve" if entry == "set_keys" else "exact")
    keys = roc.ffi.new("uint32_t[]", [1, 2])
    counts = roc.ffi.new("uint64_t[]", [3, 4])
    call = (roc.lib.roc_eval_set_keys if entry == "set_keys" else
            lambda *args: roc.lib.roc_eval_set_levels(*args, 0))
    for args in ((roc.ffi.NULL, roc.ffi.NULL, 2), (keys, roc.ffi.NULL, 2),
                 (roc.ffi.NULL, counts, 2), (keys, counts, -1)):
        with pytest.raises(ValueError, match=r"^evaluate: %s needs n_\w+ >= 0 keys and counts"
                                             % entry):
            evaluation.check(call(evaluation.handle, *args))
    evaluation.check(call(evaluation.handle, roc.ffi.NULL, roc.ffi.NULL, 0))
    evaluation.check(call(evaluation.handle, keys, counts, 2))
