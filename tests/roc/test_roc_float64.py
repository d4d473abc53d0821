"""float64 scores, ordered and tied exactly as float64 (_ext/roc/_float64.py):
scores that merge in float32 (1 + k 1e-12) stay apart at every entry point,
in exact and curve mode; curves equal scikit-learn's roc_curve on the same
float64 input, reports equal the report of the scores' ranks (float32
integers, an independent numbering) with every score mapped back, the AUC
the exact Mann-Whitney value; binned mode counts the float32-rounded scores;
the accumulator, and two gloo ranks, equal one call."""

from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.distributed as dist
from distributed_common import launch
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from _ext import roc
from _ext.roc import _float64
from test_roc_api import host_curve

STAND_IN = 1e300  # scikit-learn refuses infinities: they stand as scores beyond every other


def colliding(rng, n):
    """(genuine flags, float64 scores): values 1 + k 1e-12 (which float32 rounds
    to a handful), ties among them, NaN, +-inf, -0.0 and +0.0; genuine pairs
    score higher on average."""
    genuine = rng.random(n) < 0.4
    score = 1.0 + (rng.integers(0, 40, n) + 10 * genuine) * 1e-12
    score[:8] = (np.nan, np.inf, -np.inf, np.nan, np.inf, -0.0, 0.0, -np.inf)
    genuine[:8] = (True, True, False, False, False, True, False, True)
    assert len(np.unique(score.astype(np.float32))) < len(np.unique(score)) // 4
    return genuine, score


def sk_reference(genuine, score, drop_intermediate=True):
    """scikit-learn's (fpr, tpr, thresholds) on the pairs without NaN, the
    infinities standing in as +-STAND_IN and restored in the thresholds."""
    kept = ~np.isnan(score)
    stand_in = np.clip(score[kept], -STAND_IN, STAND_IN)
    fpr, tpr, thresholds = sk_roc_curve(genuine[kept], stand_in,
                                        drop_intermediate=drop_intermediate)
    thresholds = np.where(np.abs(thresholds) == STAND_IN, np.copysign(np.inf, thresholds),
                          thresholds)
    return fpr, tpr, thresholds


def same_curve(got, want):
    for a, b in zip(host_curve(got), want):
        np.testing.assert_array_equal(a, b)


def mann_whitney(genuine, score):
    """The exact AUC of the pairs without NaN: U / (P N), ties counted half."""
    kept = ~np.isnan(score)
    pos, neg = score[kept & genuine], score[kept & ~genuine]
    above = np.sum(pos[:, None] > neg[None, :])
    ties = np.sum(pos[:, None] == neg[None, :])
    return float(Fraction(int(above) * 2 + int(ties), 2 * pos.size * neg.size))


def as_ranks(score):
    """(float32 ranks of the scores among their distinct values, NaN kept; the
    distinct values): the same order and ties, numbered independently of
    _float64."""
    distinct, index = np.unique(score, return_inverse=True)
    ranks = index.reshape(score.shape).astype(np.float32)
    ranks[np.isnan(score)] = np.nan
    return ranks, distinct


def from_ranks(values, distinct):
    """Rank-valued thresholds as the scores they number (infinities and NaN kept)."""
    values = np.asarray(values, np.float64)
    finite = np.isfinite(values)
    out = values.copy()
    out[finite] = distinct[values[finite].astype(np.int64)]
    return out


def plain(values):
    return [None if v != v else v for v in np.asarray(values, np.float64).tolist()]


