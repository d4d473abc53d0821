"""Build the _ext modules: nvcc objects, then one cffi module per op family.

One module per op family: the family `<op>` is the Python package `_ext/<op>/`
and the generated module `_ext/<op>/_<op>*.so`, built (cffi, out-of-line API
mode) from

    src/ext_*.c      shared: descriptor checks, error messages
    src/<op>*.c      the family's C shim and CPU implementation
    ext_*.o          shared CUDA helpers (nvcc objects, when built with CUDA)
    <op>_*.o         the family's kernels and launchers

Its cdef is read from src/ext_tensor.h, src/<op>.h and the family's headers
that src/<op>.h includes (#include "<op>_*.h": roc.h's roc_rank.h), the same
headers the C code includes, so the Python signatures cannot drift from the C
ones.

Both builds go through the functions below: `make` runs this file (objects in
build/, modules in place under _ext/), and `pip install .` runs setup.py,
which calls the same nvcc step and module builder and lets setuptools decide
where the modules go. Both read the same environment:

    CUDA_HOME   toolkit root (default: that of the nvcc on PATH)
    NVCC        the nvcc to use (default: $CUDA_HOME/bin/nvcc); set but empty: CPU-only
    CUDA_ARCH   compute capabilities, e.g. "90" or "80 90" (default: every one
                from 75 to 90 that this nvcc supports); PTX is added for the newest
    NVCC_FLAGS  replaces the default nvcc flags below

Without nvcc the build is CPU-only, says so, and the CUDA entry points raise
RuntimeError. `python build.py --help` lists the options (a separate output
tree and sanitizer flags for `make test-sanitize`, the configuration for
`make help`).
"""

import argparse
import glob
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.abspath(__file__))

DEFAULT_NVCC_FLAGS = ("-O3 -std=c++17 --threads 0 -Xcompiler -fPIC "
                      "-Xcompiler -fvisibility=hidden")
DEFAULT_ARCH_RANGE = (75, 90)

C_FLAGS = ["-O3", "-std=gnu11", "-fopenmp", "-ffp-contract=off", "-fvisibility=hidden",
           "-Wall", "-Wextra", "-Wno-unused-parameter"]
# ASan and UBSan (make test-sanitize); -O1, after C_FLAGS' -O3, keeps the
# reports' stacks readable. Python's own CFLAGS carry -fwrapv, which defines
# signed overflow and so hides it from UBSan: our C must not rely on it.
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                  "-fno-wrapv", "-fno-omit-frame-pointer", "-g", "-O1"]


# ---------------------------------------------------------------------------
# the CUDA toolkit

def arch_number(arch):
    """90 for "90" and for "90a" (arch-specific features)."""
    return int(arch.rstrip("af"))


class Cuda:
    """The toolkit a build uses: nvcc, its root, the architectures and flags."""

    def __init__(self, nvcc, home, arch, flags):
        self.nvcc, self.home, self.arch, self.flags = nvcc, home, arch, flags

    def gencode(self):
        """nvcc's -gencode flags: SASS for every arch, PTX for the newest."""
        flags = []
        for a in self.arch:
            flags += ["-gencode", "arch=compute_%s,code=sm_%s" % (a, a)]
        newest = max(self.arch, key=arch_number)
        return flags + ["-gencode", "arch=compute_%s,code=compute_%s" % (newest, newest)]

    def library_dirs(self):
        return [d for d in (os.path.join(self.home, "lib64"), os.path.join(self.home, "lib"),
                            os.path.join(self.home, "targets", "x86_64-linux", "lib"))
                if os.path.isdir(d)]


def nvcc_home(nvcc):
    """The toolkit root of `nvcc`, as nvcc itself reports it (nvcc on PATH may
    be a wrapper script, so its own directory can mislead)."""
    dry = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                         capture_output=True, text=True)
    match = re.search(r"^#\$ _HERE_=(.*)/bin$", dry.stdout + dry.stderr, re.M)
    return match.group(1) if match else os.path.dirname(os.path.dirname(nvcc))


def default_arch(nvcc):
    """Every compute capability in DEFAULT_ARCH_RANGE that `nvcc` supports."""
    listed = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout
    low, high = DEFAULT_ARCH_RANGE
    return [a for a in re.findall(r"^compute_(\d+)$", listed, re.M) if low <= int(a) <= high]


class NoCuda:
    """Why a build is CPU-only: str() is the build log's reason; `why` and
    `remedy` are what the modules' CUDA entry points say (ext_no_cuda)."""

    def __init__(self, reason, why, remedy):
        self.reason, self.why, self.remedy = reason, why, remedy

    def __str__(self):
        return self.reason


