"""_ext.roc: ROC evaluation of embeddings, on the GPU or the CPU.

Legacy entry points (the 2018 workflow, call sites unchanged):

    histo1 = torch.zeros(1024, device="cuda")    # all pairs
    histo2 = torch.zeros(1024, device="cuda")    # genuine pairs
    roc.gpu_roc(score, histo1, histo2, labels_q, labels_g)

score is (Q, G) float32; labels_q (Q,) and labels_g (G,) are float32, int32
or int64 (one dtype). Pair (i, j) is genuine when labels_q[i] == labels_g[j]
and goes to bin trunc((score + 1) / 2 * (nbins - 1)) with nbins =
histo1.numel(), scores outside [-1, 1] in the edge bins. Counts are *added*
into histo1/histo2 (float32, float64 or int64). NaN scores are skipped; both
functions return how many.

The evaluator (exact ROC identical to scikit-learn's, from a score matrix or
from features, on the GPU or the CPU):

    report = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g)
    print(report.table())                       # TAR@FAR, AUC, EER
    fpr, tpr, thresholds = roc.roc_curve(labels_q, labels_g, score=score)

A list of pairs (scikit-learn's (y_true, y_score), or a protocol's pair list),
streamed batches, and several processes (group=, torch.distributed):

    report = roc.evaluate_pairs(genuine, score)
    acc = roc.RocAccumulator(labels_g, feat_g); acc.update(labels_q, feat_q); acc.compute()
    report = roc.evaluate(labels_q[a:b], labels_g, feat_q=feat_q[a:b], feat_g=feat_g,
                          group=torch.distributed.group.WORLD)
"""

from .. import _ffi

try:
    from ._roc import ffi, lib
except ImportError as error:  # pragma: no cover - only before `make`
    raise ImportError("_ext.roc is not built: run `make` in the project root (%s)"
                      % error) from error

from ._accumulate import RocAccumulator  # noqa: E402
from ._distributed import shard_rows  # noqa: E402
from ._evaluate import (evaluate, evaluate_pairs, pair_scores, roc_curve,  # noqa: E402
                        roc_curve_pairs)
from ._report import RocReport, TarAtFar  # noqa: E402

__all__ = ["cpu_roc", "gpu_roc", "evaluate", "roc_curve", "evaluate_pairs", "roc_curve_pairs",
           "pair_scores", "shard_rows", "RocAccumulator", "RocReport", "TarAtFar",
           "built_with_cuda"]

built_with_cuda = bool(lib.ext_built_with_cuda())


def _legacy_descriptors(fn, score, histo1, histo2, labels_q, labels_g):
    return (_ffi.describe(ffi, fn, "score", score),
            _ffi.describe(ffi, fn, "histo1", histo1, writable=True),
            _ffi.describe(ffi, fn, "histo2", histo2, writable=True),
            _ffi.describe(ffi, fn, "labels_q", labels_q),
            _ffi.describe(ffi, fn, "labels_g", labels_g))


def cpu_roc(score, histo1, histo2, labels_q, labels_g):
    """Legacy histogram of CPU tensors or NumPy arrays; returns the NaN count."""
    n_nan = ffi.new("int64_t *")
    args = _legacy_descriptors("cpu_roc", score, histo1, histo2, labels_q, labels_g)
    _ffi.check(ffi, lib, lib.roc_hist_cpu(*args, n_nan))
    return int(n_nan[0])


def gpu_roc(score, histo1, histo2, labels_q, labels_g):
    """Legacy histogram of CUDA tensors, on their device and the current
    stream; returns the NaN count once the stream has finished."""
    n_nan = ffi.new("int64_t *")
    args = _legacy_descriptors("gpu_roc", score, histo1, histo2, labels_q, labels_g)
    _ffi.check(ffi, lib, lib.roc_hist_cuda(*args, _ffi.cuda_stream(ffi, score), n_nan))
    return int(n_nan[0])
