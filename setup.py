"""`pip install .`: the same nvcc objects and cffi modules as `make`.

The metadata is in pyproject.toml. This file only hooks build.py into
setuptools' build_ext: nvcc compiles src/cuda/*.cu into build_ext's temporary
folder, then build.py's module builder writes each family's module where
setuptools wants it (the wheel's tree, or _ext/<op>/ for `pip install -e .`).
CUDA_HOME, NVCC, CUDA_ARCH and NVCC_FLAGS mean what they mean for `make`.
"""

import importlib.util
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def load_build_py():
    # Loaded from its path: the name `build` is also the PyPA build frontend's.
    spec = importlib.util.spec_from_file_location("_ext_build", os.path.join(HERE, "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ext_build = load_build_py()


class BuildCffiModules(build_ext):
    """build_ext whose extensions are build.py's modules, one per op family."""

    def run(self):
        self.cuda, self.no_cuda = ext_build.find_cuda()
        if self.cuda is None:
            # pip shows the build's output with -v; the installed modules say
            # it too (built_with_cuda, and the CUDA entry points' error).
            self.warn(ext_build.cpu_only_message(self.no_cuda))
            self.cuda_objects = []
        else:
            self.cuda_objects = ext_build.compile_cuda_objects(
                self.cuda, os.path.join(self.build_temp, "cuda"))
        super().run()

    def build_extension(self, ext):
        op = ext.name.split(".")[1]
        ext_build.build_module(op, self.get_ext_fullpath(ext.name), self.cuda, self.cuda_objects,
                               os.path.join(self.build_temp, "cffi"), no_cuda=self.no_cuda)


setup(
    ext_modules=[Extension("_ext.%s._%s" % (op, op), sources=[])
                 for op in ext_build.op_families()],
    cmdclass={"build_ext": BuildCffiModules},
)
