"""Hostile input, reading side: shard folders and manifests that are damaged, crafted or tampered with.

Whatever reads shards (``open_dataset``/``load_graph``, ``verify``, ``export``, ``info``) must either
return exactly what was built or fail with one ``BadShards`` line naming the file and what is wrong:
never read or write outside the folder, never hang on a device or a FIFO, never return wrong data.
``verify`` must reject a shard or manifest in which any single checked fact was changed — each check
has a tampered folder here (``tamper_cell`` rewrites one cell of a shard and fixes the manifest's
sha256, so that the byte check cannot mask the semantic one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tpuprep
from tpuprep.cli import main
from tpuprep.errors import BadShards, FatalError, UsageError
from tpuprep.export import export, npz_relpath
from tpuprep.io.files import sha256_file
from tpuprep.shards.stamp import shard_id
from tpuprep.verify import verify

GRAPH = "layout:xla:random"  # tiny profile: 2 train graphs, the first with duplicate configs
TILE = "tile:xla"


# --------------------------------------------------------------------------- helpers


def read_manifest_json(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def write_manifest_json(root: Path, manifest) -> None:
    (root / "manifest.json").write_text(json.dumps(manifest))


def edit_manifest(root: Path, edit: Callable[[dict], None]) -> None:
    m = read_manifest_json(root)
    edit(m)
    write_manifest_json(root, m)


def first_graph(root: Path, collection: str = GRAPH, split: str = "train") -> str:
    return tpuprep.open_dataset(root).graph_ids(collection, split)[0]


def shard_of(root: Path, graph_id: str, part: str) -> tuple[int, Path]:
    """(manifest index, file) of the ``part`` ("graphs" | "configs") shard holding ``graph_id``."""
    collection = graph_id.rsplit(":", 1)[0]
    m = read_manifest_json(root)
    split = next(i["path"].split("/")[-2] for i in m["inputs"] if i.get("graph_id") == graph_id)
    for i, s in enumerate(m["shards"]):
        if (s["collection"] == collection and s["split"] == split and s["table"].endswith(part)
                and s["first_graph"] <= graph_id <= s["last_graph"]):
            return i, root / s["path"]
    raise AssertionError(f"no {part} shard holds {graph_id}")


def fix_manifest_hash(root: Path, shard: Path) -> None:
    """Make the manifest's bytes, sha256, rows and shard id of ``shard`` match the file again."""
    def edit(m: dict) -> None:
        for s in m["shards"]:
            if root / s["path"] == shard:
                s["bytes"], s["sha256"] = shard.stat().st_size, sha256_file(shard)
                s["rows"] = pq.ParquetFile(shard).metadata.num_rows
                s["shard_id"] = shard_id(pq.ParquetFile(shard).metadata.metadata)
                if s["shard_id"] is None:
                    del s["shard_id"]
    edit_manifest(root, edit)


def rewrite_shard(root: Path, shard: Path, change: Callable[[pa.Table], pa.Table],
                  compression: str | dict = "zstd") -> None:
    """Rewrite a shard row group by row group (boundaries, schema and its metadata kept, ``compression``
    (by default zstd on every column, which verify accepts: schema 3.0 wrote every column so), page
    checksums, graph_id statistics), ``change`` applied to the whole table first; fix the manifest."""
    pf = pq.ParquetFile(shard)
    sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
    table = change(pf.read())
    sizes[-1] += table.num_rows - sum(sizes)  # rows added or dropped: the last group absorbs them
    with pq.ParquetWriter(shard, table.schema, compression=compression, write_page_checksum=True) as w:
        start = 0
        for size in sizes:
            w.write_table(table.slice(start, size), row_group_size=max(size, 1))
            start += size
    fix_manifest_hash(root, shard)


def tamper_cell(root: Path, graph_id: str, part: str, column: str, change: Callable, row: int = 0) -> None:
    """Replace one cell: ``column`` of the ``row``-th row of ``graph_id`` in its ``part`` shard becomes
    ``change(old value as Python)``; the manifest's sha256 is fixed to match."""
    _, shard = shard_of(root, graph_id, part)

    def edit(table: pa.Table) -> pa.Table:
        rows = np.flatnonzero(np.array(table.column("graph_id").to_pylist()) == graph_id)
        j = int(rows[row])
        values = table.column(column).to_pylist()
        new = change(values[j])
        assert new != values[j], f"tamper of {column} changed nothing"
        values[j] = new
        field = table.schema.field(column)
        return table.set_column(table.schema.get_field_index(column), field, pa.array(values, field.type))

    rewrite_shard(root, shard, edit)


