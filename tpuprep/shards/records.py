"""What the reader returns: ``GraphRecord`` (one graph as stored) and ``ConfigSample`` (k unique configs
of one graph), and the helpers that turn Arrow columns into their read-only NumPy arrays."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa

from ..kernels.base7 import decode_base7
from ..tpugraphs import ConfigCounts, collection_kind
from .parquet import flat
from .stored_codes import StoredCodes


def taken_column(table: pa.Table, taken: pa.Table, name: str) -> np.ndarray | None:
    """Column ``name`` of the rows ``taken`` from ``table`` as a fresh NumPy array, None when the column
    holds nulls in ``table`` (the test split's runtimes: decided on every row read, even for k = 0)."""
    return None if table.column(name).null_count else flat(taken.column(name)).copy()


def sample_fields(graph_id: str, rows: np.ndarray, table: pa.Table, taken: pa.Table) -> dict:
    """The ConfigSample fields common to layout and tile, from the rows ``taken`` out of ``table``."""
    return {"graph_id": graph_id, "rows": rows, "config_runtime": taken_column(table, taken, "runtime"),
            "config_runtime_spread": taken_column(table, taken, "runtime_spread"),
            "group_size": flat(taken.column("group_size")).copy(),
            "first_index": flat(taken.column("first_index")).copy()}


def flat_or_none(column: pa.ChunkedArray) -> np.ndarray | None:
    """A flat int64/... column as NumPy, None when it holds nulls (the test split's runtimes)."""
    return None if column.null_count else flat(column)


def list_cell(table: pa.Table, column: str, row: int, width: int | None = None) -> np.ndarray | None:
    """The list cell (``column``, ``row``) of a graphs row group as NumPy (rows of ``width`` if given), None
    when null: a zero-copy view when the cell is one Arrow chunk."""
    col = table.column(column)
    cell = col.slice(row, 1)
    if cell.null_count:
        return None
    values = flat(cell.combine_chunks() if cell.num_chunks != 1 else cell.chunk(0))
    return values.reshape(-1, width) if width else values




@dataclass
class GraphRecord(ConfigCounts):
    """One graph as stored (docs/spec.md §4). Shapes: n' kept nodes, m' kept edges, nc configurable nodes,
    c original configs, c_u unique configs. Runtimes in ns.

    node_feat (n', 140) float32; node_opcode (n',) uint8; edge_index (m', 2) int32;
    node_index (n',) int32; node_config_ids (nc,) int32 and node_splits (s,) int32 (layout, else None);
    config_runtime (c_u,) int64 (None on test); group_size, first_index (c_u,) int32;
    config_inverse (c,) int32; config_runtime_original (c,) int64 (None on test);
    config_codes (c_u, nc, 3) int32 (layout, else None); config_feat (c_u, 24) float32,
    config_runtime_normalizers (c_u,) int64 and config_runtime_normalizers_original (c,) int64
    (tile, normalizers None on test); config_runtime_spread (c_u,) int64, the largest minus the
    smallest original runtime of each duplicate group, ns (0 for a group of one; layout: the largest is
    config_runtime + config_runtime_spread; None on test); config_node_tie (nc,) int32 (layout): the stored codes column
    of each configurable node (tied nodes, equal in every config, share one).

    ``load_graph(graph_id, configs=False)`` leaves every per-unique-config array (config_runtime,
    group_size, first_index, config_codes, config_feat, config_runtime_normalizers, config_runtime_spread)
    None: the structure only, read without opening a configs shard.

    Memory of a layout graph (issue #30): its codes stay as stored, the zstd-compressed ``codes`` column
    chunks of its row groups (``stored_codes``, a ``StoredCodes``: about the shard's bytes, 0.1–0.7 bytes
    per config per configurable node on the ``full`` profile), and ``node_config_feat(rows)`` inflates
    only the row groups holding ``rows``, one block at a time (``stored_codes`` is not an ``__init__``
    argument: ``dataclasses.replace`` makes a record of ``config_codes``). ``config_codes`` is built on first use
    from them and then kept: 12 bytes per config per configurable node (1.38 GB for c_u = 100,040 and
    nc = 1,150), so prefer ``node_config_feat(rows)`` or ``Dataset.iter_config_blocks`` on big graphs.
    Everything else is O(c + c_u + n·140·4 bytes).

    Every array is read-only (``flags.writeable`` False): most are zero-copy views of the Arrow
    buffers the shard was decoded into, and the rest are frozen too so that all fields behave alike.
    Take a writable copy with ``.copy()`` (e.g. ``x = g.node_feat.copy(); x[:, :134] -= mean``).
    """

    graph_id: str
    collection: str
    split: str
    fold: int
    source_file: str
    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    node_index: np.ndarray
    config_runtime: np.ndarray | None
    group_size: np.ndarray | None
    first_index: np.ndarray | None
    config_inverse: np.ndarray
    config_runtime_original: np.ndarray | None
    node_config_ids: np.ndarray | None = None
    node_splits: np.ndarray | None = None
    config_codes: np.ndarray | None = field(default=None, repr=False)
    config_feat: np.ndarray | None = None
    config_runtime_normalizers: np.ndarray | None = None
    config_runtime_normalizers_original: np.ndarray | None = None
    config_runtime_spread: np.ndarray | None = None
    config_node_tie: np.ndarray | None = None
    stored_codes: StoredCodes | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def kind(self) -> str:
        return collection_kind(self.collection)

    def node_config_feat(self, rows: np.ndarray | list[int] | None = None) -> np.ndarray:
        """Decoded layouts (k, nc, 18) int8 of unique configs ``rows`` in the order given (all if None).
        Only the row groups holding ``rows`` are inflated (``StoredCodes.feat``), never the whole graph."""
        if self.stored_codes is None and self.config_codes is None and self.config_feat is None:
            raise ValueError(f"{self.graph_id} was loaded with configs=False: use sample_configs or "
                             "load_graph(graph_id) for its configs")
        if self.stored_codes is not None:
            return self.stored_codes.feat(None if rows is None else np.asarray(rows, dtype=np.int64))
        if self.config_codes is None:
            raise ValueError(f"{self.graph_id} is a tile graph: it has config_feat, not node_config_feat")
        codes = self.config_codes if rows is None else self.config_codes[np.asarray(rows, dtype=np.int64)]
        return decode_base7(codes)


def _get_codes(record: GraphRecord) -> np.ndarray | None:
    """``config_codes``: the array given, else built once from ``stored_codes`` (then kept, read-only)."""
    codes = record.__dict__.get("_config_codes")
    if codes is None and record.stored_codes is not None:
        codes = record.stored_codes.codes()
        codes.flags.writeable = False
        record.__dict__["_config_codes"] = codes
    return codes


def _set_codes(record: GraphRecord, value: np.ndarray | None) -> None:
    record.__dict__["_config_codes"] = value


GraphRecord.config_codes = property(_get_codes, _set_codes, doc="(c_u, nc, 3) int32 codes (layout, else None), "
                                    "built on first use when the record keeps them as stored")


def read_only(record: GraphRecord) -> GraphRecord:
    """Make every array field of ``record`` read-only (in place; views of Arrow buffers already are)."""
    for value in vars(record).values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return record



@dataclass
class ConfigSample:
    """k sampled unique configs of one graph (``Dataset.sample_configs``). Every array is a fresh,
    writable NumPy array owned by the sample.

    rows (k,) int64: unique-config rows, the numbering of ``load_graph`` (``config_id``), distinct, in
    the order drawn; config_runtime (k,) int64 ns (None on test); config_runtime_spread (k,) int64 ns, the
    largest minus the smallest runtime of each row's duplicate group (None on test); group_size, first_index (k,) int32;
    node_config_feat (k, nc, 18) int8 (layout, else None); config_feat (k, 24) float32 and
    config_runtime_normalizers (k,) int64 (tile, else None; normalizers None on test).
    """

    graph_id: str
    rows: np.ndarray
    config_runtime: np.ndarray | None
    config_runtime_spread: np.ndarray | None
    group_size: np.ndarray
    first_index: np.ndarray
    node_config_feat: np.ndarray | None = None
    config_feat: np.ndarray | None = None
    config_runtime_normalizers: np.ndarray | None = None

    def take(self, positions: np.ndarray) -> ConfigSample:
        """The entries at ``positions`` ((k,) ints into this sample's arrays) as a new sample of fresh
        arrays; for a sample of all of a graph's rows in order (``read_configs(g, arange(c_u))``)
        positions are rows, so ``full.take(rows)`` equals ``read_configs(g, rows)``."""
        positions = np.asarray(positions, np.int64)
        picked = {f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[positions]
                  for f in fields(self) if f.name != "graph_id"}
        return ConfigSample(graph_id=self.graph_id, **picked)

