"""The curve functions' points (roc.h's roc_eval_curve_size and
roc_eval_curve_points): equal to the summary's curve-mode points on tied
data, in both drop_intermediate settings; the entry points' own checks; on a
GPU, float64 tensors on the scores' device."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from _ext import roc
from _ext.roc import _evaluate
from _ext.roc._roc import ffi, lib
from test_roc_api import assert_curve_equal


@st.composite
def tied_pairs(draw):
    """(genuine, float32 scores) on a few values: runs of ties of every kind."""
    n = draw(st.integers(2, 80))
    genuine = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    genuine[:2] = (True, False)
    score = np.array(draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)), np.float32) / 4
    return genuine, score


@given(tied_pairs(), st.booleans())
def test_points_equal_the_summary_curve(case, drop_intermediate):
    genuine, score = case
    summary = roc.evaluate_pairs(genuine, score, mode="curve", fars=()) if drop_intermediate \
        else None
    got = roc.roc_curve_pairs(genuine, score, drop_intermediate=drop_intermediate)
    if summary is not None:
        assert_curve_equal(got, (summary.fpr, summary.tpr, summary.thresholds))
    labels_q, labels_g = np.zeros(1, np.int64), np.where(genuine, 0, 1 + np.arange(len(score)))
    assert_curve_equal(roc.roc_curve(labels_q, labels_g, score=score[None, :],
                                     drop_intermediate=drop_intermediate), got)


def counted(mode="curve"):
    genuine = np.array([True, False, True, False])
    score = np.array([0.9, 0.8, 0.4, 0.1], np.float32)
    options = _evaluate.Options("roc_curve_pairs", mode=mode, fars=(),
                                modes=("exact", "binned", "curve"))
    return _evaluate.pair_list("roc_curve_pairs", options, genuine, score, None, None, None,
                               None, None, None)[0]


def describe(array, name):
    return _evaluate._ffi.describe(ffi, "test", name, array)


def test_points_are_for_the_curve_mode():
    evaluation = counted("exact")
    n = ffi.new("int64_t *")
    with pytest.raises(ValueError, match="^roc_curve_pairs: curve points are for the curve mode"):
        evaluation.check(lib.roc_eval_curve_size(evaluation.handle, 0, n))


def test_points_come_after_their_size_and_fit_it():
    evaluation = counted()
    arrays = [np.empty(4, np.int32), np.empty(4, np.int64), np.empty(4, np.int64)]
    with pytest.raises(ValueError, match="^roc_curve_pairs: curve_points comes after curve_size"):
        evaluation.check(lib.roc_eval_curve_points(evaluation.handle, *(
            describe(a, n) for a, n in zip(arrays, ("keys", "fps", "tps")))))
    n = ffi.new("int64_t *")
    evaluation.check(lib.roc_eval_curve_size(evaluation.handle, 1, n))
    assert n[0] == 4
    wrong = [np.empty(4, np.int64), np.empty(4, np.int64), np.empty(4, np.int64)]
    with pytest.raises(TypeError, match="^roc_curve_pairs: keys"):
        evaluation.check(lib.roc_eval_curve_points(evaluation.handle, *(
            describe(a, n) for a, n in zip(wrong, ("keys", "fps", "tps")))))
    short = [np.empty(3, np.int32), np.empty(3, np.int64), np.empty(3, np.int64)]
    with pytest.raises(ValueError, match="^roc_curve_pairs: keys has 3 elements but the curve "
                                         "4 points"):
        evaluation.check(lib.roc_eval_curve_points(evaluation.handle, *(
            describe(a, n) for a, n in zip(short, ("keys", "fps", "tps")))))
    evaluation.check(lib.roc_eval_curve_points(evaluation.handle, *(
        describe(a, n) for a, n in zip(arrays, ("keys", "fps", "tps")))))
    assert arrays[1].tolist() == [0, 1, 1, 2] and arrays[2].tolist() == [1, 1, 2, 2]
    assert (_evaluate._key_scores(arrays[0]) == np.float32([0.9, 0.8, 0.4, 0.1])).all()


def test_one_class_is_an_error_before_any_point():
    genuine = np.array([True, True])
    with pytest.raises(ValueError, match="^roc_curve_pairs: there are no impostor pairs"):
        roc.roc_curve_pairs(genuine, np.array([0.5, 0.2], np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("drop_intermediate", [True, False])
def test_gpu_points_are_float64_tensors_there(rng, drop_intermediate):
    genuine = rng.random(5000) < 0.2
    score = (rng.integers(0, 300, 5000) / 64).astype(np.float32)
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    got = roc.roc_curve_pairs(torch.from_numpy(genuine).to(device),
                              torch.from_numpy(score).to(device),
                              drop_intermediate=drop_intermediate)
    for a in got:
        assert torch.is_tensor(a) and a.device == device and a.dtype == torch.float64
    assert_curve_equal(got, roc.roc_curve_pairs(genuine, score,
                                                drop_intermediate=drop_intermediate))
