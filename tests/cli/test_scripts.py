"""The command-line tools as scripts: they run, write what they say, and
refuse unusable files and options with one line naming the file or option,
before any long computation, instead of a traceback."""

import os
import zipfile

import numpy as np
import pytest

from _ext.tools import plot_roc as plot_tool
from _ext.tools import roc as roc_tool
from _ext.tools import roc11 as roc11_tool
from cli_common import call, in_tmp, one_line, script, write_sets  # noqa: F401  (in_tmp)

TOOLS = {"ext-roc": roc_tool.main, "ext-roc11": roc11_tool.main}


@pytest.fixture
def files(in_tmp, rng):
    sets = write_sets(in_tmp, rng)
    gallery = sets[2]
    np.savez("wrong_dim.npz", feature=gallery[:, :8], label=sets[3])
    np.savez("no_label.npz", feature=gallery)
    np.save("plain.npy", gallery)
    open("empty.npz", "wb").close()
    with open("text.npz", "w") as f:
        f.write("1 2 3\n")
    whole = open("gallery.npz", "rb").read()
    with open("truncated.npz", "wb") as f:
        f.write(whole[:len(whole) // 2])
    member = bytearray(whole)
    member[member.find(b"\x93NUMPY") + 200] ^= 0xFF   # a bit flipped inside feature.npy
    with open("flipped.npz", "wb") as f:
        f.write(bytes(member))
    np.savez("objects.npz", feature=np.array([[1.0, None]], dtype=object), label=[1])
    np.savez("complex.npz", feature=gallery.astype(np.complex64), label=sets[3])
    np.savez("label_2d.npz", feature=gallery, label=np.zeros((110, 2)))
    os.mkdir("folder.npz")
    return in_tmp


UNUSABLE = [
    ("missing.npz", "cannot read missing.npz: No such file or directory"),
    ("folder.npz", "cannot read folder.npz: Is a directory"),
    ("empty.npz", "empty.npz is empty (0 bytes)"),
    ("text.npz", "text.npz is not an .npz archive (not a zip file)"),
    ("plain.npy", "plain.npy is not an .npz archive (it holds a single array)"),
    ("truncated.npz", "truncated.npz is a corrupt .npz archive (File is not a zip file)"),
    ("flipped.npz", "flipped.npz is a corrupt .npz archive (Bad CRC-32 for file "
                    "'feature.npy')"),
    ("objects.npz", "objects.npz: array 'feature' holds Python objects (dtype object); save "
                    "it as numbers"),
    ("no_label.npz", "no_label.npz has no 'label' array (it has: feature)"),
    ("complex.npz", "complex.npz: feature must be real numbers, got complex64"),
    ("label_2d.npz", "label_2d.npz: label must be (N,) with N = 110 features, got shape "
                     "(110, 2)"),
    ("wrong_dim.npz", "query.npz features are 12-D but wrong_dim.npz features are 8-D"),
]


@pytest.mark.parametrize("tool", sorted(TOOLS))
@pytest.mark.parametrize("gallery,message", UNUSABLE, ids=[u[0] for u in UNUSABLE])
def test_unusable_files_get_one_line(files, capsys, tool, gallery, message):
    status, out, err = call(TOOLS[tool], ["query.npz", gallery, "--" + (
        "plot" if tool == "ext-roc" else "out"), "roc.png"], capsys)
    assert status == 1
    assert one_line(err, tool) == "%s: %s" % (tool, message)
    assert not os.path.exists("roc.png")


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_one_line_from_the_script_itself(files, tool):
    """What a user sees: the process prints the one line and exits 1."""
    out = script("roc.py" if tool == "ext-roc" else "roc11.py", "query.npz", "flipped.npz",
                 cwd=files)
    assert out.returncode == 1
    assert one_line(out.stderr, tool).endswith("is a corrupt .npz archive (Bad CRC-32 for "
                                               "file 'feature.npy')")


@pytest.mark.parametrize("option", ["--plot", "--json", "--curve"])
@pytest.mark.parametrize("target,reason", [("no_such_dir/out", "No such file or directory"),
                                           ("folder.npz", "Is a directory")])
def test_unwritable_outputs_are_refused_before_the_work(files, capsys, option, target,
                                                        reason):
    fine = {"--plot": ["--json", "fine.json"], "--json": ["--curve", "fine.npz"],
            "--curve": ["--plot", "fine.png"]}[option]
    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz", *fine, option, target],
                            capsys)
    assert status == 1
    assert one_line(err, "ext-roc") == "ext-roc: cannot write %s: %s" % (target, reason)
    assert out == "" and not os.path.exists(fine[1])   # nothing computed, nothing left


def test_unwritable_outputs_of_the_other_tools(files, capsys):
    status, out, err = call(roc11_tool.main, ["query.npz", "gallery.npz", "--out",
                                              "no_such_dir/roc.png"], capsys)
    assert status == 1 and "num_real_true" not in out
    assert one_line(err, "ext-roc11") == ("ext-roc11: cannot write no_such_dir/roc.png: No "
                                          "such file or directory")
    status, out, err = call(plot_tool.main, ["no_such_dir/roc.png", "query.npz"], capsys)
    assert status == 1
    assert one_line(err, "ext-plot-roc") == ("ext-plot-roc: cannot write no_such_dir/roc.png: "
                                             "No such file or directory")


@pytest.mark.parametrize("argv,message", [
    (["gallery.npz"], "give a gallery .npz too, or --same-set for one set"),
    (["query.npz", "gallery.npz", "--same-set"],
     "--same-set takes one file: ext-roc set.npz --same-set"),
    (["--pairs", "p.txt", "query.npz", "--same-set"], "--pairs and --same-set do not go together"),
    (["--pairs", "p.txt"], "--pairs takes one features file: ext-roc --pairs pairs.txt "
                           "features.npz"),
    (["query.npz", "gallery.npz", "--templates"], "--templates needs --pairs"),
    (["query.npz", "gallery.npz", "--json", "x", "--plot", "./x"],
     "--plot, --json and --curve must name different files"),
    (["query.npz", "gallery.npz", "--mode", "binned", "--range", "1", "-1"],
     "--range LO HI needs LO < HI, got 1 -1"),
])
def test_options_that_do_not_go_together(files, capsys, argv, message):
    status, out, err = call(roc_tool.main, argv, capsys)
    assert status == 1
    assert one_line(err, "ext-roc") == "ext-roc: " + message


@pytest.mark.parametrize("argv", [["--far", "2"], ["--far", "nan"], ["--bins", "0"],
                                  ["--timeout", "inf"], ["--same-set=both"],
                                  ["--mode", "fast"], ["--far-rule", "best"]])
def test_bad_option_values(files, capsys, argv):
    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz"] + argv, capsys)
    assert status == 2 and "error: argument " + argv[0].split("=")[0] in err


def test_roc11_on_files(files):
    out = script("roc11.py", "query.npz", "gallery.npz", "--out", "roc.png", cwd=files)
    assert out.returncode == 0, out.stderr
    assert "num_real_true, false" in out.stdout
    assert (files / "roc.png").stat().st_size > 0


def test_roc11_demo_says_what_its_time_covers(tmp_path):
    """`make demo`: the blog's line, then the elapsed time and what it measured."""
    out = script("roc11.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("num_real_true, false 12000 11988000")
    elapsed = lines[at + 1]
    assert elapsed.startswith("elapsed ") and elapsed.endswith(
        " s: making the demo data, the 3000 x 4000 score matrix and its cpu_roc histogram on "
        "cpu, with the copies; start-up and imports excluded")
    assert float(elapsed.split()[1]) > 0
    assert [name for name in os.listdir(tmp_path) if name.endswith(".png")]


def test_roc_command_writes_what_it_says(files):
    out = script("roc.py", "query.npz", "gallery.npz", "--plot", "roc.png", "--json",
                 "roc.json", "--curve", "roc_curve.npz", cwd=files)
    assert out.returncode == 0, out.stderr
    for name in ("roc.png", "roc.json", "roc_curve.npz"):
        assert "saved " + name in out.stdout
        assert (files / name).stat().st_size > 0
    with zipfile.ZipFile(files / "roc_curve.npz") as archive:
        assert {"fpr.npy", "tpr.npy", "auc.npy", "tar.npy"} <= set(archive.namelist())
