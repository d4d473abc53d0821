"""ext-roc's progress: a bar on a terminal, lines with the time left in a
log (--progress), every pass of an evaluation shown and counted, and the
warnings raised while it runs printed and kept in the JSON."""

import io
import re
import warnings

import numpy as np
import pytest

import _ext.roc
from _ext.tools import progress as progress_module
from _ext.tools import roc as roc_tool
from _ext.tools.progress import Progress, duration
from cli_common import call, in_tmp, read_json  # noqa: F401  (in_tmp: a fixture)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Stream(io.StringIO):
    def __init__(self, terminal):
        super().__init__()
        self.terminal = terminal

    def isatty(self):
        return self.terminal


def feed(progress, clock, steps):
    """progress(done, total) at each (time, done, total) of steps."""
    for at, done, total in steps:
        clock.now = 100.0 + at
        progress(done, total)


def test_lines_with_the_time_left():
    clock, stream = Clock(), Stream(False)
    progress = Progress("auto", "ext-roc", stream, clock)
    assert progress.mode == "lines"
    feed(progress, clock, [(0, 0, 1000), (5, 200, 1000), (12, 400, 1000), (18, 600, 1000),
                           (25, 800, 1000), (30, 1000, 1000)])
    assert stream.getvalue().splitlines() == [
        "ext-roc: 40.0% of 1,000 pairs, 12 s, about 18 s left",
        "ext-roc: 80.0% of 1,000 pairs, 25 s, about 6 s left",
        "ext-roc: 100.0% of 1,000 pairs, 30 s, done"]
    assert progress.passes == 1


def test_a_quick_pass_writes_no_line():
    clock, stream = Clock(), Stream(False)
    progress = Progress("lines", "ext-roc", stream, clock)
    feed(progress, clock, [(0, 10, 20), (9, 20, 20)])
    assert stream.getvalue() == "" and progress.passes == 1


def test_every_pass_is_shown_and_counted():
    """A pass ends at done == total; the next call starts another, and so
    does a count that goes back. Each pass's time runs from the end of the
    one before."""
    clock, stream = Clock(), Stream(False)
    progress = Progress("lines", "ext-roc", stream, clock)
    feed(progress, clock, [(4, 50, 100), (10, 100, 100),        # pass 1
                           (11, 30, 60), (22, 60, 60),          # pass 2
                           (23, 10, 60), (40, 20, 60),          # pass 3
                           (41, 5, 60)])                        # pass 4
    assert stream.getvalue().splitlines() == [
        "ext-roc: 100.0% of 100 pairs, 10 s, done",
        "ext-roc: pass 2: 100.0% of 60 pairs, 12 s, done",
        "ext-roc: pass 3: 33.3% of 60 pairs, 18 s, about 36 s left"]
    assert progress.passes == 4


def test_a_pass_that_counts_on_from_the_passes_before():
    """Pass 2 reporting the pairs of both passes (100 + done of 200): its time
    left comes from the pairs it counted itself."""
    clock, stream = Clock(), Stream(False)
    progress = Progress("lines", "ext-roc", stream, clock)
    feed(progress, clock, [(5, 50, 100), (10, 100, 100), (20, 150, 200), (30, 200, 200)])
    assert stream.getvalue().splitlines() == [
        "ext-roc: 100.0% of 100 pairs, 10 s, done",
        "ext-roc: pass 2: 75.0% of 200 pairs, 10 s, about 10 s left",
        "ext-roc: pass 2: 100.0% of 200 pairs, 20 s, done"]
    assert progress.passes == 2


