"""evaluate() and roc_curve(): the thin Python side of the evaluator in
src/roc_eval.c (CPU) and src/cuda/roc_eval_kernel.cu (GPU).

Python only turns labels into dense codes, describes the tensors, steps
through the query rows in chunks (so a caller can show progress), and copies
the C summary into NumPy arrays.
"""

import collections
import math

import numpy as np

from .. import _ffi
from ._roc import ffi, lib

MODES = {"exact": lib.ROC_MODE_EXACT, "binned": lib.ROC_MODE_BINNED}
FAR_RULES = {"max_tpr": lib.ROC_FAR_MAX_TPR, "nearest": lib.ROC_FAR_NEAREST,
             "first_above": lib.ROC_FAR_FIRST_ABOVE, "interpolate": lib.ROC_FAR_INTERPOLATE}
SIMILARITIES = {"cosine": lib.ROC_COSINE, "dot": lib.ROC_DOT}
DEFAULT_FARS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)

# pairs per step: the curve mode holds a key per pair of a step (4 bytes) plus
# CUB's sort buffers; the others hold nothing per pair
DEFAULT_CHUNK = {("cuda", "curve"): 1 << 26, ("cuda", "pass"): 1 << 30,
                 ("cpu", "curve"): 1 << 24, ("cpu", "pass"): 1 << 24}

TarAtFar = collections.namedtuple("TarAtFar", "far tar threshold false_accepts")
TarAtFar.__doc__ = """TAR at one FAR target: the threshold is the highest that reaches the TAR,
and false_accepts the impostor pairs scoring at or above it."""


