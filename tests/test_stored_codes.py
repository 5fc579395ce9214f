"""``shards/stored_codes.py``: a layout graph's codes kept as stored (``StoredCodes``), decoded per row
block, checked here against plain NumPy: the byte planes and base-7 digits are computed in this file,
not with the kernels the module uses.

Issue #36: negative rows (NumPy's indexing from the end) were caught only by distant tests, and a
code outside 0..7^6−1 was a bare ``ValueError`` from the decoder naming neither shard nor graph.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuprep.errors import BadShards
from tpuprep.shards import pages
from tpuprep.shards.schema import table_schema
from tpuprep.shards.stored_codes import StoredCodes
from tpuprep.shards.writer import parquet_options

GRAPH = "layout:xla:default:g"


def planes(codes: np.ndarray) -> np.ndarray:
    """(k, nt, 3) int32 codes → (k, 12·nt) uint8 as a shard stores them: byte p of every code, p = 0..3."""
    k = codes.shape[0]
    return codes.reshape(k, -1).astype("<i4").view(np.uint8).reshape(k, -1, 4).transpose(0, 2, 1).reshape(k, -1)


def digits(codes: np.ndarray) -> np.ndarray:
    """(..., 3) int32 base-7 codes → (..., 18) int8 layout values, slot by slot (docs/spec.md §2.4)."""
    out = np.empty((*codes.shape[:-1], 18), np.int8)
    for t in range(3):
        for i in range(6):
            out[..., 6 * t + i] = (codes[..., t] // 7**i) % 7 - 1
    return out


def stored(codes: np.ndarray, tie: np.ndarray, sizes: list[int]) -> StoredCodes:
    """The ``StoredCodes`` of stored columns ``codes`` (c_u, nt, 3) int32 written as one shard with the
    build's options, row groups of ``sizes`` configs."""
    c_u = codes.shape[0]
    schema = table_schema("layout_configs").arrow
    table = pa.table({
        "graph_id": pa.array([GRAPH] * c_u, pa.string()),
        "config_id": pa.array(np.arange(c_u, dtype=np.int32)),
        "runtime": pa.array(np.arange(c_u, dtype=np.int64) + 1),
        "runtime_spread": pa.array(np.zeros(c_u, np.int64)),
        "group_size": pa.array(np.ones(c_u, np.int32)),
        "first_index": pa.array(np.arange(c_u, dtype=np.int32)),
        "codes": pa.array([bytes(r) for r in planes(codes)], pa.binary()),
    }, schema=schema)
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, schema, **parquet_options("layout_configs", 3)) as w:
        at = 0
        for size in sizes:
            w.write_table(table.slice(at, size), row_group_size=size)
            at += size
    data = buf.getvalue()
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    chunks = [pages.chunk_info(meta, rg) for rg in range(len(sizes))]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return StoredCodes("shard.parquet", chunks, [data[c.start:c.end] for c in chunks], starts, tie, GRAPH)


def _case(c_u: int, nt: int, nc: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    tie = np.sort(np.concatenate([np.arange(nt), rng.integers(0, nt, nc - nt)])).astype(np.int32)
    return rng.integers(0, 7**6, (c_u, nt, 3)).astype(np.int32), tie


def _cut(total: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    sizes = []
    while total:
        sizes.append(int(min(total, rng.integers(1, 40))))
        total -= sizes[-1]
    return sizes


@settings(max_examples=25)
@given(c_u=st.integers(1, 150), nt=st.integers(1, 6), extra=st.integers(0, 4), seed=st.integers(0, 2**32 - 1))
def test_codes_and_layouts_of_any_rows_equal_numpy(c_u, nt, extra, seed):
    """Every row, and rows in any order with repeats and NumPy's negative indices (−c_u..−1 name the
    last rows), against the NumPy reference: codes expanded over the ties, digits of each slot."""
    columns, tie = _case(c_u, nt, nt + extra, seed)
    s = stored(columns, tie, _cut(c_u, seed))
    full = columns[:, tie]  # (c_u, nc, 3): each node's stored column
    assert s.num_rows == c_u
    assert np.array_equal(s.codes(), full) and np.array_equal(s.feat(), digits(full))
    rows = np.random.default_rng(seed).integers(-c_u, c_u, 2 * c_u + 3)
    assert np.array_equal(s.codes(rows), full[rows])
    assert np.array_equal(s.feat(rows), digits(full[rows]))
    assert np.array_equal(s.raw(rows), planes(columns)[rows])


def test_negative_rows_count_from_the_end_and_beyond_either_end_is_an_index_error():
    columns, tie = _case(70, 2, 3, 1)
    s = stored(columns, tie, [30, 30, 10])
    assert np.array_equal(s.feat(np.array([-1, -70, -31, -30])), digits(columns[[69, 0, 39, 40]][:, tie]))
    for bad in (-71, 70, 10**6, -(10**6)):
        with pytest.raises(IndexError, match=f"row {bad} of a graph of 70 unique configs"):
            s.raw(np.array([0, bad, 1]))
    assert s.raw(np.zeros(0, np.int64)).shape == (0, 24)


@pytest.mark.parametrize("code", [7**6, 2**31 - 1, -1, -(2**31)])
@pytest.mark.parametrize("rows", [None, [5, 64, 2], [-3]])
def test_a_code_outside_base_7_names_the_shard_graph_config_and_column(code, rows):
    """Issue #36 item 5: a stored code no layout encodes to (the page CRCs pass: it was written so) is
    ``BadShards`` naming the shard, the graph and the config — not the decoder's bare ValueError."""
    columns, tie = _case(70, 3, 4, 2)
    columns[67, 2, 1] = code
    s = stored(columns, tie, [64, 6])
    with pytest.raises(BadShards, match=rf"^shard\.parquet: configs of '{GRAPH}' cannot be decoded: config 67 "
                                        rf"holds the code {code} \(stored column 2, block 1\)"):
        s.feat(None if rows is None else np.array([*rows, 67]))
    assert np.array_equal(s.codes(np.array([67]))[0], columns[67][tie])  # the codes as stored stay readable
    assert np.array_equal(s.feat(np.array([66])), digits(columns[[66]][:, tie]))  # and the other configs decode


def test_check_decodes_every_row_group_and_equality_ignores_where_it_was_read():
    columns, tie = _case(50, 2, 2, 3)
    a, b = stored(columns, tie, [25, 25]), stored(columns, tie, [25, 25])
    a.check()
    assert a == b and repr(a) == "StoredCodes(50 configs, 2 nodes, " + f"{a.nbytes} bytes)"
    other = columns.copy()
    other[0, 0, 0] ^= 1
    assert stored(other, tie, [25, 25]) != a
    assert stored(columns, tie, [20, 30]) != a


def test_each_row_group_holding_a_row_is_inflated_once(monkeypatch):
    """Rows alternating between row groups (and repeated) still inflate each of their groups once."""
    columns, tie = _case(90, 2, 2, 4)
    s = stored(columns, tie, [30, 30, 30])
    calls = []
    real = pages.chunk_values
    monkeypatch.setattr(pages, "chunk_values", lambda *a: calls.append(a[1]) or real(*a))
    rows = np.array([0, 65, 1, 64, 2, 0, 65])
    assert np.array_equal(s.codes(rows), columns[rows][:, tie])
    assert len(calls) == 2
