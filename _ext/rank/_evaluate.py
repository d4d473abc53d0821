"""evaluate(): the thin Python side of the rank count in src/roc_rank_eval.c
(the CPU backend in src/roc_rank_cpu.c, the summary in src/roc_rank_summary.c),
in _ext.roc's cffi module.

Python checks the options, makes the labels and cameras integers the C side
compares, describes the arrays, steps through the query rows in chunks (so a
caller can show progress), and, with a torch.distributed group, gathers every
rank's per-query counts: a rank's queries are its own, so the ranks' counts
concatenate, in rank order, into one process's.
"""

import math
import numbers

import numpy as np

from .. import _ffi
from ..roc import _distributed
from ..roc._evaluate import _check_shard_labels
from ..roc._inputs import (SIMILARITIES, _equal_flags, _host, boolean, choice,
                           comparable_labels, far_targets, float32_scores, label_array,
                           parse_device, positive_int, progress_callback, require_one_source,
                           require_score_dtype, to_device)
from ..roc._roc import ffi, lib
from ._report import report_from_summary
from ._shards import combined_gallery_shards, gallery_offsets, gathered_arrays, shared_mates
from ._view import view_arrays, view_of

TIES_CODES = {"expected": lib.ROC_TIES_EXPECTED, "pessimistic": lib.ROC_TIES_PESSIMISTIC,
              "optimistic": lib.ROC_TIES_OPTIMISTIC}
AP_CODES = {"noninterpolated": lib.ROC_AP_NONINTERPOLATED, "trapezoid": lib.ROC_AP_TRAPEZOID}
FPIR_RULE_CODES = {"nist": lib.ROC_FPIR_NIST, "insightface_ijb": lib.ROC_FPIR_INSIGHTFACE_IJB,
                   "insightface_1n_legacy": lib.ROC_FPIR_INSIGHTFACE_1N_LEGACY,
                   "insightface_studio": lib.ROC_FPIR_INSIGHTFACE_STUDIO}
SIMILARITY_CODES = {"cosine": lib.ROC_COSINE, "dot": lib.ROC_DOT}
DEFAULT_FPIRS = (1e-4, 1e-3, 1e-2, 1e-1)
SHARDS = ("queries", "gallery")
MAX_TOPK = 100
MAX_RANK = 1 << 31
# pairs per add_rows step, by whether the count is on the GPU: neither
# backend holds anything per pair, so this sets how often progress is
# reported; the GPU's steps are as large as the ROC evaluator's from features,
# where a gallery of several chunks is prepared again at each step
DEFAULT_CHUNK = {False: 1 << 24, True: 1 << 34}


# ---------------------------------------------------------------------------
# options

def _junk_label(fn, junk):
    """junk as a Python int, or None (no junk label)."""
    if junk is None:
        return None
    if isinstance(junk, (bool, np.bool_)) or not isinstance(junk, numbers.Real):
        raise TypeError("%s: junk must be an integer label or None, got %r" % (fn, junk))
    if not (math.isfinite(junk) and float(junk).is_integer()):
        raise ValueError("%s: junk must be an integer label or None, got %r" % (fn, junk))
    return int(junk)


