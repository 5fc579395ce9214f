"""Issue #27 item 13: a wrong argument to a reader method is the caller's error (TypeError or
ValueError, one line naming the argument), never an intact shard blamed for it ("cannot be sampled")."""

from __future__ import annotations

import numpy as np
import pytest

import tpuprep
from tpuprep.errors import BadShards
from tpuprep.shards.reader import unique_config_columns


@pytest.fixture(scope="module")
def ds(synth_shards):
    return tpuprep.open_dataset(synth_shards)


@pytest.fixture(scope="module")
def layout_id(ds):
    return ds.graph_ids("layout:xla:random", "train")[0]


@pytest.fixture(scope="module")
def tile_id(ds):
    return ds.graph_ids("tile:xla", "train")[0]


def _call(ds, gid, method, args):
    out = getattr(ds, method)(gid, *args[0], **args[1])
    if method == "iter_config_blocks":
        list(out)


CASES = [  # (method, (args, kwargs), exception, the argument named)
    ("sample_configs", ((3.5,), {}), TypeError, "k"),
    ("sample_configs", (("3",), {}), TypeError, "k"),
    ("sample_configs", ((True,), {}), TypeError, "k"),
    ("sample_configs", ((-1,), {}), ValueError, "k"),
    ("sample_configs", ((3,), {"seed": "abc"}), TypeError, "seed"),
    ("sample_configs", ((3,), {"seed": -1}), ValueError, "seed"),
    ("sample_configs", ((3,), {"seed": 1.5}), TypeError, "seed"),
    ("sample_configs", ((3,), {"seed": None}), TypeError, "seed"),
    ("read_configs", (([1.5],), {}), TypeError, "rows"),
    ("read_configs", (("abc",), {}), TypeError, "rows"),
    ("read_configs", ((None,), {}), TypeError, "rows"),
    ("read_configs", (([True, False],), {}), TypeError, "rows"),
    ("read_configs", (([[1]],), {}), ValueError, "rows"),
    ("iter_config_blocks", ((0,), {}), ValueError, "rows_per_block"),
    ("iter_config_blocks", ((2.5,), {}), TypeError, "rows_per_block"),
    ("iter_config_blocks", (("3",), {}), TypeError, "rows_per_block"),
    ("iter_config_blocks", ((None,), {}), TypeError, "rows_per_block"),
    ("iter_config_blocks", ((4,), {"rows": [0.5]}), TypeError, "rows"),
    ("load_graph", ((), {"configs": "no"}), TypeError, "configs"),
]


@pytest.mark.parametrize("kind", ["layout", "tile"])
@pytest.mark.parametrize(("method", "args", "error", "name"), CASES)
def test_a_wrong_argument_names_the_argument_not_the_shard(ds, layout_id, tile_id, kind, method, args,
                                                           error, name):
    gid = layout_id if kind == "layout" else tile_id
    with pytest.raises(error) as info:
        _call(ds, gid, method, args)
    assert not isinstance(info.value, BadShards)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{name} must"), message
    assert "cannot be sampled" not in message and ".parquet" not in message


@pytest.mark.parametrize("method", ["load_graph", "sample_configs", "num_unique_configs", "graph_row",
                                    "config_runtimes", "read_configs"])
def test_a_graph_id_that_is_no_string_is_a_type_error(ds, method):
    args = {"sample_configs": (3,), "read_configs": ([0],)}.get(method, ())
    with pytest.raises(TypeError, match=r"^graph_id must be a str"):
        getattr(ds, method)(5, *args)


def test_wrong_columns_are_the_callers_error(ds, layout_id):
    columns = unique_config_columns(ds.load_graph(layout_id, configs=False))
    short = {k: None if v is None else v[:-1] for k, v in columns.items()}
    with pytest.raises(ValueError, match=r"^columns\['group_size'\] must hold one entry per unique config"):
        ds.read_configs(layout_id, [0], short)
    with pytest.raises(TypeError, match=r"^columns must be the dict"):
        ds.read_configs(layout_id, [0], {"group_size": columns["group_size"]})


def test_sample_rows_checks_its_arguments():
    for args, error, name in [((10, 2.0), TypeError, "k"), ((10, 2, "x"), TypeError, "seed"),
                              ((10, 2, -3), ValueError, "seed"), ((10.0, 2), TypeError, "num_unique")]:
        with pytest.raises(error, match=rf"^{name} must"):
            tpuprep.sample_rows(*args)


def test_numpy_integers_are_integers(ds, layout_id):
    """What callers pass from NumPy arithmetic (np.int64 k, seed and block sizes) stays accepted, and
    means the same as the Python int."""
    a = ds.sample_configs(layout_id, np.int64(3), seed=np.uint32(7))
    b = ds.sample_configs(layout_id, 3, seed=7)
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.node_config_feat, b.node_config_feat)
    blocks = list(ds.iter_config_blocks(layout_id, np.int32(5)))
    assert np.array_equal(np.concatenate([x.rows for x in blocks]), np.arange(ds.num_unique_configs(layout_id)))


@pytest.mark.parametrize(("call", "name"), [
    (lambda ds: ds.graph_ids(5), "collection"), (lambda ds: ds.graph_ids("tile:xla", 0), "split"),
    (lambda ds: list(ds.iter_graphs(["tile:xla"])), "collection"), (lambda ds: ds.splits(None), "collection"),
    (lambda ds: ds.fold(7), "graph_id")])
def test_names_that_are_not_strings_are_type_errors_not_empty_answers(ds, call, name):
    """graph_ids(collection=5) matched nothing and looked like an empty collection."""
    with pytest.raises(TypeError, match=rf"^{name} must be a str"):
        call(ds)
    assert ds.graph_ids("tile:xla", "train") and ds.graph_ids(None, None) == ds.graph_ids()
