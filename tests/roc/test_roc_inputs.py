"""The evaluator's inputs: what the entry points take (labels of bool,
integers or floats holding integers; half-precision scores, widened exactly;
y_true and pos_label as scikit-learn's roc_curve takes them) and the
bad-input sweeps' findings, each as its reproducer: every bad input is a
named error (TypeError / ValueError / RuntimeError / MemoryError whose
message starts with the function and names the argument), and what is
accepted is counted exactly."""

import numpy as np
import pytest
import torch

from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

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


def test_float_labels_hold_integers_matched_exactly_against_integers():
    """Floats holding integers equal the integers they hold, beyond 2^53 too,
    whatever the two dtypes (codes made on the host); floats that are not
    integers are refused, on either side."""
    report = roc.evaluate(np.array([2 ** 60, 1]), np.array([float(2 ** 60), 1.0]), score=EYE)
    assert report.n_genuine == 2
    report = roc.evaluate(np.array([2 ** 60 + 1, 2 ** 64 - 1, 7], np.uint64),
                          np.array([float(2 ** 60), float(2 ** 64), 7.0]),
                          score=np.eye(3, dtype=np.float32))
    assert report.n_genuine == 1  # 2^60 + 1 is not 2^60; 2^64 - 1 is not 2^64
    report = roc.evaluate(np.array([-2 ** 63, 3], np.int64), np.array([-2.0 ** 63, 3.0], np.float32),
                          score=EYE)
    assert report.n_genuine == 2


@pytest.mark.parametrize("bad, shown", [(0.5, "0.5"), (np.inf, "inf"), (-np.inf, "-inf"),
                                        (1e-300, "1e-300")])
@pytest.mark.parametrize("side", ["labels_q", "labels_g"])
def test_float_labels_that_are_not_integers_are_refused(bad, shown, side):
    labels = {"labels_q": np.array([0.0, 1.0]), "labels_g": np.array([0, 1])}
    labels[side] = np.array([1.0, bad])
    with pytest.raises(ValueError, match=r"^evaluate: %s holds %s, which is not an integer"
                                         % (side, shown)):
        roc.evaluate(labels["labels_q"], labels["labels_g"], score=EYE)


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
    with pytest.raises(TypeError, match="^evaluate: labels_g must hold bool, integers, or floats "
                                        "holding integers, got complex128"):
        roc.evaluate(np.array([0, 1]), np.array([1 + 1j, 0]), score=EYE)
    with pytest.raises(TypeError, match="^evaluate: labels_q must be a flat sequence of labels"):
        roc.evaluate([[0], [1, 2]], np.array([0, 1]), score=EYE)


def test_labels_as_lists():
    report = roc.evaluate([0, 1], (0.0, 1.0), score=EYE)
    assert (report.n_genuine, report.n_impostor) == (2, 2)
    # NumPy makes [2^63 + 1, 2^63, 7] float64, where 2^63 + 1 is 2^63
    report = roc.evaluate([2 ** 63 + 1, 2 ** 63, 7], [2 ** 63, 7, 2 ** 63 + 2],
                          score=np.eye(3, dtype=np.float32))
    assert report.n_genuine == 2
    with pytest.raises(ValueError, match="^evaluate: labels_q holds integers that neither int64 "
                                         "nor uint64 holds all of"):
        roc.evaluate([-1, 2 ** 64 - 1], [0, 1], score=EYE)


# ---------------------------------------------------------------------------
# errors that named no function (issue 48, items 8 to 11)

def test_bfloat16_labels_against_integer_labels():
    """torch's bfloat16 (which NumPy lacks) against integers: matched as the
    integers it holds, or refused as a fraction, naming the function."""
    labels_q = torch.tensor([0.0, 1.0, 256.0], dtype=torch.bfloat16)
    score = np.eye(3, dtype=np.float32)
    got = roc.evaluate(labels_q, torch.tensor([0, 1, 257]), score=score)
    want = roc.evaluate(np.array([0, 1, 256]), np.array([0, 1, 257]), score=score)
    assert (got.n_genuine, got.n_impostor, got.auc) == (want.n_genuine, want.n_impostor, want.auc)
    with pytest.raises(ValueError, match="^evaluate: labels_q holds 0.5, which is not an integer"):
        roc.evaluate(torch.tensor([0.5, 1.0], dtype=torch.bfloat16), np.array([0, 1]), score=EYE)
    genuine = torch.tensor([1.0, 0.0], dtype=torch.bfloat16)
    assert roc.evaluate_pairs(genuine, np.array([0.5, 0.1], np.float32)).auc == 1.0


