"""JAX adapter (``pip install tpuprep[jax]``): ``JaxBatches``, an iterator of dicts of ``jax.numpy``
arrays over ``ConfigBatches``, padded to static shapes by default.

Static shapes: a ``jax.jit`` step compiles once per distinct input shape, and graphs all differ in size
(122 shapes in one unpadded epoch of tile:xla). By default every batch is padded
(``sampling.padding.pad_batch``) to the first rung of a ``ShapeLadder`` its graph fits — at most 8 rungs
of (nodes N, edges M, configurable nodes NC) built from the graph sizes of the batches' collection (of
every collection of a mix) over all splits, the top rung being the largest graph — and to exactly k
configs, so one epoch has at most ``len(ladder)`` shape signatures. Masks mark the real entries:
``node_mask`` (N,), ``edge_mask`` (M,), ``config_mask`` (k,) (False on the padding rows of a graph with
fewer than k unique configs), and for layout ``config_node_mask`` (NC,), all bool; ``rung`` (int) says
which rung. Padded edges and padded ``node_config_ids`` point at node N−1, always a padding node, so
message passing that ignores ``edge_mask`` still never mixes padding into a real node; padded
``config_runtime`` is 2**63 − 1 ns (``PAD_RUNTIME``, slower than any real runtime: a ranking loss that
ignores ``config_mask`` ranks padding last, never first). ``pad=False`` yields the unpadded arrays (no
masks); ``ladder=`` gives your own (e.g. one shared by several collections).

No global JAX flag is touched (``jax_enable_x64`` stays as the caller set it). Without x64 JAX would
turn int64 into int32 and runtimes in ns overflow int32, so every int64 array — ``config_runtime``
(k,) ns, ``config_runtime_normalizers`` (k,) ns (tile) and ``rows`` (k,) — stays a NumPy int64 array
(exact; convert with ``jnp.asarray(x, jnp.float32)`` or after enabling x64 yourself). The other arrays
are ``jax.numpy`` arrays of the same dtype: node_feat (n, 140) float32, node_opcode (n,) uint8,
edge_index (m, 2) int32, group_size (k,) int32, node_config_ids (nc,) int32 and node_config_feat
(k, nc, 18) int8 (layout) or config_feat (k, 24) float32 (tile), the masks bool; ``graph_id`` and
``collection`` (str), ``epoch``, ``position`` and ``rung`` (int) as they are. (Padded: n, m, nc read N, M, NC.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from .sampling.batches import BatchesAdapter, ConfigBatches, batch_arrays
from .sampling.padding import DEFAULT_RUNGS, PAD_RUNTIME, ShapeLadder, collection_sizes, pad_batch

__all__ = ["PAD_RUNTIME", "JaxBatches", "ShapeLadder", "collection_ladder", "to_jax"]


def collection_ladder(ds: Any, collection: str | Sequence[str], rungs: int = DEFAULT_RUNGS) -> ShapeLadder:
    """The default ladder of a collection, or of several (a mix, all layout or all tile):
    ``ShapeLadder.from_sizes`` over their graphs of every split."""
    names = [collection] if isinstance(collection, str) else list(collection)
    sizes = [collection_sizes(ds, name) for name in names]
    nodes, edges = (np.concatenate([s[axis] for s in sizes]) for axis in (0, 1))
    config_nodes = None if any(s[2] is None for s in sizes) else np.concatenate([s[2] for s in sizes])
    return ShapeLadder.from_sizes(nodes, edges, config_nodes, rungs=rungs)


class JaxBatches(BatchesAdapter):
    """The batches of a ``ConfigBatches`` (one epoch per iteration) as dicts of JAX arrays, padded to
    a ``ShapeLadder`` (module docstring) unless ``pad=False`` (``len``, ``set_epoch``, ``state_dict``,
    ``load_state_dict``: ``BatchesAdapter``). ``ladder``: default ``collection_ladder`` of the
    batches' collections with ``rungs`` rungs (read once, here)."""

    def __init__(self, batches: ConfigBatches, pad: bool = True, ladder: ShapeLadder | None = None,
                 rungs: int = DEFAULT_RUNGS):
        self.batches = batches
        self.pad = pad
        self.ladder = (ladder if ladder is not None or not pad
                       else collection_ladder(batches.ds, batches.collections, rungs))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch in self.batches:
            arrays = batch_arrays(batch)
            if self.pad:
                arrays = pad_batch(arrays, self.ladder, self.batches.k)
            yield to_jax(arrays)


def to_jax(arrays: dict[str, Any]) -> dict[str, Any]:
    """NumPy arrays → ``jax.numpy`` arrays, except int64 ones (kept as NumPy, exact); others as they are."""
    return {key: jnp.asarray(value) if isinstance(value, np.ndarray) and value.dtype != np.int64 else value
            for key, value in arrays.items()}