class Options:
    """evaluate()'s options, checked once."""

    def __init__(self, fn, ties, max_rank, fpirs, fpir_rule, ap, topk, per_query, junk,
                 same_set, similarity, chunk, progress, shard):
        self.fn = fn
        self.shard = choice(fn, "shard", shard, SHARDS)
        self.ties = choice(fn, "ties", ties, tuple(TIES_CODES))
        self.max_rank = positive_int(fn, "max_rank", max_rank, MAX_RANK)
        self.fpirs = far_targets(fn, fpirs, "fpirs")
        self.fpir_rule = choice(fn, "fpir_rule", fpir_rule, tuple(FPIR_RULE_CODES))
        self.ap = choice(fn, "ap", ap, tuple(AP_CODES))
        if isinstance(topk, (bool, np.bool_)) or not isinstance(topk, numbers.Integral):
            raise TypeError("%s: topk must be an integer in [0, %d], got %r"
                            % (fn, MAX_TOPK, topk))
        if not 0 <= topk <= MAX_TOPK:
            raise ValueError("%s: topk must lie in [0, %d], got %d" % (fn, MAX_TOPK, topk))
        self.topk = int(topk)
        self.per_query = boolean(fn, "per_query", per_query)
        self.junk = _junk_label(fn, junk)
        self.same_set = boolean(fn, "same_set", same_set)
        self.similarity = choice(fn, "similarity", similarity, SIMILARITIES)
        self.chunk = None if chunk is None else positive_int(fn, "chunk", chunk)
        self.progress = progress_callback(fn, progress)

    def signature(self):
        """What every rank of a group must agree on."""
        return {"ties": self.ties, "max_rank": self.max_rank, "fpirs": self.fpirs,
                "fpir_rule": self.fpir_rule, "ap": self.ap, "topk": self.topk,
                "per_query": self.per_query, "junk": self.junk, "same_set": self.same_set,
                "similarity": self.similarity, "shard": self.shard}

    def summary_options(self):
        """The C summary's options (with the array they point into)."""
        fpirs = ffi.new("double[]", list(self.fpirs)) if self.fpirs else ffi.NULL
        options = ffi.new("roc_rank_summary_options *")
        options.ties = TIES_CODES[self.ties]
        options.ap = AP_CODES[self.ap]
        options.fpir_rule = FPIR_RULE_CODES[self.fpir_rule]
        options.max_rank = self.max_rank
        options.fpirs, options.n_fpirs = fpirs, len(self.fpirs)
        return options, fpirs

    def kept_nonmated(self, n_queries):
        """How many of the highest non-mated scores the count keeps: what the
        insightface_1n_legacy rule reads (ceil(mated queries x fpir) <= ceil(Q x fpir))."""
        if self.fpir_rule != "insightface_1n_legacy" or not self.fpirs:
            return 0
        return max(math.ceil(n_queries * f) for f in self.fpirs)


# ---------------------------------------------------------------------------
# one C evaluator and its counts

class RankEvaluation:
    """A C rank count (roc_rank.h) and the arrays it reads, kept alive as long as it."""

    def __init__(self, handle, keep, n_rows):
        self.handle = ffi.gc(handle, lib.roc_rank_free)
        self.keep = keep
        self.n_rows = n_rows

    def set_mates(self, first, mate_key, mate_index):
        """Every query's mates over all the gallery's shards (roc_rank_set_mates,
        which copies them)."""
        arrays = [np.ascontiguousarray(first, np.int64), np.ascontiguousarray(mate_key, np.uint32),
                  np.ascontiguousarray(mate_index, np.int64)]
        _ffi.check(ffi, lib, lib.roc_rank_set_mates(
            self.handle, ffi.from_buffer("int64_t[]", arrays[0]),
            ffi.from_buffer("uint32_t[]", arrays[1]), ffi.from_buffer("int64_t[]", arrays[2]),
            len(arrays[1])))

    def add_rows(self, begin, end):
        _ffi.check(ffi, lib, lib.roc_rank_add_rows(self.handle, begin, end))

    def view(self):
        out = ffi.new("roc_rank_view *")
        _ffi.check(ffi, lib, lib.roc_rank_counts(self.handle, out))
        return out


def summarize(fn, view, options):
    """The C summary of a roc_rank_view, freed when collected."""
    c_options, keep = options.summary_options()
    out = ffi.new("roc_rank_summary **")
    _ffi.check(ffi, lib, lib.roc_rank_summarize(view, c_options, fn.encode(), out))
    return ffi.gc(out[0], lib.roc_rank_summary_free)


# ---------------------------------------------------------------------------
# the inputs

def _junk_code(labels_g, comparable_g, junk):
    """(has_junk, junk) as the C side compares it: the comparable label of the
    gallery entries labelled `junk`, where there are any."""
    if junk is None:
        return 0, 0
    where = np.flatnonzero(_host(_equal_flags(labels_g, junk)))
    if where.size == 0:
        return 0, 0
    return 1, int(_host(comparable_g[where[0]:where[0] + 1])[0])


