"""rank.evaluate's inputs: arrays of any kind give one report; bad arguments
are errors naming the function and the argument, in Python and in the C shim
(src/roc_rank_eval.c); edge cases (no gallery, no mate, NaN) are counted, not
crashes. Fuzzed inputs: tests/test_fuzz_rank.py."""

import json
import math

import numpy as np
import pytest
import torch

from _ext import _ffi, rank
from _ext.roc import ffi, lib
from score_keys import score_key


def small(rng, n_query=12, n_gallery=30, ids=5):
    labels_q, labels_g = rng.integers(0, ids, n_query), rng.integers(0, ids, n_gallery)
    score = np.round(rng.normal(size=(n_query, n_gallery)), 1).astype(np.float32)
    return labels_q, labels_g, score


def same(a, b):
    """Equal reports, wherever each counted (its own device memory apart)."""
    assert dict(a.to_dict(), device_bytes_peak=0) == dict(b.to_dict(), device_bytes_peak=0)


# ---------------------------------------------------------------------------
# arrays of any kind, one report

def test_array_kinds_give_one_report(rng):
    lq, lg, score = small(rng)
    cq, cg = rng.integers(0, 3, 12), rng.integers(0, 3, 30)
    want = rank.evaluate(lq, lg, score=score, cams_q=cq, cams_g=cg)
    same(want, rank.evaluate(torch.from_numpy(lq), torch.from_numpy(lg),
                             score=torch.from_numpy(score), cams_q=torch.from_numpy(cq),
                             cams_g=torch.from_numpy(cg)))
    same(want, rank.evaluate(lq.tolist(), lg.tolist(), score=score, cams_q=cq.tolist(),
                             cams_g=cg.tolist()))
    same(want, rank.evaluate(lq.astype(np.float32), lg.astype(np.int32), score=score,
                             cams_q=cq.astype(np.int16), cams_g=cg.astype(np.uint8)))
    same(want, rank.evaluate(lq, lg, score=torch.from_numpy(score).to(torch.float16).float(),
                             cams_q=cq, cams_g=cg))


def test_half_scores_are_widened_exactly(rng):
    lq, lg, score = small(rng)
    half = score.astype(np.float16)
    same(rank.evaluate(lq, lg, score=half), rank.evaluate(lq, lg, score=half.astype(np.float32)))


def test_junk_is_compared_exactly_whatever_the_label_dtype(rng):
    lq, lg, score = small(rng)
    lg[::4] = -1
    want = rank.evaluate(lq, lg, score=score, per_query=True)
    got = rank.evaluate(lq.astype(np.float64), lg.astype(np.float32), score=score, junk=-1.0,
                        per_query=True)
    same(want, got)
    kept = rank.evaluate(lq, lg, score=score, junk=None, per_query=True)
    assert kept.n_nonmated_pairs > want.n_nonmated_pairs
    absent = rank.evaluate(lq, np.where(lg == -1, 99, lg), score=score, junk=-1)
    assert absent.n_nonmated_pairs == kept.n_nonmated_pairs


def test_a_query_labelled_junk_has_no_mate(rng):
    labels_g = np.array([-1, -1, 2, 3])
    report = rank.evaluate([-1, 2], labels_g, score=np.ones((2, 4), np.float32),
                           per_query=True)
    assert report.per_query["n_mates"].tolist() == [0, 1]
    assert report.n_unmated == 1


def test_cameras_exclude_same_id_same_camera_only(rng):
    score = np.array([[0.9, 0.8, 0.7, 0.6]], np.float32)
    labels_g, cams_g = np.array([1, 1, 2, 2]), np.array([0, 1, 0, 1])
    report = rank.evaluate([1], labels_g, score=score, cams_q=[0], cams_g=cams_g,
                           per_query=True)
    # entry 0 (id 1, camera 0) excluded; entry 2 (id 2, camera 0) stays a non-mate
    assert report.per_query["mate_index"].tolist() == [1]
    assert report.per_query["n_nonmates"].tolist() == [2]
    assert report.cmc[0] == 1.0


