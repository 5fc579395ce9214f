"""Issue #27 item 3: a Dataset open while its folder is rebuilt (``--overwrite``) must not return another
graph's rows. Every shard carries a content id in its Parquet key-value metadata, written with the file
(a configs part's by its task, a graphs shard's at merge time) and repeated by its manifest entry, which
the reader compares when it opens a shard; and the reader checks the graph id of what it returns (the
graphs row's ``graph_id``, the configs row groups' ``graph_id`` statistics), which also covers shards
written before shard ids. Configs parts are placed by hard link: the id costs no copy."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from npzfactory import layout_arrays, write

import tpuprep
import tpuprep.build
from tpuprep.build import build
from tpuprep.errors import BadShards
from tpuprep.io.local_store import LocalShardFile
from tpuprep.shards.layout import STAGING
from tpuprep.shards.stamp import SHARD_ID_KEY, merged_id

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


def _no_shard_ids(monkeypatch):
    """Builds as tpuprep wrote them before shard ids (schema < 3.2): none in the manifest or shards."""
    monkeypatch.setattr(tpuprep.build, "part_id", lambda *a: None)


def _shards(dst):
    return sorted(dst.rglob("*.parquet"))


def _ids(dst) -> dict[str, str]:
    """shard path -> the shard id of its manifest entry (every entry has one), checked against its footer."""
    entries = json.loads((dst / "manifest.json").read_text())["shards"]
    assert "build_id" not in json.loads((dst / "manifest.json").read_text())
    ids = {e["path"]: e["shard_id"] for e in entries}
    for rel, sid in ids.items():
        assert len(sid) == 32 and int(sid, 16) >= 0
        assert pq.ParquetFile(dst / rel).metadata.metadata[SHARD_ID_KEY] == sid.encode(), rel
    assert sorted(ids) == [p.relative_to(dst).as_posix() for p in _shards(dst)]
    return ids


def test_every_shard_carries_the_id_its_manifest_entry_repeats(tmp_path):
    dst = tmp_path / "shards"
    _build(tmp_path, NAMES, dst)
    ids = _ids(dst)
    configs = [sid for rel, sid in sorted(ids.items()) if "/configs/" in rel]
    graphs = [sid for rel, sid in ids.items() if "/graphs/" in rel]
    assert len(configs) == len(NAMES) == len(set(configs)) and graphs == [merged_id(configs)]
    again = tmp_path / "again"  # deterministic: the same inputs give the same ids (and the same bytes)
    _build(tmp_path, NAMES, again)
    assert _ids(again) == ids
    for a, b in zip(_shards(dst), _shards(again), strict=True):
        assert a.read_bytes() == b.read_bytes(), a
    other = tmp_path / "other"  # d's content changes: d's configs shard and the graphs shard get new ids
    src = _source(tmp_path / "src-other", NAMES)
    write(src, f"{FOLDER}/d.npz", layout_arrays(seed=99, c=41))
    build(src, other)
    changed = {rel for rel, sid in _ids(other).items() if ids[rel] != sid}
    assert changed == {rel for rel in ids if "/graphs/" in rel or rel.endswith("-00003-of-00004.parquet")}


def test_configs_parts_are_placed_by_hard_link_not_copied(tmp_path, monkeypatch):
    """The shard id costs no copy: every configs shard is its task's part file, linked into place."""
    remove_own = tpuprep.build._remove_own
    monkeypatch.setattr(tpuprep.build, "_remove_own",  # keep the staged parts to compare with
                        lambda dst, under: None if under == (STAGING,) else remove_own(dst, under))
    dst = tmp_path / "shards"
    _build(tmp_path, NAMES, dst)
    parts = sorted((dst / STAGING).rglob("*.parquet"))
    configs = sorted((dst / FOLDER.rsplit("/", 1)[0]).glob("configs/*.parquet"))
    assert len(parts) == len(configs) == len(NAMES)
    assert sorted(os.stat(p).st_ino for p in parts) == sorted(os.stat(c).st_ino for c in configs)
    assert all(os.stat(c).st_nlink == 2 for c in configs)


