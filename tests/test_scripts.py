"""The command-line scripts: they run, write what they say, and refuse bad
input with one line instead of a traceback."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(script, *args, cwd):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *args],
                          cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def files(tmp_path, rng):
    centres = rng.normal(size=(40, 16))
    labels_q, labels_g = rng.integers(0, 40, 120), rng.integers(0, 40, 150)
    query = centres[labels_q] + rng.normal(size=(120, 16))
    gallery = centres[labels_g] + rng.normal(size=(150, 16))
    np.savez(tmp_path / "query.npz", feature=query, label=labels_q)  # float64: converted
    np.savez(tmp_path / "gallery.npz", feature=gallery.astype(np.float32), label=labels_g)
    np.savez(tmp_path / "wrong_dim.npz", feature=gallery[:, :8], label=labels_g)
    np.savez(tmp_path / "no_label.npz", feature=gallery)
    np.save(tmp_path / "plain.npy", gallery)
    return tmp_path, (query, labels_q, gallery, labels_g)


def test_roc11_on_files(files):
    tmp_path, _ = files
    out = run("roc11.py", "query.npz", "gallery.npz", "--out", "roc.png", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "num_real_true, false" in out.stdout
    assert (tmp_path / "roc.png").stat().st_size > 0


def test_roc11_demo_writes_a_timestamped_png(tmp_path):
    out = run("roc11.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "num_real_true, false 12000 11988000" in out.stdout
    assert [name for name in os.listdir(tmp_path) if name.endswith(".png")]


@pytest.mark.parametrize("script", ["roc11.py", "roc.py"])
@pytest.mark.parametrize("args,message", [
    (("missing.npz", "gallery.npz"), "cannot read missing.npz"),
    (("query.npz", "wrong_dim.npz"), "query features are 16-D but gallery features are 8-D"),
    (("query.npz", "no_label.npz"), "no_label.npz has no 'label' array"),
    (("query.npz", "plain.npy"), "plain.npy is not an .npz archive"),
])
def test_unusable_files_get_one_line(files, script, args, message):
    tmp_path, _ = files
    out = run(script, *args, cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.strip() == "%s: %s" % (script, out.stderr.strip().split(": ", 1)[1])
    assert message in out.stderr and "Traceback" not in out.stderr


def test_roc_command(files):
    tmp_path, (query, labels_q, gallery, labels_g) = files
    out = run("roc.py", "query.npz", "gallery.npz", "--plot", "roc.png", "--json", "roc.json",
              "--far", "1e-3", "1e-2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "FAR" in out.stdout and "false accepts" in out.stdout
    report = json.loads((tmp_path / "roc.json").read_text())
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    score = unit(query.astype(np.float32)) @ unit(gallery.astype(np.float32)).T
    y_true = (labels_q[:, None] == labels_g[None, :]).ravel()
    assert report["auc"] == pytest.approx(roc_auc_score(y_true, score.ravel()), abs=1e-6)
    assert [row["far"] for row in report["tar_at_far"]] == [1e-3, 1e-2]
    assert (tmp_path / "roc.png").stat().st_size > 0


def test_roc_command_same_set_and_binned(files):
    tmp_path, _ = files
    out = run("roc.py", "gallery.npz", "--same-set", "--mode", "binned", "--bins", "100",
              "--far-rule", "interpolate", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "{:,} pairs".format(150 * 149 // 2) in out.stdout and "binned" in out.stdout
    out = run("roc.py", "gallery.npz", cwd=tmp_path)
    assert out.returncode != 0 and "--same-set" in out.stderr
