"""RocReport: what evaluate() returns, built from the C summary (roc.h's
roc_summary), with its table, a JSON-ready summary and the curve as .npz."""

import collections
import math

import numpy as np

from ._roc import ffi, lib

TarAtFar = collections.namedtuple("TarAtFar",
                                  "far tar threshold false_accepts below_resolution")
TarAtFar.__doc__ = """TAR at one FAR target: the threshold is the highest that reaches the TAR,
false_accepts the impostor pairs scoring at or above it, and below_resolution
whether the target lies below 1 / n_impostor (no threshold can resolve it: the
row then reports the curve's first point that the rule picks)."""

MODE_NAMES = {lib.ROC_MODE_EXACT: "exact", lib.ROC_MODE_BINNED: "binned",
              lib.ROC_MODE_CURVE: "curve"}


class _SummaryMemory:
    """n values of the C summary at `pointer`, for np.asarray: the array's base,
    it keeps the summary (a cffi object that frees it when collected) alive.
    Copied, the arrays were a visible share of an exact evaluation with many
    genuine levels (dev/NOTES.md, end to end, "A call's fixed costs")."""

    def __init__(self, summary, pointer, n, dtype):
        self.summary = summary
        self.__array_interface__ = {"shape": (n,), "typestr": np.dtype(dtype).str,
                                    "data": (int(ffi.cast("uintptr_t", pointer)), False),
                                    "version": 3}


def _array(summary, pointer, n, dtype):
    if n == 0 or pointer == ffi.NULL:
        return np.zeros(0, dtype)
    return np.asarray(_SummaryMemory(summary, pointer, n, dtype))


def _json_number(value):
    """A float for JSON: non-finite values as None (null)."""
    value = float(value)
    return value if math.isfinite(value) else None


