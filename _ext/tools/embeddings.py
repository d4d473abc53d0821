"""Files for the command-line tools, read with one-line errors that name the
file: embedding .npz archives, the rows they should not have, pair lists and
IJB-style template/media and face-score lists; and the embedded demo data set.

An embedding .npz holds `feature` (N, D) and `label` (N,) (or, for pair
lists, `id` (N,)). Features are converted to float32 (float64 files are
common); labels stay integers (int64) or become float32 where that is exact.
"""

import os
import re
import sys
import warnings
import zipfile

import numpy as np


class InputError(ValueError):
    """An input the tools cannot use; its message is the whole story."""


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


def check_writable(path):
    """InputError naming `path` unless a file can be written there; checked
    before any long computation. Leaves no file behind that was not there."""
    existed = os.path.lexists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as error:
        raise InputError("cannot write %s: %s" % (path, error.strerror or error)) from None
    if not existed:
        os.remove(path)


# ---------------------------------------------------------------------------
# .npz archives

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
NPY_MAGIC = b"\x93NUMPY"


def load(path, keys=("feature", "label"), optional=(), hint=""):
    """{key: array} of an .npz archive for every key, and for each optional key
    it has; InputError (naming the file) if it is missing, empty, not an .npz,
    corrupt, lacks a key (the message ends with `hint`) or holds Python objects."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(NPY_MAGIC))
    except OSError as error:
        raise InputError("cannot read %s: %s" % (path, error.strerror or error)) from None
    if not head:
        raise InputError("%s is empty (0 bytes)" % path)
    if head.startswith(NPY_MAGIC):
        raise InputError("%s is not an .npz archive (it holds a single array)" % path)
    if not head.startswith(ZIP_MAGIC):
        raise InputError("%s is not an .npz archive (not a zip file)" % path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [key for key in keys if key not in archive.files]
            if missing:
                raise InputError("%s has no %s array (it has: %s)%s" % (
                    path, " or ".join(repr(k) for k in missing),
                    ", ".join(archive.files) or "nothing", hint))
            out = {}
            for key in list(keys) + [k for k in optional if k in archive.files]:
                try:
                    out[key] = archive[key]
                except ValueError as error:
                    if "allow_pickle" not in str(error):
                        raise
                    raise InputError("%s: array %r holds Python objects (dtype object); save "
                                     "it as numbers" % (path, key)) from None
            return out
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        if isinstance(error, InputError):
            raise
        raise InputError("%s is a corrupt .npz archive (%s)" % (path, error)) from None


def features_of(name, feature):
    """feature as float32 (N, D); InputError unless it is a 2-D real array."""
    feature = np.asarray(feature)
    if feature.ndim != 2:
        raise InputError("%s: feature must be (N, D), got shape %s" % (name, feature.shape))
    if not np.issubdtype(feature.dtype, np.number) or np.iscomplexobj(feature):
        raise InputError("%s: feature must be real numbers, got %s" % (name, feature.dtype))
    return np.ascontiguousarray(feature, dtype=np.float32)


def column_of(name, key, values, n_rows):
    """An (N,) array with N = n_rows (an (N, 1) or (1, N) one is flattened)."""
    values = np.asarray(values)
    if values.ndim == 2 and 1 in values.shape:
        values = values.reshape(-1)
    if values.ndim != 1 or values.shape[0] != n_rows:
        raise InputError("%s: %s must be (N,) with N = %d features, got shape %s"
                         % (name, key, n_rows, values.shape))
    return values


def integers_of(name, key, values, n_rows):
    """An (N,) int64 array; InputError unless the values are whole numbers."""
    values = column_of(name, key, values, n_rows)
    if np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_:
        if values.dtype == np.uint64 and values.size and values.max() > np.iinfo(np.int64).max:
            raise InputError("%s: %s values exceed the int64 range" % (name, key))
        return values.astype(np.int64)
    if np.issubdtype(values.dtype, np.floating):
        as_int = values.astype(np.int64) if np.isfinite(values).all() else None
        if as_int is not None and np.array_equal(as_int, values):
            return as_int
    raise InputError("%s: %s must be integers, got %s" % (name, key, values.dtype))


def face_scores_of(name, values, n_rows):
    """An (N,) float32 array of face detector scores; InputError unless each is
    a finite number >= 0."""
    values = column_of(name, "face_score", values, n_rows)
    if not (np.issubdtype(values.dtype, np.number) or values.dtype == np.bool_) or \
            np.iscomplexobj(values):
        raise InputError("%s: face_score must be real numbers, got %s" % (name, values.dtype))
    bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0)))
    if bad.size:
        raise InputError("%s: face_score must be finite and >= 0, got %r in row %d"
                         % (name, values[bad[0]].item(), bad[0]))
    return values.astype(np.float32)


def checked(name, data):
    """(feature float32 (N, D), label (N,)): converts what is safe to convert
    (float64 features, integer labels to int64, float labels to float32 when
    exact) and raises InputError for the rest."""
    feature = features_of(name, data["feature"])
    label = column_of(name, "label", data["label"], feature.shape[0])
    if np.issubdtype(label.dtype, np.integer) or label.dtype == np.bool_:
        label = label.astype(np.int64)
    elif np.issubdtype(label.dtype, np.floating):
        label = float32_labels(name, label)
    else:
        raise InputError("%s: label must be numeric, got %s" % (name, label.dtype))
    return feature, np.ascontiguousarray(label)


def float32_labels(name, label):
    as_float32 = label.astype(np.float32)
    if np.isnan(as_float32).any() or not np.array_equal(as_float32, label):
        raise InputError("%s: labels are NaN or not exactly representable in float32" % name)
    return as_float32


def query_gallery(query, gallery, names=("query", "gallery")):
    """Both sets checked, with features of one dimension and labels of one dtype."""
    feature_q, label_q = checked(names[0], query)
    feature_g, label_g = checked(names[1], gallery)
    if feature_q.shape[1] != feature_g.shape[1]:
        raise InputError("%s features are %d-D but %s features are %d-D"
                         % (names[0], feature_q.shape[1], names[1], feature_g.shape[1]))
    if label_q.dtype != label_g.dtype:  # integer labels on one side, float on the other
        label_q, label_g = float32_labels(names[0], label_q), float32_labels(names[1], label_g)
    return feature_q, label_q, feature_g, label_g


def unusable_rows(feature):
    """Indices of the rows with a non-finite value or only zeros: no cosine
    similarity is defined for them."""
    return np.flatnonzero(~np.isfinite(feature).all(axis=1) | ~feature.any(axis=1))


def rows_text(rows, first=5):
    shown = ", ".join(str(int(r)) for r in rows[:first])
    return shown + (", ..." if len(rows) > first else "")


def unusable_warning(name, rows, n_rows, what="feature rows"):
    """What to say about unusable rows (None if there are none)."""
    if len(rows) == 0:
        return None
    return "%s: %d of %d %s are non-finite or all zero (rows %s)" % (
        name, len(rows), n_rows, what, rows_text(rows))


# ---------------------------------------------------------------------------
# text lists: pairs, and IJB-style template/media lists

def _read_int_table(path, expected, text_column=None):
    """An (n, 3) int64 table of a text file of three whitespace-separated
    columns a line (blank lines skipped; a text column read as 0), read by
    NumPy's C parser; a bad line is named (found by a second, line-by-line
    pass only then)."""
    if os.path.isdir(path):
        raise InputError("cannot read %s: it is a directory" % path)
    converters = {text_column: lambda text: 0} if text_column is not None else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty file: caught below by its size
            table = np.loadtxt(path, dtype=np.int64, comments=None, converters=converters,
                               ndmin=2)
    except OSError as error:
        raise InputError("cannot read %s: %s" % (path, error.strerror or error)) from None
    except (ValueError, UnicodeDecodeError) as error:
        line, text = _first_bad_line(path, text_column)
        if line is None:
            raise InputError("%s: %s" % (path, error)) from None
        raise InputError("%s line %d: expected %s, got %r" % (path, line, expected, text)) \
            from None
    if table.shape[0] == 0:
        raise InputError("%s holds no lines" % path)
    return table


def _first_bad_line(path, text_column):
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                parts = raw.decode().split()
            except UnicodeDecodeError:
                return number, raw[:80].decode(errors="replace").strip()
            if parts and (len(parts) != 3 or not all(
                    _is_int(part) for c, part in enumerate(parts) if c != text_column)):
                return number, " ".join(parts)[:80]
    return None, None


def _is_int(token):
    return re.fullmatch(r"[+-]?[0-9]+", token) is not None


def line_numbers(path, rows):
    """The 1-based line numbers of data rows `rows` (blank lines are not rows)."""
    wanted = {int(r): None for r in rows}
    row = -1
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if raw.strip():
                row += 1
                if row in wanted:
                    wanted[row] = number
                    if all(v is not None for v in wanted.values()):
                        break
    return [wanted[int(r)] for r in rows]


def read_pairs(path):
    """(id_a, id_b, genuine) of a pair list: `id_a id_b label` a line, label 1
    (genuine) or 0 (impostor), as InsightFace's *_template_pair_label.txt."""
    table = _read_int_table(path, "'id_a id_b label' (three integers)")
    label = table[:, 2]
    bad = np.flatnonzero((label != 0) & (label != 1))
    if bad.size:
        line = line_numbers(path, bad[:1])[0]
        raise InputError("%s line %d: the label must be 1 (genuine) or 0 (impostor), got %d"
                         % (path, line, label[bad[0]]))
    return table[:, 0], table[:, 1], label.astype(bool)


