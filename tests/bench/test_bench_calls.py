"""scripts/bench_calls.py: it refuses to run without a GPU; its rows, run on
the CPU with a few calls (the real numbers come from a GPU run); on a GPU,
every path of the real run."""

import os
import subprocess
import sys

import pytest
import torch

from cli_common import ROOT, load_script

SCRIPT = os.path.join(ROOT, "scripts", "bench_calls.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a GPU-less run")
def test_refuses_without_a_gpu():
    out = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
    assert out.returncode == 1
    assert "bench_calls.py: needs a CUDA device" in out.stderr


def check_rows(rows):
    """Three groups, each ending with its torch eager row (ratio 1); the paths."""
    groups = {}
    for group, path, us, ratio in rows:
        assert us > 0 and ratio > 0
        groups.setdefault(group, []).append((path, ratio))
    assert len(groups) == 3
    for paths in groups.values():
        assert paths[-1][0].endswith("(torch eager)") and paths[-1][1] == 1.0
    paths = [path for group, path, us, ratio in rows]
    assert {"gelu_forward() (raw entry point)", "gelu() -> ext::gelu", "torch.ops.ext.gelu",
            "upsample_bilinear() -> ext::upsample_bilinear"} <= set(paths)
    return paths


def test_rows_on_the_cpu():
    bench = load_script("bench_calls")
    rows, notes = bench.bench_calls("cpu", calls=20, repeats=1, warmup=2)
    paths = check_rows(rows)
    assert "lib.gelu_forward_cpu, prebuilt descriptors" in paths
    assert "roc.cpu_roc (legacy, returns an int)" in paths and "torch.ops.ext.cpu_roc" in paths
    assert notes == ["CuPy rows: CUDA only"]
    assert "| gelu, 1,024 float32 | gelu() -> ext::gelu |" in bench.table(rows)


@pytest.mark.gpu
def test_rows_on_the_gpu():
    bench = load_script("bench_calls")
    rows, notes = bench.bench_calls("cuda", calls=50, repeats=1, warmup=5)
    paths = check_rows(rows)
    assert "roc.gpu_roc (legacy, returns an int)" in paths and "torch.ops.ext.gpu_roc" in paths
    cupy_row = "ext::gelu on a CuPy array, DLPack both ways" in paths
    assert cupy_row != bool(notes) and all(note.startswith("CuPy unavailable") for note in notes)
