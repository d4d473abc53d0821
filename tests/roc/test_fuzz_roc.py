"""Property-based tests of the ROC entry points (Hypothesis): random dtypes,
shapes, layouts (strided, offset, misaligned, broadcast), special values
(NaN, +-inf, subnormal, signed zeros) and option values. Each call either
equals its reference (scikit-learn, numpy.histogram, a float64 NumPy
histogram) count for count, or raises TypeError / ValueError / RuntimeError /
MemoryError whose message starts with the function's name."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from _ext import roc

NAMED = (TypeError, ValueError, RuntimeError, MemoryError)
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, 3.4e38, -1.0, 1.0, 0.5]


def values(draw, n):
    base = draw(st.lists(st.floats(-2, 2, allow_nan=False, width=32), min_size=n, max_size=n))
    special = draw(st.lists(st.sampled_from(SPECIAL), min_size=n, max_size=n))
    mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return np.where(mask, special, base)


@st.composite
def arrays_2d(draw, name, half_ok=False):
    """(array, valid): a 2-D array of some dtype and layout, and whether the
    evaluator must take it: float32, contiguous and aligned, or (half_ok, for
    scores) float16 or float64 of any layout, which are copied (float16 widened
    to float32, float64 ordered as float64)."""
    q, g = draw(st.integers(0, 9)), draw(st.integers(0, 9))
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float32, np.float64, np.float16,
                                  np.int32]))
    data = values(draw, q * g).reshape(q, g)
    with np.errstate(invalid="ignore", over="ignore"):
        x = data.astype(dtype) if dtype != np.int32 else np.nan_to_num(data).astype(dtype)
    layout = draw(st.sampled_from(["plain", "plain", "transposed", "strided", "misaligned",
                                   "broadcast", "readonly"]))
    if layout == "transposed":
        x = np.ascontiguousarray(x.T).T
    elif layout == "strided":
        wide = np.zeros((q, 2 * g), x.dtype)
        wide[:, ::2] = x
        x = wide[:, ::2]
    elif layout == "misaligned" and x.size:
        raw = np.zeros(x.nbytes + 1, np.uint8)[1:]
        x = raw.view(x.dtype).reshape(x.shape) if raw.nbytes == x.nbytes else x
        x[...] = data.astype(dtype) if dtype != np.int32 else 0
    elif layout == "broadcast" and g:
        x = np.broadcast_to(x[:, :1], (q, g))
    elif layout == "readonly":
        x = x.copy()
        x.setflags(write=False)
    contiguous = x.flags.c_contiguous or x.size <= 1 or (
        layout == "broadcast" and x.shape[1] <= 1) or (layout == "transposed" and
                                                        min(x.shape) <= 1)
    aligned = x.ctypes.data % x.itemsize == 0 if x.size else True
    return x, (dtype == np.float32 and contiguous and aligned) or (
        half_ok and dtype in (np.float16, np.float64))


@st.composite
def labels(draw, n):
    dtype = draw(st.sampled_from([np.int64, np.int32, np.uint8, np.float32, np.float64,
                                  np.uint64, np.bool_]))
    values_ = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return np.array(values_).astype(dtype)


def sklearn_pairs(labels_q, labels_g, score):
    genuine = (labels_q.astype(np.float64)[:, None] == labels_g.astype(np.float64)[None, :])
    keep = ~np.isnan(score)
    return genuine[keep], score[keep].astype(np.float64)


def check_error(error, fn):
    assert isinstance(error, NAMED), type(error)
    assert str(error).startswith(fn + ": "), str(error)


@given(st.data())
def test_evaluate(data):
    score, valid = data.draw(arrays_2d("score", half_ok=True))
    q, g = score.shape
    labels_q, labels_g = data.draw(labels(q)), data.draw(labels(g))
    mode = data.draw(st.sampled_from(["exact", "binned", "curve", "fast"]))
    bins = data.draw(st.sampled_from([1, 7, 1024, 0, -3, 2.5]))
    far_rule = data.draw(st.sampled_from(["max_tpr", "nearest", "first_above", "interpolate",
                                          "nearest_sklearn", "median"]))
    fars = data.draw(st.sampled_from([(1e-3, 0.1), 0.5, (), (2.0,), "0.1"]))
    try:
        report = roc.evaluate(labels_q, labels_g, score=score, mode=mode, bins=bins,
                              far_rule=far_rule, fars=fars)
    except NAMED as error:
        check_error(error, "evaluate")
        return
    assert valid, "a score the evaluator must refuse was taken"
    genuine, s = sklearn_pairs(labels_q, labels_g, score)
    assert report.n_genuine == genuine.sum() and report.n_impostor == (~genuine).sum()
    assert report.n_nan == int(np.isnan(score).sum())
    if mode == "binned":
        counts, _ = np.histogram(s[genuine].astype(np.float32), bins=bins, range=(-1, 1))
        np.testing.assert_array_equal(report.counts["genuine"], counts)
    else:
        finite = np.nan_to_num(s, posinf=1e300, neginf=-1e300)  # sklearn refuses infinities
        assert abs(report.auc - roc_auc_score(genuine, finite)) < 1e-12
        if mode == "curve":
            fpr, tpr, _ = sk_roc_curve(genuine, finite)
            np.testing.assert_array_equal(report.fpr, fpr)
            np.testing.assert_array_equal(report.tpr, tpr)


@given(st.data())
def test_evaluate_pairs(data):
    """y_true of any dtype and values, pos_label or not: taken exactly where
    scikit-learn's roc_curve takes it (values within {0, 1} or {-1, 1}, or a
    pos_label), with float32, float16 or float64 scores."""
    n = data.draw(st.integers(0, 40))
    genuine_dtype = data.draw(st.sampled_from([np.bool_, np.int64, np.int8, np.float32]))
    flags = np.array(data.draw(st.lists(st.sampled_from([0, 1, 1, 0, 2, -1, 0.5]), min_size=n,
                                        max_size=n))).astype(genuine_dtype)
    pos_label = data.draw(st.sampled_from([None, None, 1, 2, -1]))
    kind = data.draw(st.sampled_from(["numpy", "torch", "list"]))
    score_dtype = data.draw(st.sampled_from([np.float32, np.float32, np.float64, np.float16]))
    with np.errstate(invalid="ignore", over="ignore"):
        score = values(data.draw, n).astype(score_dtype)
    if data.draw(st.booleans()) and n > 1:
        score = score[::2]
    mode = data.draw(st.sampled_from(["exact", "binned", "curve"]))
    given_flags = {"numpy": flags, "torch": torch.from_numpy(flags), "list": flags.tolist()}[kind]
    try:
        report = roc.evaluate_pairs(given_flags, score, pos_label=pos_label, mode=mode, bins=16)
    except NAMED as error:
        check_error(error, "evaluate_pairs")
        return
    classes = set(np.unique(flags).tolist())
    assert score.shape == flags.shape
    assert all(float(v).is_integer() for v in classes)
    assert pos_label is not None or classes <= {0, 1} or classes <= {-1, 1}
    keep = ~np.isnan(score)
    genuine = (flags == (1 if pos_label is None else pos_label))[keep]
    assert report.n_genuine == genuine.sum() and report.n_impostor == (~genuine).sum()
    if mode != "binned":
        finite = np.nan_to_num(score[keep].astype(np.float64), posinf=1e300, neginf=-1e300)
        assert abs(report.auc - roc_auc_score(genuine, finite)) < 1e-12


@given(st.data())
def test_cpu_roc(data):
    score, valid = data.draw(arrays_2d("score"))
    q, g = score.shape
    label_dtype = data.draw(st.sampled_from([np.int64, np.int32, np.float32, np.float64]))
    labels_q = data.draw(labels(q)).astype(label_dtype)
    labels_g = data.draw(labels(g)).astype(label_dtype)
    nbins = data.draw(st.sampled_from([1, 2, 1024]))
    histo_dtype = data.draw(st.sampled_from([np.float32, np.float64, np.int64, np.int32]))
    histo1, histo2 = np.zeros(nbins, histo_dtype), np.zeros(nbins, histo_dtype)
    try:
        n_nan = roc.cpu_roc(score, histo1, histo2, labels_q, labels_g)
    except NAMED as error:
        check_error(error, "cpu_roc")
        return
    assert valid and histo_dtype != np.int32
    s = score.astype(np.float64)
    keep = ~np.isnan(s)
    position = np.clip(np.trunc((s + 1) / 2 * (nbins - 1)), 0, nbins - 1)
    position = np.where(s >= 1, nbins - 1, np.where(s > -1, position, 0))
    expected = np.bincount(position[keep].astype(np.int64), minlength=nbins)
    np.testing.assert_array_equal(histo1, expected)
    genuine = labels_q[:, None] == labels_g[None, :]
    expected = np.bincount(position[keep & genuine].astype(np.int64), minlength=nbins)
    np.testing.assert_array_equal(histo2, expected)
    assert n_nan == int((~keep).sum())


@given(st.data())
def test_pair_scores(data):
    feat_q, valid_q = data.draw(arrays_2d("feat_q"))
    feat_g, valid_g = data.draw(arrays_2d("feat_g"))
    similarity = data.draw(st.sampled_from(["cosine", "dot", "l2"]))
    try:
        out = roc.pair_scores(feat_q, feat_g, similarity=similarity)
    except NAMED as error:
        check_error(error, "pair_scores")
        return
    assert valid_q and valid_g and feat_q.shape[1] == feat_g.shape[1]
    q, g = feat_q.astype(np.float64), feat_g.astype(np.float64)
    if similarity == "cosine":
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            q = q / np.sqrt((q * q).sum(1, keepdims=True))
            g = g / np.sqrt((g * g).sum(1, keepdims=True))
    with np.errstate(invalid="ignore", over="ignore"):
        expected = q @ g.T
    finite = np.isfinite(expected) & (np.abs(expected) < 1e30)
    scale = np.abs(q).sum(1)[:, None] * np.abs(g).sum(1)[None, :]
    with np.errstate(invalid="ignore"):
        assert np.all(np.abs(out[finite] - expected[finite]) <= 1e-5 * scale[finite] + 1e-30)


LABEL_DTYPES = {np.int8: (-128, 127), np.int16: (-2 ** 15, 2 ** 15 - 1),
                np.int32: (-2 ** 31, 2 ** 31 - 1), np.int64: (-2 ** 63, 2 ** 63 - 1),
                np.uint8: (0, 255), np.uint16: (0, 2 ** 16 - 1), np.uint32: (0, 2 ** 32 - 1),
                np.uint64: (0, 2 ** 64 - 1), np.bool_: (0, 1)}
FLOAT_LABEL_DTYPES = (np.float16, np.float32, np.float64)


def label_values(dtype):
    """Values of one dtype: integers a few apart somewhere in its range or
    anywhere in it, or floats (signed zeros, infinities, integers small and
    beyond 2^53 and 2^64, fractions)."""
    if dtype in FLOAT_LABEL_DTYPES:
        width = np.dtype(dtype).itemsize * 8
        return st.one_of(st.sampled_from([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 2.0 ** 60]),
                         st.integers(-5, 5).map(float), st.integers(-2 ** 70, 2 ** 70).map(float),
                         st.floats(allow_nan=False, width=width))
    least, most = LABEL_DTYPES[dtype]
    return st.one_of(st.integers(least, most),
                     st.integers(least, most).flatmap(
                         lambda base: st.integers(max(least, base - 5), min(most, base + 5))),
                     st.sampled_from([v for v in (0, 1, 2 ** 60, -1) if least <= v <= most]))


ALL_LABEL_DTYPES = sorted(LABEL_DTYPES, key=lambda d: np.dtype(d).name) + list(FLOAT_LABEL_DTYPES)


@st.composite
def label_pair(draw):
    """labels_q and labels_g, of one dtype or of two."""
    dtype_q = draw(st.sampled_from(ALL_LABEL_DTYPES))
    dtype_g = draw(st.sampled_from([dtype_q, *ALL_LABEL_DTYPES]))
    q = draw(st.lists(label_values(dtype_q), min_size=0, max_size=12))
    g = draw(st.lists(label_values(dtype_g), min_size=1, max_size=12))
    with np.errstate(over="ignore"):  # 2^60 is inf in float16
        return np.array(q, dtype=dtype_q), np.array(g, dtype=dtype_g)


@given(label_pair(), st.sampled_from(["numpy", "torch"]))
def test_comparable_labels_match_exactly_where_the_labels_do(labels, kind):
    """comparable_labels: int32 or int64 arrays of one dtype, equal exactly
    where the labels are (integers of every width and sign, floats holding
    integers with -0 and +0 equal, integers against floats beyond 2^53), or a
    ValueError naming a float label that is not an integer (infinities
    included)."""
    from _ext.roc._inputs import comparable_labels
    labels_q, labels_g = labels
    if kind == "torch":
        labels_q, labels_g = torch.from_numpy(labels_q), torch.from_numpy(labels_g)
    integral = all(np.isfinite(x).all() and (x == np.trunc(x)).all()
                   for x in labels if x.dtype.kind == "f")
    try:
        out_q, out_g = comparable_labels("evaluate", labels_q, labels_g, len(labels_q),
                                         len(labels_g), "cpu")
    except ValueError as error:
        assert "which is not an integer" in str(error) and not integral
        return
    assert integral
    out_q, out_g = np.asarray(out_q), np.asarray(out_g)
    assert out_q.dtype == out_g.dtype and out_q.dtype in (np.int32, np.int64)
    values_q, values_g = labels[0].tolist(), labels[1].tolist()  # exact Python numbers
    for i, a in enumerate(values_q):
        for j, b in enumerate(values_g):
            assert (out_q[i] == out_g[j]) == (a == b)


# ---------------------------------------------------------------------------
# RocAccumulator streams: batches of random kinds, dtypes and values

STREAM_LABELS = [0, 1, 5, -1, 2 ** 24, 2 ** 24 + 1, 2 ** 53 + 1, 2 ** 63 + 1]
STREAM_DTYPES = [np.int8, np.int64, np.uint64, np.float16, np.float32, np.float64, np.bool_]


def holds(dtype, value):
    """Whether NumPy dtype `dtype` holds the Python integer `value` exactly."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return value in (0, 1)
    if dtype.kind in "iu":
        return np.iinfo(dtype).min <= value <= np.iinfo(dtype).max
    with np.errstate(over="ignore"):
        nearest = dtype.type(value)
    return bool(np.isfinite(nearest)) and int(nearest) == value


