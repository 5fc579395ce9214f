"""Sampled reads: ``sample_configs`` / ``read_configs`` (k unique configs of a graph, decoded),
``iter_config_blocks`` (every config of a graph, a block at a time), ``num_unique_configs`` and
``config_runtimes``.

Layout: only the row groups (≤ 64 configs each) holding the rows asked for are read, their ``codes``
pages directly where ``pages.py`` handles them (else with pyarrow), and the small per-config columns
come from the graph's structure (``unique_config_columns``, kept in an LRU of ``DERIVED_BYTES``).
Tile: the graph's configs rows (small).

``SampledReads`` is a part of ``reader.Dataset`` (a mixin): it uses ``ShardFiles``, ``GraphLoads`` and
the dataset's ``_index`` / ``_where`` / caches.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import BadShards, one_line
from ..kernels.base7 import decode_base7
from ..kernels.planes import join_planes
from ..tpugraphs import collection_kind
from . import arguments, pages, parquet
from .derived import expand_tied, sample_rows, unique_config_columns
from .parquet import check_graph_groups, codes_rows, flat
from .records import ConfigSample, flat_or_none, sample_fields, taken_column


class _RowOutOfRange(Exception):
    """A row ``read_configs`` was asked for is not one of the graph's unique configs."""


def _nbytes(columns: dict[str, np.ndarray | None]) -> int:
    return sum(a.nbytes for a in columns.values() if a is not None)


DERIVED_BYTES = 64 << 20
"""Most bytes of derived per-unique-config columns a Dataset keeps for ``sample_configs`` (24 bytes per
unique config: 2.4 MB for a graph of 100,000)."""
_SAMPLE_COLUMNS = {"layout": ["config_id", "runtime", "runtime_spread", "group_size", "first_index", "codes"],
                   "tile": ["graph_id", "config_id", "runtime", "runtime_spread", "group_size",
                            "first_index", "normalizer", "config_feat"]}


