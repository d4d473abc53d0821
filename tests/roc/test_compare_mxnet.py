"""scripts/compare_mxnet.py: the legacy edges, the pair-by-pair accounting and
the TAR rule without MXNet; the whole comparison with MXNet 1.9.1 where its
environment (.venv-mxnet, or $MXNET_PYTHON) exists."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from _ext import roc
from build import ROOT  # the checkout: build.py sits at its root

sys.path.insert(0, os.path.join(ROOT, "scripts"))

from compare_mxnet import Side, account, find_mxnet_python, tar_at_far  # noqa: E402
from _ext.tools.embeddings import InputError  # noqa: E402
from legacy_bins import legacy_bins, legacy_edges, naive_edges  # noqa: E402

UP, DOWN = np.float32(np.inf), np.float32(-np.inf)


def cpu_histograms(score, labels_q, labels_g, nbins):
    """(all, genuine) int64 histograms of cpu_roc: the project's C binning."""
    histo1 = torch.zeros(nbins, dtype=torch.int64)
    histo2 = torch.zeros(nbins, dtype=torch.int64)
    roc.cpu_roc(torch.from_numpy(np.ascontiguousarray(score)), histo1, histo2,
                torch.from_numpy(labels_q), torch.from_numpy(labels_g))
    return histo1.numpy(), histo2.numpy()


def cpu_side(name, score, labels_q, labels_g, nbins):
    return Side(name, score, *cpu_histograms(score, labels_q, labels_g, nbins))


def near_edges(nbins):
    """float32 values on, just below and just above every legacy edge and
    every naive (rounded) edge, plus the special values."""
    centres = np.concatenate([legacy_edges(nbins), naive_edges(nbins)])
    values = np.concatenate([centres, np.nextafter(centres, UP), np.nextafter(centres, DOWN),
                             np.float32([-1, 1, -2, 2, np.inf, -np.inf, 0, -0.0])])
    return values.astype(np.float32)


# ---------------------------------------------------------------------------
# legacy bins and edges (NumPy only: both sides of the comparison use them)

@pytest.mark.parametrize("nbins", [1, 2, 7, 1024, 5000])
def test_legacy_bins_match_cpu_roc(rng, nbins):
    values = np.sort(np.concatenate([near_edges(nbins),
                                     rng.uniform(-1.1, 1.1, 5000).astype(np.float32)]))
    counts, _ = cpu_histograms(values[None, :], np.zeros(1, np.int64),
                               np.zeros(values.size, np.int64), nbins)
    # both binnings are non-decreasing in the score, so on sorted values equal
    # histograms mean equal bins value by value
    np.testing.assert_array_equal(np.bincount(legacy_bins(values, nbins), minlength=nbins),
                                  counts)
    assert legacy_bins(np.float32([np.nan]), nbins)[0] == -1


@pytest.mark.parametrize("nbins", [1, 2, 7, 1024, 5000])
def test_legacy_edges_bound_the_legacy_bins(rng, nbins):
    edges = legacy_edges(nbins)
    assert edges.dtype == np.float32 and edges.shape == (nbins + 1,)
    assert edges[0] == -1 and edges[nbins] == np.nextafter(np.float32(1), UP)
    inner = np.arange(1, nbins)
    # each inner edge is the smallest float32 of its bin
    np.testing.assert_array_equal(legacy_bins(edges[1:nbins], nbins), inner)
    np.testing.assert_array_equal(legacy_bins(np.nextafter(edges[1:nbins], DOWN), nbins),
                                  inner - 1)
    # so [e_k, e_k+1) bins (MXNet's, NumPy's searchsorted) give the legacy bin
    values = np.clip(np.concatenate([near_edges(nbins),
                                     rng.uniform(-1, 1, 5000).astype(np.float32)]), -1, 1)
    np.testing.assert_array_equal(np.searchsorted(edges, values, side="right") - 1,
                                  legacy_bins(values, nbins))


def test_legacy_edge_below_zero_for_an_odd_bin_count():
    # 7 bins: the real edge of bin 3 is 0, but s + 1 rounds to 1 in float64
    # for |s| < 2^-54, so the legacy code already puts -2^-54 in bin 3
    edges = legacy_edges(7)
    assert edges[3] == np.float32(-2.0 ** -54)
    assert naive_edges(7)[3] == 0


# ---------------------------------------------------------------------------
# the accounting, on score matrices that differ by an ulp on chosen pairs

