"""Small calls that cover every ROC kernel path, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 dev/sanitize_roc.py
    compute-sanitizer --tool initcheck python3 dev/sanitize_roc.py --small
    compute-sanitizer --tool racecheck python3 dev/sanitize_roc.py --race

(--small leaves out the 2000 x 2000 case; --race makes one call of each
kernel that shares memory between threads, since racecheck is slow;
--partition runs only the partitioned count's and the set-aside keys'
calls, and --rank only rank.evaluate's, with any tool.)

gpu_roc: 16-byte and scalar loads, shared-memory and global counters, rows
shorter than a vector, aligned rows of several segments, each label and
histogram dtype. evaluate/roc_curve:
every mode from a score matrix and from features, one set and two, int64,
int32 and float labels, partial
tiles, shared-memory and global counters, pair_scores; the feature
operands prepared a block at a time (EXT_ROC_OPERAND_KIB); ordered same-set
pairs and a shard of a set's rows; the partitioned exact count (tens of
thousands of levels from features, segments that fill) and the keys set
aside (a buffer that fills); lists of pairs (flat scores and listed
pairs from features, both index dtypes, every mode; flat scores counted
sorted); bad flags and indices; nearest_sklearn's probing passes and the
curve of every point. rank.evaluate (the 1:N count): a score matrix and
features, tile edges, NaN pairs, cameras, junk ids, one set, the top k and
the kept keys (one block of rows, a block a row, rows wider than a block's
candidates).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import rank, roc  # noqa: E402


def legacy_cases(generator):
    cases = [((1, 1), 1024), ((3, 5), 1024), ((129, 1027), 1024), ((33, 2052), 1024),
             ((64, 333), 300000), ((2, 3), 7)]
    for (n_query, n_gallery), nbins in cases:
        for label_dtype in (torch.float32, torch.int32, torch.int64):
            for histo_dtype in (torch.float32, torch.float64, torch.int64):
                score = torch.rand(n_query, n_gallery, device="cuda", generator=generator)
                score = score * 2.4 - 1.2
                labels_q = torch.randint(0, 5, (n_query,), device="cuda").to(label_dtype)
                labels_g = torch.randint(0, 5, (n_gallery,), device="cuda").to(label_dtype)
                histo1 = torch.zeros(nbins, dtype=histo_dtype, device="cuda")
                histo2 = torch.zeros(nbins, dtype=histo_dtype, device="cuda")
                roc.gpu_roc(score, histo1, histo2, labels_q, labels_g)
                unaligned = torch.empty(score.numel() + 1, device="cuda")[1:].view_as(score)
                unaligned.copy_(score)
                roc.gpu_roc(unaligned, histo1, histo2, labels_q, labels_g)
    return len(cases) * 9 * 2


def evaluator_cases(generator, small):
    ran = 0
    sizes = [(1, 2, 1, 2), (37, 129, 7, 5), (130, 260, 33, 40), (300, 700, 20, 10)]
    for n_query, n_gallery, dim, n_ids in sizes + ([] if small else [(2000, 2000, 8, 100)]):
        labels_q = torch.randint(0, n_ids, (n_query,), device="cuda", generator=generator)
        labels_g = torch.randint(0, n_ids, (n_gallery,), device="cuda", generator=generator)
        labels_q[0], labels_g[0], labels_g[1] = 0, 0, 1  # a genuine pair and an impostor
        feat_q = torch.randn(n_query, dim, device="cuda", generator=generator)
        feat_g = torch.randn(n_gallery, dim, device="cuda", generator=generator)
        score = roc.pair_scores(feat_q, feat_g)
        sources = [dict(score=score), dict(feat_q=feat_q, feat_g=feat_g)]
        for source in sources:
            for mode in ("exact", "binned"):
                roc.evaluate(labels_q, labels_g, mode=mode, chunk=5000, **source)
                ran += 1
            if n_ids == 10:  # thousands of genuine levels and of bins: global counters
                roc.evaluate(labels_q, labels_g, mode="binned", bins=8000, **source)
                ran += 1
            if n_query * n_gallery <= 40000:
                roc.roc_curve(labels_q, labels_g, chunk=5000, **source)
                ran += 1
        # int32 labels (a 32-bit sort of the gallery) and float ones (their bits)
        for cast in (torch.int32, torch.float32):
            roc.evaluate(labels_q.to(cast), labels_g.to(cast), score=score)
            ran += 1
        labels = torch.cat([labels_q, labels_q, labels_q + 1])
        feats = torch.cat([feat_q, feat_q + 0.1, feat_q - 0.1])
        for mode in ("exact", "binned"):
            for same_set in (True, "ordered"):
                roc.evaluate(labels, None, feat_q=feats, same_set=same_set, mode=mode)
                ran += 1
        ran += shard_cases(labels, feats)
    return ran + block_cases(generator, ("exact", "binned", "curve")) + \
        partition_cases(generator) + aside_cases(generator) + pair_list_cases(generator) + \
        far_rule_cases(generator)


def far_rule_cases(generator):
    """nearest_sklearn in exact mode, whose undecided rows the GPU leaves to
    probing passes (exact passes with the probed keys as levels, thousands of
    them): scores on a thousandth's grid (runs of tied impostors), from a score
    matrix and as a list of pairs, and from features; roc_curve of every
    point and of scikit-learn's kept points."""
    labels_q = torch.randint(0, 16, (60,), device="cuda", generator=generator)
    labels_g = torch.randint(0, 16, (90,), device="cuda", generator=generator)
    feat_q = torch.randn(60, 8, device="cuda", generator=generator)
    feat_g = torch.randn(90, 8, device="cuda", generator=generator)
    score = torch.round(roc.pair_scores(feat_q, feat_g) * 1000) / 1000
    genuine = (labels_q[:, None] == labels_g[None, :]).ravel()
    fars = tuple(i / 400 for i in range(401))
    reports = [roc.evaluate(labels_q, labels_g, score=score, fars=fars,
                            far_rule="nearest_sklearn"),
               roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, fars=fars,
                            far_rule="nearest_sklearn"),
               roc.evaluate_pairs(genuine, score.ravel(), fars=fars, far_rule="nearest_sklearn")]
    assert all(report.passes > 1 for report in reports), "no probing pass ran"
    for drop_intermediate in (False, True):
        roc.roc_curve(labels_q, labels_g, score=score, drop_intermediate=drop_intermediate)
        roc.roc_curve_pairs(genuine, score.ravel(), drop_intermediate=drop_intermediate)
    return 7


