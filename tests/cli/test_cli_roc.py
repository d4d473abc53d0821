"""ext-roc on two sets and on one set: the conventions of the command line
(--same-set, --far-rule, --mode, --far given once or repeated, one set given as
both query and gallery), the reports it writes (--json, --curve) against
scikit-learn, and feature rows it cannot score."""

import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

import _ext
from _ext import roc
from _ext.tools import roc as roc_tool
from cli_common import call, in_tmp, read_json, write_sets  # noqa: F401  (in_tmp: a fixture)


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def strict_json(path):
    """The file parsed as strict JSON: NaN or Infinity would raise."""
    def refuse(constant):
        raise ValueError("not JSON: %s" % constant)
    with open(path) as f:
        return json.loads(f.read(), parse_constant=refuse)


def insightface_tar(genuine, score, far):
    """InsightFace's IJB rule on scikit-learn's curve."""
    fpr, tpr, _ = sk_roc_curve(genuine, score)
    fpr, tpr = np.flipud(fpr), np.flipud(tpr)
    _, index = min(zip(np.abs(fpr - far), range(len(fpr))))
    return tpr[index]


def test_two_sets_json_against_sklearn(in_tmp, rng, capsys):
    query, labels_q, gallery, labels_g = write_sets(in_tmp, rng)
    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz", "--json", "r.json",
                                            "--far", "1e-3", "1e-2", "0.1"], capsys)
    assert status == 0, err
    summary = strict_json("r.json")
    y_true = (labels_q[:, None] == labels_g[None, :]).ravel()
    score = (unit(query.astype(np.float64)) @ unit(gallery.astype(np.float64)).T).ravel()
    assert summary["auc"] == pytest.approx(roc_auc_score(y_true, score), abs=1e-6)
    assert (summary["n_genuine"], summary["n_impostor"]) == (y_true.sum(), (~y_true).sum())
    assert [row["far"] for row in summary["tar_at_far"]] == [1e-3, 1e-2, 0.1]
    assert summary["inputs"] == {"query": "query.npz", "gallery": "gallery.npz"}
    assert summary["options"]["same_set"] is False and summary["options"]["fars"] == [
        1e-3, 1e-2, 0.1]
    assert summary["world_size"] == 1 and summary["device"] == "cpu"
    assert set(summary["timing"]) == {"load_s", "evaluate_s", "passes"}
    assert summary["timing"]["passes"] == 1
    assert summary["warnings"] == []
    assert summary["version"] == _ext.__version__ and summary["label"] is None
    assert "false accepts" in out and "AUC" in out and "saved r.json" in out


@pytest.mark.parametrize("far,expected", [
    (["--far", "0.01"], [0.01]),
    (["--far=0.01"], [0.01]),
    (["--far", "1e-3", "--far", "0.01", "0.1"], [1e-3, 0.01, 0.1]),   # repeated: every one
    (["--far=0.1", "--far=1e-3"], [0.1, 1e-3]),
])
def test_far_targets(in_tmp, rng, capsys, far, expected):
    write_sets(in_tmp, rng)
    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz", "--json", "r.json",
                                            *far], capsys)
    assert status == 0, err
    summary = read_json("r.json")
    assert [row["far"] for row in summary["tar_at_far"]] == expected
    assert summary["options"]["fars"] == expected


def test_eer_rule_and_max_fpr(in_tmp, rng, capsys):
    """--eer-rule and --max-fpr reach the report: the JSON's EER and partial
    AUC are roc.evaluate's with the same options, and the partial AUC
    scikit-learn's roc_auc_score(max_fpr=)."""
    query, labels_q, gallery, labels_g = write_sets(in_tmp, rng)
    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz", "--json", "r.json",
                                            "--eer-rule", "nearest_mean", "--max-fpr", "0.25"],
                            capsys)
    assert status == 0, err
    summary = strict_json("r.json")
    want = roc.evaluate(labels_q, labels_g, feat_q=query, feat_g=gallery,
                        eer_rule="nearest_mean", max_fpr=0.25)
    assert (summary["eer"], summary["eer_rule"]) == (want.eer, "nearest_mean")
    assert (summary["partial_auc"], summary["max_fpr"]) == (want.partial_auc, 0.25)
    y_true = (labels_q[:, None] == labels_g[None, :]).ravel()
    score = (unit(query.astype(np.float64)) @ unit(gallery.astype(np.float64)).T).ravel()
    assert summary["partial_auc"] == pytest.approx(roc_auc_score(y_true, score, max_fpr=0.25),
                                                   abs=1e-6)
    assert summary["options"]["eer_rule"] == "nearest_mean"
    assert summary["options"]["max_fpr"] == 0.25