def _prepare(fn, options, labels_q, labels_g, score, feat_q, feat_g, cams_q, cams_g, device,
             grouped):
    """This rank's inputs, checked and on the device, and what the ranks must
    agree on."""
    require_one_source(fn, score, feat_q, feat_g)
    if score is not None:
        require_score_dtype(fn, "score", score)
    same_set = options.same_set
    if same_set and options.shard == "gallery":
        raise ValueError("%s: same_set=True shards the set's rows (shard=\"queries\"); "
                         "shard=\"gallery\" takes two sets" % fn)
    if same_set and not grouped:
        # one process: the queries are the whole set
        if score is not None and (len(score.shape) != 2 or score.shape[0] != score.shape[1]):
            raise ValueError("%s: same_set needs one set: score must be square, got shape %s"
                             % (fn, tuple(score.shape)))
        if feat_g is not None and feat_g is not feat_q:
            raise ValueError("%s: same_set=True means one set: feat_g must be feat_q (or None)"
                             % fn)
        for name_g, x_g, x_q in (("labels_g", labels_g, labels_q), ("cams_g", cams_g, cams_q)):
            if x_g is not None and x_g is not x_q and (x_q is None or not np.array_equal(
                    _host(label_array(fn, name_g, x_g)),
                    _host(label_array(fn, name_g.replace("_g", "_q"), x_q)))):
                raise ValueError("%s: same_set=True means one set: %s must be %s (or None)"
                                 % (fn, name_g, name_g.replace("_g", "_q")))
        labels_g, cams_g = labels_q, cams_q
    if same_set:
        labels_g = labels_q if labels_g is None else labels_g
        feat_g = feat_q if feat_g is None else feat_g
    elif labels_g is None:
        raise ValueError("%s: labels_g is required unless same_set=True" % fn)
    elif feat_q is not None and feat_g is None:
        raise ValueError("%s: feat_g is required with feat_q unless same_set=True" % fn)
    if (cams_q is None) != (cams_g is None):
        raise ValueError("%s: give both cams_q and cams_g, or neither" % fn)
    device = parse_device(fn, device, score, feat_q, feat_g, labels_q, labels_g)
    same_features = feat_g is feat_q
    score = float32_scores(fn, "score", to_device(fn, "score", score, device))
    feat_q = to_device(fn, "feat_q", feat_q, device)
    feat_g = feat_q if same_features else to_device(fn, "feat_g", feat_g, device)
    shape = tuple((score if score is not None else feat_q).shape)
    if len(shape) != 2:
        raise ValueError("%s: %s must be 2-D, got shape %s"
                         % (fn, "score" if score is not None else "feat_q", shape))
    if feat_g is not None and len(feat_g.shape) != 2:
        raise ValueError("%s: feat_g must be 2-D, got shape %s" % (fn, tuple(feat_g.shape)))
    n_query = shape[0]
    n_gallery = score.shape[1] if score is not None else feat_g.shape[0]
    labels_g = label_array(fn, "labels_g", labels_g, n_gallery, "gallery entries")
    comparable_q, comparable_g = comparable_labels(fn, labels_q, labels_g, n_query, n_gallery,
                                                   device)
    has_junk, junk = _junk_code(labels_g, comparable_g, options.junk)
    if cams_q is not None:
        cams_q, cams_g = comparable_labels(fn, cams_q, cams_g, n_query, n_gallery, device,
                                           names=("cams_q", "cams_g"))
    return {"n_query": n_query, "n_gallery": n_gallery, "device": device,
            "dim": feat_q.shape[1] if feat_q is not None else None,
            "source": "score" if score is not None else "features",
            "cameras": cams_q is not None,
            "score_dtype": str(getattr(score if score is not None else feat_q, "dtype", "")),
            "options": options.signature(), "same_set": same_set,
            "gallery_shard": options.shard == "gallery",
            "has_junk": has_junk, "junk": junk,
            "arrays": {"labels_q": comparable_q, "labels_g": comparable_g, "cams_q": cams_q,
                       "cams_g": cams_g, "score": score, "feat_q": feat_q, "feat_g": feat_g}}


