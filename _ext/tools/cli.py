"""What every command shares: its --version, the parsing of a FAR target,
the packages an output needs (checked before any work, with the line that
installs them), and a quiet standard output when a reader closes the pipe
early (`ext-roc ... | head`)."""

import argparse
import functools
import importlib
import os
import sys

import _ext

from .embeddings import InputError

# what pip installs for each optional import
INSTALL = {"matplotlib": "pip install matplotlib (or: pip install \"legacy-ext[plot]\")",
           "torch": "pip install torch (a CUDA build of it for the GPU: see pytorch.org)"}


def add_version(parser):
    parser.add_argument("--version", action="version",
                        version="%s %s" % (parser.prog, _ext.__version__),
                        help="print the version and exit")


def far_value(text):
    """argparse's type of a FAR target: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text) from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("a FAR lies in [0, 1], got %r" % text)
    return value


def bare_list_options(argv, names):
    """argv with each option of `names` (its value an optional list file) made
    bare, `--name=`, where the next word is an .npz: argparse would hand an
    option with an optional value the next word, whatever it is, and a file
    after it is the command's features file (those lists are text, never an
    .npz)."""
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word in names and out[i + 1].endswith(".npz"):
            out[i] = word + "="
    return out


def require(module, purpose):
    """The imported module; InputError saying what needs it and how to install
    it where it cannot be imported."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError("%s needs %s, which is not installed: %s"
                         % (purpose, module, INSTALL[module])) from None


def optional(module):
    """The imported module, or None where it cannot be imported."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


class ClosablePipe:
    """A text stream that stops writing, silently, once its reader has closed
    the pipe: the command goes on to write its files and exits as it would
    have, and Python's flush at exit finds /dev/null instead of a closed pipe."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        if self.stream is not None:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self.closed_by_reader()
        return len(text)

    def flush(self):
        if self.stream is not None:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self.closed_by_reader()

    def closed_by_reader(self):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)
        self.stream = None

    def __getattr__(self, name):
        return getattr(self.stream or sys.__stdout__, name)


def quiet_on_closed_pipe(main):
    """main() with sys.stdout a ClosablePipe while it runs (and flushed
    before it is given back)."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        stdout = sys.stdout
        sys.stdout = ClosablePipe(stdout)
        try:
            return main(*args, **kwargs)
        finally:
            sys.stdout.flush()
            sys.stdout = stdout
    return wrapped
