"""roc.py: ROC of embeddings (exact, binned, or scikit-learn's curve), with a
TAR@FAR table.

    ext-roc query.npz gallery.npz          (or: python scripts/roc.py ...)
    ext-roc set.npz --same-set [ordered]   every pair of one set, once (twice)
    ext-roc --pairs pairs.txt features.npz [--templates [TID_MID_FILE]]
    ext-roc                                the embedded demo data set
    torchrun --nproc-per-node=N scripts/roc.py ...   the same, over N processes

Each set .npz holds `feature` (N, D) and `label` (N,). Scores are the cosine
similarity (--similarity dot for raw dot products) of every (query, gallery)
pair, computed tile by tile and never stored, so Q x G may exceed any memory.
A pair list has one pair a line, `id_a id_b label` (1 genuine, 0 impostor),
its ids those of the features file's `id` (N,) array, or, with --templates,
IJB template ids (template features built from the image features, with
InsightFace's flip fusion and detector scores where --flip and --face-scores
ask for them); or it is LFW's pairs.txt (lfw.py: images named by the features
file's `path` array), whose k-fold accuracy is printed beside the table.

Prints a TAR@FAR table with thresholds and false-accept counts; --json writes
a small summary, --curve the whole curve (.npz), --plot draws the ROC.
Under torchrun (WORLD_SIZE > 1) every process loads the inputs, counts its
share of the pairs (NCCL on GPUs, gloo on CPUs) and rank 0 prints and writes.
torch is needed only there and for a GPU; on the CPU, NumPy does.
"""

import argparse
import datetime
import gc
import json
import os
import re
import sys
import time
import warnings as python_warnings
import zipfile

import numpy as np

import _ext

from . import embeddings, lfw, templates
from .cli import (add_version, bare_list_options, far_value, optional, quiet_on_closed_pipe,
                  require)
from .embeddings import InputError, check_writable
from .plot_roc import curve_of_report, draw
from .progress import LINE_SECONDS, Progress
from .progress import MODES as PROGRESS_MODES

PROG = "ext-roc"
DEFAULT_FARS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
SAME_SET = ("unordered", "ordered")
# the options whose value, an optional list file, may be left out
LIST_OPTIONS = ("--templates", "--face-scores")
# The library raises an error of one of its agreement steps on every rank,
# as "<function>: rank R: ...": rank 0 alone prints it.
AGREED = re.compile(r"^(%s|evaluate|evaluate_pairs): rank \d+( \(and \d+ other rank\(s\)\))?: "
                    % PROG)


# ---------------------------------------------------------------------------
# the command line

def positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not a number: %r" % text) from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError("must be positive and finite, got %r" % text)
        return value
    return parse


