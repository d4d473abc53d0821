"""Counts that cannot be right (as ranks that disagree would reduce) are
refused, never summarized."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _ext.roc._accumulate import _merge_levels
from _ext.roc._evaluate import Options, counts_only, pair_list
from _ext.roc._report import report_from_summary


# ---------------------------------------------------------------------------
# counts that cannot be right: what ranks that disagree would reduce

def counted(mode, genuine, score, bin_range=(-1.0, 1.0)):
    """One rank's evaluation of a list of pairs, counted."""
    options = Options("evaluate_pairs", mode=mode, range=bin_range, modes=("exact", "binned",
                                                                            "curve"))
    return pair_list("evaluate_pairs", options, genuine, score, None, None, None, None, None,
                     None)[0]


def ranks_data():
    """Two ranks' pairs; the top score of each is an impostor's."""
    rng = np.random.default_rng(3)
    genuine = rng.random(400) < 0.3
    score = ((rng.normal(size=400) + genuine) / 4).astype(np.float32)
    genuine[[0, 200]], score[[0, 200]] = False, 0.99
    return (genuine[:200], score[:200]), (genuine[200:], score[200:])


def test_bins_of_ranks_with_different_ranges_are_refused():
    """Two ranks' bins over (-1, 1) and (0, 1), reduced as compute() would:
    summarized against one range, some bin holds more genuine pairs than pairs
    (the AUC came out as 1e18)."""
    (g0, s0), (g1, s1) = ranks_data()
    rank_0, rank_1 = counted("binned", g0, s0, (-1, 1)), counted("binned", g1, s1, (0, 1))
    reduced = counts_only("evaluate_pairs", "binned", 1024, (-1, 1))
    reduced.set_levels(*_merge_levels(rank_0.levels(), rank_1.levels()))
    counts = reduced.counts()
    for name in ("bins", "below", "above"):
        counts[name][:] = rank_0.counts()[name] + rank_1.counts()[name]
    counts["totals"][:2] = rank_0.counts()["totals"][:2] + rank_1.counts()["totals"][:2]
    with pytest.raises(ValueError, match=r"^evaluate_pairs: the counts cannot be right \(reduced "
                       r"from processes that disagree\?\): bin \d+ holds \d+ genuine pairs but "
                       r"\d+ pairs in all$"):
        reduced.summarize((0.1,), "max_tpr")


def first(counts, levels):
    return 0


def last(counts, levels):
    return -1


def all_of(counts, levels):
    return slice(None)


def inner_gap_with_pairs(counts, levels):
    return next(p for p in range(1, len(counts["gap"]) - 1) if counts["gap"][p])


def lowest_genuine_key(counts, levels):
    return int(np.searchsorted(counts["keys"], levels[0]))


@pytest.mark.parametrize("mode, name, where, value, message", [
    ("exact", "at", first, 0, r"score \S+ has \d+ genuine pairs but 0 pairs in all"),
    ("exact", "at", last, 2 ** 64 - 1, r"the impostor pairs exceed 2\^64"),
    ("exact", "gap_min", inner_gap_with_pairs, 0,
     r"the lowest score \(\S+\) of the \d+ impostor pairs in gap \d+ lies outside the gap"),
    ("exact", "top_count", first, 2 ** 40,
     r"the top score's \d+ pairs are not among the \d+ impostor pairs above every genuine score"),
    ("exact", "totals", lambda counts, levels: 2, 7,
     r"the genuine levels hold \d+ pairs but the total is 7"),
    ("binned", "bins", all_of, 0, r"bin \d+ holds \d+ genuine pairs but 0 pairs in all"),
    ("binned", "above", first, 2 ** 64 - 1, r"the impostor pairs exceed 2\^64"),
    ("curve", "key_counts", lowest_genuine_key, 0,
     r"score \S+ has \d+ genuine pairs but 0 pairs in all"),
    ("curve", "keys", first, 2 ** 32 - 1, r"the distinct scores are not distinct and ascending"),
], ids=["exact at", "exact overflow", "exact gap_min", "exact top_count", "exact genuine total",
        "binned bins", "binned overflow", "curve counts", "curve keys"])
def test_counts_that_cannot_be_right_are_refused(mode, name, where, value, message):
    (genuine, score), _ = ranks_data()
    evaluation = counted(mode, genuine, score)
    counts = evaluation.counts()
    counts[name][where(counts, evaluation.levels()[0])] = value
    with pytest.raises(ValueError, match=r"^evaluate_pairs: the counts cannot be right \(reduced "
                       r"from processes that disagree\?\): " + message + "$"):
        evaluation.summarize((0.1,), "max_tpr")


def test_a_genuine_score_missing_from_the_curve_counts_is_refused():
    (genuine, score), _ = ranks_data()
    evaluation = counted("curve", genuine, score)
    levels = evaluation.levels()[0]
    keys = np.setdiff1d(evaluation.counts()["keys"], levels[:1])
    evaluation.set_keys(keys, np.full(len(keys), 1000, np.uint64))
    with pytest.raises(ValueError, match=r"genuine score \S+ is not among the distinct scores "
                                         r"counted$"):
        evaluation.summarize((0.1,), "max_tpr")


@given(st.data())
def test_any_count_written_over_is_refused_or_summarized_within_bounds(data):
    """Whatever one count becomes, the summary refuses it or stays a curve:
    rates, AUC and TAR in [0, 1]."""
    mode = data.draw(st.sampled_from(["exact", "binned", "curve"]))
    (genuine, score), _ = ranks_data()
    evaluation = counted(mode, genuine, score)
    counts = evaluation.counts()
    name = data.draw(st.sampled_from(sorted(k for k, v in counts.items() if v.size)))
    array = counts[name]
    index = data.draw(st.integers(0, array.size - 1))
    top = np.iinfo(array.dtype).max
    array[index] = data.draw(st.one_of(st.integers(0, top), st.integers(0, 3),
                                       st.integers(top - 3, top),
                                       st.sampled_from([int(array[index]) - 1,
                                                        int(array[index]) + 1]).filter(
                                           lambda v: 0 <= v <= top)))
    try:
        summary = evaluation.summarize((1e-3, 0.1), "max_tpr")
    except ValueError as error:
        assert ("the counts cannot be right" in str(error) or
                "there are no genuine pairs" in str(error) or
                "there are no impostor pairs" in str(error)), error
        return
    report = report_from_summary(summary, "max_tpr", "list")
    for values in (report.fpr, report.tpr, [report.auc], [row.tar for row in report.tar_at_far]):
        assert np.all((np.asarray(values) >= 0) & (np.asarray(values) <= 1)), (name, values)
