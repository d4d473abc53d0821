"""Failures and disagreements across processes (gloo, 2 ranks): whatever fails,
on whichever rank, of whatever exception type, before or after the first
collective, every rank raises the same error naming the function and the rank
within seconds, and the group stays usable; counts that cannot be right (as
ranks that disagree would reduce) are refused, never summarized."""

import time

import numpy as np
import pytest
from distributed_common import launch
from hypothesis import given
from hypothesis import strategies as st

from _ext import roc
from _ext.roc._accumulate import _merge_levels
from _ext.roc._evaluate import Options, counts_only, pair_list
from _ext.roc._report import report_from_summary

WORLD = 2
WITHIN_S = 10       # a shared failure takes milliseconds; a hang, the group's timeout
GROUP_TIMEOUT_S = 60


# ---------------------------------------------------------------------------
# every case, run in turn on both ranks of one group

def data():
    rng = np.random.default_rng(11)
    d = {"genuine": rng.random(600) < 0.3, "labels_g": rng.integers(0, 6, 40),
         "labels_q": rng.integers(0, 6, 50),
         "feat_g": rng.normal(size=(40, 8)).astype(np.float32),
         "feat_q": rng.normal(size=(50, 8)).astype(np.float32)}
    d["score"] = ((rng.normal(size=600) + d["genuine"]) / 4).astype(np.float32)
    d["matrix"] = roc.pair_scores(d["feat_q"], d["feat_g"])
    return d


def cases(rank):
    """{name: call} of every case, as this rank makes it; each call either
    raises or returns a report."""
    d = data()
    pairs = slice(300 * rank, 300 * (rank + 1))
    rows = slice(25 * rank, 25 * (rank + 1))

    def on(rank_0, rank_1):
        return rank_1 if rank else rank_0

    def evaluate_pairs(**kwargs):
        return roc.evaluate_pairs(d["genuine"][pairs], d["score"][pairs], group=True, **kwargs)

    def evaluate(gallery=40, labels_q=d["labels_q"][rows], **kwargs):
        kwargs.setdefault("score", d["matrix"][rows])
        return roc.evaluate(labels_q, d["labels_g"][:gallery], group=True, **kwargs)

    def accumulate(gallery=False, batches=True, **kwargs):
        if gallery:
            acc = roc.RocAccumulator(d["labels_g"][:gallery], d["feat_g"][:gallery], group=True,
                                     **kwargs)
            if batches:
                acc.update(d["labels_q"][rows], d["feat_q"][rows])
        else:
            acc = roc.RocAccumulator(group=True, **kwargs)
            if batches:
                acc.update(d["genuine"][pairs], d["score"][pairs])
        return acc.compute()

    def progress_dividing_by_zero(done, total):
        return done / 0

    return {
        # options refused on one rank, before any collective
        "evaluate_pairs fars": lambda: evaluate_pairs(fars=on([0.1], [2.0])),
        "evaluate mode": lambda: evaluate(mode=on("exact", "bogus")),
        "evaluate same_set": lambda: evaluate(same_set=on(False, "twice")),
        "roc_curve chunk": lambda: roc.roc_curve(d["labels_q"][rows], d["labels_g"],
                                                 score=d["matrix"][rows], chunk=on(None, 0),
                                                 group=True),
        "roc_curve_pairs progress": lambda: roc.roc_curve_pairs(
            d["genuine"][pairs], d["score"][pairs], progress=on(None, 5), group=True),
        "both ranks refuse": lambda: evaluate_pairs(fars=[2.0]),
        # an exception type the project never raises, from a user's callback
        # (rank 0 alone calls it), in the middle of the count
        "progress raises": lambda: evaluate_pairs(progress=on(progress_dividing_by_zero, None),
                                                  chunk=100),
        "different calls": lambda: (evaluate_pairs() if rank == 0 else
                                    roc.roc_curve_pairs(d["genuine"][pairs], d["score"][pairs],
                                                        group=True)),
        # a bad input on one rank, found after the options' step
        "evaluate labels": lambda: evaluate(score=None, feat_q=d["feat_q"][rows],
                                            feat_g=d["feat_g"], labels_q=on(
                                                d["labels_q"][rows], np.full(25, np.nan))),
        # one-shot options and inputs the ranks disagree on
        "evaluate modes": lambda: evaluate(mode=on("exact", "binned")),
        "evaluate bins": lambda: evaluate(mode="binned", bins=on(64, 32)),
        "evaluate far_rule": lambda: evaluate(far_rule=on("max_tpr", "nearest")),
        "evaluate dim": lambda: evaluate(score=None, feat_q=d["feat_q"][rows, :on(8, 6)],
                                         feat_g=d["feat_g"][:, :on(8, 6)]),
        "evaluate gallery": lambda: evaluate(gallery=on(40, 39), score=None,
                                             feat_q=d["feat_q"][rows],
                                             feat_g=d["feat_g"][:on(40, 39)]),
        "evaluate dtype": lambda: evaluate(score=d["matrix"][rows].astype(on(np.float32,
                                                                             np.float64))),
        # accumulators that disagree, in every mode
        "accumulator modes": lambda: accumulate(mode=on("exact", "binned")),
        "binned range": lambda: accumulate(mode="binned", range=on((-1, 1), (0, 1))),
        "binned bins": lambda: accumulate(mode="binned", bins=on(1024, 512)),
        "binned fars": lambda: accumulate(mode="binned", fars=on(0.1, 0.2)),
        "binned far_rule": lambda: accumulate(mode="binned", far_rule=on("max_tpr", "nearest")),
        "exact fars": lambda: accumulate(fars=on(0.1, 0.2)),
        "similarity": lambda: accumulate(gallery=40, mode="binned",
                                         similarity=on("cosine", "dot")),
        "gallery or pairs": lambda: accumulate(gallery=on(40, False), mode="binned"),
        "binned gallery": lambda: accumulate(gallery=on(40, 39), mode="binned"),
        # labels whose classes decide only over the ranks (scikit-learn's
        # rule: {0, 1} on one rank, {-1, 1} on the other), and pos_label
        "y_true over the ranks": lambda: roc.evaluate_pairs(
            on(np.array([0, 1, 1]), np.array([-1, 1, 1])), np.array([0.1, 0.5, 0.9], np.float32),
            group=True),
        "pos_label": lambda: roc.evaluate_pairs(np.array([0, 1, 2]),
                                                np.array([0.1, 0.5, 0.9], np.float32),
                                                pos_label=on(1, 2), group=True),
        # and after all of them, the same group still evaluates, a rank
        # without batches included
        "agreed": lambda: evaluate_pairs(),
        "exact, rank 1 without batches": lambda: accumulate(batches=rank == 0),
        "binned, rank 1 without batches": lambda: accumulate(mode="binned", batches=rank == 0),
    }


