"""InsightFace's verification.py (the k-fold LFW-style protocol), formula for
formula: the reference that verification_accuracy() and ext-roc --pairs on
LFW's pairs.txt are checked against."""

import numpy as np
from scipy.interpolate import BSpline
from sklearn.model_selection import KFold


def insightface_folds(n, folds):
    """LFold: KFold without shuffling, or train = test = all for one fold."""
    if folds == 1:
        return [(np.arange(n), np.arange(n))]
    return list(KFold(n_splits=folds, shuffle=False).split(np.arange(n)))


def insightface_accuracy_at(thresholds, dist, issame):
    """calculate_accuracy at each threshold (one row of predictions per
    threshold, the loop over thresholds as an array axis): accept when
    dist < threshold; (tp + tn) / size."""
    predict = np.less(dist[None, :], np.reshape(thresholds, (-1, 1)))
    tp = np.sum(np.logical_and(predict, issame), axis=1)
    tn = np.sum(np.logical_and(np.logical_not(predict), np.logical_not(issame)), axis=1)
    return (tp + tn) / float(dist.size)


def insightface_val_far_at(thresholds, dist, issame):
    """calculate_val_far at each threshold, as above."""
    predict = np.less(dist[None, :], np.reshape(thresholds, (-1, 1)))
    true_accept = np.sum(np.logical_and(predict, issame), axis=1)
    false_accept = np.sum(np.logical_and(predict, np.logical_not(issame)), axis=1)
    return (true_accept / float(np.sum(issame)),
            false_accept / float(np.sum(np.logical_not(issame))))


def scipy18_slinear(x, y):
    """interp1d(x, y, kind="slinear") of SciPy <= 1.8: make_interp_spline(x, y,
    k=1) built BSpline(r_[x[0], x, x[-1]], y, 1) whatever the repeats in x (1.9
    refuses them), and interp1d raised outside [x[0], x[-1]]."""
    spline = BSpline.construct_fast(np.r_[x[0], x, x[-1]], np.asarray(y, np.float64), 1)

    def evaluate(target):
        if target < x[0] or target > x[-1]:
            raise ValueError("out of the interpolation range")
        return spline(target)
    return evaluate


def insightface_evaluate(dist, issame, folds=10, far_target=1e-3):
    """calculate_roc's accuracies and best thresholds, then (unless far_target
    is None) calculate_val."""
    thresholds = np.arange(0, 4, 0.01)
    accuracy, best = np.zeros(folds), np.zeros(folds)
    for k, (train, test) in enumerate(insightface_folds(len(issame), folds)):
        acc_train = insightface_accuracy_at(thresholds, dist[train], issame[train])
        best[k] = thresholds[np.argmax(acc_train)]
        accuracy[k] = insightface_accuracy_at(best[k], dist[test], issame[test])[0]
    out = {"accuracy": np.mean(accuracy), "std": np.std(accuracy), "fold_accuracy": accuracy,
           "fold_threshold": best}
    if far_target is None:
        return out

    thresholds = np.arange(0, 4, 0.001)
    val, far, val_threshold = np.zeros(folds), np.zeros(folds), np.zeros(folds)
    for k, (train, test) in enumerate(insightface_folds(len(issame), folds)):
        _, far_train = insightface_val_far_at(thresholds, dist[train], issame[train])
        if np.max(far_train) >= far_target:
            threshold = scipy18_slinear(far_train, thresholds)(far_target)
        else:
            threshold = 0.0
        val_threshold[k] = threshold
        (val[k],), (far[k],) = insightface_val_far_at(threshold, dist[test], issame[test])
    out.update(val=np.mean(val), val_std=np.std(val), far=np.mean(far), fold_val=val,
               fold_far=far, fold_val_threshold=val_threshold)
    return out