META = torch.empty(2, device="meta")


@pytest.mark.parametrize("call, name", [
    (lambda: roc.evaluate(META, np.array([0, 1]), score=EYE), "evaluate: labels_q"),
    (lambda: roc.evaluate(np.array([0, 1]), META.long(), score=EYE), "evaluate: labels_g"),
    (lambda: roc.evaluate(np.array([0, 1]), np.array([0, 1]),
                          score=torch.empty(2, 2, device="meta")), "evaluate: score"),
    (lambda: roc.roc_curve(np.array([0, 1]), META, score=torch.eye(2)), "roc_curve: labels_g"),
    (lambda: roc.evaluate(np.array([0, 1]), np.array([0, 1]), feat_q=torch.ones(2, 3),
                          feat_g=torch.empty(2, 3, device="meta")), "evaluate: feat_g"),
    (lambda: roc.evaluate_pairs(META.bool(), np.zeros(2, np.float32)), "evaluate_pairs: genuine"),
    (lambda: roc.evaluate_pairs(np.array([0, 1]), META), "evaluate_pairs: score"),
    (lambda: roc.roc_curve_pairs(torch.tensor([0, 1]), META), "roc_curve_pairs: score"),
    (lambda: roc.RocAccumulator().update(torch.tensor([0, 1]), META),
     "RocAccumulator.update: score"),
    (lambda: roc.RocAccumulator().update(META, torch.zeros(2)), "RocAccumulator.update: genuine"),
    (lambda: roc.RocAccumulator(META, torch.zeros(2, 3)), "RocAccumulator: labels_g"),
    (lambda: roc.pair_scores(torch.ones(2, 3), torch.empty(2, 3, device="meta")),
     "pair_scores: feat_g"),
])
def test_a_meta_tensor_beside_cpu_ones(call, name):
    with pytest.raises(RuntimeError, match="^%s is on meta; _ext takes CPU and CUDA arrays$"
                                           % name):
        call()


class DLPackOnly:
    """A producer with only the DLPack protocol (as JAX's or CuPy's arrays
    look to the evaluator), around a NumPy array; shape as it reports it."""

    def __init__(self, array, device=(1, 0)):
        self.array, self.device, self.shape = array, device, array.shape

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **keywords):
        return self.array.__dlpack__(**keywords)


SWAPPED = DLPackOnly(np.array([0, 1], dtype=np.dtype(np.int64).newbyteorder()))


@pytest.mark.parametrize("call, name", [
    (lambda: roc.evaluate(SWAPPED, np.array([0, 1]), score=EYE), "evaluate: labels_q"),
    (lambda: roc.roc_curve(np.array([0, 1]), SWAPPED, score=EYE), "roc_curve: labels_g"),
    (lambda: roc.evaluate_pairs(SWAPPED, np.zeros(2, np.float32)), "evaluate_pairs: genuine"),
    (lambda: roc.evaluate_pairs(np.array([0, 1]), DLPackOnly(np.zeros(2, ">f4"))),
     "evaluate_pairs: score"),
    (lambda: roc.RocAccumulator().update(SWAPPED, np.zeros(2, np.float32)),
     "RocAccumulator.update: genuine"),
    (lambda: roc.RocAccumulator(np.array([0, 1]), np.eye(2, dtype=np.float32)).update(
        SWAPPED, np.eye(2, dtype=np.float32)), "RocAccumulator.update: labels_q"),
])
def test_byte_swapped_labels_from_a_dlpack_producer(call, name):
    with pytest.raises(TypeError, match="^%s cannot be exported through DLPack: .*byte order"
                                        % name):
        call()


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_pair_scores_output_that_cannot_be_allocated(kind):
    """An output of 2^20 x 2^40 floats (a broadcast gallery costs nothing):
    MemoryError naming pair_scores, whichever allocator refused it."""
    feat_q = np.zeros((1 << 20, 1), np.float32)
    feat_g = np.broadcast_to(np.zeros((1, 1), np.float32), (1 << 40, 1))
    if kind == "torch":
        feat_q, feat_g = torch.from_numpy(feat_q), torch.zeros(1, 1).expand(1 << 40, 1)
    with pytest.raises(MemoryError, match=r"^pair_scores: cannot allocate score \(1048576, "
                                          r"1099511627776\) on cpu \("):
        roc.pair_scores(feat_q, feat_g)


def test_pair_scores_output_on_a_device_that_is_not_there():
    """A producer's features on a CUDA device torch cannot allocate on (no
    CUDA, or an invalid device ordinal): a RuntimeError naming pair_scores."""
    features = DLPackOnly(np.zeros((2, 3), np.float32), device=(2, 99))
    with pytest.raises(RuntimeError, match=r"^pair_scores: cannot allocate score \(2, 2\) on "
                                           r"cuda:99 \("):
        roc.pair_scores(features, features)


