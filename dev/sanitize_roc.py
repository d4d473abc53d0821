"""Small gpu_roc calls that cover every kernel path, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 dev/sanitize_roc.py
    compute-sanitizer --tool racecheck python3 dev/sanitize_roc.py

Paths: 16-byte and scalar loads, shared-memory and global counters, rows
shorter than a vector, each label and histogram dtype.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import roc  # noqa: E402


def main():
    generator = torch.Generator(device="cuda").manual_seed(0)
    cases = [((1, 1), 1024), ((3, 5), 1024), ((129, 1027), 1024), ((64, 333), 300000),
             ((2, 3), 7)]
    for (n_query, n_gallery), nbins in cases:
        for label_dtype in (torch.float32, torch.int32, torch.int64):
            for histo_dtype in (torch.float32, torch.float64, torch.int64):
                score = torch.rand(n_query, n_gallery, device="cuda", generator=generator)
                score = score * 2.4 - 1.2
                labels_q = torch.randint(0, 5, (n_query,), device="cuda").to(label_dtype)
                labels_g = torch.randint(0, 5, (n_gallery,), device="cuda").to(label_dtype)
                histo1 = torch.zeros(nbins, dtype=histo_dtype, device="cuda")
                histo2 = torch.zeros(nbins, dtype=histo_dtype, device="cuda")
                roc.gpu_roc(score, histo1, histo2, labels_q, labels_g)
                unaligned = torch.empty(score.numel() + 1, device="cuda")[1:].view_as(score)
                unaligned.copy_(score)
                roc.gpu_roc(unaligned, histo1, histo2, labels_q, labels_g)
    torch.cuda.synchronize()
    print("sanitize_roc: %d cases ran" % (len(cases) * 9 * 2))


if __name__ == "__main__":
    main()
