"""``shards.parquet.flat``: Arrow columns → NumPy without pyarrow's ``to_numpy`` (which imports pandas in
every reading process), checked against ``to_numpy`` itself; and reading shards never imports pandas."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuprep.shards.parquet import flat

TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
         pa.float16(), pa.float32(), pa.float64()]


@settings(max_examples=60, deadline=None)
@given(type_=st.sampled_from(TYPES), n=st.integers(0, 40), offset=st.integers(0, 5), cut=st.integers(0, 3),
       nested=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_flat_equals_to_numpy_for_every_numeric_type_slice_and_nesting(type_, n, offset, cut, nested, seed):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(type_.to_pandas_dtype())
    values = rng.integers(0, 100, n + offset + cut).astype(dtype)
    array = pa.array(values, type=type_).slice(offset, n)  # an offset into the values buffer
    if nested:
        array = pa.ListArray.from_arrays(pa.array([0, n // 2, n], pa.int32()), array)
    chunked = pa.chunked_array([array, array], type=array.type)
    expected = np.asarray(array.flatten() if nested else array)
    got = flat(array)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    assert np.array_equal(flat(chunked), np.concatenate([expected, expected]))


def test_flat_keeps_nulls_and_booleans_through_to_numpy():
    with_null = flat(pa.array([1, None, 3], pa.int64()))
    assert np.isnan(with_null[1]) and with_null[[0, 2]].tolist() == [1, 3]
    assert flat(pa.array([True, False])).tolist() == [True, False]


def test_loading_and_sampling_never_import_pandas(synth_shards):
    """What every DataLoader or verify worker does — open, load graphs (both kinds), sample layout configs,
    read their runtimes — costs no pandas import (≈ 0.37 s per process); before, ``flat`` and the tile
    graph filter each imported it."""
    code = (
        "import sys, numpy as np, tpuprep\n"
        f"ds = tpuprep.open_dataset({str(synth_shards)!r})\n"
        "for gid in ds.graph_ids():\n"
        "    g = ds.load_graph(gid)\n"
        "    assert g.num_unique_configs > 0\n"
        "    if g.kind == 'layout':\n"
        "        g.node_config_feat(np.arange(min(3, g.num_unique_configs)))\n"
        "        ds.sample_configs(gid, 4)\n"
        "    assert ds.config_runtimes(gid) is not None or g.split == 'test'\n"
        "    assert 'pandas' not in sys.modules, gid\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_rows_of_equals_pyarrows_filter_for_runs_and_scattered_rows():
    from tpuprep.shards.parquet import rows_of

    ids = ["a", "bb", "bb", "bb", "c", "", "dd"]
    table = pa.table({"graph_id": ids, "x": list(range(len(ids)))})
    chunked = pa.Table.from_batches(table.slice(0, 3).to_batches() + table.slice(3).to_batches())
    for t in (table, chunked, table.slice(1)):
        for value in ("a", "bb", "c", "", "dd", "zz", "b"):
            pairs = zip(t.column("graph_id").to_pylist(), t.column("x").to_pylist(), strict=True)
            want = [x for g, x in pairs if g == value]
            assert rows_of(t, "graph_id", value).column("x").to_pylist() == want, (value, t.num_rows)
    scattered = pa.table({"graph_id": ["a", "b", "a"], "x": [0, 1, 2]})  # not one run: pyarrow filters
    assert rows_of(scattered, "graph_id", "a").column("x").to_pylist() == [0, 2]


def test_flat_of_a_column_without_chunks_is_an_empty_array_of_its_type():
    for type_, dtype in ((pa.int32(), np.int32), (pa.uint64(), np.uint64), (pa.float64(), np.float64)):
        got = flat(pa.chunked_array([], type=type_))
        assert got.dtype == dtype and got.shape == (0,)