class RocReport:
    """What evaluate() returns.

    fpr, tpr, thresholds   the curve, thresholds descending, thresholds[0] = inf
                           (curve mode: scikit-learn's drop_intermediate points;
                           exact mode: those, less the inner points of horizontal
                           runs where tied impostors make scikit-learn keep extra
                           collinear points; binned mode: one point per bin edge)
    false_accepts, true_accepts   the pair counts behind fpr and tpr
    auc                    the Mann-Whitney statistic U / (P N) (ties counted half),
                           rounded once from its exact integer counts: the area
                           under the curve. roc_auc_score sums the same trapezoids
                           in floating point, so the two differ by a few ulp
                           (tests/roc/test_roc_conformance.py bounds it)
    partial_auc, max_fpr   with max_fpr: the area over FPR in [0, max_fpr],
                           McClish-standardized as roc_auc_score(max_fpr=)
                           (0.5 (1 + (A - m^2 / 2) / (m - m^2 / 2)), m = max_fpr), from
                           the same exact counts (within an ulp of the exact value;
                           a few ulp from scikit-learn's); None without max_fpr
    eer, eer_threshold, eer_rule   the EER by its rule: "crossing", where the curve's
                           polyline crosses FPR = FNR (FNR = 1 - TPR), FPR linearly
                           interpolated on that segment; "nearest_mean",
                           torchmetrics': (FPR + FNR) / 2 at the point of the full
                           curve (every distinct score) minimizing |FPR - FNR|, the
                           first of equals. The threshold is that of the segment's
                           end, or of the point
    tar_at_far             list of TarAtFar, one per target in `fars`
    n_genuine, n_impostor  pairs counted (NaN scores excluded)
    n_nan                  pairs with a NaN score, excluded
    counts                 the raw counts (dict of NumPy arrays; see counts_doc)
    mode, far_rule, pairs, device_bytes_peak
    passes                 passes over the pairs: 1, more where exact mode's corners
                           could not decide nearest_sklearn's rows (probing passes)
                           or nearest_mean's EER (a pass in curve mode)
    communication          with a group: bytes this rank sent in the collectives of
                           the levels and counts, their wall time and the world
                           size; None for one process
    """

    counts_doc = {
        "exact": "genuine_scores (the U distinct genuine scores, ascending), genuine (pairs "
                 "on each), impostor_at (impostors scoring exactly each), impostor_between "
                 "(U + 1: impostors strictly between consecutive genuine scores, from below "
                 "the lowest to above the highest), impostor_between_min (the lowest such "
                 "score, NaN where none)",
        "binned": "edges (bins + 1), genuine and impostor (per bin, numpy.histogram's "
                  "convention), genuine_below/above and impostor_below/above (outside range)",
    }

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self):
        return ("RocReport(mode=%r, n_genuine=%d, n_impostor=%d, n_nan=%d, auc=%.6f, eer=%.6f, "
                "%d points)" % (self.mode, self.n_genuine, self.n_impostor, self.n_nan, self.auc,
                                self.eer, len(self.fpr)))

    def map_scores(self, scores):
        """Every score this report carries (the thresholds of the curve, of the
        EER and of the TAR@FAR rows, exact mode's genuine_scores and
        impostor_between_min) replaced by scores(those values), a float64
        NumPy array of their shape: the float64 scores of their surrogates
        (_float64.py)."""
        self.thresholds = scores(self.thresholds)
        self.eer_threshold = float(scores([self.eer_threshold])[0])
        rows = scores([row.threshold for row in self.tar_at_far])
        self.tar_at_far = [row._replace(threshold=float(t)) for row, t in zip(self.tar_at_far,
                                                                                 rows)]
        for name in ("genuine_scores", "impostor_between_min"):
            if name in self.counts:
                self.counts[name] = scores(self.counts[name])

    def table(self):
        """The TAR@FAR table as text; a target below 1 / n_impostor is starred."""
        lines = ["%11s  %10s  %12s  %14s" % ("FAR", "TAR", "threshold", "false accepts")]
        for row in self.tar_at_far:
            lines.append("%10.0e%s  %10.6f  %12.6f  %14d" % (
                row.far, "*" if row.below_resolution else " ", row.tar, row.threshold,
                row.false_accepts))
        if any(row.below_resolution for row in self.tar_at_far):
            lines.append("* below 1 / %d impostor pairs: no threshold resolves this FAR"
                         % self.n_impostor)
        lines.append("AUC %.8f   EER %.6f at threshold %.6f   (%s, far_rule=%s, eer_rule=%s)"
                     % (self.auc, self.eer, self.eer_threshold, self.mode, self.far_rule,
                        self.eer_rule))
        if self.max_fpr is not None:
            lines.append("partial AUC over FPR <= %g: %.8f (McClish-standardized)"
                         % (self.max_fpr, self.partial_auc))
        lines.append("%d genuine pairs, %d impostor pairs, %d NaN scores excluded"
                     % (self.n_genuine, self.n_impostor, self.n_nan))
        if self.passes > 1:
            rules = [what for rule, what in (
                (self.far_rule == "nearest_sklearn", "nearest_sklearn's rows"),
                (self.eer_rule == "nearest_mean", "nearest_mean's EER")) if rule]
            lines.append("%d passes over the pairs: where exact mode's corners cannot decide "
                         "%s, further passes count the tied impostor scores that do"
                         % (self.passes, " and ".join(rules)))
        return "\n".join(lines)

    def to_dict(self, curve=False):
        """A summary of plain Python values, ready for json.dump and small whatever
        the number of pairs: counts, AUC, EER, the TAR@FAR rows, options. Non-finite
        numbers are None (JSON null). With curve=True, also the curve and the raw
        counts as lists (large: prefer save_curve)."""
        out = {
            "mode": self.mode, "far_rule": self.far_rule, "pairs": self.pairs,
            "passes": self.passes,
            "n_genuine": self.n_genuine, "n_impostor": self.n_impostor, "n_nan": self.n_nan,
            "auc": _json_number(self.auc), "eer": _json_number(self.eer),
            "eer_threshold": _json_number(self.eer_threshold), "eer_rule": self.eer_rule,
            "max_fpr": self.max_fpr,
            "partial_auc": None if self.partial_auc is None else _json_number(self.partial_auc),
            "n_points": int(len(self.fpr)), "device_bytes_peak": self.device_bytes_peak,
            "tar_at_far": [{"far": row.far, "tar": _json_number(row.tar),
                            "threshold": _json_number(row.threshold),
                            "false_accepts": row.false_accepts,
                            "below_resolution": row.below_resolution}
                           for row in self.tar_at_far],
        }
        if curve:
            def plain(values):
                return [_json_number(v) if isinstance(v, float) else v for v in values.tolist()]
            for name in ("fpr", "tpr", "thresholds", "false_accepts", "true_accepts"):
                out[name] = plain(getattr(self, name))
            out["counts"] = {k: plain(v) if isinstance(v, np.ndarray) else v
                             for k, v in self.counts.items()}
        return out

    def save_curve(self, path):
        """The curve (fpr, tpr, thresholds, false_accepts, true_accepts) and the raw
        counts (counts_<name>) as an .npz file."""
        arrays = {name: getattr(self, name) for name in
                  ("fpr", "tpr", "thresholds", "false_accepts", "true_accepts")}
        arrays.update({"counts_" + k: np.asarray(v) for k, v in self.counts.items()})
        np.savez(path, **arrays)