def read_template_media(path, n_rows, features_path):
    """(template, media) ids of an IJB-style list, `image_name template_id
    media_id` a line (InsightFace's *_face_tid_mid.txt), one line per feature row."""
    table = _read_int_table(path, "'image_name template_id media_id' (ids are integers)",
                            text_column=0)
    if table.shape[0] != n_rows:
        raise InputError("%s has %d lines but %s has %d feature rows (one line per row)"
                         % (path, table.shape[0], features_path, n_rows))
    return table[:, 1], table[:, 2]


def read_face_scores(path, n_rows, features_path, names_path=None):
    """The face detector score of each feature row (float32, as InsightFace
    reads it): the last column of an IJB-style list, `image_name x1 y1 ... x5 y5
    score` a line (InsightFace's *_name_5pts_score.txt), one line per feature
    row. With names_path (a template/media list), each line's image must be the
    one on the same line of that list."""
    names, scores, lines = [], [], []
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                parts = raw.split()
                if not parts:
                    continue
                try:
                    score = float(parts[-1]) if len(parts) >= 2 else None
                except ValueError:
                    score = None
                if score is None or not 0 <= score < float("inf"):
                    raise InputError("%s line %d: expected 'image_name ... score' with a "
                                     "finite score >= 0 last, got %r"
                                     % (path, number, raw.decode(errors="replace").strip()[:80]))
                names.append(parts[0])
                scores.append(score)
                lines.append(number)
    except OSError as error:
        raise InputError("cannot read %s: %s" % (path, error.strerror or error)) from None
    if len(scores) != n_rows:
        raise InputError("%s has %d lines but %s has %d feature rows (one line per row)"
                         % (path, len(scores), features_path, n_rows))
    if names_path is not None:
        for row, (name, listed) in enumerate(zip(names, image_names(names_path))):
            if name != listed:
                raise InputError("%s line %d names %s, but the same row of %s names %s: the "
                                 "two lists must give the feature rows in one order"
                                 % (path, lines[row], name.decode(errors="replace"), names_path,
                                    listed.decode(errors="replace")))
    return np.array(scores, np.float32)