def same_report(got, want, distinct=None):
    """Reports equal field for field; want's scores (ranks) mapped through
    `distinct` where given."""
    def scores(values):
        return plain(values if distinct is None else from_ranks(values, distinct))
    assert (got.n_genuine, got.n_impostor, got.n_nan, got.auc, got.eer, got.passes) == \
        (want.n_genuine, want.n_impostor, want.n_nan, want.auc, want.eer, want.passes)
    for name in ("fpr", "tpr", "false_accepts", "true_accepts"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    assert plain(got.thresholds) == scores(want.thresholds)
    assert plain([got.eer_threshold]) == scores([want.eer_threshold])
    assert [(r.far, r.tar, r.false_accepts) for r in got.tar_at_far] == \
        [(r.far, r.tar, r.false_accepts) for r in want.tar_at_far]
    assert plain([r.threshold for r in got.tar_at_far]) == \
        scores([r.threshold for r in want.tar_at_far])
    for name, value in want.counts.items():
        if name in ("genuine_scores", "impostor_between_min"):
            assert plain(got.counts[name]) == scores(value), name
        else:
            np.testing.assert_array_equal(got.counts[name], value)


def as_kind(x, kind):
    return torch.from_numpy(x) if kind == "torch" else x


# ---------------------------------------------------------------------------
# the curve: scikit-learn's on the same float64 input

@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("drop_intermediate", [True, False])
def test_pair_curves_equal_sklearn_where_float32_would_merge(rng, kind, drop_intermediate):
    genuine, score = colliding(rng, 600)
    got = roc.roc_curve_pairs(as_kind(genuine, kind), as_kind(score, kind),
                              drop_intermediate=drop_intermediate)
    same_curve(got, sk_reference(genuine, score, drop_intermediate))
    merged = roc.roc_curve_pairs(genuine, score.astype(np.float32),
                                 drop_intermediate=drop_intermediate)
    assert len(merged[0]) < len(got[0])  # what float32 would have given


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("drop_intermediate", [True, False])
def test_matrix_curves_equal_sklearn_where_float32_would_merge(rng, kind, drop_intermediate):
    labels_q, labels_g = rng.integers(0, 4, 23), rng.integers(0, 4, 31)
    genuine = (labels_q[:, None] == labels_g[None, :]).reshape(-1)
    score = (1.0 + (rng.integers(0, 30, genuine.size) + 8 * genuine) * 1e-12)
    score[:4] = (np.nan, np.inf, -np.inf, -0.0)
    got = roc.roc_curve(labels_q, labels_g, score=as_kind(score.reshape(23, 31), kind),
                        drop_intermediate=drop_intermediate)
    same_curve(got, sk_reference(genuine, score, drop_intermediate))


def test_finite_float64_scores_equal_sklearn_and_roc_auc_score(rng):
    genuine = rng.random(2000) < 0.3
    score = rng.normal(size=2000) * 1e-9 + genuine * 1e-10
    same_curve(roc.roc_curve_pairs(genuine, score), sk_roc_curve(genuine, score))
    report = roc.evaluate_pairs(genuine, score)
    assert report.auc == mann_whitney(genuine, score)
    assert report.auc == pytest.approx(roc_auc_score(genuine, score), rel=1e-14)


# ---------------------------------------------------------------------------
# the report: that of the scores' ranks, every score mapped back

RULES = ["max_tpr", "nearest", "first_above", "interpolate", "nearest_sklearn"]


@pytest.mark.parametrize("mode", ["exact", "curve"])
@pytest.mark.parametrize("far_rule", RULES)
@pytest.mark.parametrize("eer_rule", ["crossing", "nearest_mean"])
def test_pair_reports_equal_the_reports_of_the_ranks(rng, mode, far_rule, eer_rule):
    genuine, score = colliding(rng, 500)
    ranks, distinct = as_ranks(score)
    options = dict(mode=mode, far_rule=far_rule, eer_rule=eer_rule, max_fpr=0.3,
                   fars=(0.01, 0.05, 0.1, 0.3, 0.5))
    got = roc.evaluate_pairs(genuine, score, **options)
    same_report(got, roc.evaluate_pairs(genuine, ranks, **options), distinct)
    assert got.auc == mann_whitney(genuine, score)
    assert got.partial_auc == roc.evaluate_pairs(genuine, ranks, **options).partial_auc


@pytest.mark.parametrize("mode", ["exact", "curve"])
@pytest.mark.parametrize("same_set", [False, True])
def test_matrix_reports_equal_the_reports_of_the_ranks(rng, mode, same_set):
    labels_q = rng.integers(0, 5, 40)
    labels_g = labels_q if same_set else rng.integers(0, 5, 33)
    score = 1.0 + rng.integers(0, 60, (40, labels_g.size)) * 1e-12
    score[0, :3] = (np.nan, np.inf, -np.inf)
    ranks, distinct = as_ranks(score)
    got = roc.evaluate(labels_q, labels_g, score=score, mode=mode, same_set=same_set)
    same_report(got, roc.evaluate(labels_q, labels_g, score=ranks, mode=mode,
                                  same_set=same_set), distinct)


def test_float64_scores_that_float32_holds_are_cast(rng):
    """No surrogate where float32 holds every score: the report of the float32
    scores themselves."""
    genuine = rng.random(300) < 0.5
    narrow = np.round(rng.normal(size=300), 3).astype(np.float32)
    narrow[:2] = (np.nan, np.inf)
    assert _float64.kind_of(narrow.astype(np.float64)) == _float64.CAST
    same_report(roc.evaluate_pairs(genuine, narrow.astype(np.float64)),
                roc.evaluate_pairs(genuine, narrow))


def test_binned_mode_counts_the_float32_rounded_scores(rng):
    genuine, score = colliding(rng, 400)
    score = score - 1.0 + rng.normal(size=400) * 0.3  # across the bins
    options = dict(mode="binned", bins=64, range=(-1.0, 1.0))
    same_report(roc.evaluate_pairs(genuine, score, **options),
                roc.evaluate_pairs(genuine, score.astype(np.float32), **options))
    labels = rng.integers(0, 3, 20)
    matrix = score[:400].reshape(20, 20)
    same_report(roc.evaluate(labels, labels, score=matrix, **options),
                roc.evaluate(labels, labels, score=matrix.astype(np.float32), **options))


# ---------------------------------------------------------------------------
# the surrogate itself

def test_surrogates_are_increasing_normal_float32s_across_the_skipped_keys():
    """Indices on both sides of the skipped zeros and subnormals, and the last
    one, become strictly increasing normal float32s, mapped back to the
    index they came from."""
    class Indices:  # D of CAPACITY values, the value of index i being i
        shape = (_float64.CAPACITY,)

        def __getitem__(self, index):
            return index.astype(np.float64)

    scale = _float64.ScoreScale("test", Indices())
    boundary = _float64.SKIPPED_FROM - _float64.FIRST_KEY
    index = np.array([0, 1, boundary - 2, boundary - 1, boundary, boundary + 1,
                      _float64.CAPACITY - 1], np.int64)
    nan = np.zeros(index.shape, bool)
    nan[1] = True
    out = scale.surrogate(index, nan)
    assert out.dtype == np.float32 and np.isnan(out[1])
    kept = out[~nan]
    assert np.all(np.diff(kept.astype(np.float64)) > 0)
    assert np.all(np.abs(kept) >= np.finfo(np.float32).tiny) and np.all(np.isfinite(kept))
    assert kept[0] == -np.finfo(np.float32).max and kept[-1] == np.finfo(np.float32).max
    back = scale.scores(out.astype(np.float64))
    assert plain(back) == plain(np.where(nan, np.nan, index))
    assert scale.scores([np.inf])[0] == np.inf


def test_a_value_that_is_no_surrogate_is_an_error():
    scale = _float64.ScoreScale("evaluate", np.array([0.5, 1.5]))
    with pytest.raises(RuntimeError, match="evaluate: the evaluator reported the score 1.0, "
                                           "which is none of the float64 scores' surrogates"):
        scale.scores([1.0])


def test_more_distinct_scores_than_surrogates_is_a_named_error():
    too_many = np.broadcast_to(np.float64(0), (_float64.CAPACITY + 1,))  # no memory
    with pytest.raises(ValueError, match="evaluate_pairs: score holds 4261412865 distinct "
                                         "float64 values, more than the 4261412864"):
        _float64.ScoreScale("evaluate_pairs", too_many)


# ---------------------------------------------------------------------------
# features stay float32

def test_float64_features_are_refused_saying_how_to_cast():
    feat = np.zeros((3, 4))
    index = np.arange(3)
    with pytest.raises(TypeError, match=r"^evaluate_pairs: feat_a is float64, but features are "
                                        r"scored in float32 .*: cast them with "
                                        r"feat_a.astype\(numpy.float32\) or feat_a.float\(\)"):
        roc.evaluate_pairs([0, 1, 1], feat_a=feat, feat_b=feat.astype(np.float32),
                           index_a=index, index_b=index)


# ---------------------------------------------------------------------------
# the accumulator

@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_accumulated_float64_batches_equal_one_call(rng, kind, mode):
    """float64 batches, and a float32 (and a float16) batch among them: the
    report of evaluate_pairs on the concatenation, which is float64 (the
    float32 scores widened exactly, as NumPy and torch concatenate them)."""
    genuine, score = colliding(rng, 600)
    parts = [score[:200], score[200:400].astype(np.float32), score[400:550],
             score[550:].astype(np.float16)]
    acc = roc.RocAccumulator(mode=mode, range=(0.9, 1.1))
    at = 0
    for part in parts:
        acc.update(as_kind(genuine[at:at + part.size], kind), as_kind(part, kind))
        at += part.size
    whole = np.concatenate(parts)
    assert whole.dtype == np.float64
    same_report(acc.compute(), roc.evaluate_pairs(genuine, whole, mode=mode, range=(0.9, 1.1)))


def test_a_float32_stream_stays_float32(rng):
    genuine = rng.random(100) < 0.5
    score = rng.normal(size=100).astype(np.float32)
    acc = roc.RocAccumulator()
    acc.update(genuine[:50], score[:50])
    acc.update(genuine[50:], score[50:])
    same_report(acc.compute(), roc.evaluate_pairs(genuine, score))


# ---------------------------------------------------------------------------
# Hypothesis: value sets

@st.composite
def value_sets(draw):
    """(genuine, float64 scores) drawn from a few base values and small
    multiples of their ulp (collisions in float32), NaN and infinities."""
    bases = draw(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=3))
    n = draw(st.integers(2, 60))
    picks = draw(st.lists(st.tuples(st.integers(0, len(bases) - 1), st.integers(-5, 5),
                                    st.booleans()), min_size=n, max_size=n))
    specials = draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0]),
                             max_size=4))
    score = np.array([bases[b] + k * np.spacing(bases[b]) for b, k, _ in picks] + specials)
    genuine = np.array([g for _, _, g in picks] + [i % 2 == 0 for i in range(len(specials))])
    genuine[:2] = (True, False)
    score[:2] = np.nan_to_num(score[:2], nan=1.0)  # one genuine and one impostor counted
    return genuine, score


