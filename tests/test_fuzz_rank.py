"""Property-based tests of rank.evaluate (Hypothesis): random sizes (empty
ones included), labels, cameras, junk, same_set, special scores (NaN,
infinities, signed zeros, ties) and options give counts equal to brute force
(tests/rank_peers.py); random dtypes and layouts of the scores and features
either give the report of their float32 values or raise an error whose
message starts with "evaluate: "."""

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import rank_peers as peers
from _ext import rank

NAMED = (TypeError, ValueError, RuntimeError, MemoryError)



@st.composite
def cases(draw):
    n_query = draw(st.integers(0, 5))
    n_gallery = draw(st.integers(0, 7))
    same_set = draw(st.booleans())
    if same_set:
        n_gallery = n_query
    labels_g = np.array(draw(st.lists(st.integers(-1, 3), min_size=n_gallery,
                                      max_size=n_gallery)), np.int64)
    labels_q = labels_g.copy() if same_set else np.array(
        draw(st.lists(st.integers(-1, 3), min_size=n_query, max_size=n_query)), np.int64)
    values = st.sampled_from([0.0, 0.5, 1.0, -1.0, np.nan, np.inf, -0.0])
    score = np.array(draw(st.lists(values, min_size=n_query * n_gallery,
                                   max_size=n_query * n_gallery)),
                     np.float32).reshape(n_query, n_gallery)
    cams = draw(st.booleans())
    cams_g = np.array(draw(st.lists(st.integers(0, 1), min_size=n_gallery, max_size=n_gallery)),
                      np.int64) if cams else None
    cams_q = (cams_g.copy() if same_set else np.array(
        draw(st.lists(st.integers(0, 1), min_size=n_query, max_size=n_query)), np.int64)) \
        if cams else None
    junk = draw(st.sampled_from([None, -1, 2]))
    return labels_q, labels_g, score, cams_q, cams_g, junk, same_set


@given(cases(), st.sampled_from(("expected", "pessimistic", "optimistic")),
       st.sampled_from(tuple(rank._evaluate.FPIR_RULE_CODES)))
def test_fuzzed_counts_equal_brute_force(case, ties, rule):
    labels_q, labels_g, score, cams_q, cams_g, junk, same_set = case
    report = rank.evaluate(labels_q, labels_g, score=score, cams_q=cams_q, cams_g=cams_g,
                           junk=junk, same_set=same_set, ties=ties, fpir_rule=rule, topk=3,
                           per_query=True, fpirs=(0.0, 0.5, 1.0))
    rows = peers.candidates(score, labels_q, labels_g, cams_q, cams_g, junk, same_set)
    pq = report.per_query
    n_nan = 0
    for i, row in enumerate(rows):
        mates = [s for _, s, m in row if m]
        non = [s for _, s, m in row if not m]
        assert pq["n_mates"][i] == len(mates) and pq["n_nonmates"][i] == len(non)
        at = pq["mate_query"] == i
        assert sorted(pq["mate_above"][at].tolist()) == sorted(
            sum(n > s for n in non) for s in mates)
        assert sorted(pq["mate_tied"][at].tolist()) == sorted(
            sum(n == s for n in non) for s in mates)
        n_nan += sum(1 for j in range(score.shape[1]) if score[i, j] != score[i, j] and not
                     peers.excluded(i, j, labels_q, labels_g, cams_q, cams_g, junk, same_set))
        best = sorted(row, key=lambda e: (-e[1], e[0]))[:3]
        assert report.topk[0][i][:len(best)].tolist() == [e[0] for e in best]
    assert report.n_nan == n_nan
    assert report.n_mated + report.n_skipped == report.n_queries
    assert report.n_unmated <= report.n_skipped
    assert (np.isnan(report.cmc).all() if report.n_mated == 0 else
            (np.diff(report.cmc) >= 0).all() and report.cmc[-1] <= 1.0)
    for row in report.tpir_at_fpir:
        assert math.isnan(row.tpir) or 0.0 <= row.tpir <= 1.0



@st.composite
def laid_out(draw, shape):
    """(array, valid): values of `shape` in some dtype and layout, and whether
    evaluate must take it as a score matrix (float32 and contiguous, or
    float16 of any layout, widened into a float32 copy)."""
    data = np.array(draw(st.lists(st.sampled_from([0.0, 0.5, -1.0, 2.0, np.nan]),
                                  min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                    np.float64).reshape(shape)
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float16, np.float64, np.int32]))
    with np.errstate(invalid="ignore"):
        x = data.astype(dtype) if dtype != np.int32 else np.nan_to_num(data).astype(dtype)
    layout = draw(st.sampled_from(["plain", "transposed", "strided", "readonly"]))
    if layout == "transposed":
        x = np.ascontiguousarray(x.T).T
    elif layout == "strided" and x.ndim == 2:
        wide = np.zeros((x.shape[0], 2 * x.shape[1]), x.dtype)
        wide[:, ::2] = x
        x = wide[:, ::2]
    elif layout == "readonly":
        x = x.copy()
        x.setflags(write=False)
    contiguous = x.flags.c_contiguous
    return x, dtype == np.float16 or (dtype == np.float32 and contiguous)


@given(st.data())
def test_fuzzed_dtypes_and_layouts_are_taken_or_named(data):
    n_query, n_gallery = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 5))
    labels_q = np.arange(n_query) % 3
    labels_g = np.arange(n_gallery) % 4
    features = data.draw(st.booleans())
    if features:
        (feat_q, ok_q), (feat_g, ok_g) = data.draw(laid_out((n_query, 3))), \
            data.draw(laid_out((n_gallery, 3)))
        kwargs = dict(feat_q=feat_q, feat_g=feat_g)
        valid = ok_q and ok_g and feat_q.dtype == np.float32 and feat_g.dtype == np.float32
        plain = dict(feat_q=np.ascontiguousarray(feat_q, np.float32),
                     feat_g=np.ascontiguousarray(feat_g, np.float32))
    else:
        score, valid = data.draw(laid_out((n_query, n_gallery)))
        kwargs = dict(score=score)
        plain = dict(score=np.ascontiguousarray(score, np.float32))
    try:
        report = rank.evaluate(labels_q, labels_g, per_query=True, **kwargs)
    except NAMED as error:
        assert not valid, error
        assert str(error).startswith("evaluate: "), str(error)
        return
    assert valid
    want = rank.evaluate(labels_q, labels_g, per_query=True, **plain)
    assert report.to_dict() == want.to_dict()
