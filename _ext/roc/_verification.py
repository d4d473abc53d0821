"""verification_accuracy(): the face-verification protocols' k-fold accuracy
(LFW, CFP-FP, AgeDB-30, CALFW, CPLFW) and VAL@FAR, as InsightFace's
verification.py computes them, and an exact variant.

The protocol (InsightFace's recognition/arcface_torch/eval/verification.py;
the older recognition/ArcFace/verification.py has the same formulas):

- the pairs are split into `folds` consecutive folds without shuffling
  (scikit-learn's KFold: the first N % folds folds hold one pair more);
  folds=1 trains and tests on all the pairs;
- accuracy: on the other folds, the threshold of a grid that classifies most
  pairs right (the first, i.e. lowest distance, among equally good ones);
  the fold's accuracy is that threshold's on the fold; the result is the mean
  and the population standard deviation (numpy.std) of the folds' accuracies;
- VAL@FAR: on the other folds, the threshold where the FAR reaches the target,
  by linear interpolation of the grid thresholds over their FARs; the fold's
  VAL (TAR) and FAR are that threshold's on the fold.

InsightFace thresholds the squared euclidean distance of L2-normalized
embeddings, d = |a - b|^2 = 2 - 2 cos(a, b), and accepts a pair when
d < t: its accuracy grid is numpy.arange(0, 4, 0.01), its VAL grid
numpy.arange(0, 4, 0.001).

The interpolation is scipy.interpolate.interp1d(far, thresholds,
kind="slinear") as SciPy evaluated it up to 1.8 (a degree-1 B-spline with
knots at the FARs, duplicates allowed). SciPy 1.9 and later refuse the
duplicate FARs that every grid has ("Expect x to not have duplicates"), so
that today verification.py fails there; InsightFace's published numbers come
from the older rule, reproduced here (_slinear).

Everything runs on the host in float64; the pairs of a protocol are few
(LFW: 6,000), and the counts come from one sort per fold instead of one pass
over the pairs per threshold.
"""

import numpy as np

from .. import _ffi
from ._inputs import as_torch, choice, is_array, positive_int

FN = "verification_accuracy"
METHODS = ("grid", "exact")
ACCURACY_GRID = (0.0, 4.0, 0.01)   # numpy.arange arguments, as verification.py
VAL_GRID = (0.0, 4.0, 0.001)


class VerificationResult:
    """What verification_accuracy() returns.

    accuracy, std          the mean and population standard deviation of the folds'
                           accuracies
    fold_accuracy          (folds,) each fold's accuracy at its threshold
    fold_threshold         (folds,) the threshold chosen on the other folds
    val, val_std, far      the mean and standard deviation of the folds' VAL (TAR)
                           at the threshold chosen for far_target, and the mean
                           FAR it gives (None where far_target is None)
    fold_val, fold_far, fold_val_threshold   their per-fold values
    far_target, folds, method
    accept                 how a threshold t decides: "distance < t" (grid),
                           "score >= t" or "distance <= t" (exact)
    """

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self):
        text = "VerificationResult(accuracy=%.5f, std=%.5f, folds=%d, method=%r" % (
            self.accuracy, self.std, self.folds, self.method)
        if self.far_target is not None:
            text += ", val=%.5f+-%.5f @ far=%.5f" % (self.val, self.val_std, self.far)
        return text + ")"

    def to_dict(self):
        """Plain Python values, ready for json.dump."""
        def plain(values):
            return None if values is None else [float(v) for v in values]
        return {"accuracy": float(self.accuracy), "std": float(self.std),
                "fold_accuracy": plain(self.fold_accuracy),
                "fold_threshold": plain(self.fold_threshold),
                "val": None if self.val is None else float(self.val),
                "val_std": None if self.val_std is None else float(self.val_std),
                "far": None if self.far is None else float(self.far),
                "fold_val": plain(self.fold_val), "fold_far": plain(self.fold_far),
                "fold_val_threshold": plain(self.fold_val_threshold),
                "far_target": self.far_target, "folds": self.folds, "method": self.method,
                "accept": self.accept}


