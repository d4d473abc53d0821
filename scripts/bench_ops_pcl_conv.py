"""bench_ops_pcl_conv.py: _ext.conv and _ext.pcl against their peers, on one GPU.

    python scripts/bench_ops_pcl_conv.py

Convolution: conv2d against torch.nn.functional.conv2d (cuDNN, benchmark mode
so it picks its fastest algorithm, TF32 off so that both are full fp32), a
4096 x 4096 image and a 64 x 3 x 512 x 512 batch (one kernel shared by the
three channels; cuDNN gets it as a depthwise (3, 1, K, K) weight), R = 1, 2,
3, 5; forward, and backward to the image and the kernel (cuDNN's
convolution_backward, as autograd calls it). Not R = 7: cuDNN's autotuning of
that backward ran for over three minutes on the H100 (some of the algorithms
it tries take seconds), and without benchmark mode its heuristics pick
algorithms that take 80 ms (R = 3) to seconds (R = 5) a call.

PCL loss: pcl_forward and pcl_backward against the plain-PyTorch reference
(_ext/pcl/reference.py, vectorized, no host sync), B proposals x C classes
with P clusters. Ours includes its label checks and the host read-back of
their verdict (a stream synchronization): that is what a call costs.

Timing as the PyCUDA write-up timed niv_conv, with CUDA events: each run is
bracketed by two events, after warm-up runs, with L2 flushed before each
run; the median is reported. Every case is validated against its peer before
it is timed (max |ours - peer| / max |peer| in the table; above 1e-4, 1e-3
for the conv backward, whose cuDNN algorithms may be FFT or Winograd, the
row says MISMATCH and the script exits non-zero).

Napkin bytes (the least DRAM traffic the op needs; GB/s = bytes / our time):
  conv forward    image read + out written                  2 x numel x 4 B
  conv backward   grad_out read twice, image read,
                  grad_image written                        4 x numel x 4 B
  pcl forward     labels, weights, assignment, pcl_probs[:, 0]: 16 B a proposal;
                  4 cluster vectors: 16 B a cluster
  pcl backward    the same reads, grad (B, C) written
"copy %" compares with a device-to-device copy timed the same way (bytes
read plus written), the practical ceiling.
"""

import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _ext import conv, pcl  # noqa: E402
from benchmarks.timing import copy_gbps, cuda_event_timer  # noqa: E402

CONV_RADII = (1, 2, 3, 5)
CONV_CASES = (("4096 x 4096", (4096, 4096)), ("64 x 3 x 512 x 512", (64, 3, 512, 512)))
PCL_CASES = ((4096, 21, 64), (65536, 81, 512))


def relative_diff(ours, peer):
    peer = peer.double()
    scale = float(peer.abs().max()) or 1.0
    return float((ours.double() - peer).abs().max()) / scale


# ---------------------------------------------------------------------------
# cases

def conv_cases(generator):
    """For each image and radius, a dict: label, radius, the four callables
    (ours and the peer's, forward and backward) and the napkin bytes."""
    for label, shape in CONV_CASES:
        image = torch.randn(shape, device="cuda", generator=generator)
        grad_out = torch.randn(shape, device="cuda", generator=generator)
        batch = image if image.dim() == 4 else image[None, None]
        batch_grad = grad_out if grad_out.dim() == 4 else grad_out[None, None]
        channels = batch.shape[1]
        for radius in CONV_RADII:
            side = 2 * radius + 1
            kernel = torch.randn(side, side, device="cuda", generator=generator) / side
            weight = kernel.expand(channels, 1, side, side).contiguous()

            def ours_forward(image=image, kernel=kernel):
                return conv.conv2d_forward(image, kernel)

            def peer_forward(batch=batch, weight=weight, radius=radius, channels=channels):
                return F.conv2d(batch, weight, padding=radius, groups=channels)

            def ours_backward(image=image, kernel=kernel, grad_out=grad_out):
                return conv.conv2d_backward(image, kernel, grad_out)

            def peer_backward(batch=batch, weight=weight, grad=batch_grad, radius=radius,
                              channels=channels):
                grad_input, grad_weight, _ = torch.ops.aten.convolution_backward(
                    grad, batch, weight, None, [1, 1], [radius, radius], [1, 1], False, [0, 0],
                    channels, [True, True, False])
                return grad_input, grad_weight

            numel = image.numel()
            yield dict(label=label, radius=radius, ours_forward=ours_forward,
                       peer_forward=peer_forward, ours_backward=ours_backward,
                       peer_backward=peer_backward, bytes_forward=2 * numel * 4,
                       bytes_backward=4 * numel * 4)


