"""JAX adapter (``pip install tpuprep[jax]``): ``JaxBatches``, an iterator of dicts of ``jax.numpy``
arrays over ``ConfigBatches``.

No global JAX flag is touched (``jax_enable_x64`` stays as the caller set it). Without x64 JAX would
turn int64 into int32 and runtimes in ns overflow int32, so every int64 array — ``config_runtime``
(k,) ns, ``config_runtime_normalizers`` (k,) ns (tile) and ``rows`` (k,) — stays a NumPy int64 array
(exact; convert with ``jnp.asarray(x, jnp.float32)`` or after enabling x64 yourself). The other arrays
are ``jax.numpy`` arrays of the same dtype: node_feat (n, 140) float32, node_opcode (n,) uint8,
edge_index (m, 2) int32, group_size (k,) int32, node_config_ids (nc,) int32 and node_config_feat
(k, nc, 18) int8 (layout) or config_feat (k, 24) float32 (tile); ``graph_id`` (str), ``epoch`` and
``position`` (int) as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax.numpy as jnp
import numpy as np

from .sampling.batches import BatchesAdapter, ConfigBatches, batch_arrays

__all__ = ["JaxBatches", "to_jax"]


class JaxBatches(BatchesAdapter):
    """The batches of a ``ConfigBatches`` (one epoch per iteration) as dicts of JAX arrays (``len``,
    ``set_epoch``, ``state_dict``, ``load_state_dict``: ``BatchesAdapter``)."""

    def __init__(self, batches: ConfigBatches):
        self.batches = batches

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch in self.batches:
            yield to_jax(batch_arrays(batch))


def to_jax(arrays: dict[str, Any]) -> dict[str, Any]:
    """NumPy arrays → ``jax.numpy`` arrays, except int64 ones (kept as NumPy, exact); others as they are."""
    return {key: jnp.asarray(value) if isinstance(value, np.ndarray) and value.dtype != np.int64 else value
            for key, value in arrays.items()}
