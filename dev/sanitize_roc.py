"""Small calls that cover every ROC kernel path, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 dev/sanitize_roc.py
    compute-sanitizer --tool racecheck python3 dev/sanitize_roc.py --small

(--small leaves out the 2000 x 2000 case, which outlasts minutes under
racecheck; the 300 x 700 case still takes the global-counter paths.)

gpu_roc: 16-byte and scalar loads, shared-memory and global counters, rows
shorter than a vector, aligned rows of several segments, each label and
histogram dtype. evaluate/roc_curve:
every mode from a score matrix and from features, one set and two, partial
tiles, shared-memory and global counters, pair_scores.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import roc  # noqa: E402


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
        labels = torch.cat([labels_q, labels_q, labels_q + 1])
        feats = torch.cat([feat_q, feat_q + 0.1, feat_q - 0.1])
        for mode in ("exact", "binned"):
            roc.evaluate(labels, None, feat_q=feats, same_set=True, mode=mode)
            ran += 1
    return ran


def main():
    generator = torch.Generator(device="cuda").manual_seed(0)
    ran = legacy_cases(generator) + evaluator_cases(generator, "--small" in sys.argv[1:])
    torch.cuda.synchronize()
    print("sanitize_roc: %d calls ran" % ran)


if __name__ == "__main__":
    main()
