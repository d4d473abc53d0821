"""Where evaluate()'s time goes on the GPU: label codes, create (genuine pairs),
the pass, summarize, each timed after a synchronize.

    python3 dev/profile_eval.py [Q G D]
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import _ffi  # noqa: E402
from _ext.roc import _evaluate, ffi, lib  # noqa: E402


def main():
    n_query, n_gallery, dim = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else \
        (10_000, 21_000, 512)
    torch.backends.cuda.matmul.allow_tf32 = False
    labels_q = torch.arange(n_query, device="cuda")
    labels_g = torch.arange(n_gallery, device="cuda")
    feat_q = torch.randn(n_query, dim, device="cuda")
    feat_g = torch.randn(n_gallery, dim, device="cuda")
    feat_g[:n_query] = feat_q + 0.3 * torch.randn(n_query, dim, device="cuda")
    score = torch.nn.functional.normalize(feat_q, dim=1) @ \
        torch.nn.functional.normalize(feat_g, dim=1).T
    for source, kwargs in (("score", dict(score=score)),
                           ("features", dict(feat_q=feat_q, feat_g=feat_g))):
        for mode in ("binned", "exact"):
            for repeat in range(3):
                times = {}
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                prepared = _evaluate._prepare("evaluate", labels_q, labels_g, kwargs.get("score"),
                                              kwargs.get("feat_q"), kwargs.get("feat_g"), False,
                                              None)
                _, s, fq, fg, codes_q, codes_g, n_codes = prepared
                torch.cuda.synchronize()
                times["codes"] = time.perf_counter() - t0
                config = ffi.new("roc_eval_config *")
                config.caller = b"profile"
                config.mode = _evaluate.MODES[mode]
                config.bins, config.range_lo, config.range_hi = 1024, -1.0, 1.0
                descs = [_ffi.describe(ffi, "p", n, x) if x is not None else ffi.NULL
                         for n, x in (("a", codes_q), ("b", codes_g), ("s", s), ("q", fq),
                                      ("g", fg))]
                handle = ffi.new("roc_eval **")
                t0 = time.perf_counter()
                _ffi.check(ffi, lib, lib.roc_eval_create(handle, config, descs[0], descs[1],
                                                         n_codes, *descs[2:],
                                                         _ffi.cuda_stream(ffi, codes_q)))
                torch.cuda.synchronize()
                times["create"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                _ffi.check(ffi, lib, lib.roc_eval_add_rows(handle[0], 0, n_query))
                torch.cuda.synchronize()
                times["pass"] = time.perf_counter() - t0
                out = ffi.new("roc_summary **")
                fars = ffi.new("double[]", [1e-4])
                t0 = time.perf_counter()
                _ffi.check(ffi, lib, lib.roc_eval_summarize(handle[0], fars, 1, 0, out))
                times["summarize"] = time.perf_counter() - t0
                lib.roc_summary_free(out[0])
                lib.roc_eval_free(handle[0])
            print("%-8s %-6s " % (source, mode) + "  ".join(
                "%s %.3f ms" % (k, v * 1e3) for k, v in times.items()))


if __name__ == "__main__":
    main()
