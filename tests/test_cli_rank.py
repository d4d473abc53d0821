"""ext-rank: the report of rank.evaluate on the files' sets (two sets, with
cameras, one set), its JSON and CMC plot, and bad inputs refused in one
line."""

import json

import numpy as np
import pytest

from _ext import rank
from _ext.tools import rank as rank_tool
from cli_common import (call, in_tmp, one_line, read_json, script_without,  # noqa: F401  (in_tmp)
                        write_sets)


def test_two_sets_with_cameras_json(in_tmp, rng, capsys):
    query, labels_q, gallery, labels_g = write_sets(in_tmp, rng)
    cams_q, cams_g = rng.integers(0, 3, len(labels_q)), rng.integers(0, 3, len(labels_g))
    for name, cams in (("query.npz", cams_q), ("gallery.npz", cams_g)):
        with np.load(in_tmp / name) as data:
            np.savez(in_tmp / name, feature=data["feature"], label=data["label"], cam=cams)
    status, out, err = call(rank_tool.main, ["query.npz", "gallery.npz", "--cams", "--json",
                                             "r.json", "--fpir", "0.1", "0.5", "--max-rank",
                                             "20", "--ties", "pessimistic"], capsys)
    assert status == 0, err
    want = rank.evaluate(labels_q, labels_g, feat_q=query, feat_g=gallery, cams_q=cams_q,
                         cams_g=cams_g, fpirs=(0.1, 0.5), max_rank=20, ties="pessimistic")
    summary = read_json("r.json")
    assert {k: summary[k] for k in want.to_dict()} == json.loads(json.dumps(want.to_dict()))
    assert summary["inputs"] == {"query": "query.npz", "gallery": "gallery.npz"}
    assert summary["options"]["cams"] is True
    assert "rank-1" in out and "mAP" in out and "saved r.json" in out


def test_one_set_and_the_cmc_plot(in_tmp, rng, capsys):
    pytest.importorskip("matplotlib")
    query, labels_q, _, _ = write_sets(in_tmp, rng)
    status, out, err = call(rank_tool.main, ["query.npz", "--same-set", "--junk", "none",
                                             "--plot", "cmc.png", "--json", "r.json"], capsys)
    assert status == 0, err
    want = rank.evaluate(labels_q, feat_q=query, same_set=True, junk=None)
    assert read_json("r.json")["cmc"] == want.to_dict()["cmc"]
    assert (in_tmp / "cmc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["query.npz"], "give a query and a gallery, or one set with --same-set"),
    (["query.npz", "gallery.npz", "--same-set"],
     "give a query and a gallery, or one set with --same-set"),
])
def test_wrong_set_counts_are_usage_errors(in_tmp, rng, capsys, argv, message):
    write_sets(in_tmp, rng)
    status, out, err = call(rank_tool.main, argv, capsys)
    assert status == 2 and message in err


def test_missing_cameras_and_files_in_one_line(in_tmp, rng, capsys):
    write_sets(in_tmp, rng)
    status, _, err = call(rank_tool.main, ["query.npz", "gallery.npz", "--cams"], capsys)
    assert status == 1
    assert "cam" in one_line(err, "ext-rank")
    status, _, err = call(rank_tool.main, ["query.npz", "absent.npz"], capsys)
    assert status == 1 and "absent.npz" in one_line(err, "ext-rank")


def test_without_torch_or_matplotlib(in_tmp, rng, capsys):
    """NumPy alone computes the same report (this process has torch)."""
    write_sets(in_tmp, rng)
    alone = script_without(["torch", "matplotlib"], "rank.py", "query.npz", "gallery.npz",
                           "--json", "alone.json", cwd=in_tmp)
    assert alone.returncode == 0, alone.stderr
    status, _, err = call(rank_tool.main, ["query.npz", "gallery.npz", "--json", "torch.json"],
                          capsys)
    assert status == 0, err
    drop = ("timing",)
    assert {k: v for k, v in read_json("alone.json").items() if k not in drop} == \
        {k: v for k, v in read_json("torch.json").items() if k not in drop}
