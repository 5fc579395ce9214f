"""The suite's blind spots of issue #27: one-line bugs planted in the build and in verify that passed
the whole suite. Each test here fails with its planted bug (noted in the test) and passes without it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write
from test_hostile_read import (
    GRAPH,
    TILE,
    edit_manifest,
    first_graph,
    problems_of,
    read_manifest_json,
    rewrite_shard,
    tamper_cell,
)

import tpuprep.build
import tpuprep.shards.writer
from tpuprep.cli import main
from tpuprep.errors import BadShards
from tpuprep.verify import verify


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _build(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["build", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    return r.exit_code, r.output


# --------------------------------------------------------------------------- verify: shard-side facts


@pytest.mark.parametrize("collection", [GRAPH, TILE])
def test_verify_reports_a_tampered_runtime_spread(shards, src, collection):
    """Planted: verify's runtime_spread comparison dropped (or the writer storing hi - lo wrongly)."""
    gid = first_graph(shards, collection, "valid" if collection == TILE else "train")
    assert problems_of(src, shards, collection) == []
    tamper_cell(shards, gid, "configs", "runtime_spread", lambda v: v + 1)
    problems = problems_of(src, shards, collection)
    assert any(gid in p and "runtime_spread is not" in p for p in problems), problems
    assert not any("shard bytes changed" in p for p in problems), problems