def max_fpr_value(text):
    """argparse's type of --max-fpr: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text) from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError("a max FPR lies in (0, 1], got %r" % text)
    return value


def finite(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text) from None
    if not np.isfinite(value):
        raise argparse.ArgumentTypeError("must be finite, got %r" % text)
    return value


def bare_options(argv):
    """argparse hands an option with an optional value the next word, whatever
    it is: a file after a bare --same-set, --templates or --face-scores is the
    command's file, not the option's value (those lists are text, never an .npz)."""
    out = bare_list_options(argv, LIST_OPTIONS)
    for i, word in enumerate(out[:-1]):
        if word == "--same-set" and out[i + 1] not in SAME_SET:
            out[i] = "--same-set=unordered"
    return out


def make_parser():
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0],
        epilog="Under torchrun, each process uses cuda:LOCAL_RANK (NCCL) where CUDA is there, "
               "else the CPU (gloo).")
    parser.add_argument("query", nargs="?",
                        help="query .npz (feature, label); with --pairs: the features .npz")
    parser.add_argument("gallery", nargs="?", help="gallery .npz (omit with --same-set)")
    parser.add_argument("--same-set", nargs="?", const="unordered", choices=SAME_SET,
                        help="one set against itself, no self-pairs: each unordered pair "
                             "once (bare --same-set), or twice (ordered, IFRT's count)")
    pairs = parser.add_argument_group("pair lists (IJB-B/C, LFW)")
    pairs.add_argument("--pairs", metavar="PAIRS_TXT",
                       help="a pair list, `id_a id_b label` a line, of the ids of the "
                            "features file; or LFW's pairs.txt, of its `path` array")
    pairs.add_argument("--templates", nargs="?", const="", metavar="TID_MID_FILE",
                       help="the ids are IJB template ids; template features are built from "
                            "the image features as InsightFace's image2template_feature builds "
                            "them (the mean of each media, summed over the template's media, "
                            "L2-normalised); template and media of each feature row from this "
                            "file (`image_name template_id media_id` a line), else from the "
                            "features file's `template` and `media` arrays. InsightFace's IJB "
                            "scripts, and the tables they print, also use --flip add and "
                            "--face-scores")
    pairs.add_argument("--flip", choices=templates.FLIP_MODES,
                       help="with --pairs: fuse each image's feature with its flipped copy's: "
                            "add (sum; InsightFace's default, F2), concat (F1) or drop (the "
                            "image's alone, F0); the copies from a `feature_flip` (N, D) array "
                            "of the features file, else from the second half of each `feature` "
                            "row (N, 2D), as InsightFace's feature extraction stores them")
    pairs.add_argument("--face-scores", nargs="?", const="", metavar="NAME_5PTS_SCORE_FILE",
                       help="with --templates: scale each image feature by its face detector "
                            "score before the templates are built (InsightFace's default, D1): "
                            "the last column of this file (`image_name x1 y1 ... x5 y5 score` "
                            "a line, one per feature row), else the features file's "
                            "`face_score` array")
    counting = parser.add_argument_group("counting")
    counting.add_argument("--mode", choices=("exact", "binned", "curve"), default="exact",
                          help="exact: exact curve, memory O(genuine pairs) (default); binned: "
                               "--bins uniform bins over --range; curve: scikit-learn's curve, "
                               "memory O(distinct scores)")
    counting.add_argument("--bins", type=positive(int), default=1024,
                          help="binned mode: number of bins (default 1024)")
    counting.add_argument("--range", type=finite, nargs=2, default=(-1.0, 1.0),
                          metavar=("LO", "HI"), help="binned mode: score range (default -1 1)")
    counting.add_argument("--far", type=far_value, nargs="+", action="extend",
                          help="FAR targets of the table; repeat or list several "
                               "(default: 1e-6 1e-5 1e-4 1e-3 1e-2 1e-1)")
    counting.add_argument("--far-rule", default="max_tpr",
                          choices=("max_tpr", "nearest", "first_above", "interpolate",
                                   "nearest_sklearn"),
                          help="how TAR@FAR picks its curve point (default max_tpr: the "
                               "largest TPR with FPR <= FAR; nearest_sklearn: InsightFace's "
                               "IJB rule on scikit-learn's curve)")
    counting.add_argument("--eer-rule", choices=("crossing", "nearest_mean"), default="crossing",
                          help="the EER: crossing (default), where the curve's polyline meets "
                               "FPR = FNR; nearest_mean: torchmetrics' mean of FPR and FNR at "
                               "the point where they are nearest")
    counting.add_argument("--max-fpr", type=max_fpr_value, metavar="FPR",
                          help="also report the partial AUC over FPR in [0, FPR], "
                               "McClish-standardized as roc_auc_score(max_fpr=)")
    counting.add_argument("--similarity", choices=("cosine", "dot"), default="cosine",
                          help="a pair's score: cosine similarity of its features (default), "
                               "or their dot product")
    counting.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if torch sees "
                                           "one and _ext was built with CUDA, else cpu)")
    counting.add_argument("--chunk", type=positive(int),
                          help="pairs per step (bounds a step's memory)")
    counting.add_argument("--strict", action="store_true",
                          help="problems with the inputs (feature rows that are non-finite or "
                               "all zero, one set given as both query and gallery) are errors "
                               "(default: warnings, and such rows' pairs are excluded)")
    out = parser.add_argument_group("output")
    out.add_argument("--plot", metavar="PNG", help="draw the ROC into this file (needs "
                                                   "matplotlib)")
    out.add_argument("--label", help="the method's name: in --plot, --curve and --json "
                                     "(ext-roc-table's row)")
    out.add_argument("--json", metavar="FILE", help="write a summary as JSON")
    out.add_argument("--curve", metavar="FILE.npz",
                     help="write the whole curve, its AUC and TAR@FAR rows (.npz; "
                          "ext-plot-roc draws it)")
    out.add_argument("--progress", choices=PROGRESS_MODES, default="auto",
                     help="progress on stderr: auto (default) a bar on a terminal and a line "
                          "every %d s with the time left elsewhere (a batch job's log); bar; "
                          "lines; never" % LINE_SECONDS)
    out.add_argument("--no-progress", dest="progress", action="store_const", const="never",
                     help="the same as --progress never")
    parser.add_argument("--timeout", type=positive(float), default=300.0, metavar="SECONDS",
                        help="under torchrun: how long a process waits for the others "
                             "(default 300)")
    add_version(parser)
    return parser


def parse_args(argv):
    args = make_parser().parse_args(bare_options(sys.argv[1:] if argv is None else argv))
    args.far = args.far or list(DEFAULT_FARS)
    return args


def check_combination(args):
    """InputError for options that do not go together."""
    if args.pairs is not None:
        if args.query is None or args.gallery is not None:
            raise InputError("--pairs takes one features file: ext-roc --pairs pairs.txt "
                             "features.npz")
        if args.same_set:
            raise InputError("--pairs and --same-set do not go together")
    elif args.templates is not None:
        raise InputError("--templates needs --pairs")
    elif args.flip is not None:
        raise InputError("--flip needs --pairs (the features of a pair list)")
    elif args.same_set:
        if args.query is None or args.gallery is not None:
            raise InputError("--same-set takes one file: ext-roc set.npz --same-set")
    elif args.query is not None and args.gallery is None:
        raise InputError("give a gallery .npz too, or --same-set for one set")
    if args.face_scores is not None and args.templates is None:
        raise InputError("--face-scores needs --templates (it weights the images of a template)")
    if not args.range[0] < args.range[1]:
        raise InputError("--range LO HI needs LO < HI, got %g %g" % tuple(args.range))
    outputs = [p for p in (args.plot, args.json, args.curve) if p]
    if len(set(map(os.path.realpath, outputs))) < len(outputs):
        raise InputError("--plot, --json and --curve must name different files")


def check_outputs(args):
    """Before any work: each output file can be written, and what writes it is
    installed."""
    for path in (args.plot, args.json, args.curve):
        if path:
            check_writable(path)
    if args.plot:
        require("matplotlib", "--plot")


# ---------------------------------------------------------------------------
# the processes: one, or torchrun's

class Processes:
    """This process's place among torchrun's (WORLD_SIZE > 1), or alone."""

    def __init__(self):
        env = os.environ
        try:
            self.world_size = int(env.get("WORLD_SIZE", "1"))
            self.rank = int(env.get("RANK", "0")) if self.world_size > 1 else 0
            self.local_rank = int(env.get("LOCAL_RANK", "0")) if self.world_size > 1 else 0
        except ValueError:
            raise InputError("WORLD_SIZE, RANK and LOCAL_RANK must be integers (torchrun sets "
                             "them)") from None
        self.distributed = self.world_size > 1
        self.session = None
        self.started = False

    def start(self, args):
        """Picks the device, and under torchrun joins the process group; returns
        the device. torch is needed there and for a GPU, else optional."""
        from _ext import roc
        if self.distributed:
            torch = require("torch", "running under torchrun (WORLD_SIZE=%d)" % self.world_size)
        elif args.device is not None and args.device != "cpu":
            torch = require("torch", "--device %s" % args.device)
        else:
            torch = optional("torch")
        has_cuda = torch is not None and torch.cuda.is_available() and roc.built_with_cuda
        if not self.distributed:
            device = args.device or ("cuda" if has_cuda else "cpu")
            if device == "cuda" and has_cuda:   # named as under torchrun: cuda:N
                device = "cuda:%d" % torch.cuda.current_device()
            return device
        if args.device not in (None, "cpu", "cuda"):
            raise InputError("under torchrun each process uses cuda:LOCAL_RANK: give --device "
                             "cuda or cpu, not %r" % args.device)
        if args.device == "cuda" and not has_cuda:
            raise InputError("--device cuda: %s" % ("torch sees no CUDA device"
                                                    if roc.built_with_cuda else
                                                    "_ext.roc was built without CUDA"))
        use_cuda = has_cuda and args.device != "cpu"
        if use_cuda:
            if self.local_rank >= torch.cuda.device_count():
                raise RuntimeError("LOCAL_RANK %d but this machine shows %d CUDA device(s)"
                                   % (self.local_rank, torch.cuda.device_count()))
            torch.cuda.set_device(self.local_rank)
        torch.distributed.init_process_group(
            "nccl" if use_cuda else "gloo",
            timeout=datetime.timedelta(seconds=args.timeout))
        self.started = True
        from _ext.roc import _distributed
        self.session = _distributed.session(PROG, True)
        return "cuda:%d" % self.local_rank if use_cuda else "cpu"

    def together(self, work):
        """work() here; under torchrun, a failure on any process is raised on
        every process, naming its rank."""
        if self.session is None:
            return work()

        def guarded():
            # the agreement step passes on the errors it knows; any other would
            # leave the other processes waiting for this one until --timeout
            try:
                return work()
            except (InputError, ValueError, TypeError, RuntimeError, MemoryError, OSError):
                raise
            except Exception as error:
                raise RuntimeError("%s: %s" % (type(error).__name__, error)) from error
        return self.session.step(guarded)

    def close(self):
        """Leaves the process group. Whatever still holds the group goes first
        (the session, and any reference cycle through a traceback), so that the
        group's threads end here: gloo's, left to interpreter exit, can abort
        the process."""
        self.session = None
        if self.started:
            gc.collect()
            import torch
            torch.distributed.destroy_process_group()
            self.started = False


# ---------------------------------------------------------------------------
# inputs

class Job:
    """What to evaluate: a description of the inputs for the JSON, the number
    of pairs, the warnings about the inputs, and evaluate(options, grouped),
    which returns the RocReport (with grouped, of this process's shard); for
    a protocol with folds (LFW's pairs.txt), its k-fold accuracy
    (roc.VerificationResult)."""

    def __init__(self, inputs, n_pairs, warnings, evaluate, verification=None):
        self.inputs = inputs
        self.n_pairs = n_pairs
        self.warnings = warnings
        self.evaluate = evaluate
        self.verification = verification


EXCLUDED = "their pairs are excluded (counted as NaN scores)"


def warn_or_fail(warning, consequence, warnings, strict):
    """A problem with the inputs: an error with --strict, else a warning."""
    if warning is None:
        return
    if strict:
        raise InputError(warning + " (--strict)")
    warnings.append("%s: %s" % (warning, consequence))


def masked(name, feature, warnings, strict):
    """feature with its unusable rows (non-finite or all zero) set to NaN, so
    that every pair with one scores NaN and is excluded, and counted."""
    rows = embeddings.unusable_rows(feature)
    warn_or_fail(embeddings.unusable_warning(name, rows, feature.shape[0]), EXCLUDED,
                 warnings, strict)
    if rows.size:
        feature = feature.copy()
        feature[rows] = np.nan
    return feature


def same_set_job(args):
    """Every pair of one set: each process takes consecutive rows of the set,
    balanced by pairs, against the whole set."""
    from _ext import roc
    warnings = []
    feature, label = embeddings.checked(args.query, embeddings.load(args.query))
    feature = masked(args.query, feature, warnings, args.strict)
    n = feature.shape[0]

    def evaluate(options, grouped):
        if not grouped:
            return roc.evaluate(label, None, feat_q=feature, same_set=args.same_set, **options)
        a, b = roc.shard_rows(n, True, same_set=args.same_set)
        return roc.evaluate(label[a:b], label, feat_q=feature[a:b], feat_g=feature,
                            same_set=args.same_set, group=True, **options)
    n_pairs = n * (n - 1) // (1 if args.same_set == "ordered" else 2)
    return Job({"set": args.query}, n_pairs, warnings, evaluate)


def two_sets_job(args):
    """Every (query, gallery) pair: each process takes consecutive queries
    against the whole gallery."""
    from _ext import roc
    warnings = []
    if args.query is None:
        (query, gallery), names = embeddings.demo_data(), ("query", "gallery")
        inputs = {"demo": "the embedded data set, 3,000 queries x 4,000 gallery entries"}
    else:
        query, gallery = embeddings.load(args.query), embeddings.load(args.gallery)
        names = (args.query, args.gallery)
        inputs = {"query": args.query, "gallery": args.gallery}
    feature_q, label_q, feature_g, label_g = embeddings.query_gallery(query, gallery, names)
    if args.query is not None:
        warn_or_fail(one_set_twice(args.query, args.gallery, feature_q, label_q, feature_g,
                                   label_g),
                     "each entry paired with itself counts as a genuine pair, and every other "
                     "pair twice; for the pairs of one set, give it once: %s %s --same-set"
                     % (PROG, args.query), warnings, args.strict)
    feature_q = masked(names[0], feature_q, warnings, args.strict)
    feature_g = masked(names[1], feature_g, warnings, args.strict)

    def evaluate(options, grouped):
        if not grouped:
            return roc.evaluate(label_q, label_g, feat_q=feature_q, feat_g=feature_g, **options)
        a, b = roc.shard_rows(feature_q.shape[0], True)
        return roc.evaluate(label_q[a:b], label_g, feat_q=feature_q[a:b], feat_g=feature_g,
                            group=True, **options)
    return Job(inputs, feature_q.shape[0] * feature_g.shape[0], warnings, evaluate)


def one_set_twice(query_path, gallery_path, feature_q, label_q, feature_g, label_g):
    """What to say where the query and the gallery are one set (one file, or
    equal features and labels), else None."""
    if os.path.samefile(query_path, gallery_path):
        how = "the same file"
    elif (feature_q.shape == feature_g.shape and np.array_equal(label_q, label_g)
          and np.array_equal(feature_q, feature_g)):
        how = "equal features and labels"
    else:
        return None
    return "%s and %s are one set (%s)" % (query_path, gallery_path, how)


def pairs_job(args):
    """The pairs of a list: each process takes consecutive pairs of the list."""
    if lfw.is_lfw_pairs(args.pairs):
        return lfw_pairs_job(args)
    warnings = []
    path = args.query
    id_a, id_b, genuine = embeddings.read_pairs(args.pairs)
    inputs = {"pairs": args.pairs, "features": path}
    if args.templates is None:
        data = embeddings.load(path, keys=("feature", "id"), optional=("feature_flip",),
                               hint="; a pair list needs the id of each feature row (or "
                                    "--templates for IJB template ids)")
        feature = image_features(args, path, data)
        ids = embeddings.integers_of(path, "id", data["id"], feature.shape[0])
        feature = masked(path, feature, warnings, args.strict)
    else:
        ids, feature = ijb_templates(args, path, inputs, warnings)
    id_rows = embeddings.IdRows(path, ids)
    index_a = embeddings.pair_rows(args.pairs, path, id_rows, id_a)
    index_b = embeddings.pair_rows(args.pairs, path, id_rows, id_b)
    return Job(inputs, int(genuine.size), warnings,
               pairs_evaluation(genuine, feature, index_a, index_b))


def lfw_pairs_job(args):
    """LFW's pairs.txt (lfw.py): the pairs of its images' features, and the
    accuracy over its folds as InsightFace's verification.py computes it."""
    if args.templates is not None:
        raise InputError("--templates builds IJB templates; %s is LFW's pairs.txt" % args.pairs)
    warnings, path = [], args.query
    pairs = lfw.read_pairs(args.pairs)
    data = embeddings.load(path, keys=("feature", "path"), optional=("feature_flip",),
                           hint="; LFW's pairs name images: store each feature row's image "
                                "path (name/name_0001.jpg) as `path`")
    feature = image_features(args, path, data)
    index_a, index_b = lfw.pair_rows(pairs, args.pairs, path, embeddings.column_of(
        path, "path", data["path"], feature.shape[0]))
    verification, why = lfw.fold_accuracy(pairs, feature, index_a, index_b)
    warn_or_fail(why, "the TAR@FAR table stands alone", warnings, args.strict)
    feature = masked(path, feature, warnings, args.strict)
    return Job({"pairs": args.pairs, "features": path, "protocol": "LFW pairs.txt"},
               int(pairs.genuine.size), warnings,
               pairs_evaluation(pairs.genuine, feature, index_a, index_b), verification)


def pairs_evaluation(genuine, feature, index_a, index_b):
    """A Job's evaluate of pairs of feature rows: each process takes
    consecutive pairs of the list."""
    from _ext import roc

    def evaluate(options, grouped):
        if not grouped:
            return roc.evaluate_pairs(genuine, feat_a=feature, feat_b=feature, index_a=index_a,
                                      index_b=index_b, **options)
        a, b = roc.shard_rows(genuine.size, True)
        return roc.evaluate_pairs(genuine[a:b], feat_a=feature, feat_b=feature,
                                  index_a=index_a[a:b], index_b=index_b[a:b], group=True,
                                  **options)
    return evaluate


def image_features(args, path, data):
    """The features file's image features (float32), fused with their flipped
    copies where --flip asks."""
    feature = embeddings.features_of(path, data["feature"])
    if args.flip is None:
        return feature
    flipped = (embeddings.features_of(path + " (feature_flip)", data["feature_flip"])
               if "feature_flip" in data else None)
    return templates.fuse_flips(path, feature, flipped, args.flip)


def ijb_templates(args, path, inputs, warnings):
    """(template ids, template features) of an IJB-style features file
    (--templates), with --flip and --face-scores as InsightFace applies them."""
    keys, hints = ["feature"], []
    if not args.templates:
        keys += ["template", "media"]
        hints.append("give --templates TID_MID_FILE, or store them")
    if args.face_scores == "":
        keys.append("face_score")
        hints.append("give --face-scores FILE, or store face_score")
    data = embeddings.load(path, keys=keys, optional=("feature_flip",),
                           hint="".join("; " + hint for hint in hints))
    feature = image_features(args, path, data)
    n_rows = feature.shape[0]
    if args.templates:
        template, media = embeddings.read_template_media(args.templates, n_rows, path)
    else:
        template, media = (embeddings.integers_of(path, key, data[key], n_rows)
                           for key in ("template", "media"))
    inputs["templates"] = args.templates or path
    face_score = None
    if args.face_scores:
        face_score = embeddings.read_face_scores(args.face_scores, n_rows, path,
                                                 args.templates or None)
    elif args.face_scores == "":
        face_score = embeddings.face_scores_of(path, data["face_score"], n_rows)
    if face_score is not None:
        inputs["face_scores"] = args.face_scores or path
    rows = embeddings.unusable_rows(feature)
    warn_or_fail(embeddings.unusable_warning(path, rows, n_rows, "image feature rows"),
                 "left out of their templates", warnings, args.strict)
    ids, feature = templates.template_features(feature, template, media, face_score)
    empty = np.flatnonzero(np.isnan(feature).any(axis=1))
    if empty.size:
        warn_or_fail("%s: %d of %d templates have no usable image feature (template ids %s)"
                     % (path, empty.size, ids.size, embeddings.rows_text(ids[empty])),
                     EXCLUDED, warnings, args.strict)
    return ids, feature


# ---------------------------------------------------------------------------
# outputs

def options_record(args):
    """The options that shape the report, for the JSON."""
    return {"same_set": args.same_set or False, "mode": args.mode, "bins": args.bins,
            "range": list(args.range), "fars": list(args.far), "far_rule": args.far_rule,
            "eer_rule": args.eer_rule, "max_fpr": args.max_fpr, "similarity": args.similarity, "chunk": args.chunk, "strict": args.strict,
            "flip": args.flip, "face_scores": args.face_scores is not None}


def write_json(path, report, job, args, device, world_size, timing):
    out = report.to_dict()
    out.update(label=args.label, inputs=job.inputs, options=options_record(args),
               device=device, world_size=world_size, timing=timing, warnings=job.warnings,
               version=_ext.__version__)
    if job.verification is not None:
        out["verification"] = job.verification.to_dict()
    with open(path, "w") as f:
        json.dump(out, f, allow_nan=False, indent=1)
        f.write("\n")


def write_curve(path, report, label):
    """report.save_curve's arrays, with the AUC, EER and TAR@FAR rows beside
    them, so that the file can be plotted on its own."""
    with open(path, "wb") as f:
        report.save_curve(f)
    rows = report.tar_at_far
    extras = {"auc": np.float64(report.auc), "eer": np.float64(report.eer),
              "eer_threshold": np.float64(report.eer_threshold),
              "far": np.array([r.far for r in rows], np.float64),
              "tar": np.array([r.tar for r in rows], np.float64),
              "far_threshold": np.array([r.threshold for r in rows], np.float64),
              "far_false_accepts": np.array([r.false_accepts for r in rows], np.uint64),
              "far_below_resolution": np.array([r.below_resolution for r in rows], bool),
              "n_genuine": np.int64(report.n_genuine), "n_impostor": np.int64(report.n_impostor),
              "n_nan": np.int64(report.n_nan), "mode": np.str_(report.mode),
              "far_rule": np.str_(report.far_rule), "pairs": np.str_(report.pairs),
              "label": np.str_(label or "ROC")}
    with zipfile.ZipFile(path, "a") as archive:
        for name, value in extras.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(value), allow_pickle=False)


# ---------------------------------------------------------------------------
# main

PUBLISHED_IJB_NOTE = ("note: template features from the image features as given; InsightFace's "
                      "IJB scripts, and the tables they print, also fuse flipped copies and "
                      "weight by detector scores (--flip add --face-scores FILE)")


def recording_warnings(work, warnings):
    """work(), the Python warnings it raises (the library's, NumPy's) added to
    `warnings` instead of printed."""
    with python_warnings.catch_warnings(record=True) as caught:
        result = work()
    warnings.extend(str(warning.message) for warning in caught)
    return result


def say_warnings(warnings):
    for warning in warnings:
        print("%s: warning: %s" % (PROG, warning), file=sys.stderr)


def run(args, processes):
    from _ext import roc  # noqa: F401  (before the clock: imports are not the evaluation's time)

    device = processes.start(args)
    lead = processes.rank == 0
    processes.together(lambda: check_outputs(args) if lead else None)
    start = time.perf_counter()
    make_job = pairs_job if args.pairs else same_set_job if args.same_set else two_sets_job
    loading_warnings = []
    job = processes.together(lambda: recording_warnings(lambda: make_job(args),
                                                        loading_warnings))
    job.warnings += loading_warnings
    loaded = time.perf_counter()
    if lead:
        say_warnings(job.warnings)
        if args.templates is not None and args.flip is None and args.face_scores is None:
            print("%s: %s" % (PROG, PUBLISHED_IJB_NOTE), file=sys.stderr)
        print("%s pairs on %s%s, %s mode" % (
            "{:,}".format(job.n_pairs), device,
            " x %d processes" % processes.world_size if processes.distributed else "",
            args.mode))
    progress = Progress(args.progress if lead else "never", PROG)
    options = dict(mode=args.mode, bins=args.bins, range=tuple(args.range), fars=tuple(args.far),
                   far_rule=args.far_rule, eer_rule=args.eer_rule, max_fpr=args.max_fpr,
                   device=device, chunk=args.chunk,
                   similarity=args.similarity, progress=progress)
    counting_warnings = []
    try:
        report = recording_warnings(lambda: job.evaluate(options, processes.distributed),
                                    counting_warnings)
    finally:
        progress.close()
    done = time.perf_counter()
    if not lead:
        return
    say_warnings(counting_warnings)
    job.warnings += counting_warnings
    timing = {"load_s": loaded - start, "evaluate_s": done - loaded, "passes": progress.passes}
    print(report.table())
    if job.verification is not None:
        print(lfw.accuracy_line(job.verification))
    print("%.3f s (loading %.3f s, evaluation %.3f s)" % (done - start, loaded - start,
                                                         done - loaded))
    if args.json:
        write_json(args.json, report, job, args, device, processes.world_size, timing)
        print("saved", args.json)
    if args.curve:
        write_curve(args.curve, report, args.label)
        print("saved", args.curve)
    if args.plot:
        title = "%s genuine + %s impostor pairs (%s)" % (
            "{:,}".format(report.n_genuine), "{:,}".format(report.n_impostor), report.mode)
        draw([curve_of_report(report, args.label)], args.plot, title)
        print("saved", args.plot)


def failure_line(error, processes):
    """The line to print for an error, or None where another process prints it."""
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    if processes is not None and processes.distributed:
        if not AGREED.match(message) and not isinstance(error, InputError):
            message = "rank %d: %s" % (processes.rank, message)   # this process's own
        elif processes.rank != 0:
            return None    # every process has it: rank 0 says it
    return message if message.startswith(PROG + ": ") else "%s: %s" % (PROG, message)


@quiet_on_closed_pipe
def main(argv=None):
    args = parse_args(argv)
    processes = None
    failed = False
    try:
        processes = Processes()
        check_combination(args)
        run(args, processes)
    except (InputError, ValueError, TypeError, RuntimeError, MemoryError, OSError) as error:
        failed = True
        line = failure_line(error, processes)
        if line:
            print(line, file=sys.stderr)
    # the process group goes once the error, and what its traceback held, is gone
    if processes is not None:
        processes.close()
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