@pytest.mark.parametrize("argv, message", [
    (["--max-fpr", "0"], "a max FPR lies in (0, 1]"),
    (["--max-fpr", "1.5"], "a max FPR lies in (0, 1]"),
    (["--max-fpr", "x"], "not a number"),
    (["--eer-rule", "mean"], "invalid choice"),
])
def test_bad_eer_rule_or_max_fpr_is_refused(in_tmp, rng, capsys, argv, message):
    write_sets(in_tmp, rng)
    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz", *argv], capsys)
    assert status == 2 and message in err


@pytest.mark.parametrize("gallery,how", [("query.npz", "the same file"),
                                         ("copy.npz", "equal features and labels")])
def test_one_set_as_query_and_gallery_is_warned(in_tmp, rng, capsys, gallery, how):
    """Its self-pairs would count as genuine pairs: the warning gives the fix,
    the JSON keeps it, --strict refuses."""
    write_sets(in_tmp, rng)
    with open("query.npz", "rb") as f, open("copy.npz", "wb") as copy:
        copy.write(f.read())
    status, out, err = call(roc_tool.main, ["query.npz", gallery, "--json", "r.json"], capsys)
    assert status == 0, err
    warning = ("query.npz and %s are one set (%s): each entry paired with itself counts as a "
               "genuine pair, and every other pair twice; for the pairs of one set, give it "
               "once: ext-roc query.npz --same-set" % (gallery, how))
    assert err.splitlines() == ["ext-roc: warning: " + warning]
    assert read_json("r.json")["warnings"] == [warning]
    status, out, err = call(roc_tool.main, ["query.npz", gallery, "--strict"], capsys)
    assert status == 1 and out == ""
    assert err == "ext-roc: query.npz and %s are one set (%s) (--strict)\n" % (gallery, how)


@pytest.mark.parametrize("argv,pairs", [
    (["set.npz", "--same-set"], "unordered"),
    (["--same-set", "set.npz"], "unordered"),
    (["set.npz", "--same-set", "unordered"], "unordered"),
    (["--same-set", "ordered", "set.npz"], "ordered"),
])
def test_same_set_conventions(in_tmp, rng, capsys, argv, pairs):
    feature = rng.normal(size=(70, 8)).astype(np.float32)
    label = rng.integers(0, 9, 70)
    np.savez("set.npz", feature=feature, label=label)
    status, out, err = call(roc_tool.main, argv + ["--json", "r.json"], capsys)
    assert status == 0, err
    summary = read_json("r.json")
    i, j = np.triu_indices(70, 1)
    y_true = label[i] == label[j]
    score = (unit(feature.astype(np.float64)) @ unit(feature.astype(np.float64)).T)[i, j]
    times = 2 if pairs == "ordered" else 1
    assert summary["pairs"] == pairs and summary["options"]["same_set"] == pairs
    assert summary["n_genuine"] == times * y_true.sum()
    assert summary["n_impostor"] == times * (~y_true).sum()
    assert summary["auc"] == pytest.approx(roc_auc_score(y_true, score), abs=1e-6)
    assert "{:,} pairs".format(times * i.size) in out


def test_nearest_sklearn_rule_and_curve_mode_equal_sklearn(in_tmp, rng, capsys):
    query, labels_q, gallery, labels_g = write_sets(in_tmp, rng)
    fars = [1e-3, 1e-2, 0.05, 0.2]
    status, out, err = call(roc_tool.main, [
        "query.npz", "gallery.npz", "--mode", "curve", "--far-rule", "nearest_sklearn",
        "--curve", "c.npz", "--json", "r.json", "--label", "mine",
        "--far", *map(str, fars)], capsys)
    assert status == 0, err
    # the scores the tool computes: fp32 cosine, as roc.pair_scores gives them
    score = roc.pair_scores(query, gallery).ravel().astype(np.float64)
    y_true = (labels_q[:, None] == labels_g[None, :]).ravel()
    fpr, tpr, thresholds = sk_roc_curve(y_true, score)
    with np.load("c.npz", allow_pickle=False) as curve:
        np.testing.assert_array_equal(curve["fpr"], fpr)
        np.testing.assert_array_equal(curve["tpr"], tpr)
        np.testing.assert_array_equal(curve["thresholds"][1:], thresholds[1:])
        np.testing.assert_array_equal(curve["far"], fars)
        np.testing.assert_array_equal(curve["tar"],
                                      [insightface_tar(y_true, score, f) for f in fars])
        assert float(curve["auc"]) == pytest.approx(roc_auc_score(y_true, score), abs=1e-12)
        assert str(curve["label"]) == "mine" and str(curve["mode"]) == "curve"
        assert int(curve["n_genuine"]) == y_true.sum()
        assert curve["far_below_resolution"].dtype == bool
    summary = read_json("r.json")
    assert summary["far_rule"] == "nearest_sklearn" and summary["mode"] == "curve"
    assert [row["tar"] for row in summary["tar_at_far"]] == [
        insightface_tar(y_true, score, f) for f in fars]


