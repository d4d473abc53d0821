"""RankReport: what rank.evaluate() returns, built from the C summary
(roc_rank.h's roc_rank_summary) and the per-query counts, with its table, a
JSON-ready summary, and the arrays as .npz."""

import collections
import json

import numpy as np

from ..roc._report import _array, _json_number

TpirAtFpir = collections.namedtuple(
    "TpirAtFpir", "fpir tpir threshold rule below_resolution achieved_fpir")
TpirAtFpir.__doc__ = """TPIR at one FPIR target under `rule`: the rule's threshold (README.md,
"1:N identification", says how each rule compares a score with it), the
rate of false positives the rule counts at it (achieved_fpir), and whether
the target lies below what the data resolves (fewer than one false positive
allowed); where the rule cannot answer (no non-mated search, insufficient
data), tpir and threshold are NaN."""

# the CMC ranks the table shows
TABLE_RANKS = (1, 5, 10, 20)


class RankReport:
    """What rank.evaluate() returns.

    cmc                    float64 (max_rank,): cmc[k - 1], the rank-k identification
                           rate over the mated queries
    mean_ap                mean average precision, by `ap` ("noninterpolated":
                           torchreid / fast-reid; "trapezoid": layumi)
    mean_inp               fast-reid's mINP: the mean of (mates / rank of the last mate)
    map_at_r, r_precision  pytorch-metric-learning's MAP@R and R-precision, R being
                           the query's number of (scored) mates
    precision_at_1         cmc[0], by its pytorch-metric-learning name
    tpir_at_fpir           list of TpirAtFpir, one per target of `fpirs`
    n_queries              all queries
    n_mated                queries with a scored mate: what the closed-set metrics
                           average over
    n_unmated              queries with no mate: the open set's non-mated searches
    n_skipped              queries the closed-set metrics skip (n_unmated, and those
                           whose every mate scored NaN)
    n_mated_pairs, n_nonmated_pairs   pairs counted (NaN excluded)
    n_nan                  pairs with a NaN score, excluded
    per_query              with per_query=True, a dict of NumPy arrays: by query
                           (Q) n_mates, n_nan_mates, n_nonmates, first_rank,
                           average_precision, best_nonmate_score,
                           best_nonmate_index; by mated pair (P) mate_query,
                           mate_index, mate_score, mate_above (non-mates scoring
                           strictly above), mate_tied (equal), mate_rank (its
                           rank; its mean rank under ties="expected"); else None
    topk                   with topk=k, (index (Q, k) int64, score (Q, k) float32):
                           each query's best gallery entries, score descending,
                           ties by index (-1 and NaN past the entries there are);
                           else None
    ties, ap, fpir_rule, max_rank
    device_bytes_peak      the evaluator's own device memory at its peak (this
                           process's; 0 on the CPU), beyond the inputs and torch's
    communication          with a group: bytes this rank sent in the collectives,
                           their wall time and the world size; None for one process
    """

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self):
        return ("RankReport(n_queries=%d, n_mated=%d, rank1=%.6f, mean_ap=%.6f, ties=%r)"
                % (self.n_queries, self.n_mated, self.cmc[0], self.mean_ap, self.ties))

    def table(self):
        """The CMC at ranks 1, 5, 10, 20 (those within max_rank), the mean
        metrics, and the TPIR@FPIR rows as text; a target below the data's
        resolution is starred."""
        ranks = [k for k in TABLE_RANKS if k <= self.max_rank]
        lines = ["  ".join("rank-%-4d" % k for k in ranks),
                 "  ".join("%9.6f" % self.cmc[k - 1] for k in ranks),
                 "mAP %.6f (%s)   mINP %.6f   MAP@R %.6f   R-precision %.6f"
                 % (self.mean_ap, self.ap, self.mean_inp, self.map_at_r, self.r_precision)]
        if self.tpir_at_fpir:
            lines.append("%11s  %10s  %12s  %14s" % ("FPIR", "TPIR", "threshold", "achieved FPIR"))
            for row in self.tpir_at_fpir:
                lines.append("%10.0e%s  %10.6f  %12.6f  %14.6g" % (
                    row.fpir, "*" if row.below_resolution else " ", row.tpir, row.threshold,
                    row.achieved_fpir))
            if any(row.below_resolution for row in self.tpir_at_fpir):
                lines.append("* below the data's resolution (fewer than one false positive "
                             "allowed)")
        lines.append("%d queries: %d mated, %d without a mate, %d skipped by the closed-set "
                     "metrics; %d NaN scores excluded   (ties=%s, fpir_rule=%s)"
                     % (self.n_queries, self.n_mated, self.n_unmated, self.n_skipped,
                        self.n_nan, self.ties, self.fpir_rule))
        return "\n".join(lines)

    def to_dict(self):
        """A summary of plain Python values, ready for json.dump and small whatever
        the number of queries: the CMC, the mean metrics, the TPIR rows, the
        counts and options. Non-finite numbers are None (JSON null)."""
        return {
            "cmc": [_json_number(v) for v in self.cmc.tolist()],
            "mean_ap": _json_number(self.mean_ap), "mean_inp": _json_number(self.mean_inp),
            "map_at_r": _json_number(self.map_at_r),
            "r_precision": _json_number(self.r_precision),
            "precision_at_1": _json_number(self.precision_at_1),
            "tpir_at_fpir": [{"fpir": row.fpir, "tpir": _json_number(row.tpir),
                              "threshold": _json_number(row.threshold), "rule": row.rule,
                              "below_resolution": row.below_resolution,
                              "achieved_fpir": _json_number(row.achieved_fpir)}
                             for row in self.tpir_at_fpir],
            "n_queries": self.n_queries, "n_mated": self.n_mated, "n_unmated": self.n_unmated,
            "n_skipped": self.n_skipped, "n_mated_pairs": self.n_mated_pairs,
            "n_nonmated_pairs": self.n_nonmated_pairs, "n_nan": self.n_nan,
            "ties": self.ties, "ap": self.ap, "fpir_rule": self.fpir_rule,
            "max_rank": self.max_rank, "device_bytes_peak": self.device_bytes_peak,
        }

    def save_json(self, path):
        """to_dict() as a JSON file."""
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")

    def save_arrays(self, path):
        """The CMC, and per_query's and topk's arrays where asked for, as an .npz
        file (per_query's under their own names, topk as topk_index and
        topk_score)."""
        arrays = {"cmc": self.cmc}
        arrays.update(self.per_query or {})
        if self.topk is not None:
            arrays["topk_index"], arrays["topk_score"] = self.topk
        np.savez(path, **arrays)


