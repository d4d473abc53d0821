"""rank.evaluate against the peers' formulas (tests/rank_peers.py): on
tie-free scores every ties policy equals every peer (counts exactly, rates to
float64 rounding); on tied scores "pessimistic" and "optimistic" equal the
peers on the list ordered that way, and "expected" equals the peers averaged
over every order of the ties."""

import math

import numpy as np
import pytest
import torch

import rank_peers as peers
from _ext import rank, roc

RTOL = 1e-12
TIES = ("expected", "pessimistic", "optimistic")


def market_like(rng, n_query=40, n_gallery=150, ids=12, cams=3, quantum=None):
    """Re-ID-like data: ids from 1, gallery ids 0 (distractors) and -1 (junk)
    too, cameras, and scores higher for mates; quantum: scores rounded to
    multiples of it (ties)."""
    labels_q = rng.integers(1, ids, n_query)
    labels_g = rng.integers(-1, ids, n_gallery)
    cams_q, cams_g = rng.integers(0, cams, n_query), rng.integers(0, cams, n_gallery)
    score = rng.normal(size=(n_query, n_gallery)) + 1.5 * (labels_q[:, None] == labels_g)
    if quantum:
        score = np.round(score / quantum) * quantum
    return labels_q, labels_g, cams_q, cams_g, score.astype(np.float32)


def relevance_lists(rows, ties):
    return [[e[2] for e in peers.ranked(row, ties)] for row in rows]


def assert_closed_set(report, expected, ap="noninterpolated"):
    assert report.n_mated == expected["n_mated"]
    np.testing.assert_allclose(report.cmc, expected["cmc"], rtol=RTOL, atol=1e-15)
    np.testing.assert_allclose(report.mean_ap, expected["trapezoid_ap" if ap == "trapezoid"
                                                        else "mean_ap"], rtol=RTOL)
    for name in ("mean_inp", "map_at_r", "r_precision", "precision_at_1"):
        np.testing.assert_allclose(getattr(report, name), expected[name], rtol=RTOL,
                                   err_msg=name)


# ---------------------------------------------------------------------------
# closed set: torchreid / fast-reid, layumi, pytorch-metric-learning

@pytest.mark.parametrize("ties", TIES)
@pytest.mark.parametrize("ap", ("noninterpolated", "trapezoid"))
def test_tie_free_market_protocol_equals_the_peers(rng, ties, ap):
    lq, lg, cq, cg, score = market_like(rng)
    rows = peers.candidates(score, lq, lg, cq, cg, junk=-1)
    expected = peers.mean_metrics(peers.list_metrics(relevance_lists(rows, "none"), 20))
    report = rank.evaluate(lq, lg, score=score, cams_q=cq, cams_g=cg, max_rank=20, ties=ties,
                           ap=ap, per_query=True)
    assert_closed_set(report, expected, ap)
    assert report.n_skipped == report.n_queries - expected["n_mated"]


def test_counts_equal_brute_force(rng):
    """Above and tied by mated pair, best non-mate and non-mates by query,
    exactly, with cameras and junk."""
    lq, lg, cq, cg, score = market_like(rng, quantum=0.25)
    report = rank.evaluate(lq, lg, score=score, cams_q=cq, cams_g=cg, per_query=True)
    pq = report.per_query
    rows = peers.candidates(score, lq, lg, cq, cg, junk=-1)
    for i, row in enumerate(rows):
        mates = sorted((np.float32(s), j) for j, s, m in row if m)
        non = [(s, j) for j, s, m in row if not m]
        at = pq["mate_query"] == i
        assert [(np.float32(s), j) for s, j in zip(pq["mate_score"][at], pq["mate_index"][at])] \
            == mates
        assert pq["mate_above"][at].tolist() == [sum(n > s for n, _ in non) for s, _ in mates]
        assert pq["mate_tied"][at].tolist() == [sum(n == s for n, _ in non) for s, _ in mates]
        assert pq["n_nonmates"][i] == len(non)
        if non:
            best = max(n for n, _ in non)
            assert pq["best_nonmate_score"][i] == best
            assert pq["best_nonmate_index"][i] == min(j for n, j in non if n == best)
        else:
            assert pq["best_nonmate_index"][i] == -1
    assert report.n_nonmated_pairs == sum(pq["n_nonmates"])