def partition_cases(generator):
    """Exact from features with two labels: ~30,000 genuine levels among as
    many impostors, the partitioned count (four ranges, or two wide ones), two
    sets and one; with the default keys' buffer and with one of 1,024 keys,
    whose segments fill (the keys past them counted directly)."""
    labels_q = torch.randint(0, 2, (200,), device="cuda", generator=generator)
    labels_g = torch.randint(0, 2, (300,), device="cuda", generator=generator)
    feat_q = torch.randn(200, 16, device="cuda", generator=generator)
    feat_g = torch.randn(300, 16, device="cuda", generator=generator)
    ran = 0
    os.environ["EXT_ROC_STRATEGY"] = "partition"  # else only after the probe
    for kib, range_levels in ((None, None), ("4", None), (None, "16384"), ("4", "16384")):
        if kib:
            os.environ["EXT_ROC_PARTITION_KIB"] = kib
        if range_levels:
            os.environ["EXT_ROC_RANGE_LEVELS"] = range_levels
        try:
            roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g)
            roc.evaluate(labels_g, None, feat_q=feat_g, same_set=True)
            ran += 2
        finally:
            os.environ.pop("EXT_ROC_PARTITION_KIB", None)
            os.environ.pop("EXT_ROC_RANGE_LEVELS", None)
    del os.environ["EXT_ROC_STRATEGY"]
    return ran


def aside_cases(generator):
    """Exact from features with ~21,000 genuine levels, not partitioned: the
    keys at or above the lowest level set aside and counted after the pass,
    in a buffer that holds them all and in one of 100,000 keys, ~100 a warp,
    that fill (the keys past them counted in the pass); two sets and one."""
    labels_q = torch.randint(0, 10, (300,), device="cuda", generator=generator)
    labels_g = torch.randint(0, 10, (700,), device="cuda", generator=generator)
    feat_q = torch.randn(300, 20, device="cuda", generator=generator)
    feat_g = torch.randn(700, 20, device="cuda", generator=generator)
    ran = 0
    os.environ["EXT_ROC_STRATEGY"] = "aside"  # never partitioned
    for keys in (None, "100000"):
        if keys:
            os.environ["EXT_ROC_ASIDE_KEYS"] = keys
        try:
            roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g)
            roc.evaluate(labels_g, None, feat_q=feat_g, same_set="ordered")
            ran += 2
        finally:
            os.environ.pop("EXT_ROC_ASIDE_KEYS", None)
    del os.environ["EXT_ROC_STRATEGY"]
    return ran


