"""Shared test set-up: the `gpu` marker, and --require-gpu for `make test-gpu`."""

import os
import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

# Property-based tests: a bounded run by default (CI), a long one for `make fuzz`.
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser):
    parser.addoption("--require-gpu", action="store_true",
                     help="fail, instead of skipping, when no CUDA device is visible")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    if config.getoption("--require-gpu"):
        raise pytest.UsageError("--require-gpu: torch sees no CUDA device")
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """A generator per test, seeded from the test's file name and name:
    reproducible, different data for every test (file names are unique
    across the folders), and the same data whichever folder of tests/ holds
    the file. The seed is the crc32 of "tests/<file>::<test>", the node id
    the test has where its file sits in tests/ itself. A module may name
    another file in SEED_FILE, so that tests split out of one file keep the
    data they were written against: some check that their workload is what
    they say (a share of impostors within bounds, say), which holds for
    their data, not for every draw."""
    path, _, test = request.node.nodeid.partition("::")
    seed_file = getattr(request.module, "SEED_FILE", os.path.basename(path))
    seed_id = "tests/%s::%s" % (seed_file, test)
    return np.random.default_rng(zlib.crc32(seed_id.encode()))