@pytest.mark.parametrize("ties", ("pessimistic", "optimistic"))
@pytest.mark.parametrize("ap", ("noninterpolated", "trapezoid"))
def test_tied_scores_equal_the_peers_in_the_policy_order(rng, ties, ap):
    lq, lg, cq, cg, score = market_like(rng, quantum=0.5)
    rows = peers.candidates(score, lq, lg, cq, cg, junk=-1)
    expected = peers.mean_metrics(peers.list_metrics(relevance_lists(rows, ties), 30))
    report = rank.evaluate(lq, lg, score=score, cams_q=cq, cams_g=cg, max_rank=30, ties=ties,
                           ap=ap, per_query=True)
    assert_closed_set(report, expected, ap)
    # each mate's rank: its position in that order
    for i, row in enumerate(rows):
        order = peers.ranked(row, ties)
        at = report.per_query["mate_query"] == i
        positions = {e[0]: p for p, e in enumerate(order, 1) if e[2]}
        assert report.per_query["mate_rank"][at].tolist() == \
            [positions[j] for j in report.per_query["mate_index"][at]]


@pytest.mark.parametrize("seed", range(6))
def test_expected_ties_average_every_order(seed):
    """Tiny tied cases: "expected" equals the peers' metrics averaged over
    every order of the tied entries, and each mate's rank its mean position."""
    rng = np.random.default_rng(seed)
    n_query, n_gallery = 4, 7
    lq, lg = rng.integers(0, 3, n_query), rng.integers(0, 3, n_gallery)
    score = rng.integers(0, 3, (n_query, n_gallery)).astype(np.float32)
    rows = peers.candidates(score, lq, lg, junk=None)
    per_list, mean_ranks = [], []
    for row in rows:
        metrics, ranks = peers.expected_per_list(row, 5)
        per_list.append(metrics)
        mean_ranks.append(ranks)
    expected = peers.mean_metrics(per_list)
    for ap in ("noninterpolated", "trapezoid"):
        report = rank.evaluate(lq, lg, score=score, junk=None, max_rank=5, ties="expected",
                               ap=ap, per_query=True)
        assert report.n_mated == expected["n_mated"]
        if expected["n_mated"] == 0:
            continue
        assert_closed_set(report, expected, ap)
        pq = report.per_query
        for i, ranks in enumerate(mean_ranks):
            at = pq["mate_query"] == i
            np.testing.assert_allclose(pq["mate_rank"][at],
                                       [ranks[j] for j in pq["mate_index"][at]], rtol=RTOL)


def test_expected_first_rank_is_the_mean_over_orders():
    # one query: 2 mates tied with 3 non-mates, 1 non-mate above
    labels_g = np.array([1, 1, 0, 0, 0, 0])
    score = np.array([[0.5, 0.5, 0.5, 0.5, 0.5, 0.9]], np.float32)
    row = peers.candidates(score, np.array([1]), labels_g, junk=None)[0]
    firsts = [next(p for p, e in enumerate(order, 1) if e[2]) for order in peers.tie_orders(row)]
    report = rank.evaluate([1], labels_g, score=score, per_query=True)
    np.testing.assert_allclose(report.per_query["first_rank"], [np.mean(firsts)], rtol=RTOL)
    assert report.per_query["first_rank"][0] == 1 + 1 + 3 / 3


@pytest.mark.parametrize("ties", TIES)
def test_same_set_retrieval_equals_pytorch_metric_learning(rng, ties):
    """SOP-style retrieval within one set: each query's own row excluded, R its
    other same-label entries; queries alone with their label skipped."""
    labels = rng.integers(0, 15, 60)
    feat = rng.normal(size=(60, 16)).astype(np.float32)
    score = roc.pair_scores(feat, feat)
    rows = peers.candidates(score, labels, labels, junk=None, same_set=True)
    expected = peers.mean_metrics(peers.list_metrics(relevance_lists(rows, "none"), 10))
    report = rank.evaluate(labels, feat_q=feat, same_set=True, junk=None, max_rank=10,
                           ties=ties)
    assert_closed_set(report, expected)
    assert report.n_unmated == sum(1 for row in rows if not any(e[2] for e in row))


