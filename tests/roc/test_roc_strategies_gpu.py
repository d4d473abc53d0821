"""How the GPU evaluator counts, strategy by strategy, against the CPU count
for count (GPU machine): the operands prepared a block at a time and steps of
a few rows; more genuine levels than a block's shared counters (global
counters, the level index); the partitioned count and the plan's choice of
it; keys set aside; binned whole tiles; lists of pairs counted by sorting.
The tests steer the plan through EXT_ROC_STRATEGY and the size variables
that src/cuda/roc_eval_plan.cuh lists; the counts are the same whatever
they say."""

import functools
import time

import numpy as np
import pytest
import torch
from test_roc_api import (assert_curve_equal, assert_reports_equal, gpu_cpu_pair, hard_pairs,
                          hint_rows, sample, spread_scores)
from test_roc_pairs import flat_pairs

from _ext import roc

# the seeds of the file these tests were split from (conftest.py's rng)
SEED_FILE = "test_roc_eval.py"


# ---------------------------------------------------------------------------
# the feature pass's operands and steps

@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["exact", "binned", "curve"])
@pytest.mark.parametrize("source", ["features", "unordered", "ordered"])
def test_gpu_features_in_blocks(rng, monkeypatch, mode, source):
    """The feature pass with its operands prepared a block at a time: 64 KiB
    for a gallery chunk (256 rows of 48 floats, 12 chunks) and 32 KiB for a
    query block (128 rows, 6 blocks), steps that start inside a block."""
    monkeypatch.setenv("EXT_ROC_OPERAND_KIB", "64")
    labels_q, labels_g, _ = sample(rng, 700, 3000, n_ids=60)
    feat_q = rng.normal(size=(700, 40)).astype(np.float32)
    feat_g = rng.normal(size=(3000, 40)).astype(np.float32)
    kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g)
    if source != "features":
        kwargs = dict(labels_q=labels_g, labels_g=labels_g, feat_q=feat_g, same_set=source)
    fn = roc.roc_curve if mode == "curve" else functools.partial(roc.evaluate, mode=mode)
    cpu, gpu = gpu_cpu_pair(fn, chunk=300 * 3000, **kwargs)
    if mode == "curve":
        assert_curve_equal(gpu, cpu)
    else:
        assert_reports_equal(gpu, cpu)
    scores = roc.pair_scores(torch.from_numpy(feat_q).cuda(), torch.from_numpy(feat_g).cuda())
    np.testing.assert_array_equal(scores.cpu().numpy(), roc.pair_scores(feat_q, feat_g))


@pytest.mark.gpu
def test_gpu_query_block_holds_a_step(rng, monkeypatch):
    """Told the rows of its calls, the feature pass prepares a query block of
    one call's rows and a tile, not the whole 128 MiB block: 8,192 queries of
    512 floats take 16 MiB at once, a step of 256 rows 0.75 MiB. The stored
    tiles are the same size in both (EXT_ROC_CHUNK_TILES), so the memory
    peaks differ by the query blocks alone; the counts do not differ."""
    monkeypatch.setenv("EXT_ROC_CHUNK_TILES", "8")
    generator = torch.Generator(device="cuda").manual_seed(7)
    labels_q = torch.from_numpy(rng.integers(0, 512, 8192)).cuda()
    labels_g = torch.arange(4096, device="cuda") % 512
    feat_q = torch.randn(8192, 512, device="cuda", generator=generator)
    feat_g = torch.randn(4096, 512, device="cuda", generator=generator)
    kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g,
                  mode="binned")
    whole = roc.evaluate(**kwargs)
    steps = roc.evaluate(chunk=256 * 4096, **kwargs)
    for name, value in whole.counts.items():
        np.testing.assert_array_equal(np.asarray(steps.counts[name]), np.asarray(value))
    assert whole.device_bytes_peak - steps.device_bytes_peak >= 12 << 20