@pytest.mark.gpu
def test_pair_scores_output_beyond_device_memory():
    """2^17 x 2^30 scores (512 TiB; a broadcast gallery costs nothing): a
    MemoryError naming pair_scores, not torch's OutOfMemoryError."""
    feat_q = torch.ones(1 << 17, 1, device="cuda")
    feat_g = torch.ones(1, 1, device="cuda").expand(1 << 30, 1)
    with pytest.raises(MemoryError, match=r"^pair_scores: cannot allocate score \(131072, "
                                          r"1073741824\) on cuda:0 \("):
        roc.pair_scores(feat_q, feat_g)
    assert torch.equal(roc.pair_scores(feat_q[:2], feat_g[:3].contiguous()),
                       torch.ones(2, 3, device="cuda"))


@pytest.mark.gpu
def test_pair_scores_output_on_an_invalid_device_ordinal():
    """Features a producer places on a CUDA device that is not there: the
    allocator's invalid device ordinal as a RuntimeError naming pair_scores."""
    features = DLPackOnly(np.zeros((2, 3), np.float32), device=(2, torch.cuda.device_count()))
    with pytest.raises(RuntimeError, match=r"^pair_scores: cannot allocate score \(2, 2\) on "
                                           r"cuda:%d \(" % torch.cuda.device_count()):
        roc.pair_scores(features, features)


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


# ---------------------------------------------------------------------------
# score dtypes: half precision widened exactly (float64: test_roc_float64.py)

HALF = [("numpy", "float16"), ("torch", "float16"), ("torch", "bfloat16")]


def half_scores(rng, shape, kind, dtype):
    """(half scores as `kind`, the float32 values they hold): ties, NaN and
    infinities among them."""
    values = np.round(rng.normal(0.0, 0.4, shape), 2)
    flat = values.reshape(-1)
    flat[:3] = (np.nan, np.inf, -np.inf)
    if kind == "numpy":
        half = values.astype(np.float16)
        return half, half.astype(np.float32)
    half = torch.from_numpy(values).to(getattr(torch, dtype))
    return half, half.float().numpy()


@pytest.mark.parametrize("kind, dtype", HALF)
@pytest.mark.parametrize("mode", ["exact", "binned", "curve"])
def test_half_precision_scores_count_as_their_float32_values(rng, kind, dtype, mode):
    labels_q, labels_g = rng.integers(0, 5, 30), rng.integers(0, 5, 40)
    score, wide = half_scores(rng, (30, 40), kind, dtype)
    got = roc.evaluate(labels_q, labels_g, score=score, mode=mode)
    want = roc.evaluate(labels_q, labels_g, score=wide, mode=mode)
    assert (got.n_genuine, got.n_impostor, got.n_nan, got.auc) == \
        (want.n_genuine, want.n_impostor, want.n_nan, want.auc)
    np.testing.assert_array_equal(got.false_accepts, want.false_accepts)
    np.testing.assert_array_equal(got.true_accepts, want.true_accepts)
    genuine = (labels_q[:, None] == labels_g[None, :]).reshape(-1)
    got = roc.evaluate_pairs(genuine, score.reshape(-1), mode=mode)
    want = roc.evaluate_pairs(genuine, wide.reshape(-1), mode=mode)
    np.testing.assert_array_equal(got.false_accepts, want.false_accepts)
    assert (got.n_nan, got.auc) == (want.n_nan, want.auc)


@pytest.mark.parametrize("kind, dtype", HALF)
def test_half_precision_curves_equal_sklearn_on_their_values(rng, kind, dtype):
    labels_q, labels_g = rng.integers(0, 4, 20), rng.integers(0, 4, 25)
    score, wide = half_scores(rng, (20, 25), kind, dtype)
    genuine = (labels_q[:, None] == labels_g[None, :]).reshape(-1)
    keep = ~np.isnan(wide.reshape(-1))
    # scikit-learn refuses infinities: they rank as scores beyond every finite one
    expected = sk_roc_curve(genuine[keep], np.clip(wide.reshape(-1)[keep].astype(np.float64),
                                                   -1e30, 1e30))
    for fpr, tpr, thresholds in (roc.roc_curve(labels_q, labels_g, score=score),
                                 roc.roc_curve_pairs(genuine, score.reshape(-1))):
        np.testing.assert_array_equal(fpr, expected[0])
        np.testing.assert_array_equal(tpr, expected[1])
        np.testing.assert_array_equal(np.clip(thresholds[1:], -1e30, 1e30), expected[2][1:])