def test_features_score_the_same_bits_as_roc(rng):
    """From features, the counts are those of the score matrix roc.pair_scores
    makes (the evaluator's FMA chain): the same report, field for field."""
    lq, lg = rng.integers(0, 9, 37), rng.integers(0, 9, 203)
    fq = rng.normal(size=(37, 33)).astype(np.float32)
    fg = rng.normal(size=(203, 33)).astype(np.float32)
    for similarity in ("cosine", "dot"):
        score = roc.pair_scores(fq, fg, similarity=similarity)
        kwargs = dict(topk=7, per_query=True, fpir_rule="insightface_studio")
        a = rank.evaluate(lq, lg, feat_q=fq, feat_g=fg, similarity=similarity, **kwargs)
        b = rank.evaluate(lq, lg, score=score, **kwargs)
        assert a.to_dict() == b.to_dict()
        for name in a.per_query:
            np.testing.assert_array_equal(a.per_query[name], b.per_query[name])
        np.testing.assert_array_equal(a.topk[0], b.topk[0])
        np.testing.assert_array_equal(a.topk[1], b.topk[1])


def test_topk_is_a_stable_sort_of_the_counted_entries(rng):
    lq, lg, cq, cg, score = market_like(rng, n_query=9, n_gallery=40, quantum=0.5)
    score[2, 5] = np.nan
    report = rank.evaluate(lq, lg, score=score, cams_q=cq, cams_g=cg, topk=12)
    rows = peers.candidates(score, lq, lg, cq, cg, junk=-1)
    for i, row in enumerate(rows):
        best = sorted(row, key=lambda e: (-e[1], e[0]))[:12]
        index, value = report.topk[0][i], report.topk[1][i]
        assert index[:len(best)].tolist() == [e[0] for e in best]
        assert value[:len(best)].tolist() == [np.float32(e[1]) for e in best]
        assert (index[len(best):] == -1).all() and np.isnan(value[len(best):]).all()


# ---------------------------------------------------------------------------
# open set: TPIR at FPIR

FPIRS = (0.0, 0.01, 0.05, 0.1, 0.3, 1.0)


def face_like(rng, n_probe=200, n_ids=60, known=0.6, per_id=1, quantum=None):
    """A face 1:N set: a gallery of per_id templates for each of n_ids ids,
    probes with a gallery id (a `known` share) or none."""
    gallery_ids = np.repeat(np.arange(n_ids), per_id)
    probe_ids = np.where(rng.random(n_probe) < known, rng.integers(0, n_ids, n_probe),
                         n_ids + rng.integers(0, 1000, n_probe))
    score = rng.normal(size=(n_probe, len(gallery_ids))) + \
        2.0 * (probe_ids[:, None] == gallery_ids)
    if quantum:
        score = np.round(score / quantum) * quantum
    return probe_ids, gallery_ids, score.astype(np.float32)


def tpir_rows(report):
    return [(row.tpir, row.threshold) for row in report.tpir_at_fpir]


@pytest.mark.parametrize("ties", TIES)
def test_nist_tie_free(rng, ties):
    probe_ids, gallery_ids, score = face_like(rng)
    rows = peers.candidates(score, probe_ids, gallery_ids, junk=None)
    unmated = [i for i, row in enumerate(rows) if not any(e[2] for e in row)]

    def rank1(i):
        return float(peers.best_mate(rows[i]) > peers.best_nonmate(rows[i]))
    expected = peers.nist(rows, unmated, FPIRS, rank1)
    report = rank.evaluate(probe_ids, gallery_ids, score=score, junk=None, fpirs=FPIRS,
                           fpir_rule="nist", ties=ties)
    assert tpir_rows(report) == expected
    N = len(unmated)
    assert [row.below_resolution for row in report.tpir_at_fpir] == \
        [0 < f and f * N < 1 for f in FPIRS]
    assert report.n_unmated == N