@pytest.mark.gpu
def test_gpu_ten_billion_pairs_from_features():
    """50,000 x 200,000 pairs (10^10), D = 512, from features: runs in bounded
    memory, and the exact and binned results count the same pairs."""
    n_query, n_gallery, dim, n_ids = 50_000, 200_000, 512, 50_000
    generator = torch.Generator(device="cuda").manual_seed(10)
    centres = torch.nn.functional.normalize(
        torch.randn(n_ids, dim, device="cuda", generator=generator), dim=1)
    labels_q = torch.arange(n_query, device="cuda") % n_ids
    labels_g = torch.randint(n_ids, 4 * n_ids, (n_gallery,), device="cuda", generator=generator)
    labels_g[:n_ids] = torch.arange(n_ids, device="cuda")  # one genuine match per query
    feat_q = centres[labels_q] + 0.8 * torch.randn(n_query, dim, device="cuda",
                                                  generator=generator) / dim ** 0.5
    feat_g = torch.randn(n_gallery, dim, device="cuda", generator=generator) / dim ** 0.5
    feat_g[:n_ids] += centres
    torch.cuda.synchronize()
    results = {}
    for mode in ("exact", "binned"):
        start = time.perf_counter()
        report = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode)
        seconds = time.perf_counter() - start
        results[mode] = report
        print("\n10^10 pairs, %s: %.2f s, evaluator's peak device memory %.1f MiB, %r"
              % (mode, seconds, report.device_bytes_peak / 2**20, report))
        print(report.table())
        assert report.device_bytes_peak < 4 * 2**30
    exact, binned = results["exact"], results["binned"]
    assert exact.n_genuine + exact.n_impostor + exact.n_nan == n_query * n_gallery
    assert (exact.n_genuine, exact.n_impostor, exact.n_nan) == \
        (binned.n_genuine, binned.n_impostor, binned.n_nan)
    assert exact.n_genuine == n_query
    assert abs(exact.auc - binned.auc) < 1e-3


# ---------------------------------------------------------------------------
# more genuine levels than a block's shared counters: global counters, the level index

@pytest.mark.gpu
def test_gpu_many_genuine_levels(rng):
    """More genuine levels than fit in shared memory: the global counters."""
    n = 12000
    labels = np.arange(n) % 1200  # ten samples a label: 120,000 genuine pairs
    feats = rng.normal(size=(n, 16)).astype(np.float32)
    cpu, gpu = gpu_cpu_pair(roc.evaluate, labels_q=labels, labels_g=labels, feat_q=feats,
                            feat_g=feats)
    assert cpu.counts["genuine_scores"].size > 12_288
    assert_reports_equal(gpu, cpu)


@pytest.mark.gpu
@pytest.mark.parametrize("spread", ["similarity", "binades"])
def test_gpu_level_index_loads(rng, spread):
    labels_q, labels_g, score = spread_scores(rng, spread, 600, 8000)
    cpu = roc.evaluate(labels_q, labels_g, score=score)
    gpu = roc.evaluate(*(torch.from_numpy(a).cuda() for a in (labels_q, labels_g)),
                       score=torch.from_numpy(score).cuda())
    for name, value in cpu.counts.items():
        np.testing.assert_array_equal(np.asarray(gpu.counts[name]), np.asarray(value))


@pytest.mark.gpu
@pytest.mark.parametrize("source", ["score", "features"])
@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_gpu_many_levels_inside_the_impostor_mass(rng, source, mode):
    """Thousands of levels: the GPU's global gap counters and its index."""
    labels_q, labels_g, score = hard_pairs(rng, 600, 8000)
    kwargs = (dict(score=score) if source == "score" else
              dict(feat_q=rng.normal(size=(600, 16)).astype(np.float32),
                   feat_g=rng.normal(size=(8000, 16)).astype(np.float32)))
    cpu = roc.evaluate(labels_q, labels_g, mode=mode, **kwargs)
    gpu = roc.evaluate(torch.from_numpy(labels_q).cuda(), torch.from_numpy(labels_g).cuda(),
                       mode=mode, **{k: torch.from_numpy(v).cuda() for k, v in kwargs.items()})
    for name, value in cpu.counts.items():
        np.testing.assert_array_equal(np.asarray(gpu.counts[name]), np.asarray(value))
    np.testing.assert_array_equal(gpu.false_accepts, cpu.false_accepts)


