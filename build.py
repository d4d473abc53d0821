"""Build the _ext modules with cffi (out-of-line API mode).

One module per op family: the family `<op>` is the Python package `_ext/<op>/`
and the generated module `_ext/<op>/_<op>*.so`, built from

    src/ext_*.c      shared: descriptor checks, error messages
    src/<op>*.c      the family's C shim and CPU implementation
    build/ext_*.o    shared CUDA helpers (nvcc objects, when built with CUDA)
    build/<op>_*.o   the family's kernels and launchers

Its cdef is read from src/ext_tensor.h and src/<op>.h, the same headers the C
code includes, so the Python signatures cannot drift from the C ones.

The Makefile runs this after nvcc; it passes the objects and the toolkit in
EXT_CUDA_OBJECTS and EXT_CUDA_HOME (both empty for a CPU-only build).
"""

import glob
import os
import re
import sys

from cffi import FFI

ROOT = os.path.dirname(os.path.abspath(__file__))


def cdef_text(header):
    """A header as cffi's cdef wants it: no preprocessor lines, no comments."""
    with open(os.path.join(ROOT, header)) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def op_families():
    """Every _ext/<op>/ package that has its header src/<op>.h."""
    ops = []
    for package in sorted(glob.glob(os.path.join(ROOT, "_ext", "*", "__init__.py"))):
        op = os.path.basename(os.path.dirname(package))
        if os.path.exists(os.path.join(ROOT, "src", op + ".h")):
            ops.append(op)
    return ops


def family_files(op, suffix, candidates):
    """Files of `candidates` that belong to family `op` or are shared (ext_*)."""
    keep = []
    for path in candidates:
        name = os.path.basename(path)
        if name.startswith("ext_") or name == op + suffix or name.startswith(op + "_"):
            keep.append(path)
    return sorted(keep)


def make_builder(op, cuda_home, cuda_objects):
    sources = family_files(op, ".c", glob.glob(os.path.join(ROOT, "src", "*.c")))
    objects = family_files(op, ".o", [os.path.abspath(o) for o in cuda_objects])
    with_cuda = bool(cuda_home) and any(os.path.basename(o).startswith(op) for o in objects)

    ffibuilder = FFI()
    ffibuilder.cdef(cdef_text("src/ext_tensor.h") + cdef_text("src/%s.h" % op))

    define_macros = [("EXT_MODULE", '"%s"' % op)] + ([("EXT_WITH_CUDA", "1")] if with_cuda else [])
    libraries, library_dirs = ["m"], []
    if with_cuda:
        # The CUDA runtime is linked statically so that the module does not need
        # a toolkit at run time; --exclude-libs keeps its symbols private, so
        # they cannot clash with the libcudart that PyTorch loads.
        libraries = ["cudart_static", "rt", "pthread", "dl", "stdc++", "m"]
        library_dirs = [d for d in (os.path.join(cuda_home, "lib64"),
                                    os.path.join(cuda_home, "lib"),
                                    os.path.join(cuda_home, "targets", "x86_64-linux", "lib"))
                        if os.path.isdir(d)]
    ffibuilder.set_source(
        "_ext.%s._%s" % (op, op),
        '#include "ext_tensor.h"\n#include "%s.h"\n' % op,
        sources=sources,
        include_dirs=[os.path.join(ROOT, "src")],
        define_macros=define_macros,
        extra_compile_args=["-O3", "-std=gnu11", "-fopenmp", "-ffp-contract=off",
                            "-fvisibility=hidden", "-Wall", "-Wextra",
                            "-Wno-unused-parameter"],
        extra_objects=objects,
        libraries=libraries,
        library_dirs=library_dirs,
        extra_link_args=["-fopenmp", "-Wl,--exclude-libs,ALL"],
    )
    return ffibuilder, with_cuda


def main():
    cuda_home = os.environ.get("EXT_CUDA_HOME", "").strip()
    cuda_objects = os.environ.get("EXT_CUDA_OBJECTS", "").split()
    os.chdir(ROOT)
    for op in op_families():
        ffibuilder, with_cuda = make_builder(op, cuda_home, cuda_objects)
        path = ffibuilder.compile(tmpdir=os.path.join(ROOT, "build", "cffi"), verbose=False)
        target_dir = os.path.join(ROOT, "_ext", op)
        for old in glob.glob(os.path.join(target_dir, "_%s.*.so" % op)):
            os.remove(old)
        target = os.path.join(target_dir, os.path.basename(path))
        os.replace(path, target)
        print("built %s (%s)" % (os.path.relpath(target, ROOT),
                                 "CUDA + CPU" if with_cuda else "CPU only"))


if __name__ == "__main__":
    sys.exit(main())
