"""make test-sanitize's machinery. A sanitized run that reports nothing means
something only if its build would have reported a bug: code compiled with
build.py's sanitizer flags and run with the runtimes it names must stop at the
first ASan or UBSan finding. Under make test-sanitize itself, the _ext modules
that the tests load must be the instrumented ones of its own tree.
"""

import importlib
import os
import shutil
import subprocess
import sys

import pytest
from cffi import FFI

import build as ext_build  # build.py: pytest.ini puts the checkout on sys.path

ROOT = ext_build.ROOT  # the tree under test: the checkout, or make test-sanitize's
UNDER_SANITIZER = "libasan" in os.environ.get("LD_PRELOAD", "")

PROBE_C = """
#include <stdlib.h>
int read_at(int size, int n)    /* element n of a heap array of `size` */
{
    int *a = malloc(sizeof(int) * size);
    for (int i = 0; i < size; i++)
        a[i] = i;
    int v = a[n];
    free(a);
    return v;
}
int add_one(int x) { return x + 1; }   /* signed overflow at INT_MAX */
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """A cffi module built from PROBE_C with build.py's sanitizer flags, and a
    function running a call to it under the preloaded runtimes."""
    if UNDER_SANITIZER:
        pytest.skip("builds and runs its own sanitized probe: not from inside a sanitized run")
    try:
        runtimes = ext_build.sanitizer_runtimes()
    except SystemExit as missing:
        pytest.skip(str(missing))
    folder = tmp_path_factory.mktemp("probe")
    ffibuilder = FFI()
    ffibuilder.cdef("int read_at(int size, int n); int add_one(int x);")
    ffibuilder.set_source("sanitize_probe", PROBE_C,
                          extra_compile_args=ext_build.SANITIZE_FLAGS,
                          extra_link_args=ext_build.SANITIZE_FLAGS)
    ffibuilder.compile(tmpdir=str(folder))
    env = dict(os.environ, LD_PRELOAD=" ".join(runtimes), ASAN_OPTIONS="detect_leaks=0")

    def call(expression):
        return subprocess.run(
            [sys.executable, "-c", "from sanitize_probe import lib; print(lib.%s)" % expression],
            cwd=str(folder), env=env, capture_output=True, text=True, timeout=120)

    return call


def test_probe_runs_clean_in_bounds(probe):
    assert probe("read_at(4, 3)").stdout.strip() == "3"
    assert probe("add_one(41)").stdout.strip() == "42"


def test_asan_stops_at_a_heap_overflow(probe):
    done = probe("read_at(4, 4)")
    assert done.returncode != 0
    assert "heap-buffer-overflow" in done.stderr


def test_ubsan_stops_at_signed_overflow(probe):
    done = probe("add_one(2147483647)")
    assert done.returncode != 0
    assert "signed integer overflow" in done.stderr


@pytest.mark.skipif(not UNDER_SANITIZER, reason="checks the tree of make test-sanitize only")
@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_sanitized_run_loads_instrumented_modules():
    for op in ext_build.op_families():
        module = importlib.import_module("_ext.%s._%s" % (op, op))
        assert os.path.dirname(module.__file__) == os.path.join(ROOT, "_ext", op)
        symbols = subprocess.run(["nm", "-D", "--undefined-only", module.__file__],
                                 capture_output=True, text=True, check=True).stdout
        assert "__asan_init" in symbols, module.__file__
        assert "__ubsan_handle" in symbols, module.__file__