def test_a_bar_on_a_terminal():
    clock, stream = Clock(), Stream(True)
    progress = Progress("auto", "ext-roc", stream, clock)
    assert progress.mode == "bar"
    feed(progress, clock, [(0.5, 10, 100),                      # too soon for a bar
                           (2, 50, 100), (4, 100, 100),         # drawn, ended
                           (4.5, 0, 100), (7, 60, 100)])        # pass 2, left open
    progress.close()
    half = "[###############               ] 50.0% of 100 pairs, 2 s, about 2 s left"
    whole = "[##############################] 100.0% of 100 pairs, 4 s, done"
    assert stream.getvalue().split("\n") == [
        "\r" + half + "\r" + whole.ljust(len(half)),   # spaces over the longer line's end
        "\r[##################            ] pass 2: 60.0% of 100 pairs, 3 s, about 2 s left", ""]


def test_never_writes_nothing_but_counts():
    clock, stream = Clock(), Stream(True)
    progress = Progress("never", "ext-roc", stream, clock)
    feed(progress, clock, [(0, 5, 10), (50, 10, 10), (60, 10, 10)])
    assert stream.getvalue() == "" and progress.passes == 2


@pytest.mark.parametrize("seconds,text", [(0.4, "0 s"), (59.6, "1 min 00 s"),
                                          (185, "3 min 05 s"), (7620, "2 h 07 min")])
def test_duration(seconds, text):
    assert duration(seconds) == text


# ---------------------------------------------------------------------------
# the command

@pytest.fixture
def pair_list(in_tmp, rng, monkeypatch):
    """500 pairs of image ids, counted 100 a step; a line for every step."""
    np.savez("features.npz", feature=rng.normal(size=(60, 8)).astype(np.float32),
             id=np.arange(60))
    pairs = np.stack([rng.integers(0, 60, 500), rng.integers(0, 60, 500),
                      rng.integers(0, 2, 500)], 1)
    np.savetxt("pairs.txt", pairs, fmt="%d")
    monkeypatch.setattr(progress_module, "LINE_SECONDS", 0.0)
    return ["--pairs", "pairs.txt", "features.npz", "--chunk", "100", "--json", "r.json"]


def shown(err):
    """(pass, percent) of each progress line."""
    return [(int(m.group(1) or 1), float(m.group(2)))
            for m in re.finditer(r"^ext-roc: (?:pass (\d+): )?([\d.]+)% of 500 pairs", err, re.M)]


@pytest.mark.parametrize("option", [[], ["--progress", "lines"]])
def test_lines_in_a_log(pair_list, capsys, option):
    """Not a terminal (a batch job's log): lines by default."""
    status, out, err = call(roc_tool.main, pair_list + option, capsys)
    assert status == 0, err
    assert shown(err) == [(1, 20.0), (1, 40.0), (1, 60.0), (1, 80.0), (1, 100.0)]
    assert read_json("r.json")["timing"]["passes"] == 1


@pytest.mark.parametrize("option", [["--progress", "never"], ["--no-progress"]])
def test_no_progress(pair_list, capsys, option):
    status, out, err = call(roc_tool.main, pair_list + option, capsys)
    assert status == 0, err
    assert err == ""


def test_a_second_pass_and_its_warning(pair_list, capsys, monkeypatch):
    """An evaluation that makes a second pass and warns (as a FAR rule that
    needs one may): both passes shown, the passes and the warning in the JSON."""
    evaluate_pairs = _ext.roc.evaluate_pairs

    def two_passes(*args, **kwargs):
        evaluate_pairs(*args, **kwargs)
        warnings.warn("a second pass over the pairs")
        return evaluate_pairs(*args, **kwargs)
    monkeypatch.setattr(_ext.roc, "evaluate_pairs", two_passes)
    status, out, err = call(roc_tool.main, pair_list, capsys)
    assert status == 0, err
    assert shown(err) == [(p, f) for p in (1, 2) for f in (20.0, 40.0, 60.0, 80.0, 100.0)]
    assert "ext-roc: warning: a second pass over the pairs" in err.splitlines()
    summary = read_json("r.json")
    assert summary["timing"]["passes"] == 2
    assert summary["warnings"] == ["a second pass over the pairs"]
