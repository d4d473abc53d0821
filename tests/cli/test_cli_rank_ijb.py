"""ext-rank --ijb: IJB-C 1:N from InsightFace's metadata layout (probe and
G1 / G2 gallery lists), the template features ext-roc --templates builds,
each gallery's report equal to rank.evaluate's on them, G1, G2 and their
mean against a reference written from ijb_evals.py's evaluation_1N, the
JSON, the DIR-vs-FPIR plot, and the lists it cannot use named in one line."""

import json
import os

import numpy as np
import pytest

from _ext import rank
from _ext.tools import ijb_1n, templates
from _ext.tools import rank as rank_tool
from cli_common import call, in_tmp, one_line, read_json, write_sets  # noqa: F401  (in_tmp)

G1_SUBJECTS, G2_SUBJECTS = range(0, 8), range(8, 16)
HEADER = "TEMPLATE_ID,SUBJECT_ID,FILENAME,SUBJECT_ID_OTHER\n"


def write_list(path, template_subject, image_template):
    """One of InsightFace's 1:N lists: a row per image of each template."""
    with open(path, "w") as f:
        f.write(HEADER)
        for image, t in enumerate(image_template):
            if t in template_subject:
                f.write("%d,%d,img/%d.jpg,0\n" % (t, template_subject[t], image))


@pytest.fixture
def ijbc(in_tmp, rng):
    """meta/ijbc_1N_*.csv, meta/ijbc_face_tid_mid.txt, meta/ijbc_name_5pts_score.txt
    and features.npz (each row [image | flipped copy]): one gallery template a
    subject, G1's subjects apart from G2's, and 3 probe templates a subject;
    templates of 1 to 4 images in 1 to 3 media."""
    dim, n_subjects = 6, len(G1_SUBJECTS) + len(G2_SUBJECTS)
    centres = rng.normal(size=(n_subjects, dim))
    template_subject = {}
    for s in range(n_subjects):
        template_subject[100 + s] = s                          # gallery
        for k in range(3):
            template_subject[1000 + 10 * s + k] = s            # probes
    template, media = [], []
    for t in template_subject:
        n = int(rng.integers(1, 5))
        template += [t] * n
        media += list(10 * t + rng.integers(0, 3, n))
    template, media = np.array(template), np.array(media)
    subject = np.array([template_subject[t] for t in template])
    image = centres[subject] + rng.normal(scale=0.7, size=(subject.size, dim))
    flipped = image + rng.normal(scale=0.5, size=image.shape)
    feature = np.concatenate([image, flipped], axis=1).astype(np.float32)
    face_score = rng.uniform(0.3, 1.0, subject.size).astype(np.float32)
    os.mkdir("meta")
    np.savez("features.npz", feature=feature)
    with open("meta/ijbc_face_tid_mid.txt", "w") as f:
        f.writelines("%d.jpg %d %d\n" % (i, t, m) for i, (t, m) in enumerate(zip(template, media)))
    with open("meta/ijbc_name_5pts_score.txt", "w") as f:
        f.writelines("%d.jpg %s %s\n" % (i, " ".join(["50.0"] * 10), score)
                     for i, score in enumerate(face_score))
    lists = {"probe_mixed": {t: s for t, s in template_subject.items() if t >= 1000},
             "gallery_G1": {t: s for t, s in template_subject.items()
                            if t < 1000 and s in G1_SUBJECTS},
             "gallery_G2": {t: s for t, s in template_subject.items()
                            if t < 1000 and s in G2_SUBJECTS}}
    for name, chosen in lists.items():
        write_list("meta/ijbc_1N_%s.csv" % name, chosen, template)
    return feature, face_score, template, media, lists


IJB_ARGS = ["--ijb", "meta", "features.npz", "--templates", "meta/ijbc_face_tid_mid.txt",
            "--flip", "add", "--face-scores", "meta/ijbc_name_5pts_score.txt"]


