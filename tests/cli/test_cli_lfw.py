"""ext-roc --pairs with LFW's pairs.txt: the layout read line for line (and
the lines it cannot use), the images found by their name/name_%04d.jpg
paths, and the k-fold accuracy printed beside TAR@FAR, equal to InsightFace's
verification.py on the same features."""

import numpy as np
import pytest

from _ext import roc
from _ext.tools import lfw
from _ext.tools import roc as roc_tool
from cli_common import call, in_tmp, one_line, read_json  # noqa: F401
from insightface_verification import insightface_evaluate

NAMES = ["Abel_Pacheco", "Akhmed_Zakayev", "Amber_Tamblyn", "Anders_Fogh_Rasmussen",
         "Angela_Bassett", "Ann_Veneman", "Anthony_Fauci", "Antonio_Banderas"]


def write_lfw(directory, rng, sets=3, per_kind=20, dim=16, prefix="lfw/", header=None):
    """A pairs.txt in LFW's layout (tabs, as the original) over NAMES with up to
    six images each, and features.npz with `feature` and `path` (paths below
    `prefix`, rows shuffled). Returns the pairs' (genuine, path_a, path_b)."""
    centres = {name: rng.normal(size=dim) for name in NAMES}
    images = [(name, k) for name in NAMES for k in range(1, 7)]
    lines = [header or "%d\t%d" % (sets, per_kind)]
    genuine, path_a, path_b = [], [], []
    for _ in range(sets):
        for matched in (True, False):
            for _ in range(per_kind):
                name_a = NAMES[rng.integers(len(NAMES))]
                name_b = name_a if matched else NAMES[(NAMES.index(name_a) + rng.integers(
                    1, len(NAMES))) % len(NAMES)]
                a, b = rng.choice(np.arange(1, 7), 2, replace=not matched)
                lines.append("\t".join([name_a, str(a), str(b)] if matched else
                                       [name_a, str(a), name_b, str(b)]))
                genuine.append(matched)
                path_a.append("%s/%s_%04d.jpg" % (name_a, name_a, a))
                path_b.append("%s/%s_%04d.jpg" % (name_b, name_b, b))
    (directory / "pairs.txt").write_text("\n".join(lines) + "\n")
    order = rng.permutation(len(images))
    feature = np.array([centres[n] + 1.3 * rng.normal(size=dim) for n, _ in images])[order]
    paths = np.array(["%s%s/%s_%04d.jpg" % (prefix, n, n, k) for n, k in images])[order]
    np.savez(directory / "features.npz", feature=feature, path=paths)
    return np.array(genuine), np.array(path_a), np.array(path_b)


def insightface_distance(feature, rows_a, rows_b):
    """verification.py: sklearn.preprocessing.normalize, then |a - b|^2."""
    from sklearn.preprocessing import normalize
    unit = normalize(feature)
    return np.sum(np.square(np.subtract(unit[rows_a], unit[rows_b])), 1)


def test_reads_lfw_layout(in_tmp, rng):
    genuine, path_a, path_b = write_lfw(in_tmp, rng)
    assert lfw.is_lfw_pairs("pairs.txt")
    pairs = lfw.read_pairs("pairs.txt")
    np.testing.assert_array_equal(pairs.genuine, genuine)
    np.testing.assert_array_equal(pairs.path_a, path_a)
    np.testing.assert_array_equal(pairs.path_b, path_b)
    assert (pairs.folds, pairs.pairs_per_fold) == (3, 40)
    np.testing.assert_array_equal(pairs.lines, np.arange(2, 122))
    assert lfw.image_path("Abel_Pacheco", 4) == "Abel_Pacheco/Abel_Pacheco_0004.jpg"


def test_one_number_header_is_one_set(in_tmp, rng):
    """pairsDevTrain.txt's layout: a first line of n, then n matched and n
    mismatched pairs."""
    genuine, _, _ = write_lfw(in_tmp, rng, sets=1, per_kind=15, header="15")
    pairs = lfw.read_pairs("pairs.txt")
    assert (pairs.folds, pairs.pairs_per_fold) == (1, 30)
    np.testing.assert_array_equal(pairs.genuine, genuine)


def test_id_pair_lists_are_not_lfw(in_tmp):
    (in_tmp / "ids.txt").write_text("\n3 4 1\n5 6 0\n")
    (in_tmp / "lfw.txt").write_text("\n\n10 300\n")
    assert not lfw.is_lfw_pairs("ids.txt") and lfw.is_lfw_pairs("lfw.txt")


