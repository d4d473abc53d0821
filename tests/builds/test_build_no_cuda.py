"""A build without CUDA says why in its CUDA entry points' error, with the
remedy for that cause: CPU-only on purpose (NVCC set empty), or for want of an
nvcc."""

import os
import shutil

import pytest

import build as ext_build  # build.py: pytest.ini puts the checkout on sys.path
from cpu_only_build import build_cpu_only, run_python

CALL_CUDA_ENTRY = """
import numpy as np
from _ext import gelu, _ffi
x = np.zeros(3, np.float32)
args = [_ffi.describe(gelu.ffi, 'gelu', name, x) for name in ('input', 'output')]
try:
    _ffi.check(gelu.ffi, gelu.lib, gelu.lib.gelu_forward_cuda(*args, 0, gelu.ffi.NULL))
except RuntimeError as error:
    print(error)
"""
ON_PURPOSE = ("NVCC was set empty at build time, a CPU-only build",
              "rebuild with NVCC unset or naming an nvcc")
NOT_FOUND = ("nvcc was not found at build time", "rebuild with nvcc on PATH or CUDA_HOME set")


def path_without_nvcc():
    """This PATH less every directory holding an nvcc."""
    return os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if not shutil.which("nvcc", path=d))


@pytest.mark.parametrize("cause,expected", [("NVCC=", ON_PURPOSE), ("no nvcc", NOT_FOUND)])
def test_each_cause_is_told_to_the_module(monkeypatch, cause, expected):
    monkeypatch.setenv("PATH", path_without_nvcc())
    cuda, no_cuda = ext_build.find_cuda({"NVCC": ""} if cause == "NVCC=" else {})
    assert cuda is None and (no_cuda.why, no_cuda.remedy) == expected
    settings, with_cuda = ext_build.module_settings("gelu", None, [], no_cuda=no_cuda)
    assert not with_cuda
    assert ("EXT_NO_CUDA_WHY", '"%s"' % expected[0]) in settings["define_macros"]
    assert ("EXT_NO_CUDA_REMEDY", '"%s"' % expected[1]) in settings["define_macros"]


def test_a_build_without_nvcc_says_so(tmp_path):
    """The error itself, from a build that found no nvcc (one build: the C
    formats whichever cause the definitions above give it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NVCC", "CUDA_HOME")}
    env["PATH"] = path_without_nvcc()
    build_cpu_only(tmp_path, "gelu", env)
    assert run_python(tmp_path, CALL_CUDA_ENTRY) == (
        "gelu: _ext.gelu was built without CUDA (%s); %s, or pass CPU tensors\n" % NOT_FOUND)