def report_from_summary(summary, counts, options):
    """A RankReport of a C roc_rank_summary and the counts it summarized
    (_evaluate.view_arrays' layout), made with `options` (_evaluate.Options)."""
    s = summary
    Q, P = int(s.n_queries), int(s.n_mated_pairs)
    rows = [TpirAtFpir(float(s.fpir[f]), float(s.tpir[f]), float(s.threshold[f]),
                       options.fpir_rule, bool(s.below_resolution[f]),
                       float(s.achieved_fpir[f]))
            for f in range(s.n_fpirs)]
    per_query = None
    if options.per_query:
        first = counts["first"]
        per_query = {
            "n_mates": np.diff(first), "n_nan_mates": counts["nan_mates"].astype(np.int64),
            "n_nonmates": counts["n_nonmates"].astype(np.int64),
            "first_rank": _array(s, s.first_rank, Q, np.float64),
            "average_precision": _array(s, s.average_precision, Q, np.float64),
            "best_nonmate_score": _array(s, s.best_nonmate_score, Q, np.float64),
            "best_nonmate_index": counts["best_index"].copy(),
            "mate_query": np.repeat(np.arange(Q, dtype=np.int64), np.diff(first)),
            "mate_index": counts["mate_index"].copy(),
            "mate_score": _array(s, s.mate_score, P, np.float64),
            "mate_above": counts["above"].astype(np.int64),
            "mate_tied": counts["tied"].astype(np.int64),
            "mate_rank": _array(s, s.mate_rank, P, np.float64)}
    topk = None
    if options.topk:
        topk = (counts["topk_index"].reshape(Q, options.topk).copy(),
                counts["topk_score"].reshape(Q, options.topk).copy())
    return RankReport(
        cmc=_array(s, s.cmc, s.max_rank, np.float64), mean_ap=float(s.mean_ap),
        mean_inp=float(s.mean_inp), map_at_r=float(s.map_at_r),
        r_precision=float(s.r_precision), precision_at_1=float(s.precision_at_1),
        tpir_at_fpir=rows, n_queries=Q, n_mated=int(s.n_mated), n_unmated=int(s.n_unmated),
        n_skipped=int(s.n_skipped), n_mated_pairs=P,
        n_nonmated_pairs=int(s.n_nonmated_pairs), n_nan=int(s.n_nan), per_query=per_query,
        topk=topk, ties=options.ties, ap=options.ap, fpir_rule=options.fpir_rule,
        max_rank=options.max_rank, device_bytes_peak=0, communication=None)