def _create(fn, options, session, setup, infos, held):
    """The C rank count of this rank's queries, its mates found."""
    same_set = setup["same_set"]
    row_offset = session.row_offset(infos, setup) if same_set else 0
    if same_set:
        _check_shard_labels(fn, held, row_offset)
    config = ffi.new("roc_rank_config *")
    config.caller = fn.encode()[:31]
    config.similarity = SIMILARITY_CODES[options.similarity]
    config.same_set = int(same_set)
    config.row_offset = row_offset
    config.has_junk = setup["has_junk"]
    config.junk = setup["junk"]
    config.topk = options.topk
    n_queries = setup["n_query"] if options.shard == "gallery" else sum(
        info["n_query"] for info in infos)
    config.keep_nonmated = options.kept_nonmated(n_queries)
    args = [_ffi.describe(ffi, fn, name, held[name]) if held[name] is not None else ffi.NULL
            for name in ("labels_q", "labels_g", "cams_q", "cams_g", "score", "feat_q",
                         "feat_g")]
    handle = ffi.new("roc_rank **")
    _ffi.check(ffi, lib, lib.roc_rank_create(handle, config, *args,
                                             _ffi.cuda_stream(ffi, held["labels_q"])))
    return RankEvaluation(handle[0], (dict(held), args), setup["n_query"])


