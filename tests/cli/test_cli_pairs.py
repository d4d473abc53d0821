"""ext-roc --pairs: pair lists of image ids, and IJB-style template lists
(--templates) built from image features as InsightFace's image2template_feature
builds them, against scikit-learn on the same pairs; and the lines it cannot
use. InsightFace's flip and detector-score settings: test_cli_ijb.py."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from _ext import roc
from _ext.tools import embeddings, templates
from _ext.tools import roc as roc_tool
from cli_common import call, in_tmp, one_line, read_json, without_run_details  # noqa: F401

FARS = [1e-2, 0.05, 0.1, 0.3]


def insightface_templates(feature, templates, medias):
    """InsightFace's image2template_feature, loop for loop: the mean feature of
    each media of a template, summed, then L2-normalised (float64)."""
    unique = np.unique(templates)
    out = np.zeros((unique.size, feature.shape[1]))
    for k, template in enumerate(unique):
        in_template = np.flatnonzero(templates == template)
        media_means = [feature[in_template[medias[in_template] == m]].mean(axis=0)
                       for m in np.unique(medias[in_template])]
        out[k] = np.sum(media_means, axis=0)
    return unique, out / np.linalg.norm(out, axis=1, keepdims=True)


def insightface_tar(genuine, score, far):
    fpr, tpr, _ = sk_roc_curve(genuine, score)
    fpr, tpr = np.flipud(fpr), np.flipud(tpr)
    _, index = min(zip(np.abs(fpr - far), range(len(fpr))))
    return tpr[index]


def write_ijb(directory, rng, n_subjects=12, templates_per_subject=5, dim=16):
    """IJB-style files: image features (features.npz, with template and media
    arrays too), the template/media list (tid_mid.txt) and a template pair list
    (pairs.txt). Template ids are scattered, media ids repeat across templates."""
    centres = rng.normal(size=(n_subjects, dim))
    rows, template_ids = [], rng.choice(np.arange(1000, 9000), n_subjects * templates_per_subject,
                                        replace=False)
    subject_of = {}
    for k, template in enumerate(template_ids):
        subject = k % n_subjects
        subject_of[template] = subject
        for media in rng.choice(50, rng.integers(1, 4), replace=False):
            offset = rng.normal(scale=0.8, size=dim)   # a video's look
            for _ in range(rng.integers(1, 4)):
                rows.append((template, media, centres[subject] + offset
                             + rng.normal(scale=1.2, size=dim)))
    template = np.array([r[0] for r in rows])
    media = np.array([r[1] for r in rows])
    feature = np.array([r[2] for r in rows]) * rng.uniform(0.5, 3, (len(rows), 1))
    np.savez(directory / "features.npz", feature=feature.astype(np.float32),
             template=template, media=media)
    with open(directory / "tid_mid.txt", "w") as f:
        for i in range(len(rows)):
            f.write("img/%d.jpg %d %d\n" % (i, template[i], media[i]))
    a = rng.choice(template_ids, 700)
    b = rng.choice(template_ids, 700)
    same = np.array([subject_of[x] == subject_of[y] for x, y in zip(a, b)])
    np.savetxt(directory / "pairs.txt", np.stack([a, b, same.astype(int)], 1), fmt="%d")
    return feature.astype(np.float32), template, media, a, b, same


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "face scores"])
def test_template_features_as_insightface_builds_them(rng, scaled):
    feature = (rng.normal(size=(60, 5)) * rng.uniform(0.5, 3, (60, 1))).astype(np.float32)
    template, media = rng.integers(0, 7, 60), rng.integers(0, 4, 60)
    face_score = rng.uniform(0, 1, 60).astype(np.float32) if scaled else None
    ids, ours = templates.template_features(feature, template, media, face_score)
    scaled_feature = feature * face_score[:, None] if scaled else feature
    expected_ids, expected = insightface_templates(scaled_feature.astype(np.float64), template,
                                                   media)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("source", ["file", "arrays"])
def test_ijb_templates_against_sklearn(in_tmp, rng, capsys, source):
    feature, template, media, a, b, same = write_ijb(in_tmp, rng)
    templates = ["--templates", "tid_mid.txt"] if source == "file" else ["--templates"]
    status, out, err = call(roc_tool.main, [
        "--pairs", "pairs.txt", *templates, "features.npz", "--far-rule", "nearest_sklearn",
        "--mode", "curve", "--json", "r.json", "--far", *map(str, FARS)], capsys)
    assert status == 0, err
    ids, template_feature = insightface_templates(feature.astype(np.float64), template, media)
    row = {t: i for i, t in enumerate(ids)}
    ia, ib = [row[t] for t in a], [row[t] for t in b]
    score = np.sum(template_feature[ia] * template_feature[ib], axis=1)
    summary = read_json("r.json")
    assert summary["pairs"] == "list"
    assert (summary["n_genuine"], summary["n_impostor"]) == (same.sum(), (~same).sum())
    assert summary["auc"] == pytest.approx(roc_auc_score(same, score), abs=1e-6)
    # float32 scores may order a near tie otherwise than float64: one pair at most
    for row, far in zip(summary["tar_at_far"], FARS):
        assert row["tar"] == pytest.approx(insightface_tar(same, score, far),
                                           abs=1.0 / same.sum() + 1e-12)
    assert summary["inputs"]["templates"] == ("tid_mid.txt" if source == "file"
                                              else "features.npz")


def test_template_sources_agree(in_tmp, rng, capsys):
    write_ijb(in_tmp, rng)
    summaries = []
    for templates in (["--templates", "tid_mid.txt"], ["--templates"]):
        status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz",
                                                *templates, "--json", "r.json"], capsys)
        assert status == 0, err
        summary = without_run_details(read_json("r.json"))
        summary.pop("inputs")
        summaries.append(summary)
    assert summaries[0] == summaries[1]


def test_image_pairs_equal_sklearn_exactly(in_tmp, rng, capsys):
    feature = rng.normal(size=(80, 10)).astype(np.float32)
    ids = rng.choice(10**9, 80, replace=False)
    subject = rng.integers(0, 8, 80)
    np.savez("features.npz", feature=feature, id=ids)
    ia, ib = rng.integers(0, 80, 900), rng.integers(0, 80, 900)
    genuine = subject[ia] == subject[ib]
    np.savetxt("pairs.txt", np.stack([ids[ia], ids[ib], genuine], 1), fmt="%d")
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz",
                                            "--mode", "curve", "--curve", "c.npz"], capsys)
    assert status == 0, err
    score = roc.pair_scores(feature, feature)[ia, ib].astype(np.float64)
    fpr, tpr, _ = sk_roc_curve(genuine, score)
    with np.load("c.npz") as curve:
        np.testing.assert_array_equal(curve["fpr"], fpr)
        np.testing.assert_array_equal(curve["tpr"], tpr)
        assert float(curve["auc"]) == pytest.approx(roc_auc_score(genuine, score), abs=1e-12)
        assert str(curve["pairs"]) == "list"


@pytest.fixture
def image_ids(in_tmp):
    np.savez("features.npz", feature=np.eye(4, dtype=np.float32) + 0.1,
             id=np.array([10, 20, 30, 40]))
    return in_tmp


@pytest.mark.parametrize("text,message", [
    ("10 20 1\n\n20 30 0\n30 99 0\n", "p.txt line 4: id 99 is not in features.npz"),
    ("77 20 1\n", "p.txt line 1: id 77 is not in features.npz"),
    ("10 20 1\n20 30\n", "p.txt line 2: expected 'id_a id_b label' (three integers), got "
                         "'20 30'"),
    ("10 20 1\n\n\n20 30 0 1\n", "p.txt line 4: expected 'id_a id_b label' (three integers), "
                                 "got '20 30 0 1'"),
    ("10 20 1\n20 x 0\n", "p.txt line 2: expected 'id_a id_b label' (three integers), got "
                          "'20 x 0'"),
    ("10 20 1.0\n", "p.txt line 1: expected 'id_a id_b label' (three integers), got "
                    "'10 20 1.0'"),
    ("# template pairs\n10 20 1\n", "p.txt line 1: expected 'id_a id_b label' (three "
                                    "integers), got '# template pairs'"),
    ("10 20 1\n\n20 30 2\n", "p.txt line 3: the label must be 1 (genuine) or 0 (impostor), "
                             "got 2"),
    ("", "p.txt holds no lines"),
    ("\n\n", "p.txt holds no lines"),
])
def test_unusable_pair_lists_name_the_line(image_ids, capsys, text, message):
    with open("p.txt", "w") as f:
        f.write(text)
    status, out, err = call(roc_tool.main, ["--pairs", "p.txt", "features.npz"], capsys)
    assert status == 1
    assert one_line(err, "ext-roc") == "ext-roc: " + message


@pytest.mark.parametrize("arrays,templates,message", [
    (dict(feature=np.ones((3, 2)), id=[5, 6, 5]), [], "features.npz: id 5 appears twice "
                                                     "(rows 0 and 2)"),
    (dict(feature=np.ones((3, 2)), id=[5.5, 6, 7]), [], "features.npz: id must be integers, "
                                                       "got float64"),
    (dict(feature=np.ones((3, 2)), label=[1, 2, 3]), [],
     "features.npz has no 'id' array (it has: feature, label); a pair list needs the id of "
     "each feature row (or --templates for IJB template ids)"),
    (dict(feature=np.ones((3, 2)), template=[1, 1, 2]), ["--templates"],
     "features.npz has no 'media' array (it has: feature, template); give --templates "
     "TID_MID_FILE, or store them"),
    (dict(feature=np.ones((3, 2))), ["--templates", "tm.txt"],
     "tm.txt has 2 lines but features.npz has 3 feature rows (one line per row)"),
    (dict(feature=np.ones((2, 2))), ["--templates", "bad_tm.txt"],
     "bad_tm.txt line 2: expected 'image_name template_id media_id' (ids are integers), got "
     "'b.jpg 1'"),
    (dict(feature=np.ones((2, 2))), ["--templates", "long_tm.txt"],
     "long_tm.txt line 1: expected 'image_name template_id media_id' (ids are integers), got "
     "'a b.jpg 1 1'"),
])
def test_unusable_features_for_pairs(in_tmp, capsys, arrays, templates, message):
    np.savez("features.npz", **arrays)
    with open("pairs.txt", "w") as f:
        f.write("5 6 1\n")
    with open("tm.txt", "w") as f:
        f.write("a.jpg 1 1\nb.jpg 1 2\n")
    with open("bad_tm.txt", "w") as f:
        f.write("a.jpg 1 1\nb.jpg 1\n")
    with open("long_tm.txt", "w") as f:
        f.write("a b.jpg 1 1\nb.jpg 1 2\n")
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz",
                                            *templates], capsys)
    assert status == 1
    assert one_line(err, "ext-roc") == "ext-roc: " + message


def test_unusable_images_and_empty_templates(in_tmp, rng, capsys):
    feature, template, media, a, b, same = write_ijb(in_tmp, rng)
    first = np.flatnonzero(template == template[0])       # every image of one template
    other = np.flatnonzero(template != template[0])[[3, 8]]
    feature[first] = 0
    feature[other[0], 2] = np.nan
    feature[other[1], 0] = np.inf
    np.savez("features.npz", feature=feature, template=template, media=media)
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz",
                                            "--templates", "--json", "r.json"], capsys)
    assert status == 0, err
    bad = np.sort(np.r_[first, other])
    assert err.splitlines() == [
        "ext-roc: warning: features.npz: %d of %d image feature rows are non-finite or all "
        "zero (rows %s): left out of their templates"
        % (bad.size, template.size, embeddings.rows_text(bad)),
        "ext-roc: warning: features.npz: 1 of 60 templates have no usable image feature "
        "(template ids %d): their pairs are excluded (counted as NaN scores)" % template[0],
        "ext-roc: " + roc_tool.PUBLISHED_IJB_NOTE]
    summary = read_json("r.json")
    lost = (a == template[0]) | (b == template[0])
    assert summary["n_nan"] == lost.sum()
    assert summary["n_genuine"] == (same & ~lost).sum()
    keep = np.ones(template.size, bool)
    keep[bad] = False
    ids, template_feature = insightface_templates(feature[keep].astype(np.float64),
                                                  template[keep], media[keep])
    row = {t: i for i, t in enumerate(ids)}
    score = [template_feature[row[x]] @ template_feature[row[y]] for x, y in
             zip(a[~lost], b[~lost])]
    assert summary["auc"] == pytest.approx(roc_auc_score(same[~lost], score), abs=1e-6)

    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz",
                                            "--templates", "--strict"], capsys)
    assert status == 1
    assert one_line(err, "ext-roc").endswith("image feature rows are non-finite or all zero "
                                             "(rows %s) (--strict)" % embeddings.rows_text(bad))


@pytest.mark.parametrize("spread", [100, 10**15], ids=["table", "search"])
def test_id_rows_lookups(rng, spread):
    ids = rng.choice(spread, 50, replace=False) - (0 if spread == 100 else spread // 2)
    wanted = np.r_[ids[rng.integers(0, 50, 200)], -1, -(10**16), 10**16, spread + 5]
    expected = [int(np.flatnonzero(ids == x)[0]) if x in ids else -1 for x in wanted]
    id_rows = embeddings.IdRows("f.npz", ids)
    assert (id_rows.table is not None) == (spread == 100)
    np.testing.assert_array_equal(id_rows.rows(wanted), expected)


def test_read_pairs_returns_the_table(in_tmp, rng):
    table = np.stack([rng.integers(-10**12, 10**12, 20_000), rng.integers(0, 10**6, 20_000),
                      rng.integers(0, 2, 20_000)], 1)
    np.savetxt("pairs.txt", table, fmt="%d", delimiter="\t")
    id_a, id_b, genuine = embeddings.read_pairs("pairs.txt")
    np.testing.assert_array_equal(np.stack([id_a, id_b, genuine], 1), table)
    assert id_a.dtype == np.int64 and genuine.dtype == bool