@given(value_sets())
def test_any_value_set_equals_sklearn_and_the_ranks(case):
    genuine, score = case
    for drop in (True, False):
        same_curve(roc.roc_curve_pairs(genuine, score, drop_intermediate=drop),
                   sk_reference(genuine, score, drop))
    ranks, distinct = as_ranks(score)
    # every distinct score's scale (nearest_sklearn) and the genuine levels' (the
    # other rules), from NumPy and torch
    for options in (dict(far_rule="nearest_sklearn"), dict(eer_rule="nearest_mean"),
                    dict(far_rule="first_above", max_fpr=0.5)):
        want = roc.evaluate_pairs(genuine, ranks, **options)
        for kind in ("numpy", "torch"):
            same_report(roc.evaluate_pairs(as_kind(genuine, kind), as_kind(score, kind),
                                           **options), want, distinct)


@given(value_sets())
def test_genuine_levels_scale_keeps_what_exact_mode_compares(case):
    """The genuine levels' surrogates (torch's) keep the order and every
    equality; each genuine score, and each gap's lowest and highest score (a
    gap: the scores between two genuine ones, or beyond them), is apart from
    every other score and maps back to itself; only a gap's middle may
    merge."""
    genuine, score = case
    kept = ~np.isnan(score)
    levels = sorted(set((score[genuine & kept] + 0.0).tolist()))
    values = sorted(set((score[kept] + 0.0).tolist()))
    gaps = {}
    for v in values:
        if v not in levels:
            gaps.setdefault(sum(level < v for level in levels), []).append(v)
    apart = levels + [g[0] for g in gaps.values()] + [g[-1] for g in gaps.values()]
    scale, surrogate = _float64._levels_scale("test", torch.from_numpy(score),
                                              torch.from_numpy(genuine))
    surrogate = surrogate.double().numpy()
    assert np.array_equal(np.isnan(surrogate), ~kept)
    of = {}
    for v, sv in zip((score[kept] + 0.0).tolist(), surrogate[kept].tolist()):
        assert of.setdefault(v, sv) == sv  # equal scores, one surrogate
    assert all(of[a] < of[b] if a in apart or b in apart else of[a] <= of[b]
               for a, b in zip(values, values[1:]))  # the order kept
    for v in apart:
        assert [w for w in values if of[w] == of[v]] == [v]
        assert scale.scores([of[v]]).tolist() == [v]


