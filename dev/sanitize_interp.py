"""Small calls that cover every kernel path of the interpolation ops, for
compute-sanitizer:

    compute-sanitizer --tool memcheck python3 dev/sanitize_interp.py
    compute-sanitizer --tool racecheck python3 dev/sanitize_interp.py

trilinear: forward and backward (both gradients, feats only, points only),
double backward (every output alone and all three, each incoming gradient
NULL or given), 16-byte and scalar accesses (F a multiple of 4 / 2 or not, a
misaligned feats view), one lane to a full warp per point, F = 0. upsample:
every coordinate mode forward and backward, output rows narrower and wider
than a block's columns, register-held and table-read runs of readers (scale
21), 1x1 inputs, downsampling, unchanged axes. gelu: every formula forward,
backward and double backward (both gradients and each alone), 16-byte and
scalar accesses, lengths with a tail past the last vector. Each in float32
and float64; each result is checked against the CPU path, so a wrong answer
fails here too.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import gelu, trilinear, upsample  # noqa: E402


def close(gpu, cpu):
    tolerance = 1e-4 if cpu.dtype == torch.float32 else 1e-10
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=tolerance, atol=tolerance)


def misaligned(t):
    """A copy of t on the GPU that starts one element into its storage."""
    storage = torch.empty(t.numel() + 1, dtype=t.dtype, device="cuda")
    view = storage[1:].view(t.shape)
    view.copy_(t)
    return view


def trilinear_cases(generator):
    ran = 0
    for dtype in (torch.float32, torch.float64):
        for n_points, n_feats in ((1, 1), (3, 4), (7, 3), (33, 8), (65, 37), (129, 256),
                                  (5, 4099), (9, 0)):
            feats = torch.randn(n_points, 8, n_feats, generator=generator, dtype=dtype)
            points = torch.rand(n_points, 3, generator=generator, dtype=dtype) * 2 - 1
            grad_out = torch.randn(n_points, n_feats, generator=generator, dtype=dtype)
            close(trilinear.trilinear_forward(feats.cuda(), points.cuda()),
                  trilinear.trilinear_forward(feats, points))
            for feats_grad, points_grad in ((True, True), (True, False), (False, True)):
                gpu = trilinear.trilinear_backward(grad_out.cuda(), feats.cuda(), points.cuda(),
                                                   feats_grad, points_grad)
                cpu = trilinear.trilinear_backward(grad_out, feats, points, feats_grad,
                                                   points_grad)
                for g, c in zip(gpu, cpu):
                    if c is not None:
                        close(g, c)
                ran += 1
            ran += trilinear_double_backward_cases(generator, grad_out, feats, points)
            if n_feats:
                close(trilinear.trilinear_forward(misaligned(feats), points.cuda()),
                      trilinear.trilinear_forward(feats, points))
                gpu = trilinear.trilinear_backward(misaligned(grad_out), misaligned(feats),
                                                   points.cuda())
                cpu = trilinear.trilinear_backward(grad_out, feats, points)
                close(gpu[0], cpu[0])
                close(gpu[1], cpu[1])
                ran += 2
            ran += 1
    return ran


def trilinear_double_backward_cases(generator, grad_out, feats, points):
    grad_grad_feats = torch.randn(feats.shape, generator=generator, dtype=feats.dtype)
    grad_grad_points = torch.randn(points.shape, generator=generator, dtype=points.dtype)
    ran = 0
    for given in ((grad_grad_feats, grad_grad_points), (None, grad_grad_points),
                  (grad_grad_feats, None)):
        for wanted in ((True, True, True), (True, False, False), (False, True, False),
                       (False, False, True)):
            gpu = trilinear.trilinear_double_backward(
                *(None if t is None else t.cuda() for t in given), grad_out.cuda(),
                feats.cuda(), points.cuda(), *wanted)
            cpu = trilinear.trilinear_double_backward(*given, grad_out, feats, points, *wanted)
            for g, c in zip(gpu, cpu):
                if c is not None:
                    close(g, c)
            ran += 1
    if feats.shape[2]:
        gpu = trilinear.trilinear_double_backward(misaligned(grad_grad_feats),
                                                  grad_grad_points.cuda(), misaligned(grad_out),
                                                  misaligned(feats), points.cuda())
        cpu = trilinear.trilinear_double_backward(grad_grad_feats, grad_grad_points, grad_out,
                                                  feats, points)
        for g, c in zip(gpu, cpu):
            close(g, c)
        ran += 1
    return ran


def upsample_cases(generator):
    ran = 0
    cases = [((2, 3, 1, 1), dict(scale_factor=2)), ((1, 2, 5, 7), dict(scale_factor=2.5)),
             ((2, 2, 7, 3), dict(scale_factor=(1.7, 0.6))), ((1, 1, 9, 6), dict(size=(4, 13))),
             ((3, 5, 32, 48), dict(scale_factor=2)), ((2, 4, 64, 64), dict(scale_factor=0.5)),
             ((1, 1, 5, 5), dict(scale_factor=1.1)), ((1, 1, 3, 2), dict(scale_factor=21)),
             ((1, 1, 300, 2), dict(size=(2, 300))), ((2, 3, 17, 33), dict(size=(40, 66)))]
    for dtype in (torch.float32, torch.float64):
        for shape, kwargs in cases:
            x = torch.randn(shape, generator=generator, dtype=dtype)
            for mode in ("half_pixel", "align_corners", "asymmetric"):
                out = upsample.upsample_bilinear(x, coordinate_mode=mode, **kwargs)
                close(upsample.upsample_bilinear(x.cuda(), coordinate_mode=mode, **kwargs), out)
                grad = torch.randn(out.shape, generator=generator, dtype=dtype)
                scale = kwargs.get("scale_factor")
                close(upsample.upsample_bilinear_backward(grad.cuda(), shape[2:], scale,
                                                          coordinate_mode=mode),
                      upsample.upsample_bilinear_backward(grad, shape[2:], scale,
                                                          coordinate_mode=mode))
                ran += 2
    return ran


def gelu_cases(generator):
    ran = 0
    for dtype in (torch.float32, torch.float64):
        for n in (1, 3, 4, 5, 1023, 4096 + 3, 1 << 18):
            x = torch.randn(n, generator=generator, dtype=dtype) * 3
            grad = torch.randn(n, generator=generator, dtype=dtype)
            for approximate in ("none", "tanh", "sigmoid"):
                close(gelu.gelu_forward(x.cuda(), approximate), gelu.gelu_forward(x, approximate))
                close(gelu.gelu_backward(grad.cuda(), x.cuda(), approximate),
                      gelu.gelu_backward(grad, x, approximate))
                close(gelu.gelu_forward(misaligned(x), approximate),
                      gelu.gelu_forward(x, approximate))
                close(gelu.gelu_backward(misaligned(grad), misaligned(x), approximate),
                      gelu.gelu_backward(grad, x, approximate))
                ran += 4
                grad_grad = torch.randn(n, generator=generator, dtype=dtype)
                for flags in ((True, True), (True, False), (False, True)):
                    cpu = gelu.gelu_double_backward(grad_grad, grad, x, approximate, *flags)
                    for place in (lambda t: t.cuda(), misaligned):
                        gpu = gelu.gelu_double_backward(place(grad_grad), place(grad), place(x),
                                                        approximate, *flags)
                        for g, c in zip(gpu, cpu):
                            if c is not None:
                                close(g, c)
                        ran += 1
    return ran


def main():
    generator = torch.Generator().manual_seed(0)
    ran = trilinear_cases(generator) + upsample_cases(generator) + gelu_cases(generator)
    torch.cuda.synchronize()
    print("sanitize_interp: %d calls ran, all equal to the CPU path" % ran)


if __name__ == "__main__":
    main()