@pytest.fixture
def shifted(rng):
    """Two (40, 50) score matrices: `other` is `reference` with some scores
    one float32 below: on legacy edges (the pair drops a bin) and elsewhere
    (the pair stays). Returns the pieces and where the crossings are."""
    nbins = 1024
    n_query, n_gallery = 40, 50
    labels_q = rng.integers(0, 5, n_query)
    labels_g = rng.integers(0, 5, n_gallery)
    reference = rng.uniform(-1, 1, (n_query, n_gallery)).astype(np.float32)
    flat = rng.permutation(reference.size)
    crossing, candidates = flat[:30], flat[30:130]
    crossing_bins = rng.integers(1, nbins, crossing.size)
    reference.flat[crossing] = legacy_edges(nbins)[crossing_bins]
    # away from the edges one ulp down stays in the bin
    values = reference.flat[candidates]
    staying = candidates[legacy_bins(np.nextafter(values, DOWN), nbins)
                         == legacy_bins(values, nbins)]
    other = reference.copy()
    changed = np.concatenate([crossing, staying])
    other.flat[changed] = np.nextafter(reference.flat[changed], DOWN)
    genuine = (labels_q[:, None] == labels_g[None, :]).ravel()
    return dict(nbins=nbins, labels_q=labels_q, labels_g=labels_g, reference=reference,
                other=other, crossing=crossing, crossing_bins=crossing_bins,
                changed=changed, genuine=genuine, norm_q=np.ones(n_query),
                norm_g=np.ones(n_gallery), dim=128)


def run_account(data, reference, other, **kwargs):
    return account(reference, other, data["labels_q"], data["labels_g"], data["norm_q"],
                   data["norm_g"], data["dim"], data["nbins"], **kwargs)


def test_ulp_crossings_explain_the_histogram_difference(shifted):
    d = shifted
    reference = cpu_side("A", d["reference"], d["labels_q"], d["labels_g"], d["nbins"])
    other = cpu_side("B", d["other"], d["labels_q"], d["labels_g"], d["nbins"])
    result = run_account(d, reference, other)

    expected = np.zeros(d["nbins"], np.int64)  # each crossing leaves bin k for bin k - 1
    np.add.at(expected, d["crossing_bins"], -1)
    np.add.at(expected, d["crossing_bins"] - 1, 1)
    np.testing.assert_array_equal(result.diff_all, expected)
    np.testing.assert_array_equal(result.net_all, expected)
    expected_genuine = np.zeros(d["nbins"], np.int64)
    on_genuine = d["genuine"][d["crossing"]]
    np.add.at(expected_genuine, d["crossing_bins"][on_genuine], -1)
    np.add.at(expected_genuine, d["crossing_bins"][on_genuine] - 1, 1)
    np.testing.assert_array_equal(result.net_genuine, expected_genuine)
    np.testing.assert_array_equal(result.diff_genuine, expected_genuine)

    assert result.n_moved == d["crossing"].size
    assert result.n_moved_genuine == np.count_nonzero(on_genuine)
    assert result.n_score_diff == np.count_nonzero(d["reference"] != d["other"])
    assert result.n_score_diff == d["changed"].size
    assert 0 < result.max_units <= 1.0  # one ulp of a score in [-1, 1] is at most 2^-24
    assert result.n_beyond_bound == 0
    assert result.explained, result.problems
    assert len(result.moved_examples) == 5
    for i, j, score_a, bin_a, score_b, bin_b in result.moved_examples:
        assert i * 50 + j in d["crossing"]
        assert (score_a, score_b) == (d["reference"][i, j], d["other"][i, j])
        assert bin_a - bin_b == 1


def test_blocks_of_rows_add_up_to_the_whole(shifted):
    d = shifted
    reference = cpu_side("A", d["reference"], d["labels_q"], d["labels_g"], d["nbins"])
    other = cpu_side("B", d["other"], d["labels_q"], d["labels_g"], d["nbins"])
    whole = run_account(d, reference, other)
    blocks = run_account(d, reference, other, chunk_pairs=3 * 50)
    for field in ("net_all", "net_genuine"):
        np.testing.assert_array_equal(getattr(blocks, field), getattr(whole, field))
    for field in ("n_moved", "n_moved_genuine", "n_score_diff", "max_units", "explained",
                  "moved_examples"):
        assert getattr(blocks, field) == getattr(whole, field)


def test_a_count_no_pair_moved_is_unexplained(shifted):
    d = shifted
    reference = cpu_side("A", d["reference"], d["labels_q"], d["labels_g"], d["nbins"])
    histo_all, histo_genuine = cpu_histograms(d["other"], d["labels_q"], d["labels_g"],
                                              d["nbins"])
    histo_all = histo_all.copy()
    histo_all[100] += 1  # one pair moved from bin 900 to bin 100, on paper only
    histo_all[900] -= 1
    result = run_account(d, reference, Side("B", d["other"], histo_all, histo_genuine))
    assert not result.explained
    assert any("all pairs, 2 bins" in p and "bin 100: " in p for p in result.problems)
    assert any("B's all-pairs histogram is not the legacy binning" in p
               for p in result.problems)
    assert result.n_beyond_bound == 0


