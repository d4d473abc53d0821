"""bench_calls.py: what one call costs on a tiny CUDA input, path by path:
the Python, dispatcher and launch overhead of _ext's wrappers and custom ops
beside torch's own eager ops (issue 15, part 5).

    python scripts/bench_calls.py [--calls 20000] [--markdown BENCHMARKS.md]

Each path is called `calls` times back to back and the device synchronized
once at the end: the wall time (time.perf_counter) over `calls` is what a
call costs a loop that makes many of them. The inputs are tiny (1,024
elements, an 8 x 8 image, a 32 x 32 score), so the number is overhead, not
kernel time. Median of `repeats` loops after a warm-up; every path's result
is checked against torch's before it is timed. Each group's ratios are to
its torch eager row; the target is at most 2x.

    gelu, 1,024 float32
      lib.gelu_forward_cuda, prebuilt descriptors   the floor: cffi and the launch
      gelu_forward() (raw entry point)              + describe, allocate, check
      gelu() -> ext::gelu                           + the custom op: dispatcher, autograd key
      torch.ops.ext.gelu                            the op called directly
      ext::gelu on a CuPy array, DLPack both ways   + torch.from_dlpack, cupy.from_dlpack
      F.gelu                                        torch eager
    upsample_bilinear, (1, 3, 8, 8) float32, scale 2
      upsample_bilinear() -> ext::upsample_bilinear
      F.interpolate(mode="bilinear")                torch eager
    legacy ROC histogram, 32 x 32 float32 score, 1024 bins
      roc.gpu_roc (returns an int)                  waits for its NaN count, as it always did
      torch.ops.ext.gpu_roc                         the op (its count is read back too)
      torch.histc of all and of genuine pairs,      torch eager; .item() on the NaN count so
        NaN count .item()                           that it waits as gpu_roc does
"""

import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.sections import write_section  # noqa: E402

TARGET_RATIO = 2.0
ROC_GROUP = "legacy ROC histogram, 32 x 32 score, 1024 bins"


def per_call_us(fn, device, calls, repeats=5, warmup=200):
    """Median over `repeats` of the wall time of `calls` calls of fn, in
    microseconds per call, the device synchronized once after each loop."""
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def import_cupy():
    """(cupy, None), or (None, why not)."""
    try:
        import cupy
        cupy.zeros(1)  # a CuPy built for another CUDA fails only here
        return cupy, None
    except Exception as error:  # ImportError, or CuPy's own CUDA errors
        return None, "CuPy unavailable (%s: %s)" % (type(error).__name__,
                                                    str(error).splitlines()[0][:80])


def gelu_paths(device, cupy):
    """[(path, fn, result)] and (name, torch eager fn): `result` gives fn's
    result as a tensor to check, where fn itself does not (None)."""
    from _ext import _ffi, gelu

    x = torch.linspace(-4, 4, 1024, device=device)
    out = torch.empty_like(x)
    ffi, lib = gelu.ffi, gelu.lib
    descriptors = (_ffi.describe(ffi, "gelu", "input", x),
                   _ffi.describe(ffi, "gelu", "output", out))
    if device == "cuda":
        stream = _ffi.cuda_stream(ffi, x)

        def raw_cffi():
            return lib.gelu_forward_cuda(*descriptors, lib.GELU_NONE, stream)
    else:
        def raw_cffi():
            return lib.gelu_forward_cpu(*descriptors, lib.GELU_NONE)

    def raw_cffi_result():
        _ffi.check(ffi, lib, raw_cffi())
        return out

    op = torch.ops.ext.gelu.default
    paths = [("lib.gelu_forward_%s, prebuilt descriptors" % device, raw_cffi, raw_cffi_result),
             ("gelu_forward() (raw entry point)", lambda: gelu.gelu_forward(x), None),
             ("gelu() -> ext::gelu", lambda: gelu.gelu(x), None),
             ("torch.ops.ext.gelu", lambda: op(x, "none"), None)]
    if cupy is not None:
        x_cupy = cupy.from_dlpack(x)
        paths.append(("ext::gelu on a CuPy array, DLPack both ways",
                      lambda: cupy.from_dlpack(op(torch.from_dlpack(x_cupy), "none")),
                      lambda: torch.from_dlpack(cupy.from_dlpack(op(torch.from_dlpack(x_cupy),
                                                                    "none")))))
    return paths, ("F.gelu", lambda: F.gelu(x))


def upsample_paths(device):
    from _ext import upsample

    x = torch.linspace(-1, 1, 3 * 64, device=device).reshape(1, 3, 8, 8)
    return ([("upsample_bilinear() -> ext::upsample_bilinear",
              lambda: upsample.upsample_bilinear(x, scale_factor=2), None)],
            ("F.interpolate(mode=\"bilinear\")",
             lambda: F.interpolate(x, scale_factor=2, mode="bilinear")))