def pcl_problem(n_proposals, n_classes, n_clusters, generator):
    """The seed's callers' inputs: float32, (1, N) vectors, consistent labels."""
    def rand(*shape):
        return torch.rand(shape, device="cuda", generator=generator)

    pc_labels = torch.randint(1, n_classes, (1, n_clusters), device="cuda", generator=generator)
    assignment = torch.randint(0, n_clusters, (1, n_proposals), device="cuda",
                               generator=generator)
    labels = torch.where(rand(1, n_proposals) < 0.6, pc_labels[0, assignment], 0)
    probs = (rand(n_proposals, n_classes) + 0.05).softmax(1)
    return (probs, labels.float(), rand(1, n_proposals), assignment.float(), pc_labels.float(),
            rand(1, n_clusters) * 0.9 + 0.1, torch.randint(1, 20, (1, n_clusters), device="cuda",
                                                            generator=generator).float(),
            rand(1, n_clusters), torch.ones(1, n_classes, device="cuda"))


# ---------------------------------------------------------------------------
# the benchmark

def bench_pcl_conv(timer):
    """Validates and times every case with `timer`, prints the table, and
    returns its rows (dicts)."""
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    generator = torch.Generator(device="cuda").manual_seed(0)
    ceiling = copy_gbps(timer)
    rows = []

    def add(op, case, ours, peer_name, peer, n_bytes, diff, tolerance):
        ours_ms, peer_ms = timer(ours), timer(peer)
        print("  %s %s: %.3f ms, peer %.3f ms" % (op, case, ours_ms, peer_ms), file=sys.stderr,
              flush=True)
        gbps = n_bytes / ours_ms / 1e6
        rows.append(dict(op=op, case=case, ours_ms=ours_ms, peer=peer_name, peer_ms=peer_ms,
                         ratio=ours_ms / peer_ms, gbps=gbps, copy_fraction=gbps / ceiling,
                         max_rel_diff=diff, ok=diff <= tolerance))

    for case in conv_cases(generator):
        name = "%s, R = %d" % (case["label"], case["radius"])
        out, ref = case["ours_forward"](), case["peer_forward"]()
        add("conv2d forward", name, case["ours_forward"], "F.conv2d (cuDNN)",
            case["peer_forward"], case["bytes_forward"],
            relative_diff(out.reshape(ref.shape), ref), 1e-4)
        grads, ref_grads = case["ours_backward"](), case["peer_backward"]()
        diff = max(relative_diff(grads[0].reshape(ref_grads[0].shape), ref_grads[0]),
                   relative_diff(grads[1], ref_grads[1].sum(0)[0]))
        add("conv2d backward", name, case["ours_backward"], "convolution_backward (cuDNN)",
            case["peer_backward"], case["bytes_backward"], diff, 1e-3)
        del out, ref, grads, ref_grads

    for n_proposals, n_classes, n_clusters in PCL_CASES:
        args = pcl_problem(n_proposals, n_classes, n_clusters, generator)
        grad_loss = torch.tensor(1.0, device="cuda")
        name = "B = %d, C = %d, P = %d" % (n_proposals, n_classes, n_clusters)
        reads = 16 * n_proposals + 16 * n_clusters + 4 * n_classes
        loss = pcl.pcl_forward(*args)[0]
        add("pcl forward", name, lambda args=args: pcl.pcl_forward(*args), "plain PyTorch",
            lambda args=args: pcl.pcl_loss_reference(*args), reads,
            relative_diff(loss, pcl.pcl_loss_reference(*args)), 1e-5)
        grad = pcl.pcl_backward(*args, grad_loss)
        add("pcl backward", name, lambda args=args: pcl.pcl_backward(*args, grad_loss),
            "plain PyTorch", lambda args=args: pcl.pcl_grad_reference(*args, grad_loss),
            reads + 4 * n_proposals * n_classes,
            relative_diff(grad, pcl.pcl_grad_reference(*args, grad_loss)), 1e-5)

    print("%s; device-to-device copy %.0f GB/s (read + written)"
          % (torch.cuda.get_device_name(), ceiling))
    print("%-16s | %-26s | %8s | %-29s | %8s | %9s | %6s | %6s | %s"
          % ("op", "case", "ours ms", "peer", "peer ms", "ours/peer", "GB/s", "copy %",
             "max rel diff"))
    for row in rows:
        print("%-16s | %-26s | %8.3f | %-29s | %8.3f | %8.2fx | %6.0f | %5.0f%% | %.1e%s"
              % (row["op"], row["case"], row["ours_ms"], row["peer"], row["peer_ms"],
                 row["ratio"], row["gbps"], 100 * row["copy_fraction"], row["max_rel_diff"],
                 "" if row["ok"] else "  MISMATCH"))
    return rows


def main():
    if not torch.cuda.is_available():
        sys.exit("bench_ops_pcl_conv.py: needs a CUDA device")
    if not (conv.built_with_cuda and pcl.built_with_cuda):
        sys.exit("bench_ops_pcl_conv.py: _ext.conv and _ext.pcl were built without CUDA; "
                 "run make with nvcc on PATH")
    rows = bench_pcl_conv(cuda_event_timer(warmup=5, repeat=30))
    if not all(row["ok"] for row in rows):
        sys.exit("bench_ops_pcl_conv.py: some results differ from their peer (MISMATCH above)")


if __name__ == "__main__":
    main()