# ---------------------------------------------------------------------------
# two gloo ranks: the distinct scores of both, one report

def float64_data():
    rng = np.random.default_rng(64)
    d = {"labels_q": rng.integers(0, 5, 31), "labels_g": rng.integers(0, 5, 27)}
    d["score"] = 1.0 + rng.integers(0, 80, (31, 27)) * 1e-12
    d["score"][2, :3] = (np.nan, np.inf, -np.inf)
    d["genuine"], d["pair_score"] = colliding(rng, 900)
    return d


def float64_scenarios(d, rank, world, group):
    out = {}
    a, b = (0, 12) if rank == 0 else (12, 31)
    for mode in ("exact", "curve"):
        for far_rule in ("max_tpr", "nearest_sklearn"):
            out[("all", mode, far_rule)] = roc.evaluate(
                d["labels_q"][a:b], d["labels_g"], score=d["score"][a:b], mode=mode,
                far_rule=far_rule, eer_rule="nearest_mean", group=group)
    out["roc_curve"] = roc.roc_curve(d["labels_q"][a:b], d["labels_g"], score=d["score"][a:b],
                                     drop_intermediate=False, group=group)
    p, q = (0, 400) if rank == 0 else (400, 900)
    genuine, score = d["genuine"][p:q], d["pair_score"][p:q]
    if rank == 1 and world > 1:  # a rank whose scores are float32 joins with their values
        score = score.astype(np.float32)
    for mode in ("exact", "curve", "binned"):
        out[("pairs", mode)] = roc.evaluate_pairs(genuine, score, mode=mode, range=(0.9, 1.1),
                                                  group=group)
    out["roc_curve_pairs"] = roc.roc_curve_pairs(genuine, score, group=group)
    acc = roc.RocAccumulator(group=group)
    acc.update(genuine[:100], score[:100])
    acc.update(genuine[100:], score[100:])
    out["accumulator"] = acc.compute()
    return {k: _portable(v) for k, v in out.items()}


