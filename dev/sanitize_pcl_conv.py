"""Small calls that cover every PCL and convolution kernel path, for
compute-sanitizer:

    compute-sanitizer --tool memcheck python3 dev/sanitize_pcl_conv.py
    compute-sanitizer --tool racecheck python3 dev/sanitize_pcl_conv.py
    compute-sanitizer --tool memcheck python3 dev/sanitize_pcl_conv.py --grid-strides

conv2d: forward and both gradients, float32 and float64, every tiled radius
(0 to 7) and the plain path (8, 10), images smaller than a tile, odd sizes
across tile edges, (H, W) and (N, C, H, W), shared and per-channel kernels.
--grid-strides adds the cases whose grids loop (more tile rows, planes or
kernels than a grid dimension holds): large, so slow under racecheck.
PCL loss: forward and backward, float32 and float64, each index dtype, one
block and several, no clusters, label mismatches, and the error read-back
(an out-of-range label, cluster index and cluster label).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import conv, pcl  # noqa: E402

CONV_SHAPES = [(1, 1), (5, 7), (37, 70), (66, 33), (2, 3, 9, 11)]
CONV_RADII = list(range(8)) + [8, 10]
GRID_STRIDE_CASES = [((4_200_000, 1), 1, False), ((1, 65_600, 2, 3), 2, False),
                     ((1, 65_600, 2, 2), 1, True), ((2_100_100, 2), 4, False)]


def conv_call(shape, radius, per_channel, dtype, generator):
    side = 2 * radius + 1
    channels = shape[1] if len(shape) == 4 else 1
    kernel_shape = (channels, side, side) if per_channel else (side, side)
    image = torch.randn(shape, dtype=dtype, device="cuda", generator=generator)
    kernel = torch.randn(kernel_shape, dtype=dtype, device="cuda", generator=generator)
    conv.conv2d_forward(image, kernel)
    conv.conv2d_backward(image, kernel, torch.randn_like(image))


def conv_cases(generator, grid_strides):
    ran = 0
    for dtype in (torch.float32, torch.float64):
        for shape in CONV_SHAPES:
            for radius in CONV_RADII:
                for per_channel in (False, True):
                    conv_call(shape, radius, per_channel, dtype, generator)
                    ran += 2
    if grid_strides:
        for shape, radius, per_channel in GRID_STRIDE_CASES:
            conv_call(shape, radius, per_channel, torch.float32, generator)
            ran += 2
    return ran


def pcl_inputs(n_proposals, n_classes, n_clusters, dtype, index_dtype, generator):
    def rand(*shape):
        return torch.rand(shape, dtype=dtype, device="cuda", generator=generator)

    pc_labels = torch.randint(1, n_classes, (n_clusters,), device="cuda", generator=generator)
    assignment = torch.randint(0, max(n_clusters, 1), (n_proposals,), device="cuda",
                               generator=generator)
    labels = torch.zeros(n_proposals, dtype=torch.int64, device="cuda")
    if n_clusters:
        labels = torch.where(torch.rand(n_proposals, device="cuda", generator=generator) < 0.5,
                             pc_labels[assignment], 0)
    return [rand(n_proposals, n_classes) + 0.1, labels.to(index_dtype), rand(n_proposals),
            assignment.to(index_dtype), pc_labels.to(index_dtype), rand(n_clusters) + 0.1,
            torch.ones(n_clusters, dtype=index_dtype, device="cuda"), rand(n_clusters),
            torch.ones(n_classes, dtype=index_dtype, device="cuda")]


def pcl_cases(generator):
    ran = 0
    for dtype in (torch.float32, torch.float64):
        for index_dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
            for size in ((1, 2, 1), (300, 21, 20), (5000, 21, 64), (70, 5, 0)):
                args = pcl_inputs(*size, dtype, index_dtype, generator)
                if size[2] >= 20:
                    args[1][7] = (args[1][7] % (size[1] - 1)) + 1  # a likely mismatch
                    args[3][7] = 0
                pcl.pcl_forward(*args)
                pcl.pcl_backward(*args, torch.ones((), dtype=dtype, device="cuda"))
                ran += 2
    for position, value in ((1, 99), (3, -1), (4, 21)):
        args = pcl_inputs(300, 21, 20, torch.float32, torch.float32, generator)
        args[1][5] = 3
        args[position][5] = value
        for call in (lambda: pcl.pcl_forward(*args),
                     lambda: pcl.pcl_backward(*args, torch.ones((), device="cuda"))):
            try:
                call()
            except ValueError:
                ran += 1
            else:
                raise AssertionError("sanitize_pcl_conv: an out-of-range index was accepted")
    return ran


def main():
    generator = torch.Generator(device="cuda").manual_seed(0)
    ran = conv_cases(generator, "--grid-strides" in sys.argv[1:]) + pcl_cases(generator)
    torch.cuda.synchronize()
    print("sanitize_pcl_conv: %d calls ran" % ran)


if __name__ == "__main__":
    main()