def find_cuda(environ=None):
    """(Cuda, None) for the toolkit the environment names, or (None, NoCuda)
    when the build is to be CPU-only."""
    environ = os.environ if environ is None else environ
    home = environ.get("CUDA_HOME", "").strip()
    if "NVCC" in environ:
        nvcc = environ["NVCC"].strip()
        if not nvcc:
            return None, NoCuda("NVCC is set empty", "NVCC was set empty at build time, "
                                "a CPU-only build", "rebuild with NVCC unset or naming an nvcc")
    elif home:
        nvcc = os.path.join(home, "bin", "nvcc")
    else:
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            return None, NoCuda("nvcc not found (set CUDA_HOME or put nvcc on PATH)",
                                "nvcc was not found at build time",
                                "rebuild with nvcc on PATH or CUDA_HOME set")
    nvcc = shutil.which(nvcc)
    if nvcc is None:
        where = environ.get("NVCC") or os.path.join(home, "bin", "nvcc")
        return None, NoCuda("no nvcc at %s" % where, "there was no nvcc at %s at build time"
                            % where, "rebuild with NVCC or CUDA_HOME naming a CUDA toolkit")
    arch = environ.get("CUDA_ARCH", "").replace(",", " ").split() or default_arch(nvcc)
    if not arch:
        supports = "%s supports none of sm_%d to sm_%d" % ((nvcc,) + DEFAULT_ARCH_RANGE)
        return None, NoCuda(supports, supports, "rebuild with CUDA_ARCH naming the GPUs' "
                                                "compute capabilities")
    for a in arch:
        if not re.fullmatch(r"\d+[af]?", a):
            raise SystemExit("build.py: CUDA_ARCH=%r: expected compute capabilities such as "
                             "'90' or '80 90a'" % environ["CUDA_ARCH"])
    flags = shlex.split(environ.get("NVCC_FLAGS", DEFAULT_NVCC_FLAGS))
    return Cuda(nvcc, home or nvcc_home(nvcc), arch, flags), None


def cpu_only_message(reason):
    return ("%s: building CPU-only; the CUDA entry points will raise RuntimeError." % reason)


# ---------------------------------------------------------------------------
# inputs and the record of what was built from them

def cuda_sources():
    return sorted(glob.glob(os.path.join(ROOT, "src", "cuda", "*.cu")))


def headers():
    return sorted(glob.glob(os.path.join(ROOT, "src", "*.h")) +
                  glob.glob(os.path.join(ROOT, "src", "cuda", "*.h")) +
                  glob.glob(os.path.join(ROOT, "src", "cuda", "*.cuh")))


def signature(settings, files):
    """A digest of the settings and of every input file's content."""
    digest = hashlib.sha256(repr(settings).encode())
    for path in files:
        digest.update(path.encode())
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def up_to_date(output, record, digest):
    """Whether `record` says that `output`, as it is now, was built from `digest`
    (a file written over by another build, pip's say, does not match)."""
    if not os.path.exists(output) or not os.path.exists(record):
        return False
    with open(record) as f:
        return f.read() == record_text(output, digest)


def record_text(output, digest):
    stat = os.stat(output)
    return "%s %d %d\n" % (digest, stat.st_size, stat.st_mtime_ns)


def write_record(output, record, digest):
    with open(record, "w") as f:
        f.write(record_text(output, digest))


# ---------------------------------------------------------------------------
# nvcc step: src/cuda/*.cu -> <object_dir>/*.o

def run_nvcc(source, command):
    print(" ".join(shlex.quote(c) for c in command), flush=True)
    status = subprocess.run(command).returncode
    if status != 0:
        raise SystemExit("build.py: nvcc failed on %s (exit status %d)"
                         % (os.path.relpath(source), status))


def compile_cuda_objects(cuda, object_dir):
    """Compile every src/cuda/*.cu into object_dir, skipping the objects
    whose sources, headers and nvcc command are unchanged; returns their paths."""
    os.makedirs(object_dir, exist_ok=True)
    include = headers()
    work = []
    for source in cuda_sources():
        name = os.path.splitext(os.path.basename(source))[0]
        target = os.path.join(object_dir, name + ".o")
        command = ([cuda.nvcc] + cuda.flags + cuda.gencode() +
                   ["-I" + os.path.join(ROOT, "src"), "-c", source, "-o", target])
        digest = signature(command, [source] + include)
        if not up_to_date(target, target + ".sig", digest):
            work.append((source, command, target, digest))

    def run(item):
        source, command, target, digest = item
        run_nvcc(source, command)
        write_record(target, target + ".sig", digest)

    # --threads 0 spreads one file's architectures over the cores; files side
    # by side keep the cores busy when there are few architectures.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        list(pool.map(run, work))
    return [os.path.join(object_dir, os.path.splitext(os.path.basename(s))[0] + ".o")
            for s in cuda_sources()]


