"""Issue #30 item 3, reading side: ``load_graph`` of a big layout graph keeps its codes as stored (the
compressed chunks of its row groups) and decodes only the rows asked for, never a whole-graph int32
array; the arrays it returns are those of the eager read, bit for bit."""

from __future__ import annotations

import tracemalloc
from unittest import mock

import numpy as np
import pytest
from npzfactory import layout_arrays, write
from test_pages import corrupt_codes_page

import tpuprep
from tpuprep.kernels.base7 import decode_base7
from tpuprep.shards import pages

C, NC = 1500, 120


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A shard folder holding one layout graph of C configs (all distinct) over NC configurable nodes."""
    root = tmp_path_factory.mktemp("big-layout")
    rng = np.random.default_rng(7)
    arrays = layout_arrays(seed=1, n=2 * NC + 10, c=C)
    ids = np.arange(5, 5 + 2 * NC, 2, dtype=np.int64)  # every other node configurable
    arrays["node_opcode"][ids] = 26
    palette = rng.integers(-1, 6, (NC, 4, 18)).astype(np.float32)  # each node takes one of 4 layouts, as in
    cfg = palette[np.arange(NC), rng.integers(0, 4, (C, NC))]      # real files (the configs stay distinct)
    cfg[:, 1::7] = cfg[:, 0:1]  # some tied nodes (equal in every config)
    arrays.update(node_config_ids=ids, node_config_feat=cfg,
                  config_runtime=rng.integers(10**8, 2 * 10**8, C).astype(np.int64))
    write(root / "npz", "layout/xla/default/train/big.npz", arrays)
    from tpuprep.build import build

    build(root / "npz", root / "shards")
    return root / "shards"


def _eager(ds, gid):
    """The record as read before issue #30: pyarrow reads every column (the direct decoder declines)."""
    with mock.patch.object(pages, "chunk_values", side_effect=pages.Unhandled("declined")):
        return ds.load_graph(gid)


def test_load_graph_holds_no_whole_graph_codes_and_peaks_below_one_copy_of_them(big):
    ds = tpuprep.open_dataset(big)
    (gid,) = ds.graph_ids()
    ds.load_graph(gid, configs=False)  # the structure's row group, cached: not what is measured
    tracemalloc.start()
    g = ds.load_graph(gid)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    c_u, nc = g.num_unique_configs, len(g.node_config_ids)
    whole = c_u * nc * 3 * 4  # the (c_u, nc, 3) int32 codes the record held before
    assert c_u == C and nc == NC
    held = sum(v.nbytes for v in vars(g).values() if isinstance(v, np.ndarray))
    assert held < whole / 4, (held, whole)
    assert g.stored_codes is not None and g.stored_codes.nbytes < whole / 3
    assert peak < whole / 2, (peak, whole)  # NumPy's and Python's allocations while loading


def test_kept_codes_decode_to_the_eager_read_bit_for_bit(big):
    ds = tpuprep.open_dataset(big)
    (gid,) = ds.graph_ids()
    lazy, eager = ds.load_graph(gid), _eager(tpuprep.open_dataset(big), gid)
    assert lazy.stored_codes is not None and eager.stored_codes is None
    rows = np.random.default_rng(0).integers(-C, C, 300)
    assert np.array_equal(lazy.node_config_feat(rows), eager.node_config_feat(rows))
    assert np.array_equal(lazy.node_config_feat(), decode_base7(eager.config_codes))
    assert lazy.node_config_feat([]).shape == (0, NC, 18)
    codes = lazy.config_codes  # built on first use, then kept and read-only
    assert codes is lazy.config_codes and not codes.flags.writeable
    assert codes.dtype == np.int32 and np.array_equal(codes, eager.config_codes)
    for name in ("config_runtime", "group_size", "first_index", "config_runtime_spread", "config_inverse"):
        assert np.array_equal(getattr(lazy, name), getattr(eager, name)), name
    with pytest.raises(IndexError):
        lazy.node_config_feat([C])
    import pickle

    again = pickle.loads(pickle.dumps(ds.load_graph(gid)))  # e.g. to a DataLoader worker
    assert again.stored_codes == lazy.stored_codes
    assert np.array_equal(again.node_config_feat(rows), eager.node_config_feat(rows))


def test_a_corrupt_codes_page_is_still_bad_shards_when_the_graph_is_loaded(big, tmp_path):
    import shutil

    from tpuprep.errors import BadShards

    dst = tmp_path / "shards"
    shutil.copytree(big, dst)
    ds = tpuprep.open_dataset(dst)
    (gid,) = ds.graph_ids()
    path, rg = ds.index.plan(gid)[0][3]
    corrupt_codes_page(path, rg)
    ds = tpuprep.open_dataset(dst)  # (the dataset open before says the folder changed)
    with pytest.raises(BadShards, match=rf"{path.name}: row groups? .*corrupt"):
        ds.load_graph(gid)
