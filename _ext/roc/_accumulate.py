"""RocAccumulator: one ROC from batches that arrive one at a time (a training
loop, a data loader), equal to the one-shot evaluation of all of them.

Binned mode counts each batch as it comes and keeps only the bins and the
genuine scores: memory O(bins + genuine pairs). Exact mode cannot count a
batch before it knows every genuine score (an impostor's place on the curve
depends on genuine scores still to come, and no summary smaller than the
impostor scores themselves can answer that later), so it keeps the batches'
inputs, the query features (Q x D, not the Q x G scores) or the pairs' scores,
and evaluates them in one pass at compute(): memory O(inputs + genuine pairs).

update() checks each batch as evaluate() checks its inputs (arrays, devices,
shapes, dtypes, labels that are integers, y_true's values), so that a bad
batch is refused where it enters and the batches before it stay usable. It
keeps every batch in one form, whatever the form it came in (torch, NumPy,
lists, any DLPack producer, mixed from batch to batch): torch tensors (NumPy
arrays where torch is not installed) on the stream's device (device=, else
the first batch's); scores float32 (float16 and bfloat16 widened exactly)
or float64, as they come: a stream with a float64 batch is evaluated in
float64, its float32 batches widened exactly (as NumPy and torch concatenate
them), so its report is that of evaluate_pairs on the concatenation (float64
scores ordered exactly, _float64.py; binned mode counts each batch as it
comes, float64 scores rounded to float32, its bins' precision);
genuine flags as bool, under scikit-learn's default pos_label rule over all
the batches so far; labels_q in the dtype of the first batch. A later batch
whose labels that dtype cannot hold exactly is refused: concatenating them
with promotion would merge labels (2^24 + 1 with 2^24 in float32, integers
beyond 2^53 in float64) and change the report.
"""

import numpy as np

from .. import _ffi
from . import _distributed
from ._evaluate import Options, all_pairs, counts_only, eer_in_curve_mode, finish, pair_list
from ._inputs import (DEFAULT_FARS, as_torch, cast_exactly, float32_scores, from_dlpack,
                      genuine_flags, label_array, parse_device, require_array, require_float32,
                      require_score_dtype)

FN = "RocAccumulator"
UPDATE = "RocAccumulator.update"


def _on_device(name, x, device):
    """A batch's array in the stream's form: a torch tensor on `device`, or a
    NumPy array where torch is not installed (the device is then the CPU)."""
    if _ffi.torch is not None:
        return as_torch(UPDATE, name, x, device)
    return x if isinstance(x, np.ndarray) else from_dlpack(UPDATE, name, x)


def _copy(x):
    """A private copy of a batch's array (the caller may reuse its buffers)."""
    if _ffi.is_tensor(x):
        return x.detach().clone()
    return np.array(x, copy=True)


def _concat(parts):
    """The batches' arrays, of one kind and device, and of one dtype but for
    empty ones and float32 scores beside float64 ones (update() made them
    so): empty ones take the others' dtype, which no promotion can then
    change; float32 scores are widened to float64 (exactly)."""
    dtypes = [p.dtype for p in parts if p.shape[0]] or [parts[0].dtype]
    if _ffi.is_tensor(parts[0]):
        torch = _ffi.torch
        dtype = torch.float64 if torch.float64 in dtypes else dtypes[0]
        return torch.cat([p.to(dtype) for p in parts])
    dtype = np.dtype(np.float64) if np.dtype(np.float64) in dtypes else dtypes[0]
    return np.concatenate([p.astype(dtype, copy=False) for p in parts])