@pytest.mark.gpu
@pytest.mark.parametrize("features", ["integer dot", "normal cosine"])
@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_gpu_more_levels_than_shared_counters(rng, features, mode):
    """12,000+ genuine levels from features, more than a block's shared gap
    counters hold (7,167): the feature pass's global counters, its pairs looked
    up side by side (the first chunk of tiles; the rest partitioned, since
    every pair lies among the levels). Integer features scored by dot products tie a third of
    the impostors with a genuine level; normal ones almost none."""
    n_ids, per_id, n_query = 4000, 4, 4000
    labels_g = np.repeat(np.arange(n_ids), per_id)
    labels_q = rng.permutation(n_ids)[:n_query]
    if features == "integer dot":
        feat_q = rng.integers(-150, 151, (n_query, 2)).astype(np.float32)
        feat_g = rng.integers(-150, 151, (n_ids * per_id, 2)).astype(np.float32)
        similarity, score_range = "dot", (-45000.0, 45000.0)
    else:
        feat_q = rng.normal(size=(n_query, 16)).astype(np.float32)
        feat_g = rng.normal(size=(n_ids * per_id, 16)).astype(np.float32)
        similarity, score_range = "cosine", (-1.0, 1.0)
    kwargs = dict(mode=mode, similarity=similarity, range=score_range, bins=100000)
    cpu = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, **kwargs)
    gpu = roc.evaluate(*(torch.from_numpy(a).cuda() for a in (labels_q, labels_g)),
                       feat_q=torch.from_numpy(feat_q).cuda(),
                       feat_g=torch.from_numpy(feat_g).cuda(), **kwargs)
    if mode == "exact":
        assert len(cpu.counts["genuine_scores"]) > 12000
    for name, value in cpu.counts.items():
        np.testing.assert_array_equal(np.asarray(gpu.counts[name]), np.asarray(value))
    np.testing.assert_array_equal(gpu.false_accepts, cpu.false_accepts)
    np.testing.assert_array_equal(gpu.thresholds, cpu.thresholds)


# ---------------------------------------------------------------------------
# the partitioned count, and the plan's choice of it