def test_binned_mode_counts(in_tmp, rng, capsys):
    query, labels_q, gallery, labels_g = write_sets(in_tmp, rng)
    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz", "--mode", "binned",
                                            "--bins", "50", "--range", "-1", "1",
                                            "--curve", "c.npz"], capsys)
    assert status == 0, err
    score = roc.pair_scores(query, gallery)
    genuine = labels_q[:, None] == labels_g[None, :]
    with np.load("c.npz") as curve:
        edges = curve["counts_edges"]
        np.testing.assert_array_equal(curve["counts_genuine"],
                                      np.histogram(score[genuine], edges)[0])
        np.testing.assert_array_equal(curve["counts_impostor"],
                                      np.histogram(score[~genuine], edges)[0])
        assert str(curve["mode"]) == "binned"


def test_below_resolution_and_non_finite_numbers_in_json(in_tmp, capsys):
    # the top score is an impostor's: at FAR 0 no genuine pair is accepted, and
    # the threshold that accepts none is +inf (null in JSON)
    feature = np.array([[1, 0], [1, 0.01], [0, 1], [0.2, 1], [1, 1]], np.float32)
    np.savez("q.npz", feature=feature[:2], label=[0, 1])
    np.savez("g.npz", feature=feature[2:], label=[0, 1, 2])
    status, out, err = call(roc_tool.main, ["q.npz", "g.npz", "--json", "r.json",
                                            "--far", "0", "1e-3", "0.5"], capsys)
    assert status == 0, err
    rows = strict_json("r.json")["tar_at_far"]
    assert [row["below_resolution"] for row in rows] == [False, True, False]
    assert rows[0]["tar"] == 0.0 and rows[0]["threshold"] is None
    assert "1e-03*" in out and "* below 1 / 4 impostor pairs" in out


def test_unusable_feature_rows_warn_or_fail(in_tmp, rng, capsys):
    query, labels_q, gallery, labels_g = write_sets(in_tmp, rng)
    bad_q, bad_g = [3, 7, 11, 20, 31, 40], [5]
    query[[3, 20]] = 0
    query[7, 1] = np.nan
    query[[11, 31, 40], 0] = np.inf
    gallery[5, 4] = -np.inf
    np.savez("query.npz", feature=query, label=labels_q)
    np.savez("gallery.npz", feature=gallery, label=labels_g)
    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz", "--json", "r.json",
                                            "--similarity", "dot"], capsys)
    assert status == 0, err
    assert err.splitlines() == [
        "ext-roc: warning: query.npz: 6 of 90 feature rows are non-finite or all zero "
        "(rows 3, 7, 11, 20, 31, ...): their pairs are excluded (counted as NaN scores)",
        "ext-roc: warning: gallery.npz: 1 of 110 feature rows are non-finite or all zero "
        "(rows 5): their pairs are excluded (counted as NaN scores)"]
    summary = read_json("r.json")
    n_nan = len(bad_q) * 110 + len(bad_g) * 90 - len(bad_q) * len(bad_g)
    assert summary["n_nan"] == n_nan
    assert summary["n_genuine"] + summary["n_impostor"] == 90 * 110 - n_nan
    assert len(summary["warnings"]) == 2
    good_q, good_g = np.delete(np.arange(90), bad_q), np.delete(np.arange(110), bad_g)
    y_true = (labels_q[good_q, None] == labels_g[None, good_g]).ravel()
    score = (query[good_q].astype(np.float64) @ gallery[good_g].astype(np.float64).T).ravel()
    assert summary["auc"] == pytest.approx(roc_auc_score(y_true, score), abs=1e-6)

    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz", "--strict"], capsys)
    assert status == 1 and out == ""
    assert err == ("ext-roc: query.npz: 6 of 90 feature rows are non-finite or all zero "
                   "(rows 3, 7, 11, 20, 31, ...) (--strict)\n")


def test_demo_data_set(in_tmp, capsys):
    status, out, err = call(roc_tool.main, ["--json", "r.json", "--mode", "binned"], capsys)
    assert status == 0, err
    summary = read_json("r.json")
    assert (summary["n_genuine"], summary["n_impostor"]) == (12000, 11988000)
    assert "demo" in summary["inputs"]


@pytest.mark.gpu
@pytest.mark.parametrize("argv", [["query.npz", "gallery.npz"], ["gallery.npz", "--same-set"]])
def test_gpu_reports_what_the_cpu_does(in_tmp, rng, capsys, argv):
    write_sets(in_tmp, rng, n_query=1500, n_gallery=1200, dim=64)
    summaries = []
    for device in ("cpu", "cuda"):
        status, out, err = call(roc_tool.main, argv + ["--device", device, "--json", "r.json",
                                                       "--far", "1e-4", "1e-3", "0.01"], capsys)
        assert status == 0, err
        summary = read_json("r.json")
        assert summary["device"] == ("cpu" if device == "cpu" else "cuda:0")
        for key in ("device", "device_bytes_peak", "timing"):
            summary.pop(key)
        summaries.append(summary)
    assert summaries[0] == summaries[1]
