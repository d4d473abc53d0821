"""Build one op family without CUDA in a scratch copy of the project, and run
Python code against it: how the tests see the "built without CUDA" errors."""

import glob
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_cpu_only(scratch, family, env=None):
    """Copy build.py, the shared sources and modules and `family`'s own files into
    `scratch`, build there with no CUDA (NVCC set empty, unless `env` is an
    environment that finds no nvcc), and return `scratch`."""
    files = ["build.py", "_ext/__init__.py"]
    for pattern in ("_ext/_*.py", "_ext/%s/*.py" % family, "src/ext_*", "src/%s.*" % family,
                    "src/%s_*" % family):
        files += [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern))]
    for name in files:
        os.makedirs(os.path.dirname(os.path.join(scratch, name)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, name), os.path.join(scratch, name))
    env = dict(os.environ, NVCC="") if env is None else env
    subprocess.run([sys.executable, "build.py"], cwd=scratch, env=env, check=True,
                   capture_output=True)
    return scratch


def run_python(cwd, code):
    """stdout of `python -c code` run in `cwd`."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout
