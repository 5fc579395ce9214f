"""Every "is this path inside that folder" check is a path test, never a string prefix (issue #27, the
suite's blind spots): a sibling whose name merely starts with the folder's (``<folder>-evil``) is outside.

One test per check in tpuprep/: the reader's shard paths from the manifest (``Dataset.shard_path``), the
export's target files (``export._inside``) and its shard-folder test, the build's --src/--dst overlap
(``request.overlap`` through ``make_request``) and the commands' output check (``cli.outputs.within``).
Each must refuse (or allow) on the sibling exactly as a path test does; with ``str.startswith`` in its place
each of these tests fails. (Archive members are read in place and never become paths, so they have no such
check; ``manifest._check_shard`` compares against a folder that ends in ``/``, which is a path test.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write

from tpuprep import open_dataset
from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.cli.outputs import check_output, within
from tpuprep.errors import BadShards, UsageError
from tpuprep.export import _inside, export
from tpuprep.request import make_request


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("confine")
    write(root / "npz", "layout/xla/random/train/g.npz", layout_arrays())
    write(root / "npz", "tile/xla/train/t.npz", tile_arrays())
    build(root / "npz", root / "shards")
    return root


def test_reader_refuses_a_shard_linked_into_a_sibling_folder(built, tmp_path):
    """A shard file replaced by a symbolic link to ``<shards>-evil/...``: the link leads outside."""
    shards = tmp_path / "shards"
    shutil.copytree(built / "shards", shards)
    evil = tmp_path / "shards-evil"
    evil.mkdir()
    rel = open_dataset(shards).manifest["shards"][0]["path"]
    shutil.move(shards / rel, evil / "stolen.parquet")
    (shards / rel).symlink_to(evil / "stolen.parquet")
    ds = open_dataset(shards)
    with pytest.raises(BadShards, match="leads outside the shard folder"):
        ds.shard_path(0)


def test_export_target_in_a_sibling_folder_is_outside(tmp_path):
    dst = (tmp_path / "out").resolve()
    with pytest.raises(BadShards, match="outside --dst-npz"):
        _inside(dst, "../out-evil/layout/x.npz")
    assert _inside(dst, "layout/xla/random/train/x.npz") == dst / "layout/xla/random/train/x.npz"


def test_export_into_a_sibling_of_the_shard_folder_is_allowed(built, tmp_path):
    sibling = built / "shards-evil"
    report = export(built / "shards", sibling)
    assert report.graphs == 2 and (sibling / "tile/xla/train/t.npz").is_file()
    with pytest.raises(UsageError, match="must not lie inside the shard folder"):
        export(built / "shards", built / "shards" / "npz")


def test_build_into_a_sibling_of_its_source_is_allowed(built):
    src = built / "npz"
    sibling = built / "npz-evil"
    request = make_request(src, sibling)
    assert (request.source.location, request.destination.root) == (src.resolve(), str(sibling.resolve()))
    with pytest.raises(UsageError, match="overlap"):
        make_request(src, src / "shards")
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(sibling), "-q"])
    assert result.exit_code == 0, result.output


def test_outputs_check_treats_a_sibling_as_outside(built):
    shards = (built / "shards").resolve()
    assert not within(built / "shards-evil" / "m", shards)
    assert within(shards / "m", shards) and within(shards, shards)
    assert check_output(built / "shards-evil-out" / "m", "--out", [("--shards", shards)]) is not None
    with pytest.raises(UsageError, match="shard folder"):
        check_output(shards / "m", "--out")
