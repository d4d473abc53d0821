"""ext-roc --templates with InsightFace's IJB settings: flip fusion (--flip)
and detector-score weighting (--face-scores), against a reference written
from InsightFace's IJB evaluation (ijb_11.py, arcface_torch/eval_ijbc.py) and
scikit-learn on the same pairs; and the inputs those options cannot use."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from _ext.tools import roc as roc_tool
from _ext.tools import templates
from cli_common import call, in_tmp, one_line, read_json  # noqa: F401  (in_tmp: a fixture)
from test_cli_pairs import insightface_tar, insightface_templates, write_ijb

FARS = [1e-2, 0.05, 0.1, 0.3]


def insightface_image_features(img_feats, faceness_scores, flip):
    """InsightFace's image features before templates: img_feats (N, 2D), each
    row [image | flipped copy]; F2 sums the halves, F1 keeps both, F0 the
    first; N1 keeps the norms; D1 multiplies by the detector score (float32
    arrays, as their scripts hold them)."""
    half = img_feats.shape[1] // 2
    if flip == "add":
        img_input_feats = img_feats[:, 0:half] + img_feats[:, half:]
    elif flip == "concat":
        img_input_feats = img_feats
    else:
        img_input_feats = img_feats[:, 0:half]
    if faceness_scores is not None:
        img_input_feats = img_input_feats * faceness_scores[:, np.newaxis]
    return img_input_feats


def insightface_scores(img_input_feats, template, media, a, b):
    """Their image2template_feature, then verification: the dot products of
    the L2-normalised template features of each pair (float64)."""
    ids, template_feats = insightface_templates(img_input_feats.astype(np.float64), template,
                                                media)
    row = {t: i for i, t in enumerate(ids)}
    return np.array([template_feats[row[x]] @ template_feats[row[y]] for x, y in zip(a, b)])


@pytest.fixture
def ijb(in_tmp, rng):
    """IJB-style files with flipped copies and detector scores: features.npz
    holds `feature` (N, 2D) as InsightFace stores it, image_halves.npz the two
    halves apart (`feature`, `feature_flip`) with `template`, `media` and
    `face_score` arrays, name_5pts_score.txt the scores as InsightFace's list
    holds them (tid_mid.txt and pairs.txt as test_cli_pairs writes them)."""
    feature, template, media, a, b, same = write_ijb(in_tmp, rng)
    flipped = (feature + rng.normal(scale=0.6, size=feature.shape)).astype(np.float32)
    img_feats = np.concatenate([feature, flipped], axis=1)
    faceness = rng.uniform(0.2, 1.0, feature.shape[0]).astype(np.float32)
    faceness[3] = 0   # counts in its media's mean, as a zero feature
    np.savez("features.npz", feature=img_feats)
    np.savez("image_halves.npz", feature=feature, feature_flip=flipped, template=template,
             media=media, face_score=faceness)
    with open("name_5pts_score.txt", "w") as f:
        for i, score in enumerate(faceness):
            landmarks = " ".join("%.2f" % v for v in rng.uniform(30, 90, 10))
            f.write("img/%d.jpg %s %s\n" % (i, landmarks, score))
    return img_feats, faceness, template, media, a, b, same


@pytest.mark.parametrize("source", ["lists", "arrays"])
@pytest.mark.parametrize("flip", templates.FLIP_MODES)
def test_insightface_settings_against_their_pipeline(ijb, capsys, flip, source):
    img_feats, faceness, template, media, a, b, same = ijb
    if source == "lists":
        inputs = ["features.npz", "--templates", "tid_mid.txt", "--face-scores",
                  "name_5pts_score.txt"]
    else:
        inputs = ["image_halves.npz", "--templates", "--face-scores"]
    status, out, err = call(roc_tool.main, [
        "--pairs", "pairs.txt", *inputs, "--flip", flip, "--far-rule", "nearest_sklearn",
        "--mode", "curve", "--json", "r.json", "--far", *map(str, FARS)], capsys)
    assert status == 0, err
    assert "note:" not in err
    score = insightface_scores(insightface_image_features(img_feats, faceness, flip), template,
                               media, a, b)
    plain = insightface_scores(img_feats[:, :img_feats.shape[1] // 2], template, media, a, b)
    assert abs(roc_auc_score(same, score) - roc_auc_score(same, plain)) > 1e-3   # they matter
    summary = read_json("r.json")
    assert summary["auc"] == pytest.approx(roc_auc_score(same, score), abs=1e-6)
    # float32 scores may order a near tie otherwise than float64: one pair at most
    for row, far in zip(summary["tar_at_far"], FARS):
        assert row["tar"] == pytest.approx(insightface_tar(same, score, far),
                                           abs=1.0 / same.sum() + 1e-12)
    assert summary["options"]["flip"] == flip and summary["options"]["face_scores"] is True
    assert summary["inputs"]["face_scores"] == ("name_5pts_score.txt" if source == "lists"
                                                else "image_halves.npz")


def test_flip_fusion_of_image_pairs(in_tmp, rng, capsys):
    """--flip for a list of image pairs (LFW-style ids): the fused features scored."""
    feature = rng.normal(size=(40, 6)).astype(np.float32)
    flipped = (feature + rng.normal(scale=0.5, size=feature.shape)).astype(np.float32)
    np.savez("features.npz", feature=feature, feature_flip=flipped, id=np.arange(100, 140))
    ia, ib = rng.integers(0, 40, 300), rng.integers(0, 40, 300)
    genuine = rng.random(300) < 0.3
    np.savetxt("pairs.txt", np.stack([ia + 100, ib + 100, genuine], 1), fmt="%d")
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "features.npz", "--flip",
                                            "add", "--json", "r.json"], capsys)
    assert status == 0, err
    fused = (feature + flipped).astype(np.float64)
    fused /= np.linalg.norm(fused, axis=1, keepdims=True)
    score = np.sum(fused[ia] * fused[ib], axis=1)
    assert read_json("r.json")["auc"] == pytest.approx(roc_auc_score(genuine, score), abs=1e-6)


def test_templates_without_the_settings_say_what_published_tables_use(ijb, capsys):
    status, out, err = call(roc_tool.main, ["--pairs", "pairs.txt", "image_halves.npz",
                                            "--templates"], capsys)
    assert status == 0, err
    assert err.splitlines() == ["ext-roc: " + roc_tool.PUBLISHED_IJB_NOTE]
    assert "--flip add --face-scores" in roc_tool.PUBLISHED_IJB_NOTE


@pytest.mark.parametrize("argv,message", [
    (["--pairs", "pairs.txt", "odd.npz", "--templates", "tid_mid.txt", "--flip", "add"],
     "odd.npz: without a feature_flip array, each feature row is read as [image | flipped "
     "copy], so its length must be even, got 5"),
    (["--pairs", "pairs.txt", "short_flip.npz", "--templates", "--flip", "concat"],
     "short_flip.npz: feature_flip must be (3, 2) as feature is, got (2, 2)"),
    (["--pairs", "pairs.txt", "features.npz", "--templates", "tid_mid.txt", "--face-scores",
      "short_scores.txt"],
     "short_scores.txt has 2 lines but features.npz has 3 feature rows (one line per row)"),
    (["--pairs", "pairs.txt", "features.npz", "--templates", "tid_mid.txt", "--face-scores",
      "bad_scores.txt"],
     "bad_scores.txt line 4: expected 'image_name ... score' with a finite score >= 0 last, "
     "got 'c.jpg 1 2 x'"),
    (["--pairs", "pairs.txt", "features.npz", "--templates", "tid_mid.txt", "--face-scores",
      "negative_scores.txt"],
     "negative_scores.txt line 2: expected 'image_name ... score' with a finite score >= 0 "
     "last, got 'b.jpg 1 2 -0.5'"),
    (["--pairs", "pairs.txt", "features.npz", "--templates", "tid_mid.txt", "--face-scores",
      "other_scores.txt"],
     "other_scores.txt line 2 names d.jpg, but the same row of tid_mid.txt names b.jpg: the "
     "two lists must give the feature rows in one order"),
    (["--pairs", "pairs.txt", "features.npz", "--templates", "tid_mid.txt", "--face-scores"],
     "features.npz has no 'face_score' array (it has: feature); give --face-scores FILE, or "
     "store face_score"),
    (["--pairs", "pairs.txt", "bad_array.npz", "--templates", "--face-scores"],
     "bad_array.npz: face_score must be finite and >= 0, got nan in row 1"),
    (["--pairs", "pairs.txt", "features.npz", "--face-scores", "scores.txt"],
     "--face-scores needs --templates (it weights the images of a template)"),
    (["query.npz", "gallery.npz", "--flip", "add"],
     "--flip needs --pairs (the features of a pair list)"),
])
def test_unusable_settings_get_one_line(in_tmp, capsys, argv, message):
    np.savez("features.npz", feature=np.ones((3, 4), np.float32))
    np.savez("odd.npz", feature=np.ones((3, 5), np.float32))
    arrays = dict(template=[1, 1, 2], media=[1, 2, 3])
    np.savez("short_flip.npz", feature=np.ones((3, 2)), feature_flip=np.ones((2, 2)), **arrays)
    np.savez("bad_array.npz", feature=np.ones((3, 2)), face_score=[1, np.nan, 1], **arrays)
    lists = {"tid_mid.txt": "a.jpg 1 1\nb.jpg 1 2\nc.jpg 2 3\n",
             "pairs.txt": "1 2 0\n",
             "scores.txt": "a.jpg 1 2 0.5\nb.jpg 1 2 0.9\nc.jpg 1 2 1\n",
             "short_scores.txt": "a.jpg 0.5\nb.jpg 0.9\n",
             "bad_scores.txt": "a.jpg 1 2 0.5\n\nb.jpg 1 2 0.9\nc.jpg 1 2 x\n",
             "negative_scores.txt": "a.jpg 1 2 0.5\nb.jpg 1 2 -0.5\nc.jpg 1 2 1\n",
             "other_scores.txt": "a.jpg 1 2 0.5\nd.jpg 1 2 0.9\nc.jpg 1 2 1\n"}
    for name, text in lists.items():
        with open(name, "w") as f:
            f.write(text)
    status, out, err = call(roc_tool.main, argv, capsys)
    assert status == 1
    assert one_line(err, "ext-roc") == "ext-roc: " + message
