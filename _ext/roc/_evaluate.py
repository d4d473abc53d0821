"""evaluate(), roc_curve(), evaluate_pairs(), roc_curve_pairs() and
pair_scores(): the thin Python side of the evaluator in src/roc_eval.c (the
CPU backend in src/roc_eval_cpu.c, the GPU's in src/cuda/roc_eval_*.cu).

Python checks the options, makes the labels integers, describes the
arrays, steps through the rows (or pairs) in chunks so a caller can show
progress, and, with a torch.distributed group, exchanges the genuine levels
and reduces the counts (_distributed.py).
"""

import copy

import numpy as np

from .. import _ffi
from . import _distributed, _float64
from ._inputs import (DEFAULT_FARS, EER_RULES, FAR_RULES, MODES, SIMILARITIES, bin_range, boolean,
                      choice, comparable_labels, far_targets, genuine_flags,
                      host_labels, parse_device, partial_auc_bound, positive_int, progress_callback,
                      require_array, require_default_classes, require_float32, require_one_source,
                      require_score_dtype, same_set_code, to_device)
from ._report import report_from_summary
from ._roc import ffi, lib

MODE_CODES = {"exact": lib.ROC_MODE_EXACT, "binned": lib.ROC_MODE_BINNED,
              "curve": lib.ROC_MODE_CURVE}
RULE_CODES = {"max_tpr": lib.ROC_FAR_MAX_TPR, "nearest": lib.ROC_FAR_NEAREST,
              "first_above": lib.ROC_FAR_FIRST_ABOVE, "interpolate": lib.ROC_FAR_INTERPOLATE,
              "nearest_sklearn": lib.ROC_FAR_NEAREST_SKLEARN}
EER_CODES = {"crossing": lib.ROC_EER_CROSSING, "nearest_mean": lib.ROC_EER_NEAREST_MEAN}
SIMILARITY_CODES = {"cosine": lib.ROC_COSINE, "dot": lib.ROC_DOT}
PAIRS_NAMES = {0: "all", 1: "unordered", 2: "ordered"}

# units (rows, or pairs of a list) per step: the curve mode holds a key per
# pair of a step (4 bytes) plus CUB's sort buffers; the others hold nothing per
# pair. The GPU's feature pass prepares a gallery of more than one chunk
# (roc_eval_plan.cuh's kGalleryChunkBytes, k-major) again at every step: 2^34
# pairs a step keep that near 1% of the tile products (dev/NOTES.md, operands).
DEFAULT_CHUNK = {("cuda", "curve"): 1 << 26, ("cuda", "pass"): 1 << 30,
                 ("cuda", "features"): 1 << 34,
                 ("cpu", "curve"): 1 << 24, ("cpu", "pass"): 1 << 24,
                 ("cpu", "features"): 1 << 24}
MAX_BINS = 1 << 30
# nearest_sklearn in exact mode (roc_summary.c): the lowest scores of each gap
# that the CPU pass keeps (fewer where the gaps are many: roc_eval.c), and the
# keys a probing pass counts one by one, over all the gaps it probes
LOW_KEYS = 32
PROBE_KEYS = 1 << 16


# ---------------------------------------------------------------------------
# one C evaluator