@pytest.mark.gpu
@pytest.mark.parametrize("features", ["integer dot", "normal cosine", "outliers", "binades"])
@pytest.mark.parametrize("source", ["features", "unordered", "ordered"])
def test_gpu_partitioned_count(rng, monkeypatch, features, source):
    """Tens of thousands of genuine levels from features: the partitioned
    exact count (roc_count.cuh). Each call runs four times: with the default
    keys' buffer; with one of 16,384 keys, so launches are a tile a block and
    segments fill (the keys past them are counted directly); and with range
    indexes of 12 and 64 buckets, so that each holds thousands of levels and
    ranges start where a bucket starts (its keys below the range's lowest
    level counted there), inside one (its keys bisect), or both; then with
    wide ranges (EXT_ROC_RANGE_LEVELS=16384, the drain's other layout), the
    other knobs as they were and then unset. Integer
    features scored by dot products put many impostors exactly on a level;
    normal ones spread the levels among the impostors; "outliers" keeps every
    genuine score high but a few, so the impostors above the lowest level
    crowd one range; "binades" scales the features by 2^-20 to 2^20, so the
    scores of either sign span some 80 octaves, from tiny magnitudes to huge
    ones."""
    n_ids, per_id = (5000, 4) if source == "features" else (3000, 4)
    labels_g = np.repeat(np.arange(n_ids), per_id)
    labels_q = rng.permutation(n_ids)
    dim = 3 if features == "integer dot" else 16
    if features == "integer dot":
        feat_q = rng.integers(-120, 121, (n_ids, dim)).astype(np.float32)
        feat_g = rng.integers(-120, 121, (n_ids * per_id, dim)).astype(np.float32)
        kwargs = dict(similarity="dot")
    elif features == "binades":
        feat_q, feat_g = (rng.normal(size=(n, dim)) * 2.0 ** rng.integers(-20, 21, (n, 1))
                          for n in (n_ids, n_ids * per_id))
        feat_q, feat_g = feat_q.astype(np.float32), feat_g.astype(np.float32)
        kwargs = dict(similarity="dot")
    else:
        feat_q = rng.normal(size=(n_ids, dim)).astype(np.float32)
        feat_g = rng.normal(size=(n_ids * per_id, dim)).astype(np.float32)
        kwargs = dict(similarity="cosine")
    if features == "outliers":
        feat_g = feat_q[labels_g] + 0.3 * feat_g
        feat_g[rng.choice(len(feat_g), 10, replace=False)] = rng.normal(size=(10, dim))
        feat_q = feat_q[labels_q]
    if source == "features":
        kwargs.update(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g)
    else:
        kwargs.update(labels_q=labels_g, labels_g=None, feat_q=feat_g, same_set=source)
    cpu = roc.evaluate(**kwargs)
    assert len(cpu.counts["genuine_scores"]) > 2 * 8192 or \
        (features == "integer dot" and len(cpu.counts["genuine_scores"]) > 8192)
    moved = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
             for k, v in kwargs.items()}
    monkeypatch.setenv("EXT_ROC_STRATEGY", "partition")  # else only after the probe
    knobs = ("EXT_ROC_PARTITION_KIB", "EXT_ROC_RANGE_BUCKETS", "EXT_ROC_DRAIN_BUCKET_BITS")
    for knob, value in ((None, None), ("EXT_ROC_PARTITION_KIB", "64"),
                        ("EXT_ROC_RANGE_BUCKETS", "12"), ("EXT_ROC_RANGE_BUCKETS", "64"),
                        ("EXT_ROC_DRAIN_BUCKET_BITS", "12"), ("EXT_ROC_RANGE_LEVELS", "16384"),
                        ("unset", None)):
        if knob == "unset":
            for name in knobs:
                monkeypatch.delenv(name, raising=False)
        elif knob:
            monkeypatch.setenv(knob, value)
        gpu = roc.evaluate(**moved)
        for name, value in cpu.counts.items():
            np.testing.assert_array_equal(np.asarray(gpu.counts[name]), np.asarray(value))
        np.testing.assert_array_equal(gpu.thresholds, cpu.thresholds)
        assert (gpu.n_genuine, gpu.n_impostor, gpu.auc) == (cpu.n_genuine, cpu.n_impostor,
                                                            cpu.auc)


