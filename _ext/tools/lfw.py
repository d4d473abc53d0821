"""LFW's pairs.txt for ext-roc --pairs: the protocol's layout, the images its
lines name, and its 10-fold accuracy.

The layout (Huang et al., LFW technical report, "View 2"):

    10	300                         sets (folds), then pairs of each kind per set
    Abel_Pacheco	1	4               a matched pair: name, image numbers
    ...                             (300 matched lines)
    Abdel_Madi_Shabneh	1	Dean_Barker	1   a mismatched pair: name, number, name, number
    ...                             (300 mismatched lines), then the next set

A first line of one number n is one set of n matched and n mismatched pairs
(pairsDevTrain.txt, pairsDevTest.txt). Image number k of a name is the file
name/name_%04d.jpg (Abel_Pacheco/Abel_Pacheco_0004.jpg) below LFW's root.
The features .npz holds `feature` (N, D) and `path` (N,): each row's image
path, matched on its last two components, so that "lfw/A/A_0001.jpg" or
an absolute path matches "A/A_0001.jpg".

The accuracy is InsightFace's verification.py on those folds (the sets, in
file order: KFold over the pairs without shuffling gives the same folds),
on InsightFace's distance: the squared euclidean distance of the features
L2-normalized in float64.
"""

import re

import numpy as np

from .embeddings import InputError

_INTEGER = re.compile(r"[0-9]+")


class LfwPairs:
    """A pairs.txt: path_a, path_b (the images, name/name_%04d.jpg), genuine
    (bool), lines (each pair's line number), folds, pairs_per_fold."""

    def __init__(self, path_a, path_b, genuine, lines, folds, pairs_per_fold):
        self.path_a, self.path_b, self.genuine = path_a, path_b, genuine
        self.lines, self.folds, self.pairs_per_fold = lines, folds, pairs_per_fold


def image_path(name, number):
    """LFW's file of a name's image number: name/name_%04d.jpg."""
    return "%s/%s_%04d.jpg" % (name, name, number)


def _first_line(path):
    try:
        with open(path, "rb") as f:
            for raw in f:
                if raw.strip():
                    return raw.decode(errors="replace").split()
    except OSError as error:
        raise InputError("cannot read %s: %s" % (path, error.strerror or error)) from None
    return []


def is_lfw_pairs(path):
    """Whether a pair list has LFW's layout: a first line of one or two whole
    numbers (the id-pair list `id_a id_b label` has three)."""
    head = _first_line(path)
    return 1 <= len(head) <= 2 and all(_INTEGER.fullmatch(token) for token in head)


def _number(path, line, token, what):
    if not _INTEGER.fullmatch(token) or int(token) < 1:
        raise InputError("%s line %d: %s must be a positive integer, got %r"
                         % (path, line, what, token))
    return int(token)


def read_pairs(path):
    """The LfwPairs of a pairs.txt; InputError naming the line that does not fit."""
    try:
        with open(path, "rb") as f:
            lines = [(number, raw.decode().split()) for number, raw in enumerate(f, 1)
                     if raw.strip()]
    except OSError as error:
        raise InputError("cannot read %s: %s" % (path, error.strerror or error)) from None
    except UnicodeDecodeError:
        raise InputError("%s is not text (UTF-8)" % path) from None
    if not lines:
        raise InputError("%s holds no lines" % path)
    number, head = lines[0]
    if not 1 <= len(head) <= 2:
        raise InputError("%s line %d: expected 'sets pairs_per_set' (LFW's pairs.txt), got %r"
                         % (path, number, " ".join(head)))
    sets = _number(path, number, head[0], "the number of sets") if len(head) == 2 else 1
    per_kind = _number(path, number, head[-1], "the number of pairs per set")
    body = lines[1:]
    if len(body) != 2 * sets * per_kind:
        raise InputError("%s: its first line announces %d sets of %d matched and %d mismatched "
                         "pairs (%d lines), but %d pair lines follow"
                         % (path, sets, per_kind, per_kind, 2 * sets * per_kind, len(body)))
    path_a, path_b, genuine = [], [], []
    for k, (number, tokens) in enumerate(body):
        matched = k % (2 * per_kind) < per_kind
        if matched and len(tokens) == 3:
            name_a = name_b = tokens[0]
            a, b = (_number(path, number, t, "an image number") for t in tokens[1:])
        elif not matched and len(tokens) == 4:
            name_a, name_b = tokens[0], tokens[2]
            a = _number(path, number, tokens[1], "an image number")
            b = _number(path, number, tokens[3], "an image number")
        else:
            raise InputError("%s line %d: set %d expects a %s pair here (%s), got %r" % (
                path, number, k // (2 * per_kind) + 1, "matched" if matched else "mismatched",
                "name n1 n2" if matched else "name1 n1 name2 n2", " ".join(tokens)))
        path_a.append(image_path(name_a, a))
        path_b.append(image_path(name_b, b))
        genuine.append(matched)
    return LfwPairs(np.array(path_a), np.array(path_b), np.array(genuine, bool),
                    np.array([number for number, _ in body]), sets, 2 * per_kind)