class Evaluation:
    """A C evaluator (roc.h) and the arrays it reads, kept alive as long as it."""

    def __init__(self, fn, handle, keep, n_rows, pairs_per_row, device, features=False):
        self.fn = fn
        self.handle = ffi.gc(handle, lib.roc_eval_free)
        self.keep = keep
        self.n_rows = n_rows            # rows (or pairs) to count
        self.pairs_per_row = pairs_per_row
        self.device = device
        self.features = features        # all pairs scored from features: the feature pass

    def check(self, status):
        _ffi.check(ffi, lib, status)

    def add_rows(self, begin, end):
        self.check(lib.roc_eval_add_rows(self.handle, begin, end))

    def view(self):
        out = ffi.new("roc_counts_view *")
        self.check(lib.roc_eval_counts(self.handle, out))
        return out

    def levels(self):
        """(keys uint32, genuine pairs uint64, NaN genuine pairs) of the levels."""
        v = self.view()
        return (_numpy(v.level_keys, v.n_levels, np.uint32).copy(),
                _numpy(v.level_counts, v.n_levels, np.uint64).copy(), int(v.totals[3]))

    def set_levels(self, keys, counts, n_nan_genuine):
        keys = np.ascontiguousarray(keys, np.uint32)
        counts = np.ascontiguousarray(counts, np.uint64)
        self.check(lib.roc_eval_set_levels(
            self.handle, ffi.from_buffer("uint32_t[]", keys), ffi.from_buffer("uint64_t[]", counts),
            len(keys), int(n_nan_genuine)))

    def counts(self):
        """The host counts as NumPy views of the evaluator's own arrays: writing
        to them changes what summarize() sees."""
        v = self.view()
        U = v.n_levels
        out = {"totals": _numpy(v.totals, 4, np.uint64)}
        if v.mode == lib.ROC_MODE_EXACT:
            out.update(at=_numpy(v.at, U, np.uint64), gap=_numpy(v.gap, U + 1, np.uint64),
                       gap_min=_numpy(v.gap_min, U + 1, np.uint32),
                       top_key=_numpy(v.top_key, 1, np.uint32),
                       top_count=_numpy(v.top_count, 1, np.uint64))
        elif v.mode == lib.ROC_MODE_BINNED:
            out.update(bins=_numpy(v.bins, v.n_bins, np.uint64),
                       below=_numpy(v.below, 1, np.uint64), above=_numpy(v.above, 1, np.uint64))
        else:
            out.update(keys=_numpy(v.keys, v.n_keys, np.uint32),
                       key_counts=_numpy(v.key_counts, v.n_keys, np.uint64))
        return out

    def set_keys(self, keys, counts):
        keys = np.ascontiguousarray(keys, np.uint32)
        counts = np.ascontiguousarray(counts, np.uint64)
        self.check(lib.roc_eval_set_keys(self.handle, ffi.from_buffer("uint32_t[]", keys),
                                         ffi.from_buffer("uint64_t[]", counts), len(keys)))

    def set_gap_keys(self, gap, first, through, keys, counts):
        keys = np.ascontiguousarray(keys, np.uint32)
        counts = np.ascontiguousarray(counts, np.uint64)
        self.check(lib.roc_eval_set_gap_keys(
            self.handle, gap, first, through, ffi.from_buffer("uint32_t[]", keys),
            ffi.from_buffer("uint64_t[]", counts), len(keys)))

    def curve_points(self, every_point, on_device):
        """Curve mode: scikit-learn's points (roc.h's roc_eval_curve_size and
        _points), highest score first: (keys, fps, tps) as int32 (the uint32
        keys' bits) and int64 arrays; torch tensors on the evaluator's GPU where
        on_device (its counts never fetched), else NumPy arrays."""
        n = ffi.new("int64_t *")
        self.check(lib.roc_eval_curve_size(self.handle, int(every_point), n))
        if on_device:
            torch = _ffi.torch
            arrays = [torch.empty(n[0], dtype=dtype, device=self.device)
                      for dtype in (torch.int32, torch.int64, torch.int64)]
        else:
            arrays = [np.empty(n[0], dtype) for dtype in (np.int32, np.int64, np.int64)]
        self.check(lib.roc_eval_curve_points(self.handle, *(
            _ffi.describe(ffi, self.fn, name, a) for name, a in zip(("keys", "fps", "tps"),
                                                                    arrays))))
        return arrays

    def summarize(self, fars, far_rule, eer_rule="crossing", max_fpr=None, every_point=False):
        far_array = ffi.new("double[]", list(fars)) if fars else ffi.NULL
        options = ffi.new("roc_summary_options *")
        options.fars, options.n_fars = far_array, len(fars)
        options.far_rule, options.eer_rule = RULE_CODES[far_rule], EER_CODES[eer_rule]
        options.max_fpr = max_fpr or 0.0
        options.every_point = every_point
        out = ffi.new("roc_summary **")
        self.check(lib.roc_eval_summarize(self.handle, options, out))
        return ffi.gc(out[0], lib.roc_summary_free)


def _numpy(pointer, n, dtype):
    """A NumPy view of n elements at a C pointer (writable, no copy)."""
    dtype = np.dtype(dtype)
    if n == 0 or pointer == ffi.NULL:
        return np.zeros(0, dtype)
    return np.frombuffer(ffi.buffer(pointer, n * dtype.itemsize), dtype=dtype)


def _config(fn, mode, same_set=0, similarity="cosine", bins=1024, bin_range_=(-1.0, 1.0),
            row_offset=0, step_rows=0, low_keys=0):
    config = ffi.new("roc_eval_config *")
    config.caller = fn.encode()[:31]
    config.mode = MODE_CODES[mode]
    config.same_set = same_set
    config.similarity = SIMILARITY_CODES[similarity]
    config.row_offset = row_offset
    config.bins = bins
    config.range_lo, config.range_hi = bin_range_
    config.step_rows = step_rows
    config.low_keys = low_keys
    return config


def counts_only(fn, mode, bins=1024, bin_range_=(-1.0, 1.0)):
    """An Evaluation with no pairs of its own, for counts made elsewhere."""
    handle = ffi.new("roc_eval **")
    _ffi.check(ffi, lib, lib.roc_eval_create_counts(handle, _config(fn, mode, bins=bins,
                                                                    bin_range_=bin_range_)))
    return Evaluation(fn, handle[0], (), 0, 0, "cpu")


# ---------------------------------------------------------------------------
# options