def run_cases(rank, world):
    """{name: (outcome, seconds, the type of the error's cause)} of every case
    on this rank; the outcome is a report's AUC or the error."""
    out = {}
    for name, call in cases(rank).items():
        start = time.perf_counter()
        cause = None
        try:
            outcome = call().auc
        except Exception as error:
            outcome = "%s: %s" % (type(error).__name__, error)
            cause = type(error.__cause__).__name__ if error.__cause__ else None
        out[name] = (outcome, time.perf_counter() - start, cause)
    return out


def disagree(fn, what, rank_0, rank_1):
    return ("ValueError: %s: the ranks disagree on %s: rank 0 has %s, rank 1 has %s"
            % (fn, what, rank_0, rank_1))


EXPECTED = {
    "evaluate_pairs fars": "ValueError: evaluate_pairs: rank 1: fars must lie in [0, 1], got 2.0",
    "evaluate mode": ("ValueError: evaluate: rank 1: mode must be one of 'exact', 'binned', "
                      "'curve', got 'bogus'"),
    "evaluate same_set": ("ValueError: evaluate: rank 1: same_set must be False, True, "
                          "'unordered' or 'ordered', got 'twice'"),
    "roc_curve chunk": "ValueError: roc_curve: rank 1: chunk must be a positive integer, got 0",
    "roc_curve_pairs progress": ("TypeError: roc_curve_pairs: rank 1: progress must be callable "
                                 "as progress(done, total), or None, got 'int'"),
    "both ranks refuse": ("ValueError: evaluate_pairs: rank 0 (and 1 other rank(s)): fars must "
                          "lie in [0, 1], got 2.0"),
    "progress raises": ("RuntimeError: evaluate_pairs: rank 0: ZeroDivisionError: division "
                        "by zero"),
    "different calls": ["ValueError: %s: the ranks are in different calls: rank 0 in "
                        "evaluate_pairs, rank 1 in roc_curve_pairs" % fn
                        for fn in ("evaluate_pairs", "roc_curve_pairs")],
    "evaluate labels": ("ValueError: evaluate: rank 1: labels_q contains NaN; a NaN label "
                        "matches nothing"),
    "evaluate modes": disagree("evaluate", "the option mode", "'exact'", "'binned'"),
    "evaluate bins": disagree("evaluate", "the option bins", 64, 32),
    "evaluate far_rule": disagree("evaluate", "the option far_rule", "'max_tpr'", "'nearest'"),
    "evaluate dim": disagree("evaluate", "the feature dimension D", 8, 6),
    "evaluate gallery": disagree("evaluate", "the gallery size", 40, 39),
    "evaluate dtype": disagree("evaluate", "the dtype of score/features", "'float32'",
                               "'float64'"),
    "accumulator modes": disagree("RocAccumulator", "the option mode", "'exact'", "'binned'"),
    "binned range": disagree("RocAccumulator", "the option range", (-1.0, 1.0), (0.0, 1.0)),
    "binned bins": disagree("RocAccumulator", "the option bins", 1024, 512),
    "binned fars": disagree("RocAccumulator", "the option fars", (0.1,), (0.2,)),
    "binned far_rule": disagree("RocAccumulator", "the option far_rule", "'max_tpr'",
                                "'nearest'"),
    "exact fars": disagree("RocAccumulator", "the option fars", (0.1,), (0.2,)),
    "similarity": disagree("RocAccumulator", "the option similarity", "'cosine'", "'dot'"),
    "gallery or pairs": disagree("RocAccumulator", "the option pairs", "'all'", "'list'"),
    "binned gallery": disagree("RocAccumulator", "the gallery size", 40, 39),
    "y_true over the ranks": ("ValueError: evaluate_pairs: rank 0 (and 1 other rank(s)): genuine "
                              "takes values in {-1, 0, 1} (over the ranks) and pos_label is not "
                              "given: give genuine as bool, or with values in {0, 1} or {-1, 1}, "
                              "or pass pos_label (the value of the genuine pairs)"),
    "pos_label": disagree("evaluate_pairs", "the option pos_label", 1, 2),
}