def build_shared_library(cuda, source, target):
    """A standalone .cu as a shared library, with this build's toolkit and
    architectures (the 2018 blog kernel, a benchmark peer)."""
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    run_nvcc(source, [cuda.nvcc, "-O3", "-shared", "-Xcompiler", "-fPIC"] + cuda.gencode() +
             [source, "-o", target])


# ---------------------------------------------------------------------------
# cffi step: one module per op family

def cdef_text(header):
    """A header as cffi's cdef wants it: no preprocessor lines, no comments."""
    with open(os.path.join(ROOT, header)) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def public_headers(op):
    """src/<op>.h and the family's headers it includes, in that order: the cdef."""
    with open(os.path.join(ROOT, "src", op + ".h")) as f:
        included = re.findall(r'^#include "(%s_\w+\.h)"' % re.escape(op), f.read(), re.M)
    return ["src/%s.h" % op] + ["src/" + name for name in included]


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


NO_CUDA_OBJECTS = NoCuda("no CUDA objects", "its CUDA objects were not built",
                         "rebuild with `make` or `pip install .`")


def c_string(text):
    """text as a C string literal, for a -D definition."""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def module_settings(op, cuda, cuda_objects, sanitize=False, no_cuda=None):
    """set_source's arguments for family `op`, and whether it has CUDA. A
    module without CUDA is told why (no_cuda, a NoCuda), for its CUDA entry
    points' error."""
    objects = family_files(op, ".o", [os.path.abspath(o) for o in cuda_objects])
    with_cuda = cuda is not None and any(os.path.basename(o).startswith(op) for o in objects)
    if not with_cuda:
        objects = []
        no_cuda = no_cuda if cuda is None and no_cuda is not None else NO_CUDA_OBJECTS
    compile_args = C_FLAGS + (SANITIZE_FLAGS if sanitize else [])
    link_args = ["-fopenmp", "-Wl,--exclude-libs,ALL"] + (SANITIZE_FLAGS if sanitize else [])
    libraries, library_dirs = ["m"], []
    if with_cuda:
        # The CUDA runtime is linked statically so that the module does not need
        # a toolkit at run time; --exclude-libs keeps its symbols private, so
        # they cannot clash with the libcudart that PyTorch loads.
        libraries = ["cudart_static", "rt", "pthread", "dl", "stdc++", "m"]
        library_dirs = cuda.library_dirs()
    settings = dict(
        sources=family_files(op, ".c", glob.glob(os.path.join(ROOT, "src", "*.c"))),
        include_dirs=[os.path.join(ROOT, "src")],
        define_macros=[("EXT_MODULE", c_string(op))] +
                      ([("EXT_WITH_CUDA", "1")] if with_cuda else
                       [("EXT_NO_CUDA_WHY", c_string(no_cuda.why)),
                        ("EXT_NO_CUDA_REMEDY", c_string(no_cuda.remedy))]),
        extra_compile_args=compile_args,
        extra_objects=objects,
        libraries=libraries,
        library_dirs=library_dirs,
        extra_link_args=link_args,
    )
    return settings, with_cuda


def build_module(op, target, cuda, cuda_objects, tmpdir, sanitize=False, no_cuda=None):
    """Compile family `op`'s cffi module to the file `target`, unless the one
    there was built from the same inputs; returns whether it has CUDA. no_cuda:
    find_cuda's NoCuda where cuda is None."""
    from cffi import FFI, __version__ as cffi_version

    settings, with_cuda = module_settings(op, cuda, cuda_objects, sanitize, no_cuda)
    cdef = "\n".join(cdef_text(header) for header in ["src/ext_tensor.h"] + public_headers(op))
    preamble = '#include "ext_tensor.h"\n#include "%s.h"\n' % op
    record = os.path.join(tmpdir, op + ".sig")
    digest = signature((settings, cdef, preamble, cffi_version, target),
                       settings["sources"] + settings["extra_objects"] + headers())
    kind = "CUDA + CPU" if with_cuda else "CPU only"
    if up_to_date(target, record, digest):
        print("%s is up to date (%s)" % (os.path.relpath(target), kind))
        return with_cuda

    ffibuilder = FFI()
    ffibuilder.cdef(cdef)
    ffibuilder.set_source("_ext.%s._%s" % (op, op), preamble, **settings)
    os.makedirs(tmpdir, exist_ok=True)
    built = ffibuilder.compile(tmpdir=tmpdir, verbose=False)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    for old in glob.glob(os.path.join(os.path.dirname(target), "_%s.*.so" % op)):
        os.remove(old)
    os.replace(built, target)
    write_record(target, record, digest)
    print("built %s (%s)" % (os.path.relpath(target), kind))
    return with_cuda