def problems_of(src: Path, root: Path, collection: str = GRAPH) -> list[str]:
    return verify(src, root, collections=[collection]).problems


def refused_by_reader_and_verify(shards: Path, src: Path, gid: str, reader_says: str, verify_says: str) -> None:
    """``load_graph(gid)`` of the tampered ``shards`` is one ``BadShards`` matching ``reader_says``, and
    ``verify`` against ``src`` reports a problem holding ``verify_says``."""
    with pytest.raises(BadShards, match=reader_says):
        tpuprep.open_dataset(shards).load_graph(gid)
    assert any(verify_says in p for p in problems_of(src, shards))



def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``tpuprep ...`` in a subprocess of this interpreter (a hang fails the test instead of the suite)."""
    repo = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    code = "import sys; from tpuprep.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def one_line_error(text: str) -> str:
    """The single 'error: ...' line of a command's stderr (no traceback)."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    assert "Traceback" not in text
    return lines[0]


# --------------------------------------------------------------------------- the clean build is accepted


def test_the_untouched_copy_verifies_clean(src, shards):
    assert verify(src, shards).problems == []
    tpuprep.open_dataset(shards).load_graph(first_graph(shards))


# --------------------------------------------------------------------------- (6) export writes only under --dst-npz

EVIL = f"{GRAPH}:../../../../../PWNED/evil"


def test_npz_relpath_refuses_unsafe_graph_ids():
    assert npz_relpath(f"{GRAPH}:ok_name.1", GRAPH, "train") == "layout/xla/random/train/ok_name.1.npz"
    for gid, coll in ((EVIL, GRAPH), (f"{GRAPH}:/etc/evil", GRAPH), (f"{GRAPH}:..", GRAPH),
                      ("layout:xla:nowhere:x", "layout:xla:nowhere"), (f"{GRAPH}:x", TILE)):
        with pytest.raises(BadShards):
            npz_relpath(gid, coll, "train")
    with pytest.raises(BadShards):
        npz_relpath(f"{GRAPH}:x", GRAPH, "../..")


def _rename_graph(root: Path, old: str, new: str) -> None:
    """A crafted folder: graph ``old`` renamed ``new`` everywhere (shards, their hashes, the manifest)."""
    for part in ("graphs", "configs"):
        _, shard = shard_of(root, old, part)

        def edit(t: pa.Table) -> pa.Table:
            ids = [new if g == old else g for g in t.column("graph_id").to_pylist()]
            return t.set_column(t.schema.get_field_index("graph_id"), t.schema.field("graph_id"),
                                pa.array(ids, pa.string()))

        rewrite_shard(root, shard, edit)

    def manifest(m: dict) -> None:  # the input's path is left alone: the reader takes the split from it
        for s in m["shards"]:
            s["first_graph"] = new if s["first_graph"] == old else s["first_graph"]
            s["last_graph"] = new if s["last_graph"] == old else s["last_graph"]
        for i in m["inputs"]:
            if i.get("graph_id") == old:
                i["graph_id"] = new
    edit_manifest(root, manifest)


def test_export_refuses_a_graph_id_that_would_escape_dst_npz(shards, tmp_path):
    _rename_graph(shards, first_graph(shards), EVIL)
    dst = tmp_path / "out" / "a" / "npz"
    with pytest.raises(BadShards, match=r"graph id .*PWNED"):
        export(shards, dst)
    assert not list(tmp_path.rglob("evil.npz"))
    assert not dst.exists() or not list(dst.rglob("*.npz"))  # refused before anything was written
    result = cli("export", "--shards", str(shards), "--dst-npz", str(dst), "-q")
    assert result.returncode == 1 and "PWNED" in one_line_error(result.stderr)
    assert not list(tmp_path.rglob("evil.npz"))


# --------------------------------------------------------------------------- (7) manifest paths stay in the folder


def _point_shard(root: Path, index: int, path: str, *, bytes_: int | None = None, sha: str | None = None) -> None:
    def edit(m: dict) -> None:
        s = m["shards"][index]
        s["path"] = path
        if bytes_ is not None:
            s["bytes"] = bytes_
        if sha is not None:
            s["sha256"] = sha
    edit_manifest(root, edit)


