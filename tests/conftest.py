"""Shared fixtures: the real TpuGraphs-format files in ../shared/real (skipped cleanly when absent)
and small builds made once per session in temporary folders; and the hypothesis profiles.

Hypothesis profiles (the suite's strength must not vary from run to run):

* ``ci`` (default, and whenever ``CI`` is set): ``derandomize=True`` — every run draws the same
  examples, a fixed ``max_examples`` (tests that set their own keep theirs), no deadline, no example
  database (a local ``.hypothesis/`` folder cannot change what a run explores).
* ``campaign`` (``TPUPREP_HYPOTHESIS_PROFILE=campaign`` or ``--hypothesis-profile campaign``): fresh
  random examples each run, for hunting bugs; ``TPUPREP_FUZZ_EXAMPLES=N`` sets its ``max_examples``
  and, in either profile, the fuzz tests' count (``tests/test_fuzz.py``).
"""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from realdata import real_path
from s3server import bucket, s3_endpoint, s3_env  # noqa: F401  (fixtures for the object-store tests)

CI_EXAMPLES = 100
settings.register_profile(
    "ci", derandomize=True, database=None, max_examples=CI_EXAMPLES, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "campaign", derandomize=False, max_examples=int(os.environ.get("TPUPREP_FUZZ_EXAMPLES", "1000")),
    deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
PROFILE = os.environ.get("TPUPREP_HYPOTHESIS_PROFILE") or "ci"  # CI set or not: derandomized
settings.load_profile(PROFILE)


@pytest.fixture(autouse=True)
def _unfrozen_heap():
    """A build in this process (the CLI's serial path) freezes the heap as a converter does
    (``runners.worker``); give the objects back to the collector after each test, so one test's
    cyclic garbage cannot outlive it."""
    yield
    if gc.get_freeze_count():
        gc.unfreeze()


@pytest.fixture(scope="session")
def real_npz() -> Path:
    return real_path("npz")


@pytest.fixture(scope="session")
def real_tree(tmp_path_factory, real_npz) -> Path:
    """A copy of real/npz plus the alexnet file placed as layout:xla:default train."""
    root = tmp_path_factory.mktemp("real") / "npz"
    shutil.copytree(real_npz, root)
    alexnet = real_path("reconstructed", "alexnet_train_batch_32.npz")
    shutil.copy(alexnet, root / "layout" / "xla" / "default" / "train" / alexnet.name)
    return root


@pytest.fixture(scope="session")
def real_shards(tmp_path_factory, real_tree) -> Path:
    from tpuprep.build import build

    dst = tmp_path_factory.mktemp("real-shards")
    build(real_tree, dst)
    return dst


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory) -> Path:
    """The 'tiny' synthetic profile (seed 0): every collection and split."""
    from tpuprep.synth import synthesize

    root = tmp_path_factory.mktemp("synth")
    synthesize(root, "tiny", 0)
    return root


@pytest.fixture(scope="session")
def synth_shards(tmp_path_factory, synth_root) -> Path:
    from tpuprep.build import build

    dst = tmp_path_factory.mktemp("synth-shards")
    build(synth_root / "npz", dst)
    return dst


@pytest.fixture
def shards(synth_shards, tmp_path) -> Path:
    """A private copy of the tiny synthetic build, for tests that damage it (a module may define its own)."""
    return Path(shutil.copytree(synth_shards, tmp_path / "shards"))


@pytest.fixture
def src(synth_root) -> Path:
    """The npz tree of the tiny synthetic build (a module may define its own)."""
    return synth_root / "npz"