def expected_templates(ijbc):
    """{list name: (subjects, template features)} as templates.py builds them
    with InsightFace's 1:N settings (F2, D1)."""
    feature, face_score, template, media, lists = ijbc
    fused = templates.fuse_flips("features.npz", feature, None, "add")
    ids, built = templates.template_features(fused, template, media, face_score)
    out = {}
    for name, chosen in lists.items():
        keys = np.array(sorted(chosen))
        out[name] = (np.array([chosen[t] for t in keys]), built[np.searchsorted(ids, keys)])
    return out


def insightface_1n(query_feats, gallery_feats, query_ids, reg_ids, fars):
    """ijb_evals.py evaluation_1N's numbers, from its formula in float64:
    the top-1/5/10 hit counts of the probes with a mate in the gallery, and
    at each FAR the share of them whose mate scores above every non-mate and
    above the threshold: the non-mated probes' best scores, descending, at
    max(int(N * far) - 1, 0)."""
    similarity = query_feats.astype(np.float64) @ gallery_feats.astype(np.float64).T
    top = {1: 0, 5: 0, 10: 0}
    pos, best_neg, unmated_best = [], [], []
    for i, query_id in enumerate(query_ids):
        mate = reg_ids == query_id
        if mate.any():
            order = np.argsort(-similarity[i])
            rank_of_mate = int(np.flatnonzero(mate[order])[0]) + 1
            for k in top:
                top[k] += rank_of_mate <= k
            pos.append(similarity[i][mate][0])
            best_neg.append(similarity[i][~mate].max())
        else:
            unmated_best.append(similarity[i].max())
    pos, best_neg = np.array(pos), np.array(best_neg)
    unmated_best = np.sort(unmated_best)[::-1]
    tpirs = []
    for far in fars:
        threshold = unmated_best[max(int(len(unmated_best) * far) - 1, 0)]
        tpirs.append(np.mean((pos > best_neg) & (pos > threshold)))
    return top, np.array(tpirs)


def test_templates_are_templates_py_s(ijbc):
    args = rank_tool.make_parser().parse_args(IJB_ARGS)
    inputs, warnings, searches = rank_tool.ijb_searches(args)
    want = expected_templates(ijbc)
    assert warnings == [] and list(searches) == ["G1", "G2"]
    for name in ("G1", "G2"):
        subjects_q, feats_q = want["probe_mixed"]
        subjects_g, feats_g = want["gallery_" + name]
        np.testing.assert_array_equal(searches[name]["labels_q"], subjects_q)
        np.testing.assert_array_equal(searches[name]["labels_g"], subjects_g)
        np.testing.assert_array_equal(searches[name]["feat_q"], feats_q)
        np.testing.assert_array_equal(searches[name]["feat_g"], feats_g)
    assert inputs["G1"] == os.path.join("meta", "ijbc_1N_gallery_G1.csv")