def test_accuracy_beside_tar_at_far(in_tmp, rng, capsys):
    genuine, _, _ = write_lfw(in_tmp, rng, sets=4, per_kind=25)
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz",
                                            "--json", "out.json", "--far", "0.01", "0.1"],
                            capsys)
    assert status == 0, err
    data = np.load("features.npz")
    pairs = lfw.read_pairs("pairs.txt")
    rows_a, rows_b = lfw.pair_rows(pairs, "pairs.txt", "features.npz", data["path"])
    distance = insightface_distance(data["feature"], rows_a, rows_b)
    expected = insightface_evaluate(distance, genuine, folds=4)
    summary = read_json("out.json")
    ours = summary["verification"]
    assert ours["accuracy"] == expected["accuracy"] and ours["std"] == expected["std"]
    assert ours["val"] == expected["val"] and ours["far"] == expected["far"]
    assert ours["fold_accuracy"] == expected["fold_accuracy"].tolist()
    assert "4-fold accuracy %.5f +- %.5f" % (expected["accuracy"], expected["std"]) in out
    report = roc.evaluate_pairs(genuine, feat_a=data["feature"].astype(np.float32),
                                feat_b=data["feature"].astype(np.float32), index_a=rows_a,
                                index_b=rows_b, fars=(0.01, 0.1))
    assert [row["tar"] for row in summary["tar_at_far"]] == [r.tar for r in report.tar_at_far]
    assert summary["inputs"]["protocol"] == "LFW pairs.txt"


def test_image_paths_match_on_name_and_file(in_tmp, rng, capsys):
    """Paths below any root (or none) name the same image."""
    results = []
    for prefix in ("", "lfw/", "/data/lfw-deepfunneled/"):
        write_lfw(in_tmp, np.random.default_rng(5), prefix=prefix)
        status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz",
                                                "--json", "out.json"], capsys)
        assert status == 0, err
        results.append(read_json("out.json")["verification"])
    assert results[0] == results[1] == results[2]


def test_non_finite_features_leave_out_the_accuracy(in_tmp, rng, capsys):
    """A pair's image with a non-finite feature: InsightFace's protocol has no
    score for the pair, so the accuracy is left out with a warning (an error
    with --strict); TAR@FAR excludes the pairs, as for every pair list."""
    write_lfw(in_tmp, rng)
    data = dict(np.load("features.npz"))
    first_image = lfw.read_pairs("pairs.txt").path_a[0]
    row = [p.endswith(first_image) for p in data["path"]].index(True)
    data["feature"][row, 0] = np.inf
    np.savez("features.npz", **data)
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz"], capsys)
    assert status == 0, err
    assert "fold accuracy" not in out and "TAR" in out
    assert "the 3-fold accuracy is not computed: 1 image(s) of the pairs have non-finite " \
           "features (rows %d)" % row in err
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz", "--strict"],
                            capsys)
    assert status == 1 and "not computed" in one_line(err, "ext-roc")


@pytest.mark.parametrize("text, message", [
    ("2 1\nA 1 2\nA 1 B 2\nC 1 2\n", "pairs.txt: its first line announces 2 sets of 1 matched "
                                     "and 1 mismatched pairs (4 lines), but 3 pair lines follow"),
    ("1 1\nA 1 B 2\nA 1 2\n", "pairs.txt line 2: set 1 expects a matched pair here "
                              "(name n1 n2), got 'A 1 B 2'"),
    ("1 1\nA 1 2\nA 1 2\n", "pairs.txt line 3: set 1 expects a mismatched pair here "
                            "(name1 n1 name2 n2), got 'A 1 2'"),
    ("1 1\nA 0 2\nA 1 B 2\n", "pairs.txt line 2: an image number must be a positive integer, "
                              "got '0'"),
    ("1 1\nA x 2\nA 1 B 2\n", "pairs.txt line 2: an image number must be a positive integer, "
                              "got 'x'"),
    ("0 1\n", "pairs.txt line 1: the number of sets must be a positive integer, got '0'"),
    ("1 1\nA 1 2\nA 1 Zed 2\n", "pairs.txt line 3: image Zed/Zed_0002.jpg is not in "
                                "features.npz (its `path` array)"),
])
def test_unusable_lfw_lines_are_named(in_tmp, capsys, text, message):
    np.savez("features.npz", feature=np.eye(4, 3),
             path=np.array(["A/A_0001.jpg", "A/A_0002.jpg", "B/B_0002.jpg", "C/C_0001.jpg"]))
    (in_tmp / "pairs.txt").write_text(text)
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz"], capsys)
    assert status == 1
    assert one_line(err, "ext-roc") == "ext-roc: " + message


@pytest.mark.parametrize("arrays, extra, message", [
    (dict(feature=np.eye(3), id=np.arange(3)), [],
     "features.npz has no 'path' array (it has: feature, id); LFW's pairs name images: store "
     "each feature row's image path (name/name_0001.jpg) as `path`"),
    (dict(feature=np.eye(3), path=np.arange(3)), [],
     "features.npz: path must be (N,) strings (the images' paths), got int64 (3,)"),
    (dict(feature=np.eye(3), path=np.array(["x/A/A_0001.jpg", "A/A_0001.jpg", "B/B_0001.jpg"])),
     [], "features.npz: image A/A_0001.jpg appears twice (rows 0 and 1)"),
    (dict(feature=np.eye(3), path=np.array(["A/A_0001.jpg", "A/A_0002.jpg", "B/B_0001.jpg"])),
     ["--templates"], "--templates builds IJB templates; pairs.txt is LFW's pairs.txt"),
])
def test_unusable_lfw_features(in_tmp, capsys, arrays, extra, message):
    np.savez("features.npz", **arrays)
    (in_tmp / "pairs.txt").write_text("1 1\nA 1 2\nA 1 B 1\n")
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz"] + extra,
                            capsys)
    assert status == 1
    assert one_line(err, "ext-roc") == "ext-roc: " + message