def report_from_summary(summary, options, pairs, passes=1):
    """A RocReport of a C roc_summary made with `options` (_evaluate.Options),
    after `passes` passes over the pairs."""
    s = summary
    n = s.n_points
    mode = MODE_NAMES[s.mode]
    n_impostor = int(s.n_impostor)
    tar_at_far = [TarAtFar(float(s.far[i]), float(s.tar[i]), float(s.far_threshold[i]),
                           int(s.far_false_accepts[i]),
                           bool(float(s.far[i]) * n_impostor < 1.0 and s.far[i] > 0))
                  for i in range(s.n_fars)]
    if mode == "exact":
        U = s.n_levels
        counts = {"genuine_scores": _array(s, s.level_scores, U, np.float64),
                  "genuine": _array(s, s.genuine_counts, U, np.uint64),
                  "impostor_at": _array(s, s.impostor_counts, U, np.uint64),
                  "impostor_between": _array(s, s.impostor_between, U + 1, np.uint64),
                  "impostor_between_min": _array(s, s.impostor_between_min, U + 1, np.float64)}
    elif mode == "binned":
        B = s.n_levels
        counts = {"edges": _array(s, s.level_scores, B + 1, np.float64),
                  "genuine": _array(s, s.genuine_counts, B, np.uint64),
                  "impostor": _array(s, s.impostor_counts, B, np.uint64),
                  "genuine_below": int(s.genuine_below), "genuine_above": int(s.genuine_above),
                  "impostor_below": int(s.impostor_below),
                  "impostor_above": int(s.impostor_above)}
    else:
        counts = {}
    return RocReport(
        mode=mode, far_rule=options.far_rule, pairs=pairs, passes=passes,
        eer_rule=options.eer_rule, max_fpr=options.max_fpr,
        partial_auc=None if options.max_fpr is None else float(s.partial_auc),
        _eer_undecided=bool(s.eer_undecided),  # for _evaluate's second pass, in curve mode
        fpr=_array(s, s.fpr, n, np.float64), tpr=_array(s, s.tpr, n, np.float64),
        thresholds=_array(s, s.thresholds, n, np.float64),
        false_accepts=_array(s, s.false_accepts, n, np.uint64),
        true_accepts=_array(s, s.true_accepts, n, np.uint64),
        auc=float(s.auc), eer=float(s.eer), eer_threshold=float(s.eer_threshold),
        tar_at_far=tar_at_far, n_genuine=int(s.n_genuine), n_impostor=n_impostor,
        n_nan=int(s.n_nan), counts=counts, device_bytes_peak=int(s.device_bytes_peak))
