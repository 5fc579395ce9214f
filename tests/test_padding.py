"""Static shapes (issue #28 item 3): ``sampling.padding`` pads a batch to a rung of a small ladder and
back exactly, padding never touches a real node, a collection's ladder has ≤ 8 rungs and fits all its
graphs, and ``JaxBatches`` yields ≤ 8 shape signatures per epoch where the unpadded stream has more."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from npzfactory import tile_arrays, write

import tpuprep
from tpuprep.sampling.batches import ConfigBatches, batch_arrays
from tpuprep.sampling.padding import MASKS, ShapeLadder, collection_sizes, pad_batch, unpad_batch

ROOT = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"}


def _batch(rng: np.random.Generator, layout: bool, n: int, m: int, nc: int, k: int) -> dict:
    """A batch_arrays-like dict of random contents with the real dtypes."""
    out = {"graph_id": "x:y", "epoch": 0, "position": 1,
           "node_feat": rng.standard_normal((n, 140)).astype(np.float32),
           "node_opcode": rng.integers(1, 120, n).astype(np.uint8),
           "edge_index": rng.integers(0, max(n, 1), (m, 2)).astype(np.int32),
           "rows": rng.permutation(1000)[:k].astype(np.int64),
           "group_size": rng.integers(1, 5, k).astype(np.int32),
           "config_runtime": rng.integers(1, 1 << 40, k).astype(np.int64)}
    if layout:
        out["node_config_ids"] = np.sort(rng.permutation(n)[:nc]).astype(np.int32)
        out["node_config_feat"] = rng.integers(-1, 6, (k, nc, 18)).astype(np.int8)
    else:
        out["config_feat"] = rng.standard_normal((k, 24)).astype(np.float32)
        out["config_runtime_normalizers"] = rng.integers(1, 1 << 40, k).astype(np.int64)
    return out


sizes = st.tuples(st.integers(1, 3000), st.integers(0, 6000), st.integers(1, 60))


@settings(max_examples=150, deadline=None)
@given(layout=st.booleans(), graph=sizes, others=st.lists(sizes, max_size=30), k=st.integers(1, 20),
       fewer=st.integers(0, 5), rungs=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_pad_then_unpad_gives_the_batch_back_exactly(layout, graph, others, k, fewer, rungs, seed):
    n, m, nc = graph
    nc = min(nc, n)
    real_k = max(1, k - fewer)  # a graph with fewer than k unique configs
    batch = _batch(np.random.default_rng(seed), layout, n, m, nc, real_k)
    every = [(n, m, nc), *others]
    ladder = ShapeLadder.from_sizes([s[0] for s in every], [s[1] for s in every],
                                    [s[2] for s in every] if layout else None, rungs=rungs)
    padded = pad_batch(batch, ladder, k)
    size = ladder.shape(padded["rung"])
    assert padded["node_feat"].shape == (size["node"], 140) and padded["edge_index"].shape == (size["edge"], 2)
    assert padded["rows"].shape == (k,) and padded["config_mask"].sum() == real_k
    if layout:
        assert padded["node_config_feat"].shape == (k, size["cnode"], 18)
    back = unpad_batch(padded)
    assert back.keys() == batch.keys()
    for key, value in batch.items():
        if isinstance(value, np.ndarray):
            assert back[key].dtype == value.dtype and np.array_equal(back[key], value), key
        else:
            assert back[key] == value

    # padding never reaches a real node: padded edges and padded config ids point at padding nodes
    node_mask, edge_mask = padded["node_mask"], padded["edge_mask"]
    assert not node_mask[-1] and node_mask.sum() == n
    assert not node_mask[padded["edge_index"][~edge_mask]].any()
    assert np.array_equal(padded["edge_index"][edge_mask], batch["edge_index"])
    if layout:
        assert not node_mask[padded["node_config_ids"][~padded["config_node_mask"]]].any()


@settings(max_examples=200, deadline=None)
@given(st.lists(sizes, min_size=1, max_size=300), st.booleans())
def test_a_collections_ladder_has_at_most_8_rungs_and_fits_every_graph(graphs, layout):
    n = [g[0] for g in graphs]
    m = [g[1] for g in graphs]
    nc = [min(g[2], g[0]) for g in graphs] if layout else None
    ladder = ShapeLadder.from_sizes(n, m, nc)
    assert 1 <= len(ladder) <= 8
    signatures = set()
    for i in range(len(graphs)):
        r = ladder.rung(n[i], m[i], nc[i] if layout else None)
        size = ladder.shape(r)
        assert n[i] < size["node"] and m[i] <= size["edge"] and (not layout or nc[i] <= size["cnode"])
        signatures.add(tuple(size.values()))
    assert len(signatures) <= 8
    top = ladder.shape(len(ladder) - 1)
    assert top["node"] > max(n) and top["edge"] >= max(m)


def test_a_graph_larger_than_the_top_rung_is_refused_in_one_line():
    ladder = ShapeLadder.from_sizes([10, 20], [15, 30], [3, 4])
    with pytest.raises(ValueError, match=r"larger than the ladder's top rung .*every graph it pads"):
        ladder.rung(500, 30, 4)
    with pytest.raises(ValueError, match="non-decreasing"):
        ShapeLadder((16, 8), (8, 8))
    with pytest.raises(ValueError, match="rungs must be"):
        ShapeLadder.from_sizes([1], [1], rungs=0)


@pytest.fixture(scope="module")
def varied_tile_shards(tmp_path_factory) -> Path:
    """20 tile train graphs of 20 different sizes (n = 3..98 nodes), 2-11 configs each (some < k)."""
    from tpuprep.build import build

    root = tmp_path_factory.mktemp("varied-tile")
    for i in range(20):
        write(root / "npz", f"tile/xla/train/g{i:02d}.npz", tile_arrays(seed=i, n=3 + 5 * i, c=2 + i % 10))
    build(root / "npz", root / "shards")
    return root / "shards"


def test_collection_sizes_are_the_graphs_rows(synth_shards, varied_tile_shards):
    ds = tpuprep.open_dataset(synth_shards)
    n, m, nc = collection_sizes(ds, "layout:xla:random")
    ids = ds.graph_ids("layout:xla:random")
    rows = [ds.graph_row(g) for g in ids]
    assert sorted(zip(n.tolist(), m.tolist(), nc.tolist(), strict=True)) == \
        sorted((r["num_nodes"], r["num_edges"], r["num_config_nodes"]) for r in rows)
    n, m, nc = collection_sizes(tpuprep.open_dataset(varied_tile_shards), "tile:xla")
    assert nc is None and sorted(n.tolist()) == [3 + 5 * i for i in range(20)]


def test_padded_batches_of_real_shards_unpad_to_batch_arrays(synth_shards):
    ds = tpuprep.open_dataset(synth_shards)
    for collection in ("layout:nlp:random", "tile:xla"):
        ladder = ShapeLadder.from_sizes(*collection_sizes(ds, collection))
        for b in ConfigBatches(ds, collection, k=32, batches_per_graph=2):
            arrays = batch_arrays(b)
            padded = pad_batch(arrays, ladder, 32)
            assert set(MASKS.values()) - set(padded) <= ({"config_node_mask"} if collection == "tile:xla" else set())
            back = unpad_batch(padded)
            assert all(np.array_equal(back[key], v) for key, v in arrays.items() if isinstance(v, np.ndarray))


SIGNATURES = """
import json, sys
import tpuprep
from tpuprep.jax import JaxBatches
ds = tpuprep.open_dataset(sys.argv[1])
out = {}
for pad in (True, False):
    batches = JaxBatches(tpuprep.ConfigBatches(ds, "tile:xla", k=8, batches_per_graph=2), pad=pad)
    shapes = {tuple((key, tuple(v.shape)) for key, v in sorted(item.items()) if hasattr(v, "shape"))
              for item in batches}
    out[str(pad)] = len(shapes)