def test_same_set_defaults_and_checks(rng):
    labels = rng.integers(0, 4, 20)
    feat = rng.normal(size=(20, 6)).astype(np.float32)
    cams = rng.integers(0, 2, 20)
    a = rank.evaluate(labels, feat_q=feat, same_set=True, cams_q=cams)
    b = rank.evaluate(labels, labels, feat_q=feat, feat_g=feat, same_set=True, cams_q=cams,
                      cams_g=cams)
    same(a, b)
    with pytest.raises(ValueError, match="evaluate: same_set=True means one set: labels_g"):
        rank.evaluate(labels, labels[::-1], feat_q=feat, same_set=True)
    with pytest.raises(ValueError, match="evaluate: same_set=True means one set: feat_g"):
        rank.evaluate(labels, feat_q=feat, feat_g=feat.copy(), same_set=True)
    with pytest.raises(ValueError, match="evaluate: same_set needs one set: score"):
        rank.evaluate(labels, score=np.zeros((20, 21), np.float32), same_set=True)
    with pytest.raises(ValueError, match="evaluate: same_set=True shards the set's rows"):
        rank.evaluate(labels, feat_q=feat, same_set=True, shard="gallery")


def test_progress_reaches_the_total(rng):
    lq, lg, score = small(rng, n_query=50)
    seen = []
    rank.evaluate(lq, lg, score=score, chunk=8 * 30, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (50 * 30, 50 * 30) and len(seen) > 2
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_report_outputs(rng, tmp_path):
    lq, lg, score = small(rng)
    report = rank.evaluate(lq, lg, score=score, topk=3, per_query=True, max_rank=12)
    text = report.table()
    assert "rank-1" in text and "rank-10" in text and "rank-20" not in text
    assert "mAP" in text and "TPIR" in text
    json.dumps(report.to_dict())
    report.save_json(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(
        json.dumps(report.to_dict()))
    report.save_arrays(tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz") as saved:
        np.testing.assert_array_equal(saved["cmc"], report.cmc)
        np.testing.assert_array_equal(saved["topk_index"], report.topk[0])
        np.testing.assert_array_equal(saved["mate_rank"], report.per_query["mate_rank"])
    assert report.cmc.dtype == np.float64 and report.cmc.shape == (12,)
    assert report.precision_at_1 == report.cmc[0]


# ---------------------------------------------------------------------------
# edge cases: counted, not crashes

def test_empty_gallery(rng):
    report = rank.evaluate([1, 2, 3], np.zeros(0, np.int64), score=np.zeros((3, 0), np.float32),
                           topk=2, per_query=True)
    assert (report.n_queries, report.n_mated, report.n_unmated) == (3, 0, 3)
    assert np.isnan(report.cmc).all() and math.isnan(report.mean_ap)
    assert all(math.isnan(row.tpir) for row in report.tpir_at_fpir)
    assert (report.topk[0] == -1).all()


def test_no_queries(rng):
    report = rank.evaluate(np.zeros(0, np.int64), [1, 2], score=np.zeros((0, 2), np.float32))
    assert (report.n_queries, report.n_mated, report.n_skipped) == (0, 0, 0)
    assert np.isnan(report.cmc).all()


def test_no_mates(rng):
    lq, lg, score = small(rng)
    report = rank.evaluate(lq + 100, lg, score=score, fpirs=(0.1, 1.0))
    assert report.n_mated == 0 and report.n_unmated == 12
    assert math.isnan(report.mean_ap) and math.isnan(report.map_at_r)
    assert all(math.isnan(row.tpir) for row in report.tpir_at_fpir)


def test_nan_scores_are_excluded_and_counted(rng):
    lq, lg, score = small(rng)
    score[0, :] = np.nan          # query 0: every mate NaN: skipped, not a non-mated search
    score[1, 3] = np.nan
    report = rank.evaluate(lq, lg, score=score, per_query=True)
    assert report.n_nan == 30 + 1
    assert report.per_query["n_mates"][0] == 0
    assert report.per_query["n_nan_mates"][0] == (lg == lq[0]).sum()
    assert report.n_skipped == report.n_unmated + 1


# ---------------------------------------------------------------------------
# errors: Python's checks

BAD = [
    (dict(ties="random"), ValueError, "evaluate: ties must be one of"),
    (dict(ap="interpolated"), ValueError, "evaluate: ap must be one of"),
    (dict(fpir_rule="frvt"), ValueError, "evaluate: fpir_rule must be one of"),
    (dict(fpirs=1.5), ValueError, r"evaluate: fpirs must lie in \[0, 1\]"),
    (dict(fpirs="a"), TypeError, "evaluate: fpirs must be a number or a sequence"),
    (dict(max_rank=0), ValueError, "evaluate: max_rank must lie in"),
    (dict(max_rank=2.0), TypeError, "evaluate: max_rank must be an integer"),
    (dict(topk=101), ValueError, r"evaluate: topk must lie in \[0, 100\]"),
    (dict(topk=True), TypeError, "evaluate: topk must be an integer"),
    (dict(per_query=1), TypeError, "evaluate: per_query must be True or False"),
    (dict(same_set="ordered"), TypeError, "evaluate: same_set must be True or False"),
    (dict(junk=1.5), ValueError, "evaluate: junk must be an integer label or None"),
    (dict(junk="x"), TypeError, "evaluate: junk must be an integer label or None"),
    (dict(similarity="l2"), ValueError, "evaluate: similarity must be one of"),
    (dict(shard="rows"), ValueError, "evaluate: shard must be one of"),
    (dict(progress=3), TypeError, "evaluate: progress must be callable"),
    (dict(chunk=0), ValueError, "evaluate: chunk must be a positive integer"),
    (dict(device="tpu"), ValueError, "evaluate: device must be 'cpu', 'cuda' or 'cuda:N'"),
    (dict(score=np.zeros((4, 6), np.float64)), TypeError, "evaluate: score is float64"),
    (dict(score=np.zeros((4, 6, 1), np.float32)), ValueError, "evaluate: score must be 2-D"),
    (dict(score=np.zeros((4, 5), np.float32)), ValueError,
     "evaluate: labels_g has 6 elements but there are 5 gallery entries"),
    (dict(score=np.zeros((3, 6), np.float32)), ValueError,
     "evaluate: labels_q has 4 elements but there are 3 queries"),
    (dict(score=None, feat_q=np.zeros((4, 3), np.float64), feat_g=np.zeros((6, 3), np.float64)),
     TypeError, "evaluate: feat_q must be float32, got float64"),
    (dict(score=None, feat_q=np.zeros((4, 3), np.float32), feat_g=np.zeros((6, 2), np.float32)),
     ValueError, "evaluate: feat_q is .* the feature dimensions differ"),
    (dict(score=None, feat_q=np.zeros((4, 3), np.float32)), ValueError,
     "evaluate: feat_g is required with feat_q"),
    (dict(score=None), ValueError, "evaluate: give either score=, or feat_q="),
    (dict(feat_g=np.zeros((6, 3), np.float32)), ValueError,
     "evaluate: give either score=, or feat_q= and feat_g=, not both"),
    (dict(score=[[0.5] * 6] * 4), TypeError, "evaluate: score must be an array"),
    (dict(cams_q=[0, 1, 0, 1]), ValueError, "evaluate: give both cams_q and cams_g, or neither"),
    (dict(cams_q=[0, 1, 0], cams_g=[0] * 6), ValueError,
     "evaluate: cams_q has 3 elements but there are 4 queries"),
    (dict(cams_q=[0, 1, 0, 1], cams_g=[0.5] * 6), ValueError,
     "evaluate: cams_g holds 0.5, which is not an integer"),
    (dict(labels_q=[0, 1, np.nan, 1]), ValueError, "evaluate: labels_q contains NaN"),
    (dict(labels_q="abcd"), TypeError, "evaluate: labels_q must be an array"),
    (dict(labels_g=None), ValueError, "evaluate: labels_g is required unless same_set=True"),
]


@pytest.mark.parametrize("change, error, message", BAD)
def test_bad_arguments_are_named(change, error, message):
    kwargs = dict(labels_q=[0, 1, 2, 1], labels_g=[0, 1, 2, 3, 1, 0],
                  score=np.zeros((4, 6), np.float32))
    kwargs.update(change)
    with pytest.raises(error, match=message):
        rank.evaluate(kwargs.pop("labels_q"), kwargs.pop("labels_g"), **kwargs)


def test_device_cuda_without_cuda_is_named():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with pytest.raises(RuntimeError, match="evaluate: device 'cuda' asked for"):
        rank.evaluate([0], [0], score=np.zeros((1, 1), np.float32), device="cuda")


@pytest.mark.gpu
def test_cuda_inputs_run_there_or_on_the_cpu_when_asked(rng):
    """CUDA inputs are counted on the GPU; device="cpu" copies them over."""
    lq, lg, score = small(rng)
    cuda = dict(score=torch.from_numpy(score).cuda())
    on_gpu = rank.evaluate(torch.from_numpy(lq).cuda(), torch.from_numpy(lg).cuda(), **cuda)
    assert on_gpu.device_bytes_peak > 0
    same(rank.evaluate(lq, lg, score=score), on_gpu)
    same(rank.evaluate(lq, lg, score=score),
         rank.evaluate(torch.from_numpy(lq).cuda(), torch.from_numpy(lg).cuda(), device="cpu",
                       **cuda))


# ---------------------------------------------------------------------------
# errors: the C shim's checks (what a caller of the C ABI meets)

def describe(name, x):
    return _ffi.describe(ffi, "rank", name, x)


def c_create(config_changes=(), labels_q=None, labels_g=None, cams=None, score=None):
    config = ffi.new("roc_rank_config *")
    config.caller = b"rank"
    for key, value in dict(config_changes).items():
        setattr(config, key, value)
    labels_q = np.array([0, 1, 2], np.int64) if labels_q is None else labels_q
    labels_g = np.array([0, 1, 2, 3], np.int64) if labels_g is None else labels_g
    score = np.zeros((3, 4), np.float32) if score is None else score
    keep = [describe("labels_q", labels_q), describe("labels_g", labels_g)]
    keep += [describe(n, c) if c is not None else ffi.NULL for n, c in zip(("cams_q", "cams_g"),
                                                                       cams or (None, None))]
    keep += [describe("score", score), ffi.NULL, ffi.NULL]
    handle = ffi.new("roc_rank **")
    status = lib.roc_rank_create(handle, config, *keep, ffi.NULL)
    if status:
        _ffi.check(ffi, lib, status)
    return ffi.gc(handle[0], lib.roc_rank_free)


C_BAD = [
    (dict(config_changes={"topk": 101}), r"rank: topk must lie in \[0, 100\], got 101"),
    (dict(config_changes={"topk": -1}), r"rank: topk must lie in \[0, 100\]"),
    (dict(config_changes={"same_set": 2}), "rank: same_set must be 0 or 1, got 2"),
    (dict(config_changes={"has_junk": 3}), "rank: has_junk must be 0 or 1, got 3"),
    (dict(config_changes={"similarity": 7}), "rank: unknown similarity 7"),
    (dict(config_changes={"keep_nonmated": -1}), "rank: keep_nonmated must lie in"),
    (dict(config_changes={"same_set": 1, "row_offset": 2}),
     "rank: same_set: the 3 queries from row 2 are not rows of the 4-entry set"),
    (dict(cams=(np.zeros(3, np.int64), None)), "rank: give both cams_q and cams_g, or neither"),
    (dict(cams=(np.zeros(3, np.int64), np.zeros(4, np.int32))),
     "rank: cams_q is int64 but cams_g is int32: give both one dtype"),
    (dict(cams=(np.zeros(3, np.int64), np.zeros(5, np.int64))),
     "rank: cams_g has 5 elements but labels_g has 4"),
    (dict(cams=(np.zeros(3, np.float32), np.zeros(4, np.float32))),
     "rank: cams_q must be int32 or int64, got float32"),
    (dict(labels_g=np.zeros(4, np.int32)),
     "rank: labels_q is int64 but labels_g is int32: give both one dtype"),
    (dict(labels_q=np.zeros((3, 1), np.int64)), "rank: labels_q must be 1-D, got 2-D"),
    (dict(score=np.zeros((3, 5), np.float32)),
     r"rank: score is \(Q, G\) = \(3, 5\) but labels_q has 3 elements and labels_g 4"),
    (dict(score=np.zeros((4, 3), np.float32).T), "rank: score must be contiguous"),
]


@pytest.mark.parametrize("kwargs, message", C_BAD)
def test_c_shim_names_every_bad_argument(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        c_create(**kwargs)


def test_c_rows_out_of_range_and_broken_evaluations():
    handle = c_create()
    with pytest.raises(ValueError, match=r"rank: rows \[2, 9\) are outside \[0, 3\)"):
        _ffi.check(ffi, lib, lib.roc_rank_add_rows(handle, 2, 9))
    lib.ext_test_fail_allocations(0, 1)
    try:
        with pytest.raises(MemoryError, match="^rank: cannot allocate"):
            _ffi.check(ffi, lib, lib.roc_rank_add_rows(handle, 0, 3))
    finally:
        lib.ext_test_fail_allocations(0, 0)
    view = ffi.new("roc_rank_view *")
    with pytest.raises(ValueError, match="rank: this evaluation failed in an earlier step"):
        _ffi.check(ffi, lib, lib.roc_rank_counts(handle, view))


def test_c_set_mates_counts_against_every_shards_mates_and_checks_them():
    """roc_rank_set_mates (shard="gallery"): the non-mates here counted
    against mates given from elsewhere; the lists checked, and only before
    any rows."""
    labels_q, labels_g = np.array([0, 1], np.int64), np.array([0, 5, 6, 7], np.int64)
    score = np.array([[0.9, 0.1, 0.5, 0.7], [0.2, 0.3, 0.4, 0.6]], np.float32)
    handle = c_create(labels_q=labels_q, labels_g=labels_g, score=score)
    keys = [score_key(x) for x in (0.45, 0.9, 0.35)]
    first = np.array([0, 2, 3], np.int64)
    mate_key = np.array(keys, np.uint32)
    mate_index = np.array([10, 0, 11], np.int64)

    def set_mates(first=first, mate_key=mate_key, mate_index=mate_index):
        _ffi.check(ffi, lib, lib.roc_rank_set_mates(
            handle, ffi.from_buffer("int64_t[]", first), ffi.from_buffer("uint32_t[]", mate_key),
            ffi.from_buffer("int64_t[]", mate_index), len(mate_key)))

    for bad, message in ((dict(first=np.array([1, 2, 3])), "first\\[\\] must run from 0"),
                         (dict(mate_key=mate_key[[1, 0, 2]]), "query 0 are not ascending"),
                         (dict(mate_index=np.array([10, -1, 11])),
                          "mated pair 1 has a negative gallery index")):
        with pytest.raises(ValueError, match="rank: (the counts' |the mate keys of |)" + message):
            set_mates(**bad)
    set_mates()
    _ffi.check(ffi, lib, lib.roc_rank_add_rows(handle, 0, 2))
    view = ffi.new("roc_rank_view *")
    _ffi.check(ffi, lib, lib.roc_rank_counts(handle, view))
    # query 0's non-mates 0.1, 0.5, 0.7 against its mates 0.45 and 0.9; query 1's
    # 0.2, 0.3, 0.4, 0.6 (label 1 is in no gallery entry here) against 0.35
    assert list(rank._view.view_arrays(view[0])["above"]) == [2, 0, 2]
    assert list(rank._view.view_arrays(view[0])["mate_index"]) == [10, 0, 11]
    with pytest.raises(ValueError, match="rank: the mates are set before any rows are counted"):
        set_mates()


def summarize(arrays, changes=()):
    options = ffi.new("roc_rank_summary_options *")
    options.max_rank = 3
    for key, value in dict(changes).items():
        setattr(options, key, value)
    view, keep = rank._view.view_of(arrays)
    out = ffi.new("roc_rank_summary **")
    _ffi.check(ffi, lib, lib.roc_rank_summarize(view, options, b"rank", out))
    lib.roc_rank_summary_free(out[0])


def two_queries():
    """Counts of two queries with two and one mated pairs."""
    return {"first": np.array([0, 2, 3]), "mate_key": np.array([10, 20, 15], np.uint32),
            "mate_index": np.arange(3), "above": np.zeros(3, np.uint64),
            "tied": np.zeros(3, np.uint64), "best_key": np.array([5, 0], np.uint32),
            "best_index": np.array([4, -1]), "n_nonmates": np.array([1, 0], np.uint64),
            "nan_mates": np.zeros(2, np.uint64), "topk_index": np.zeros(0, np.int64),
            "topk_score": np.zeros(0, np.float32), "kept_keys": np.zeros(0, np.uint32),
            "totals": np.zeros(2, np.uint64), "topk": 0}


VIEW_BAD = [
    (dict(first=np.array([0, 4, 3])), "rank: the counts' first\\[\\] decreases at query 1"),
    (dict(first=np.array([1, 2, 3])), "rank: the counts' first\\[\\] must run from 0"),
    (dict(mate_key=np.array([20, 10, 15], np.uint32)),
     "rank: the mate keys of query 0 are not ascending"),
    (dict(mate_key=np.array([0, 20, 15], np.uint32)), "rank: mated pair 0 has no score key"),
]


@pytest.mark.parametrize("change, message", VIEW_BAD)
def test_c_summary_refuses_inconsistent_counts(change, message):
    arrays = dict(two_queries(), **change)
    with pytest.raises(ValueError, match=message):
        summarize(arrays)


OPTIONS_BAD = [
    ({"ties": 3}, "rank: unknown ties policy 3"),
    ({"ap": 2}, "rank: unknown ap convention 2"),
    ({"fpir_rule": 9}, "rank: unknown fpir_rule 9"),
    ({"max_rank": 0}, r"rank: max_rank must lie in \[1, 2\^31\]"),
    ({"n_fpirs": 2}, "rank: n_fpirs targets must be given"),
]


@pytest.mark.parametrize("change, message", OPTIONS_BAD)
def test_c_summary_refuses_bad_options(change, message):
    with pytest.raises(ValueError, match=message):
        summarize(two_queries(), change)


def test_c_summary_needs_its_arguments():
    out = ffi.new("roc_rank_summary **")
    options = ffi.new("roc_rank_summary_options *")
    with pytest.raises(ValueError, match="rank: summarize needs the counts and the options"):
        _ffi.check(ffi, lib, lib.roc_rank_summarize(ffi.NULL, options, b"rank", out))


def test_c_summary_says_when_too_few_scores_were_kept():
    """insightface_1n_legacy reads the K highest non-mated scores; a caller
    that kept fewer (keep_nonmated) is told."""
    arrays = dict(two_queries(), n_nonmates=np.array([5, 5], np.uint64))
    fpirs = ffi.new("double[]", [1.0])
    with pytest.raises(ValueError, match="rank: fpir 1 under insightface_1n_legacy needs the "
                                         "2 highest non-mated scores but 0 were kept"):
        summarize(arrays, {"fpir_rule": lib.ROC_FPIR_INSIGHTFACE_1N_LEGACY, "fpirs": fpirs,
                           "n_fpirs": 1})


@pytest.mark.parametrize("host_failures", [1, 2, 3, 5, 8, 13, 21])
def test_host_allocation_failures_are_memory_errors(rng, host_failures):
    """The n-th host allocation fails: MemoryError naming evaluate, then the
    next call works."""
    lq, lg = rng.integers(0, 4, 30), rng.integers(0, 4, 40)
    fq = rng.normal(size=(30, 8)).astype(np.float32)
    fg = rng.normal(size=(40, 8)).astype(np.float32)
    kwargs = dict(feat_q=fq, feat_g=fg, topk=2, per_query=True,
                  fpir_rule="insightface_1n_legacy")
    lib.ext_test_fail_allocations(0, host_failures)
    try:
        rank.evaluate(lq, lg, **kwargs)
    except MemoryError as error:
        assert str(error).startswith("evaluate: ")
    finally:
        lib.ext_test_fail_allocations(0, 0)
    assert rank.evaluate(lq, lg, **kwargs).n_queries == 30
