"""bench_ops_interp.py: the interpolation ops against their peers, side by side
on one GPU, in one run.

    python scripts/bench_ops_interp.py            # the issue's sizes (needs a CUDA device)

Rows (ms is the median of 20 runs timed with CUDA events after 3 warm-ups,
L2 flushed and the GPU busy until the call is enqueued before each run;
"speedup" is peer ms / ours ms; GB/s counts the bytes our kernel must move,
and "% copy" divides that by the measured device-to-device copy bandwidth,
read + write):

    trilinear   N = 65,536 points, F = 256, float32, against the seed's pure
                PyTorch formula (forward; backward to feats and points through
                autograd for both). Bytes: forward reads feats (N x 8 x F) and
                points, writes out (N x F): 9 N F + 3 N elements; backward reads
                grad_out and feats, writes grad_feats and grad_points: 17 N F + 6 N.
    upsample    8 x 64 x 256 x 256 float32, scale 2, against F.interpolate
                (half_pixel, align_corners; asymmetric has no torch peer).
                Bytes: input + output, each way.
    gelu        2^26 float32 elements against F.gelu ("none", "tanh") and the
                seed's x * torch.sigmoid(1.702 x); backward against
                aten.gelu_backward (and autograd of the seed's formula).
                Bytes: 2 elements per element forward, 3 backward.

bench_interp(timer) runs every row with any timer(fn) -> ms and returns the
rows; tests/bench/test_bench_ops_interp.py runs it on the CPU with small sizes.
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _ext import gelu, trilinear, upsample  # noqa: E402
from _ext.trilinear.reference import trilinear_reference as seed_trilinear  # noqa: E402
from benchmarks.timing import copy_gbps as measure_copy  # noqa: E402
from benchmarks.timing import cuda_event_timer  # noqa: E402

ISSUE_SIZES = dict(trilinear=(65_536, 256), upsample=(8, 64, 256, 256), upsample_scale=2,
                   gelu=1 << 26)


def seed_gelu(x):
    """The seed's GELU: x * sigmoid(1.702 x)."""
    return x * torch.sigmoid(1.702 * x)


def row(op, variant, bytes_moved, ours_ms, peer, peer_ms):
    """One row; also said on stderr at once, so that a long run shows progress."""
    print("  %s %s: %.3f ms, peer %s" % (op, variant, ours_ms,
                                          "%.3f ms" % peer_ms if peer_ms else "-"),
          file=sys.stderr, flush=True)
    return dict(op=op, variant=variant, bytes=bytes_moved, ours_ms=ours_ms, peer=peer,
                peer_ms=peer_ms, speedup=peer_ms / ours_ms if peer_ms else None,
                gbps=bytes_moved / (ours_ms * 1e6))


def grad_timer(timer, outputs, inputs, grad):
    """ms of one backward pass through an already built graph."""
    return timer(lambda: torch.autograd.grad(outputs, inputs, grad, retain_graph=True))


def bench_trilinear(timer, device, n_points, n_feats):
    elem = 4
    feats = torch.rand(n_points, 8, n_feats, device=device)
    points = torch.rand(n_points, 3, device=device) * 2 - 1
    rows = []
    forward_bytes = (9 * n_points * n_feats + 3 * n_points) * elem
    rows.append(row("trilinear", "forward", forward_bytes,
                    timer(lambda: trilinear.trilinear_forward(feats, points)),
                    "seed pure PyTorch", timer(lambda: seed_trilinear(feats, points))))
    feats.requires_grad_()
    points.requires_grad_()
    grad_out = torch.randn(n_points, n_feats, device=device)
    ours = trilinear.trilinear_interpolation(feats, points)
    seed = seed_trilinear(feats, points)
    backward_bytes = (17 * n_points * n_feats + 6 * n_points) * elem
    rows.append(row("trilinear", "backward (feats + points)", backward_bytes,
                    grad_timer(timer, ours, (feats, points), grad_out), "seed, autograd",
                    grad_timer(timer, seed, (feats, points), grad_out)))
    return rows