def test_g1_g2_and_mean_as_ijb_evals_reports_them(ijbc, capsys):
    status, out, err = call(rank_tool.main, IJB_ARGS + ["--json", "r.json"], capsys)
    assert status == 0, err
    assert err == ""       # --flip and --face-scores given: no note on the settings
    summary = read_json("r.json")
    want = expected_templates(ijbc)
    subjects_q, feats_q = want["probe_mixed"]
    tops, tpirs = {}, {}
    for name in ("G1", "G2"):
        subjects_g, feats_g = want["gallery_" + name]
        report = rank.evaluate(subjects_q, subjects_g, feat_q=feats_q, feat_g=feats_g, junk=None,
                               fpirs=ijb_1n.TABLE_FPIRS, fpir_rule="insightface_ijb")
        assert summary["galleries"][name] == json.loads(json.dumps(report.to_dict()))
        assert report.n_unmated == len(subjects_q) - report.n_mated > 0
        tops[name], tpirs[name] = insightface_1n(feats_q, feats_g, subjects_q, subjects_g,
                                                 ijb_1n.TABLE_FPIRS)
        # tie-free data: rank.evaluate's counts are the script's
        for k in (1, 5, 10):
            assert report.cmc[k - 1] * report.n_mated == pytest.approx(tops[name][k], abs=1e-9)
        assert [row.tpir for row in report.tpir_at_fpir] == pytest.approx(tpirs[name],
                                                                          abs=1e-12)
    n_probes = len(subjects_q)
    mean = summary["mean"]
    assert list(mean["cmc"]) == ["1", "5", "10"]
    for k in (1, 5, 10):
        assert mean["cmc"][str(k)] == pytest.approx((tops["G1"][k] + tops["G2"][k]) / n_probes,
                                                    rel=1e-12)
    assert [row["fpir"] for row in mean["tpir_at_fpir"]] == list(ijb_1n.TABLE_FPIRS)
    assert [row["tpir"] for row in mean["tpir_at_fpir"]] == \
        pytest.approx((tpirs["G1"] + tpirs["G2"]) / 2, abs=1e-12)
    assert summary["inputs"]["face_scores"] == "meta/ijbc_name_5pts_score.txt"
    assert summary["options"]["flip"] == "add" and summary["warnings"] == []
    assert summary["galleries"]["G1"]["fpir_rule"] == "insightface_ijb"
    mean_line = next(line for line in out.splitlines() if line.startswith("mean "))
    assert mean_line.split()[1:] == ["%.6f" % mean["cmc"][k] for k in ("1", "5", "10")]


def test_template_media_and_scores_as_arrays(ijbc, capsys):
    """--templates and --face-scores bare: the features file's arrays, as ext-roc reads them."""
    feature, face_score, template, media, _ = ijbc
    np.savez("arrays.npz", feature=feature, template=template, media=media,
             face_score=face_score)
    status, _, err = call(rank_tool.main, IJB_ARGS + ["--json", "lists.json"], capsys)
    assert status == 0, err
    status, _, err = call(rank_tool.main, ["--ijb", "meta", "--flip", "add", "--templates",
                                           "--face-scores", "arrays.npz", "--json",
                                           "arrays.json"], capsys)
    assert status == 0, err
    assert read_json("arrays.json")["galleries"] == read_json("lists.json")["galleries"]


def test_another_rule_and_the_note_without_the_settings(ijbc, capsys):
    status, out, err = call(rank_tool.main, ["--ijb", "meta/ijbc", "features.npz", "--templates",
                                             "meta/ijbc_face_tid_mid.txt", "--fpir-rule", "nist",
                                             "--fpir", "0.1", "--json", "r.json"], capsys)
    assert status == 0, err
    assert err.splitlines() == ["ext-rank: " + rank_tool.roc_tool.PUBLISHED_IJB_NOTE]
    feature, _, template, media, lists = ijbc
    ids, built = templates.template_features(feature, template, media)
    keys_q = np.array(sorted(lists["probe_mixed"]))
    keys_g = np.array(sorted(lists["gallery_G2"]))
    report = rank.evaluate([lists["probe_mixed"][t] for t in keys_q],
                           [lists["gallery_G2"][t] for t in keys_g],
                           feat_q=built[np.searchsorted(ids, keys_q)],
                           feat_g=built[np.searchsorted(ids, keys_g)], junk=None,
                           fpirs=(0.1,), fpir_rule="nist")
    assert read_json("r.json")["galleries"]["G2"] == json.loads(json.dumps(report.to_dict()))


def test_ijb_b_names_its_galleries_s1_s2(ijbc, capsys):
    for k in (1, 2):
        os.rename("meta/ijbc_1N_gallery_G%d.csv" % k, "meta/ijbc_1N_gallery_S%d.csv" % k)
    status, out, err = call(rank_tool.main, IJB_ARGS + ["--json", "r.json"], capsys)
    assert status == 0, err
    assert read_json("r.json")["inputs"]["G2"] == os.path.join("meta", "ijbc_1N_gallery_S2.csv")