@pytest.mark.parametrize("seed", range(4))
def test_nist_expected_ties_average_every_order(seed):
    rng = np.random.default_rng(seed)
    probe_ids, gallery_ids, score = face_like(rng, n_probe=12, n_ids=4, quantum=1.0)
    score = score[:, :4]
    gallery_ids = gallery_ids[:4]
    rows = peers.candidates(score, probe_ids, gallery_ids, junk=None)
    unmated = [i for i, row in enumerate(rows) if not any(e[2] for e in row)]

    def rank1(i):
        return np.mean([order[0][2] for order in peers.tie_orders(rows[i])])
    expected = peers.nist(rows, unmated, FPIRS, rank1)
    report = rank.evaluate(probe_ids, gallery_ids, score=score, junk=None, fpirs=FPIRS,
                           fpir_rule="nist", ties="expected")
    for (tpir, threshold), (want_tpir, want_threshold) in zip(tpir_rows(report), expected):
        if math.isnan(want_tpir):
            assert math.isnan(tpir)
        else:
            assert threshold == want_threshold
            np.testing.assert_allclose(tpir, want_tpir, rtol=RTOL)


@pytest.mark.parametrize("quantum", (None, 0.5))
def test_insightface_ijb_equals_evaluation_1N(rng, quantum):
    probe_ids, gallery_ids, score = face_like(rng, quantum=quantum)
    thresholds, recalls = peers.insightface_ijb(score, probe_ids, gallery_ids, FPIRS)
    report = rank.evaluate(probe_ids, gallery_ids, score=score, junk=None, fpirs=FPIRS,
                           fpir_rule="insightface_ijb")
    assert [row.threshold for row in report.tpir_at_fpir] == [float(t) for t in thresholds]
    assert [row.tpir for row in report.tpir_at_fpir] == [float(r) for r in recalls]


@pytest.mark.parametrize("quantum", (None, 0.5))
def test_insightface_1n_legacy_equals_ijb_1n(rng, quantum):
    probe_ids, gallery_ids, score = face_like(rng, known=1.0, quantum=quantum)
    fars = tuple(f for f in FPIRS if f > 0)
    thresholds, recalls = peers.insightface_1n_legacy(score, probe_ids, fars)
    report = rank.evaluate(probe_ids, gallery_ids, score=score, junk=None, fpirs=fars,
                           fpir_rule="insightface_1n_legacy")
    assert [row.threshold for row in report.tpir_at_fpir] == [float(t) for t in thresholds]
    assert [row.tpir for row in report.tpir_at_fpir] == [float(r) for r in recalls]
    zero = rank.evaluate(probe_ids, gallery_ids, score=score, fpirs=0.0,
                         fpir_rule="insightface_1n_legacy").tpir_at_fpir[0]
    assert math.isnan(zero.tpir) and zero.below_resolution


def test_insightface_studio_equals_the_studio(rng):
    probe_ids, gallery_ids, score = face_like(rng, per_id=3)
    known = np.isin(probe_ids, gallery_ids)
    fars = (1e-5, 1e-3, 0.01, 0.05, 0.1, 0.5, 1.0)
    thresholds, tars = peers.insightface_studio(score, probe_ids, gallery_ids, known, fars)
    report = rank.evaluate(probe_ids, gallery_ids, score=score, junk=None, fpirs=fars,
                           fpir_rule="insightface_studio")
    got = report.tpir_at_fpir
    for row, threshold, tar in zip(got, thresholds, tars):
        if math.isnan(tar):
            assert math.isnan(row.tpir) and row.below_resolution
        else:
            assert (row.threshold, row.tpir) == (threshold, tar)
            assert not row.below_resolution


# ---------------------------------------------------------------------------
# the GPU (the lead's GPU run): the CPU's report, count for count

def cuda(x):
    return None if x is None else torch.from_numpy(np.ascontiguousarray(x)).cuda()