def block_cases(generator, modes):
    """From features with 16 KiB operand blocks: 128-row gallery chunks and
    query blocks (dim 20: 32 floats a row), so 6 chunks and 3 blocks, and
    steps that start inside a block."""
    labels_q = torch.randint(0, 10, (300,), device="cuda", generator=generator)
    labels_g = torch.randint(0, 10, (700,), device="cuda", generator=generator)
    feat_q = torch.randn(300, 20, device="cuda", generator=generator)
    feat_g = torch.randn(700, 20, device="cuda", generator=generator)
    os.environ["EXT_ROC_OPERAND_KIB"] = "16"
    try:
        ran = 0
        for mode in modes:
            if mode == "curve":
                roc.roc_curve(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, chunk=100 * 700)
            else:
                roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode,
                             chunk=100 * 700)
                roc.evaluate(labels_g, None, feat_q=feat_g, same_set=True, mode=mode)
                ran += 1
            ran += 1
        roc.pair_scores(feat_q, feat_g)
        return ran + 1
    finally:
        del os.environ["EXT_ROC_OPERAND_KIB"]


def shard_cases(labels, feats):
    """One set in shards: the evaluator of a shard of rows (what each rank of a
    group runs), with a session that only knows the shard's first row."""
    from _ext.roc import _distributed, _evaluate

    class Shard(_distributed.LocalSession):
        def __init__(self, fn, offset):
            super().__init__(fn)
            self.offset = offset

        def row_offset(self, infos, setup):
            return self.offset

    n, ran = labels.numel(), 0
    options = _evaluate.Options("evaluate")
    local = _distributed.session
    try:
        for same_set in (True, "ordered"):
            for begin, end in ((0, n // 3), (n // 3, n)):
                _distributed.session = lambda fn, group: Shard(fn, begin)
                for source in (dict(feat_q=feats[begin:end], feat_g=feats),
                               dict(score=roc.pair_scores(feats[begin:end], feats))):
                    counted = _evaluate.all_pairs(
                        "evaluate", options, labels[begin:end], labels, source.get("score"),
                        source.get("feat_q"), source.get("feat_g"), same_set, None, "shard")
                    try:
                        _evaluate.finish(counted, options)
                    except ValueError:  # a shard with no genuine pairs (or no impostors)
                        pass
                    ran += 1
    finally:
        _distributed.session = local
    return ran


def pair_list_cases(generator):
    ran = 0
    for n, dim in ((2, 3), (1000, 7), (70_000, 16)):
        genuine = torch.rand(n, device="cuda", generator=generator) < 0.2
        genuine[0], genuine[1] = True, False
        feat = torch.randn(257, dim, device="cuda", generator=generator)
        for index_dtype in (torch.int32, torch.int64):
            index_a = torch.randint(0, 257, (n,), device="cuda", generator=generator).to(index_dtype)
            index_b = torch.randint(0, 257, (n,), device="cuda", generator=generator).to(index_dtype)
            score = roc.pair_scores(feat, feat)[index_a.long(), index_b.long()].contiguous()
            score[2::97] = float("nan")
            for mode in ("exact", "binned", "curve"):
                roc.evaluate_pairs(genuine, score, mode=mode, chunk=4000)
                roc.evaluate_pairs(genuine.to(torch.uint8), feat_a=feat, feat_b=feat,
                                   index_a=index_a, index_b=index_b, mode=mode, chunk=4000)
                ran += 2
            os.environ["EXT_ROC_STRATEGY"] = "sorted"  # else only past 2^20 levels
            try:
                roc.evaluate_pairs(genuine, score, chunk=4000)
                ran += 1
            finally:
                del os.environ["EXT_ROC_STRATEGY"]
            bad = index_b.clone()
            bad[-1] = 257
            for flags, b in ((genuine, bad), (genuine.to(torch.int64) * 2, index_b)):
                try:
                    roc.evaluate_pairs(flags, feat_a=feat, feat_b=feat, index_a=index_a,
                                       index_b=b)
                except ValueError:
                    ran += 1
    return ran


def rank_cases(generator):
    """The rank count: both sources, edges of tiles, NaN pairs, the Market
    protocol (cameras, junk), one set's own rows; its top k and kept keys."""
    ran = 0
    for n_query, n_gallery in ((1, 1), (37, 129), (300, 700)):
        labels_q = torch.randint(0, 12, (n_query,), device="cuda", generator=generator)
        labels_g = torch.randint(-1, 12, (n_gallery,), device="cuda", generator=generator)
        cams_q = torch.randint(0, 3, (n_query,), device="cuda", generator=generator)
        cams_g = torch.randint(0, 3, (n_gallery,), device="cuda", generator=generator)
        feat_q = torch.randn(n_query, 16, device="cuda", generator=generator)
        feat_g = torch.randn(n_gallery, 16, device="cuda", generator=generator)
        feat_g[0, 0] = float("nan")
        score = roc.pair_scores(feat_q, feat_g)
        for source in (dict(score=score), dict(feat_q=feat_q, feat_g=feat_g)):
            rank.evaluate(labels_q, labels_g, **source)
            rank.evaluate(labels_q, labels_g, cams_q=cams_q, cams_g=cams_g, **source)
            ran += 2
        rank.evaluate(labels_g, None, feat_q=feat_g, same_set=True)
        ran += 1
        # top k and the legacy rule's kept keys: one block, and a block a row
        for block_pairs in (None, "1"):
            if block_pairs:
                os.environ["EXT_RANK_SELECT_PAIRS"] = block_pairs
            for source in (dict(score=score), dict(feat_q=feat_q, feat_g=feat_g)):
                rank.evaluate(labels_q, labels_g, cams_q=cams_q, cams_g=cams_g, topk=7,
                              fpir_rule="insightface_1n_legacy", fpirs=(0.1, 0.5), **source)
                ran += 1
            os.environ.pop("EXT_RANK_SELECT_PAIRS", None)
    # rows wider than a thread block's candidates: merged within the row
    wide = torch.randn(8, 5000, device="cuda", generator=generator)
    rank.evaluate(torch.arange(8, device="cuda"), torch.arange(5000, device="cuda") % 9,
                  score=wide, topk=100)
    return ran + 1


def race_cases(generator):
    """One call of each kernel that shares memory between threads (racecheck is
    slow): the legacy histogram, the score and feature passes with shared and
    global counters, binned and exact, the partitioned count and its drain, and
    the sorted count."""
    labels_q = torch.randint(0, 40, (200,), device="cuda", generator=generator)
    labels_g = torch.randint(0, 40, (300,), device="cuda", generator=generator)
    feat_q = torch.randn(200, 16, device="cuda", generator=generator)
    feat_g = torch.randn(300, 16, device="cuda", generator=generator)
    score = roc.pair_scores(feat_q, feat_g)
    histo = torch.zeros(1024, device="cuda")
    roc.gpu_roc(score, histo, histo.clone(), labels_q.float(), labels_g.float())
    ran = 1
    for source in (dict(score=score), dict(feat_q=feat_q, feat_g=feat_g)):
        for mode, bins in (("exact", 1024), ("binned", 1024), ("binned", 20000)):
            roc.evaluate(labels_q, labels_g, mode=mode, bins=bins, **source)
            ran += 1
    one_q, one_g = torch.zeros_like(labels_q), torch.zeros_like(labels_g)
    one_q[0], one_g[0] = 1, 2  # nearly every pair genuine: 59,000 levels, global counters
    for source in (dict(score=score), dict(feat_q=feat_q, feat_g=feat_g)):
        roc.evaluate(one_q, one_g, **source)
    genuine = torch.rand(40_000, device="cuda", generator=generator) < 0.5
    roc.evaluate_pairs(genuine, torch.randn(40_000, device="cuda", generator=generator))
    return (ran + 3 + block_cases(generator, ("exact",)) + partition_cases(generator) +
            rank_cases(generator))


def main():
    generator = torch.Generator(device="cuda").manual_seed(0)
    if "--partition" in sys.argv[1:]:
        print("sanitize_roc: %d calls ran" % (partition_cases(generator) +
                                             aside_cases(generator)))
        return
    if "--rank" in sys.argv[1:]:
        print("sanitize_roc: %d calls ran" % rank_cases(generator))
        return
    if "--race" in sys.argv[1:]:
        print("sanitize_roc: %d calls ran" % race_cases(generator))
        return
    ran = (legacy_cases(generator) + evaluator_cases(generator, "--small" in sys.argv[1:]) +
           rank_cases(generator))
    torch.cuda.synchronize()
    print("sanitize_roc: %d calls ran" % ran)


if __name__ == "__main__":
    main()