def test_the_plots(ijbc, capsys):
    pytest.importorskip("matplotlib")
    status, out, err = call(rank_tool.main, IJB_ARGS + ["--plot", "cmc.png", "--plot-dir",
                                                        "dir.png", "--json", "r.json"], capsys)
    assert status == 0, err
    for name in ("cmc.png", "dir.png"):
        assert open(name, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # the curve's targets stay out of the table and the JSON
    assert len(read_json("r.json")["galleries"]["G1"]["tpir_at_fpir"]) == len(ijb_1n.TABLE_FPIRS)


def test_dir_plot_of_two_sets(in_tmp, rng, capsys):
    pytest.importorskip("matplotlib")
    write_sets(in_tmp, rng, n_ids=40)    # queries of labels absent from the gallery: unmated
    status, out, err = call(rank_tool.main, ["query.npz", "gallery.npz", "--plot-dir", "d.png",
                                             "--json", "r.json"], capsys)
    assert status == 0, err
    assert open("d.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert len(read_json("r.json")["tpir_at_fpir"]) == len(rank.DEFAULT_FPIRS)


def test_curve_points_are_ijb_evals_fars():
    assert len(ijb_1n.CURVE_FPIRS) == 101
    assert [ijb_1n.CURVE_FPIRS[i] for i in (0, 25, 50, 75, 100)] == list(ijb_1n.TABLE_FPIRS)


def rewrite(path, old, new):
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))


@pytest.mark.parametrize("change, message", [
    (lambda: os.remove("meta/ijbc_1N_probe_mixed.csv"),
     "--ijb meta: no *_1N_probe_mixed.csv in that directory"),
    (lambda: os.remove("meta/ijbc_1N_gallery_G2.csv"),
     "--ijb meta: no meta/ijbc_1N_gallery_G2.csv (nor ijbc_1N_gallery_S2.csv, IJB-B's name)"),
    (lambda: rewrite("meta/ijbc_1N_gallery_G1.csv", "SUBJECT_ID,", "SUBJECT,"),
     "meta/ijbc_1N_gallery_G1.csv: no SUBJECT_ID column in its header (it has: TEMPLATE_ID, "
     "SUBJECT, FILENAME, SUBJECT_ID_OTHER)"),
    (lambda: rewrite("meta/ijbc_1N_probe_mixed.csv", "\n1000,0,", "\n1000,x,"),
     "meta/ijbc_1N_probe_mixed.csv line 2: SUBJECT_ID must be an integer, got 'x'"),
    (lambda: open("meta/ijbc_1N_gallery_G1.csv", "a").write("100,5,img/x.jpg,0\n"),
     "template 100 has SUBJECT_ID 5, but line 2 gave 0"),
    (lambda: open("meta/ijbc_1N_gallery_G1.csv", "a").write("77,5,img/x.jpg,0\n"),
     "meta/ijbc_1N_gallery_G1.csv: 1 of its 9 templates have no image in features.npz "
     "(template ids 77)"),
    (lambda: open("meta/ijbc_1N_gallery_G2.csv", "w").write(HEADER),
     "meta/ijbc_1N_gallery_G2.csv has a header but no rows"),
])
def test_unusable_lists_get_one_line(ijbc, capsys, change, message):
    change()
    status, out, err = call(rank_tool.main, IJB_ARGS, capsys)
    assert status == 1
    line = one_line(err, "ext-rank")
    assert message in line, line


@pytest.mark.parametrize("argv, message", [
    (["query.npz", "gallery.npz", "--flip", "add"], "--flip needs --ijb"),
    (["query.npz", "gallery.npz", "--templates", "t.txt"], "--templates needs --ijb"),
    (["--ijb", "meta", "query.npz", "gallery.npz"],
     "--ijb takes one features file, and neither --same-set nor --cams"),
])
def test_options_that_need_or_refuse_ijb(in_tmp, rng, capsys, argv, message):
    write_sets(in_tmp, rng)
    status, out, err = call(rank_tool.main, argv, capsys)
    assert status == 2 and message in err
