"""Custom ops built the legacy FFI way: nvcc objects + a C shim + cffi.

    from _ext import roc
    roc.gpu_roc(score, histo1, histo2, labels_q, labels_g)

Each op family is a subpackage whose generated module (_<op>*.so) is built by
`make` (build.py); the subpackage's __init__ is the thin Python wrapper.
"""

# The one place the version is written: pyproject.toml reads it, the commands
# print it (--version) and record it in their JSON.
__version__ = "0.1.0"
