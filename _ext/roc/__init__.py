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
"""

try:
    from ._roc import ffi, lib
except ImportError as error:  # pragma: no cover - only before `make`
    raise ImportError("_ext.roc is not built: run `make` in the project root (%s)"
                      % error) from error

from ._evaluate import RocReport, TarAtFar, evaluate, pair_scores, roc_curve  # noqa: E402
from ._legacy_op import cpu_roc, gpu_roc  # noqa: E402  (also the ops ext::cpu_roc, ext::gpu_roc)

__all__ = ["cpu_roc", "gpu_roc", "evaluate", "roc_curve", "pair_scores", "RocReport",
           "TarAtFar", "built_with_cuda"]

built_with_cuda = bool(lib.ext_built_with_cuda())