def image_names(path):
    """The first word of each non-blank line of a list, as bytes."""
    with open(path, "rb") as f:
        for raw in f:
            parts = raw.split(None, 1)
            if parts:
                yield parts[0]


class IdRows:
    """id -> row of the features. Where the ids are small non-negative integers
    (template and image ids are), a table indexed by id: one array lookup per
    pair; else a binary search in the sorted ids (15.6M pairs: 0.1 s against
    1.4 s)."""

    def __init__(self, features_path, ids):
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        twice = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
        if twice.size:
            i = twice[0]
            raise InputError("%s: id %d appears twice (rows %d and %d)"
                             % (features_path, sorted_ids[i], order[i], order[i + 1]))
        self.table = None
        if ids.size and sorted_ids[0] >= 0 and sorted_ids[-1] < 8 * ids.size + (1 << 16):
            self.table = np.full(int(sorted_ids[-1]) + 1, -1, np.int64)
            self.table[ids] = np.arange(ids.size)
        self.sorted_ids, self.order = sorted_ids, order

    def rows(self, ids):
        """The row of each id, -1 where there is none."""
        if self.table is not None:
            rows = self.table[np.clip(ids, 0, self.table.size - 1)]
            rows[(ids < 0) | (ids >= self.table.size)] = -1
            return rows
        if self.sorted_ids.size == 0:
            return np.full(ids.shape, -1, np.int64)
        at = np.minimum(np.searchsorted(self.sorted_ids, ids), self.sorted_ids.size - 1)
        return np.where(self.sorted_ids[at] == ids, self.order[at], -1)


def pair_rows(pairs_path, features_path, id_rows, pair_ids):
    """The rows of pair_ids (an id per pair) in the features; InputError naming
    the line of the first id that is not there."""
    rows = id_rows.rows(pair_ids)
    missing = np.flatnonzero(rows < 0)
    if missing.size:
        line = line_numbers(pairs_path, missing[:1])[0]
        raise InputError("%s line %d: id %d is not in %s"
                         % (pairs_path, line, pair_ids[missing[0]], features_path))
    return rows