def _portable(result):
    """A report or a curve as plain lists (for the queue between processes)."""
    if isinstance(result, tuple):
        return tuple(plain(x) for x in result)
    return {"n": (result.n_genuine, result.n_impostor, result.n_nan, result.passes),
            "auc": result.auc, "eer": result.eer, "eer_threshold": plain([result.eer_threshold]),
            "curve": [plain(getattr(result, k)) for k in ("fpr", "tpr", "thresholds")],
            "tar": [(r.far, r.tar, plain([r.threshold]), r.false_accepts)
                    for r in result.tar_at_far],
            "counts": {k: plain(v) if isinstance(v, np.ndarray) else v
                       for k, v in result.counts.items()}}


def every_float64_scenario(rank, world):
    return float64_scenarios(float64_data(), rank, world, dist.group.WORLD)


def test_two_ranks_equal_one_process():
    d = float64_data()
    ranks = launch(every_float64_scenario, 2)
    # one process over the same pairs: rank 1's pair scores as it passed them
    d["pair_score"][400:] = d["pair_score"][400:].astype(np.float32)
    single = {}
    for mode in ("exact", "curve"):
        for far_rule in ("max_tpr", "nearest_sklearn"):
            single[("all", mode, far_rule)] = _portable(roc.evaluate(
                d["labels_q"], d["labels_g"], score=d["score"], mode=mode, far_rule=far_rule,
                eer_rule="nearest_mean"))
    single["roc_curve"] = _portable(roc.roc_curve(d["labels_q"], d["labels_g"],
                                                  score=d["score"], drop_intermediate=False))
    for mode in ("exact", "curve", "binned"):
        single[("pairs", mode)] = _portable(roc.evaluate_pairs(
            d["genuine"], d["pair_score"], mode=mode, range=(0.9, 1.1)))
    single["roc_curve_pairs"] = _portable(roc.roc_curve_pairs(d["genuine"], d["pair_score"]))
    single["accumulator"] = single[("pairs", "exact")]
    for rank in (0, 1):
        assert ranks[rank].keys() == single.keys()
        for key, want in single.items():
            assert ranks[rank][key] == want, (rank, key)


