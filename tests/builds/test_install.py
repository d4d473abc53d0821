"""`pip install .` into a fresh virtualenv, then `_ext` used from elsewhere.

The venv first gets the torch this suite runs with, pinned (in CI the CPU
build of torch 2.13.0 that the Makefile installs), and a wheelhouse of what
pyproject.toml asks for (build requirements and dependencies): fetching, the
only step that needs an index, may fail for want of a network and then the
test skips and says why. `pip install .` itself runs offline from that
wheelhouse, so a failure there is the package's. The build compiles one CUDA
architecture (the lowest this nvcc supports) where there is an nvcc, to keep
the time down. From another directory the installed package must import, add
up the same counts as NumPy and the same AUC as scikit-learn, and expose the
console commands, with torch left as it was.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import _ext  # the checkout's: the version the installed commands must print
import build as ext_build  # build.py: pytest.ini puts the checkout on sys.path
import torch
from sklearn.metrics import roc_auc_score

tomllib = pytest.importorskip("tomllib")

ROOT = ext_build.ROOT  # the checkout
TORCH_PIN = "torch==" + torch.__version__.split("+")[0]
# bounded network steps: a dead network fails fast, and never hangs the suite
PIP_NETWORK = ["--timeout", "30", "--retries", "1"]
NBINS = 64

CALL_INSTALLED = """
import json, sys
import numpy as np
import torch
import _ext
from _ext import roc

data = np.load(sys.argv[1])
score = torch.from_numpy(data["score"])
labels_q, labels_g = torch.from_numpy(data["labels_q"]), torch.from_numpy(data["labels_g"])
report = roc.evaluate(labels_q, labels_g, score=score)
histo1 = torch.zeros(int(sys.argv[2]), dtype=torch.int64)
histo2 = torch.zeros(int(sys.argv[2]), dtype=torch.int64)
n_nan = roc.cpu_roc(score, histo1, histo2, labels_q, labels_g)
print(json.dumps({"package": _ext.__file__, "built_with_cuda": roc.built_with_cuda,
                  "auc": report.auc, "n_nan": [report.n_nan, n_nan],
                  "histo1": histo1.tolist(), "histo2": histo2.tolist(),
                  "torch": torch.__version__}))
"""


def run(command, timeout, cwd=None, env=None):
    """The finished process (never raises on a non-zero status)."""
    return subprocess.run(command, cwd=cwd, env=env, timeout=timeout, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)


def tail(process, lines=15):
    return "\n".join((process.stdout + process.stderr).splitlines()[-lines:])


def fetch_or_skip(command, what, timeout):
    try:
        done = run(command, timeout)
    except subprocess.TimeoutExpired:
        pytest.skip("%s took over %d s (network?)" % (what, timeout))
    if done.returncode != 0:
        pytest.skip("could not %s (network, or no such file here?):\n%s" % (what, tail(done)))


def legacy_histograms(score, genuine, nbins):
    """cpu_roc's counts in float64: bin trunc((s + 1) / 2 * (nbins - 1)),
    clamped to the edge bins, NaN skipped."""
    s = score.astype(np.float64).ravel()
    keep = ~np.isnan(s)
    bins = np.clip(np.trunc((s[keep] + 1) / 2 * (nbins - 1)), 0, nbins - 1).astype(np.int64)
    return (np.bincount(bins, minlength=nbins),
            np.bincount(bins[genuine.ravel()[keep]], minlength=nbins))


@pytest.fixture(scope="module")
def project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_pip_install_into_fresh_venv(tmp_path, rng, project):
    venv = tmp_path / "venv"
    python = str(venv / "bin" / "python")
    made = run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    if made.returncode != 0:
        pytest.skip("python -m venv failed (no ensurepip here?):\n" + tail(made))

    fetch_or_skip([python, "-m", "pip", "install", *PIP_NETWORK, TORCH_PIN],
                  "install %s into a fresh venv" % TORCH_PIN, timeout=900)
    wheelhouse = str(tmp_path / "wheelhouse")
    wanted = project["build-system"]["requires"] + project["project"]["dependencies"]
    fetch_or_skip([python, "-m", "pip", "download", *PIP_NETWORK, "-d", wheelhouse, *wanted],
                  "download %s" % " ".join(wanted), timeout=300)

    cuda, _ = ext_build.find_cuda()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if cuda is not None:
        env["CUDA_ARCH"] = min(cuda.arch, key=ext_build.arch_number)
    installed = run([python, "-m", "pip", "install", "--no-index", "--find-links", wheelhouse,
                     ROOT], timeout=1200, env=env)
    assert installed.returncode == 0, "pip install . failed:\n" + tail(installed, 40)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    score = rng.standard_normal((6, 9)).astype(np.float32) / 2
    score[2, 3] = np.nan
    labels_q = rng.integers(0, 3, 6)
    labels_g = rng.integers(0, 3, 9)
    np.savez(elsewhere / "pairs.npz", score=score, labels_q=labels_q, labels_g=labels_g)
    called = run([python, "-c", CALL_INSTALLED, "pairs.npz", str(NBINS)], timeout=300,
                 cwd=str(elsewhere), env=env)
    assert called.returncode == 0, tail(called, 40)
    result = json.loads(called.stdout)

    assert result["package"].startswith(str(venv)), result["package"]
    assert result["built_with_cuda"] == (cuda is not None)
    assert result["torch"] == torch.__version__, "installing changed torch"
    genuine = labels_q[:, None] == labels_g[None, :]
    keep = ~np.isnan(score)
    assert result["n_nan"] == [1, 1]
    assert result["auc"] == pytest.approx(
        roc_auc_score(genuine[keep], score[keep].astype(np.float64)), rel=1e-12)
    histo1, histo2 = legacy_histograms(score, genuine, NBINS)
    assert result["histo1"] == histo1.tolist()
    assert result["histo2"] == histo2.tolist()

    requires = run([python, "-c", "import importlib.metadata as m; print(m.requires(%r))"
                    % project["project"]["name"]], timeout=60, cwd=str(elsewhere), env=env)
    assert requires.returncode == 0, tail(requires)
    assert "torch" not in requires.stdout and "cffi" in requires.stdout

    for command in project["project"]["scripts"]:
        helped = run([str(venv / "bin" / command), "--help"], timeout=120,
                     cwd=str(elsewhere), env=env)
        assert helped.returncode == 0, tail(helped)
        assert helped.stdout.startswith("usage: " + command)
        version = run([str(venv / "bin" / command), "--version"], timeout=120,
                      cwd=str(elsewhere), env=env)
        assert version.stdout == "%s %s\n" % (command, _ext.__version__), tail(version)
