"""ext-roc-table: the TAR@FAR table of several ext-roc --json reports, a
method a row and a FAR a column in percent, as InsightFace's IJB script prints
it, plus the AUC; in markdown, LaTeX and CSV; and the reports it cannot use."""

import csv
import io
import json

import numpy as np
import pytest
from sklearn.metrics import auc as sk_auc
from sklearn.metrics import roc_curve as sk_roc_curve

from _ext import roc
from _ext.tools import roc as roc_tool
from _ext.tools import roc_table
from cli_common import call, in_tmp, one_line  # noqa: F401  (in_tmp: a fixture)

IJB_FARS = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]


def insightface_row(label, score):
    """InsightFace's IJB table row: at each FAR, the TPR of the nearest point
    of scikit-learn's curve (flipped, so the higher TPR wins a tie), x 100 with
    two decimals; here with sklearn's AUC x 100 after it."""
    fpr, tpr, _ = sk_roc_curve(label, score)
    roc_auc = sk_auc(fpr, tpr)
    fpr, tpr = np.flipud(fpr), np.flipud(tpr)
    row = []
    for far in IJB_FARS:
        _, min_index = min(list(zip(abs(fpr - far), range(len(fpr)))))
        row.append("%.2f" % (tpr[min_index] * 100))
    return row + ["%.2f" % (roc_auc * 100)]


def test_the_table_insightface_prints(in_tmp, rng, capsys):
    """Two models on one pair list (4,000 pairs: 1e-4 and below are under one
    impostor pair, as at IJB's lowest FARs): each cell as InsightFace's script
    computes it."""
    ids = np.arange(500)
    ia, ib = rng.integers(0, 500, 4000), rng.integers(0, 500, 4000)
    subject = rng.integers(0, 40, 500)
    genuine = subject[ia] == subject[ib]
    np.savetxt("pairs.txt", np.stack([ia, ib, genuine], 1), fmt="%d")
    centres = rng.normal(size=(40, 16))
    expected = []
    for name, noise in (("model_a", 1.0), ("model_b", 2.0)):
        feature = (centres[subject] + rng.normal(scale=noise, size=(500, 16))).astype(np.float32)
        np.savez(name + ".npz", feature=feature, id=ids)
        status, out, err = call(roc_tool.main, [
            "--pairs", "pairs.txt", name + ".npz", "--mode", "curve", "--far-rule",
            "nearest_sklearn", "--label", name, "--json", name + ".json",
            "--far", *map(str, IJB_FARS)], capsys)
        assert status == 0, err
        score = roc.pair_scores(feature, feature)[ia, ib].astype(np.float64)  # the tool's own
        expected.append([name] + insightface_row(genuine, score))
    status, out, err = call(roc_table.main, ["model_a.json", "model_b.json", "--format", "csv"],
                            capsys)
    assert status == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["Method", "1e-06", "1e-05", "1e-04", "1e-03", "1e-02", "1e-01", "AUC"]
    assert rows[1:] == expected


def report(path, label, auc, rows, far_rule="max_tpr", mode="exact"):
    """A report as ext-roc --json writes it (the fields the table reads)."""
    with open(path, "w") as f:
        json.dump({"label": label, "auc": auc, "far_rule": far_rule, "mode": mode,
                   "tar_at_far": [{"far": far, "tar": tar, "below_resolution": below}
                                  for far, tar, below in rows]}, f)


@pytest.fixture
def reports(in_tmp):
    report("a.json", "ArcFace_R100 & flip", 0.998765,
           [(1e-6, 0.8, True), (1e-4, 0.9512345, False), (1e-2, 0.99, False)])
    report("b.json", None, None, [(1e-4, None, False), (2.5e-3, 0.97, False)])
    return in_tmp


def test_markdown(reports, capsys):
    status, out, err = call(roc_table.main, ["a.json", "b.json"], capsys)
    assert status == 0, err
    assert out == (
        "| Method | 1e-06 | 1e-04 | 2.5e-03 | 1e-02 | AUC |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: |\n"
        "| ArcFace_R100 & flip | 80.00\\* | 95.12 | - | 99.00 | 99.88 |\n"
        "| b | - | - | 97.00 | - | - |\n"
        "\n"
        "\\* below 1 / impostor pairs: no threshold resolves the target\n")


def test_latex_with_chosen_columns_and_names(reports, capsys):
    status, out, err = call(roc_table.main, [
        "a.json", "b.json", "--format", "latex", "--far", "1e-4", "--far", "2.5e-3",
        "--decimals", "3", "--label", "R100_{flip}", "--label", "50% off"], capsys)
    assert status == 0, err
    assert out == (
        "\\begin{tabular}{lrrr}\n"
        "\\hline\n"
        "Method & $10^{-4}$ & $2.5 \\cdot 10^{-3}$ & AUC \\\\\n"
        "\\hline\n"
        "R100\\_\\{flip\\} & 95.123 & -- & 99.877 \\\\\n"
        "50\\% off & -- & 97.000 & -- \\\\\n"
        "\\hline\n"
        "\\end{tabular}\n")


def test_csv_to_a_file_and_the_warning_of_different_rules(reports, capsys):
    report("c.json", "c", 0.5, [(1e-4, 0.25, False)], far_rule="nearest_sklearn")
    status, out, err = call(roc_table.main, ["a.json", "c.json", "--format", "csv",
                                             "--output", "t.csv"], capsys)
    assert status == 0, err
    assert out == ""
    assert err.splitlines() == [
        "ext-roc-table: warning: the reports were counted under different FAR rules (a.json: "
        "max_tpr, c.json: nearest_sklearn): their TARs do not compare",
        "saved t.csv"]
    with open("t.csv") as f:
        assert f.read() == ("Method,1e-06,1e-04,1e-02,AUC\n"
                            "ArcFace_R100 & flip,80.00,95.12,99.00,99.88\n"
                            "c,,25.00,,50.00\n")


@pytest.mark.parametrize("argv,message", [
    (["a.json", "--label", "x", "--label", "y"], "2 --label for 1 reports: give one per report, "
                                                  "or none"),
    (["missing.json"], "cannot read missing.json: No such file or directory"),
    (["text.json"], "text.json is not JSON (Expecting value: line 1 column 1 (char 0))"),
    (["list.json"], "list.json is not a report of ext-roc --json (it has no tar_at_far rows and "
                    "auc)"),
    (["bad_tar.json"], "bad_tar.json: the tar at far 0.001 must be a number in [0, 1], got 1.5"),
    (["bad_far.json"], "bad_far.json: a row's far must be a number in [0, 1], got 'x'"),
    (["a.json", "--output", "no_dir/t.md"], "cannot write no_dir/t.md: No such file or "
                                            "directory"),
])
def test_unusable_reports_get_one_line(reports, capsys, argv, message):
    with open("text.json", "w") as f:
        f.write("TAR 0.9\n")
    with open("list.json", "w") as f:
        json.dump([1, 2], f)
    report("bad_tar.json", "x", 0.9, [(1e-3, 1.5, False)])
    with open("bad_far.json", "w") as f:
        json.dump({"auc": 0.9, "tar_at_far": [{"far": "x", "tar": 0.5}]}, f)
    status, out, err = call(roc_table.main, argv, capsys)
    assert status == 1 and out == ""
    assert one_line(err, "ext-roc-table") == "ext-roc-table: " + message