def bench_upsample(timer, device, shape, scale):
    elem = 4
    x = torch.randn(shape, device=device)
    out_shape = shape[:2] + (shape[2] * scale, shape[3] * scale)
    bytes_moved = (x.numel() + torch.Size(out_shape).numel()) * elem
    grad = torch.randn(out_shape, device=device)
    rows = []
    for mode in ("half_pixel", "align_corners", "asymmetric"):
        has_peer = mode != "asymmetric"

        def peer_forward(t):
            return F.interpolate(t, scale_factor=scale, mode="bilinear",
                                 align_corners=mode == "align_corners")

        def ours_forward(t):
            return upsample.upsample_bilinear(t, scale_factor=scale, coordinate_mode=mode)

        rows.append(row("upsample", "forward %s" % mode, bytes_moved,
                        timer(lambda: ours_forward(x)), "F.interpolate" if has_peer else "-",
                        timer(lambda: peer_forward(x)) if has_peer else None))
        xg = x.clone().requires_grad_()
        peer_ms = grad_timer(timer, peer_forward(xg), xg, grad) if has_peer else None
        rows.append(row("upsample", "backward %s" % mode, bytes_moved,
                        grad_timer(timer, ours_forward(xg), xg, grad),
                        "F.interpolate, autograd" if has_peer else "-", peer_ms))
    return rows


def bench_gelu(timer, device, n):
    elem = 4
    x = torch.randn(n, device=device)
    grad = torch.randn(n, device=device)
    rows = []
    for approximate in ("none", "tanh"):
        rows.append(row("gelu", "forward %s" % approximate, 2 * n * elem,
                        timer(lambda: gelu.gelu_forward(x, approximate)), "F.gelu",
                        timer(lambda: F.gelu(x, approximate=approximate))))
        rows.append(row("gelu", "backward %s" % approximate, 3 * n * elem,
                        timer(lambda: gelu.gelu_backward(grad, x, approximate)),
                        "aten.gelu_backward",
                        timer(lambda: torch.ops.aten.gelu_backward(grad, x,
                                                                   approximate=approximate))))
    rows.append(row("gelu", "forward sigmoid", 2 * n * elem,
                    timer(lambda: gelu.gelu_forward(x, "sigmoid")), "seed x*sigmoid(1.702x)",
                    timer(lambda: seed_gelu(x))))
    xg = x.clone().requires_grad_()
    rows.append(row("gelu", "backward sigmoid", 3 * n * elem,
                    grad_timer(timer, gelu.gelu(xg, "sigmoid"), xg, grad), "seed, autograd",
                    grad_timer(timer, seed_gelu(xg), xg, grad)))
    return rows


def bench_interp(timer, device="cuda", sizes=None, copy_gbps=None):
    """Every row, timed with timer(fn) -> ms. sizes: the ISSUE_SIZES keys
    (default: those); copy_gbps: the copy bandwidth the "% copy" column
    divides by (measured here when not given)."""
    sizes = dict(ISSUE_SIZES, **(sizes or {}))
    if copy_gbps is None:
        copy_gbps = measure_copy(timer, device)
    rows = (bench_trilinear(timer, device, *sizes["trilinear"])
            + bench_upsample(timer, device, tuple(sizes["upsample"]), sizes["upsample_scale"])
            + bench_gelu(timer, device, sizes["gelu"]))
    for r in rows:
        r["copy_fraction"] = r["gbps"] / copy_gbps
    return rows


def format_table(rows, copy_gbps, device_name):
    lines = ["device: %s; device-to-device copy: %.0f GB/s (read + write)"
             % (device_name, copy_gbps),
             "%-9s | %-26s | %9s | %-24s | %9s | %7s | %8s | %6s"
             % ("op", "variant", "ours ms", "peer", "peer ms", "speedup", "GB/s", "% copy")]
    lines.append("-" * len(lines[1]))
    for r in rows:
        peer_ms = "%9.3f" % r["peer_ms"] if r["peer_ms"] is not None else "%9s" % "-"
        speedup = "%6.2fx" % r["speedup"] if r["speedup"] is not None else "%7s" % "-"
        lines.append("%-9s | %-26s | %9.3f | %-24s | %s | %s | %8.0f | %5.0f%%"
                     % (r["op"], r["variant"], r["ours_ms"], r["peer"], peer_ms, speedup,
                        r["gbps"], 100 * r["copy_fraction"]))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_ops_interp.py: needs a CUDA device (torch sees none)")
    timer = cuda_event_timer()
    copy_gbps = measure_copy(timer)
    rows = bench_interp(timer, copy_gbps=copy_gbps)
    print(format_table(rows, copy_gbps, torch.cuda.get_device_name()))


if __name__ == "__main__":
    main()