class RocReport:
    """What evaluate() returns.

    fpr, tpr, thresholds   the curve, thresholds descending, thresholds[0] = inf
                           (exact mode: scikit-learn's points, less the inner
                           points of horizontal runs where tied impostors make
                           scikit-learn keep extra collinear points; binned
                           mode: one point per bin edge)
    false_accepts, true_accepts   the pair counts behind fpr and tpr
    auc, eer, eer_threshold
    tar_at_far             list of TarAtFar, one per target in `fars`
    n_genuine, n_impostor  pairs counted (NaN scores excluded)
    n_nan                  pairs with a NaN score, excluded
    counts                 the raw counts (dict of NumPy arrays; see counts_doc)
    mode, far_rule, device_bytes_peak
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

    def table(self):
        """The TAR@FAR table as text."""
        lines = ["%10s  %10s  %12s  %14s" % ("FAR", "TAR", "threshold", "false accepts")]
        for row in self.tar_at_far:
            lines.append("%10.0e  %10.6f  %12.6f  %14d" % (row.far, row.tar, row.threshold,
                                                            row.false_accepts))
        lines.append("AUC %.8f   EER %.6f at threshold %.6f   (%s, far_rule=%s)"
                     % (self.auc, self.eer, self.eer_threshold, self.mode, self.far_rule))
        lines.append("%d genuine pairs, %d impostor pairs, %d NaN scores excluded"
                     % (self.n_genuine, self.n_impostor, self.n_nan))
        return "\n".join(lines)

    def to_dict(self):
        """Plain Python values (non-finite floats as the strings 'inf', '-inf', 'nan'),
        ready for json.dump."""
        def plain(value):
            if isinstance(value, np.ndarray):
                return [plain(v) for v in value.tolist()]
            if isinstance(value, float) and not math.isfinite(value):
                return str(value)
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            if isinstance(value, np.generic):
                return plain(value.item())
            return value
        out = {k: v for k, v in self.__dict__.items() if k != "tar_at_far"}
        out["tar_at_far"] = [dict(row._asdict()) for row in self.tar_at_far]
        return plain(out)


# ---------------------------------------------------------------------------
# inputs

def _torch():
    if _ffi.torch is None:
        raise RuntimeError("CUDA evaluation needs torch")
    return _ffi.torch


def _to_device(x, device):
    """x on `device` ("cpu", "cuda", "cuda:1"): a torch tensor, or a NumPy array
    left as it is for "cpu"."""
    if x is None:
        return None
    if device is None or (device == "cpu" and isinstance(x, np.ndarray)):
        return x
    torch = _torch()
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    return x.to(device)


def _device_of(*xs):
    for x in xs:
        if _ffi.is_tensor(x):
            return x.device
    return None


def _flat_labels(fn, name, labels, expected):
    if not (_ffi.is_tensor(labels) or isinstance(labels, np.ndarray)):
        labels = np.asarray(labels)
    kind = labels.dtype.is_floating_point if _ffi.is_tensor(labels) else labels.dtype.kind == "f"
    if _ffi.is_tensor(labels):
        ok = not labels.is_complex()
    else:
        ok = labels.dtype.kind in "biuf"
    if not ok:
        raise TypeError("%s: %s must hold integers or floats, got %s" % (fn, name, labels.dtype))
    labels = labels.reshape(-1)
    if expected is not None and labels.shape[0] != expected:
        raise ValueError("%s: %s has %d elements but there are %d %s" % (
            fn, name, labels.shape[0], expected, "queries" if name == "labels_q" else
            "gallery entries"))
    if kind and bool(labels.isnan().any() if _ffi.is_tensor(labels) else np.isnan(labels).any()):
        raise ValueError("%s: %s contains NaN; a NaN label matches nothing" % (fn, name))
    return labels


def _label_codes(fn, labels_q, labels_g, n_query, n_gallery):
    """Dense int32 codes of the labels, equal where the labels are equal."""
    labels_q = _flat_labels(fn, "labels_q", labels_q, n_query)
    labels_g = _flat_labels(fn, "labels_g", labels_g, n_gallery)
    if _ffi.is_tensor(labels_q):
        torch = _torch()
        if labels_q.dtype != labels_g.dtype:  # exact for integers below 2^53
            labels_q, labels_g = labels_q.double(), labels_g.double()
        values, codes = torch.unique(torch.cat([labels_q, labels_g]), return_inverse=True)
        codes = codes.to(torch.int32)
    else:
        if labels_q.dtype != labels_g.dtype:
            labels_q, labels_g = labels_q.astype(np.float64), labels_g.astype(np.float64)
        values, codes = np.unique(np.concatenate([labels_q, labels_g]), return_inverse=True)
        codes = codes.reshape(-1).astype(np.int32)
    return codes[:labels_q.shape[0]], codes[labels_q.shape[0]:], int(values.shape[0])


def _prepare(fn, labels_q, labels_g, score, feat_q, feat_g, same_set, device):
    if (score is None) == (feat_q is None):
        raise ValueError("%s: give either score=, or feat_q= (and feat_g=)" % fn)
    if score is not None and (feat_g is not None):
        raise ValueError("%s: give either score=, or feat_q= and feat_g=, not both" % fn)
    if same_set:
        if score is not None and (len(score.shape) != 2 or score.shape[0] != score.shape[1]):
            raise ValueError("%s: same_set needs one set: score must be square, got shape %s"
                             % (fn, tuple(score.shape)))
        if labels_g is not None and labels_g is not labels_q:
            if not np.array_equal(np.asarray(_as_host(labels_g)), np.asarray(_as_host(labels_q))):
                raise ValueError("%s: same_set=True means one set: labels_g must be labels_q "
                                 "(or None)" % fn)
        labels_g = labels_q
        if feat_q is not None:
            if feat_g is not None and feat_g is not feat_q:
                raise ValueError("%s: same_set=True means one set: feat_g must be feat_q "
                                 "(or None)" % fn)
            feat_g = feat_q
    elif labels_g is None:
        raise ValueError("%s: labels_g is required unless same_set=True" % fn)
    elif feat_q is not None and feat_g is None:
        raise ValueError("%s: feat_g is required with feat_q unless same_set=True" % fn)

    if device is None:
        device = _device_of(score, feat_q, feat_g, labels_q, labels_g)
        device = str(device) if device is not None else "cpu"
    device = str(device)
    if device.startswith("cuda") and not (_ffi.torch is not None and
                                          _ffi.torch.cuda.is_available()):
        raise RuntimeError("%s: device %r asked for, but torch sees no CUDA device" % (fn, device))
    score, feat_q, feat_g = (_to_device(x, device) for x in (score, feat_q, feat_g))
    labels_q, labels_g = (_to_device(x, device) if _ffi.is_tensor(x) or device != "cpu" else x
                          for x in (labels_q, labels_g))
    if same_set:
        feat_g = feat_q if feat_q is not None else None
    if score is not None:
        shape = tuple(score.shape)
        n_query = shape[0] if len(shape) == 2 else None
        n_gallery = shape[1] if len(shape) == 2 else None
    else:
        n_query = feat_q.shape[0] if len(feat_q.shape) == 2 else None
        n_gallery = feat_g.shape[0] if len(feat_g.shape) == 2 else None
    codes_q, codes_g, n_codes = _label_codes(fn, labels_q, labels_g, n_query, n_gallery)
    if device != "cpu" and isinstance(codes_q, np.ndarray):
        codes_q, codes_g = _to_device(codes_q, device), _to_device(codes_g, device)
    return device, score, feat_q, feat_g, codes_q, codes_g, n_codes


def _as_host(x):
    return x.detach().cpu().numpy() if _ffi.is_tensor(x) else x


def _choice(fn, name, value, options):
    if value not in options:
        raise ValueError("%s: %s must be one of %s, got %r" % (fn, name, ", ".join(
            repr(o) for o in options), value))
    return options[value]


# ---------------------------------------------------------------------------
# running the evaluator

def _array(pointer, n, dtype):
    if n == 0 or pointer == ffi.NULL:
        return np.zeros(0, dtype)
    ctype = {np.float64: "double", np.uint64: "uint64_t"}[dtype]
    return np.frombuffer(ffi.buffer(ffi.cast(ctype + " *", pointer), n * 8), dtype=dtype).copy()


def _run(fn, mode, labels_q, labels_g, score, feat_q, feat_g, same_set, similarity, bins,
         bin_range, fars, far_rule, device, chunk, progress):
    device, score, feat_q, feat_g, codes_q, codes_g, n_codes = _prepare(
        fn, labels_q, labels_g, score, feat_q, feat_g, same_set, device)
    config = ffi.new("roc_eval_config *")
    config.caller = fn.encode()[:31]
    config.mode = mode
    config.same_set = int(bool(same_set))
    config.similarity = _choice(fn, "similarity", similarity, SIMILARITIES)
    config.bins = int(bins)
    config.range_lo, config.range_hi = (float(v) for v in bin_range)
    args = [_ffi.describe(ffi, fn, "labels_q", codes_q), _ffi.describe(ffi, fn, "labels_g", codes_g)]
    args += [_ffi.describe(ffi, fn, name, x) if x is not None else ffi.NULL
             for name, x in (("score", score), ("feat_q", feat_q), ("feat_g", feat_g))]
    stream = _ffi.cuda_stream(ffi, codes_q)
    handle = ffi.new("roc_eval **")
    _ffi.check(ffi, lib, lib.roc_eval_create(handle, config, args[0], args[1], n_codes, *args[2:],
                                             stream))
    evaluator = ffi.gc(handle[0], lib.roc_eval_free)

    n_query, n_gallery = int(codes_q.shape[0]), int(codes_g.shape[0])
    if chunk is None:
        chunk = DEFAULT_CHUNK[("cuda" if device.startswith("cuda") else "cpu",
                               "curve" if mode == lib.ROC_MODE_CURVE else "pass")]
    if int(chunk) < 1:
        raise ValueError("%s: chunk must be a positive number of pairs, got %r" % (fn, chunk))
    rows = max(1, int(chunk) // max(n_gallery, 1))
    total = n_query * (n_query - 1) // 2 if same_set else n_query * n_gallery
    done = 0
    for row in range(0, n_query, rows):
        end = min(row + rows, n_query)
        _ffi.check(ffi, lib, lib.roc_eval_add_rows(evaluator, row, end))
        done += _pairs_in_rows(row, end, n_query, n_gallery, same_set)
        if progress is not None:
            progress(done, total)

    fars = [float(f) for f in fars]
    far_array = ffi.new("double[]", fars) if fars else ffi.NULL
    out = ffi.new("roc_summary **")
    _ffi.check(ffi, lib, lib.roc_eval_summarize(
        evaluator, far_array, len(fars), _choice(fn, "far_rule", far_rule, FAR_RULES), out))
    summary = ffi.gc(out[0], lib.roc_summary_free)
    return summary


def _pairs_in_rows(begin, end, n_query, n_gallery, same_set):
    if not same_set:
        return (end - begin) * n_gallery
    # rows i in [begin, end) hold n_query - 1 - i pairs each
    return sum(n_query - 1 - i for i in (begin, end - 1)) * (end - begin) // 2


def _report(summary, far_rule):
    s = summary
    n = s.n_points
    mode = {lib.ROC_MODE_EXACT: "exact", lib.ROC_MODE_BINNED: "binned",
            lib.ROC_MODE_CURVE: "curve"}[s.mode]
    tar_at_far = [TarAtFar(float(s.far[i]), float(s.tar[i]), float(s.far_threshold[i]),
                           int(s.far_false_accepts[i])) for i in range(s.n_fars)]
    if mode == "exact":
        U = s.n_levels
        counts = {"genuine_scores": _array(s.level_scores, U, np.float64),
                  "genuine": _array(s.genuine_counts, U, np.uint64),
                  "impostor_at": _array(s.impostor_counts, U, np.uint64),
                  "impostor_between": _array(s.impostor_between, U + 1, np.uint64),
                  "impostor_between_min": _array(s.impostor_between_min, U + 1, np.float64)}
    elif mode == "binned":
        B = s.n_levels
        counts = {"edges": _array(s.level_scores, B + 1, np.float64),
                  "genuine": _array(s.genuine_counts, B, np.uint64),
                  "impostor": _array(s.impostor_counts, B, np.uint64),
                  "genuine_below": int(s.genuine_below), "genuine_above": int(s.genuine_above),
                  "impostor_below": int(s.impostor_below),
                  "impostor_above": int(s.impostor_above)}
    else:
        counts = {}
    return RocReport(
        mode=mode, far_rule=far_rule,
        fpr=_array(s.fpr, n, np.float64), tpr=_array(s.tpr, n, np.float64),
        thresholds=_array(s.thresholds, n, np.float64),
        false_accepts=_array(s.false_accepts, n, np.uint64),
        true_accepts=_array(s.true_accepts, n, np.uint64),
        auc=float(s.auc), eer=float(s.eer), eer_threshold=float(s.eer_threshold),
        tar_at_far=tar_at_far, n_genuine=int(s.n_genuine), n_impostor=int(s.n_impostor),
        n_nan=int(s.n_nan), counts=counts, device_bytes_peak=int(s.device_bytes_peak))


# ---------------------------------------------------------------------------
# public API

def evaluate(labels_q, labels_g, *, score=None, feat_q=None, feat_g=None, same_set=False,
             mode="exact", bins=1024, range=(-1.0, 1.0), fars=DEFAULT_FARS,
             far_rule="max_tpr", device=None, chunk=None, similarity="cosine", progress=None):
    """ROC of every (query, gallery) pair, its AUC, EER and TAR@FAR.

    labels_q (Q,), labels_g (G,)   int or float labels (tensors or NumPy arrays);
                                   pair (i, j) is genuine when they are equal
    score (Q, G) float32           a score matrix, or
    feat_q (Q, D), feat_g (G, D)   float32 features, scored tile by tile and never
                                   stored: similarity "cosine" (default) or "dot"
    same_set                       the query set is the gallery: the diagonal is
                                   dropped and each unordered pair counted once
                                   (labels_g and feat_g may then be None)
    mode                           "exact": the exact curve, AUC, EER and TAR@FAR,
                                   memory O(genuine pairs); "binned": `bins`
                                   uniform bins over `range` (numpy.histogram's
                                   convention), scores outside counted apart
    fars, far_rule                 TAR@FAR targets, and the rule: "max_tpr" (the
                                   largest TPR with FPR <= far), "nearest" (the
                                   curve point nearest far), "first_above" (the first
                                   point with FPR >= far), "interpolate" (linear)
    device                         where to compute ("cpu", "cuda", "cuda:1"); default:
                                   where the inputs are
    chunk                          pairs per step (bounds the memory of a step)
    progress                       called as progress(pairs_done, pairs_total)

    NaN scores are excluded and counted (n_nan); infinities are ordinary extreme
    scores. Returns a RocReport.
    """
    fn = "evaluate"
    mode_code = _choice(fn, "mode", mode, MODES)
    _choice(fn, "far_rule", far_rule, FAR_RULES)
    summary = _run(fn, mode_code, labels_q, labels_g, score, feat_q, feat_g, same_set,
                   similarity, bins, range, fars, far_rule, device, chunk, progress)
    return _report(summary, far_rule)


def roc_curve(labels_q, labels_g, *, score=None, feat_q=None, feat_g=None, same_set=False,
              device=None, chunk=None, similarity="cosine", progress=None):
    """(fpr, tpr, thresholds) as float64 NumPy arrays, identical to
    sklearn.metrics.roc_curve(y_true, y_score) on the flattened pairs
    (drop_intermediate=True, thresholds[0] = inf).

    Same inputs as evaluate(). Every distinct score is counted, so memory grows
    with the number of distinct scores (at most one per pair), plus `chunk`
    pairs per step; evaluate() needs memory only for the genuine pairs.
    """
    summary = _run("roc_curve", lib.ROC_MODE_CURVE, labels_q, labels_g, score, feat_q, feat_g,
                   same_set, similarity, 1, (-1.0, 1.0), (), "max_tpr", device, chunk, progress)
    n = summary.n_points
    return (_array(summary.fpr, n, np.float64), _array(summary.tpr, n, np.float64),
            _array(summary.thresholds, n, np.float64))


def pair_scores(feat_q, feat_g, similarity="cosine"):
    """The (Q, G) float32 scores evaluate() computes from these features: each an
    fp32 dot product (of L2-normalized rows, for cosine) accumulated in index
    order. On the features' device."""
    fn = "pair_scores"
    code = _choice(fn, "similarity", similarity, SIMILARITIES)
    shape = (feat_q.shape[0] if len(feat_q.shape) else 0,
             feat_g.shape[0] if len(feat_g.shape) else 0)
    if _ffi.is_tensor(feat_q):
        out = _torch().empty(shape, dtype=_torch().float32, device=feat_q.device)
    else:
        out = np.empty(shape, np.float32)
    _ffi.check(ffi, lib, lib.roc_pair_scores(
        _ffi.describe(ffi, fn, "feat_q", feat_q), _ffi.describe(ffi, fn, "feat_g", feat_g), code,
        _ffi.describe(ffi, fn, "score", out, writable=True), _ffi.cuda_stream(ffi, feat_q)))
    return out