def test_half_precision_scores_of_any_layout():
    """A half score matrix is widened into a contiguous copy: its layout does
    not matter (float32 scores must be contiguous: they are read in place)."""
    labels = np.array([0, 1, 2])
    score = np.arange(9, dtype=np.float16).reshape(3, 3)
    want = roc.evaluate(labels, labels, score=np.ascontiguousarray(score.T, np.float32))
    got = roc.evaluate(labels, labels, score=score.T)
    assert (got.auc, got.n_genuine) == (want.auc, want.n_genuine)
    with pytest.raises(ValueError, match="^evaluate: score must be contiguous"):
        roc.evaluate(labels, labels, score=score.T.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.complex64])
def test_scores_of_other_dtypes_are_refused(dtype):
    with pytest.raises(TypeError, match="^evaluate_pairs: score must be float64, float32, "
                                        "float16 or bfloat16 .*, got %s" % np.dtype(dtype).name):
        roc.evaluate_pairs([0, 1], np.array([0, 1]).astype(dtype))


def test_legacy_entry_points_keep_float32_scores():
    histo = np.zeros(8, np.int64)
    with pytest.raises(TypeError, match="^cpu_roc: score must be float32, got float16"):
        roc.cpu_roc(np.zeros((2, 2), np.float16), histo, histo.copy(), np.arange(2),
                    np.arange(2))


# ---------------------------------------------------------------------------
# y_true of a list of pairs and pos_label, as scikit-learn's roc_curve

Y_TRUE = {
    "bool": np.array([True, False, True, False, False, True]),
    "0/1 int8": np.array([1, 0, 1, 0, 0, 1], np.int8),
    "0/1 int16": np.array([1, 0, 1, 0, 0, 1], np.int16),
    "0/1 float": np.array([1.0, 0.0, 1.0, 0.0, -0.0, 1.0]),
    "-1/1": np.array([1, -1, 1, -1, -1, 1]),
    "-1/1 float32": np.array([1, -1, 1, -1, -1, 1], np.float32),
    "2/3": np.array([3, 2, 3, 2, 2, 3]),
    "multiclass": np.array([1, 0, 2, 0, 1, 2]),
    "-1/0/1": np.array([1, -1, 1, 0, -1, 1]),
    "uint64 above 2^63": np.array([2 ** 63 + 1, 2 ** 63, 2 ** 63 + 1, 2 ** 63, 2 ** 63, 1],
                                  np.uint64),
}


