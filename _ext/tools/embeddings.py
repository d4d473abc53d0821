"""Embedding files for the scripts: loading query/gallery .npz files with
one-line errors, and the embedded demo data set.

An .npz holds `feature` (N, D) and `label` (N,). Features are converted to
float32 (float64 files are common); labels stay integers (int64) or become
float32 where that is exact.
"""

import sys

import numpy as np


class InputError(Exception):
    """An input the scripts cannot use; its message is the whole story."""


def fail(script, message):
    sys.exit("%s: %s" % (script, message))


def demo_data(seed=2018, n_ids=1000, per_query=3, per_gallery=4, dim=128):
    """A face-verification-like data set, the same on every run: identity
    centres on the unit sphere, samples = centre + noise of a per-identity
    difficulty, L2-normalized. 3,000 queries x 4,000 gallery entries."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_ids, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    noise_scale = rng.uniform(0.6, 1.5, n_ids)

    def samples(per_id):
        labels = np.repeat(np.arange(n_ids), per_id)
        noise = rng.standard_normal((labels.size, dim)) / np.sqrt(dim)
        feature = centres[labels] + noise * noise_scale[labels, None]
        feature /= np.linalg.norm(feature, axis=1, keepdims=True)
        return {"feature": feature.astype(np.float32), "label": labels}

    return samples(per_query), samples(per_gallery)


def load(path):
    """{"feature", "label"} arrays of an .npz; InputError if unusable."""
    try:
        data = np.load(path)
    except (OSError, ValueError) as error:
        raise InputError("cannot read %s: %s" % (path, error)) from None
    if not hasattr(data, "files"):
        raise InputError("%s is not an .npz archive (it holds a single array)" % path)
    missing = [key for key in ("feature", "label") if key not in data.files]
    if missing:
        raise InputError("%s has no %s array (it has: %s)" % (
            path, " or ".join(repr(k) for k in missing), ", ".join(data.files) or "nothing"))
    return {"feature": data["feature"], "label": data["label"]}


def checked(name, data):
    """(feature float32 (N, D), label (N,)): converts what is safe to convert
    (float64 features, integer labels to int64, float labels to float32 when
    exact) and raises InputError for the rest."""
    feature, label = np.asarray(data["feature"]), np.asarray(data["label"])
    if feature.ndim != 2:
        raise InputError("%s: feature must be (N, D), got shape %s" % (name, feature.shape))
    if not np.issubdtype(feature.dtype, np.number) or np.iscomplexobj(feature):
        raise InputError("%s: feature must be real numbers, got %s" % (name, feature.dtype))
    if label.ndim == 2 and 1 in label.shape:
        label = label.reshape(-1)
    if label.ndim != 1 or label.shape[0] != feature.shape[0]:
        raise InputError("%s: label must be (N,) with N = %d features, got shape %s"
                         % (name, feature.shape[0], label.shape))
    if np.issubdtype(label.dtype, np.integer) or label.dtype == np.bool_:
        label = label.astype(np.int64)
    elif np.issubdtype(label.dtype, np.floating):
        label = float32_labels(name, label)
    else:
        raise InputError("%s: label must be numeric, got %s" % (name, label.dtype))
    return np.ascontiguousarray(feature, dtype=np.float32), np.ascontiguousarray(label)


def float32_labels(name, label):
    as_float32 = label.astype(np.float32)
    if np.isnan(as_float32).any() or not np.array_equal(as_float32, label):
        raise InputError("%s: labels are NaN or not exactly representable in float32" % name)
    return as_float32


def query_gallery(query, gallery):
    """Both sets checked, with features of one dimension and labels of one dtype."""
    feature_q, label_q = checked("query", query)
    feature_g, label_g = checked("gallery", gallery)
    if feature_q.shape[1] != feature_g.shape[1]:
        raise InputError("query features are %d-D but gallery features are %d-D"
                         % (feature_q.shape[1], feature_g.shape[1]))
    if label_q.dtype != label_g.dtype:  # integer labels on one side, float on the other
        label_q, label_g = float32_labels("query", label_q), float32_labels("gallery", label_g)
    return feature_q, label_q, feature_g, label_g