def test_a_shard_whose_id_is_not_its_manifest_entrys_fails_with_one_line(tmp_path):
    """The check is per shard: a manifest entry naming another id than its shard's footer (another build of
    that shard) is refused when the shard is opened."""
    dst = tmp_path / "shards"
    _build(tmp_path, NAMES, dst)
    m = json.loads((dst / "manifest.json").read_text())
    entry = next(e for e in m["shards"] if e["path"].endswith("configs/train-00002-of-00004.parquet"))
    entry["shard_id"] = "0" * 32
    (dst / "manifest.json").write_text(json.dumps(m))
    ds = tpuprep.open_dataset(dst)
    ids = ds.graph_ids()
    with pytest.raises(BadShards) as info:
        ds.load_graph(ids[2])
    message = str(info.value)
    assert message.startswith(f"{dst}: the shard folder changed after it was opened") and "\n" not in message
    assert "configs/train-00002-of-00004.parquet is shard " in message and f"said {'0' * 32}" in message
    entry["shard_id"] = "not an id"
    (dst / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BadShards, match=r"shards\[\d+\]\.shard_id: 'not an id' is not a shard id"):
        tpuprep.open_dataset(dst)


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


def test_without_shard_ids_the_graph_id_of_what_is_read_is_checked(tmp_path, monkeypatch):
    """The exact repro of the issue, on shards without shard ids (as older tpuprep wrote them, which
    still read): after an overwrite that drops ids[1], load_graph(ids[1]) returned ids[2]'s rows and
    graph_row(ids[1]) said ids[2]. Now the files are seen to have changed (rewritten in place here,
    the same inodes); with that check planted away, what is read still never passes for ids[1]."""
    _no_shard_ids(monkeypatch)
    dst = tmp_path / "shards"
    _build(tmp_path, NAMES, dst)
    assert all("shard_id" not in e for e in json.loads((dst / "manifest.json").read_text())["shards"])
    assert all(SHARD_ID_KEY not in pq.ParquetFile(p).metadata.metadata for p in _shards(dst))
    ds = tpuprep.open_dataset(dst)
    ids = ds.graph_ids()
    full = {g: ds.load_graph(g) for g in ids}  # old shards without a build id still read
    assert [g.graph_id for g in full.values()] == ids
    ds = tpuprep.open_dataset(dst)
    ds.load_graph(ids[0])
    ds.load_graph(ids[2], configs=False)  # its structure read before the rewrite: no configs shard opened
    other = tmp_path / "other"
    _build(tmp_path, [n for n in NAMES if n != "b"] + ["e"], other)  # as many shards
    for shard in _shards(other):  # copied over the open files in place: the same inodes, other rows
        shutil.copyfile(shard, dst / shard.relative_to(other))
    with monkeypatch.context() as blind:  # were the rewrite unseen (ShardFile.verify), what is read says it
        blind.setattr(LocalShardFile, "verify", lambda self: None)
        for call in (lambda: ds.graph_row(ids[1]), lambda: ds.load_graph(ids[1])):
            with pytest.raises(BadShards, match=rf"holds graph '{ids[2]}', not '{ids[1]}'|corrupt"):
                call()
    for call in (lambda: ds.graph_row(ids[1]), lambda: ds.load_graph(ids[1]),
                 lambda: ds.read_configs(ids[2], [0, 3]), lambda: ds.config_runtimes(ids[3])):
        with pytest.raises(BadShards, match=r"shards: the shard folder changed after it was opened \(.*rewritten"):
            call()  # as it is: the rewrite is seen first, by the files themselves (issue #36 item 1)
    # ids[2]'s structure was read before the rewrite: its runtimes are derived from it (no file read), the
    # version opened, never the rewritten file's
    assert np.array_equal(ds.config_runtimes(ids[2]), full[ids[2]].config_runtime)


def test_a_dataset_without_shard_ids_sees_a_rebuild_with_them(tmp_path, monkeypatch):
    """An old folder (no ids) rebuilt by this tpuprep under an open dataset: its shards now have ids
    the old manifest does not list, which is refused when a shard is opened."""
    with monkeypatch.context() as patch:
        _no_shard_ids(patch)
        dst = tmp_path / "shards"
        _build(tmp_path, NAMES, dst)
    ds = tpuprep.open_dataset(dst)
    ids = ds.graph_ids()
    _build(tmp_path, NAMES, dst, overwrite=True)
    with pytest.raises(BadShards, match=r"the shard folder changed after it was opened \(.* is shard "
                                        r"[0-9a-f]{32}, the manifest said None\): open it again"):
        ds.load_graph(ids[0])
    assert tpuprep.open_dataset(dst).load_graph(ids[0]).graph_id == ids[0]
