"""tpuprep.pyg (issue #38 item 4): batches as torch_geometric Data / Batch, checked with PyG itself.

Every key equals the batch it came from (values, dtypes, shapes); the edge direction is the data flow,
proven by PyG's own message passing against a dense count from TpuGraphs' [u, v] rows; a Batch of
several graphs gives each graph back (``get_example``) with its configs padded and masked; DataLoader
workers with ``collate_fn`` give what one process gives, ``to_data``'s graphs through the workers' rings
(never as views of a ring) into a buffer of their own.
"""

from __future__ import annotations

import functools
import pickle

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
    assert data.collection == arrays["collection"] and int(data.epoch) == arrays["epoch"]


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


def assert_same_graphs(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert type(a) is ConfigGraph and a.keys() == b.keys()
        for key in a.keys():  # noqa: SIM118  (Data.keys is a method)
            va, vb = a[key], b[key]
            assert (torch.equal(va, vb) and va.dtype == vb.dtype if isinstance(va, torch.Tensor) else va == vb), key


def assert_own_buffers(graphs: list) -> None:
    """Each graph's tensors are views of one buffer of its own (not shared memory, not another graph's),
    writable."""
    seen = set()
    for graph in graphs:
        tensors = [v for v in graph.to_dict().values() if isinstance(v, torch.Tensor)]
        storages = {t.untyped_storage().data_ptr() for t in tensors}
        assert len(storages) == 1 and not storages & seen and not any(t.is_shared() for t in tensors)
        assert tensors[0].untyped_storage().nbytes() < 1 << 20  # not a worker's ring (16 MiB)
        seen |= storages
        graph.x[0, 0] = 1.5


@pytest.mark.parametrize("transfer_bytes", [None, 50_064])  # the ring; one too small for most graphs
def test_dataloader_items_give_the_same_data(synth_shards, transfer_bytes):
    """collate_fn=to_data in 2 workers gives the ConfigGraphs of one process, each in a buffer of its
    own: the graph crosses through the worker's ring, which the main process reads and releases (or,
    without room, with its bytes), never as views of the ring."""
    from tpuprep import torch as adapter

    extra = {} if transfer_bytes is None else {"transfer_bytes": transfer_bytes}
    expected = [to_data(b) for b in batches(synth_shards, LAYOUT)]
    loader = DataLoader(ConfigBatchDataset(batches(synth_shards, LAYOUT), **extra), batch_size=None, num_workers=2,
                        collate_fn=to_data, persistent_workers=True, prefetch_factor=8)
    got = list(loader)
    assert len(got) > 2
    assert_same_graphs(got, expected)
    assert_own_buffers(got)
    if transfer_bytes is None:  # every graph fits: both workers' rings read and released
        pids = {w.pid for w in loader._iterator._workers}
        rings = [ring for key, ring in adapter._RECEIVED.items() if key[0] in pids]
        assert len(rings) == 2 and all(ring.consumed > 0 for ring in rings)


def test_spawn_workers_give_the_same_data(synth_shards):
    """The same through spawn workers (which import tpuprep.pyg to unpickle the collate_fn)."""
    expected = [to_data(b, k=8) for b in batches(synth_shards, TILE)]
    loader = DataLoader(ConfigBatchDataset(batches(synth_shards, TILE)), batch_size=None, num_workers=2,
                        collate_fn=functools.partial(to_data, k=8), multiprocessing_context="spawn")
    got = list(loader)
    assert len(got) > 2
    assert_same_graphs(got, expected)
    assert_own_buffers(got)


def _in_worker(monkeypatch, transfer_bytes: int):
    """This process as DataLoader worker 0 with a fresh ring of ``transfer_bytes``."""
    import torch.utils.data._utils.worker as worker_module

    from tpuprep import torch as adapter

    monkeypatch.setattr(adapter, "_SENDER", adapter._Sender())
    adapter._SENDER.transfer_bytes = transfer_bytes
    monkeypatch.setattr(worker_module, "_worker_info", worker_module.WorkerInfo(id=0, num_workers=1, seed=0,
                                                                               dataset=None))
    return adapter


def test_in_a_worker_a_graph_is_staged_in_the_ring_and_pickled_as_where_it_is(synth_shards, monkeypatch):
    """to_data of a worker's item (its tensors views of the ring) copies the graph into a region of its
    own; pickled, only where it is goes; changed after to_data, it goes with its (changed) bytes."""
    import copy
    from multiprocessing.reduction import ForkingPickler

    import torch.utils.data._utils.worker as worker_module

    batch = next(iter(batches(synth_shards, LAYOUT)))
    expected = to_data(batch)
    adapter = _in_worker(monkeypatch, 1 << 20)
    item = adapter._tensors_of(batch)
    assert item.staged is not None
    graph = to_data(item)
    assert all(adapter.in_ring(v) for v in graph.to_dict().values() if isinstance(v, torch.Tensor))
    changed = copy.copy(graph)
    changed.x = changed.x + 1
    blobs = [bytes(ForkingPickler.dumps(g)) for g in (graph, changed)]
    monkeypatch.setattr(worker_module, "_worker_info", None)  # the main process
    assert len(blobs[0]) < 2000 < expected.x.numel() * 4 < len(blobs[1])
    got = [pickle.loads(blob) for blob in blobs]
    assert_same_graphs(got[:1], [expected])
    assert torch.equal(got[1].x, expected.x + 1)
    assert_own_buffers(got)


def test_in_a_worker_a_graph_refused_by_the_ring_owns_its_tensors(synth_shards, monkeypatch):
    """A ring with room for the worker's item but not for its graph: the graph's tensors are copies, none
    a view of the ring (whose region a later batch reuses), and it crosses with its bytes."""
    from multiprocessing.reduction import ForkingPickler

    import torch.utils.data._utils.worker as worker_module

    from tpuprep.sampling.transfer import HEADER, aligned_offsets

    batch = next(iter(batches(synth_shards, LAYOUT)))
    expected = to_data(batch)
    size = aligned_offsets([v.nbytes for v in batch_arrays(batch).values() if isinstance(v, np.ndarray)])[1]
    adapter = _in_worker(monkeypatch, HEADER + 2 * size)
    item = adapter._tensors_of(batch)
    assert item.staged is not None and adapter.in_ring(item["node_feat"])
    graph = to_data(item)
    assert "_staged" not in graph.__dict__
    assert not any(adapter.in_ring(v) for v in graph.to_dict().values() if isinstance(v, torch.Tensor))
    blob = bytes(ForkingPickler.dumps(graph))
    monkeypatch.setattr(worker_module, "_worker_info", None)
    assert_same_graphs([pickle.loads(blob)], [expected])


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


@pytest.mark.parametrize("where", ["worker", "main"])
def test_workers_with_collate_fn_to_batch(synth_shards, where):
    """DataLoader(batch_size=2) through 2 workers, with collate_fn=to_batch (the Batch made in the worker) or
    collate_fn=list and to_batch in the main process (the items through the ring): every Batch is 2 items
    of one worker (an IterableDataset's workers batch their own shares), together exactly the items of one
    process."""
    collate = functools.partial(to_batch, k=8)

    def graphs(workers: int) -> list[tuple]:
        loader = DataLoader(ConfigBatchDataset(batches(synth_shards, TILE)), batch_size=2, num_workers=workers,
                            collate_fn=collate if where == "worker" else list)
        out = []
        for batch in loader:
            batch = batch if where == "worker" else collate(batch)
            assert isinstance(batch, Batch) and batch.num_graphs in (1, 2)  # 1: the end of a worker's share
            assert batch.config_feat.shape == (batch.num_graphs, 8, 24)
            assert all(v.untyped_storage().nbytes() < 1 << 20 for v in batch.to_dict().values()
                       if isinstance(v, torch.Tensor))  # no view of a worker's ring
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