class SampledReads:
    """Sampled and block reads of a ``Dataset``'s configs (see the module docstring)."""

    _derived: OrderedDict[str, dict[str, np.ndarray | None]]

    def sample_configs(self, graph_id: str, k: int, seed: int = 0) -> ConfigSample:
        """``min(k, c_u)`` distinct unique configs of a graph drawn by ``sample_rows(c_u, k, seed)``
        (``numpy.random.default_rng(seed).choice(c_u, k', replace=False)``), decoded: ``read_configs``
        of those rows.

        Layout: only the row groups (≤ 64 configs each) holding the drawn rows are read, and of them
        only ``config_id`` and ``codes``: the graph's structure is read once, for its tie array and the
        per-config columns derived from it (``unique_config_columns``: group sizes, first indices,
        runtimes, spreads; kept for up to ``DERIVED_BYTES`` of graphs). Tile: the graph's configs
        rows (small). Rows follow ``load_graph``'s numbering, so ``sample.node_config_feat[i] ==
        load_graph(graph_id).node_config_feat([sample.rows[i]])[0]``. ``TypeError`` / ``ValueError``
        naming the argument unless ``k`` and ``seed`` are integers ≥ 0 (``shards.arguments``).
        """
        self._where(graph_id)
        k, seed = arguments.count("k", k), arguments.seed(seed)
        return self._configs(graph_id, lambda count: sample_rows(count, k, seed), derive=True)

    def read_configs(self, graph_id: str, rows: np.ndarray | list[int],
                     columns: dict[str, np.ndarray | None] | None = None) -> ConfigSample:
        """The unique configs ``rows`` ((k,) ints in 0..c_u-1, any order; a row may repeat) of a graph,
        decoded, in the order given: a ``ConfigSample`` whose ``rows`` is ``rows`` as int64. Reads what
        ``sample_configs`` reads for the same rows (layout: only their ≤ 64-config row groups).
        ``columns`` (layout): the graph's ``unique_config_columns(structure)``, kept by the caller; then
        only ``config_id`` and ``codes`` are read and the small per-config fields are taken from it
        (what ``ConfigBatches`` and ``sample_configs`` do: ~3× fewer column chunks to read per
        sample). Without it every stored column of those row groups is read (what ``verify`` checks).
        ``IndexError`` for a row out of range, ``KeyError`` for an unknown graph, ``TypeError`` /
        ``ValueError`` naming ``rows`` or ``columns`` when they are not integers / that graph's columns."""
        if collection_kind(self._where(graph_id)[0]) == "layout":
            columns = arguments.config_columns(columns, self.num_unique_configs(graph_id))
        wanted = arguments.rows(rows)

        def check(count: int) -> np.ndarray:
            if wanted.size and (wanted.min() < 0 or wanted.max() >= count):
                bad = int(wanted[(wanted < 0) | (wanted >= count)][0])
                raise _RowOutOfRange(f"row {bad} of {graph_id!r}: it has {count} unique configs")
            return wanted

        try:
            return self._configs(graph_id, check, columns)
        except _RowOutOfRange as exc:
            raise IndexError(str(exc)) from None

    def num_unique_configs(self, graph_id: str) -> int:
        """c_u, the graph's number of unique configs (layout: from the configs shards' footers, nothing
        decoded; tile: its graphs row)."""
        collection, split = self._where(graph_id)
        if collection_kind(collection) == "tile":
            return int(self.graph_row(graph_id)["num_unique_configs"])
        return int(self._index(collection, split).config_plan(graph_id)[1][-1])

    def config_runtimes(self, graph_id: str) -> np.ndarray | None:
        """(c_u,) int64 runtimes in ns of every unique config of a graph (row r is config_id r, the
        ``load_graph`` numbering), None on the test split: only the ``config_id`` and ``runtime``
        columns of the graph's configs row groups are read (what sampling strategies need)."""
        collection, split = self._where(graph_id)
        groups = self._index(collection, split).config_row_groups(graph_id)
        try:
            pieces = []
            for path in dict.fromkeys(p for p, _ in groups):
                rgs = [rg for p, rg in groups if p == path]
                if collection_kind(collection) == "layout":
                    check_graph_groups(self._parquet(path).metadata, path, rgs, graph_id)
                t = self._read(path, rgs, ["graph_id", "config_id", "runtime"], use_threads=False)
                if collection_kind(collection) == "tile":
                    t = parquet.rows_of(t, "graph_id", graph_id)
                pieces.append(t)
            table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
            ids = flat(table.column("config_id"))
            if not np.array_equal(ids, np.arange(len(ids))):
                raise BadShards(f"{groups[0][0]}: configs rows of {graph_id!r} are not config_id "
                                f"0..{len(ids) - 1}")
            runtimes = flat_or_none(table.column("runtime"))
            return None if runtimes is None else runtimes.astype(np.int64, copy=True)
        except (KeyError, ValueError, TypeError, IndexError, pa.ArrowException) as exc:
            if isinstance(exc, BadShards):
                raise
            where = ", ".join(sorted({str(p) for p, _ in groups}))
            raise BadShards(f"{where}: runtimes of {graph_id!r} cannot be read: {one_line(exc)}") from None

    def _configs(self, graph_id: str, choose: Callable[[int], np.ndarray],
                 columns: dict[str, np.ndarray | None] | None = None, derive: bool = False) -> ConfigSample:
        """The configs ``choose(c_u)`` ((k,) int64 rows) of a graph, decoded (``sample_configs``,
        ``read_configs``). ``derive``: a layout graph's per-config columns come from
        ``_derived_columns`` when ``columns`` is None (else they are read from the shards)."""
        collection, split = self._where(graph_id)
        groups, starts = self._index(collection, split).config_plan(graph_id)
        kind = collection_kind(collection)
        try:
            if kind == "layout":
                if columns is None and derive:
                    columns = self._derived_columns(graph_id)
                elif graph_id not in self._ties:
                    self._ties[graph_id] = self.load_graph(graph_id, configs=False).config_node_tie
                rows = choose(int(starts[-1]))
                return self._sample_layout(graph_id, groups, starts, rows, self._ties[graph_id], columns)
            return self._sample_tile(graph_id, groups, choose)
        except (KeyError, ValueError, TypeError, IndexError, pa.ArrowException) as exc:
            if isinstance(exc, BadShards):
                raise
            where = ", ".join(sorted({str(p) for p, _ in groups}))
            raise BadShards(f"{where}: configs of {graph_id!r} cannot be sampled: {one_line(exc)}") from None

    def _derived_columns(self, graph_id: str) -> dict[str, np.ndarray | None]:
        """A layout graph's ``unique_config_columns``, derived once from its structure (which also gives
        its tie array) and kept in an LRU of at most ``DERIVED_BYTES``, so a sample reads only the
        ``config_id`` and ``codes`` column chunks of its row groups (3× fewer than all six)."""
        if graph_id in self._derived:
            self._derived.move_to_end(graph_id)
            return self._derived[graph_id]
        structure = self.load_graph(graph_id, configs=False)
        self._ties[graph_id] = structure.config_node_tie
        columns = unique_config_columns(structure)
        self._derived[graph_id] = columns
        self._derived_bytes += _nbytes(columns)
        while len(self._derived) > 1 and self._derived_bytes > DERIVED_BYTES:
            self._derived_bytes -= _nbytes(self._derived.popitem(last=False)[1])
        return columns

    def _sample_layout(self, graph_id: str, groups: list[tuple[Path, int]], starts: np.ndarray,
                       rows: np.ndarray, tie: np.ndarray,
                       columns: dict[str, np.ndarray | None] | None = None) -> ConfigSample:
        """The configs ``rows`` of a layout graph whose row groups are ``groups`` with first config_ids
        ``starts`` (``ShardIndex.config_plan``): only the row groups holding a row are read."""
        nt = int(tie.max()) + 1 if len(tie) else 0
        direct = None if columns is None or not len(rows) else pages.sample_codes(
            groups, starts, rows, 12 * nt, lambda path, rgs: self._chunks_of(path, rgs, graph_id), self._fetcher)
        if direct is not None:  # the codes pages read directly (pages.py); else pyarrow reads the row groups
            stored, table, taken = join_planes(direct).reshape(len(rows), nt, 3), None, None
        else:
            stored, table, taken = self._sampled_table(graph_id, groups, starts, rows, nt, columns is not None)
        if columns is not None:
            fields = {"graph_id": graph_id, "rows": rows, "group_size": columns["group_size"][rows],
                      "first_index": columns["first_index"][rows]}
            for name, key in (("config_runtime", "runtime"), ("config_runtime_spread", "runtime_spread")):
                fields[name] = None if columns[key] is None else columns[key][rows]
        else:
            fields = sample_fields(graph_id, rows, table, taken)
        return ConfigSample(
            **fields,
            # decode the stored columns, then spread them over the tied nodes (nt ≤ nc: less to decode)
            node_config_feat=expand_tied(decode_base7(stored), tie) if len(rows) else
            np.zeros((0, len(tie), 18), np.int8),
        )

    def _sampled_table(self, graph_id: str, groups: list[tuple[Path, int]], starts: np.ndarray, rows: np.ndarray,
                       nt: int, derived: bool) -> tuple[np.ndarray, pa.Table, pa.Table]:
        """(stored codes (k, nt, 3) int32, the row groups read, the rows taken) of ``rows`` read with
        pyarrow: ``config_id`` and ``codes`` (``derived``) or every column."""
        sizes = np.diff(starts)
        where = np.searchsorted(starts, rows, side="right") - 1
        needed = np.unique(where) if len(rows) else np.zeros(1, np.int64)  # k = 0: one group, no rows
        pieces, offsets = [], {}
        for path in dict.fromkeys(groups[i][0] for i in needed):
            mine = [int(i) for i in needed if groups[i][0] == path]
            t = self._read_sampled(path, [groups[i][1] for i in mine], graph_id,
                                   ["config_id", "codes"] if derived else _SAMPLE_COLUMNS["layout"])
            base = sum(p.num_rows for p in pieces)
            at = base
            for i in mine:
                offsets[i] = at
                at += int(sizes[i])
            pieces.append(t)
        table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        pos = np.array([offsets[int(w)] for w in where], np.int64) + rows - starts[where]
        ids = flat(table.column("config_id"))[pos]
        if not np.array_equal(ids, rows):
            bad = int(np.flatnonzero(ids != rows)[0])
            raise BadShards(f"{groups[int(where[bad])][0]}: row group {groups[int(where[bad])][1]} holds "
                            f"config_id {int(ids[bad])} where config {int(rows[bad])} of {graph_id!r} belongs")
        taken = table.take(pa.array(pos))
        stored = codes_rows(taken.column("codes"), len(rows), nt=nt) if len(rows) else np.zeros((0, 0, 3), np.int32)
        return stored, table, taken

    def _chunks_of(self, path: Path | str, rgs: list[int], graph_id: str) -> list[pages.Chunk]:
        """The ``codes`` chunks of row groups ``rgs`` of an open shard (``pages.chunk_info``, read from its
        footer once), which must hold ``graph_id`` alone (else ``BadShards``, as ``check_graph_groups``)."""
        out = []
        for rg in rgs:
            chunk = self._chunks.get((path, rg))
            if chunk is None:
                chunk = self._chunks[(path, rg)] = pages.chunk_info(self._parquet(path).metadata, rg)
            if chunk.graph_ids != (graph_id, graph_id):
                check_graph_groups(self._parquet(path).metadata, path, [rg], graph_id)  # raises
            out.append(chunk)
        return out

    def _sample_tile(self, graph_id: str, groups: list[tuple[Path, int]],
                     choose: Callable[[int], np.ndarray]) -> ConfigSample:
        pieces = []
        for path, rg in groups:
            t = self._read_one(path, rg, _SAMPLE_COLUMNS["tile"])
            pieces.append(parquet.rows_of(t, "graph_id", graph_id))
        table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        ids = flat(table.column("config_id"))
        if not np.array_equal(ids, np.arange(len(ids))):
            raise BadShards(f"{groups[0][0]}: configs rows of {graph_id!r} are not config_id 0..{len(ids) - 1}")
        rows = choose(len(ids))
        taken = table.take(pa.array(rows, pa.int64()))
        return ConfigSample(
            **sample_fields(graph_id, rows, table, taken),
            config_feat=flat(taken.column("config_feat")).reshape(-1, 24).copy(),
            config_runtime_normalizers=taken_column(table, taken, "normalizer"),
        )

    def iter_config_blocks(self, graph_id: str, rows_per_block: int = 4096,
                           rows: np.ndarray | list[int] | None = None) -> Iterator[ConfigSample]:
        """The unique configs of a graph as a stream of :class:`ConfigSample` blocks of at most
        ``rows_per_block`` configs each, so a caller can go through every config of a big graph holding
        one block's codes at a time (the trainer's evaluation and prediction do).

        rows: unique-config rows to visit, in the order given (``None``: all, 0..c_u−1 in order); the
        blocks cut them into consecutive pieces, each decoded like :meth:`sample_configs` (only the row
        groups holding its rows are read, and a layout block stops before those would hold more than
        ``rows_per_block`` configs, so sparse rows come in smaller blocks). ``block.rows`` tells which
        configs a block holds.
        ``KeyError`` for an unknown graph, ``ValueError`` for rows_per_block < 1 or rows outside the
        graph, ``BadShards`` as in :meth:`sample_configs`.
        """
        self._where(graph_id)
        rows_per_block = arguments.count("rows_per_block", rows_per_block, 1)
        c_u = self.num_unique_configs(graph_id)
        want = np.arange(c_u, dtype=np.int64) if rows is None else arguments.rows(rows)
        if len(want) and (want.min() < 0 or want.max() >= c_u):
            raise ValueError(f"rows of {graph_id!r} must lie in 0..{c_u - 1}")
        for piece in self._config_blocks(graph_id, want, rows_per_block):
            yield self.read_configs(graph_id, piece)

    def _config_blocks(self, graph_id: str, want: np.ndarray, rows_per_block: int) -> Iterator[np.ndarray]:
        """``want`` cut into consecutive pieces of ≤ rows_per_block rows; layout pieces also stop before
        the row groups they read would hold more than rows_per_block configs (sparse rows, e.g. a
        sample spread over a big graph, would otherwise decompress the whole graph at once)."""
        collection, split = self._graphs[graph_id]
        if collection_kind(collection) != "layout":
            for start in range(0, len(want), rows_per_block):
                yield want[start:start + rows_per_block]
            return
        starts = self._index(collection, split).config_plan(graph_id)[1]
        where = np.searchsorted(starts, want, side="right") - 1
        sizes = np.diff(starts)
        first, read, groups = 0, 0, set()
        for i, g in enumerate(where.tolist()):
            new = g not in groups
            if i > first and (i - first == rows_per_block or (new and read + sizes[g] > rows_per_block)):
                yield want[first:i]
                first, read, groups = i, 0, set()
                new = True
            if new:
                groups.add(g)
                read += int(sizes[g])
        if first < len(want):
            yield want[first:]