@pytest.mark.gpu
def test_gpu_partitioned_count_crowded_gap(monkeypatch):
    """1.5M impostors in one gap, all of them counted by one drain block
    (EXT_ROC_DRAIN_SLICES=1), every lane's atomics on one shared counter and
    one lowest key: the gap's count and lowest key stay exact, as do the
    7,499 impostors on each level, with either drain layout (ranges of 8,192
    levels and of 16,384). Each query scores a gallery entry by its
    first feature: entry j < 7,500 scores 2j + 1 (a level with its own
    query, an impostor on that level with the others), and 200 entries no
    query shares score 2, between the levels 1 and 3."""
    n, pile = 7500, 200
    feat_q = np.zeros((n, 3), np.float32)
    feat_q[:, 0] = 1
    feat_g = np.zeros((n + pile, 3), np.float32)
    feat_g[:n, 0] = 2 * np.arange(n) + 1
    feat_g[n:, 0] = 2
    labels_q = np.arange(n)
    labels_g = np.arange(n + pile)  # entries n.. share no query's label
    kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g,
                  similarity="dot")
    cpu = roc.evaluate(**kwargs)
    assert cpu.counts["impostor_between"][1] == n * pile  # the gap after level 1
    moved = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
             for k, v in kwargs.items()}
    monkeypatch.setenv("EXT_ROC_STRATEGY", "partition")
    monkeypatch.setenv("EXT_ROC_DRAIN_SLICES", "1")
    for range_levels in ("8192", "16384"):
        monkeypatch.setenv("EXT_ROC_RANGE_LEVELS", range_levels)
        gpu = roc.evaluate(**moved)
        for name, value in cpu.counts.items():
            np.testing.assert_array_equal(np.asarray(gpu.counts[name]), np.asarray(value))
        np.testing.assert_array_equal(gpu.thresholds, cpu.thresholds)
        assert (gpu.n_impostor, gpu.auc) == (cpu.n_impostor, cpu.auc)


@pytest.mark.gpu
@pytest.mark.parametrize("tail", [True, False])
def test_gpu_count_chooses_partition(rng, monkeypatch, tail):
    """20,000 genuine levels from features, without EXT_ROC_STRATEGY:
    the first tiles are counted with global counters, the rest by partition
    only where half of their pairs or more lay at or above the lowest level
    (a tail of genuine scores among the impostors), which the partition's
    buffers (a launch's pairs and 30% more: 300 MiB on an H100) show in the
    memory peak. Small operand blocks make several blocks, so the counts add
    into one result."""
    n_ids, per_id, dim = 5000, 4, 16
    labels_g = np.repeat(np.arange(n_ids), per_id)
    labels_q = rng.permutation(n_ids)
    feat_q = rng.normal(size=(n_ids, dim)).astype(np.float32)
    feat_g = feat_q[labels_g] + 0.3 * rng.normal(size=(n_ids * per_id, dim)).astype(np.float32)
    if tail:
        feat_g[::8] = rng.normal(size=(len(feat_g[::8]), dim))
    kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q[labels_q], feat_g=feat_g,
                  similarity="cosine")
    cpu = roc.evaluate(**kwargs)
    assert len(cpu.counts["genuine_scores"]) > 8192
    below_lowest = cpu.counts["impostor_between"][0] / cpu.n_impostor
    assert below_lowest < 0.01 if tail else below_lowest > 0.99
    monkeypatch.delenv("EXT_ROC_STRATEGY", raising=False)
    monkeypatch.setenv("EXT_ROC_OPERAND_KIB", "256")
    gpu = roc.evaluate(**{k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
                          for k, v in kwargs.items()})
    for name, value in cpu.counts.items():
        np.testing.assert_array_equal(np.asarray(gpu.counts[name]), np.asarray(value))
    np.testing.assert_array_equal(gpu.thresholds, cpu.thresholds)
    partition_bytes = 256 << 20
    if tail:
        assert gpu.device_bytes_peak > partition_bytes
    else:
        assert gpu.device_bytes_peak < partition_bytes


# ---------------------------------------------------------------------------
# keys set aside, and the tiles stored ahead of the probe

def aside_workload(rng, features, n_ids=3000, per_id=4):
    """Features whose genuine levels outnumber a block's shared counters
    (7,167): "integer dot" ties many impostors with a level, "normal cosine"
    puts nearly every pair at or above the lowest level, "outliers" only a few
    percent (genuine scores high but for ten, at ~0.7)."""
    labels_g = np.repeat(np.arange(n_ids), per_id)
    labels_q = rng.permutation(n_ids)
    if features == "integer dot":
        feat_q = rng.integers(-120, 121, (n_ids, 3)).astype(np.float32)
        feat_g = rng.integers(-120, 121, (n_ids * per_id, 3)).astype(np.float32)
        return labels_q, labels_g, feat_q, feat_g, "dot"
    feat_q = rng.normal(size=(n_ids, 16)).astype(np.float32)
    feat_g = rng.normal(size=(n_ids * per_id, 16)).astype(np.float32)
    if features == "outliers":
        feat_g = feat_q[labels_g] + 0.3 * feat_g
        few = rng.choice(len(feat_g), 10, replace=False)
        feat_g[few] = feat_q[labels_g[few]] + rng.normal(size=(10, 16))
        feat_q = feat_q[labels_q]
    return labels_q, labels_g, feat_q, feat_g.astype(np.float32), "cosine"


