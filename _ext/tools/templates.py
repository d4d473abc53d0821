"""Image features fused with their flipped copies, and IJB template features
built from image features, as InsightFace's IJB evaluation builds them
(recognition/_evaluation_/ijb/ijb_11.py, arcface_torch/eval_ijbc.py). Its
three settings, all on by default there and in the tables it prints:

    F  flip fusion      each image's feature and its horizontally flipped copy's,
                        summed (F2, their default), concatenated (F1), or the
                        image's alone (F0)
    N  feature norm     image features keep their norms (N1, their default; the
                        only form here)
    D  detector score   each image's feature scaled by its face detector score (D1)

then the features of each (template, media) averaged, the media means of a
template summed, and the sum L2-normalised.
"""

import numpy as np

from .embeddings import InputError, unusable_rows

FLIP_MODES = ("add", "concat", "drop")


def fuse_flips(name, feature, flipped, mode):
    """(N, D) or (N, 2D) float32 image features from those of the images and
    their flipped copies: `flipped` (N, D), or None where each row of `feature`
    is [image | flipped copy] (N, 2D), as InsightFace's extraction stores them.
    mode: "add" (F2), "concat" (F1) or "drop" (F0)."""
    if flipped is None:
        if feature.shape[1] % 2:
            raise InputError("%s: without a feature_flip array, each feature row is read as "
                             "[image | flipped copy], so its length must be even, got %d"
                             % (name, feature.shape[1]))
        half = feature.shape[1] // 2
        image, flipped = feature[:, :half], feature[:, half:]
    else:
        if flipped.shape != feature.shape:
            raise InputError("%s: feature_flip must be %s as feature is, got %s"
                             % (name, feature.shape, flipped.shape))
        image = feature
    if mode == "add":
        return image + flipped
    if mode == "concat":
        return np.concatenate([image, flipped], axis=1)
    return np.ascontiguousarray(image)


def template_features(feature, template, media, face_score=None):
    """(template ids ascending, template features float32 (T, D)): each image
    feature scaled by its face_score (float32, as InsightFace scales it) where
    given, the scaled features of each (template, media) averaged, the media
    means of each template summed in float64, the sum L2-normalised. Rows left
    out (non-finite or all zero before scaling) do not count; a template left
    with none is NaN."""
    templates = np.unique(template)
    usable = np.ones(feature.shape[0], bool)
    usable[unusable_rows(feature)] = False
    rows = np.flatnonzero(usable)
    rows = rows[np.lexsort((media[rows], template[rows]))]
    out = np.full((templates.size, feature.shape[1]), np.nan, np.float32)
    if rows.size == 0:
        return templates, out
    scaled = feature[rows]
    if face_score is not None:
        scaled = scaled * face_score[rows, None]
    t, m = template[rows], media[rows]
    media_start = np.flatnonzero(np.r_[True, (t[1:] != t[:-1]) | (m[1:] != m[:-1])])
    media_size = np.diff(np.r_[media_start, rows.size])
    media_mean = np.add.reduceat(scaled, media_start, axis=0, dtype=np.float64)
    media_mean /= media_size[:, None]
    media_template = t[media_start]
    template_start = np.flatnonzero(np.r_[True, media_template[1:] != media_template[:-1]])
    summed = np.add.reduceat(media_mean, template_start, axis=0)
    norm = np.linalg.norm(summed, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        summed /= norm  # a template whose media cancel out: NaN, left out below
    out[np.searchsorted(templates, media_template[template_start])] = summed
    return templates, out
