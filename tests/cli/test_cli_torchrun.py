"""ext-roc under torchrun, 2 processes on the CPU (gloo): the same table and
JSON (but for timing and world_size) as one process, for two sets, one set
and a pair list; a failure on any process ends every process with a non-zero
status, and rank 0 alone prints the one line, naming the failing rank."""

import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

from _ext.tools import roc as roc_tool
from cli_common import (ROOT, call, in_tmp, one_line, read_json,  # noqa: F401  (in_tmp)
                        without_run_details, write_sets)
from test_cli_pairs import write_ijb

SCRIPT = os.path.join(ROOT, "scripts", "roc.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args, cwd):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                           "--master-addr=127.0.0.1", "--master-port=%d" % free_port(), SCRIPT,
                           *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def two_ranks(args, cwds):
    """Each rank started as torchrun starts it (its environment variables), in
    its own directory; [(status, stdout, stderr)] in rank order."""
    port = free_port()
    processes = []
    for rank, cwd in enumerate(cwds):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        processes.append(subprocess.Popen([sys.executable, SCRIPT, *args], cwd=cwd, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
    results = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        results.append((process.returncode, out, err))
    return results


def table_of(stdout):
    """The report's lines: from the TAR@FAR header to the pair counts."""
    lines = stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("FAR"))
    last = next(i for i, line in enumerate(lines) if line.endswith("NaN scores excluded"))
    return lines[first:last + 1]


@pytest.mark.parametrize("case", ["two sets", "same set", "template pairs"])
def test_torchrun_reports_what_one_process_does(in_tmp, rng, capsys, case):
    if case == "two sets":
        write_sets(in_tmp, rng, n_query=101, n_gallery=77)
        args = ["query.npz", "gallery.npz"]
    elif case == "same set":
        feature = rng.normal(size=(97, 8)).astype(np.float32)
        feature[13] = 0   # excluded, with a warning, the same on every rank
        np.savez("set.npz", feature=feature, label=rng.integers(0, 11, 97))
        args = ["set.npz", "--same-set"]
    else:
        write_ijb(in_tmp, rng)
        args = ["--pairs", "pairs.txt", "features.npz", "--templates", "tid_mid.txt"]
    args += ["--far", "1e-3", "1e-2", "0.1", "--device", "cpu"]
    status, single_out, single_err = call(roc_tool.main, args + ["--json", "one.json"], capsys)
    assert status == 0, single_err
    run = torchrun(args + ["--json", "two.json"], in_tmp)
    assert run.returncode == 0, run.stdout + run.stderr
    assert table_of(run.stdout) == table_of(single_out)
    assert run.stdout.count("AUC") == 1 and "x 2 processes" in run.stdout   # rank 0 alone
    one, two = read_json("one.json"), read_json("two.json")
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert without_run_details(one) == without_run_details(two)
    if case == "same set":
        assert one["warnings"] and one["n_nan"] == 96
        assert run.stderr.count("warning: set.npz: 1 of 97 feature rows") == 1


def test_every_rank_fails_and_rank_0_says_so(in_tmp, rng):
    write_sets(in_tmp, rng)
    with open("bad.npz", "wb") as f:
        f.write(open("gallery.npz", "rb").read()[:300])
    results = two_ranks(["query.npz", "bad.npz"], [in_tmp, in_tmp])
    assert [status for status, _, _ in results] == [1, 1]
    assert one_line(results[0][2], "ext-roc") == (
        "ext-roc: rank 0 (and 1 other rank(s)): bad.npz is a corrupt .npz archive (File is "
        "not a zip file)")
    assert results[1][1:] == ("", "")


def test_one_rank_fails_to_load_and_every_rank_stops(in_tmp, rng):
    """Rank 1 runs where query.npz is not (a node without the file)."""
    write_sets(in_tmp, rng)
    elsewhere = in_tmp / "elsewhere"
    elsewhere.mkdir()
    shutil.copy("gallery.npz", elsewhere)
    results = two_ranks(["query.npz", "gallery.npz"], [in_tmp, elsewhere])
    assert [status for status, _, _ in results] == [1, 1]
    assert one_line(results[0][2], "ext-roc") == (
        "ext-roc: rank 1: cannot read query.npz: No such file or directory")
    assert results[0][1] == "" and results[1][1:] == ("", "")


def test_unwritable_output_stops_every_rank_before_the_work(in_tmp, rng):
    write_sets(in_tmp, rng)
    results = two_ranks(["query.npz", "gallery.npz", "--json", "no_dir/r.json"],
                        [in_tmp, in_tmp])
    assert [status for status, _, _ in results] == [1, 1]
    assert one_line(results[0][2], "ext-roc") == (
        "ext-roc: rank 0: cannot write no_dir/r.json: No such file or directory")
    assert results[0][1] == "" and results[1][1:] == ("", "")


def test_torchrun_failure_is_one_line_and_a_failed_status(in_tmp, rng):
    write_sets(in_tmp, rng)
    open("empty.npz", "wb").close()
    run = torchrun(["query.npz", "empty.npz"], in_tmp)
    assert run.returncode != 0
    ours = [line for line in (run.stdout + run.stderr).splitlines()
            if line.startswith("ext-roc")]
    assert ours == ["ext-roc: rank 0 (and 1 other rank(s)): empty.npz is empty (0 bytes)"]
    assert "terminate called" not in run.stderr   # the process group was closed cleanly


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["two sets", "same set", "template pairs"])
def test_torchrun_nccl_reports_what_one_gpu_does(in_tmp, rng, capsys, case):
    """The 2-GPU machine: NCCL, each rank on cuda:LOCAL_RANK."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    if case == "two sets":
        write_sets(in_tmp, rng, n_query=3001, n_gallery=2500, dim=64)
        args = ["query.npz", "gallery.npz"]
    elif case == "same set":
        np.savez("set.npz", feature=rng.normal(size=(4001, 64)).astype(np.float32),
                 label=rng.integers(0, 300, 4001))
        args = ["set.npz", "--same-set"]
    else:
        write_ijb(in_tmp, rng, n_subjects=40, templates_per_subject=20)
        args = ["--pairs", "pairs.txt", "features.npz", "--templates"]
    status, single_out, single_err = call(roc_tool.main, args + ["--json", "one.json"], capsys)
    assert status == 0, single_err
    run = torchrun(args + ["--json", "two.json"], in_tmp)
    assert run.returncode == 0, run.stdout + run.stderr
    assert table_of(run.stdout) == table_of(single_out)
    one, two = read_json("one.json"), read_json("two.json")
    assert one["device"] == two["device"] == "cuda:0"
    # each process's own peak: rank 0 counts a share of the pairs
    for summary in (one, two):
        summary.pop("device_bytes_peak")
    assert without_run_details(one) == without_run_details(two)
