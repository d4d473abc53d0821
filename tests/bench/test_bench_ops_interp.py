"""scripts/bench_ops_interp.py: its rows, run on the CPU at small sizes with a
wall-clock timer (the real numbers come from a GPU run of the script)."""

import os
import subprocess
import sys
import time

import pytest
import torch

from cli_common import ROOT, load_script

SCRIPT = os.path.join(ROOT, "scripts", "bench_ops_interp.py")


def wall_clock_timer(fn):
    start = time.perf_counter()
    fn()
    return max(1e-6, (time.perf_counter() - start) * 1e3)


def test_bench_interp_rows_on_cpu():
    bench = load_script("bench_ops_interp")
    sizes = dict(trilinear=(64, 8), upsample=(1, 2, 8, 8), upsample_scale=2, gelu=1000)
    copy_gbps = bench.measure_copy(wall_clock_timer, "cpu", nbytes=1 << 16)
    assert copy_gbps > 0
    rows = bench.bench_interp(wall_clock_timer, device="cpu", sizes=sizes, copy_gbps=copy_gbps)
    variants = [(r["op"], r["variant"]) for r in rows]
    assert ("trilinear", "forward") in variants
    assert ("trilinear", "backward (feats + points)") in variants
    for mode in ("half_pixel", "align_corners", "asymmetric"):
        assert ("upsample", "forward %s" % mode) in variants
        assert ("upsample", "backward %s" % mode) in variants
    for approximate in ("none", "tanh", "sigmoid"):
        assert ("gelu", "forward %s" % approximate) in variants
        assert ("gelu", "backward %s" % approximate) in variants
    # the stated byte counts: 9 N F + 3 N floats forward, in + out for upsample
    by_name = {(r["op"], r["variant"]): r for r in rows}
    assert by_name[("trilinear", "forward")]["bytes"] == (9 * 64 * 8 + 3 * 64) * 4
    assert by_name[("upsample", "forward half_pixel")]["bytes"] == (128 + 512) * 4
    assert by_name[("gelu", "backward none")]["bytes"] == 3 * 1000 * 4
    for r in rows:
        assert r["ours_ms"] > 0 and r["gbps"] > 0 and r["copy_fraction"] > 0
        assert (r["speedup"] is None) == (r["variant"].endswith("asymmetric"))
    table = bench.format_table(rows, copy_gbps, "cpu")
    assert len(table.splitlines()) == len(rows) + 3


def test_seed_references_match_the_ops():
    """The peers the script times compute what the ops compute."""
    from _ext import gelu, trilinear
    bench = load_script("bench_ops_interp")
    feats, points = torch.rand(10, 8, 4), torch.rand(10, 3) * 2 - 1
    torch.testing.assert_close(bench.seed_trilinear(feats, points),
                               trilinear.trilinear_interpolation(feats, points))
    x = torch.randn(100)
    torch.testing.assert_close(bench.seed_gelu(x), gelu.gelu(x, "sigmoid"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_script_without_cuda_says_so():
    out = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
    assert out.returncode != 0
    assert "bench_ops_interp.py: needs a CUDA device" in out.stderr
