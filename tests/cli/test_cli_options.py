"""What every command shares: each option explained in --help, --version,
the commands pyproject.toml installs, the packages an output needs checked
before any work with the line that installs them, NumPy alone enough
wherever it can serve, and a quiet end when the reader of the standard
output closes the pipe early."""

import os
import subprocess
import sys

import pytest

import _ext
from _ext.tools import plot_roc, rank, roc, roc11, roc_table
from cli_common import (ROOT, call, command_without, in_tmp, one_line,  # noqa: F401  (in_tmp)
                        read_json, script_without, without_run_details, write_sets)

tomllib = pytest.importorskip("tomllib")

TOOLS = {"ext-roc": roc, "ext-roc11": roc11, "ext-plot-roc": plot_roc, "ext-roc-table": roc_table,
         "ext-rank": rank}


def scripts_of_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["scripts"]


@pytest.mark.parametrize("command", sorted(TOOLS))
def test_every_option_is_explained(command):
    parser = TOOLS[command].make_parser()
    assert parser.prog == command
    unexplained = [action.option_strings or action.dest for action in parser._actions
                   if not action.help]
    assert unexplained == []


@pytest.mark.parametrize("command", sorted(TOOLS))
def test_version(capsys, command):
    status, out, err = call(TOOLS[command].main, ["--version"], capsys)
    assert (status, out, err) == (0, "%s %s\n" % (command, _ext.__version__), "")


def test_every_command_is_installed_with_a_twin_for_a_checkout():
    """Each console script of pyproject.toml runs the main() of its tool, and
    scripts/ has a twin that runs it from a checkout."""
    commands = scripts_of_pyproject()
    assert sorted(commands) == sorted(TOOLS)
    for command, target in commands.items():
        module = TOOLS[command]
        assert target == "%s:main" % module.__name__
        twin = os.path.join(ROOT, "scripts", os.path.basename(module.__file__))
        with open(twin) as f:
            assert "from %s import main" % module.__name__ in f.read()


# ---------------------------------------------------------------------------
# packages: what each output needs, checked first; NumPy alone elsewhere

MATPLOTLIB = ('needs matplotlib, which is not installed: pip install matplotlib (or: pip '
              'install "legacy-ext[plot]")')
TORCH = ("needs torch, which is not installed: pip install torch (a CUDA build of it for the "
         "GPU: see pytorch.org)")


@pytest.fixture
def sets(in_tmp, rng):
    write_sets(in_tmp, rng)
    return in_tmp


@pytest.mark.parametrize("name,args,line", [
    ("roc.py", ["query.npz", "gallery.npz", "--json", "r.json", "--plot", "r.png"],
     "ext-roc: --plot " + MATPLOTLIB),
    ("roc11.py", ["query.npz", "gallery.npz", "--out", "r.png"], "ext-roc11: --out " + MATPLOTLIB),
    ("plot_roc.py", ["r.png", "curve.npz"], "ext-plot-roc: drawing curves " + MATPLOTLIB),
    ("rank.py", ["query.npz", "gallery.npz", "--json", "r.json", "--plot", "r.png"],
     "ext-rank: --plot " + MATPLOTLIB),
])
def test_a_plot_without_matplotlib_fails_before_the_work(sets, name, args, line):
    done = script_without(["matplotlib", "torch"], name, *args, cwd=sets)
    assert done.returncode == 1
    assert one_line(done.stderr, line.split(":")[0]) == line
    assert done.stdout == "" and not os.path.exists(sets / "r.json")