@pytest.mark.parametrize("pos_label", [None, 1, 3, 2, 0, -1, True, 1.0, 2 ** 63 + 1])
@pytest.mark.parametrize("y", list(Y_TRUE))
def test_y_true_and_pos_label_as_sklearn(y, pos_label):
    """The same curve as scikit-learn's roc_curve(y_true, score, pos_label=),
    y_true given as NumPy, torch or a list, or an error where scikit-learn
    raises one (naming the function); a pos_label absent from y_true is a
    curve without genuine pairs, which both leave undefined (scikit-learn
    warns and returns NaN, we raise)."""
    import warnings
    y_true = Y_TRUE[y]
    score = np.array([0.9, 0.1, 0.7, 0.4, 0.3, 0.8], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            expected = sk_roc_curve(y_true, score, pos_label=pos_label)
        except (ValueError, Warning, OverflowError) as refusal:  # bool == 2^63 + 1 overflows
            expected = refusal
    as_torch = (torch.from_numpy(y_true) if y_true.dtype != np.uint64 else
                torch.from_numpy(y_true.view(np.int64)).view(torch.uint64))
    for given in (y_true, as_torch, y_true.tolist()):
        if isinstance(expected, Exception):
            with pytest.raises(ValueError, match="^roc_curve_pairs: genuine takes values in|"
                                                 "^roc_curve_pairs: there are no genuine pairs"):
                roc.roc_curve_pairs(given, score, pos_label=pos_label)
            continue
        fpr, tpr, thresholds = roc.roc_curve_pairs(given, score, pos_label=pos_label)
        np.testing.assert_array_equal(fpr, expected[0])
        np.testing.assert_array_equal(tpr, expected[1])
        np.testing.assert_array_equal(thresholds, expected[2])
        report = roc.evaluate_pairs(given, score, pos_label=pos_label)
        positive = y_true == (1 if pos_label is None else pos_label)
        assert report.auc == roc_auc_score(positive, score)


def test_default_pos_label_error_names_the_values():
    with pytest.raises(ValueError, match=r"^evaluate_pairs: genuine takes values in \{-1, 0, 1\} "
                                         r"and pos_label is not given: give genuine as bool, or "
                                         r"with values in \{0, 1\} or \{-1, 1\}, or pass "
                                         r"pos_label"):
        roc.evaluate_pairs(np.array([-1, 0, 1]), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"takes values in \{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, \.\.\.\}"):
        roc.evaluate_pairs(np.arange(100), np.zeros(100, np.float32))


def test_pos_label_is_compared_exactly():
    """A pos_label the dtype of y_true cannot hold marks no pair: NumPy would
    round 2^24 + 1 to the float32 2^24 and compare equal (scikit-learn does)."""
    y_true = np.array([2 ** 24, 1, 2 ** 24], np.float32)
    score = np.array([0.2, 0.5, 0.9], np.float32)
    with pytest.raises(ValueError, match="^evaluate_pairs: there are no genuine pairs"):
        roc.evaluate_pairs(y_true, score, pos_label=2 ** 24 + 1)
    assert roc.evaluate_pairs(y_true, score, pos_label=2 ** 24).n_genuine == 2
    with pytest.raises(ValueError, match="^evaluate_pairs: there are no genuine pairs"):
        roc.evaluate_pairs(np.array([1, 0], np.int8), np.zeros(2, np.float32), pos_label=257)


@pytest.mark.parametrize("pos_label, error, message", [
    (0.5, ValueError, "pos_label must be an integer"),
    (float("nan"), ValueError, "pos_label must be an integer"),
    ("1", TypeError, "pos_label must be a number"),
    ([1], TypeError, "pos_label must be a number"),
])
def test_bad_pos_label(pos_label, error, message):
    with pytest.raises(error, match="^evaluate_pairs: " + message):
        roc.evaluate_pairs(np.array([0, 1]), np.zeros(2, np.float32), pos_label=pos_label)


@pytest.mark.parametrize("y_true, shown", [(np.array([0.0, 0.5]), "0.5"),
                                           (np.array([1.0, np.nan]), None),
                                           (np.array([1.0, np.inf]), "inf")])
def test_y_true_that_is_not_integers_is_refused(y_true, shown):
    message = ("holds %s, which is not an integer" % shown if shown else
               "contains NaN; a NaN label matches nothing")
    with pytest.raises(ValueError, match="^evaluate_pairs: genuine " + message):
        roc.evaluate_pairs(y_true, np.zeros(2, np.float32))


# ---------------------------------------------------------------------------
# GPU against CPU (GPU machine): the conversions above, made on the device

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_inputs_converted_on_the_device_equal_cpu(rng, dtype):
    """CUDA half scores widened on the device, CUDA float labels checked and
    compared there, CUDA y_true in {-1, 1} and with pos_label: the CPU's
    reports."""
    labels_q = rng.integers(0, 6, 200).astype(np.float32)
    labels_g = rng.integers(0, 6, 300).astype(np.float32)
    half = torch.from_numpy(rng.normal(size=(200, 300))).to(getattr(torch, dtype))
    half[0, :7] = float("nan")
    cpu = roc.evaluate(labels_q, labels_g, score=half.float().numpy())
    gpu = roc.evaluate(torch.from_numpy(labels_q).cuda(), torch.from_numpy(labels_g).cuda(),
                       score=half.cuda())
    np.testing.assert_array_equal(gpu.false_accepts, cpu.false_accepts)
    assert (gpu.n_nan, gpu.auc) == (cpu.n_nan, cpu.auc)
    with pytest.raises(ValueError, match="^evaluate: labels_q holds 0.5, which is not an integer"):
        roc.evaluate(torch.full((200,), 0.5, device="cuda"), torch.from_numpy(labels_g).cuda(),
                     score=half.cuda())
    y_true = np.where(rng.random(60_000) < 0.3, 1, -1).astype(np.int8)
    score = half.reshape(-1)[:60_000]
    for pos_label in (None, -1):
        cpu = roc.evaluate_pairs(y_true, score.float().numpy(), pos_label=pos_label)
        gpu = roc.evaluate_pairs(torch.from_numpy(y_true).cuda(), score.cuda(),
                                 pos_label=pos_label)
        np.testing.assert_array_equal(gpu.false_accepts, cpu.false_accepts)
        assert gpu.auc == cpu.auc
    with pytest.raises(ValueError, match=r"^evaluate_pairs: genuine takes values in \{-1, 0, 1\}"):
        roc.evaluate_pairs(torch.tensor([-1, 0, 1], device="cuda"), score[:3].cuda())