@pytest.mark.gpu
@pytest.mark.parametrize("features", ["integer dot", "normal cosine", "outliers"])
@pytest.mark.parametrize("source", ["features", "unordered", "ordered"])
def test_gpu_keys_set_aside(rng, monkeypatch, features, source):
    """More genuine levels than the shared counters hold, not partitioned:
    after a first chunk of tiles counted directly, the count of each chunk
    of stored tiles sets the keys at or above the lowest level aside
    (roc_count.cuh's set_aside), each warp's keys kept from chunk to chunk
    until a kernel counts them (once the first chunk's share would have
    filled a quarter of each warp's share since, and after the pass's last
    chunk). Each call runs with the default buffer, then with one of 100,000
    keys, ~24 a warp, which fill (the keys past them counted in the pass),
    with 16 KiB operand blocks (several passes, the buffer
    emptied between them), and with chunks of 3 and of 5 tiles (many chunks;
    one set's skipped tiles among them; a last chunk of fewer blocks than
    the others, whose warps' keys wait for it)."""
    labels_q, labels_g, feat_q, feat_g, similarity = aside_workload(rng, features)
    if source == "features":
        kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g)
    else:
        kwargs = dict(labels_q=labels_g, labels_g=None, feat_q=feat_g, same_set=source)
    cpu = roc.evaluate(similarity=similarity, **kwargs)
    assert len(cpu.counts["genuine_scores"]) > 7200
    above = 1 - cpu.counts["impostor_between"][0] / cpu.n_impostor
    assert 0.001 < above < 0.1 if features == "outliers" else above > 0.5
    moved = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
             for k, v in kwargs.items()}
    monkeypatch.setenv("EXT_ROC_STRATEGY", "aside")  # never partitioned
    for env in ({}, {"EXT_ROC_ASIDE_KEYS": "100000"}, {"EXT_ROC_OPERAND_KIB": "16"},
                {"EXT_ROC_CHUNK_TILES": "3"}, {"EXT_ROC_CHUNK_TILES": "5"}):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        gpu = roc.evaluate(similarity=similarity, **moved)
        if not env:  # the set-aside count was chosen: its 2^24-key buffer
            assert gpu.device_bytes_peak >= 64 << 20
        for name, value in cpu.counts.items():
            np.testing.assert_array_equal(np.asarray(gpu.counts[name]), np.asarray(value))
        np.testing.assert_array_equal(gpu.thresholds, cpu.thresholds)
        for name in env:
            monkeypatch.delenv(name)


