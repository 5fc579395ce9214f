"""Graphs for the trainer, evaluator and predictor without holding a collection's codes.

A graph is used as its structure (``ds.load_graph(gid, configs=False)``) plus the few config-derived
inputs the model needs (:class:`~.features.ConfigDigest`: the layout modal blocks from at most
``features.MODAL_SAMPLE`` evenly spaced unique configs, the tile bound positions any config sets), read
by streaming the configs in blocks (``ds.iter_config_blocks``). Scoring every unique config of a graph
streams its configs the same way, so at any time one block of at most ``ROWS_PER_BLOCK`` decoded
configs and ``BLOCK_BYTES`` of layout values is held (:func:`rows_per_block`), never a graph's (let
alone a collection's) codes. Scores equal ``Ranker.predict_unique`` on the
whole record bit for bit: whatever the blocks, the model sees the same batches of ``SCORE_BATCH``
configs (inputs left over from one block are copied into one batch buffer that the next block fills,
so at most one block and one batch of inputs are held).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import encode_base7
from ..tpugraphs import config_rows_within
from .features import ConfigDigest, PreparedGraph, modal_of, modal_rows, tile_bounds_set
from .model import forward
from .ranker import Ranker

SCORE_BATCH = 1024
"""Configs per forward pass when scoring (as ``Ranker.predict_unique``)."""
ROWS_PER_BLOCK = 4 * SCORE_BATCH
"""Most decoded unique configs held at a time while streaming a graph (``ds.iter_config_blocks``; it
also bounds the configs a block decompresses)."""
BLOCK_BYTES = 32 * 2 ** 20
"""Most bytes of decoded layout values (k × nc × 18 int8) in one streamed block: 4,096 configs up to
nc = 455, 526 at nc = 3,541 (the largest graph of ``full``; 4,096 there would be 261 MB)."""


def rows_per_block(nc: int | None) -> int:
    """Configs per streamed block: ``ROWS_PER_BLOCK``, fewer for a layout graph of ``nc`` configurable
    nodes whose block would pass ``BLOCK_BYTES`` (tile: ``nc`` None)."""
    return ROWS_PER_BLOCK if nc is None else min(ROWS_PER_BLOCK, config_rows_within(nc, BLOCK_BYTES))


def config_digest(ds: Any, structure: Any, kind: str) -> ConfigDigest:
    """The config-derived inputs of a graph (``structure``: its ``load_graph(gid, configs=False)``),
    equal to those :func:`~.features.prepare_graph` computes from the whole record, read in blocks."""
    gid = structure.graph_id
    if kind == "layout":
        nc = len(structure.node_config_ids)
        rows = modal_rows(structure.num_unique_configs)
        codes = np.zeros((len(rows), nc, 3), np.int32)  # ≤ 4,096 × nc × 3 (174 MB at nc = 3,541)
        sizes = np.zeros(len(rows), np.int64)
        at = 0
        for block in ds.iter_config_blocks(gid, rows_per_block(nc), rows):
            k = len(block.group_size)
            codes[at:at + k] = encode_base7(block.node_config_feat)
            sizes[at:at + k] = block.group_size
            at += k
        return ConfigDigest(cfg_modal=modal_of(codes[:at], sizes[:at]))
    bounds = np.zeros(6, bool)
    for block in ds.iter_config_blocks(gid, ROWS_PER_BLOCK):
        bounds |= tile_bounds_set(block.config_feat)
    return ConfigDigest(bounds_set=bounds)


def prepare_streamed(ranker: Ranker, ds: Any, graph_id: str) -> tuple[Any, PreparedGraph]:
    """(structure GraphRecord read with ``configs=False``, prepared inputs for ``ranker``) of a graph."""
    structure = ds.load_graph(graph_id, configs=False)
    return structure, ranker.prepare(structure, config_digest(ds, structure, ranker.config.kind))


STRUCTURE_BYTES = 512 * 2 ** 20
"""Default bound of a :class:`StructureCache`: bytes of structures and prepared inputs kept."""


def nbytes(obj: Any) -> int:
    """Bytes of the NumPy arrays an object holds (through dataclass fields, lists and tuples)."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, list | tuple):
        return sum(nbytes(o) for o in obj)
    if hasattr(obj, "__dict__"):
        return sum(nbytes(v) for v in vars(obj).values())
    return 0


