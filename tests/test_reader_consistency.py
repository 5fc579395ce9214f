"""Issue #27 item 3: a Dataset open while its folder is rebuilt (``--overwrite``) must not return another
graph's rows. Every shard repeats the manifest's build id (Parquet key-value metadata), checked when the
reader opens a shard; and the reader checks the graph id of what it returns (the graphs row's
``graph_id``, the configs row groups' ``graph_id`` statistics), which also covers shards written before
build ids."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from npzfactory import layout_arrays, write

import tpuprep
import tpuprep.build
import tpuprep.shards.manifest
from tpuprep.build import build
from tpuprep.errors import BadShards
from tpuprep.shards.reader import unique_config_columns
from tpuprep.shards.stamp import BUILD_ID_KEY

FOLDER = "layout/xla/default/train"
NAMES = ["a", "b", "c", "d"]


def _source(root, names):
    for i, name in enumerate(names):
        write(root, f"{FOLDER}/{name}.npz", layout_arrays(seed=ord(name), c=20 + 7 * i))
    return root


def _build(tmp_path, names, dst, **kwargs):
    src = tmp_path / f"src-{''.join(names)}"
    _source(src, names)
    build(src, dst, **kwargs)


def _no_build_ids(monkeypatch):
    """Builds as tpuprep wrote them before build ids (schema < 3.2): none in the manifest or shards."""
    monkeypatch.setattr(tpuprep.build, "build_id", lambda *a: None)
    monkeypatch.setattr(tpuprep.shards.manifest, "build_id", lambda *a: None)


def _shards(dst):
    return sorted(dst.rglob("*.parquet"))


def test_every_shard_repeats_the_manifests_build_id(tmp_path):
    dst = tmp_path / "shards"
    _build(tmp_path, NAMES, dst)
    bid = json.loads((dst / "manifest.json").read_text())["build_id"]
    assert len(bid) == 32 and int(bid, 16) >= 0
    assert _shards(dst) and all(pq.ParquetFile(p).metadata.metadata[BUILD_ID_KEY] == bid.encode()
                                for p in _shards(dst))
    again = tmp_path / "again"  # deterministic: the same inputs give the same id (and the same bytes)
    _build(tmp_path, NAMES, again)
    assert json.loads((again / "manifest.json").read_text())["build_id"] == bid
    for a, b in zip(_shards(dst), _shards(again), strict=True):
        assert a.read_bytes() == b.read_bytes(), a
    other = tmp_path / "other"
    _build(tmp_path, NAMES[:3], other)
    assert json.loads((other / "manifest.json").read_text())["build_id"] != bid


def test_an_overwrite_under_an_open_dataset_fails_with_one_line_naming_the_folder(tmp_path):
    dst = tmp_path / "shards"
    _build(tmp_path, NAMES, dst)
    ds = tpuprep.open_dataset(dst)
    ids = ds.graph_ids()
    before = {g: ds.load_graph(ids[0]) for g in ids[:1]}  # the shard index is built and cached
    _build(tmp_path, [n for n in NAMES if n != "b"], dst, overwrite=True)  # drops ids[1]
    for call in (lambda: ds.load_graph(ids[1]), lambda: ds.graph_row(ids[1]),
                 lambda: ds.load_graph(ids[2]), lambda: ds.sample_configs(ids[2], 5),
                 lambda: ds.read_configs(ids[3], [0, 1]), lambda: ds.config_runtimes(ids[3])):
        with pytest.raises(BadShards) as info:
            call()
        message = str(info.value)
        assert message.startswith(f"{dst}: the shard folder changed after it was opened") and "\n" not in message
        assert "open it again" in message
    fresh = tpuprep.open_dataset(dst)
    assert fresh.graph_ids() == [ids[0], *ids[2:]]
    assert np.array_equal(fresh.load_graph(ids[0]).config_codes, before[ids[0]].config_codes)


def test_without_build_ids_the_graph_id_of_what_is_read_is_checked(tmp_path, monkeypatch):
    """The exact repro of the issue, on shards without build ids (as older tpuprep wrote them, which
    still read): after an overwrite that drops ids[1], load_graph(ids[1]) returned ids[2]'s rows and
    graph_row(ids[1]) said ids[2]."""
    _no_build_ids(monkeypatch)
    dst = tmp_path / "shards"
    _build(tmp_path, NAMES, dst)
    assert "build_id" not in json.loads((dst / "manifest.json").read_text())
    assert all(BUILD_ID_KEY not in pq.ParquetFile(p).metadata.metadata for p in _shards(dst))
    ds = tpuprep.open_dataset(dst)
    ids = ds.graph_ids()
    full = {g: ds.load_graph(g) for g in ids}  # old shards without a build id still read
    assert [g.graph_id for g in full.values()] == ids
    ds = tpuprep.open_dataset(dst)
    ds.load_graph(ids[0])
    columns = unique_config_columns(ds.load_graph(ids[2], configs=False))  # no configs shard opened
    _build(tmp_path, [n for n in NAMES if n != "b"] + ["e"], dst, overwrite=True)  # as many shards
    with pytest.raises(BadShards, match=rf"holds graph '{ids[2]}', not '{ids[1]}'"):
        ds.graph_row(ids[1])
    with pytest.raises(BadShards, match=rf"holds graph '{ids[2]}', not '{ids[1]}'"):
        ds.load_graph(ids[1])
    with pytest.raises(BadShards, match=rf"holds graph_id '{ids[3]}', where the configs of '{ids[2]}'"):
        ds.read_configs(ids[2], [0, 3], columns)
    with pytest.raises(BadShards, match=rf"holds graph_id '{ids[3]}', where the configs of '{ids[2]}'"):
        ds.config_runtimes(ids[2])