def sanitizer_runtimes():
    """The ASan and UBSan runtimes of the compiler that builds the modules
    (setuptools': $CC, else Python's own), to preload: python itself is not
    instrumented, and ASan's runtime must come first."""
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[0]
    paths = []
    for name in ("libasan.so", "libubsan.so"):
        path = subprocess.run([compiler, "-print-file-name=" + name],
                              capture_output=True, text=True).stdout.strip()
        if not os.path.isabs(path):
            raise SystemExit("build.py: %s has no %s (the sanitized build needs gcc's runtimes)"
                             % (compiler, name))
        paths.append(path)
    return paths


def module_file(op):
    """The generated module's file name, e.g. _roc.cpython-311-x86_64-linux-gnu.so."""
    return "_%s%s" % (op, sysconfig.get_config_var("EXT_SUFFIX"))


def copy_package(out_root):
    """The _ext package's Python files under out_root/_ext, beside the modules
    built there (a tree that imports on its own); files gone from the
    checkout go from there too."""
    for old in glob.glob(os.path.join(out_root, "_ext", "**", "*.py"), recursive=True):
        os.remove(old)
    for source in glob.glob(os.path.join(ROOT, "_ext", "**", "*.py"), recursive=True):
        target = os.path.join(out_root, os.path.relpath(source, ROOT))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(source, target)


# ---------------------------------------------------------------------------
# command line (what `make` runs)

def main(argv=None):
    parser = argparse.ArgumentParser(description="Build the _ext modules (nvcc objects + cffi).")
    parser.add_argument("--cpu-only", action="store_true", help="build without CUDA, nvcc or not")
    parser.add_argument("--out-root", default=ROOT,
                        help="tree to build into: OUT_ROOT/_ext gets the package's Python files "
                             "and the modules, OUT_ROOT/build the intermediate files "
                             "(default: this checkout, in place)")
    parser.add_argument("--sanitize", action="store_true",
                        help="compile the C shims with ASan and UBSan (CPU-only)")
    parser.add_argument("--sanitizer-runtimes", action="store_true",
                        help="print the ASan and UBSan runtimes to LD_PRELOAD, build nothing")
    parser.add_argument("--show-config", action="store_true",
                        help="print the toolkit and architectures a build would use, build nothing")
    parser.add_argument("--shared-library", nargs=2, metavar=("SOURCE", "TARGET"),
                        help="compile one standalone .cu into a shared library, nothing else")
    args = parser.parse_args(argv)

    if args.sanitize:
        cuda, reason = None, NoCuda("--sanitize", "the sanitizer build (build.py --sanitize) is "
                                    "CPU-only", "use the modules `make` builds")
    elif args.cpu_only:
        cuda, reason = None, NoCuda("--cpu-only", "build.py --cpu-only",
                                    "rebuild without --cpu-only")
    else:
        cuda, reason = find_cuda()
    if args.sanitizer_runtimes:
        print(" ".join(sanitizer_runtimes()))
        return 0
    if args.show_config:
        if cuda is None:
            print("CUDA: none (%s)" % reason)
        else:
            print("NVCC=%s\nCUDA_HOME=%s\nCUDA_ARCH=%s\nNVCC_FLAGS=%s" % (
                cuda.nvcc, cuda.home, " ".join(cuda.arch), " ".join(cuda.flags)))
        return 0
    if args.shared_library:
        if cuda is None:
            parser.error("--shared-library needs nvcc: %s" % reason)
        build_shared_library(cuda, *args.shared_library)
        return 0

    out_root = os.path.abspath(args.out_root)
    build_dir = os.path.join(out_root, "build")
    if cuda is None:
        print(cpu_only_message(reason), flush=True)
        objects = []
    else:
        objects = compile_cuda_objects(cuda, build_dir)
    if out_root != ROOT:
        copy_package(out_root)
    for op in op_families():
        build_module(op, os.path.join(out_root, "_ext", op, module_file(op)), cuda, objects,
                     os.path.join(build_dir, "cffi"), args.sanitize, reason)
    return 0


if __name__ == "__main__":
    sys.exit(main())