class RocAccumulator:
    """Accumulates batches into one ROC.

    RocAccumulator(labels_g, feat_g, ...)   query batches against a fixed gallery:
                                            update(labels_q, feat_q)
    RocAccumulator(...)                     batches of a list of pairs:
                                            update(genuine, score)

    compute() returns the RocReport that evaluate() (or evaluate_pairs()) gives
    on all the batches at once; options as there (mode, bins, range, fars,
    far_rule, eer_rule, max_fpr, device, similarity). With group=, every rank streams its own
    batches and compute() reduces across the ranks (collective: every rank
    calls it). reset() forgets the batches.
    """

    def __init__(self, labels_g=None, feat_g=None, *, mode="exact", bins=1024,
                 range=(-1.0, 1.0), fars=DEFAULT_FARS, far_rule="max_tpr",
                 eer_rule="crossing", max_fpr=None, device=None, similarity="cosine",
                 group=None):
        self.options = Options(FN, mode=mode, bins=bins, range=range, fars=fars,
                               far_rule=far_rule, similarity=similarity, eer_rule=eer_rule,
                               max_fpr=max_fpr)
        if (labels_g is None) != (feat_g is None):
            raise ValueError("%s: give labels_g and feat_g (a gallery), or neither (pairs)" % FN)
        self.gallery = None
        if feat_g is not None:
            require_array(FN, "feat_g", feat_g)
            if len(feat_g.shape) != 2:
                raise ValueError("%s: feat_g must be 2-D (G, D), got shape %s"
                                 % (FN, tuple(feat_g.shape)))
            self.gallery = (label_array(FN, "labels_g", labels_g, feat_g.shape[0],
                                        "rows in feat_g"), feat_g)
        self.device = device
        self.group = group
        self.reset()

    def reset(self):
        self.batches = []
        self.bins = None        # binned: bins + below + above, NaN-inclusive totals
        self.levels = None      # binned: the genuine levels so far
        self.stream = None      # what the batches so far fixed (see _query_batch, _pair_batch)

    def update(self, a, b):
        """Adds a batch: (labels_q, feat_q) against the gallery, or (genuine,
        score) of a list of pairs, checked here; a batch refused leaves the
        accumulator as it was."""
        if self.gallery is not None:
            (a, b), stream = self._query_batch(a, b)
        else:
            (a, b), stream = self._pair_batch(a, b)
        if self.options.mode == "exact":
            self.batches.append((_copy(a), _copy(b)))
            self.stream = stream
            return
        counted = self._count(a, b, None)
        evaluation = counted[0]
        counts = evaluation.counts()
        batch = np.concatenate([counts["bins"], counts["below"], counts["above"],
                                counts["totals"][:2]])
        self.bins = batch if self.bins is None else self.bins + batch
        keys, genuine, n_nan = evaluation.levels()
        self.levels = _merge_levels(self.levels, (keys, genuine, n_nan))
        self.stream = stream

    def _device(self, x):
        """The stream's device: device=, else where the first batch was."""
        return self.stream["device"] if self.stream else parse_device(UPDATE, self.device, x)

    def _query_batch(self, labels_q, feat_q):
        """(labels_q, feat_q) in the stream's form, and the stream then: its
        device, and the dtype of labels_q (the first non-empty batch's)."""
        require_array(UPDATE, "feat_q", feat_q)
        device = self._device(feat_q)
        feat_q = require_float32(UPDATE, "feat_q", _on_device("feat_q", feat_q, device))
        dim = self.gallery[1].shape[1]
        if len(feat_q.shape) != 2 or feat_q.shape[1] != dim:
            raise ValueError("%s: feat_q must be (B, %d), rows of feat_g's dimension, got shape "
                             "%s" % (UPDATE, dim, tuple(feat_q.shape)))
        labels_q = _on_device("labels_q", label_array(UPDATE, "labels_q", labels_q,
                                                      feat_q.shape[0], "rows in feat_q"), device)
        dtype = self.stream["labels_dtype"] if self.stream else None
        if dtype is not None:
            labels_q = cast_exactly(UPDATE, "labels_q", labels_q, dtype,
                                    "the dtype of the first batch's labels_q")
        elif labels_q.shape[0]:  # an empty batch fixes no dtype (an empty list's is no choice)
            dtype = np.dtype(_ffi.dtype_name(labels_q))
        return (labels_q, feat_q), {"device": device, "labels_dtype": dtype}

    def _pair_batch(self, genuine, score):
        """(genuine flags, score) in the stream's form, and the stream then: its
        device, and the values of genuine in every batch so far (the default
        pos_label rule covers them all, as it would their concatenation)."""
        require_score_dtype(UPDATE, "score", require_array(UPDATE, "score", score), float64=True)
        device = self._device(score)
        flags, classes = genuine_flags(UPDATE, "genuine", genuine, None,
                                       self.stream["classes"] if self.stream else set(),
                                       takes_pos_label=False)
        score = _on_device("score", score, device)
        if _ffi.dtype_name(score) != "float64":
            score = float32_scores(UPDATE, "score", score)
        if len(score.shape) != 1:
            raise ValueError("%s: score must be 1-D (N,), got shape %s"
                             % (UPDATE, tuple(score.shape)))
        if score.shape[0] != flags.shape[0]:
            raise ValueError("%s: score has %d elements but genuine has %d"
                             % (UPDATE, score.shape[0], flags.shape[0]))
        flags = _on_device("genuine", flags, device)
        flags = flags if _ffi.dtype_name(flags) == "bool" else flags != 0  # values 0 and 1
        return (flags, score), {"device": device, "classes": classes}

    def _count(self, a, b, group, options=None, levels=None):
        options = options or self.options
        if self.gallery is not None:
            labels_g, feat_g = self.gallery
            return all_pairs(FN, options, a, labels_g, None, b, feat_g, False,
                             self.device, group, levels=levels)
        return pair_list(FN, options, a, b, None, None, None, None, self.device, group,
                         levels=levels)

    def compute(self):
        """The RocReport of every batch so far (with a group: of every rank's).

        With a group, its first step (shared by every rank, whatever its mode)
        joins this rank's batches and agrees on what changes the result; a
        failure there, as in any later step, is raised on every rank."""
        session = _distributed.session(FN, self.group)
        held = {}
        session.step(lambda: self._prepare(session, held), gather=True)
        if self.options.mode == "exact":
            def count(options, levels=None):
                return self._count(held["a"], held["b"], self.group, options, levels)
            return eer_in_curve_mode(finish(count(self.options), self.options, count)[0],
                                     self.options, count)
        return self._compute_binned(session)

    def _prepare(self, session, held):
        """This rank's work before compute()'s collectives: exact mode's batches
        joined (into `held`); returns what every rank must agree on."""
        if not self.batches and self.bins is None and \
                isinstance(session, _distributed.LocalSession):
            raise ValueError("%s: compute() before any update()" % FN)
        if self.options.mode == "exact":
            parts = self.batches or [self._empty_batch()]
            held["a"] = _concat([p[0] for p in parts])
            held["b"] = _concat([p[1] for p in parts])
        options = dict(self.options.signature(),
                       pairs="all" if self.gallery is not None else "list")
        agreed = {"options": options}
        if self.gallery is not None:
            feat_g = self.gallery[1]
            agreed.update(n_gallery=feat_g.shape[0],
                          dim=feat_g.shape[1] if len(feat_g.shape) == 2 else None)
        return agreed

    def _empty_batch(self):
        """A rank with no batches still takes part in the group's evaluation."""
        labels_g, feat_g = self.gallery if self.gallery is not None else (None, None)
        if feat_g is not None:
            return (labels_g[:0], feat_g[:0])
        return (np.zeros(0, np.bool_), np.zeros(0, np.float32))

    def _compute_binned(self, session):
        """The bins of every rank summarized against the genuine levels of all."""
        options = self.options

        def own_levels():
            evaluation = counts_only(FN, "binned", options.bins, options.range)
            keys, genuine, n_nan = self.levels or (np.zeros(0, np.uint32),
                                                   np.zeros(0, np.uint64), 0)
            evaluation.set_levels(keys, genuine, n_nan)
            return evaluation

        def own_bins():
            counts = evaluation.counts()
            if self.bins is not None:
                n = options.bins
                counts["bins"][:] = self.bins[:n]
                counts["below"][0], counts["above"][0] = self.bins[n], self.bins[n + 1]
                counts["totals"][:2] = self.bins[n + 2:]

        evaluation = session.step(own_levels)
        session.share_levels(evaluation)  # (zeroes the counts)
        session.step(own_bins)
        setup = {"pairs": "all" if self.gallery is not None else "list"}
        return finish((evaluation, setup, session), options)[0]


def _merge_levels(old, new):
    """Levels (keys, counts, NaN count) of two sets of genuine pairs together."""
    if old is None:
        return new
    keys, counts = _distributed.merge_counts(np.concatenate([old[0], new[0]]),
                                             np.concatenate([old[1], new[1]]))
    return keys, counts, old[2] + new[2]