print(json.dumps(out))
"""


def test_jax_batches_have_at_most_8_shapes_per_epoch_by_default(varied_tile_shards):
    """One epoch of a 20-size collection: 20 shape signatures unpadded (pad=False), ≤ 8 padded."""
    pytest.importorskip("jax")
    out = subprocess.run([sys.executable, "-c", SIGNATURES, str(varied_tile_shards)], capture_output=True,
                         text=True, env=ENV, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    counts = json.loads(out.stdout.splitlines()[-1])
    assert counts["False"] == 20 and 1 <= counts["True"] <= 8, counts


def _run_jax_example(shards: Path, collection: str, *extra: str) -> tuple[int, int]:
    script = ROOT / "docs" / "examples" / "batches_jax.py"
    out = subprocess.run([sys.executable, str(script), str(shards), collection, *extra], capture_output=True,
                         text=True, env=ENV, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.splitlines()[-1]
    fields = dict(f.split("=") for f in last.split())
    return int(fields["traces"]), int(fields["batches"])


def test_the_jax_example_compiles_its_step_at_most_8_times_per_epoch(varied_tile_shards, synth_shards):
    """docs/examples/batches_jax.py (shown in docs/readers.md) counts the traces of its jax.jit step:
    ≤ 8 for an epoch of 20 graph sizes, 20 with --no-pad; a layout collection trains through the
    same step, two epochs compiling no more than one."""
    pytest.importorskip("jax")
    traces, batches = _run_jax_example(varied_tile_shards, "tile:xla")
    assert batches == 20 and 1 <= traces <= 8
    assert _run_jax_example(varied_tile_shards, "tile:xla", "1", "--no-pad") == (20, 20)
    one = _run_jax_example(synth_shards, "layout:xla:random", "1")
    two = _run_jax_example(synth_shards, "layout:xla:random", "2")
    assert two[0] == one[0] <= 8 and two[1] == 2 * one[1]


@pytest.mark.parametrize("layout", [True, False])
def test_a_graph_as_large_as_a_rung_goes_to_the_next_one(layout):
    """A rung of N nodes holds graphs of n < N nodes: node N−1 must stay a padding node, the one every
    padded edge and padded config id points at. n = N goes one rung up, and n = the top N nowhere."""
    ladder = ShapeLadder((8, 16), (32, 32), (8, 8) if layout else None)
    assert ladder.rung(7, 5, 3) == 0 and ladder.rung(8, 5, 3) == 1
    batch = _batch(np.random.default_rng(0), layout, 8, 5, 3, 4)
    padded = pad_batch(batch, ladder, 4)
    assert padded["rung"] == 1 and padded["node_feat"].shape == (16, 140)
    assert padded["node_mask"].sum() == 8 and not padded["node_mask"][-1]
    assert (padded["edge_index"][5:] == 15).all()
    with pytest.raises(ValueError, match="larger than the ladder's top rung"):
        ladder.rung(16, 5, 3)


def test_padded_runtimes_rank_after_every_real_config():
    """Padding configs carry the int64 maximum (real runtimes of 0 are valid input): sorting by runtime,
    as an unmasked ranking loss would, puts every padding config last."""
    from tpuprep.sampling.padding import PAD_RUNTIME

    batch = _batch(np.random.default_rng(1), True, 20, 30, 4, 5)
    batch["config_runtime"][:2] = 0
    ladder = ShapeLadder.from_sizes([20], [30], [4])
    padded = pad_batch(batch, ladder, 8)
    runtime, mask = padded["config_runtime"], padded["config_mask"]
    assert runtime.dtype == np.int64 and np.iinfo(np.int64).max == PAD_RUNTIME
    assert (runtime[~mask] == PAD_RUNTIME).all() and (runtime[mask] < PAD_RUNTIME).all()
    order = np.argsort(runtime, kind="stable")
    assert not mask[order[-3:]].any() and mask[order[:5]].all()
    assert np.array_equal(unpad_batch(padded)["config_runtime"], batch["config_runtime"])