def test_scores_beyond_rounding_are_unexplained(shifted):
    d = shifted
    other = d["other"].copy()
    other[3, 4] = d["reference"][3, 4] + np.float32(1e-3)  # far beyond 2 D ulps
    other[5, 6] = np.nan  # skipped by one side only
    reference = cpu_side("A", d["reference"], d["labels_q"], d["labels_g"], d["nbins"])
    result = run_account(d, reference, cpu_side("B", other, d["labels_q"], d["labels_g"],
                                                d["nbins"]))
    # the histograms still match the pairs' bins: only the scores are wrong
    np.testing.assert_array_equal(result.diff_all, result.net_all)
    assert result.n_beyond_bound == 2
    assert not result.explained
    assert any("2 pairs' scores differ by more than float32 rounding" in p
               for p in result.problems)


def test_a_nan_on_both_sides_is_no_difference(shifted):
    d = shifted
    reference, other = d["reference"].copy(), d["other"].copy()
    reference[0, :] = other[0, :] = np.nan
    result = run_account(d, cpu_side("A", reference, d["labels_q"], d["labels_g"], d["nbins"]),
                         cpu_side("B", other, d["labels_q"], d["labels_g"], d["nbins"]))
    assert result.explained, result.problems
    assert result.n_score_diff == np.count_nonzero(reference[1:] != other[1:])


def test_tar_at_far_takes_the_largest_tar_within_the_far():
    histo_genuine = np.array([0, 1, 1, 2])
    histo_impostor = np.array([5, 3, 1, 0])
    # from the top bin down: (FAR, TAR) = (0, .5), (1/9, .75), (4/9, 1), (1, 1)
    tars = tar_at_far(histo_genuine + histo_impostor, histo_genuine, [0.0, 0.1, 0.2, 0.5])
    assert tars == [0.5, 0.5, 0.75, 1.0]
    assert tar_at_far(histo_genuine, histo_genuine, [0.1]) == [None]  # no impostor


# ---------------------------------------------------------------------------
# the command: errors that need no MXNet

def run_compare(*args, cwd, mxnet_python=None):
    command = [sys.executable, os.path.join(ROOT, "scripts", "compare_mxnet.py"), *args]
    if mxnet_python:
        command += ["--mxnet-python", mxnet_python]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def files(tmp_path, rng):
    centres = rng.normal(size=(30, 16))
    labels_q, labels_g = rng.integers(0, 30, 90), rng.integers(0, 30, 110)
    query = centres[labels_q] + rng.normal(size=(90, 16))
    gallery = centres[labels_g] + rng.normal(size=(110, 16))
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    query, gallery = unit(query), unit(gallery)
    query[:3] *= 2.0  # scores outside [-1, 1]: the edge bins
    query[3] = np.nan  # NaN scores: skipped by both
    np.savez(tmp_path / "query.npz", feature=query, label=labels_q)  # float64: converted
    np.savez(tmp_path / "gallery.npz", feature=gallery.astype(np.float32), label=labels_g)
    np.savez(tmp_path / "wrong_dim.npz", feature=gallery[:, :8], label=labels_g)
    np.savez(tmp_path / "no_label.npz", feature=gallery)
    return tmp_path, (query, labels_q, gallery, labels_g)


@pytest.mark.parametrize("args,message", [
    (("missing.npz", "gallery.npz"), "cannot read missing.npz"),
    (("query.npz", "wrong_dim.npz"), "query features are 16-D but gallery features are 8-D"),
    (("query.npz", "no_label.npz"), "no_label.npz has no 'label' array"),
    (("query.npz",), "give both query.npz and gallery.npz"),
])
def test_unusable_files_get_one_line(files, args, message):
    tmp_path, _ = files
    out = run_compare(*args, cwd=tmp_path, mxnet_python=sys.executable)
    assert out.returncode != 0
    assert out.stderr.strip().startswith("compare_mxnet.py: ") and "\n" not in out.stderr.strip()
    assert message in out.stderr


def test_missing_mxnet_interpreter_gets_one_line(files):
    tmp_path, _ = files
    out = run_compare("query.npz", "gallery.npz", cwd=tmp_path,
                      mxnet_python=str(tmp_path / "no-such-venv" / "bin" / "python"))
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0
    assert "no MXNet interpreter at" in out.stderr and "make .venv-mxnet" in out.stderr


