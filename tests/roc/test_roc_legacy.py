"""The legacy entry points cpu_roc / gpu_roc against a float64 NumPy reference
of the legacy binning, their errors, and gpu_roc against cpu_roc."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from _ext import _ffi, roc
from build import ROOT  # the checkout: build.py sits at its root


def reference_legacy(score, labels_q, labels_g, nbins):
    """(all, genuine, n_nan) of the legacy binning, in float64 NumPy."""
    score = np.asarray(score, dtype=np.float32).astype(np.float64)
    valid = ~np.isnan(score)
    # outside [-1, 1] (infinities too) goes to the edge bins
    position = (np.clip(score, -1.0, 1.0) + 1.0) / 2.0 * (nbins - 1)
    bins = np.clip(np.trunc(np.where(valid, position, 0.0)), 0, nbins - 1).astype(np.int64)
    genuine = np.asarray(labels_q)[:, None] == np.asarray(labels_g)[None, :]
    all_pairs = np.bincount(bins[valid], minlength=nbins)
    genuine_pairs = np.bincount(bins[valid & genuine], minlength=nbins)
    return all_pairs, genuine_pairs, int((~valid).sum())


def sample_inputs(rng, n_query, n_gallery, n_ids=7, kind="random"):
    """score (Q, G) float32 and float32 labels for one of several data kinds."""
    labels_q = rng.integers(0, n_ids, n_query).astype(np.float32)
    labels_g = rng.integers(0, n_ids, n_gallery).astype(np.float32)
    if kind == "random":
        score = rng.uniform(-1.2, 1.2, (n_query, n_gallery))
    elif kind == "ties":  # few distinct values: many pairs on one value
        score = rng.integers(-4, 5, (n_query, n_gallery)) / 4.0
    elif kind == "edges":  # scores exactly on the legacy bin edges of 1024 bins
        score = rng.integers(0, 1024, (n_query, n_gallery)) * 2.0 / 1023 - 1.0
    elif kind == "special":  # -1, 1, out of range, infinities, NaN
        values = np.array([-1.0, 1.0, -1.5, 1.5, -np.inf, np.inf, np.nan, 0.0, -0.0, 0.999999])
        score = rng.choice(values, (n_query, n_gallery))
    else:
        raise ValueError(kind)
    return score.astype(np.float32), labels_q, labels_g


def run_cpu(score, labels_q, labels_g, nbins=1024, dtype=torch.float32):
    histo1, histo2 = torch.zeros(nbins, dtype=dtype), torch.zeros(nbins, dtype=dtype)
    n_nan = roc.cpu_roc(torch.from_numpy(score), histo1, histo2, torch.from_numpy(labels_q),
                        torch.from_numpy(labels_g))
    return histo1, histo2, n_nan


# ---------------------------------------------------------------------------
# cpu_roc against the reference

@pytest.mark.parametrize("kind", ["random", "ties", "edges", "special"])
@pytest.mark.parametrize("nbins", [1, 2, 7, 1024, 5000])
def test_cpu_roc_matches_reference(rng, kind, nbins):
    score, labels_q, labels_g = sample_inputs(rng, 37, 53, kind=kind)
    histo1, histo2, n_nan = run_cpu(score, labels_q, labels_g, nbins, torch.int64)
    all_pairs, genuine_pairs, ref_nan = reference_legacy(score, labels_q, labels_g, nbins)
    np.testing.assert_array_equal(histo1.numpy(), all_pairs)
    np.testing.assert_array_equal(histo2.numpy(), genuine_pairs)
    assert n_nan == ref_nan
    assert histo1.sum() + n_nan == score.size


def test_edge_values_land_in_edge_bins():
    score = np.array([[-1.0, 1.0, -3.0, 3.0, -np.inf, np.inf, np.nan]], dtype=np.float32)
    labels_q = np.zeros(1, np.float32)
    labels_g = np.array([0, 0, 1, 1, 0, 1, 0], np.float32)
    histo1, histo2, n_nan = run_cpu(score, labels_q, labels_g, 1024, torch.int64)
    assert n_nan == 1
    assert histo1[0] == 3 and histo1[1023] == 3 and histo1.sum() == 6
    assert histo2[0] == 2 and histo2[1023] == 1 and histo2.sum() == 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_counts_are_added_into_histo(rng, dtype):
    score, labels_q, labels_g = sample_inputs(rng, 20, 30)
    histo1 = torch.arange(64, dtype=dtype)
    histo2 = torch.full((64,), 5, dtype=dtype)
    roc.cpu_roc(torch.from_numpy(score), histo1, histo2, torch.from_numpy(labels_q),
                torch.from_numpy(labels_g))
    all_pairs, genuine_pairs, _ = reference_legacy(score, labels_q, labels_g, 64)
    np.testing.assert_array_equal(histo1.numpy(), np.arange(64) + all_pairs)
    np.testing.assert_array_equal(histo2.numpy(), 5 + genuine_pairs)


@pytest.mark.parametrize("label_dtype", [np.float32, np.int32, np.int64])
def test_label_dtypes(rng, label_dtype):
    score, labels_q, labels_g = sample_inputs(rng, 25, 40)
    histo1, histo2 = np.zeros(1024, np.int64), np.zeros(1024, np.int64)
    roc.cpu_roc(score, histo1, histo2, labels_q.astype(label_dtype),
                labels_g.astype(label_dtype))
    all_pairs, genuine_pairs, _ = reference_legacy(score, labels_q, labels_g, 1024)
    np.testing.assert_array_equal(histo1, all_pairs)
    np.testing.assert_array_equal(histo2, genuine_pairs)


def test_counts_beyond_float32_precision():
    """2^24 + 1 pairs in one bin: exact in an int64 histo; a float32 histo
    rounds once, at the end (a float32 counter would stop at 2^24)."""
    n = 2 ** 24 + 1
    score = torch.full((1, n), 0.5)
    labels_q, labels_g = torch.zeros(1), torch.ones(n)
    histo1, histo2 = torch.zeros(8, dtype=torch.int64), torch.zeros(8, dtype=torch.int64)
    roc.cpu_roc(score, histo1, histo2, labels_q, labels_g)
    assert int(histo1.sum()) == n and int(histo2.sum()) == 0
    histo1 = torch.zeros(8)
    roc.cpu_roc(score, histo1, torch.zeros(8), labels_q, labels_g)
    assert float(histo1.sum()) == float(np.float32(n))


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)])
def test_empty_inputs_add_nothing(shape):
    histo1, histo2 = torch.ones(16), torch.ones(16)
    n_nan = roc.cpu_roc(torch.zeros(shape), histo1, histo2, torch.zeros(shape[0]),
                        torch.zeros(shape[1]))
    assert n_nan == 0
    assert torch.equal(histo1, torch.ones(16)) and torch.equal(histo2, torch.ones(16))


def test_generated_module_imports():
    from _ext.roc import _roc
    assert _roc.__file__.endswith(".so")
    assert os.path.dirname(_roc.__file__) == os.path.dirname(roc.__file__)
    assert callable(roc.lib.roc_hist_cpu) and callable(roc.lib.roc_hist_cuda)


# ---------------------------------------------------------------------------
# errors

def legacy_args(n_query=3, n_gallery=5, device="cpu"):
    return dict(score=torch.zeros(n_query, n_gallery, device=device),
                histo1=torch.zeros(1024, device=device), histo2=torch.zeros(1024, device=device),
                labels_q=torch.zeros(n_query, device=device),
                labels_g=torch.zeros(n_gallery, device=device))


def call(fn, args):
    return fn(args["score"], args["histo1"], args["histo2"], args["labels_q"], args["labels_g"])


def test_float64_score_is_a_type_error():
    args = legacy_args()
    args["score"] = args["score"].double()
    with pytest.raises(TypeError, match="cpu_roc: score must be float32, got float64"):
        call(roc.cpu_roc, args)


@pytest.mark.parametrize("name,bad,error,message", [
    ("histo1", torch.zeros(1024, dtype=torch.int32), TypeError,
     "histo1 must be float32, float64 or int64, got int32"),
    ("labels_q", torch.zeros(3, dtype=torch.float64), TypeError,
     "labels_q must be float32, int32 or int64, got float64"),
    ("labels_g", torch.zeros(5, dtype=torch.int64), TypeError,
     r"labels_g must have the dtype of labels_q \(float32\), got int64"),
    ("labels_g", torch.zeros(4), ValueError,
     r"score is \(Q, G\) = \(3, 5\) but labels_g has 4 elements"),
    ("labels_q", torch.zeros(2), ValueError,
     r"score is \(Q, G\) = \(3, 5\) but labels_q has 2 elements"),
    ("histo2", torch.zeros(10), ValueError, "histo2 has 10 elements but histo1 has 1024"),
    ("histo1", torch.zeros(0), ValueError, "histo1 must have at least one element"),
    ("score", torch.zeros(15), ValueError, "score must be 2-D, got 1-D"),
    ("labels_g", [0, 0, 0, 0, 0], TypeError, "labels_g must be an array with __dlpack__"),
])
def test_bad_arguments(name, bad, error, message):
    args = legacy_args()
    args[name] = bad
    with pytest.raises(error, match="cpu_roc: " + message):
        call(roc.cpu_roc, args)


@pytest.mark.parametrize("name", ["score", "histo1", "histo2", "labels_q", "labels_g"])
def test_non_contiguous_is_a_value_error(name):
    args = legacy_args(4, 4)
    doubled = {"score": torch.zeros(4, 8)[:, ::2], "histo1": torch.zeros(2048)[::2],
               "histo2": torch.zeros(2048)[::2], "labels_q": torch.zeros(8)[::2],
               "labels_g": torch.zeros(8)[::2]}
    args[name] = doubled[name]
    with pytest.raises(ValueError, match="cpu_roc: %s must be contiguous" % name):
        call(roc.cpu_roc, args)


def test_contiguity_is_computed_from_sizes_and_strides():
    """A (Q, 1) view with an odd stride on its size-1 dim is contiguous, as in THC."""
    score = torch.zeros(6).as_strided((6, 1), (1, 7))
    histo1 = torch.zeros(4)
    roc.cpu_roc(score, histo1, torch.zeros(4), torch.zeros(6), torch.zeros(1))
    assert histo1[1] == 6


def test_read_only_numpy_histo_is_refused():
    histo1 = np.zeros(8)
    histo1.flags.writeable = False
    with pytest.raises(ValueError, match="histo1 is read-only"):
        roc.cpu_roc(np.zeros((2, 2), np.float32), histo1, np.zeros(8), np.zeros(2, np.float32),
                    np.zeros(2, np.float32))


def test_gpu_roc_refuses_cpu_tensors():
    expected = ("needs CUDA tensors" if roc.built_with_cuda else "built without CUDA")
    with pytest.raises(RuntimeError, match="gpu_roc: .*" + expected):
        call(roc.gpu_roc, legacy_args())


def test_cpu_only_build_says_so(tmp_path):
    """Build the module without CUDA in a scratch copy: gpu_roc must refuse."""
    for item in ("build.py", "src", "_ext"):
        source = os.path.join(ROOT, item)
        if os.path.isdir(source):
            shutil.copytree(source, tmp_path / item, ignore=shutil.ignore_patterns("_*.so"))
        else:
            shutil.copy(source, tmp_path / item)
    env = dict(os.environ, NVCC="")
    subprocess.run([sys.executable, "build.py"], cwd=tmp_path, env=env, check=True,
                   capture_output=True)
    probe = ("import torch\nfrom _ext import roc\nassert not roc.built_with_cuda\n"
             "try:\n    roc.gpu_roc(torch.zeros(2, 2), torch.zeros(4), torch.zeros(4),"
             " torch.zeros(2), torch.zeros(2))\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True,
                         capture_output=True, text=True).stdout
    assert "gpu_roc: _ext.roc was built without CUDA" in out


# ---------------------------------------------------------------------------
# gpu_roc against cpu_roc (GPU machine)

def gpu_vs_cpu(score, labels_q, labels_g, nbins=1024, dtype=torch.int64, device="cuda"):
    score_t = torch.from_numpy(score)
    lq, lg = torch.from_numpy(labels_q), torch.from_numpy(labels_g)
    cpu1, cpu2 = torch.zeros(nbins, dtype=dtype), torch.zeros(nbins, dtype=dtype)
    cpu_nan = roc.cpu_roc(score_t, cpu1, cpu2, lq, lg)
    gpu1 = torch.zeros(nbins, dtype=dtype, device=device)
    gpu2 = torch.zeros(nbins, dtype=dtype, device=device)
    gpu_nan = roc.gpu_roc(score_t.to(device), gpu1, gpu2, lq.to(device), lg.to(device))
    assert gpu_nan == cpu_nan
    assert torch.equal(gpu1.cpu(), cpu1) and torch.equal(gpu2.cpu(), cpu2)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["random", "ties", "edges", "special"])
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (9, 1), (3, 3), (5, 1027), (300, 701),
                                   (1000, 4096)])
def test_gpu_equals_cpu(rng, kind, shape):
    gpu_vs_cpu(*sample_inputs(rng, *shape, kind=kind))


@pytest.mark.gpu
@pytest.mark.parametrize("nbins", [1, 3, 1024, 6144, 40000, 300000])
def test_gpu_equals_cpu_bins(rng, nbins):
    """Shared-memory bins up to the opt-in limit, global atomics beyond."""
    gpu_vs_cpu(*sample_inputs(rng, 200, 333, kind="random"), nbins=nbins)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("label_dtype", [np.float32, np.int32, np.int64])
def test_gpu_dtypes(rng, dtype, label_dtype):
    score, labels_q, labels_g = sample_inputs(rng, 64, 99)
    gpu_vs_cpu(score, labels_q.astype(label_dtype), labels_g.astype(label_dtype), dtype=dtype)


@pytest.mark.gpu
def test_gpu_unaligned_score(rng):
    """A score view that starts 4 bytes into its storage takes the scalar path."""
    score, labels_q, labels_g = sample_inputs(rng, 50, 77)
    storage = torch.zeros(score.size + 1, device="cuda")
    storage[1:] = torch.from_numpy(score).flatten().cuda()
    view = storage[1:].view(50, 77)
    histo1 = torch.zeros(1024, dtype=torch.int64, device="cuda")
    histo2 = torch.zeros(1024, dtype=torch.int64, device="cuda")
    roc.gpu_roc(view, histo1, histo2, torch.from_numpy(labels_q).cuda(),
                torch.from_numpy(labels_g).cuda())
    all_pairs, genuine_pairs, _ = reference_legacy(score, labels_q, labels_g, 1024)
    np.testing.assert_array_equal(histo1.cpu().numpy(), all_pairs)
    np.testing.assert_array_equal(histo2.cpu().numpy(), genuine_pairs)


@pytest.mark.gpu
def test_gpu_runs_on_the_current_stream(rng):
    """Work queued on a side stream before the call must be waited for: the
    score is written on that stream behind a long sleep."""
    score, labels_q, labels_g = sample_inputs(rng, 400, 500)
    host = torch.from_numpy(score).pin_memory()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        device_score = torch.zeros(400, 500, device="cuda")
        histo1 = torch.zeros(1024, dtype=torch.int64, device="cuda")
        histo2 = torch.zeros(1024, dtype=torch.int64, device="cuda")
        lq, lg = torch.from_numpy(labels_q).cuda(), torch.from_numpy(labels_g).cuda()
        torch.cuda._sleep(200_000_000)
        device_score.copy_(host, non_blocking=True)
        roc.gpu_roc(device_score, histo1, histo2, lq, lg)
    all_pairs, genuine_pairs, _ = reference_legacy(score, labels_q, labels_g, 1024)
    np.testing.assert_array_equal(histo1.cpu().numpy(), all_pairs)
    np.testing.assert_array_equal(histo2.cpu().numpy(), genuine_pairs)


@pytest.mark.gpu
def test_gpu_errors():
    args = legacy_args(device="cuda")
    args["score"] = args["score"].double()
    with pytest.raises(TypeError, match="gpu_roc: score must be float32, got float64"):
        call(roc.gpu_roc, args)
    args = legacy_args(device="cuda")
    args["histo2"] = torch.zeros(1024)
    with pytest.raises(RuntimeError, match="gpu_roc: histo2 is on cpu; gpu_roc needs CUDA"):
        call(roc.gpu_roc, args)
    args = legacy_args(device="cuda")
    args["labels_g"] = torch.zeros(10, device="cuda")[::2]
    with pytest.raises(ValueError, match="gpu_roc: labels_g must be contiguous"):
        call(roc.gpu_roc, args)
    with pytest.raises(RuntimeError, match="cpu_roc: score is on cuda:0; cpu_roc needs CPU"):
        call(roc.cpu_roc, legacy_args(device="cuda"))


@pytest.mark.gpu
def test_gpu_cuda_error_is_an_exception():
    """A CUDA failure inside the launcher (here: no device 99) comes back as
    RuntimeError with CUDA's own error string, and the process goes on."""
    args = legacy_args(device="cuda")
    descs = [_ffi.describe(roc.ffi, "gpu_roc", name, args[name])
             for name in ("score", "histo1", "histo2", "labels_q", "labels_g")]
    for desc in descs:
        desc.device_index = 99
    with pytest.raises(RuntimeError, match="gpu_roc: CUDA error: invalid device ordinal"):
        _ffi.check(roc.ffi, roc.lib, roc.lib.roc_hist_cuda(*descs, roc.ffi.NULL,
                                                            roc.ffi.new("int64_t *")))
    call(roc.gpu_roc, args)