def test_built_runtime_spread_is_the_groups_largest_minus_smallest(tmp_path):
    """Independent of verify: the stored runtime_spread of every unique config, from the input file."""
    root = tmp_path / "npz"
    arrays = layout_arrays(3, n=12, c=40)
    arrays["config_runtime"] = np.arange(1000, 1040, dtype=np.int64) * 1000  # duplicates disagree
    write(root, "layout/xla/random/train/g.npz", arrays)
    code, out = _build("--src", str(root), "--dst", str(tmp_path / "out"), "-q")
    assert code == 0, out
    g = tpuprep.open_dataset(tmp_path / "out").load_graph("layout:xla:random:g")
    cfg = arrays["node_config_feat"].reshape(40, -1)
    _, first, inverse = np.unique(cfg, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    runtime = arrays["config_runtime"]
    order = np.argsort(first)  # unique configs are numbered in first-occurrence order
    want = np.array([runtime[inverse == k].max() - runtime[inverse == k].min() for k in order])
    assert want.any()  # the test has teeth: some group's runtimes disagree
    assert np.array_equal(g.config_runtime_spread, want)


def _shard_index(m: dict, collection: str, split: str, table: str) -> int:
    return next(i for i, s in enumerate(m["shards"]) if s["collection"] == collection and s["split"] == split
                and s["table"].endswith(table))


@pytest.mark.parametrize("table", ["graphs", "configs"])
def test_verify_reports_a_changed_last_graph(shards, src, table):
    """Planted: verify compares only the first graph of a shard with the manifest. The manifest is
    changed so the cheap check still accepts it (the last graph only grows)."""
    m = read_manifest_json(shards)
    i = _shard_index(m, GRAPH, "train", table)
    last = m["shards"][i]["last_graph"]
    edit_manifest(shards, lambda m: m["shards"][i].update(last_graph=last + "z"))
    tpuprep.open_dataset(shards)  # the cheap check accepts it: only verify can tell
    problems = problems_of(src, shards)
    assert any(m["shards"][i]["path"] in p and "the manifest says" in p and last + "z" in p
               for p in problems), problems


def test_verify_reports_a_changed_first_graph(shards, src):
    m = read_manifest_json(shards)
    i = _shard_index(m, GRAPH, "train", "configs")
    first = m["shards"][i]["first_graph"]
    edit_manifest(shards, lambda m: m["shards"][i].update(first_graph=first[:-1]))
    problems = problems_of(src, shards)
    assert any("the manifest says" in p and first[:-1] + ".." in p for p in problems), problems


def test_a_shard_listed_under_another_splits_name_is_refused(shards, src):
    """Planted: the manifest check no longer compares a shard path's split with its entry's split."""
    m = read_manifest_json(shards)
    i = _shard_index(m, GRAPH, "train", "graphs")
    assert "valid" in m["collections"][GRAPH]["splits"]
    edit_manifest(shards, lambda m: m["shards"][i].update(split="valid"))
    with pytest.raises(BadShards, match=r"shards\[\d+\]\.path: .*train-.* is not .*valid-<i>-of-<n>\.parquet"):
        tpuprep.open_dataset(shards)
    with pytest.raises(BadShards):
        verify(src, shards)


def test_verify_reports_a_shard_moved_to_another_split(shards, src):
    """The file renamed and listed consistently as the valid split's, although it holds train rows:
    refused, by the manifest check (train graphs lose their shard) or by verify (the split column)."""
    m = read_manifest_json(shards)
    i = _shard_index(m, GRAPH, "train", "graphs")
    old = m["shards"][i]["path"]
    new = old.replace("/train-", "/valid-")
    j = _shard_index(m, GRAPH, "valid", "graphs")
    (shards / m["shards"][j]["path"]).unlink()
    os.rename(shards / old, shards / new)

    def edit(m: dict) -> None:
        m["shards"][i].update(split="valid", path=new)
        del m["shards"][j]
    edit_manifest(shards, edit)
    try:
        problems = verify(src, shards).problems
    except BadShards as exc:
        assert "no graphs shard entry holds graph" in str(exc)
    else:
        assert any("split column holds" in p for p in problems), problems


# --------------------------------------------------------------------------- build


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "npz"
    write(root, "layout/xla/random/train/g0.npz", layout_arrays(0))
    write(root, "layout/xla/random/train/g1.npz", layout_arrays(1))
    write(root, "tile/xla/train/t0.npz", tile_arrays(0))
    return root


def test_dry_run_with_a_refused_entry_exits_3(tree, tmp_path):
    """Planted: the dry run's exit code ignores refused entries."""
    code, out = _build("--src", str(tree), "--dst", str(tmp_path / "a"), "--dry-run")
    assert code == 0, out
    (tree / "layout/xla/random/train/link.npz").symlink_to(tree / "layout/xla/random/train/g0.npz")
    code, out = _build("--src", str(tree), "--dst", str(tmp_path / "b"), "--dry-run")
    assert code == 3, out
    assert "link.npz" in out and "would convert 3 files; 1 refused" in out
    assert not (tmp_path / "b").exists()


def _interrupt_after_parts(root: Path, dst: Path, monkeypatch) -> None:
    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C between the conversion and the merge

    with monkeypatch.context() as m:
        m.setattr(tpuprep.build, "merge_task", crash)
        with pytest.raises(KeyboardInterrupt):
            tpuprep.build.build(root, dst)


@pytest.mark.parametrize("part", ["configs.parquet", "graphs.arrow"])
def test_resume_rebuilds_a_deleted_staged_part(tree, tmp_path, monkeypatch, part):
    """Planted: ``_reusable`` checks only one of a batch's two part files."""
    clean = tmp_path / "clean"
    assert _build("--src", str(tree), "--dst", str(clean), "-q")[0] == 0
    dst = tmp_path / "out"
    _interrupt_after_parts(tree, dst, monkeypatch)
    victim = dst / f".tpuprep/parts/layout/xla/random/train/g1.{part}"
    victim.unlink()
    r = CliRunner().invoke(main, ["build", "--src", str(tree), "--dst", str(dst), "--resume", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["converted"], doc["reused"]) == (1, 2)
    assert _files(dst) == _files(clean)


def test_an_unforeseen_value_error_is_quarantined(tree, tmp_path, monkeypatch):
    """Planted: ValueError dropped from the conversion's catch-all (only BadInput quarantined)."""
    real = tpuprep.build.convert_file

    def convert(inp, *args, **kwargs):
        if inp.relpath.endswith("g1.npz"):
            raise ValueError("operands could not be broadcast together")  # a bug, not a BadInput
        return real(inp, *args, **kwargs)

    monkeypatch.setattr(tpuprep.build, "convert_file", convert)
    log = tmp_path / "log"
    r = CliRunner().invoke(main, ["build", "--src", str(tree), "--dst", str(tmp_path / "out"), "--json",
                                  "--log-file", str(log)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    assert doc["converted"] == 2
    assert doc["quarantined"] == [{"file": "layout/xla/random/train/g1.npz", "key": None,
                                   "error": "ValueError: operands could not be broadcast together"}]
    # and the person watching is told, on stderr and in the log (planted: file events never reported)
    line = "quarantined: layout/xla/random/train/g1.npz: ValueError: operands could not be broadcast together"
    assert line in r.stderr.splitlines()
    assert any(entry.endswith(" " + line) for entry in log.read_text().splitlines())


def _many_configs(tmp_path: Path) -> Path:
    """A layout graph with 300 unique configs: 5 row groups of 64 once the group budget is shrunk."""
    root = tmp_path / "npz"
    arrays = layout_arrays(5, n=12, c=320)
    rng = np.random.default_rng(5)
    cfg = rng.integers(-1, 6, (320, 3, 18)).astype(np.float32)
    cfg[300:] = cfg[:20]  # duplicates across slices
    arrays["node_config_feat"] = cfg
    write(root, "layout/xla/random/train/big.npz", arrays)
    write(root, "layout/xla/random/train/small.npz", layout_arrays(6))
    return root


def test_a_layout_graph_written_in_several_slices_equals_one_write(tmp_path, monkeypatch):
    """No test graph is larger than one write slice (8 MiB of codes): shrink the row groups to 64
    configs and the slice to one row group, so config ids continue across five ``write_table`` calls.
    Planted: a slice numbering its configs from 0 again (or skipping rows between slices)."""
    root = _many_configs(tmp_path)
    monkeypatch.setattr(tpuprep.shards.writer, "LAYOUT_CONFIGS_ROW_GROUP_CODE_BYTES", 1)
    assert _build("--src", str(root), "--dst", str(tmp_path / "whole"), "-q")[0] == 0
    calls = []
    real = pq.ParquetWriter.write_table

    def counted(self, table, *args, **kwargs):
        calls.append(table.num_rows)
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(tpuprep.shards.writer, "LAYOUT_WRITE_SLICE_BYTES", 1)
    monkeypatch.setattr(pq.ParquetWriter, "write_table", counted)
    assert _build("--src", str(root), "--dst", str(tmp_path / "sliced"), "-q")[0] == 0
    assert calls.count(64) >= 4, calls  # the big graph was written one row group at a time
    assert _files(tmp_path / "sliced") == _files(tmp_path / "whole")
    g = tpuprep.open_dataset(tmp_path / "sliced").load_graph("layout:xla:random:big")
    assert g.num_unique_configs == 300
    shard = max((tmp_path / "sliced/layout/xla/random/configs").glob("train-*"), key=lambda p: p.stat().st_size)
    assert pq.ParquetFile(shard).metadata.num_row_groups == 5  # 300 configs, 64 per group
    assert verify(root, tmp_path / "sliced").problems == []


# --------------------------------------------------------------------------- unguarded one-liners found by planting


def test_a_finished_build_leaves_only_its_outputs(tree, tmp_path):
    """Planted: the staging folder not removed after the manifest is written (a local build; the bucket
    tests check the same of an object store)."""
    dst = tmp_path / "out"
    assert _build("--src", str(tree), "--dst", str(dst), "-q")[0] == 0
    assert sorted(p.name for p in dst.iterdir()) == ["README.md", "layout", "manifest.json", "quarantine.jsonl", "tile"]
    assert not [p for p in dst.rglob("*") if p.is_file() and not p.name.endswith((".parquet", ".json", ".md", ".jsonl"))]


def test_a_refused_entry_is_listed_with_its_size(tree, tmp_path):
    """Planted: a refused entry's manifest ``bytes`` always 0."""
    bad = tree / "layout/xla/random/train/bad name.npz"
    bad.write_bytes(b"x" * 1234)
    dst = tmp_path / "out"
    assert _build("--src", str(tree), "--dst", str(dst), "-q")[0] == 3
    entry = next(e for e in json.loads((dst / "manifest.json").read_text())["inputs"] if e["path"].endswith("bad name.npz"))
    assert (entry["status"], entry["bytes"], entry["sha256"]) == ("quarantined", 1234, None)


def test_a_file_still_growing_while_it_is_hashed_is_quarantined(tree, tmp_path, monkeypatch):
    """Planted: the size read is no longer compared with the size at open. A writer appends to the
    file right after the build opened it (its stamp taken): the bytes hashed are more than the stamp says."""
    real = tpuprep.build.open_source

    def open_then_grow(inp):
        fh, stamp = real(inp)
        if inp.relpath.endswith("g1.npz"):
            with open(inp.path, "ab") as w:
                w.write(b"\0" * 100)
        return fh, stamp

    monkeypatch.setattr(tpuprep.build, "open_source", open_then_grow)
    r = CliRunner().invoke(main, ["build", "--src", str(tree), "--dst", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 3, r.output
    (q,) = json.loads(r.stdout)["quarantined"]
    assert q["file"] == "layout/xla/random/train/g1.npz" and "changed while it was being read" in q["error"]


def test_a_file_rewritten_while_it_is_converted_is_quarantined(tree, tmp_path, monkeypatch):
    """Planted: the stamp is no longer taken again after the conversion. The file is rewritten in
    place (same size, new mtime) while it is being converted."""
    real = tpuprep.build.convert_file

    def convert_while_rewritten(inp, *args, **kwargs):
        g = real(inp, *args, **kwargs)
        if inp.relpath.endswith("g1.npz"):
            data = Path(inp.path).read_bytes()
            Path(inp.path).write_bytes(data)
            st = os.stat(inp.path)
            os.utime(inp.path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return g

    monkeypatch.setattr(tpuprep.build, "convert_file", convert_while_rewritten)
    r = CliRunner().invoke(main, ["build", "--src", str(tree), "--dst", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 3, r.output
    (q,) = json.loads(r.stdout)["quarantined"]
    assert q["file"] == "layout/xla/random/train/g1.npz" and "changed while it was being converted" in q["error"]


@pytest.mark.parametrize("flag", ["overwrite", "resume"])
def test_a_bucket_rebuild_removes_the_old_manifest_first(tree, bucket, monkeypatch, flag):
    """Planted: the old manifest of an object-store destination is not deleted before the rebuild.
    An interrupted --overwrite / --resume must not leave a manifest above shards it was replacing."""
    from tpuprep.io.storage import resolve

    url = f"{bucket}/shards"
    tpuprep.build.build(tree, url)
    store = resolve(url)
    assert store.exists("manifest.json")

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tpuprep.build, "merge_task", crash)
    with pytest.raises(KeyboardInterrupt):
        tpuprep.build.build(tree, url, **{flag: True})
    assert not resolve(url).exists("manifest.json")


def test_a_graph_listed_twice_in_the_manifest_is_refused(shards):
    """Planted: the manifest check no longer refuses a converted graph listed twice."""
    def twice(m: dict) -> None:
        entry = next(e for e in m["inputs"] if e["status"] == "ok")
        m["inputs"].insert(m["inputs"].index(entry), dict(entry))
    edit_manifest(shards, twice)
    with pytest.raises(BadShards, match=r"inputs\[\d+\]\.graph_id: .* is listed twice"):
        tpuprep.open_dataset(shards)


@pytest.mark.parametrize("table", ["graphs", "configs"])
def test_verify_reports_shard_rows_out_of_graph_order(tmp_path, table):
    """Planted: verify's sort check on a shard's graph_id column made False. Two middle graphs'
    rows are swapped, so the first and last graph still match the manifest."""
    root = tmp_path / "npz"
    for i in range(4):
        write(root, f"tile/xla/train/t{i}.npz", tile_arrays(i))
    dst = tmp_path / "out"
    assert _build("--src", str(root), "--dst", str(dst), "-q")[0] == 0
    assert verify(root, dst).problems == []
    m = read_manifest_json(dst)
    (entry,) = [s for s in m["shards"] if s["table"].endswith(table)]
    path = dst / entry["path"]
    ids = pq.read_table(path, columns=["graph_id"]).column("graph_id").to_pylist()
    a, b = sorted(set(ids))[1:3]
    order = ([j for j, g in enumerate(ids) if g < a] + [j for j, g in enumerate(ids) if g == b]
             + [j for j, g in enumerate(ids) if g == a] + [j for j, g in enumerate(ids) if g > b])
    rewrite_shard(dst, path, lambda t: t.take(order))
    problems = verify(root, dst).problems
    assert any(entry["path"] in p and "rows are not sorted by graph_id" in p for p in problems), problems


@pytest.mark.parametrize("table", ["graphs", "configs"])
def test_verify_reports_a_graph_missing_from_the_shards(tmp_path, table):
    """Planted: verify's check that the shards hold every graph the manifest lists made False. A middle
    graph's rows are dropped (first and last graph unchanged, hash fixed)."""
    root = tmp_path / "npz"
    for i in range(3):
        write(root, f"tile/xla/train/t{i}.npz", tile_arrays(i))
    dst = tmp_path / "out"
    assert _build("--src", str(root), "--dst", str(dst), "-q")[0] == 0
    (entry,) = [s for s in read_manifest_json(dst)["shards"] if s["table"].endswith(table)]
    middle = "tile:xla:t1"

    def drop(t):
        keep = [j for j, g in enumerate(t.column("graph_id").to_pylist()) if g != middle]
        return t.take(keep)
    rewrite_shard(dst, dst / entry["path"], drop)
    problems = verify(root, dst).problems
    assert f"tile:xla train: {table} shards lack 1 graphs the manifest lists, e.g. {middle}" in problems, problems


def _two_graph_shard(m: dict, table: str) -> int:
    return next(i for i, s in enumerate(m["shards"]) if s["table"].endswith(table) and s["first_graph"] < s["last_graph"])


@pytest.mark.parametrize("table", ["graphs", "configs"])
def test_a_graph_beyond_its_shards_last_graph_is_refused(shards, table):
    """Planted: the manifest check only looks for a shard starting at or before a graph, not one whose
    range reaches it. The shard's last_graph is cut to its first, so its last graph has no shard."""
    m = read_manifest_json(shards)
    i = _two_graph_shard(m, table)
    edit_manifest(shards, lambda m: m["shards"][i].update(last_graph=m["shards"][i]["first_graph"]))
    last = m["shards"][i]["last_graph"]
    with pytest.raises(BadShards, match=rf"no {table} shard entry holds graph '{last}'"):
        tpuprep.open_dataset(shards)


def test_a_shard_with_first_graph_after_last_graph_is_refused(shards):
    """Planted: the manifest check accepts a shard whose first_graph sorts after its last_graph."""
    m = read_manifest_json(shards)
    i = _two_graph_shard(m, "configs")
    first, last = m["shards"][i]["first_graph"], m["shards"][i]["last_graph"]
    edit_manifest(shards, lambda m: m["shards"][i].update(first_graph=last, last_graph=first))
    with pytest.raises(BadShards, match=r"shards\[\d+\]: first_graph .* are not an ordered pair"):
        tpuprep.open_dataset(shards)


@pytest.mark.parametrize("folder", ["mydata", "layout/xla/random/notes", ".tpuprep/parts/mine"])
@pytest.mark.parametrize("flag", [None, "--overwrite", "--resume"])
def test_a_foreign_folder_in_dst_is_refused_and_kept(tree, tmp_path, folder, flag):
    """Planted: ``destination.contents`` no longer counts an unknown folder as foreign, so a --dst holding
    only someone's (empty or not) folder looked empty, and --overwrite went ahead."""
    dst = tmp_path / "out"
    if flag:
        assert _build("--src", str(tree), "--dst", str(dst), "-q")[0] == 0
    (dst / folder).mkdir(parents=True)
    code, out = _build("--src", str(tree), "--dst", str(dst), "-q", *([flag] if flag else []))
    assert code == 2, out
    assert f"{folder}/" in out and "tpuprep did not write" in out
    assert (dst / folder).is_dir()


def test_shard_names_count_their_shards(tree, tmp_path):
    """Planted: ``shard_relpath`` writing a wrong N into ``<split>-i-of-N``. Every (collection, table,
    split) holds shards 0..N-1 of N, whatever N is (a tiny shard size makes several graphs shards)."""
    from tpuprep.options import BuildOptions
    from tpuprep.shards.layout import SHARD_NAME

    for i in range(2, 5):
        write(tree, f"layout/xla/random/train/g{i}.npz", layout_arrays(i))
    report = tpuprep.build.build(tree, tmp_path / "out", BuildOptions(shard_bytes=1))
    groups: dict[str, list[str]] = {}
    for s in report.manifest["shards"]:
        folder, name = s["path"].rsplit("/", 1)
        assert SHARD_NAME.fullmatch(name)
        groups.setdefault(f"{folder}/{s['split']}", []).append(name)
    assert max(len(v) for v in groups.values()) >= 5
    for key, names in groups.items():
        split = key.rsplit("/", 1)[1]
        assert sorted(names) == [f"{split}-{i:05d}-of-{len(names):05d}.parquet" for i in range(len(names))], key


def test_a_lost_batch_of_several_files_says_so(tree):
    """Planted: the lost-batch message no longer says that the other files of the batch were set aside."""
    from tpuprep.inputs import discover
    from tpuprep.options import BuildOptions

    for i in range(1, 3):
        write(tree, f"tile/xla/train/t{i}.npz", tile_arrays(i))
    inputs, _ = discover(tree)
    (batch,) = [b for b in tpuprep.build.plan_batches(inputs) if b[0].kind == "tile"]
    result = tpuprep.build.lost_batch_result(batch, BuildOptions(), "died 3 times (out of memory?)")
    assert [r["path"] for r in result["records"]] == [f"tile/xla/train/t{i}.npz" for i in range(3)]
    for r in result["records"]:
        assert r["status"] == "quarantined" and r["error"] == (
            "the workers converting this file died 3 times (out of memory?) (it was converting 3 files "
            "together; all of them are set aside)")
    assert result["parts"] is None


def test_resume_converts_again_an_input_changed_since_it_was_staged(tree, tmp_path, monkeypatch):
    """Planted: the resume fingerprint keeps the relpaths but drops each file's size and mtime, so a
    changed input's stale parts were reused."""
    dst = tmp_path / "out"
    _interrupt_after_parts(tree, dst, monkeypatch)
    changed = tree / "layout/xla/random/train/g1.npz"
    write(tree, "layout/xla/random/train/g1.npz", layout_arrays(7, c=12))
    st = changed.stat()
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a new mtime, whatever the clock
    r = CliRunner().invoke(main, ["build", "--src", str(tree), "--dst", str(dst), "--resume", "--json"])
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["converted"], json.loads(r.stdout)["reused"]) == (1, 2)
    clean = tmp_path / "clean"
    assert _build("--src", str(tree), "--dst", str(clean), "-q")[0] == 0
    assert _files(dst) == _files(clean)


def test_a_missing_src_is_named_as_missing(tmp_path):
    """Planted: resolve_source's existence test dropped (the next check then says something else)."""
    code, out = _build("--src", str(tmp_path / "nowhere"), "--dst", str(tmp_path / "out"))
    assert code == 2
    assert f"error: --src {tmp_path / 'nowhere'} does not exist" in out


def test_layout_row_groups_respect_row_group_bytes(tmp_path):
    """Planted: the layout writer ignoring ``row_group_bytes`` (only the codes-size rule). A budget of
    4 KiB holds fewer configs than the 64 a row group has at least otherwise."""
    from tpuprep.options import BuildOptions

    root = _many_configs(tmp_path)
    budget = 4096
    tpuprep.build.build(root, tmp_path / "out", BuildOptions(row_group_bytes=budget))
    shard = max((tmp_path / "out/layout/xla/random/configs").glob("train-*"), key=lambda p: p.stat().st_size)
    pf = pq.ParquetFile(shard)
    table = pf.read()
    per_row = table.nbytes / table.num_rows
    rows = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
    assert sum(rows) >= 300  # the big graph (and the small one) in this shard
    assert max(rows) < 64 and max(rows) * per_row <= 1.5 * budget, (rows, per_row)


def test_the_cards_sizes_are_the_shard_files(tree, tmp_path):
    """Planted: the card's ``download_size`` written as 0. Each config's download_size is the bytes of
    its shard files on disk, and its splits' num_examples their rows."""
    import yaml

    dst = tmp_path / "out"
    assert _build("--src", str(tree), "--dst", str(dst), "-q")[0] == 0
    front = yaml.safe_load((dst / "README.md").read_text().split("---\n")[1])
    paths = {c["config_name"]: [f["path"] for f in c["data_files"]] for c in front["configs"]}
    assert len(front["dataset_info"]) == 4
    for info in front["dataset_info"]:
        files = [p for pattern in paths[info["config_name"]] for p in dst.glob(pattern)]
        assert files and info["download_size"] == sum(p.stat().st_size for p in files), info
        assert sum(s["num_examples"] for s in info["splits"]) == sum(pq.ParquetFile(p).metadata.num_rows for p in files)


def test_an_empty_plain_folder_is_named_as_empty(tmp_path):
    """Planted: the message for a --collection/--split folder with no .npz files dropped (the next one
    then asks for a TpuGraphs tree, which the user did not mean)."""
    (tmp_path / "flat").mkdir()
    code, out = _build("--src", str(tmp_path / "flat"), "--dst", str(tmp_path / "out"),
                       "--collection", "layout:xla:random", "--split", "train")
    assert code == 2
    assert f"error: no .npz files directly in --src {tmp_path / 'flat'}" in out


def test_a_refused_member_of_the_src_archive_is_named_inside_it(tmp_path):
    """Planted: a refused member of the archive given as --src recorded by its absolute path instead
    of ``<archive name>!<member>``."""
    import io
    import tarfile

    good = write(tmp_path / "plain", "g0.npz", layout_arrays(0))
    archive = tmp_path / "npz_all.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(good, arcname="npz/layout/xla/random/train/g0.npz")
        info = tarfile.TarInfo("npz/layout/xla/random/train/bad name.npz")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    r = CliRunner().invoke(main, ["build", "--src", str(archive), "--dst", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 3, r.output
    (q,) = json.loads(r.stdout)["quarantined"]
    assert q["file"] == "npz_all.tar!npz/layout/xla/random/train/bad name.npz", q


@pytest.mark.parametrize("column", ["runtime_spread", "runtime"])
@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_verify_reports_runtimes_on_a_test_graph(tmp_path, kind, column):
    """A test graph (no runtimes) given one runtime or runtime_spread cell. The reader takes a column
    holding any null as absent, so before the shard-side null check verify saw nothing."""
    root, dst = tmp_path / "npz", tmp_path / "out"
    if kind == "layout":
        write(root, "layout/xla/random/test/g.npz", layout_arrays(0))
        gid = "layout:xla:random:g"
    else:
        write(root, "tile/xla/test/g.npz", tile_arrays(0))
        gid = "tile:xla:g"
    assert _build("--src", str(root), "--dst", str(dst), "-q")[0] == 0
    assert verify(root, dst).problems == []
    tamper_cell(dst, gid, "configs", column, lambda v: 0)
    problems = verify(root, dst).problems
    shard = f"{kind}/xla/random/configs" if kind == "layout" else "tile/xla/configs"
    assert any(p.startswith(f"{shard}/test-00000-of-00001.parquet: column {column} holds ") and
               "a test shard holds only nulls" in p for p in problems), problems


def test_verify_reports_a_runtime_spread_on_a_whole_test_graph(tmp_path):
    """Planted: verify no longer checks that a test graph has no runtime_spread (every cell set, so the
    reader returns the column)."""
    root, dst = tmp_path / "npz", tmp_path / "out"
    write(root, "layout/xla/random/test/g.npz", layout_arrays(0))
    assert _build("--src", str(root), "--dst", str(dst), "-q")[0] == 0
    (entry,) = [s for s in read_manifest_json(dst)["shards"] if s["table"].endswith("configs")]

    def fill(t):
        i = t.schema.get_field_index("runtime_spread")
        return t.set_column(i, t.schema.field(i), pa.array([0] * t.num_rows, pa.int64()))
    rewrite_shard(dst, dst / entry["path"], fill)
    problems = verify(root, dst).problems
    assert "layout:xla:random:g: test graph has runtime_spread" in problems, problems


@pytest.mark.parametrize("column", ["runtime", "normalizer"])
def test_verify_reports_a_missing_runtime_on_a_train_graph(tmp_path, column):
    """One null runtime or normalizer in a tile train shard: named by the shard-side null check, and
    the graph check says so instead of a TypeError traceback."""
    root, dst = tmp_path / "npz", tmp_path / "out"
    write(root, "tile/xla/train/g.npz", tile_arrays(0))
    assert _build("--src", str(root), "--dst", str(dst), "-q")[0] == 0
    tamper_cell(dst, "tile:xla:g", "configs", column, lambda v: None)
    problems = verify(root, dst).problems
    assert any(p.startswith(f"tile/xla/configs/train-00000-of-00001.parquet: column {column} holds 1 nulls")
               and "a train shard holds none" in p for p in problems), problems
    assert "tile:xla:g: runtimes are missing from the shards (null)" in problems
