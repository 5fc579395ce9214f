"""tpuprep.pyg (issue #38 item 4): batches as torch_geometric Data / Batch, checked with PyG itself.

Every key equals the batch it came from (values, dtypes, shapes); the edge direction is the data flow,
proven by PyG's own message passing against a dense count from TpuGraphs' [u, v] rows; a Batch of
several graphs gives each graph back (``get_example``) with its configs padded and masked; DataLoader
workers with ``collate_fn`` give what one process gives.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from test_readers import require

import tpuprep
from tpuprep.sampling.batches import batch_arrays

require("torch", "torch_geometric")
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torch_geometric.data import Batch, Data  # noqa: E402
from torch_geometric.nn import SimpleConv  # noqa: E402

from tpuprep.pyg import CONFIG_KEYS, ConfigGraph, to_batch, to_data  # noqa: E402
from tpuprep.torch import ConfigBatchDataset  # noqa: E402

LAYOUT, TILE = "layout:xla:random", "tile:xla"
DTYPES = {"x": torch.float32, "node_opcode": torch.int64, "edge_index": torch.int64, "rows": torch.int64,
          "group_size": torch.int64, "node_config_ids": torch.int64, "node_config_feat": torch.int8,
          "config_feat": torch.float32, "config_runtime": torch.int64, "config_runtime_normalizers": torch.int64,
          "config_node_mask": torch.bool, "config_mask": torch.bool}


def batches(shards, collection, split="train", k=8):
    """Three batches per graph (the tiny build has 2 layout train graphs)."""
    return tpuprep.ConfigBatches(tpuprep.open_dataset(shards), collection, split=split, k=k, seed=3,
                                 batches_per_graph=3)


def assert_matches(data: ConfigGraph, arrays: dict) -> None:
    """``data`` holds exactly ``arrays`` (a batch_arrays dict), as tpuprep.pyg documents."""
    n = len(arrays["node_feat"])
    assert data.num_nodes == n
    assert np.array_equal(data.x.numpy(), arrays["node_feat"])
    edges = np.asarray(arrays["edge_index"], np.int64).reshape(-1, 2)
    assert data.edge_index.shape == (2, len(edges))
    assert np.array_equal(data.edge_index[0].numpy(), edges[:, 1])  # the operand v of [u, v] ...
    assert np.array_equal(data.edge_index[1].numpy(), edges[:, 0])  # ... flows into u, which uses it
    same = ["node_opcode", "rows", "group_size", "node_config_ids", "node_config_feat", "config_feat",
            "config_runtime", "config_runtime_normalizers"]
    for key in same:
        assert (key in data) == (key in arrays), key
        if key in arrays:
            assert np.array_equal(data[key].numpy(), arrays[key]), key
    for key, value in data.to_dict().items():
        if isinstance(value, torch.Tensor) and key not in ("epoch", "position"):  # ints, tensors in a Batch
            assert value.dtype == DTYPES[key], (key, value.dtype)
    k = len(arrays["rows"])
    assert data.config_mask.shape == (k,) and bool(data.config_mask.all())
    if "node_config_ids" in arrays:
        assert np.flatnonzero(data.config_node_mask.numpy()).tolist() == sorted(arrays["node_config_ids"].tolist())
        assert data.node_config_feat.shape == (k, len(arrays["node_config_ids"]), 18)
    else:
        assert "config_node_mask" not in data
    assert data.graph_id == arrays["graph_id"] and int(data.position) == arrays["position"]


@pytest.mark.parametrize("collection", [LAYOUT, TILE])
@pytest.mark.parametrize("split", ["train", "test"])
def test_to_data_holds_the_batch(synth_shards, collection, split):
    for batch in batches(synth_shards, collection, split):
        data = to_data(batch)
        assert isinstance(data, Data) and isinstance(data, ConfigGraph)
        assert_matches(data, batch_arrays(batch))
        assert ("config_runtime" in data) == (split != "test")


def test_messages_flow_from_operands_to_their_users(synth_shards):
    """PyG's own message passing (SimpleConv, sum) on one-hot node ids: the message a node receives
    counts its operands — the v of every TpuGraphs row [u, v] whose u it is — and the flipped index its users."""
    batch = next(iter(batches(synth_shards, LAYOUT)))
    data = to_data(batch)
    n = data.num_nodes
    edges = np.asarray(batch.structure.edge_index, np.int64).reshape(-1, 2)
    operands, users = np.zeros((n, n)), np.zeros((n, n))
    np.add.at(operands, (edges[:, 0], edges[:, 1]), 1)  # operands[u, v]: u uses v
    np.add.at(users, (edges[:, 1], edges[:, 0]), 1)
    ids = torch.eye(n)
    conv = SimpleConv(aggr="sum")
    assert np.array_equal(conv(ids, data.edge_index).numpy(), operands)
    assert np.array_equal(conv(ids, data.edge_index.flip(0)).numpy(), users)
    assert operands.sum() > 0 and not np.array_equal(operands, users)


def test_dataloader_items_give_the_same_data(synth_shards):
    """A ConfigBatchDataset item (tensors, through 2 workers and collate_fn=to_data) is the same
    ConfigGraph as the ConfigBatch it came from."""
    expected = [to_data(b) for b in batches(synth_shards, LAYOUT)]
    loader = DataLoader(ConfigBatchDataset(batches(synth_shards, LAYOUT)), batch_size=None, num_workers=2,
                        collate_fn=to_data)
    got = list(loader)
    assert len(got) == len(expected) > 2
    for a, b in zip(got, expected, strict=True):
        assert isinstance(a, ConfigGraph) and a.keys() == b.keys()
        for key in a.keys():  # noqa: SIM118  (Data.keys is a method)
            va, vb = a[key], b[key]
            assert (torch.equal(va, vb) if isinstance(va, torch.Tensor) else va == vb), key


@pytest.mark.parametrize("collection", [LAYOUT, TILE])
def test_a_batch_of_graphs_gives_each_graph_back_padded(synth_shards, collection):
    items = list(batches(synth_shards, collection, k=64))[:4]
    counts = [len(b.sample.rows) for b in items]
    k = max(counts) + 3  # some padding on every graph
    batch = to_batch(items, k=k)
    assert isinstance(batch, Batch) and batch.num_graphs == len(items)
    assert batch.rows.shape == (len(items), k) and batch.config_mask.shape == (len(items), k)
    offsets = batch.ptr[:-1].tolist()
    if collection == LAYOUT:
        ncs = [len(b.structure.node_config_ids) for b in items]
        assert batch.node_config_feat.shape == (k, sum(ncs), 18)
        starts = np.cumsum([0, *ncs])
    for i, item in enumerate(items):
        arrays, c = batch_arrays(item), counts[i]
        one = batch.get_example(i)
        assert one.config_mask.tolist() == [True] * c + [False] * (k - c)
        assert one.rows[c:].tolist() == [-1] * (k - c) and one.group_size[c:].tolist() == [0] * (k - c)
        for key in CONFIG_KEYS:  # the real configs first, as to_data gives them
            if key in one:
                one[key] = one[key][:c]
        assert_matches(one, arrays)
        if collection == LAYOUT:  # in the Batch: ids offset by the nodes before, layouts along the nc axis
            ids = batch.node_config_ids[starts[i]:starts[i + 1]]
            assert np.array_equal(ids.numpy(), arrays["node_config_ids"] + offsets[i])
            assert bool((batch.batch[ids] == i).all())
            feat = batch.node_config_feat[:c, starts[i]:starts[i + 1]]
            assert np.array_equal(feat.numpy(), arrays["node_config_feat"])
            assert bool((batch.node_config_feat[c:, starts[i]:starts[i + 1]] == -1).all())
        else:
            assert bool((batch.config_feat[i, c:] == 0).all())
            assert bool((batch.config_runtime_normalizers[i, c:] == 1).all())


def test_workers_with_collate_fn_to_batch(synth_shards):
    """DataLoader(batch_size=2, collate_fn=to_batch) through 2 workers: every Batch is 2 items of one
    worker (an IterableDataset's workers batch their own shares), together exactly the items of one process."""
    collate = functools.partial(to_batch, k=8)

    def graphs(workers: int) -> list[tuple]:
        loader = DataLoader(ConfigBatchDataset(batches(synth_shards, TILE)), batch_size=2, num_workers=workers,
                            collate_fn=collate)
        out = []
        for batch in loader:
            assert isinstance(batch, Batch) and batch.num_graphs in (1, 2)  # 1: the end of a worker's share
            assert batch.config_feat.shape == (batch.num_graphs, 8, 24)
            for i in range(batch.num_graphs):
                one = batch.get_example(i)
                c = int(one.config_mask.sum())
                out.append((one.graph_id, int(one.position), one.rows[:c].tolist(), one.config_feat[:c].tolist(),
                            one.config_runtime[:c].tolist(), one.x.tolist(), one.edge_index.tolist()))
        return sorted(out, key=lambda item: item[1])

    alone = graphs(0)
    assert [item[1] for item in alone] == list(range(1, len(alone) + 1)) and len(alone) > 4  # positions 1..N
    assert graphs(2) == alone


def test_wrong_input_is_refused_in_one_line(synth_shards):
    layout, tile = next(iter(batches(synth_shards, LAYOUT))), next(iter(batches(synth_shards, TILE)))
    with pytest.raises(ValueError, match=r"^k must be at least"):
        to_data(layout, k=len(layout.sample.rows) - 1)
    with pytest.raises(ValueError, match=r"^k must be at least"):
        to_batch([layout], k=1)
    with pytest.raises(TypeError, match="ConfigBatch or a batch dict"):
        to_data({"rows": np.arange(3)})
    with pytest.raises(ValueError, match="cannot batch graphs with and without"):
        to_batch([layout, tile])
    test_split = next(iter(batches(synth_shards, LAYOUT, split="test")))
    with pytest.raises(ValueError, match="config_runtime"):
        to_batch([layout, test_split])
    with pytest.raises(ValueError, match="at least one"):
        to_batch([])
