"""_ext.rank: 1:N identification and re-ID ranking of embeddings, exact.

    from _ext import rank
    report = rank.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g)
    print(report.table())          # CMC rank-1/5/10/20, mAP, mINP, MAP@R, TPIR@FPIR
    report.cmc[0], report.mean_ap  # rank-1 rate, mean average precision

    # Market-1501's protocol: same id and same camera excluded, label -1 junk
    report = rank.evaluate(pids_q, pids_g, feat_q=fq, feat_g=fg, cams_q=cq, cams_g=cg)
    # retrieval within one set (SOP, CUB): each query's own row excluded
    report = rank.evaluate(labels, feat_q=feats, same_set=True)
    # face 1:N, open set: TPIR at FPIR under a published rule
    report = rank.evaluate(probe_ids, gallery_ids, feat_q=probes, feat_g=gallery,
                           fpirs=(0.01, 0.1), fpir_rule="insightface_ijb")

Every metric follows from counts kept per query: for each mated pair, the
non-mates scoring above and tied with it; for each query, its best non-mate.
No Q x G matrix and no sort: memory O(mated pairs + queries), the scores the
same fp32 bits as roc.evaluate's, counted on the CPU (C + OpenMP) or the GPU
(over the ROC evaluator's tile product); across processes, the queries or the
gallery in shards (group=, shard=). The counts live in _ext.roc's cffi module
(src/roc_rank*.c).
"""

from ._evaluate import DEFAULT_FPIRS, evaluate  # noqa: E402
from ._report import RankReport, TpirAtFpir  # noqa: E402

__all__ = ["evaluate", "RankReport", "TpirAtFpir", "DEFAULT_FPIRS"]