def same_on_gpu(lq, lg, kwargs, **arrays):
    """The GPU's report of these inputs is the CPU's, count for count."""
    cpu = rank.evaluate(lq, lg, per_query=True, **arrays, **kwargs)
    gpu = rank.evaluate(cuda(lq), cuda(lg), per_query=True,
                        **{name: cuda(x) for name, x in arrays.items()}, **kwargs)
    on_gpu, on_cpu = gpu.to_dict(), cpu.to_dict()
    assert on_gpu.pop("device_bytes_peak") > 0 and on_cpu.pop("device_bytes_peak") == 0
    assert on_gpu == on_cpu
    assert set(gpu.per_query) == set(cpu.per_query)
    for name in cpu.per_query:
        np.testing.assert_array_equal(gpu.per_query[name], cpu.per_query[name])
    assert (gpu.topk is None) == (cpu.topk is None)
    if cpu.topk is not None:
        for on_gpu, on_cpu in zip(gpu.topk, cpu.topk):
            np.testing.assert_array_equal(on_gpu, on_cpu)


def same_on_gpu_protocol(rng, source, protocol, kwargs):
    """same_on_gpu on tied scores (quantized), a gallery that spans several of
    the GPU's tiles with edges, NaN pairs (gallery entry 3's features NaN),
    and `protocol`: "plain", the Market protocol's "cameras" or "junk" ids, or
    "same_set" (one set's own rows); the score matrix or features (`source`)."""
    n_query, n_gallery, dim = 300, 700, 16
    lq, lg, cq, cg, score = market_like(rng, n_query, n_gallery, ids=40, quantum=0.05)
    fq = np.round(rng.normal(size=(n_query, dim)), 1).astype(np.float32)
    fg = np.round(rng.normal(size=(n_gallery, dim)), 1).astype(np.float32)
    score[rng.random(score.shape) < 0.002] = np.nan
    fg[3, 0] = np.nan
    if protocol == "cameras":
        kwargs = dict(kwargs, cams_q=cq, cams_g=cg)
    if protocol == "junk":
        lg[::7] = -1
    arrays = dict(score=score) if source == "score" else dict(feat_q=fq, feat_g=fg)
    if protocol == "same_set":
        sq = np.round(rng.normal(size=(n_gallery, dim)), 1).astype(np.float32)
        arrays = (dict(score=np.round(sq @ sq.T, 1)) if source == "score"
                  else dict(feat_q=sq))
        same_on_gpu(lg, None, dict(kwargs, same_set=True), **arrays)
        return
    same_on_gpu(lq, lg, kwargs, **arrays)


@pytest.mark.gpu
@pytest.mark.parametrize("source", ["score", "features"])
@pytest.mark.parametrize("protocol", ["plain", "cameras", "junk", "same_set"])
@pytest.mark.parametrize("ties", ["pessimistic", "expected"])
def test_cuda_inputs_equal_the_cpu(rng, source, protocol, ties):
    """The counts and every metric, by tie policy."""
    same_on_gpu_protocol(rng, source, protocol, dict(ties=ties, fpir_rule="nist"))


@pytest.mark.gpu
@pytest.mark.parametrize("source", ["score", "features"])
@pytest.mark.parametrize("protocol", ["plain", "cameras", "same_set"])
@pytest.mark.parametrize("block_pairs", [None, "1"])
def test_cuda_topk_and_kept_keys_equal_the_cpu(rng, monkeypatch, source, protocol, block_pairs):
    """topk (ties by index) and the insightface_1n_legacy rule's kept keys on
    the GPU: in one block of rows, or (EXT_RANK_SELECT_PAIRS=1) a block per row
    (or row tile) with the kept keys sorted and cut after each."""
    if block_pairs:
        monkeypatch.setenv("EXT_RANK_SELECT_PAIRS", block_pairs)
    same_on_gpu_protocol(rng, source, protocol, dict(
        topk=7, fpir_rule="insightface_1n_legacy", fpirs=(0.001, 0.1, 0.5)))


@pytest.mark.gpu
def test_cuda_topk_of_wide_rows_and_k_of_100(rng):
    """Rows of 5,000 entries (the candidates merged many times a row), k = 100
    (the most), and k above a row's entries (-1 / NaN past them)."""
    lq, lg, cq, cg, score = market_like(rng, 60, 5000, ids=30, quantum=0.01)
    same_on_gpu(lq, lg, dict(topk=100), score=score)
    lq, lg, cq, cg, score = market_like(rng, 20, 50, ids=5)
    lg[:45] = -1  # junk: 5 entries a row at most
    same_on_gpu(lq, lg, dict(topk=9), score=score)
