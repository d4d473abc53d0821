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
                          group=True)        # True: the default process group

Face-verification protocols (LFW, CFP-FP, AgeDB-30...): 10-fold accuracy and
VAL@FAR as InsightFace's verification.py computes them:

    result = roc.verification_accuracy(genuine, score)   # result.accuracy, result.std
"""

try:
    from ._roc import ffi, lib
except ImportError as error:  # pragma: no cover - only before `make`
    raise ImportError("_ext.roc is not built: run `make` in the project root (%s)"
                      % error) from error

from ._accumulate import RocAccumulator  # noqa: E402
from ._distributed import shard_rows  # noqa: E402
from ._evaluate import (evaluate, evaluate_pairs, pair_scores, roc_curve,  # noqa: E402
                        roc_curve_pairs)
from ._legacy_op import cpu_roc, gpu_roc  # noqa: E402  (also the ops ext::cpu_roc, ext::gpu_roc)
from ._report import RocReport, TarAtFar  # noqa: E402
from ._verification import VerificationResult, verification_accuracy  # noqa: E402

__all__ = ["cpu_roc", "gpu_roc", "evaluate", "roc_curve", "evaluate_pairs", "roc_curve_pairs",
           "pair_scores", "shard_rows", "RocAccumulator", "RocReport", "TarAtFar",
           "verification_accuracy", "VerificationResult", "built_with_cuda"]

built_with_cuda = bool(lib.ext_built_with_cuda())
