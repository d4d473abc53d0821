"""scripts/bench_ops_pcl_conv.py: it refuses to run without a GPU, and on one
its every case agrees with its peer (cuDNN, the plain-PyTorch PCL)."""

import os
import subprocess
import sys

import pytest
import torch

from cli_common import ROOT, load_script

SCRIPT = os.path.join(ROOT, "scripts", "bench_ops_pcl_conv.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a GPU-less run")
def test_refuses_without_a_gpu():
    out = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
    assert out.returncode == 1
    assert "bench_ops_pcl_conv.py: needs a CUDA device" in out.stderr


@pytest.mark.gpu
def test_every_case_agrees_with_its_peer(capsys):
    bench_ops_pcl_conv = load_script("bench_ops_pcl_conv")
    rows = bench_ops_pcl_conv.bench_pcl_conv(bench_ops_pcl_conv.cuda_event_timer(1, 2))
    n_conv = 2 * len(bench_ops_pcl_conv.CONV_CASES) * len(bench_ops_pcl_conv.CONV_RADII)
    assert len(rows) == n_conv + 2 * len(bench_ops_pcl_conv.PCL_CASES)
    assert all(row["ok"] for row in rows), [row for row in rows if not row["ok"]]
    assert all(row["ours_ms"] > 0 and row["peer_ms"] > 0 for row in rows)
    assert "ours/peer" in capsys.readouterr().out
