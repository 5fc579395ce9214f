"""Shared fixtures: the real TpuGraphs-format files in ../shared/real (skipped cleanly when absent)
and small builds made once per session in temporary folders."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from realdata import real_path


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