@pytest.mark.parametrize("args,environment,line", [
    (["--device", "cuda"], {}, "ext-roc: --device cuda " + TORCH),
    ([], {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"},
     "ext-roc: running under torchrun (WORLD_SIZE=2) " + TORCH),
])
def test_what_needs_torch_says_so(sets, args, environment, line):
    done = script_without(["torch"], "roc.py", "query.npz", "gallery.npz", *args, cwd=sets,
                          env=dict(os.environ, **environment))
    assert done.returncode == 1
    assert one_line(done.stderr, "ext-roc") == line


@pytest.mark.parametrize("args", [[], ["--same-set"], ["--mode", "binned"]])
def test_ext_roc_without_torch_or_matplotlib(sets, capsys, args):
    """The same report as with torch (this process has it), computed with
    NumPy arrays on the CPU."""
    inputs = ["query.npz"] + ([] if args == ["--same-set"] else ["gallery.npz"])
    alone = script_without(["torch", "matplotlib"], "roc.py", *inputs, *args, "--json",
                           "alone.json", "--curve", "alone.npz", cwd=sets)
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr == ""
    status, out, err = call(roc.main, inputs + args + ["--json", "torch.json"], capsys)
    assert status == 0, err
    alone_json, torch_json = read_json(sets / "alone.json"), read_json(sets / "torch.json")
    assert alone_json["device"] == "cpu"
    assert without_run_details(alone_json) == without_run_details(torch_json)


def blog_counts(out):
    """ext-roc11's `num_real_true, false` line."""
    return [line for line in out.splitlines() if line.startswith("num_real_true")]


def test_ext_roc11_without_torch_or_matplotlib(sets, capsys):
    """It computes with NumPy and cpu_roc, says that there is no plot and why,
    and prints the blog's counts as with torch (this process has it)."""
    alone = script_without(["torch", "matplotlib"], "roc11.py", "query.npz", "gallery.npz",
                           cwd=sets)
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr == ("ext-roc11: note: matplotlib is not installed: no plot (pip install "
                            "matplotlib to draw one)\n")
    assert "or no torch" in alone.stdout
    status, out, err = call(roc11.main, ["query.npz", "gallery.npz", "--no-plot"], capsys)
    assert status == 0, err
    assert blog_counts(alone.stdout) == blog_counts(out) != []
    assert not [name for name in os.listdir(sets) if name.endswith(".png")]


@pytest.mark.gpu
def test_ext_roc11_on_the_gpu_counts_what_numpy_does(sets, capsys):
    """With torch and a GPU: gpu_roc, the same totals as NumPy and cpu_roc."""
    alone = script_without(["torch", "matplotlib"], "roc11.py", "query.npz", "gallery.npz",
                           cwd=sets)
    assert alone.returncode == 0, alone.stderr
    status, out, err = call(roc11.main, ["query.npz", "gallery.npz", "--no-plot"], capsys)
    assert status == 0, err
    assert "gpu_roc histogram on cuda" in out
    assert blog_counts(alone.stdout) == blog_counts(out) != []


def test_ext_roc11_plots_where_matplotlib_is(sets, capsys):
    """Its 2018 behaviour: a timestamped PNG with no --out; none with --no-plot."""
    status, out, err = call(roc11.main, ["query.npz", "gallery.npz"], capsys)
    assert status == 0, err
    assert len([name for name in os.listdir(sets) if name.endswith(".png")]) == 1
    status, out, err = call(roc11.main, ["query.npz", "gallery.npz", "--no-plot", "--out",
                                         "x.png"], capsys)
    assert status == 2 and "not allowed with argument" in err


# ---------------------------------------------------------------------------
# a closed pipe

def closed_pipe_run(command, cwd, env):
    """(status, stderr) of a command whose standard output's reader has gone
    before anything is written (`... | head` where head ends first)."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()
    err = process.stderr.read().decode()
    return process.wait(timeout=300), err


@pytest.mark.parametrize("buffered", [True, False])
def test_a_closed_pipe_ends_quietly_and_the_files_are_written(sets, buffered):
    """Buffered (a pipe's default), the write fails at exit; unbuffered, at the
    first line. Either way: no message, status 0, the JSON written; then the
    same for a table of it."""
    env = dict(os.environ)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    # torch left out: it takes seconds to import, and the pipe is the same without it
    status, err = closed_pipe_run(command_without(["torch"], "roc.py", "query.npz", "gallery.npz",
                                                  "--json", "r.json"), sets, env)
    assert (status, err) == (0, "")
    assert read_json(sets / "r.json")["n_genuine"] > 0
    status, err = closed_pipe_run([sys.executable, os.path.join(ROOT, "scripts", "roc_table.py"),
                                   "r.json", "r.json"], sets, env)
    assert (status, err) == (0, "")