@pytest.mark.parametrize("how", ["dotdot", "absolute"])
def test_a_shard_path_out_of_the_folder_is_refused(shards, src, tmp_path, how):
    """A manifest pointing a shard at a foreign Parquet file (a perfect copy, right sha256) outside the
    folder: nothing reads it."""
    gid = first_graph(shards)
    i, shard = shard_of(shards, gid, "configs")
    foreign = tmp_path / "foreign.parquet"
    shutil.copy(shard, foreign)
    path = os.path.relpath(foreign, shards) if how == "dotdot" else str(foreign)
    _point_shard(shards, i, path)
    with pytest.raises(BadShards, match=rf"manifest.json: shards\[{i}\]"):
        tpuprep.open_dataset(shards).load_graph(gid)
    result = cli("verify", "--src", str(src), "--dst", str(shards), "-q")
    assert result.returncode == 1 and f"shards[{i}]" in one_line_error(result.stderr)


def test_a_symlink_leading_out_of_the_folder_is_refused(shards, src, tmp_path):
    gid = first_graph(shards)
    i, shard = shard_of(shards, gid, "configs")
    foreign = tmp_path / "foreign.parquet"
    shutil.move(shard, foreign)
    shard.symlink_to(foreign)
    with pytest.raises(BadShards, match=rf"shards\[{i}\]\.path .*outside the shard folder"):
        tpuprep.open_dataset(shards).load_graph(gid)
    problems = verify(src, shards).problems
    assert any(f"shards[{i}]" in p and "outside" in p for p in problems), problems


def test_a_symlink_inside_the_folder_is_followed(shards):
    """Links that stay inside the folder are fine (e.g. a deduplicated copy)."""
    gid = first_graph(shards)
    _, shard = shard_of(shards, gid, "configs")
    moved = shards / "layout" / "moved.parquet"
    shutil.move(shard, moved)
    shard.symlink_to(moved)
    assert tpuprep.open_dataset(shards).load_graph(gid).num_unique_configs > 0