@pytest.fixture(scope="module")
def outcomes():
    return launch(run_cases, WORLD, GROUP_TIMEOUT_S)


EVALUATED = ("agreed", "exact, rank 1 without batches", "binned, rank 1 without batches")


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_every_rank_raises_the_same_named_error_at_once(outcomes, case):
    for rank, result in outcomes.items():
        outcome, seconds, _ = result[case]
        want = EXPECTED[case]
        assert outcome == (want[rank] if isinstance(want, list) else want), rank
        assert seconds < WITHIN_S, (rank, seconds)


def test_a_failing_rank_raises_from_its_own_exception(outcomes):
    causes = {rank: {case: result[case][2] for case in ("progress raises", "evaluate_pairs fars")}
              for rank, result in outcomes.items()}
    assert causes == {0: {"progress raises": "ZeroDivisionError", "evaluate_pairs fars": None},
                      1: {"progress raises": None, "evaluate_pairs fars": "ValueError"}}


def test_the_group_evaluates_after_the_failures(outcomes):
    d = data()
    everything = roc.evaluate_pairs(d["genuine"], d["score"]).auc
    rank_0 = roc.evaluate_pairs(d["genuine"][:300], d["score"][:300])
    binned = roc.evaluate_pairs(d["genuine"][:300], d["score"][:300], mode="binned")
    for result in outcomes.values():
        assert result["agreed"][0] == everything
        assert result["exact, rank 1 without batches"][0] == rank_0.auc
        assert result["binned, rank 1 without batches"][0] == binned.auc


def test_every_case_is_checked(outcomes):
    assert set(cases(0)) == set(EXPECTED) | set(EVALUATED)


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
    options = Options("test", fars=(1e-3, 0.1))
    try:
        summary = evaluation.summarize(options.fars, options.far_rule)
    except ValueError as error:
        assert ("the counts cannot be right" in str(error) or
                "there are no genuine pairs" in str(error) or
                "there are no impostor pairs" in str(error)), error
        return
    report = report_from_summary(summary, options, "list")
    for values in (report.fpr, report.tpr, [report.auc], [row.tar for row in report.tar_at_far]):
        assert np.all((np.asarray(values) >= 0) & (np.asarray(values) <= 1)), (name, values)
