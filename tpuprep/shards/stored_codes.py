"""A layout graph's codes kept as stored: the zstd-compressed ``codes`` column chunks of its row groups,
inflated a row group at a time when rows are asked for (issue #30: ``load_graph`` of a c_u = 100,040,
nc = 1,150 graph held 1.38 GB of int32 codes, 3× that while they were joined).

Each row group (≤ 64 configs) is one ``pages.Chunk`` and its bytes; ``pages.chunk_values`` turns them
into the rows' stored bytes (rows × 12·nt uint8, byte planes: ``kernels.planes``), checking every page's
CRC-32. The reader decodes every chunk once when it loads the graph (a corrupt page is ``BadShards``
then, as before), so later decodes only repeat a checked computation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ..errors import BadShards
from ..kernels.base7 import BLOCK, decode_base7
from ..kernels.planes import join_columns, join_planes
from . import pages
from .derived import expand_tied

CODE_LIMIT = 7**BLOCK
"""Stored codes lie in 0..CODE_LIMIT−1 (six base-7 digits)."""
BLOCK_ROWS = 1024
"""Configs decoded at once when every row is asked for (``codes()``, ``feat()``): 1,024 × nc × 18 bytes of
int8 layouts at most in flight beyond the output."""


class StoredCodes:
    """The codes of one layout graph as its shards store them.

    ``chunks`` / ``blocks``: per row group, in config_id order, its ``codes`` chunk (``pages.Chunk``) and
    that chunk's bytes (pages with headers, compressed; views of the ranges read, which also hold the
    few hundred bytes of small columns between two row groups' codes); ``starts`` (g + 1,) int64 the first config_id of
    each row group, then c_u; ``tie`` (nc,) int32 the stored column of each configurable node
    (``config_node_tie``, nt = tie.max() + 1 columns); ``where`` names the shard and ``graph_id`` the
    graph in errors.
    """

    def __init__(self, where: str, chunks: Sequence[pages.Chunk], blocks: Sequence[bytes | memoryview],
                 starts: np.ndarray, tie: np.ndarray, graph_id: str = ""):
        self.where, self.chunks, self.blocks = where, list(chunks), list(blocks)
        self.starts, self.tie, self.graph_id = starts, tie, graph_id
        self.nt = int(tie.max()) + 1 if len(tie) else 0

    def __eq__(self, other: object) -> bool:
        """The same codes stored the same way (row groups, bytes, ties), wherever they were read from."""
        if not isinstance(other, StoredCodes):
            return NotImplemented
        return (np.array_equal(self.starts, other.starts) and np.array_equal(self.tie, other.tie)
                and self.blocks == other.blocks
                and [(c.values, c.codec) for c in self.chunks] == [(c.values, c.codec) for c in other.chunks])

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict:
        """Picklable (memoryviews are not): the chunks' own bytes, without the ranges around them."""
        return self.__dict__ | {"blocks": [bytes(b) for b in self.blocks]}

    def __repr__(self) -> str:
        return f"StoredCodes({self.num_rows} configs, {len(self.tie)} nodes, {self.nbytes} bytes)"

    @property
    def num_rows(self) -> int:
        return int(self.starts[-1])

    @property
    def nbytes(self) -> int:
        """Bytes held: the compressed chunks (what a loaded layout graph keeps of its configs) and the
        bytes between them in the ranges they are views of."""
        held = {id(b.obj): b.obj for b in self.blocks if isinstance(b, memoryview)}
        return sum(len(b) for b in self.blocks if not isinstance(b, memoryview)) + sum(len(o) for o in held.values())

    def group(self, i: int) -> np.ndarray:
        """The stored bytes of row group i's configs: (rows, 12·nt) uint8 (a view of the inflated page)."""
        try:
            return pages.chunk_values(self.blocks[i], self.chunks[i].values, self.chunks[i].codec, 12 * self.nt)
        except pages.Unhandled as exc:  # checked at load: only memory corrupted since could get here
            raise BadShards(f"{self.where}: codes of row group {i} cannot be decoded: {exc}") from None

    def check(self) -> None:
        """Decode every row group once (CRC-32s, widths, counts): ``pages.Unhandled`` when one is not what
        the direct decoder reads (then the caller reads the graph with pyarrow, which names a corrupt
        page)."""
        for chunk, block in zip(self.chunks, self.blocks, strict=True):
            pages.chunk_values(block, chunk.values, chunk.codec, 12 * self.nt)

    def raw(self, rows: np.ndarray) -> np.ndarray:
        """The stored bytes of ``rows`` ((k,) int64 in −c_u..c_u−1 as NumPy indexes them, any order, repeats
        allowed): (k, 12·nt) uint8; each row group holding one is inflated once. ``IndexError`` otherwise."""
        if len(rows) and (rows.min() < -self.num_rows or rows.max() >= self.num_rows):
            bad = int(rows[(rows < -self.num_rows) | (rows >= self.num_rows)][0])
            raise IndexError(f"row {bad} of a graph of {self.num_rows} unique configs")
        rows = np.where(rows < 0, rows + self.num_rows, rows)
        where = np.searchsorted(self.starts, rows, side="right") - 1
        out = np.empty((len(rows), 12 * self.nt), np.uint8)
        order = np.argsort(where, kind="stable")
        sorted_where = where[order]
        cuts = np.flatnonzero(np.diff(sorted_where)) + 1
        for piece in np.split(order, cuts) if len(order) else []:
            g = int(where[piece[0]])
            out[piece] = self.group(g)[rows[piece] - self.starts[g]]
        return out

    def _pieces(self, rows: np.ndarray | None) -> Iterator[tuple[np.ndarray | range, np.ndarray]]:
        """(the unique configs of the piece, their stored bytes (b, 12·nt) uint8) of consecutive blocks
        of ``rows`` (all: by row group, at most ``BLOCK_ROWS`` configs each), in order."""
        if rows is not None:
            for at in range(0, len(rows), BLOCK_ROWS):
                yield rows[at:at + BLOCK_ROWS], self.raw(rows[at:at + BLOCK_ROWS])
            return
        for g in range(len(self.blocks)):
            yield range(int(self.starts[g]), int(self.starts[g + 1])), self.group(g)

    def _decoded(self, which: np.ndarray | range, data: np.ndarray) -> np.ndarray:
        """The stored bytes ``data`` of the unique configs ``which``, decoded: (b, nt, 18) int8.
        ``BadShards`` naming the shard, the graph, the config and its stored column when a code lies
        outside 0..7^6−1 (no layout encodes to one; the page CRC-32s cannot tell: it was written so)."""
        codes = join_planes(data).reshape(len(data), self.nt, 3)
        try:
            return decode_base7(codes)
        except ValueError:
            bad = np.argwhere((codes < 0) | (codes >= CODE_LIMIT))[0]
            row = int(which[int(bad[0])]) % self.num_rows
            raise BadShards(f"{self.where}: configs of {self.graph_id!r} cannot be decoded: config {row} "
                            f"holds the code {int(codes[tuple(bad)])} (stored column {int(bad[1])}, block "
                            f"{int(bad[2])}); base-7 codes lie in 0..{CODE_LIMIT - 1}") from None

    def codes(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Per-node codes of ``rows`` (all if None): (k, nc, 3) int32 (12 bytes per config per node)."""
        k = self.num_rows if rows is None else len(rows)
        out = np.empty((k, len(self.tie), 3), np.int32)
        at = 0
        for _, data in self._pieces(rows):
            out[at:at + len(data)] = join_columns(data, self.tie)
            at += len(data)
        return out

    def feat(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Decoded layouts of ``rows`` (all if None): (k, nc, 18) int8, the stored columns decoded and then
        spread over the tied nodes (nt ≤ nc: less to decode)."""
        k = self.num_rows if rows is None else len(rows)
        out = np.empty((k, len(self.tie), 18), np.int8)
        at = 0
        for which, data in self._pieces(rows):
            if len(data):
                out[at:at + len(data)] = expand_tied(self._decoded(which, data), self.tie)
            at += len(data)
        return out