@pytest.mark.gpu
@pytest.mark.parametrize("features", ["normal cosine", "outliers", "integer dot"])
@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_gpu_tiles_stored_ahead(rng, monkeypatch, features, mode):
    """The feature pass's first chunk stored on a stream of its own while the
    genuine pairs are found (and, exact with more levels than the shared
    counters, the chunk after the probe while the host reads it), where the
    evaluator was told the rows of its add_rows calls: counted as stored when
    the first call's rows are those, made again when not (told 1 row, 200 or
    more than there are, while the calls count all rows or 256 at a time),
    never used where the evaluator was told nothing. Every count equals the
    CPU's; the partitioned count (normal cosine) and the keys set aside
    (outliers) both follow a probe."""
    labels_q, labels_g, feat_q, feat_g, similarity = aside_workload(rng, features)
    kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g,
                  similarity=similarity, mode=mode)
    cpu = roc.evaluate(**kwargs)
    moved = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
             for k, v in kwargs.items()}
    monkeypatch.setenv("EXT_ROC_CHUNK_TILES", "40")  # 57 chunks of the 2,256 tiles
    for rows in (None, 0, 1, 200, 10 ** 9):
        for chunk in (None, 256 * len(labels_g)):
            with monkeypatch.context() as told:
                if rows is not None:
                    hint_rows(told, rows)
                gpu = roc.evaluate(chunk=chunk, **moved)
            for name, value in cpu.counts.items():
                np.testing.assert_array_equal(np.asarray(gpu.counts[name]), np.asarray(value),
                                              err_msg="%s %s %s" % (name, rows, chunk))
            np.testing.assert_array_equal(gpu.thresholds, cpu.thresholds)


@pytest.mark.gpu
@pytest.mark.parametrize("features", ["easy", "outliers"])
def test_gpu_whole_tiles_below_the_lowest_level(rng, monkeypatch, features):
    """More genuine levels than the shared counters hold, nearly every
    impostor below the lowest one: in whole tiles, count_below counts a
    float4 of such scores at a time, and the float4s with a NaN (a query row
    and a gallery column of NaN features) or a score above the lowest level
    take the mode's path: the direct count where no pair lies above ("easy"),
    the set-aside one where a few do ("outliers"). With chunks of 2 tiles, a
    launch's top test starts from the block's top of the launches before."""
    labels_q, labels_g, feat_q, feat_g, _ = aside_workload(rng, "normal cosine")
    feat_g = feat_q[labels_g] + 0.1 * feat_g  # genuine scores ~0.99
    if features == "outliers":  # ten at 0.55, below ~1% of the impostors (16 dimensions)
        few = np.arange(20, 120, 10)
        unit_q = feat_q[labels_g[few]] / np.linalg.norm(feat_q[labels_g[few]], axis=1)[:, None]
        other = rng.normal(size=(len(few), feat_g.shape[1]))
        other -= (other * unit_q).sum(axis=1)[:, None] * unit_q
        other /= np.linalg.norm(other, axis=1)[:, None]
        feat_g[few] = 0.55 * unit_q + np.sqrt(1 - 0.55 ** 2) * other
    feat_q, feat_g = feat_q[labels_q], feat_g.astype(np.float32)
    feat_q[5] = np.nan
    feat_g[7, 0] = np.nan
    kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g)
    cpu = roc.evaluate(**kwargs)
    assert len(cpu.counts["genuine_scores"]) > 7200
    assert cpu.n_nan == len(feat_g) + len(feat_q) - 1
    above = 1 - cpu.counts["impostor_between"][0] / cpu.n_impostor
    assert above < 1 / 1024 if features == "easy" else 0.001 < above < 0.1
    moved = {k: torch.from_numpy(v).cuda() for k, v in kwargs.items()}
    monkeypatch.setenv("EXT_ROC_STRATEGY", "aside")  # never partitioned
    for chunk_tiles in (None, "2"):
        if chunk_tiles:
            monkeypatch.setenv("EXT_ROC_CHUNK_TILES", chunk_tiles)
        assert_reports_equal(roc.evaluate(**moved), cpu)


# ---------------------------------------------------------------------------
# binned counts of whole tiles