# ---------------------------------------------------------------------------
# inputs

def _host_array(name, x):
    """x as a NumPy array on the host (any framework, or a sequence)."""
    if _ffi.is_tensor(x):
        x = x.detach().cpu()
        return (x.double() if x.dtype.is_floating_point else x).numpy()
    if isinstance(x, (list, tuple, np.ndarray)):
        return np.asarray(x)
    if is_array(x):
        return _host_array(name, as_torch(x))
    raise TypeError("%s: %s must be an array (torch, NumPy, anything with __dlpack__) or a "
                    "sequence, got %s" % (FN, name, type(x).__name__))


def _genuine(x):
    values = _host_array("genuine", x)
    if values.ndim != 1:
        raise ValueError("%s: genuine must be 1-D (N,), got shape %s" % (FN, values.shape))
    if values.dtype.kind not in "biuf":
        raise TypeError("%s: genuine must hold bools or 0/1 numbers, got %s"
                        % (FN, values.dtype))
    bad = np.flatnonzero((values != 0) & (values != 1))
    if bad.size:
        raise ValueError("%s: genuine must hold 1 (genuine) or 0 (impostor), got %r at index %d"
                         % (FN, values[bad[0]].item(), bad[0]))
    return values.astype(bool)


def _values(name, x, n):
    values = _host_array(name, x)
    if values.ndim != 1 or values.shape[0] != n:
        raise ValueError("%s: %s must be (N,) with N = %d pairs (genuine's length), got shape %s"
                         % (FN, name, n, values.shape))
    if values.dtype.kind not in "iuf":
        raise TypeError("%s: %s must hold real numbers, got %s" % (FN, name, values.dtype))
    values = values.astype(np.float64)
    nan = np.flatnonzero(np.isnan(values))
    if nan.size:
        raise ValueError("%s: %s has %d NaN values (the first at index %d); every pair of a "
                         "protocol needs a score" % (FN, name, nan.size, nan[0]))
    return values


def _far_target(far):
    if far is None:
        return None
    try:
        value = float(far)
    except (TypeError, ValueError):
        raise TypeError("%s: far must be a number in [0, 1] or None, got %r" % (FN, far)) \
            from None
    if not 0.0 <= value <= 1.0:
        raise ValueError("%s: far must lie in [0, 1], got %r" % (FN, far))
    return value