@pytest.mark.parametrize("kind", ["dev-zero-link", "fifo", "folder"])
def test_verify_does_not_hang_on_a_device_or_fifo(shards, src, kind):
    """Shard entries of 0 bytes whose file is /dev/zero (through a link), a FIFO or a folder: verify used
    to hash /dev/zero or block on the FIFO forever. Each is refused with one line, promptly."""
    gid = first_graph(shards)
    i, shard = shard_of(shards, gid, "configs")
    shard.unlink()
    if kind == "dev-zero-link":
        shard.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(shard)
    else:
        shard.mkdir()
    _point_shard(shards, i, read_manifest_json(shards)["shards"][i]["path"], bytes_=0)
    result = cli("verify", "--src", str(src), "--dst", str(shards), "-q", timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"shards[{i}]" in result.stdout
    with pytest.raises(BadShards, match=rf"shards\[{i}\]"):
        tpuprep.open_dataset(shards).load_graph(gid)


# --------------------------------------------------------------------------- (4) no URLs


def test_a_url_never_reads_a_local_folder_of_that_name(synth_shards, tmp_path, monkeypatch, s3_env):
    """``s3://bucket/shards`` is the bucket (here a test server without that bucket), never the local
    folder ``s3:/bucket/shards``; the folder stays reachable as a relative path."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(synth_shards, tmp_path / "s3:" / "bucket" / "shards")
    # "s3:/bucket" is what pathlib makes of "s3://bucket": the same URL (one rule, io.files.looks_like_url)
    for url in ("s3://bucket/shards", Path("s3://bucket/shards")):
        with pytest.raises(FatalError, match=r"s3://bucket/shards/manifest.json: the bucket s3://bucket does not"):
            tpuprep.open_dataset(url)
    with pytest.raises(UsageError, match="unknown storage scheme nosuch://"):
        tpuprep.open_dataset("nosuch://bucket/shards")
    with pytest.raises(BadShards, match=f"{tmp_path}/nothing/manifest.json: missing"):
        tpuprep.open_dataset(f"file://{tmp_path}/nothing")  # file:// is a local path
    assert tpuprep.open_dataset("./s3:/bucket/shards").collections


# --------------------------------------------------------------------------- (11) the manifest is checked on read


def _drop_configs_shard(m: dict) -> None:
    m["shards"] = [s for s in m["shards"]
                   if not (s["collection"] == GRAPH and s["split"] == "valid" and s["table"].endswith("configs"))]


MANIFEST_DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing": (lambda r: (r / "manifest.json").unlink(), r"manifest.json: missing"),
    "empty-object": (lambda r: write_manifest_json(r, {}), r"manifest.json: has no 'format'"),
    "array": (lambda r: write_manifest_json(r, []), r"manifest.json: is an array"),
    "not-json": (lambda r: (r / "manifest.json").write_text('{"format": '), r"manifest.json: is not valid JSON"),
    "nan": (lambda r: (r / "manifest.json").write_text('{"format": NaN}'), r"manifest.json: is not valid JSON"),
    "binary": (lambda r: (r / "manifest.json").write_bytes(b"\xff\xfe\x00"), r"manifest.json: is not UTF-8"),
    "folder": (lambda r: ((r / "manifest.json").unlink(), (r / "manifest.json").mkdir()), r"not a regular file"),
    "fifo": (lambda r: ((r / "manifest.json").unlink(), os.mkfifo(r / "manifest.json")), r"not a regular file"),
    "deep": (lambda r: (r / "manifest.json").write_text("[" * 100_000 + "]" * 100_000), r"nested too deeply"),
    "format": (lambda r: edit_manifest(r, lambda m: m.update(format="parquet-shards")), r"format: unknown format"),
    "version-99": (lambda r: edit_manifest(r, lambda m: m.update(schema_version=99)), r"schema_version: unknown schema version 99"),
    "version-4.0": (lambda r: edit_manifest(r, lambda m: m.update(schema_version="4.0")),
                    r"unknown schema version '4.0'.*a newer tpuprep"),
    # schema 2.x stored codes as plain int32 (3.0: byte planes), 1.x every configurable node's codes (no
    # config_node_tie): a 3.x reader must refuse both, and say to rebuild
    "version-2.1": (lambda r: edit_manifest(r, lambda m: m.update(schema_version="2.1")),
                    r"unknown schema version '2.1': this tpuprep reads schema 3.x \(an older tpuprep.*rebuild"),
    "version-1.1": (lambda r: edit_manifest(r, lambda m: m.update(schema_version="1.1")), r"unknown schema version '1.1'"),
    "no-shards-key": (lambda r: edit_manifest(r, lambda m: m.pop("shards")), r"has no 'shards'"),
    "options-folds": (lambda r: edit_manifest(r, lambda m: m["options"].update(folds=0)), r"options.folds"),
    "options-type": (lambda r: edit_manifest(r, lambda m: m["options"].update(dedup="yes")), r"options.dedup"),
    "options-unknown": (lambda r: edit_manifest(r, lambda m: m["options"].update(turbo=True)), r"unknown option 'turbo'"),
    "options-missing": (lambda r: edit_manifest(r, lambda m: m["options"].pop("hops")), r"options: has no 'hops'"),
    "input-graph-id": (lambda r: edit_manifest(r, lambda m: m["inputs"][0].update(graph_id="layout:tpu:x:y")),
                       r"inputs\[0\].graph_id: .*unknown collection"),
    "input-path": (lambda r: edit_manifest(r, lambda m: m["inputs"][0].update(path="../../x.npz")), r"inputs\[0\].path"),
    "input-counts": (lambda r: edit_manifest(r, lambda m: m["inputs"][0]["counts"].update(configs="9")), r"inputs\[0\].counts.configs"),
    "shard-table": (lambda r: edit_manifest(r, lambda m: m["shards"][0].update(table="evil")), r"shards\[0\].table"),
    "shard-path": (lambda r: edit_manifest(r, lambda m: m["shards"][0].update(path="../../../../etc/passwd")),
                   r"shards\[0\].path: '../../../../etc/passwd' is not layout/"),
    "shard-entry-missing": (lambda r: edit_manifest(r, _drop_configs_shard), r"no configs shard entry holds graph 'layout:xla:random:"),
    "collection-missing": (lambda r: edit_manifest(r, lambda m: m["collections"].pop(GRAPH)), r"is not one of the manifest's collections|missing from collections"),
    "stats-length": (lambda r: edit_manifest(r, lambda m: m["collections"][GRAPH]["node_feat_stats"]["mean"].pop()), r"node_feat_stats.mean: is not 134 numbers"),
}


@pytest.mark.parametrize("damage", sorted(MANIFEST_DAMAGE))
def test_a_damaged_manifest_is_one_badshards_line(shards, damage):
    breaks, message = MANIFEST_DAMAGE[damage]
    breaks(shards)
    with pytest.raises(BadShards, match=message) as info:
        tpuprep.open_dataset(shards)
    assert "\n" not in str(info.value) and "manifest.json" in str(info.value)


@pytest.mark.parametrize("command", ["info", "verify", "export"])
def test_commands_report_a_damaged_manifest_in_one_line(shards, src, tmp_path, command):
    edit_manifest(shards, lambda m: m.update(schema_version=99))
    args = {"info": ["info", str(shards)], "verify": ["verify", "--src", str(src), "--dst", str(shards)],
            "export": ["export", "--shards", str(shards), "--dst-npz", str(tmp_path / "npz"), "-q"]}[command]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "unknown schema version 99" in one_line_error(result.stderr)


def test_full_schema_validation_is_part_of_verify(shards, src):
    """What the cheap check on open lets through (an unknown key) the JSON Schema in verify catches."""
    edit_manifest(shards, lambda m: m.update(comment="hand-edited"))
    tpuprep.open_dataset(shards)
    problems = verify(src, shards, collections=[TILE]).problems
    assert any("does not conform to schemas/manifest.schema.json" in p and "comment" in p for p in problems), problems


def test_a_graph_missing_from_its_graphs_shard_is_badshards(shards):
    gid = first_graph(shards)
    _, shard = shard_of(shards, gid, "graphs")
    rewrite_shard(shards, shard, lambda t: t.filter(pc.not_equal(t.column("graph_id"), gid)))
    with pytest.raises(BadShards, match=rf"graph '{gid}' is listed, but no train graphs shard"):
        tpuprep.open_dataset(shards).load_graph(gid)


def test_missing_configs_rows_are_badshards_not_fewer_configs(shards, src):
    """A configs row dropped (hash fixed): load_graph used to return one config fewer, silently."""
    gid = first_graph(shards)
    _, shard = shard_of(shards, gid, "configs")
    rewrite_shard(shards, shard, lambda t: t.slice(1))
    refused_by_reader_and_verify(shards, src, gid, r"cannot be read back: .*num_unique_configs", "not config_id 0..")


def test_a_shard_holding_another_table_is_badshards(shards, tmp_path):
    gid = first_graph(shards)
    gi, graphs = shard_of(shards, gid, "graphs")
    ci, configs = shard_of(shards, gid, "configs")
    copy = Path(shutil.copytree(shards, tmp_path / "swapped"))

    def swap(m: dict) -> None:
        m["shards"][gi]["path"], m["shards"][ci]["path"] = m["shards"][ci]["path"], m["shards"][gi]["path"]
    edit_manifest(copy, swap)
    with pytest.raises(BadShards, match=r"shards\[\d+\]\.path"):
        tpuprep.open_dataset(copy)
    shutil.copy(configs, graphs)  # the right name, the other table's bytes (hash fixed)
    fix_manifest_hash(shards, graphs)
    with pytest.raises(BadShards, match=r"holds table 'layout_configs', the manifest says 'layout_graphs'"):
        tpuprep.open_dataset(shards).load_graph(gid)


def test_a_shard_whose_columns_differ_from_the_schema_is_badshards(shards, src):
    """A graphs shard rewritten with num_edges as int64 (hash fixed): not the table the schema defines."""
    gid = first_graph(shards)
    _, shard = shard_of(shards, gid, "graphs")

    def widen(t: pa.Table) -> pa.Table:
        i = t.schema.get_field_index("num_edges")
        return t.set_column(i, pa.field("num_edges", pa.int64(), nullable=False), t.column(i).cast(pa.int64()))
    rewrite_shard(shards, shard, widen)
    refused_by_reader_and_verify(shards, src, gid, r"column num_edges is int64 not null, the layout_graphs schema says int32", "column num_edges is int64")


def test_a_second_graphs_row_of_a_graph_is_badshards(shards, src):
    gid = first_graph(shards)
    _, shard = shard_of(shards, gid, "graphs")
    rewrite_shard(shards, shard, lambda t: pa.concat_tables([t, t.filter(pc.equal(t.column("graph_id"), gid))]))
    refused_by_reader_and_verify(shards, src, gid, rf"a second graphs row of '{gid}'", f"{gid} has more than one graphs row")


# --------------------------------------------------------------------------- (11) page checksums


def _silently_wrong_flip(shard: Path, column: str) -> int:
    """A byte offset inside ``column``'s data page whose flip decodes without error to different
    values when checksums are not verified (the silent corruption the checksums exist for)."""
    data = shard.read_bytes()
    good = pq.ParquetFile(shard).read(columns=[column])
    meta = pq.ParquetFile(shard).metadata.row_group(0)
    chunk = next(meta.column(j) for j in range(meta.num_columns) if meta.column(j).path_in_schema == column)
    end = chunk.data_page_offset + chunk.total_compressed_size
    for offset in range(end - 1, chunk.data_page_offset, -1):
        flipped = bytearray(data)
        flipped[offset] ^= 0x01
        try:
            got = pq.ParquetFile(pa.BufferReader(bytes(flipped))).read(columns=[column])
        except (OSError, pa.ArrowException):
            continue
        if not got.equals(good):
            return offset
    raise AssertionError(f"no silent flip found in {column}")


def test_a_flipped_byte_in_a_data_page_is_badshards_not_wrong_runtimes(shards, src):
    gid = first_graph(shards)
    _, shard = shard_of(shards, gid, "configs")
    before = tpuprep.open_dataset(shards).load_graph(gid).config_runtime.copy()
    offset = _silently_wrong_flip(shard, "runtime")
    data = bytearray(shard.read_bytes())
    data[offset] ^= 0x01
    shard.write_bytes(bytes(data))
    unchecked = pq.ParquetFile(shard).read(columns=["graph_id", "runtime"])
    rows = np.array(unchecked.column("graph_id").to_pylist()) == gid
    assert not np.array_equal(unchecked.column("runtime").to_numpy()[rows], before)  # silently wrong unchecked
    with pytest.raises(BadShards, match=rf"{shard.name}: row group 0 is corrupt: .*CRC"):
        tpuprep.open_dataset(shards).load_graph(gid)
    problems = problems_of(src, shards)
    assert any("shard bytes changed" in p for p in problems), problems
    assert any(gid in p and "CRC" in p for p in problems), problems
    fix_manifest_hash(shards, shard)  # even with the sha256 made to match, the page checksum speaks
    assert any(gid in p and "CRC" in p for p in problems_of(src, shards))


# --------------------------------------------------------------------------- (11, 14) every verify check rejects a tampered folder


def _shift_code(codes: bytes) -> bytes:
    values = np.frombuffer(codes, "u1").reshape(4, -1).T.copy().view("<i4").ravel()  # byte planes → int32
    values[0] = (values[0] + 1) % 7**6
    return values.view("u1").reshape(-1, 4).T.tobytes()


def _set(index: int | tuple, value) -> Callable:
    def change(cell):
        cell = json.loads(json.dumps(cell))
        if isinstance(index, tuple):
            cell[index[0]][index[1]] = value(cell[index[0]][index[1]])
        else:
            cell[index] = value(cell[index])
        return cell
    return change


def _first_pad(cell) -> tuple[int, int]:
    for i, row in enumerate(cell):
        for j in (95, 96, 97, 98, 101, 102, 103, 104, *range(134, 140)):
            if row[j] == -1:
                return i, j
    raise AssertionError("no -1 padding in this graph")


def _undo_one_repad(cell):
    i, j = _first_pad(cell)
    cell = json.loads(json.dumps(cell))
    cell[i][j] = 0.0
    return cell


def _bump(v):
    return v + 1


# (shard part, column, change of the cell, collection, expected problem)
SHARD_TAMPER = {
    "node_feat": ("graphs", "node_feat", _set((0, 0), lambda v: v + 0.5), GRAPH, "node_feat differs"),
    "node_feat-repad": ("graphs", "node_feat", _undo_one_repad, GRAPH, "node_feat differs"),
    "node_opcode": ("graphs", "node_opcode", _set(0, lambda v: (v + 1) % 256), GRAPH, "node_opcode differs"),
    "edges": ("graphs", "edge_index", _set(0, lambda e: [e[1], e[0]]), GRAPH, "edges differ"),
    "node_index": ("graphs", "node_index", _set(-1, _bump), GRAPH, "kept node set differs"),
    "node_config_ids": ("graphs", "node_config_ids", _set(0, _bump), GRAPH, "node_config_ids differ"),
    "node_splits": ("graphs", "node_splits", _set(0, _bump), GRAPH, "node_splits differ"),
    "config_inverse": ("graphs", "config_inverse", _set(-1, lambda v: 0 if v else 1), GRAPH, "group_size mismatch"),
    "runtime_original": ("graphs", "config_runtime_original", _set(0, _bump), GRAPH, "original runtimes differ"),
    "codes": ("configs", "codes", _shift_code, GRAPH, "is not reconstructed"),
    "runtimes": ("configs", "runtime", _bump, GRAPH, "config_runtime is not the group minimum"),
    "group_size": ("configs", "group_size", _bump, GRAPH, "group_size mismatch"),
    "first_index": ("configs", "first_index", _bump, GRAPH, "first_index is not the first occurrence"),
    "config_id": ("configs", "config_id", lambda v: v + 7, GRAPH, "not config_id 0.."),
    "tile-config_feat": ("configs", "config_feat", _set(8, lambda v: v + 1), TILE, "tile config_feat rows are not reconstructed"),
    "tile-normalizer": ("configs", "normalizer", lambda v: v * 3, TILE, "tile runtime/normalizer is not the group minimum"),
    "tile-normalizers_original": ("graphs", "config_runtime_normalizers_original", _set(0, _bump), TILE, "original normalizers differ"),
    # the scalar columns of the graphs row
    "num_edges": ("graphs", "num_edges", _bump, GRAPH, "graphs column num_edges"),
    "num_nodes": ("graphs", "num_nodes", _bump, GRAPH, "graphs column num_nodes"),
    "num_nodes_original": ("graphs", "num_nodes_original", _bump, GRAPH, "graphs column num_nodes_original"),
    "num_edges_original": ("graphs", "num_edges_original", _bump, GRAPH, "graphs column num_edges_original"),
    "num_configs": ("graphs", "num_configs", _bump, GRAPH, "graphs column num_configs"),
    "num_unique_configs": ("graphs", "num_unique_configs", _bump, GRAPH, "num_unique_configs"),
    "num_repad_anomalies": ("graphs", "num_repad_anomalies", _bump, GRAPH, "graphs column num_repad_anomalies"),
    "num_config_nodes": ("graphs", "num_config_nodes", lambda v: v * 2, GRAPH, "cannot be"),
    # the codes are read by the graph's stored-column count and ties: both checked, never read out of range
    "num_config_columns": ("graphs", "num_config_columns", _bump, GRAPH, "config_node_tie names"),
    "config_node_tie": ("graphs", "config_node_tie", lambda tie: [*tie[:-1], max(tie) + 1], GRAPH,
                        "config_node_tie names"),
    "codes-width": ("configs", "codes", lambda v: v[:-12], GRAPH, "codes values of"),
    "fold": ("graphs", "fold", lambda v: (v + 1) % 5, GRAPH, "graphs column fold"),
    "source_sha256": ("graphs", "source_sha256", lambda v: "0" * 64, GRAPH, "graphs column source_sha256"),
    "source_bytes": ("graphs", "source_bytes", _bump, GRAPH, "graphs column source_bytes"),
    "source_file": ("graphs", "source_file", lambda v: v.replace("train", "valid"), GRAPH, "graphs column source_file"),
    "split": ("graphs", "split", lambda v: "valid", GRAPH, "split column holds"),
}


@pytest.mark.parametrize("check", sorted(SHARD_TAMPER))
def test_verify_rejects_a_tampered_shard(shards, src, check):
    part, column, change, collection, expected = SHARD_TAMPER[check]
    gid = first_graph(shards, collection, "valid" if collection == TILE else "train")
    assert problems_of(src, shards, collection) == []
    tamper_cell(shards, gid, part, column, change)
    problems = problems_of(src, shards, collection)
    assert any(expected in p for p in problems), problems
    assert not any("shard bytes changed" in p for p in problems), problems  # the semantic check spoke


def test_verify_names_a_shard_compressed_with_another_codec(shards, src):
    """Each column must be compressed as its schema says (layout configs: codes and runtimes zstd, the
    id and count columns uncompressed, or zstd as schema 3.0 wrote them): a shard rewritten with other codecs (a dict leaves
    the columns it does not name uncompressed) is named with every column that differs."""
    gid = first_graph(shards, GRAPH, "train")
    _, shard = shard_of(shards, gid, "configs")
    assert problems_of(src, shards) == []
    rewrite_shard(shards, shard, lambda t: t, compression={"codes": "snappy", "config_id": "gzip"})
    problems = [p for p in problems_of(src, shards) if "compressed with" in p]
    assert len(problems) == 1, problems
    for said in ("column codes is compressed with ['SNAPPY'], the layout_configs schema says zstd",
                 "column config_id is compressed with ['GZIP'], the layout_configs schema says none",
                 "column runtime is compressed with ['UNCOMPRESSED'], the layout_configs schema says zstd"):
        assert said in problems[0], problems
    assert "column graph_id" not in problems[0]  # uncompressed, as its schema says
    rewrite_shard(shards, shard, lambda t: t, compression="none")
    problems = [p for p in problems_of(src, shards) if "compressed with" in p]
    assert problems and "column codes is compressed with ['UNCOMPRESSED']" in problems[0], problems
    assert "column config_id" not in problems[0]
    rewrite_shard(shards, shard, lambda t: t, compression="zstd")  # every column, as schema 3.0 wrote them
    assert not [p for p in problems_of(src, shards) if "compressed with" in p]


def test_verify_finds_two_unique_layout_configs_with_equal_values(shards, src):
    """Layout configs are compared by digest in verify (never held whole): a copied row must still be
    caught as a duplicate unique config, besides the row it no longer reconstructs."""
    gid = first_graph(shards, GRAPH, "train")
    _, shard = shard_of(shards, gid, "configs")
    table = pq.read_table(shard, columns=["graph_id", "codes"])
    rows = np.flatnonzero(np.array(table.column("graph_id").to_pylist()) == gid)
    first = table.column("codes")[int(rows[0])].as_py()
    tamper_cell(shards, gid, "configs", "codes", lambda _: first, row=1)
    problems = problems_of(src, shards)
    assert any(gid in p and "unique configs are not pairwise distinct" in p for p in problems), problems
    assert any(gid in p and "is not reconstructed" in p for p in problems), problems


def _stats(key: str, j: int, change: Callable) -> Callable[[dict], None]:
    def edit(m: dict) -> None:
        stats = m["collections"][GRAPH]["node_feat_stats"]
        if key == "count":
            stats["count"] = change(stats["count"])
        else:
            stats[key][j] = change(stats[key][j])
    return edit


def _input(gid_part: str, key: str, change: Callable) -> Callable[[dict], None]:
    def edit(m: dict) -> None:
        entry = next(i for i in m["inputs"] if i.get("graph_id", "").startswith(gid_part))
        entry["counts"][key] = change(entry["counts"][key])
    return edit


def _totals(split: str | None, key: str) -> Callable[[dict], None]:
    def edit(m: dict) -> None:
        coll = m["collections"][GRAPH]
        target = coll["totals"] if split is None else coll["splits"][split]
        target[key] += 1
    return edit


def _options(**changes) -> Callable[[dict], None]:
    return lambda m: m["options"].update(changes)


def _quarantine(m: dict) -> None:
    m["quarantine"].append({"file": "layout/xla/random/train/ghost.npz", "key": None, "error": "made up"})


# manifest tamper -> expected problem
MANIFEST_TAMPER = {
    "stats-mean": (_stats("mean", 3, lambda v: v + 0.25), "node_feat_stats.mean[3]"),
    "stats-std": (_stats("std", 21, lambda v: v * 1.001 + 1e-6), "node_feat_stats.std[21]"),
    "stats-count": (_stats("count", 0, _bump), "node_feat_stats.count"),
    "stats-null": (lambda m: m["collections"][GRAPH].update(node_feat_stats=None), "node_feat_stats is null"),
    "input-counts-nodes_after": (_input(GRAPH, "nodes_after", _bump), "counts.nodes_after"),
    "input-counts-unique_configs": (_input(GRAPH, "unique_configs", _bump), "counts.unique_configs"),
    "input-counts-anomalies": (_input(GRAPH, "anomalies", _bump), "counts.anomalies"),
    "input-counts-bytes_in": (_input(GRAPH, "bytes_in", _bump), "counts.bytes_in"),
    "split-totals-configs": (_totals("train", "configs"), "splits.train.configs"),
    "split-totals-bytes_out": (_totals("valid", "bytes_out"), "splits.valid.bytes_out"),
    "collection-totals-graphs": (_totals(None, "graphs"), "totals.graphs"),
    "options-dedup": (_options(dedup=False), "options say --no-dedup"),
    "options-repad": (_options(repad=False), "--no-repad"),
    "options-hops": (_options(hops=2), "kept node set differs"),
    "options-prune": (_options(prune=False), "kept node set differs"),
    "options-folds": (_options(folds=7), "graphs column fold"),
    "quarantine": (_quarantine, "quarantine lists"),
}


@pytest.mark.parametrize("check", sorted(MANIFEST_TAMPER))
def test_verify_rejects_a_tampered_manifest(shards, src, check):
    edit, expected = MANIFEST_TAMPER[check]
    edit_manifest(shards, edit)
    problems = problems_of(src, shards)
    assert any(expected in p for p in problems), problems


def test_verify_catches_a_graph_the_manifest_does_not_list(shards, src):
    """A graphs row added for a graph the manifest does not know (hash fixed)."""
    gid = first_graph(shards)
    _, shard = shard_of(shards, gid, "graphs")

    def extra_row(t: pa.Table) -> pa.Table:
        row = t.filter(pc.equal(t.column("graph_id"), gid))
        ids = pa.array([gid + "x"], pa.string())
        row = row.set_column(row.schema.get_field_index("graph_id"), row.schema.field("graph_id"), ids)
        return pa.concat_tables([t, row])
    rewrite_shard(shards, shard, extra_row)
    problems = problems_of(src, shards)
    assert any("graphs the manifest does not list" in p for p in problems), problems