def _count(evaluation, options, session, setup, total_pairs):
    """add_rows over the rank's queries in steps of whole row tiles, reporting
    progress (the global progress with a group, estimated from this rank's share)."""
    cuda = setup["device"].startswith("cuda")
    tile = lib.roc_rank_row_tile(lib.EXT_CUDA if cuda else lib.EXT_CPU)
    chunk = options.chunk or DEFAULT_CHUNK[cuda]
    rows = max(tile, chunk // max(setup["n_gallery"], 1) // tile * tile)
    n = evaluation.n_rows
    for begin in range(0, n, rows):
        end = min(begin + rows, n)
        evaluation.add_rows(begin, end)
        if options.progress is not None and session.rank == 0:
            options.progress(int(round(end / n * total_pairs)), total_pairs)
    if options.progress is not None and session.rank == 0 and n == 0:
        options.progress(total_pairs, total_pairs)


# ---------------------------------------------------------------------------
# public API

def evaluate(labels_q, labels_g=None, *, feat_q=None, feat_g=None, score=None, cams_q=None,
             cams_g=None, same_set=False, junk=-1, ties="expected", max_rank=50,
             fpirs=DEFAULT_FPIRS, fpir_rule="nist", ap="noninterpolated", topk=0,
             per_query=False, similarity="cosine", device=None, chunk=None, progress=None,
             group=None, shard="queries"):
    """1:N identification and re-ID ranking of every query against the gallery:
    CMC, mAP, mINP, MAP@R, R-precision and TPIR at FPIR, exact, from per-query
    counts (never the Q x G matrix, never a sort).

    labels_q (Q,), labels_g (G,)   labels: bool, integers, or floats holding integers
                                   (any arrays: torch, NumPy..., or lists); gallery
                                   entry j is a mate of query i when their labels are
                                   equal, compared exactly, else a non-mate
    feat_q (Q, D), feat_g (G, D)   float32 features, scored tile by tile as
                                   roc.evaluate scores them (the same fp32 bits):
                                   similarity "cosine" (default) or "dot", or
    score (Q, G)                   a score matrix: float32, or float16 / bfloat16
                                   (widened exactly); float64 is refused (cast it)
    cams_q (Q,), cams_g (G,)       cameras (Market-1501's protocol): for each query,
                                   the gallery entries with its label AND its camera
                                   are excluded; None (default): none excluded
    junk                           gallery entries with this label are excluded
                                   (default -1, Market-1501's junk; None: none);
                                   every other label (0, the distractors, too) is
                                   an ordinary non-mate. A query labelled junk
                                   has no mate.
    same_set                       True: the queries are the gallery (labels_g,
                                   feat_g and cams_g may be None) and each query's
                                   own row is excluded (retrieval within one set)
    ties                           the rank of a mate tied with non-mates:
                                   "expected" (default): every metric averaged over
                                   a uniformly random order of the tied entries,
                                   exactly; "pessimistic": tied non-mates rank
                                   first; "optimistic": after. Tie-free scores give
                                   the same numbers under all three (and the peers')
    max_rank                       CMC length: report.cmc[k - 1] is the rank-k rate
    ap                             "noninterpolated" (torchreid, fast-reid) or
                                   "trapezoid" (layumi's Person_reID_baseline)
    fpirs, fpir_rule               TPIR at these FPIR targets under a published rule:
                                   "nist" (NIST FRVT's FNIR at FPIR, TPIR = 1 -
                                   FNIR at rank 1), "insightface_ijb" (ijb_evals.py
                                   evaluation_1N), "insightface_1n_legacy"
                                   (ijb_1n.py), "insightface_studio" (InsightFace
                                   1.0's evaluation studio); README.md has each
    topk                           0 .. 100: also report.topk, each query's best
                                   gallery entries (indices and scores, ties by
                                   index)
    per_query                      also report.per_query, the counts and ranks by
                                   query and by mated pair
    device                         where to compute: "cpu", "cuda" or "cuda:N"
                                   (default: where the inputs are)
    chunk                          pairs per step (how often progress is called)
    progress                       called as progress(pairs_done, pairs_total)
    group                          a torch.distributed process group (True or
                                   "world": the default one): this rank's queries
                                   are its shard (same_set: consecutive rows of the
                                   set, in rank order), the gallery is whole; every
                                   rank returns the report of all the queries,
                                   count for count one process's
    shard                          with group: "queries" (default, as above) or
                                   "gallery": every rank passes all the queries
                                   (labels_q, feat_q or its score columns, cams_q)
                                   and its own consecutive part of the gallery
                                   (labels_g, feat_g, cams_g; score (Q, its G)),
                                   the parts in rank order making the whole; gallery
                                   indices (best non-mates, top k, per_query) are
                                   the whole gallery's. Not with same_set

    Closed-set metrics (CMC, mAP, mINP, MAP@R, R-precision) average over the
    queries with a scored mate; the others are skipped and counted
    (n_skipped). The open set's non-mated searches are the queries with no mate
    at all (n_unmated). NaN scores are excluded and counted (n_nan). Returns a
    RankReport.
    """
    fn = "evaluate"
    options = _distributed.checked(fn, group, lambda: Options(
        fn, ties, max_rank, fpirs, fpir_rule, ap, topk, per_query, junk, same_set, similarity,
        chunk, progress, shard))
    session = _distributed.session(fn, group)
    held = {}

    def prepare():
        setup = _prepare(fn, options, labels_q, labels_g, score, feat_q, feat_g, cams_q, cams_g,
                         device, group is not None and group is not False)
        held.update(setup.pop("arrays"))
        return setup

    infos = session.step(prepare, gather=True)
    setup = infos[session.rank]
    if any(info["cameras"] != setup["cameras"] for info in infos):
        raise ValueError("%s: the ranks disagree on the cameras: give cams_q and cams_g on "
                         "every rank or on none" % fn)
    gallery_shards = options.shard == "gallery"
    if gallery_shards and any(info["n_query"] != setup["n_query"] for info in infos):
        raise ValueError("%s: shard=\"gallery\": every rank passes all the queries, but the "
                         "ranks hold %s" % (fn, [info["n_query"] for info in infos]))
    evaluation = session.step(lambda: _create(fn, options, session, setup, infos, held))
    if gallery_shards:
        offset = gallery_offsets(infos)[session.rank]
        mates = shared_mates(session, session.step(lambda: view_arrays(evaluation.view())),
                             offset)
        session.step(lambda: evaluation.set_mates(*mates))
        total_pairs = setup["n_query"] * gallery_offsets(infos)[-1]
    else:
        total_pairs = sum(info["n_query"] for info in infos) * setup["n_gallery"]
    session.step(lambda: _count(evaluation, options, session, setup, total_pairs))
    own = session.step(lambda: view_arrays(evaluation.view()))
    if gallery_shards:
        counts = combined_gallery_shards(session, own, offset, options.kept_nonmated(
            setup["n_query"]))
    else:
        counts = gathered_arrays(session, own)
    view, keep = session.step(lambda: view_of(counts))
    summary = session.step(lambda: summarize(fn, view, options))
    report = report_from_summary(summary, counts, options)
    report.device_bytes_peak = int(lib.roc_rank_device_bytes_peak(evaluation.handle))
    report.communication = session.communication
    return report