class Options:
    """The options every entry point shares, checked once."""

    def __init__(self, fn, mode="exact", bins=1024, range=(-1.0, 1.0), fars=DEFAULT_FARS,
                 far_rule="max_tpr", chunk=None, similarity="cosine", progress=None,
                 modes=MODES, eer_rule="crossing", max_fpr=None, drop_intermediate=True):
        self.fn = fn
        self.mode = choice(fn, "mode", mode, modes)
        self.bins = positive_int(fn, "bins", bins, MAX_BINS)
        self.range = bin_range(fn, range)
        self.fars = far_targets(fn, fars)
        self.far_rule = choice(fn, "far_rule", far_rule, FAR_RULES)
        self.eer_rule = choice(fn, "eer_rule", eer_rule, EER_RULES)
        self.max_fpr = partial_auc_bound(fn, max_fpr)
        self.chunk = None if chunk is None else positive_int(fn, "chunk", chunk)
        self.similarity = choice(fn, "similarity", similarity, SIMILARITIES)
        self.progress = progress_callback(fn, progress)
        self.every_point = not boolean(fn, "drop_intermediate", drop_intermediate)
        self.low_keys = LOW_KEYS if (self.mode, self.far_rule) == ("exact", "nearest_sklearn") \
            else 0

    def signature(self):
        """What every rank of a group must agree on."""
        return {"mode": self.mode, "bins": self.bins, "range": self.range, "fars": self.fars,
                "far_rule": self.far_rule, "similarity": self.similarity,
                "eer_rule": self.eer_rule, "max_fpr": self.max_fpr,
                "drop_intermediate": not self.every_point}

    def pass_progress(self, passes):
        """The progress callback of pass number `passes` over the pairs: the
        progress of every pass so far together (pass k reports (k - 1) P + done
        of k P pairs); None without one."""
        if self.progress is None:
            return None

        def progress(done, total):
            self.progress(done + (passes - 1) * total, passes * total)
        return progress

    def probing(self, passes):
        """These options for probing pass number `passes` (nearest_sklearn): no
        lists kept, progress as pass_progress's."""
        options = copy.copy(self)
        options.low_keys = 0
        options.progress = self.pass_progress(passes)
        return options

    def config(self, fn, grouped, **kwargs):
        """The C evaluator's configuration of these options. The CPU's lists for
        nearest_sklearn are kept in one process only (those of several ranks are
        not merged: their probing passes decide instead)."""
        return _config(fn, self.mode, similarity=self.similarity, bins=self.bins,
                       bin_range_=self.range, low_keys=0 if grouped else self.low_keys,
                       **kwargs)

    def rows_per_step(self, device, units_per_row, features=False):
        """Rows (or pairs) per add_rows call: `chunk` pairs; from features, in
        whole multiples of the backend's row tile (roc_eval_row_tile: a step
        that ended inside a tile would have the next step compute it again)."""
        kind = "cuda" if device.startswith("cuda") else "cpu"
        pass_kind = "curve" if self.mode == "curve" else "features" if features else "pass"
        chunk = self.chunk or DEFAULT_CHUNK[(kind, pass_kind)]
        rows = max(1, chunk // max(units_per_row, 1))
        align = lib.roc_eval_row_tile(lib.EXT_CUDA if kind == "cuda" else lib.EXT_CPU) \
            if features else 1
        return max(align, rows // align * align)


# ---------------------------------------------------------------------------
# running an evaluation

def _count(evaluation, options, session, total_pairs, pairs_in_rows):
    """add_rows over the evaluation's rows in steps, reporting progress (the
    global progress with a group, estimated from this rank's share)."""
    rows = options.rows_per_step(evaluation.device, evaluation.pairs_per_row,
                                 evaluation.features)
    local_total = pairs_in_rows(0, evaluation.n_rows)
    done = 0
    for begin in range(0, evaluation.n_rows, rows):
        end = min(begin + rows, evaluation.n_rows)
        evaluation.add_rows(begin, end)
        done += pairs_in_rows(begin, end)
        if options.progress is not None and session.rank == 0:
            share = done / local_total if local_total else 1.0
            options.progress(int(round(share * total_pairs)), total_pairs)
    if options.progress is not None and session.rank == 0 and evaluation.n_rows == 0:
        options.progress(total_pairs, total_pairs)


def finish(counted, options, count=None):
    """The (report, summary) of a counted evaluation: the counts of every rank
    reduced, then summarized (the same on every rank). nearest_sklearn's rows
    that the summary leaves pending are decided by probing passes:
    count(options, levels) counts the same pairs again against `levels`."""
    evaluation, setup, session = counted
    session.reduce_counts(evaluation)

    def summarize():
        return session.step(lambda: evaluation.summarize(
            options.fars, options.far_rule, options.eer_rule, options.max_fpr,
            options.every_point))
    summary = summarize()
    passes = 1
    pending = _pending(summary)
    while pending:
        passes += 1
        _probe(evaluation, session, pending, count, options.probing(passes))
        summary = summarize()
        pending = _pending(summary)
    report = report_from_summary(summary, options, setup["pairs"], passes)
    if setup.get("scale") is not None:  # float64 scores, counted as their surrogates
        report.map_scores(setup["scale"].scores)
    report.communication = session.communication
    return report, summary


def curve(counted, options):
    """(fpr, tpr, thresholds) of a counted curve-mode evaluation, as
    scikit-learn's roc_curve makes them (a first point (0, 0) at +inf, then
    fps / fps[-1] and tps / tps[-1] in float64), from the evaluator's points:
    built on its GPU where it counted them (one process), float64 torch
    tensors there; NumPy arrays on the CPU (a group's GPU ranks, whose counts
    are reduced on the host, move theirs to the GPU)."""
    evaluation, setup, session = counted
    session.reduce_counts(evaluation)
    gpu = evaluation.device != "cpu"
    keys, fps, tps = session.step(lambda: evaluation.curve_points(
        options.every_point, gpu and session.world_size == 1))
    if gpu and not _ffi.is_tensor(keys):
        keys, fps, tps = (_ffi.torch.from_numpy(a).to(evaluation.device) for a in (keys, fps, tps))
    thresholds = _key_scores(keys)
    if setup.get("scale") is not None:  # float64 scores, counted as their surrogates
        thresholds = setup["scale"].scores(thresholds)
    if gpu:
        torch = _ffi.torch
        zero = torch.zeros(1, dtype=torch.float64, device=keys.device)
        # divided by a tensor: torch's CUDA division by a Python number
        # multiplies by its reciprocal, an ulp from scikit-learn's quotient
        fpr = torch.cat([zero, fps.double() / fps[-1:].double()])
        tpr = torch.cat([zero, tps.double() / tps[-1:].double()])
        return fpr, tpr, torch.cat([zero + float("inf"), thresholds])
    fpr = np.r_[0.0, fps.astype(np.float64) / float(fps[-1])]
    tpr = np.r_[0.0, tps.astype(np.float64) / float(tps[-1])]
    return fpr, tpr, np.r_[np.inf, thresholds]


def _key_scores(keys):
    """float64 scores of keys (int32 holding roc_math.h's uint32 keys): the
    inverse of roc_score_key, on the keys' device."""
    high = keys < 0  # the key's top bit: a score >= +0.0
    if _ffi.is_tensor(keys):
        bits = _ffi.torch.where(high, keys & 0x7FFFFFFF, ~keys)
        return bits.view(_ffi.torch.float32).double()
    bits = np.where(high, keys & 0x7FFFFFFF, ~keys).astype(np.int32)
    return bits.view(np.float32).astype(np.float64)


# ---------------------------------------------------------------------------
# nearest_sklearn's probing passes (roc_summary.c: which scores decide a row)

def _pending(summary):
    """{gap: (first key, end key)} of the rows the summary leaves pending."""
    return {int(summary.far_pending_gap[i]): (int(summary.far_pending_from[i]),
                                              int(summary.far_pending_end[i]))
            for i in range(summary.n_fars) if summary.far_pending_gap[i] >= 0}


def _probe_levels(first, end, budget):
    """A probing pass's levels for the keys first .. end - 1 of a gap, about
    `budget` of them: the first half one key each, the rest spread evenly up to
    the gap's end (included). A level counts the pairs of its key; the open
    range between two levels, its pairs and their lowest key, which is all of
    them where it holds one pair (scores that lie far apart)."""
    dense = min(end - first, max(1, budget // 2))
    rest = end - first - dense
    spread = min(rest, max(1, budget - dense))
    grid = first + dense + (np.arange(spread, dtype=np.int64) * rest) // max(spread, 1)
    return np.unique(np.r_[np.arange(first, first + dense), grid[:spread if rest else 0], end])


def _probe(evaluation, session, pending, count, options):
    """One pass over the pairs that probes each pending gap's keys from the
    first unknown one (PROBE_KEYS levels in all, shared by the gaps), and gives
    `evaluation` what it learnt: every key with its pairs up to the first range
    whose pairs it cannot place (roc_eval_set_gap_keys)."""
    if count is None:
        raise RuntimeError("%s: nearest_sklearn needs a probing pass, which this evaluation "
                           "cannot make" % options.fn)
    gaps = sorted(pending)
    plans = [_probe_levels(*pending[gap], max(2, PROBE_KEYS // len(gaps))) for gap in gaps]
    probe, _, probe_session = count(options, np.concatenate(plans).astype(np.uint32))
    probe_session.reduce_counts(probe)
    counts = probe.counts()
    at = 0
    for gap, levels in zip(gaps, plans):
        first, end = pending[gap]
        keys, pairs, through = [], [], end - 1
        for i, key in enumerate(levels[:-1], at):
            if counts["at"][i]:
                keys.append(key)
                pairs.append(counts["at"][i])
            above, lowest = counts["gap"][i + 1], int(counts["gap_min"][i + 1])
            if above == 1 or (above and lowest == levels[i - at + 1] - 1):
                keys.append(lowest)
                pairs.append(above)
            elif above:
                through = lowest - 1
                break
        session.step(lambda: evaluation.set_gap_keys(gap, first, through, keys, pairs))
        at += len(levels)


# ---------------------------------------------------------------------------
# the counting steps

def _counted(fn, options, session, prepare, create, held, levels=None):
    """The steps every evaluation takes up to its counts: prepare the inputs into
    `held` (and agree across ranks), float64 scores made float32 or their
    surrogates (setup["scale"]: _float64.exact_scores), create the evaluator
    (genuine levels), share the levels (or count against `levels`, the same on
    every rank, a probing pass's keys), count. Returns (evaluation, setup,
    session)."""
    infos = session.step(prepare, gather=True)
    setup = infos[session.rank]
    # exact mode reports the scores of genuine levels and gaps' ends only, which
    # the genuine levels' scale keeps; nearest_sklearn's ties inside a gap need
    # every distinct score
    setup["scale"] = _float64.exact_scores(
        fn, session, held, infos,
        levels_scale=options.mode == "exact" and options.far_rule != "nearest_sklearn")
    evaluation = session.step(lambda: create(setup, infos))
    if levels is None:
        session.share_levels(evaluation)
    else:
        session.step(lambda: evaluation.set_levels(levels, np.zeros(len(levels), np.uint64), 0))
    session.step(lambda: _count(evaluation, options, session, setup["total_pairs"],
                                setup["pairs_in_rows"]))
    return evaluation, setup, session


def all_pairs(fn, options, labels_q, labels_g, score, feat_q, feat_g, same_set, device, group,
              levels=None):
    """Every (query, gallery) pair, counted (see finish; `levels` as _counted's)."""
    session = _distributed.session(fn, group)
    held = {}

    def prepare():
        setup = _prepare_all_pairs(fn, options, labels_q, labels_g, score, feat_q, feat_g,
                                   same_set_code(fn, same_set), device, group is not None)
        held.update(setup.pop("arrays"))
        return setup

    def create(setup, infos):
        same_set = setup["same_set"]
        row_offset = session.row_offset(infos, setup) if same_set else 0
        if same_set:
            _check_shard_labels(fn, held, row_offset)
        n_query, n_gallery = setup["n_query"], setup["n_gallery"]
        total_rows = sum(info["n_query"] for info in infos)
        setup["total_pairs"] = (total_rows * (total_rows - 1) // (1 if same_set == 2 else 2)
                                if same_set else sum(info["n_query"] * info["n_gallery"]
                                                     for info in infos))
        setup["pairs_in_rows"] = lambda b, e: _pairs_in_rows(b, e, row_offset, n_gallery,
                                                             same_set)
        setup["pairs"] = PAIRS_NAMES[same_set]
        features = held["score"] is None
        config = options.config(fn, session.world_size > 1, same_set=same_set,
                                row_offset=row_offset,
                                step_rows=options.rows_per_step(setup["device"], n_gallery,
                                                                features))
        args = [_ffi.describe(ffi, fn, "labels_q", held["labels_q"]),
                _ffi.describe(ffi, fn, "labels_g", held["labels_g"])]
        args += [_ffi.describe(ffi, fn, name, held[name]) if held[name] is not None else ffi.NULL
                 for name in ("score", "feat_q", "feat_g")]
        handle = ffi.new("roc_eval **")
        _ffi.check(ffi, lib, lib.roc_eval_create(handle, config, *args,
                                                 _ffi.cuda_stream(ffi, held["labels_q"])))
        return Evaluation(fn, handle[0], (dict(held), args), n_query, n_gallery,
                          setup["device"], features=features)

    return _counted(fn, options, session, prepare, create, held, levels)


def _prepare_all_pairs(fn, options, labels_q, labels_g, score, feat_q, feat_g, same_set, device,
                       grouped):
    require_one_source(fn, score, feat_q, feat_g)
    if score is not None:
        require_score_dtype(fn, "score", score, float64=True)
    if same_set and not grouped:
        # one process: the queries are the whole set
        if score is not None and (len(score.shape) != 2 or score.shape[0] != score.shape[1]):
            raise ValueError("%s: same_set needs one set: score must be square, got shape %s"
                             % (fn, tuple(score.shape)))
        if feat_g is not None and feat_g is not feat_q:
            raise ValueError("%s: same_set=True means one set: feat_g must be feat_q (or None)"
                             % fn)
        if labels_g is not None and labels_g is not labels_q and not np.array_equal(
                host_labels(fn, "labels_g", labels_g), host_labels(fn, "labels_q", labels_q)):
            raise ValueError("%s: same_set=True means one set: labels_g must be labels_q "
                             "(or None)" % fn)
        labels_g = labels_q
    if same_set:
        if labels_g is None:
            labels_g = labels_q
        if feat_q is not None and feat_g is None:
            feat_g = feat_q
    elif labels_g is None:
        raise ValueError("%s: labels_g is required unless same_set=True" % fn)
    elif feat_q is not None and feat_g is None:
        raise ValueError("%s: feat_g is required with feat_q unless same_set=True" % fn)
    device = parse_device(fn, device, score, feat_q, feat_g, labels_q, labels_g)
    same_features = feat_g is feat_q
    score, float64_scores = _float64.prepared(fn, "score", to_device(fn, "score", score, device),
                                              options.mode)
    feat_q = to_device(fn, "feat_q", feat_q, device)
    feat_g = feat_q if same_features else to_device(fn, "feat_g", feat_g, device)
    for name, x in (("feat_q", feat_q), ("feat_g", feat_g)):
        if x is not None:
            require_float32(fn, name, x)
    shape = tuple((score if score is not None else feat_q).shape)
    if len(shape) != 2:
        raise ValueError("%s: %s must be 2-D, got shape %s"
                         % (fn, "score" if score is not None else "feat_q", shape))
    n_query = shape[0]
    n_gallery = score.shape[1] if score is not None else (
        feat_g.shape[0] if len(feat_g.shape) == 2 else None)
    if feat_g is not None and len(feat_g.shape) != 2:
        raise ValueError("%s: feat_g must be 2-D, got shape %s" % (fn, tuple(feat_g.shape)))
    labels_q, labels_g = comparable_labels(fn, labels_q, labels_g, n_query, n_gallery, device)
    return {"n_query": n_query, "n_gallery": n_gallery, "device": device,
            "dim": feat_q.shape[1] if feat_q is not None else None,
            "source": "score" if score is not None else "features",
            "score_dtype": str(getattr(score if score is not None else feat_q, "dtype", "")),
            "options": options.signature(), "same_set": same_set,
            "float64_scores": float64_scores,
            "arrays": {"labels_q": labels_q, "labels_g": labels_g, "score": score,
                       "feat_q": feat_q, "feat_g": feat_g}}


def _check_shard_labels(fn, held, row_offset):
    """One set in shards: this rank's queries must be rows row_offset.. of the set."""
    labels_q, labels_g = held["labels_q"], held["labels_g"]
    rows = labels_g[row_offset:row_offset + labels_q.shape[0]]
    equal = bool((rows == labels_q).all()) if not isinstance(rows, np.ndarray) \
        else bool(np.array_equal(rows, labels_q))
    if not equal:
        raise ValueError("%s: same_set: labels_q are not rows %d..%d of the set's labels "
                         "(each rank passes consecutive rows, in rank order, and the whole set)"
                         % (fn, row_offset, row_offset + labels_q.shape[0] - 1))


def _pairs_in_rows(begin, end, row_offset, n_gallery, same_set):
    if not same_set:
        return (end - begin) * n_gallery
    if same_set == 2:
        return (end - begin) * (n_gallery - 1)
    # set row i holds n_gallery - 1 - i pairs
    first, last = row_offset + begin, row_offset + end - 1
    return sum(n_gallery - 1 - i for i in (first, last)) * (end - begin) // 2 if end > begin else 0


def pair_list(fn, options, genuine, score, feat_a, feat_b, index_a, index_b, device, group,
              pos_label=None, levels=None):
    """A list of pairs, counted (see finish; `levels` as _counted's)."""
    session = _distributed.session(fn, group)
    held = {}

    def prepare():
        setup = _prepare_pair_list(fn, options, genuine, score, feat_a, feat_b, index_a,
                                   index_b, device, pos_label, group is not None)
        held.update(setup.pop("arrays"))
        return setup

    def create(setup, infos):
        n = setup["n_pairs"]
        if pos_label is None:  # the default rule holds for the values of every rank
            require_default_classes(fn, "genuine", set().union(
                *(info["genuine_classes"] or () for info in infos)), " (over the ranks)")
        setup["total_pairs"] = sum(info["n_pairs"] for info in infos)
        setup["pairs_in_rows"] = lambda b, e: e - b
        setup["pairs"] = "list"
        config = options.config(fn, session.world_size > 1)
        args = [_ffi.describe(ffi, fn, name, held[name]) if held[name] is not None else ffi.NULL
                for name in ("genuine", "score", "feat_a", "feat_b", "index_a", "index_b")]
        handle = ffi.new("roc_eval **")
        _ffi.check(ffi, lib, lib.roc_eval_create_pairs(handle, config, *args,
                                                       _ffi.cuda_stream(ffi, held["genuine"])))
        return Evaluation(fn, handle[0], (dict(held), args), n, 1, setup["device"])

    return _counted(fn, options, session, prepare, create, held, levels)


def _prepare_pair_list(fn, options, genuine, score, feat_a, feat_b, index_a, index_b, device,
                       pos_label, grouped):
    features = (feat_a, feat_b, index_a, index_b)
    if (score is None) == all(x is None for x in features) or \
            (score is None and any(x is None for x in features)):
        raise ValueError("%s: give either score=, or feat_a=, feat_b=, index_a= and index_b="
                         % fn)
    for name, x in (("score", score), ("feat_a", feat_a), ("feat_b", feat_b),
                    ("index_a", index_a), ("index_b", index_b)):
        if x is not None:
            require_array(fn, name, x)
    if score is not None:
        require_score_dtype(fn, "score", score, float64=True)
    genuine, classes = genuine_flags(fn, "genuine", genuine, pos_label,
                                     set() if grouped else None)
    device = parse_device(fn, device, score, feat_a, genuine)
    same_features = feat_b is feat_a
    arrays = {name: to_device(fn, name, x, device) for name, x in (
        ("genuine", genuine), ("score", score), ("feat_a", feat_a), ("index_a", index_a),
        ("index_b", index_b))}
    arrays["score"], float64_scores = _float64.prepared(fn, "score", arrays["score"],
                                                        options.mode)
    arrays["feat_b"] = arrays["feat_a"] if same_features else to_device(fn, "feat_b", feat_b,
                                                                        device)
    for name in ("feat_a", "feat_b"):
        if arrays[name] is not None:
            require_float32(fn, name, arrays[name])
    return {"n_pairs": arrays["genuine"].shape[0], "device": device, "genuine_classes": classes,
            "float64_scores": float64_scores,
            "options": dict(options.signature(), pos_label=pos_label),
            "dim": arrays["feat_a"].shape[1] if feat_a is not None and
            len(arrays["feat_a"].shape) == 2 else None,
            "source": "score" if score is not None else "features", "arrays": arrays}


# ---------------------------------------------------------------------------
# public API

def evaluate(labels_q, labels_g, *, score=None, feat_q=None, feat_g=None, same_set=False,
             mode="exact", bins=1024, range=(-1.0, 1.0), fars=DEFAULT_FARS,
             far_rule="max_tpr", eer_rule="crossing", max_fpr=None, device=None, chunk=None,
             similarity="cosine", progress=None, group=None):
    """ROC of every (query, gallery) pair, its AUC, EER and TAR@FAR.

    labels_q (Q,), labels_g (G,)   labels: bool, integers, or floats holding integers
                                   (any arrays: torch, NumPy..., or lists); pair (i, j)
                                   is genuine when they are equal, compared exactly
                                   whatever the two dtypes; a float label that is not
                                   an integer (NaN, infinities) is a ValueError
    score (Q, G)                   a score matrix: float32, float16 / bfloat16
                                   (widened exactly to a float32 copy), or float64,
                                   ordered and tied exactly as float64 in exact and
                                   curve mode (an order-preserving float32 stand-in
                                   per score, every reported score mapped back:
                                   _float64.py; a sort of the scores, or in exact
                                   mode of the genuine ones, and O(N) extra memory,
                                   with a group O(distinct scores) of
                                   communication), rounded to float32 in binned mode
                                   (its edges are float32), or
    feat_q (Q, D), feat_g (G, D)   float32 features, scored tile by tile and never
                                   stored: similarity "cosine" (default) or "dot";
                                   float64 features are refused (cast them: every
                                   score is an fp32 FMA chain, as pair_scores)
    same_set                       the query set is the gallery (labels_g and feat_g
                                   may then be None): True or "unordered" counts each
                                   unordered pair once, "ordered" twice (IFRT's
                                   convention); self-pairs never count
    mode                           "exact": the exact curve, AUC, EER and TAR@FAR,
                                   memory O(genuine pairs); "binned": `bins`
                                   uniform bins over `range` (numpy.histogram's
                                   convention), scores outside counted apart;
                                   "curve": scikit-learn's full curve, memory
                                   O(distinct scores)
    fars, far_rule                 TAR@FAR targets (a number or a sequence), and the
                                   rule: "max_tpr" (the largest TPR with FPR <= far),
                                   "nearest" (the curve point nearest far),
                                   "first_above" (the first point with FPR >= far),
                                   "interpolate" (linear), "nearest_sklearn"
                                   (InsightFace's IJB rule on scikit-learn's
                                   drop_intermediate curve: the nearest point, the
                                   highest TPR among equally near ones; exact mode
                                   decides it from the corners and how the impostor
                                   scores nearest them tie, which the CPU counts in
                                   the same pass; elsewhere a pass that probes
                                   those scores: report.passes)
    eer_rule                       "crossing" (default): where the curve's polyline
                                   crosses FPR = FNR, FPR interpolated there;
                                   "nearest_mean" (torchmetrics' binary_eer):
                                   (FPR + FNR) / 2 at the point of the full curve
                                   minimizing |FPR - FNR|, the first of equals
                                   (exact mode makes a further pass, in curve
                                   mode, when that point may lie inside a run of
                                   tied impostors it does not resolve:
                                   report.passes)
    max_fpr                        also report.partial_auc: the McClish-standardized
                                   area over FPR in [0, max_fpr], as
                                   roc_auc_score(max_fpr=); None (default): none
    device                         where to compute ("cpu", "cuda", "cuda:1"); default:
                                   where the inputs are
    chunk                          pairs per step (bounds the memory of a step)
    progress                       called as progress(pairs_done, pairs_total)
    group                          a torch.distributed process group (True or
                                   "world": the default group): this rank's
                                   queries are its shard (for same_set: consecutive
                                   rows of the set, in rank order, e.g. from
                                   shard_rows), the gallery is whole; every rank
                                   returns the report of all the ranks' pairs

    NaN scores are excluded and counted (n_nan); infinities are ordinary extreme
    scores. Returns a RocReport.
    """
    options = _distributed.checked("evaluate", group, lambda: Options(
        "evaluate", mode=mode, bins=bins, range=range, fars=fars, far_rule=far_rule, chunk=chunk,
        similarity=similarity, progress=progress, modes=MODES + ("curve",), eer_rule=eer_rule,
        max_fpr=max_fpr))

    def count(options, levels=None):
        return all_pairs("evaluate", options, labels_q, labels_g, score, feat_q, feat_g,
                         same_set, device, group, levels)
    return eer_in_curve_mode(finish(count(options), options, count)[0], options, count)


def eer_in_curve_mode(report, options, count):
    """The report, with nearest_mean's EER taken from scikit-learn's whole curve
    (a further pass, in curve mode; count(options) counts the same pairs) where
    the point nearest FPR = FNR may lie inside a run of impostors whose ties
    exact mode does not count. Every other field stays exact mode's."""
    if options.mode != "exact" or not report._eer_undecided:
        return report
    curve_options = Options(options.fn, mode="curve", fars=(), chunk=options.chunk,
                            similarity=options.similarity, modes=("curve",),
                            eer_rule=options.eer_rule,
                            progress=options.pass_progress(report.passes + 1))
    curve = finish(count(curve_options), curve_options)[0]
    report.eer, report.eer_threshold = curve.eer, curve.eer_threshold
    report._eer_undecided = False
    report.passes += curve.passes
    return report


def roc_curve(labels_q, labels_g, *, score=None, feat_q=None, feat_g=None, same_set=False,
              drop_intermediate=True, device=None, chunk=None, similarity="cosine",
              progress=None, group=None):
    """(fpr, tpr, thresholds) as float64 arrays (NumPy on the CPU, torch
    tensors on the scores' GPU), identical to
    sklearn.metrics.roc_curve(y_true, y_score, drop_intermediate=...) on the
    flattened pairs (thresholds descending, thresholds[0] = inf; half-precision
    scores as their float32 values, float64 scores as themselves): by default
    (True) scikit-learn's points, those where the curve turns; with False, a
    point at every distinct score.

    Same inputs as evaluate(). Every distinct score is counted, so memory grows
    with the number of distinct scores (at most one per pair), plus `chunk`
    pairs per step; evaluate() needs memory only for the genuine pairs.
    """
    options = _distributed.checked("roc_curve", group, lambda: Options(
        "roc_curve", mode="curve", fars=(), chunk=chunk, similarity=similarity,
        progress=progress, modes=("curve",), drop_intermediate=drop_intermediate))
    return curve(all_pairs("roc_curve", options, labels_q, labels_g, score, feat_q, feat_g,
                           same_set, device, group), options)


def evaluate_pairs(genuine, score=None, *, feat_a=None, feat_b=None, index_a=None,
                   index_b=None, pos_label=None, mode="exact", bins=1024, range=(-1.0, 1.0),
                   fars=DEFAULT_FARS, far_rule="max_tpr", eer_rule="crossing", max_fpr=None,
                   device=None, chunk=None, similarity="cosine", progress=None, group=None):
    """ROC of a list of N pairs: scikit-learn's (y_true, y_score) form, or the
    pairs of a verification protocol (IJB-B/C, LFW).

    genuine (N,)                   y_true: bool, integers, or floats holding integers
                                   (an array or a list); pair t is genuine where
                                   genuine[t] == pos_label
    pos_label                      the value of the genuine pairs, as scikit-learn's
                                   roc_curve takes it; None (default): 1, where
                                   genuine's values lie within {0, 1} or within
                                   {-1, 1} (bool included), else a ValueError
    score (N,)                     the pairs' scores (dtypes as evaluate()'s), or
    feat_a (A, D), feat_b (B, D)   float32 features with index_a (N,) and index_b (N,)
    index_a, index_b               (int32 or int64): pair t is rows feat_a[index_a[t]]
                                   and feat_b[index_b[t]], scored as pair_scores
                                   would (feat_b may be feat_a)
    the rest                       as evaluate(); with a group, each rank passes its
                                   own pairs

    Exact mode keeps memory O(genuine pairs) and N may exceed 2^31. Returns a
    RocReport.
    """
    options = _distributed.checked("evaluate_pairs", group, lambda: Options(
        "evaluate_pairs", mode=mode, bins=bins, range=range, fars=fars, far_rule=far_rule,
        chunk=chunk, similarity=similarity, progress=progress, modes=MODES + ("curve",),
        eer_rule=eer_rule, max_fpr=max_fpr))

    def count(options, levels=None):
        return pair_list("evaluate_pairs", options, genuine, score, feat_a, feat_b, index_a,
                         index_b, device, group, pos_label, levels)
    return eer_in_curve_mode(finish(count(options), options, count)[0], options, count)


def roc_curve_pairs(genuine, score=None, *, feat_a=None, feat_b=None, index_a=None,
                    index_b=None, pos_label=None, drop_intermediate=True, device=None,
                    chunk=None, similarity="cosine", progress=None, group=None):
    """(fpr, tpr, thresholds) of a list of pairs, identical to
    sklearn.metrics.roc_curve(genuine, score, pos_label=pos_label,
    drop_intermediate=...). Inputs as evaluate_pairs(), drop_intermediate as
    roc_curve()'s."""
    options = _distributed.checked("roc_curve_pairs", group, lambda: Options(
        "roc_curve_pairs", mode="curve", fars=(), chunk=chunk, similarity=similarity,
        progress=progress, modes=("curve",), drop_intermediate=drop_intermediate))
    return curve(pair_list("roc_curve_pairs", options, genuine, score, feat_a, feat_b, index_a,
                           index_b, device, group, pos_label), options)


def pair_scores(feat_q, feat_g, similarity="cosine"):
    """The (Q, G) float32 scores evaluate() computes from these features: each an
    fp32 dot product (of L2-normalized rows, for cosine) accumulated in index
    order. On the features' device, an array of feat_q's kind (_ffi.empty_like;
    an output that cannot be allocated is a MemoryError naming pair_scores)."""
    fn = "pair_scores"
    choice(fn, "similarity", similarity, SIMILARITIES)
    require_array(fn, "feat_q", feat_q)
    require_array(fn, "feat_g", feat_g)
    for name, x in (("feat_q", feat_q), ("feat_g", feat_g)):
        if len(x.shape) != 2:
            raise ValueError("%s: %s must be 2-D (N, D), got shape %s" % (fn, name,
                                                                         tuple(x.shape)))
    out = _ffi.empty_like(feat_q, (feat_q.shape[0], feat_g.shape[0]), "float32", fn=fn,
                          name="score")
    _ffi.check(ffi, lib, lib.roc_pair_scores(
        _ffi.describe(ffi, fn, "feat_q", feat_q), _ffi.describe(ffi, fn, "feat_g", feat_g),
        SIMILARITY_CODES[similarity], _ffi.describe(ffi, fn, "score", out, writable=True),
        _ffi.cuda_stream(ffi, feat_q)))
    return out