@pytest.mark.gpu
def test_gpu_empty_adds_nothing():
    histo1 = torch.ones(16, device="cuda")
    assert roc.gpu_roc(torch.zeros(0, 5, device="cuda"), histo1, torch.ones(16, device="cuda"),
                       torch.zeros(0, device="cuda"), torch.zeros(5, device="cuda")) == 0
    assert torch.equal(histo1.cpu(), torch.ones(16))


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_gpu_second_device(rng):
    gpu_vs_cpu(*sample_inputs(rng, 300, 400), device="cuda:1")
    args = legacy_args(device="cuda:1")
    args["labels_q"] = args["labels_q"].to("cuda:0")
    with pytest.raises(RuntimeError, match="labels_q is on cuda:0 but score is on cuda:1"):
        call(roc.gpu_roc, args)


@pytest.mark.gpu
def test_gpu_more_than_2_31_pairs():
    """50,000 x 45,000 = 2.25e9 pairs, above 2^31: gpu_roc equals cpu_roc on a
    host copy, count for count."""
    n_query, n_gallery = 50_000, 45_000
    generator = torch.Generator(device="cuda").manual_seed(31)
    score = torch.rand(n_query, n_gallery, device="cuda", generator=generator) * 2.2 - 1.1
    score[-1, -7:] = float("nan")  # the last pairs, beyond 2^31, are seen too
    labels_q = torch.randint(0, 1000, (n_query,), device="cuda", generator=generator)
    labels_g = torch.randint(0, 1000, (n_gallery,), device="cuda", generator=generator)
    gpu1 = torch.zeros(1024, dtype=torch.int64, device="cuda")
    gpu2 = torch.zeros(1024, dtype=torch.int64, device="cuda")
    gpu_nan = roc.gpu_roc(score, gpu1, gpu2, labels_q, labels_g)
    cpu1, cpu2 = torch.zeros(1024, dtype=torch.int64), torch.zeros(1024, dtype=torch.int64)
    cpu_nan = roc.cpu_roc(score.cpu(), cpu1, cpu2, labels_q.cpu(), labels_g.cpu())
    assert gpu_nan == cpu_nan == 7
    assert int(gpu1.sum()) == n_query * n_gallery - 7
    assert torch.equal(gpu1.cpu(), cpu1) and torch.equal(gpu2.cpu(), cpu2)