def roc_paths(device):
    """gpu_roc (cpu_roc on the CPU) beside torch.histc; the histograms keep
    growing across calls, so each path gets its own."""
    from _ext import roc

    generator = torch.Generator().manual_seed(0)
    score = (torch.rand(32, 32, generator=generator) * 2 - 1).to(device)
    score[0, :3] = float("nan")
    labels = torch.randint(0, 4, (32,), generator=generator).to(device)
    legacy = roc.gpu_roc if device == "cuda" else roc.cpu_roc
    op = (torch.ops.ext.gpu_roc if device == "cuda" else torch.ops.ext.cpu_roc).default
    name = "gpu_roc" if device == "cuda" else "cpu_roc"

    def histograms():
        return [torch.zeros(1024, dtype=torch.int64, device=device) for _ in range(2)]

    legacy_histo, op_histo = histograms(), histograms()
    genuine = labels[:, None] == labels[None, :]

    def torch_histc():
        all_pairs = torch.histc(score, 1024, -1.0, 1.0)
        genuine_pairs = torch.histc(torch.where(genuine, score, 3.0), 1024, -1.0, 1.0)
        return all_pairs, genuine_pairs, int(torch.isnan(score).sum().item())

    return ([("roc.%s (legacy, returns an int)" % name,
              lambda: legacy(score, *legacy_histo, labels, labels),
              lambda: torch.tensor(legacy(score, *histograms(), labels, labels))),
             ("torch.ops.ext.%s" % name, lambda: op(score, *op_histo, labels, labels),
              lambda: op(score, *histograms(), labels, labels))],
            ("torch.histc of all and genuine pairs, NaN count .item()", torch_histc))


def check(group, path, result, expected):
    """A path's result equals torch's: values for gelu and upsample, the NaN
    count for the histograms (whose binnings differ)."""
    if group == ROC_GROUP:
        got, want = int(result), expected[2]
        if got != want:
            sys.exit("bench_calls.py: %s: NaN count %d, torch says %d" % (path, got, want))
        return
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5,
                               msg=lambda m: "bench_calls.py: %s: %s" % (path, m))


def bench_calls(device="cuda", calls=20000, repeats=5, warmup=200):
    """Rows (group, path, microseconds per call, ratio to the group's torch
    eager row, note) and the notes on what was left out."""
    cupy, cupy_note = import_cupy() if device == "cuda" else (None, "CuPy rows: CUDA only")
    gelu_rows, gelu_peer = gelu_paths(device, cupy)
    groups = [("gelu, 1,024 float32", gelu_rows, gelu_peer),
              ("upsample_bilinear, (1, 3, 8, 8) float32, scale 2", *upsample_paths(device)),
              (ROC_GROUP, *roc_paths(device))]
    rows = []
    for group, paths, (peer_name, peer) in groups:
        expected = peer()
        for path, fn, result in paths:
            check(group, path, (result or fn)(), expected)
        peer_us = per_call_us(peer, device, calls, repeats, warmup)
        for path, fn, _ in paths:
            us = per_call_us(fn, device, calls, repeats, warmup)
            rows.append((group, path, us, us / peer_us))
        rows.append((group, peer_name + " (torch eager)", peer_us, 1.0))
    notes = [cupy_note] if cupy is None else []
    return rows, notes


def table(rows):
    lines = ["| op | path | us per call | / torch eager |", "|---|---|---|---|"]
    for group, path, us, ratio in rows:
        lines.append("| %s | %s | %.2f | %.2fx |" % (group, path, us, ratio))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per timed loop")
    parser.add_argument("--repeats", type=int, default=5, help="timed loops (median)")
    parser.add_argument("--markdown", help="write the table into this file (BENCHMARKS.md)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_calls.py: needs a CUDA device")
    rows, notes = bench_calls("cuda", args.calls, args.repeats)
    text = table(rows)
    ours = [(path, ratio) for group, path, us, ratio in rows
            if "torch eager" not in path and "prebuilt" not in path]
    met = ["| %s | %.2fx | %s |" % (path, ratio, "yes" if ratio <= TARGET_RATIO else "**no**")
           for path, ratio in ours]
    summary = "\n".join(["| path | / torch eager | <= %gx |" % TARGET_RATIO, "|---|---|---|"]
                        + met)
    print(text)
    print(summary)
    for note in notes:
        print("note:", note)
    if args.markdown:
        device = torch.cuda.get_device_name()
        body = ["## Per-call overhead (`scripts/bench_calls.py`)", "",
                "Device: %s, %s, torch %s. Command: `python scripts/bench_calls.py --markdown "
                "%s`." % (device, datetime.date.today().isoformat(), torch.__version__,
                          os.path.basename(args.markdown)),
                "Wall time per call of %d back-to-back calls on tiny inputs, the device "
                "synchronized once at the end (host timer), median of %d loops after a warm-up: "
                "the Python, dispatcher and launch overhead, not kernel time. Each result was "
                "checked against torch's first. Target: at most %gx the torch eager op."
                % (args.calls, args.repeats, TARGET_RATIO), "", text, "", summary, ""]
        body += ["Note: %s." % note for note in notes]
        write_section(args.markdown, "bench_calls.py", "\n".join(body) + "\n")
        print("wrote", args.markdown)


if __name__ == "__main__":
    main()