@pytest.mark.gpu
@pytest.mark.parametrize("bins,bin_range", [(40, (-20.0, 20.0)), (37, (-9.0, 13.0))])
def test_gpu_binned_whole_tiles(rng, bins, bin_range):
    """Binned from features in whole tiles: a float4 of scores is counted at
    once only where each score lies in the bin its position suggests;
    integer scores on the edges, scores outside the range, the top edge (in
    the last bin) and NaN (a query row and a gallery column) take the
    pair-by-pair path. Counts equal numpy.histogram's and the CPU's."""
    feat_q = rng.integers(-3, 4, (300, 4)).astype(np.float32)
    feat_g = rng.integers(-3, 4, (520, 4)).astype(np.float32)
    # both ends of each range among the scores, and scores past them
    feat_q[:20] = [5, 0, 0, 0]
    feat_q[20] = [1, 0, 0, 0]
    feat_g[:5] = [[4, 0, 0, 0], [-4, 0, 0, 0], [-9, 0, 0, 0], [13, 0, 0, 0], [0, 0, 0, 0]]
    feat_q[7] = np.nan
    feat_g[300, 2] = np.nan
    labels_q = rng.integers(0, 30, 300)
    labels_g = rng.integers(0, 30, 520)
    kwargs = dict(labels_q=labels_q, labels_g=labels_g, feat_q=feat_q, feat_g=feat_g,
                  similarity="dot", mode="binned", bins=bins, range=bin_range)
    cpu, gpu = gpu_cpu_pair(roc.evaluate, **kwargs)
    score = feat_q.astype(np.float64) @ feat_g.T.astype(np.float64)  # exact in float32
    genuine = labels_q[:, None] == labels_g[None, :]
    valid = ~np.isnan(score)
    assert np.isin(bin_range, score).all()  # scores on both ends of the range
    for name, selected in (("genuine", genuine & valid), ("impostor", ~genuine & valid)):
        expected, _ = np.histogram(score[selected].astype(np.float32), bins=bins,
                                   range=bin_range)
        np.testing.assert_array_equal(gpu.counts[name], expected)
    for name, value in cpu.counts.items():
        np.testing.assert_array_equal(np.asarray(gpu.counts[name]), np.asarray(value))
    assert gpu.n_nan == cpu.n_nan == 520 + 300 - 1
    assert_reports_equal(gpu, cpu)


# ---------------------------------------------------------------------------
# lists of pairs: counted by sorting

@pytest.mark.gpu
def test_gpu_pairs_with_millions_of_levels_equal_cpu(rng):
    """Past 2^20 genuine levels the GPU counts flat scores sorted, step by step."""
    genuine, score = flat_pairs(rng, 3_000_000, positive=0.5)
    score[::1000] = np.nan
    cpu = roc.evaluate_pairs(genuine, score)
    gpu = roc.evaluate_pairs(torch.from_numpy(genuine).cuda(), torch.from_numpy(score).cuda(),
                             chunk=1_000_000)
    assert len(cpu.counts["genuine_scores"]) > 1 << 20
    for name in ("genuine", "impostor_at", "impostor_between", "impostor_between_min"):
        np.testing.assert_array_equal(gpu.counts[name], cpu.counts[name])
    np.testing.assert_array_equal(gpu.false_accepts, cpu.false_accepts)
    assert (gpu.n_nan, gpu.auc) == (cpu.n_nan, cpu.auc)


@pytest.mark.gpu
def test_gpu_sorted_strategy_equals_cpu(rng, monkeypatch):
    """The sorted count of flat scores (EXT_ROC_STRATEGY=sorted: chosen
    whatever the levels), over several steps, NaN and infinite scores among them."""
    genuine, score = flat_pairs(rng, 200_000, "special")
    cpu = roc.evaluate_pairs(genuine, score)
    monkeypatch.setenv("EXT_ROC_STRATEGY", "sorted")
    gpu = roc.evaluate_pairs(torch.from_numpy(genuine).cuda(), torch.from_numpy(score).cuda(),
                             chunk=30_000)
    for name in ("genuine", "impostor_at", "impostor_between", "impostor_between_min"):
        np.testing.assert_array_equal(gpu.counts[name], cpu.counts[name])
    np.testing.assert_array_equal(gpu.thresholds, cpu.thresholds)
    assert (gpu.n_nan, gpu.auc) == (cpu.n_nan, cpu.auc)
