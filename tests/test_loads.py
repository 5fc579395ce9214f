"""``shards/loads.py``: ``load_graph`` gives a graph's configs rows by position, so it must check what
each position holds (config_id 0..c_u−1 in order, as many rows as the graphs row says), and a layout
graph whose stored codes cannot be decoded is ``BadShards`` naming the shard and the graph — on the
direct (``StoredCodes``) path and on the pyarrow fallback alike (issue #36 item 5 and its planted bugs).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_hostile_read import GRAPH, first_graph, fix_manifest_hash, shard_of, tamper_cell
from test_verify_stored import edit_graph_configs

import tpuprep
from tpuprep.errors import BadShards
from tpuprep.shards import pages
from tpuprep.shards.writer import parquet_options


def set_code(shards: Path, gid: str, row: int, code: int) -> Path:
    """Set the first stored code of ``gid``'s configs row ``row`` (byte planes of little-endian int32) to
    ``code``, the shard rewritten as the build writes it (its encodings, so the direct page reader still
    takes it; row groups, metadata kept) and the manifest fixed to match. Returns the shard."""
    _, shard = shard_of(shards, gid, "configs")
    pf = pq.ParquetFile(shard)
    table = pf.read()
    at = int(np.flatnonzero(np.array(table.column("graph_id").to_pylist()) == gid)[row])
    values = table.column("codes").to_pylist()
    planes = np.frombuffer(values[at], np.uint8).reshape(4, -1).copy()
    planes[:, 0] = np.array([code], "<i4").view(np.uint8)
    values[at] = planes.tobytes()
    i = table.schema.get_field_index("codes")
    table = table.set_column(i, table.schema.field(i), pa.array(values, pa.binary()))
    with pq.ParquetWriter(shard, table.schema, **parquet_options("layout_configs", 3)) as w:
        start = 0
        for rg in range(pf.metadata.num_row_groups):
            size = pf.metadata.row_group(rg).num_rows
            w.write_table(table.slice(start, size), row_group_size=size)
            start += size
    fix_manifest_hash(shards, shard)
    return shard


@pytest.fixture
def graph(shards) -> tuple[Path, str, Path]:
    gid = first_graph(shards, GRAPH, "train")
    return shards, gid, shard_of(shards, gid, "configs")[1]


@pytest.mark.parametrize(("a", "b"), [(2, 3), (0, 5), (1, 1)])
def test_config_ids_out_of_place_are_bad_shards_not_rows_by_position(graph, a, b):
    """Two rows' config_ids swapped (statistics unchanged), or one duplicated (the count still right):
    load_graph used to return the rows by position, as if nothing were wrong."""
    shards, gid, shard = graph

    def edit(rows):
        if a == b:
            rows["config_id"][a + 1] = rows["config_id"][a]
        else:
            rows["config_id"][a], rows["config_id"][b] = rows["config_id"][b], rows["config_id"][a]

    edit_graph_configs(shards, gid, edit)
    bad, held = (a + 1, a) if a == b else (a, b)
    with pytest.raises(BadShards, match=rf"^{re.escape(str(shard))}, \S+graphs\S+: graph '{gid}' cannot be read back: configs "
                                        rf"row {bad} holds config_id {held}, expected {bad}$"):
        tpuprep.open_dataset(shards).load_graph(gid)
    assert tpuprep.open_dataset(shards).load_graph(gid, configs=False).graph_id == gid  # the structure reads


@pytest.mark.parametrize("change", [1, -1])
def test_a_graphs_row_counting_other_configs_than_the_shards_hold_is_named(graph, change):
    shards, gid, _ = graph
    c_u = tpuprep.open_dataset(shards).num_unique_configs(gid)
    tamper_cell(shards, gid, "graphs", "num_unique_configs", lambda v: v + change)
    with pytest.raises(BadShards, match=rf"graph '{gid}' cannot be read back: {c_u} configs rows, its graphs row "
                                        rf"says num_unique_configs {c_u + change}$"):
        tpuprep.open_dataset(shards).load_graph(gid)


@pytest.mark.parametrize("direct", [True, False])
def test_a_code_outside_base_7_names_the_shard_and_the_graph(graph, direct, monkeypatch):
    """Issue #36 item 5: ``load_graph(g).node_config_feat()`` on codes outside 0..7^6−1 (valid CRCs) was
    the decoder's bare ``ValueError`` naming neither; the pyarrow fallback (a chunk the direct reader
    declines) refuses the graph when it loads it, with the same facts."""
    shards, gid, shard = graph
    set_code(shards, gid, 3, 7**6 + 5)
    if not direct:
        monkeypatch.setattr(pages, "chunk_values", lambda *a: (_ for _ in ()).throw(pages.Unhandled("declined")))
        with pytest.raises(BadShards, match=rf"^{re.escape(str(shard))}, \S+graphs\S+: graph '{gid}' cannot be read back: "
                                            rf"config 3 holds the code {7**6 + 5} \(node \d+, block 0\)"):
            tpuprep.open_dataset(shards).load_graph(gid)
        return
    g = tpuprep.open_dataset(shards).load_graph(gid)
    assert g.stored_codes is not None
    with pytest.raises(BadShards, match=rf"^{re.escape(str(shard))}: configs of '{gid}' cannot be decoded: config 3 "
                                        rf"holds the code {7**6 + 5}"):
        g.node_config_feat()
    with pytest.raises(BadShards, match="config 3 holds"):
        g.node_config_feat([0, 3])
    assert g.node_config_feat([0, 1, 2]).shape[0] == 3  # the other configs still decode


def test_an_intact_graph_reads_the_same_on_both_paths(shards, monkeypatch):
    gid = first_graph(shards, GRAPH, "train")
    direct = tpuprep.open_dataset(shards).load_graph(gid)
    assert direct.stored_codes is not None
    codes, feat = direct.config_codes, direct.node_config_feat()
    monkeypatch.setattr(pages, "chunk_values", lambda *a: (_ for _ in ()).throw(pages.Unhandled("declined")))
    fallback = tpuprep.open_dataset(shards).load_graph(gid)
    assert fallback.stored_codes is None
    assert np.array_equal(codes, fallback.config_codes) and np.array_equal(feat, fallback.node_config_feat())
    for name in ("config_runtime", "group_size", "first_index", "config_runtime_spread"):
        assert np.array_equal(getattr(direct, name), getattr(fallback, name)), name


def test_a_bad_shards_line_from_inside_passes_through_unwrapped(shards, monkeypatch):
    """What a deeper check already said in one line (a row group of another graph, a changed shard) is
    the error, not wrapped into "cannot be read back: <that line>"."""
    from tpuprep.shards import parquet

    gid = first_graph(shards, GRAPH, "train")
    ds = tpuprep.open_dataset(shards)

    def refuse(*_a, **_k):
        raise BadShards("x.parquet: row group 0 holds graph_id 'other', where the configs were expected")

    monkeypatch.setattr(parquet, "read_row_groups", refuse)
    with pytest.raises(BadShards) as info:
        ds.load_graph(gid)
    assert str(info.value) == "x.parquet: row group 0 holds graph_id 'other', where the configs were expected"