def _image_key(path):
    """The last two components of an image path: name/name_%04d.jpg."""
    parts = [p for p in re.split(r"[\\/]", str(path)) if p]
    return "/".join(parts[-2:])


def pair_rows(pairs, pairs_path, features_path, image_paths):
    """(index_a, index_b): the feature rows of each pair's images; InputError
    naming a path the features file lists twice, or the first pair line whose
    image it lacks."""
    image_paths = np.asarray(image_paths)
    if image_paths.ndim != 1 or image_paths.dtype.kind not in "US":
        raise InputError("%s: path must be (N,) strings (the images' paths), got %s %s"
                         % (features_path, image_paths.dtype, image_paths.shape))
    row_of = {}
    for row, path in enumerate(image_paths.tolist()):
        key = _image_key(path.decode() if isinstance(path, bytes) else path)
        if key in row_of:
            raise InputError("%s: image %s appears twice (rows %d and %d)"
                             % (features_path, key, row_of[key], row))
        row_of[key] = row
    index = []
    for images in (pairs.path_a, pairs.path_b):
        rows = np.array([row_of.get(key, -1) for key in images.tolist()], np.int64)
        missing = np.flatnonzero(rows < 0)
        if missing.size:
            raise InputError("%s line %d: image %s is not in %s (its `path` array)"
                             % (pairs_path, pairs.lines[missing[0]], images[missing[0]],
                                features_path))
        index.append(rows)
    return index[0], index[1]


def insightface_distance(feature, index_a, index_b):
    """verification.py's distance: the features in float64, L2-normalized as
    sklearn.preprocessing.normalize does (an all-zero row stays zero), then
    the sum of squared differences of each pair."""
    feature = np.asarray(feature, np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", feature, feature))
    norms[norms == 0] = 1.0
    unit = feature / norms[:, None]
    return np.sum(np.square(np.subtract(unit[index_a], unit[index_b])), 1)


def fold_accuracy(pairs, feature, index_a, index_b):
    """(VerificationResult, None), or (None, why) where a pair's feature is not
    finite (InsightFace's protocol scores every pair)."""
    from _ext import roc
    used = np.union1d(index_a, index_b)
    bad = used[~np.isfinite(np.asarray(feature[used], np.float64)).all(axis=1)]
    if bad.size:
        return None, ("the %d-fold accuracy is not computed: %d image(s) of the pairs have "
                      "non-finite features (rows %s)"
                      % (pairs.folds, bad.size, ", ".join(str(r) for r in bad[:5])))
    distance = insightface_distance(feature, index_a, index_b)
    return roc.verification_accuracy(pairs.genuine, distance=distance, folds=pairs.folds), None


def accuracy_line(result):
    """The accuracy as ext-roc prints it, beside the TAR@FAR table."""
    line = "%d-fold accuracy %.5f +- %.5f (InsightFace's verification.py" % (
        result.folds, result.accuracy, result.std)
    if result.val is not None:
        line += "; VAL %.5f +- %.5f @ FAR %.5f" % (result.val, result.val_std, result.far)
    return line + ")"

