"""Issue #30 item 1: ``verify`` compares layout configs in the stored domain (``verify/layout.py``): the
input's rows encoded by verify's own NumPy (base-7 codes of the graph's tie columns) against the
``codes`` byte planes as stored, never decoded.

Each test tampers one stored fact of one graph (the manifest's sha256 fixed, so only the semantic check
can speak) and names the line verify must report: a flipped byte in any plane of one stored code, two
stored configs swapped, a code outside base 7's range, a tie the input does not hold, tie columns
numbered out of order; and, with the unique configs renumbered out of first-occurrence order (the
two-pass path), exact rows still pass and a changed one is still found.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_hostile_read import (
    GRAPH,
    TILE,
    first_graph,
    fix_manifest_hash,
    rewrite_shard,
    shard_of,
    tamper_cell,
)

import tpuprep
from tpuprep.verify import verify
from tpuprep.verify.reference import LayoutEncoder, RowKeys, codes_from_planes, tie_columns


def _problems(src: Path, shards: Path) -> list[str]:
    """verify's problems but the manifest's bytes_out totals (a rewritten shard has another size)."""
    return [p for p in verify(src, shards, collections=[GRAPH]).problems if ".bytes_out is " not in p]


def edit_graph_configs(shards: Path, gid: str, edit: Callable[[dict[str, list]], None]) -> None:
    """Rewrite the configs rows of ``gid``: ``edit`` gets its rows as {column: [values in config_id
    order]} and changes them in place (the manifest's sha256 fixed by ``rewrite_shard``)."""
    _, shard = shard_of(shards, gid, "configs")

    def change(t: pa.Table) -> pa.Table:
        rows = np.flatnonzero(np.array(t.column("graph_id").to_pylist()) == gid)
        cols = {name: t.column(name).to_pylist() for name in t.column_names}
        mine = {name: [values[i] for i in rows] for name, values in cols.items()}
        edit(mine)
        for name, values in mine.items():
            for j, i in enumerate(rows):
                cols[name][i] = values[j]
        return pa.table({name: pa.array(cols[name], t.schema.field(name).type) for name in t.column_names},
                        schema=t.schema)

    rewrite_shard(shards, shard, change)


def _planes(value: bytes) -> np.ndarray:
    """A stored codes value → its (4, 3·nt) byte planes (a writable copy)."""
    return np.frombuffer(value, np.uint8).reshape(4, -1).copy()


def _graph(shards: Path):
    gid = first_graph(shards, GRAPH, "train")
    return gid, tpuprep.open_dataset(shards).load_graph(gid)


@pytest.mark.parametrize("plane", [0, 1, 2, 3])
def test_one_flipped_byte_in_any_plane_of_one_stored_code_is_found(shards, src, plane):
    """Plane 3 of a base-7 code is always zero and plane 2 holds 0 or 1: a byte changed there gives a
    code no six values −1..5 encode to; in planes 0 and 1 another valid code."""
    gid, g = _graph(shards)
    assert _problems(src, shards) == []
    config, code = 5, 4  # unique config 5, int32 4 of its (nt, 3) codes (column 1, block 1)

    def flip(rows):
        planes = _planes(rows["codes"][config])
        planes[plane, code] ^= 0x01
        rows["codes"][config] = planes.tobytes()

    edit_graph_configs(shards, gid, flip)
    problems = _problems(src, shards)
    assert problems == [f"{gid}: original config row {int(g.first_index[config])} is not reconstructed"], problems


def test_two_swapped_stored_configs_are_found(shards, src):
    gid, g = _graph(shards)

    def swap(rows):
        rows["codes"][2], rows["codes"][3] = rows["codes"][3], rows["codes"][2]

    edit_graph_configs(shards, gid, swap)
    problems = _problems(src, shards)
    assert problems == [f"{gid}: original config row {int(g.first_index[2])} is not reconstructed"], problems


@pytest.mark.parametrize("keep", ["none", "before_a_repeat"])
def test_configs_rows_missing_from_the_shards_are_found_not_a_crash(shards, src, keep):
    """A build that wrote too few configs rows: rows whose config the shards lack, repeats included, are
    not reconstructed (verify indexed the stored keys past their end: an IndexError traceback)."""
    gid, g = _graph(shards)
    inverse = np.asarray(g.config_inverse)
    first_repeat = int(np.flatnonzero(np.r_[False, np.maximum.accumulate(inverse)[:-1] >= inverse[1:]])[0])
    cut = 0 if keep == "none" else int(inverse[first_repeat])  # drop the repeated config and later ones
    assert cut < g.num_unique_configs

    def change(t: pa.Table) -> pa.Table:
        ids, cids = np.array(t.column("graph_id").to_pylist()), np.array(t.column("config_id").to_pylist())
        return t.filter(pa.array(~((ids == gid) & (cids >= cut))))

    _, shard = shard_of(shards, gid, "configs")
    rewrite_shard(shards, shard, change)
    report = verify(src, shards, collections=[GRAPH])  # no exception
    assert not report.ok
    assert any(f"{gid}: original config row" in p and "is not reconstructed" in p for p in report.problems)


@pytest.mark.parametrize("code", [7**6, 7**6 + 19608, -1, 2**31 - 1])
def test_a_stored_code_outside_base_7_is_found(shards, src, code):
    """7^6 and above (a seventh digit), negative codes: no layout values encode to them."""
    gid, _ = _graph(shards)

    def outside(rows):
        planes = _planes(rows["codes"][0])
        planes[:, 0] = np.array([code], "<i4").view(np.uint8)
        rows["codes"][0] = planes.tobytes()

    edit_graph_configs(shards, gid, outside)
    problems = _problems(src, shards)
    assert problems == [f"{gid}: original config row 0 is not reconstructed"], problems


def _input_codes(src: Path, gid: str) -> np.ndarray:
    """The input's (c, nc, 3) codes of every configurable node (no ties), by verify's encoder."""
    with np.load(next(src.rglob(gid.rsplit(":", 1)[1] + ".npz"))) as z:
        values = z["node_config_feat"]
    ok, codes = LayoutEncoder(tie_columns(np.arange(values.shape[1]))).encode(values)
    assert ok.all()
    return codes


def test_a_tie_the_input_does_not_hold_is_found(shards, src):
    """The last stored column dropped and its nodes pointed at column 0 (config_node_tie,
    num_config_columns and every codes value rewritten to match): the stored codes are those of
    columns 0..nt−2 exactly, so only the input's own tie check — each tied node's codes equal to its
    column's — can see that those nodes differ from node 0."""
    gid, g = _graph(shards)
    tie = np.asarray(g.config_node_tie, np.int64)
    nt = int(tie.max()) + 1
    moved = np.flatnonzero(tie == nt - 1)
    codes = _input_codes(src, gid)
    differs = (codes[:, moved] != codes[:, [0]]).any(axis=(1, 2))
    assert differs.any()  # the tie is false somewhere

    def drop(rows):
        for i, value in enumerate(rows["codes"]):
            rows["codes"][i] = _planes(value).reshape(4, nt, 3)[:, : nt - 1].tobytes()

    edit_graph_configs(shards, gid, drop)
    tamper_cell(shards, gid, "graphs", "config_node_tie", lambda cell: [0 if t == nt - 1 else t for t in cell])
    tamper_cell(shards, gid, "graphs", "num_config_columns", lambda v: v - 1)
    problems = _problems(src, shards)
    # configs that differed only in the dropped column are equal now: the dedup check may speak too
    assert problems[0] == f"{gid}: original config row {int(np.flatnonzero(differs)[0])} is not reconstructed"
    assert set(problems[1:]) <= {f"{gid}: unique configs are not pairwise distinct"}, problems


def test_tie_columns_numbered_out_of_first_appearance_order_are_found(shards, src):
    """Two stored columns renumbered (config_node_tie and every codes value alike): every value still
    reconstructs, but docs/schema.md numbers the columns in order of first appearance."""
    gid, g = _graph(shards)
    tie = np.asarray(g.config_node_tie, np.int64)
    nt = int(tie.max()) + 1
    swap = np.arange(nt)
    swap[[1, 2]] = [2, 1]

    def renumber(rows):
        for i, value in enumerate(rows["codes"]):
            rows["codes"][i] = _planes(value).reshape(4, nt, 3)[:, swap].tobytes()

    edit_graph_configs(shards, gid, renumber)
    tamper_cell(shards, gid, "graphs", "config_node_tie", lambda cell: [int(swap[t]) for t in cell])
    problems = _problems(src, shards)
    assert problems == [f"{gid}: config_node_tie does not number its stored columns 0..nt-1 in order of "
                        "first appearance"], problems


def _renumber_unique_configs(shards: Path, gid: str, a: int, b: int) -> None:
    """Swap unique configs a and b everywhere (their configs rows but config_id, and config_inverse):
    the same facts, numbered out of first-occurrence order."""
    def swap_rows(rows):
        for name in rows:
            if name not in ("graph_id", "config_id"):
                rows[name][a], rows[name][b] = rows[name][b], rows[name][a]

    edit_graph_configs(shards, gid, swap_rows)
    tamper_cell(shards, gid, "graphs", "config_inverse", lambda cell: [b if u == a else a if u == b else u for u in cell])


def test_unique_configs_out_of_first_occurrence_order_are_still_compared_row_by_row(shards, src):
    """The two-pass path: every stored row's key, then every input row against its config's key."""
    gid, g = _graph(shards)
    _renumber_unique_configs(shards, gid, 1, 2)
    problems = _problems(src, shards)
    assert problems == [f"{gid}: unique configs are not numbered in first-occurrence order"], problems

    def flip(rows):
        planes = _planes(rows["codes"][4])
        planes[0, 0] ^= 0x02
        rows["codes"][4] = planes.tobytes()

    edit_graph_configs(shards, gid, flip)
    problems = _problems(src, shards)
    assert f"{gid}: original config row {int(g.first_index[4])} is not reconstructed" in problems, problems


def test_codes_from_planes_keeps_every_byte():
    codes = np.array([[0, 7**6 - 1, 1 << 24, -1, 2**31 - 1, 258]], np.int32)
    planes = codes.view(np.uint8).reshape(1, -1, 4).transpose(0, 2, 1).reshape(1, -1)  # byte p of j at p·n + j
    assert np.array_equal(codes_from_planes(np.ascontiguousarray(planes)), codes)


def test_encoder_matches_the_spec_on_hand_worked_codes():
    """docs/spec.md §2.4: digit = value + 1, code_t = Σ_i digit_{6t+i} · 7^i (first slot least significant)."""
    values = np.full((1, 2, 18), -1, np.float32)
    values[0, 0, 0] = 0  # digit 1 at 7^0 of block 0
    values[0, 0, 11] = 5  # digit 6 at 7^5 of block 1
    values[0, 1, 12:18] = [5, 4, 3, 2, 1, 0]
    ok, codes = LayoutEncoder(tie_columns(np.arange(2))).encode(values)
    assert ok.tolist() == [True]
    assert codes.tolist() == [[[1, 6 * 7**5, 0], [0, 0, 6 + 5 * 7 + 4 * 49 + 3 * 343 + 2 * 2401 + 16807]]]
    tied, _ = LayoutEncoder(tie_columns(np.array([0, 0]))).encode(values)  # nodes 0 and 1 share one column
    assert tied.tolist() == [False]


def test_row_keys_are_exact_sums_with_at_least_128_bits_of_randomness():
    codes = np.array([[7**6 - 1] * 5000, [7**6 - 1] * 4999 + [7**6 - 2]], np.int32)
    keys = RowKeys(codes.shape[1])
    bits = 53 - 17 - codes.shape[1].bit_length()
    assert keys.m * bits >= 128 and keys.r.max() < 2**bits
    sums = keys.sums(codes)
    assert sums.max() < 2**53
    exact = [[sum(int(c) * int(r) for c, r in zip(row, keys.r[:, j], strict=True)) for j in range(keys.m)]
             for row in codes]
    assert sums.astype(np.int64).tolist() == exact
    k = keys.keys(codes)
    assert k[0] != k[1] and keys.keys(codes[:1])[0] == k[0]


def test_verify_calls_no_kernel_and_its_workers_load_none(synth_root, synth_shards, monkeypatch):
    """Verify is an independent oracle: with every function of ``tpuprep.kernels`` made to fail
    wherever a tpuprep module holds it, a serial verify still proves the build exact; and its worker
    processes are started without loading the kernels (``make_runner(kernels=False)``)."""
    import sys

    import tpuprep.runners
    import tpuprep.verify.run  # every module verify uses is loaded before the patch

    def forbidden(*args, **kwargs):
        raise AssertionError("verify called a tpuprep.kernels function")

    patched = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("tpuprep") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if getattr(value, "__module__", "") and str(getattr(value, "__module__", "")).startswith("tpuprep.kernels") \
                    and callable(value) and not isinstance(value, type):
                monkeypatch.setattr(module, attr, forbidden)
                patched += 1
    assert patched > 10  # the reader's decode_base7 and join_planes among them
    report = verify(synth_root / "npz", synth_shards)
    assert report.ok and report.graphs_checked == report.graphs_total > 0, report.problems
    made = []
    real = tpuprep.runners.make_runner

    def recording(*args, **kwargs):
        made.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(tpuprep.runners, "make_runner", recording)
    assert verify(synth_root / "npz", synth_shards, collections=["tile"], workers=2).ok
    assert made == [{"kernels": False}]


def _pack_chunk_loaded() -> bool:
    from tpuprep.kernels import build_kernels

    return all(k.signatures for k in build_kernels())  # warm() loads every kernel a build calls


@pytest.mark.parametrize("kernels", [True, False])
def test_a_process_runner_loads_the_kernels_only_when_asked(kernels):
    from tpuprep.runners import make_runner

    runner = make_runner(2, kernels=kernels)
    try:
        task = runner.submit(_pack_chunk_loaded)
        assert next(iter(runner.as_completed([task]))).result() is kernels
    finally:
        runner.close()


def test_the_tile_group_minimum_is_exact_on_both_paths():
    """``_tile_minimum``: the vectorised cross-multiplication (values < 2^31) says what the Fraction
    comparison says (values beyond it), on equal fractions in other terms, a minimum no row of the
    group reaches, and one row smaller than the stored minimum."""
    from types import SimpleNamespace

    from tpuprep.verify.graph import _tile_minimum

    inv = np.array([0, 1, 0, 1, 2])
    runtime, normalizer = np.array([10, 9, 6, 12, 5]), np.array([4, 3, 3, 4, 5])  # ratios 2.5 3 2 3 1
    cases = {(6, 3, 9, 3, 5, 5): True, (2, 1, 3, 1, 1, 1): True,  # the minima, in other terms too
             (5, 3, 9, 3, 5, 5): False,  # 5/3 < 2: reached by no row of group 0
             (10, 4, 9, 3, 5, 5): False}  # 2.5: row 2 (6/3) is smaller
    for stored, want in cases.items():
        for scale in (1, 2**40):  # 2^40: every value beyond 2^31, the Fraction path
            g = SimpleNamespace(config_runtime=np.array(stored[::2]) * scale,
                                config_runtime_normalizers=np.array(stored[1::2]) * scale)
            assert _tile_minimum(inv, 3, runtime * scale, normalizer * scale, g) is want, (stored, scale)


@pytest.mark.parametrize("negative_zero", [False, True])
def test_two_equal_unique_tile_configs_are_found(shards, src, negative_zero):
    """A tile graph's unique configs compared by value (every row as one bytes value): row 1 made equal
    to row 0 (with -0.0 for 0.0 too: equal by value) is not pairwise distinct."""
    gid = first_graph(shards, TILE, "valid")

    def copy_first(rows):
        row = list(rows["config_feat"][0])
        if negative_zero:
            assert 0.0 in row
            row[row.index(0.0)] = -0.0
        rows["config_feat"][1] = row

    edit_graph_configs(shards, gid, copy_first)
    problems = [p for p in verify(src, shards, collections=[TILE]).problems if ".bytes_out is " not in p]
    assert f"{gid}: unique configs are not pairwise distinct" in problems, problems


@pytest.mark.parametrize("damage", ["two graphs", "no statistics"])
def test_a_layout_row_group_verify_cannot_place_is_named(shards, src, damage):
    """Verify finds a graph's configs rows from the footers' graph_id statistics (docs/spec.md §3: one
    graph per layout row group): a row group that also holds another graph (its last row renamed), or
    has no statistics, is refused for the graph, naming the shard and the row group."""
    gid = first_graph(shards, GRAPH, "train")
    _, shard = shard_of(shards, gid, "configs")
    table = pq.read_table(shard)
    groups = pq.ParquetFile(shard).metadata.num_row_groups
    sizes = [pq.ParquetFile(shard).metadata.row_group(rg).num_rows for rg in range(groups)]
    if damage == "two graphs":
        ids = table.column("graph_id").to_pylist()
        ids[-1] = gid + "~"  # sorts after gid: the last row group now spans gid..gid~
        table = table.set_column(table.schema.get_field_index("graph_id"), table.schema.field("graph_id"),
                                 pa.array(ids, pa.string()))
    with pq.ParquetWriter(shard, table.schema, compression="zstd", write_page_checksum=True,
                          write_statistics=damage != "no statistics") as w:
        start = 0
        for size in sizes:
            w.write_table(table.slice(start, size), row_group_size=size)
            start += size
    fix_manifest_hash(shards, shard)
    problems = _problems(src, shards)
    rg = groups - 1 if damage == "two graphs" else 0
    said = f"where the configs of {gid!r} were expected alone" if damage == "two graphs" else "has no graph_id statistics"
    assert any(p.startswith(f"{gid}: cannot be checked: {shard}: row group {rg} ") and said in p for p in problems), problems


def test_verify_keeps_no_dataset_or_open_shard_once_it_returns(synth_root, synth_shards):
    """Its footer cache is keyed weakly by the dataset and must not hold it: each call left 16 shard
    files open for the life of the process (library callers, long-lived processes)."""
    import gc
    import os

    from tpuprep.verify import stored

    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    assert verify(synth_root / "npz", synth_shards).ok
    gc.collect()
    before = open_files()
    for _ in range(3):
        assert verify(synth_root / "npz", synth_shards).ok
    gc.collect()
    assert len(stored._FOOTERS) == 0 and open_files() <= before


def test_load_graph_checks_the_stored_config_ids_not_only_their_count(shards):
    """Two rows' config_ids swapped (statistics unchanged): load_graph returned the rows by position,
    as if nothing were wrong; sample_configs already refused them."""
    from tpuprep.errors import BadShards

    gid, _ = _graph(shards)

    def swap(rows):
        rows["config_id"][2], rows["config_id"][3] = rows["config_id"][3], rows["config_id"][2]

    edit_graph_configs(shards, gid, swap)
    with pytest.raises(BadShards, match=rf"{gid}.*configs row 2 holds config_id 3, expected 2"):
        tpuprep.open_dataset(shards).load_graph(gid)


@pytest.mark.parametrize("bad", [6, -2, 0.5, np.nan, 127, -128])
def test_the_encoder_refuses_any_value_outside_minus_1_to_5(bad):
    """Only −1..5 has a base-7 digit: a 6 (digit 7) must never encode to a code some crafted shard could
    hold, nor any other value."""
    values = np.full((3, 2, 18), -1, np.float32)
    values[1, 1, 7] = bad
    ok, _ = LayoutEncoder(tie_columns(np.arange(2))).encode(values)
    assert ok.tolist() == [True, False, True]


def test_configs_rows_of_a_graph_out_of_config_id_order_are_named_by_the_graph_check(shards, src):
    """The layout pass reads the graph's rows itself and names their order (besides the shard check)."""
    gid, _ = _graph(shards)

    def swap(rows):
        rows["config_id"][1], rows["config_id"][2] = rows["config_id"][2], rows["config_id"][1]

    edit_graph_configs(shards, gid, swap)
    assert f"{gid}: configs rows are not config_id 0..c_u-1 in order" in _problems(src, shards)


def test_two_stored_rows_outside_base_7_are_not_taken_for_equal_configs(shards, src):
    """Each undecodable stored row gets a key of its own: two of them are not "unique configs are not
    pairwise distinct" (they are not equal configs; each is a row not reconstructed)."""
    gid, _ = _graph(shards)

    def outside(rows):
        for i, code in ((0, 7**6), (1, 7**6 + 1)):
            planes = _planes(rows["codes"][i])
            planes[:, 0] = np.array([code], "<i4").view(np.uint8)
            rows["codes"][i] = planes.tobytes()

    edit_graph_configs(shards, gid, outside)
    assert _problems(src, shards) == [f"{gid}: original config row 0 is not reconstructed"]


def test_graphs_sharing_a_configs_shard_are_each_read_from_their_own_row_groups(tmp_path):
    """Three small layout graphs in one configs shard (the spec allows it; today's writer gives each
    layout graph its own): each graph's rows are found by its own row groups' statistics, never an
    earlier graph's."""
    from npzfactory import layout_arrays, write
    from test_hostile_read import edit_manifest

    from tpuprep.build import build
    from tpuprep.shards.writer import parquet_options

    src, dst = tmp_path / "npz", tmp_path / "shards"
    for i in range(3):
        write(src, f"layout/xla/random/train/g{i}.npz", layout_arrays(seed=i, c=30 + 10 * i))
    build(src, dst)
    entries = [s for s in json.loads((dst / "manifest.json").read_text())["shards"] if s["table"] == "layout_configs"]
    assert len(entries) == 3
    files = [pq.ParquetFile(dst / e["path"]) for e in entries]
    one = dst / "layout/xla/random/configs/train-00000-of-00001.parquet"
    with pq.ParquetWriter(one, files[0].schema_arrow, **parquet_options("layout_configs", 3)) as w:
        for f in files:
            for rg in range(f.metadata.num_row_groups):
                w.write_table(f.read_row_group(rg), row_group_size=f.metadata.row_group(rg).num_rows)
    for e in entries:
        (dst / e["path"]).unlink()

    def merged(m):
        kept = [s for s in m["shards"] if s["table"] != "layout_configs"]
        m["shards"] = [*kept, {**entries[0], "path": one.relative_to(dst).as_posix(),
                               "last_graph": entries[-1]["last_graph"], "rows": sum(e["rows"] for e in entries),
                               "row_groups": sum(e["row_groups"] for e in entries)}]
    edit_manifest(dst, merged)
    fix_manifest_hash(dst, one)
    report = verify(src, dst)
    assert report.graphs_checked == 3
    assert [p for p in report.problems if ".bytes_out is " not in p] == []  # one file: other bytes than three