def _fold_bounds(n, folds):
    """(start, stop) of each fold: scikit-learn's KFold(folds) without
    shuffling, the first n % folds folds one pair longer."""
    sizes = np.full(folds, n // folds)
    sizes[:n % folds] += 1
    stops = np.cumsum(sizes)
    return list(zip((stops - sizes).tolist(), stops.tolist()))


# ---------------------------------------------------------------------------
# InsightFace's grid

def _counts_below(sorted_values, thresholds):
    """How many of sorted_values lie strictly below each threshold."""
    return np.searchsorted(sorted_values, thresholds, side="left")


def _slinear(x, y, target):
    """interp1d(x, y, kind="slinear")(target) as SciPy <= 1.8 evaluated it, x
    non-decreasing with repeats: a degree-1 B-spline with knots (x[0], x...,
    x[-1]) and coefficients y. Its interval is [x[j], x[j+1]] with j + 1 the
    first index whose x exceeds target, at most len(x) - 1; a zero-length
    interval (target = x[-1] = x[-2]) evaluates to 0, and the value is de
    Boor's h0 = w (x[j+1] - target), h1 = w (target - x[j]), w = 1 / (x[j+1]
    - x[j]), y[j] h0 + y[j+1] h1, in that order of operations."""
    if target < x[0] or target > x[-1]:
        raise ValueError("%s: the FAR target %r lies outside the FARs %r..%r of the threshold "
                         "grid on the training folds (InsightFace's interpolation raises here; "
                         "are the scores cosines, the distances in [0, 4)?)"
                         % (FN, target, float(x[0]), float(x[-1])))
    upper = min(int(np.searchsorted(x, target, side="right")), len(x) - 1)
    xa, xb = x[upper - 1], x[upper]
    if xb == xa:
        return np.float64(0.0)
    w = 1.0 / (xb - xa)
    return y[upper - 1] * (w * (xb - target)) + y[upper] * (w * (target - xa))


def _grid_fold(distance, genuine, train, test, far_target):
    """(accuracy, threshold, val, far, val_threshold) of one fold on InsightFace's grids."""
    gen_train = np.sort(distance[train][genuine[train]])
    imp_train = np.sort(distance[train][~genuine[train]])
    gen_test = np.sort(distance[test][genuine[test]])
    imp_test = np.sort(distance[test][~genuine[test]])

    grid = np.arange(*ACCURACY_GRID)
    right = _counts_below(gen_train, grid) + (imp_train.size - _counts_below(imp_train, grid))
    threshold = grid[int(np.argmax(right))]
    right_test = _counts_below(gen_test, threshold) + (imp_test.size -
                                                       _counts_below(imp_test, threshold))
    accuracy = float(right_test) / (gen_test.size + imp_test.size)
    if far_target is None:
        return accuracy, threshold, None, None, None

    grid = np.arange(*VAL_GRID)
    far_train = _counts_below(imp_train, grid).astype(np.float64) / float(imp_train.size)
    val_threshold = (_slinear(far_train, grid, far_target) if far_train.max() >= far_target
                     else np.float64(0.0))
    val = float(_counts_below(gen_test, val_threshold)) / float(gen_test.size)
    far = float(_counts_below(imp_test, val_threshold)) / float(imp_test.size)
    return accuracy, threshold, val, far, val_threshold


# ---------------------------------------------------------------------------
# the exact variant

def _exact_fold(score, genuine, train, test, far_target):
    """The same protocol with every distinct training score a candidate
    threshold (accept score >= t, t = +inf accepting none): the best accuracy
    any threshold reaches on the training folds, the highest such threshold;
    for VAL, the lowest threshold whose training FAR is <= the target."""
    order = np.argsort(-score[train], kind="stable")
    s, g = score[train][order], genuine[train][order]
    ends = np.flatnonzero(np.r_[s[1:] != s[:-1], True])   # the last of each tied run
    tp = np.cumsum(g)[ends]
    fp = ends + 1 - tp
    n_imp = int((~g).sum())
    thresholds = np.r_[np.inf, s[ends]]
    right = np.r_[n_imp, tp + (n_imp - fp)]
    threshold = thresholds[int(np.argmax(right))]
    accepted = score[test] >= threshold
    accuracy = float(np.sum(accepted == genuine[test])) / test.size
    if far_target is None:
        return accuracy, threshold, None, None, None

    within = np.flatnonzero(np.r_[0, fp] / float(n_imp) <= far_target)
    val_threshold = thresholds[within[-1]]
    accepted = score[test] >= val_threshold
    val = float(np.sum(accepted & genuine[test])) / float(genuine[test].sum())
    far = float(np.sum(accepted & ~genuine[test])) / float((~genuine[test]).sum())
    return accuracy, threshold, val, far, val_threshold


# ---------------------------------------------------------------------------
# public API

def verification_accuracy(genuine, score=None, *, distance=None, folds=10, method="grid",
                          far=1e-3):
    """k-fold verification accuracy and VAL@FAR of a list of pairs, as
    InsightFace's verification.py reports them for LFW, CFP-FP, AgeDB-30...

    genuine (N,)      bool, or 1 (same identity) / 0; in protocol order: the folds
                      are consecutive runs of pairs, never shuffled
    score (N,)        similarities, higher = more alike: cosines of the embeddings;
                      taken as the distance 2 - 2 score (float64), or
    distance (N,)     InsightFace's own: |a - b|^2 of L2-normalized embeddings
    folds             10 for every published protocol; 1 trains and tests on all
    method            "grid": InsightFace's, digit for digit (thresholds on the
                      distance: accept when distance < t, t on numpy.arange(0, 4,
                      0.01); VAL's t interpolated on numpy.arange(0, 4, 0.001)).
                      "exact": every distinct training score is a candidate
                      threshold (accept when score >= t; distance: distance <= t),
                      the best accuracy any threshold reaches, without a grid's
                      step; thresholds are scores themselves, not midpoints, so each
                      is a point of the training folds' ROC (scikit-learn's
                      roc_curve thresholds) and no arithmetic on scores is needed;
                      among equally good thresholds the highest (the strictest, as
                      the grid's first best). VAL: the lowest threshold whose
                      training FAR <= far (the max_tpr rule of evaluate()).
    far               the FAR target of VAL (InsightFace: 1e-3), or None to skip
                      VAL (it needs genuine and impostor pairs on every side of
                      every fold)

    Scores may be any real dtype and framework (moved to the host as float64);
    a NaN is an error (every pair of a protocol must be scored). Returns a
    VerificationResult.
    """
    choice(FN, "method", method, METHODS)
    folds = positive_int(FN, "folds", folds)
    far_target = _far_target(far)
    if (score is None) == (distance is None):
        raise ValueError("%s: give either score= (similarities) or distance= (squared "
                         "distances of L2-normalized embeddings)" % FN)
    genuine = _genuine(genuine)
    n = genuine.shape[0]
    values = _values("score" if score is not None else "distance",
                     score if score is not None else distance, n)
    if folds > n:
        raise ValueError("%s: folds=%d but there are only %d pairs" % (FN, folds, n))
    splits = _fold_bounds(n, folds)
    every = np.arange(n)
    sides = [((every[(every < a) | (every >= b)] if folds > 1 else every), every[a:b])
             for a, b in splits]
    if far_target is not None:
        for k, (train, test) in enumerate(sides):
            for side, rows in (("training", train), ("test", test)):
                kinds = genuine[rows]
                if kinds.all() or not kinds.any():
                    raise ValueError(
                        "%s: fold %d's %s pairs are all %s: VAL@FAR needs both kinds on every "
                        "side of every fold (interleave the pairs as the protocol's list does, "
                        "or give far=None)" % (FN, k, side, "genuine" if kinds.all()
                                                else "impostors"))

    if method == "grid":
        prepared = values if distance is not None else 2.0 - 2.0 * values
        per_fold = [_grid_fold(prepared, genuine, train, test, far_target)
                    for train, test in sides]
        accept = "distance < t"
    else:
        prepared = values if score is not None else -values
        per_fold = [_exact_fold(prepared, genuine, train, test, far_target)
                    for train, test in sides]
        if distance is not None:   # thresholds back in distances
            per_fold = [(a, -t, v, f, None if vt is None else -vt)
                        for a, t, v, f, vt in per_fold]
        accept = "score >= t" if score is not None else "distance <= t"

    accuracy, threshold, val, far_measured, val_threshold = (
        np.array(column, dtype=np.float64) for column in zip(*per_fold))
    fields = dict(accuracy=float(np.mean(accuracy)), std=float(np.std(accuracy)),
                  fold_accuracy=accuracy, fold_threshold=threshold, val=None, val_std=None,
                  far=None, fold_val=None, fold_far=None, fold_val_threshold=None,
                  far_target=far_target, folds=folds, method=method, accept=accept)
    if far_target is not None:
        fields.update(val=float(np.mean(val)), val_std=float(np.std(val)),
                      far=float(np.mean(far_measured)), fold_val=val, fold_far=far_measured,
                      fold_val_threshold=val_threshold)
    return VerificationResult(**fields)