def given_as(draw, array):
    """(array as NumPy, torch or a list, the dtype the evaluator sees): a list
    holds Python numbers, taken as float64, bool, or int64 (uint64 for
    integers int64 cannot hold)."""
    kind = draw(st.sampled_from(["numpy", "torch", "list"]))
    if kind == "list":
        values_ = array.tolist()
        if array.dtype.kind in "iu":
            return values_, np.uint64 if any(v > 2 ** 63 - 1 for v in values_) else np.int64
        return values_, np.float64 if array.dtype.kind == "f" else np.bool_
    if kind == "torch" and array.dtype != np.uint64:
        return torch.from_numpy(array), array.dtype
    return array, array.dtype


@given(st.data())
def test_accumulator_stream_of_query_batches(data):
    """Each batch is taken, or refused naming RocAccumulator.update: labels_q
    whose values the first taken batch's dtype cannot all hold are refused, so
    the report equals evaluate() on the batches taken, labels compared as the
    integers they are."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    labels_g = [STREAM_LABELS[i] for i in rng.integers(0, len(STREAM_LABELS) - 1, 6)]  # int64
    feat_g = rng.normal(size=(6, 4)).astype(np.float32)
    acc = roc.RocAccumulator(labels_g, feat_g)
    stream_dtype, taken_labels, taken_feat = None, [], []
    for _ in range(data.draw(st.integers(1, 4))):
        n = data.draw(st.integers(0, 3))
        dtype = data.draw(st.sampled_from(STREAM_DTYPES))
        values_ = [v for v in data.draw(st.lists(st.sampled_from(STREAM_LABELS), min_size=n,
                                                 max_size=n)) if holds(dtype, v)]
        feat_q = rng.normal(size=(len(values_), 4)).astype(np.float32)
        labels_q, dtype = given_as(data.draw, np.array(values_, dtype=object).astype(dtype))
        try:
            acc.update(labels_q, feat_q)
        except NAMED as error:
            check_error(error, "RocAccumulator.update")
            assert stream_dtype is not None and not all(holds(stream_dtype, v) for v in values_)
            continue
        assert stream_dtype is None or all(holds(stream_dtype, v) for v in values_)
        if values_:  # the first batch with labels fixes their dtype
            stream_dtype = stream_dtype or dtype
        taken_labels += values_
        taken_feat.append(feat_q)
    if not taken_feat:
        return
    codes = {v: i for i, v in enumerate(sorted(set(labels_g + taken_labels)))}
    try:
        want = roc.evaluate(np.array([codes[v] for v in taken_labels], np.int64),
                            np.array([codes[v] for v in labels_g]),
                            feat_q=np.concatenate(taken_feat), feat_g=feat_g)
    except ValueError:  # no genuine or no impostor pairs
        with pytest.raises(ValueError, match="^RocAccumulator: there are no"):
            acc.compute()
        return
    got = acc.compute()
    assert (got.n_genuine, got.n_impostor, got.auc) == (want.n_genuine, want.n_impostor, want.auc)
    np.testing.assert_array_equal(got.false_accepts, want.false_accepts)


@given(st.data())
def test_accumulator_stream_of_pair_batches(data):
    """Batches of (y_true, score) of random kinds and dtypes: taken where
    evaluate_pairs would take them and the default pos_label rule holds for
    every batch so far, else refused naming RocAccumulator.update; the report
    is evaluate_pairs' on the batches taken."""
    acc = roc.RocAccumulator(mode=data.draw(st.sampled_from(["exact", "binned"])), bins=16)
    classes, taken_y, taken_score = set(), [], []
    for _ in range(data.draw(st.integers(1, 4))):
        n = data.draw(st.integers(0, 8))
        y = np.array(data.draw(st.lists(st.sampled_from([0, 1, 1, -1, 2]), min_size=n,
                                        max_size=n)))
        y = y.astype(data.draw(st.sampled_from([np.int64, np.int8, np.float32]))) \
            if y.size else y.astype(np.int64)
        score_dtype = data.draw(st.sampled_from(["float32", "float16", "bfloat16", "float64"]))
        score = torch.from_numpy(values(data.draw, n + data.draw(st.sampled_from([0, 0, 1]))))
        score = score.to(getattr(torch, score_dtype))
        try:
            acc.update(given_as(data.draw, y)[0], score if data.draw(st.booleans())
                       or score_dtype == "bfloat16" else score.numpy())
        except NAMED as error:
            check_error(error, "RocAccumulator.update")
            union = classes | set(y.tolist())
            assert len(score) != n or not (
                union <= {0, 1} or union <= {-1, 1})
            continue
        classes |= set(y.tolist())
        assert len(score) == n
        assert classes <= {0, 1} or classes <= {-1, 1}
        taken_y.append(y == 1)
        taken_score.append(score.double().numpy())  # exact for every score dtype
    if not taken_y:
        return
    genuine, score = np.concatenate(taken_y), np.concatenate(taken_score)
    try:
        want = roc.evaluate_pairs(genuine, score, mode=acc.options.mode, bins=16)
    except ValueError:  # no genuine or no impostor pairs
        with pytest.raises(ValueError, match="^RocAccumulator: there are no"):
            acc.compute()
        return
    got = acc.compute()
    assert (got.n_genuine, got.n_impostor, got.n_nan) == (want.n_genuine, want.n_impostor,
                                                          want.n_nan)
    assert got.auc == want.auc or (np.isnan(got.auc) and np.isnan(want.auc))
    np.testing.assert_array_equal(got.false_accepts, want.false_accepts)
