"""What the command-line tests share: running a tool in this process or as a
script (also where packages it may use are not installed), loading a script
as a module, and small embedding files."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(name):
    """scripts/<name>.py as a module (its main() not run)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(main, argv, capsys):
    """(exit status, stdout, stderr) of a tool's main(argv) run here. A message
    passed to sys.exit goes to stderr, as it would at the top level."""
    status = 0
    try:
        main([str(a) for a in argv])
    except SystemExit as done:
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
            status = 1
        else:
            status = done.code or 0
    out = capsys.readouterr()
    return status, out.out, out.err


def script(name, *args, cwd, env=None):
    """A scripts/ tool run as its own process."""
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


# Runs a script (argv[2]) with its arguments (argv[3:]) in an interpreter where
# importing any of the packages named in argv[1] (comma-separated) fails, as
# it would where they are not installed, whatever this machine has.
WITHOUT_PACKAGES = """
import importlib.abc, runpy, sys
blocked = set(sys.argv[1].split(","))

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError("No module named %r" % name, name=name)

sys.meta_path.insert(0, NotInstalled())
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def command_without(packages, name, *args):
    """The command line of a scripts/ tool run where `packages` (names of
    top-level packages) cannot be imported."""
    return [sys.executable, "-c", WITHOUT_PACKAGES, ",".join(packages),
            os.path.join(ROOT, "scripts", name), *map(str, args)]


def script_without(packages, name, *args, cwd, env=None):
    """A scripts/ tool run as its own process where `packages` cannot be imported."""
    return subprocess.run(command_without(packages, name, *args), cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=300)


def one_line(stderr, prefix):
    """The one line of an error message (no traceback), starting with prefix."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix + ": "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def write_sets(directory, rng, n_query=90, n_gallery=110, dim=12, n_ids=25):
    """query.npz and gallery.npz of clustered features (float64 query: converted)."""
    centres = rng.normal(size=(n_ids, dim))
    labels_q, labels_g = rng.integers(0, n_ids, n_query), rng.integers(0, n_ids, n_gallery)
    query = centres[labels_q] + rng.normal(size=(n_query, dim))
    gallery = (centres[labels_g] + rng.normal(size=(n_gallery, dim))).astype(np.float32)
    np.savez(directory / "query.npz", feature=query, label=labels_q)
    np.savez(directory / "gallery.npz", feature=gallery, label=labels_g)
    return query.astype(np.float32), labels_q, gallery, labels_g


def read_json(path):
    with open(path) as f:
        return json.load(f)


def without_run_details(summary):
    """A --json summary less what may differ between runs of the same inputs."""
    return {k: v for k, v in summary.items() if k not in ("timing", "world_size")}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The test runs in tmp_path, as one process (no torchrun environment)."""
    monkeypatch.chdir(tmp_path)
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path