# ---------------------------------------------------------------------------
# the GPU: torch.unique and searchsorted on the device, the same curve

@pytest.mark.gpu
@pytest.mark.parametrize("drop_intermediate", [True, False])
def test_gpu_curves_equal_sklearn(rng, drop_intermediate):
    genuine, score = colliding(rng, 5000)
    cuda = torch.from_numpy(score).cuda()
    same_curve(roc.roc_curve_pairs(torch.from_numpy(genuine).cuda(), cuda,
                                   drop_intermediate=drop_intermediate),
               sk_reference(genuine, score, drop_intermediate))
    labels = rng.integers(0, 6, 50)
    matrix = score[:2500].reshape(50, 50)
    flat = (labels[:, None] == labels[None, :]).reshape(-1)
    same_curve(roc.roc_curve(torch.from_numpy(labels).cuda(), torch.from_numpy(labels).cuda(),
                             score=torch.from_numpy(matrix).cuda(),
                             drop_intermediate=drop_intermediate),
               sk_reference(flat, matrix.reshape(-1), drop_intermediate))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["exact", "curve", "binned"])
@pytest.mark.parametrize("far_rule", ["max_tpr", "nearest_sklearn"])
def test_gpu_reports_equal_the_cpu(rng, mode, far_rule):
    genuine, score = colliding(rng, 20000)
    options = dict(mode=mode, far_rule=far_rule, eer_rule="nearest_mean", range=(0.9, 1.1))
    same_report(roc.evaluate_pairs(torch.from_numpy(genuine).cuda(),
                                   torch.from_numpy(score).cuda(), **options),
                roc.evaluate_pairs(genuine, score, **options))
    if mode == "curve":  # RocAccumulator counts in exact or binned mode only
        return
    acc = roc.RocAccumulator(mode=mode, far_rule=far_rule, range=(0.9, 1.1), device="cuda")
    acc.update(genuine[:9000], score[:9000])
    acc.update(genuine[9000:], score[9000:].astype(np.float32))
    whole = np.concatenate([score[:9000], score[9000:].astype(np.float32)])
    same_report(acc.compute(), roc.evaluate_pairs(genuine, whole, mode=mode, far_rule=far_rule,
                                                  range=(0.9, 1.1)))
