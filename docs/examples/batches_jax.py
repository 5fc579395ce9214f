"""Train a small GNN ranker with one jax.jit step on tpuprep.jax.JaxBatches, padded to static shapes, and
count how often the step is traced (compiled): once per rung of the shape ladder, at most 8 (needs
tpuprep[jax]; layout or tile collections).

Usage: python batches_jax.py SHARDS COLLECTION [EPOCHS] [--no-pad]  -> last line: traces=<t> batches=<b>
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import tpuprep
from tpuprep.jax import JaxBatches

TRACES = 0  # incremented while jax.jit traces `step`, i.e. once per new shape signature
H = 32


def init(layout: bool) -> dict[str, jax.Array]:
    k = jax.random.split(jax.random.key(0), 6)
    shapes = {"opcode": (121, H), "feat": (134, H), "self": (H, H), "neigh": (H, H),
              "config": (18 * 7 if layout else 24, H), "out": (H,)}
    return {name: jax.random.normal(key, shape) / np.sqrt(shape[0])
            for key, (name, shape) in zip(k, shapes.items(), strict=True)}


def scores(p, b, mean, std) -> jax.Array:
    """(k,) scores, higher = slower. Padded nodes are zeroed; padded edges join padding node N-1 to itself."""
    node = b["node_mask"][:, None]
    h = jnp.tanh((b["node_feat"][:, :134] - mean) / std @ p["feat"] + p["opcode"][b["node_opcode"]]) * node
    src, dst = b["edge_index"][:, 0], b["edge_index"][:, 1]
    agg = jnp.zeros_like(h).at[src].add(h[dst]).at[dst].add(h[src])  # both directions, mean below
    deg = jnp.zeros(h.shape[0]).at[src].add(1.0).at[dst].add(1.0)
    h = jnp.tanh(h @ p["self"] + agg / jnp.maximum(deg, 1.0)[:, None] @ p["neigh"]) * node
    graph = h.sum(0) / node.sum()
    if "node_config_feat" in b:  # layout: each configurable node's 18 layout values, one-hot over -1..5
        feat = b["node_config_feat"]
        onehot = jax.nn.one_hot(feat + 1, 7).reshape(*feat.shape[:2], 18 * 7)  # (k, NC, 126)
        z = jnp.tanh(h[b["node_config_ids"]][None] + onehot @ p["config"])  # (k, NC, H)
        cmask = b["config_node_mask"][None, :, None]
        per_config = (z * cmask).sum(1) / cmask.sum() + graph  # (k, H)
    else:  # tile: one (24,) feature vector per config
        per_config = jnp.tanh(graph[None] + b["config_feat"] @ p["config"])
    return per_config @ p["out"]


def loss(p, b, ranks, mean, std) -> jax.Array:
    """Pairwise hinge over the real configs: a slower config should score higher by a margin of 1."""
    s = scores(p, b, mean, std)
    pairs = b["config_mask"][:, None] & b["config_mask"][None, :] & (ranks[:, None] > ranks[None, :])
    return (jnp.maximum(0.0, 1.0 - (s[:, None] - s[None, :])) * pairs).sum() / jnp.maximum(pairs.sum(), 1)


@jax.jit
def step(p, b, ranks, mean, std):
    global TRACES
    TRACES += 1  # Python code runs only while tracing: this counts compilations
    value, grads = jax.value_and_grad(loss)(p, b, ranks, mean, std)
    return jax.tree.map(lambda w, g: w - 0.05 * g, p, grads), value


if __name__ == "__main__":
    shards, collection = sys.argv[1:3]
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3].isdigit() else 1
    pad = "--no-pad" not in sys.argv
    ds = tpuprep.open_dataset(shards)
    mean, std = (jnp.asarray(a, jnp.float32) for a in ds.normalizer(collection))  # (134,) each
    batches = JaxBatches(tpuprep.ConfigBatches(ds, collection, split="train", k=16, seed=0), pad=pad)
    print("ladder", batches.ladder)  # rungs of (nodes, edges, configurable nodes) from the collection's sizes
    params, count = init(collection.startswith("layout")), 0
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        value = float("nan")  # an epoch with no batch (an empty split) prints nan
        for item in batches:
            b = {key: v for key, v in item.items() if isinstance(v, jax.Array)}  # int64 stay NumPy: not here
            if not pad:  # unpadded arrays have no masks: every entry is real
                b |= {"node_mask": jnp.ones(len(b["node_feat"]), bool),
                      "config_mask": jnp.ones(len(item["rows"]), bool)}
                b |= {"config_node_mask": jnp.ones(len(b["node_config_ids"]), bool)} if "node_config_ids" in b else {}
            # runtimes (int64 ns) -> dense ranks: exact order, ties equal, small float32 values
            ranks = jnp.asarray(np.unique(item["config_runtime"], return_inverse=True)[1], jnp.float32)
            params, value = step(params, b, ranks, mean, std)
            count += 1
        print(f"epoch {epoch}: loss {float(value):.4f}")
    print(f"traces={TRACES} batches={count}")