class StructureCache:
    """An LRU of prepared graph structures: ``get(gid)`` → (structure, PreparedGraph), bounded in bytes
    (``max_bytes``, the arrays of structure + prepared inputs) and optionally in graphs (``max_items``).
    The most recent graph is always kept; evicted ones are read and prepared again when next needed.
    No configs are held here (they come from the sampler or a stream). The config digest of every graph
    seen is kept apart from the LRU (``digests``: (nc, 3) int64 layout, (6,) bool tile — ≤ 85 KB a graph
    at nc = 3,541): computing it streams up to ``features.MODAL_SAMPLE`` configs (≤ 0.4 s CPU a graph of
    ``bench``) where preparing the structure again takes milliseconds, so an evicted graph comes back
    without reading a config and the LRU can stay small.
    """

    def __init__(self, ds: Any, ranker: Ranker, max_items: int | None = None,
                 max_bytes: int = STRUCTURE_BYTES):
        self.ds = ds
        self.ranker = ranker
        self.max_items = None if max_items is None else max(1, int(max_items))
        self.max_bytes = int(max_bytes)
        self._items: OrderedDict[str, tuple[Any, PreparedGraph, int]] = OrderedDict()
        self.digests: dict[str, ConfigDigest] = {}
        self.bytes = 0

    def get(self, graph_id: str, structure: Any = None) -> tuple[Any, PreparedGraph]:
        """(structure, prepared graph) of ``graph_id``; ``structure``: its ``load_graph(gid,
        configs=False)`` when the caller has it (a sampler batch's), else it is read."""
        item = self._items.get(graph_id)
        if item is not None:
            self._items.move_to_end(graph_id)
            return item[0], item[1]
        if structure is None:
            structure = self.ds.load_graph(graph_id, configs=False)
        digest = self.digests.get(graph_id)
        if digest is None:
            digest = self.digests[graph_id] = config_digest(self.ds, structure, self.ranker.config.kind)
        pg = self.ranker.prepare(structure, digest)
        size = nbytes(structure) + nbytes(pg)
        self._items[graph_id] = (structure, pg, size)
        self.bytes += size
        while len(self._items) > 1 and (self.bytes > self.max_bytes or (
                self.max_items is not None and len(self._items) > self.max_items)):
            self.bytes -= self._items.popitem(last=False)[1][2]
        return structure, pg

    def __len__(self) -> int:
        return len(self._items)


def sample_target(sample: Any, kind: str) -> np.ndarray | None:
    """Training target of a ConfigSample's configs: (k,) int64 ns (layout) or float64 runtime ÷
    normalizer (tile); None without runtimes (test split)."""
    if sample.config_runtime is None:
        return None
    if kind == "layout":
        return np.asarray(sample.config_runtime, np.int64)
    if sample.config_runtime_normalizers is None:
        return None
    return (np.asarray(sample.config_runtime, np.float64)
            / np.asarray(sample.config_runtime_normalizers, np.float64))


def score_streamed(ranker: Ranker, ds: Any, graph_id: str, pg: PreparedGraph,
                   rows: np.ndarray | None = None,
                   on_block: Callable[[Any], None] | None = None) -> np.ndarray:
    """Scores (k,) float64 (higher = slower) of the unique configs ``rows`` of a graph (all if None), in
    the order given, streamed in blocks of :func:`rows_per_block`; ``on_block(ConfigSample)`` sees every block
    (for what else a caller needs of the configs: runtimes, first_index, a baseline)."""
    st = ranker.static(pg)
    parts: list[np.ndarray] = []
    buf: np.ndarray | None = None  # one batch assembled across blocks (never two blocks at once)
    filled = 0

    def score(inputs: np.ndarray) -> None:
        s, _ = forward(ranker.params, pg, inputs, ranker.config, st, keep=False)
        parts.append(np.asarray(s, np.float64))

    nc = len(pg.config_pos) if pg.kind == "layout" else None
    for block in ds.iter_config_blocks(graph_id, rows_per_block(nc), rows):
        if on_block is not None:
            on_block(block)
        x = ranker.sample_inputs(pg, block)
        del block
        at = 0
        while at < len(x):
            if not filled and len(x) - at >= SCORE_BATCH:  # a whole batch inside the block: no copy
                score(x[at:at + SCORE_BATCH])
                at += SCORE_BATCH
                continue
            if buf is None:
                buf = np.empty((SCORE_BATCH, *x.shape[1:]), x.dtype)
            take = min(SCORE_BATCH - filled, len(x) - at)
            buf[filled:filled + take] = x[at:at + take]
            filled, at = filled + take, at + take
            if filled == SCORE_BATCH:
                score(buf)
                filled = 0
        del x
    if filled:
        assert buf is not None
        score(buf[:filled])
    return np.concatenate(parts) if parts else np.zeros(0, np.float64)