# ---------------------------------------------------------------------------
# the comparison itself, with MXNet 1.9.1

@pytest.fixture(scope="module")
def mxnet_python():
    """MXNet's interpreter, or a skip that says why there is none. Never
    installs anything: `make test` sets up .venv-mxnet before the tests run
    (where PyPI is reachable); `make test PYTHON=...` does not."""
    python = os.environ.get("MXNET_PYTHON") or os.path.join(ROOT, ".venv-mxnet", "bin", "python")
    try:
        return find_mxnet_python(python)
    except InputError as error:
        reason = str(error).split(": run `make", 1)[0]
    log = os.path.join(ROOT, ".venv-mxnet.log")
    if os.path.exists(log):
        with open(log) as lines:
            lines = [line.strip() for line in lines if line.strip()]
        # the cause (pip's ERROR, the import's exception) comes last, before
        # make's own "*** ... Error" lines
        causes = [line for line in lines if "***" not in line]
        reason += ": setting up .venv-mxnet failed (.venv-mxnet.log: %s)" % (
            (causes or lines or ["empty"])[-1])
    else:
        reason += (": `make test` or `make .venv-mxnet` sets it up where PyPI is reachable; "
                   "`make test PYTHON=...` installs nothing")
    pytest.skip(reason)


def test_comparison_on_files(files, mxnet_python):
    tmp_path, (query, labels_q, gallery, labels_g) = files
    out = run_compare("query.npz", "gallery.npz", "--workdir", "exchange", cwd=tmp_path,
                      mxnet_python=mxnet_python)
    assert out.returncode == 0, out.stdout + out.stderr
    sides = 2 if torch.cuda.is_available() and roc.built_with_cuda else 1
    assert out.stdout.count("every difference is explained") == sides

    genuine = labels_q[:, None] == labels_g[None, :]
    genuine[3] = False  # the NaN query row is skipped
    n_genuine = int(genuine.sum())
    n_impostor = 89 * 110 - n_genuine
    rows = {line[:34].strip(): line[34:].split() for line in out.stdout.splitlines()}
    assert rows["genuine pairs"][:1 + sides] == ["{:,}".format(n_genuine)] * (1 + sides)
    assert rows["impostor pairs"][:1 + sides] == ["{:,}".format(n_impostor)] * (1 + sides)
    assert rows["NaN scores skipped"][:1 + sides] == ["110"] * (1 + sides)

    # MXNet's own histograms, read back: the legacy binning of its own scores
    with np.load(tmp_path / "exchange" / "mxnet.npz") as mxnet:
        score = mxnet["score"]
        bins = legacy_bins(score, 1024)
        counted = bins >= 0
        np.testing.assert_array_equal(mxnet["histo_all"],
                                      np.bincount(bins[counted], minlength=1024))
        np.testing.assert_array_equal(mxnet["histo_genuine"],
                                      np.bincount(bins[counted & genuine], minlength=1024))
        assert mxnet["histo_all"][[0, 1023]].sum() > 0  # doubled rows reach the edge bins
    exact = query.astype(np.float32).astype(np.float64) @ gallery.astype(np.float32).T
    finite = ~np.isnan(exact)
    np.testing.assert_allclose(score[finite], exact[finite], rtol=0, atol=1e-5)


@pytest.mark.parametrize("nbins", [7, 1024])
def test_mxnet_bins_scores_on_the_edges_as_the_legacy_code(tmp_path, mxnet_python, nbins):
    # one-dimensional features against a gallery of [1.0]: the score is the
    # query feature exactly, on both sides, so every value near an edge is
    # binned by MXNet's histogram and by cpu_roc from the same float32
    values = np.concatenate([near_edges(nbins), np.float32([np.nan])])
    np.savez(tmp_path / "query.npz", feature=values[:, None], label=np.arange(values.size) % 3)
    np.savez(tmp_path / "gallery.npz", feature=np.ones((1, 1), np.float32),
             label=np.zeros(1, np.int64))
    out = run_compare("query.npz", "gallery.npz", "--bins", str(nbins), "--workdir", "exchange",
                      cwd=tmp_path, mxnet_python=mxnet_python)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "pairs in another legacy bin              0 (genuine 0)" in out.stdout
    labels_q = (np.arange(values.size) % 3).astype(np.int64)
    expected = cpu_histograms(values[:, None], labels_q, np.zeros(1, np.int64), nbins)
    with np.load(tmp_path / "exchange" / "mxnet.npz") as mxnet:
        np.testing.assert_array_equal(mxnet["score"][:, 0], values)
        np.testing.assert_array_equal(mxnet["histo_all"], expected[0])
        np.testing.assert_array_equal(mxnet["histo_genuine"], expected[1])
