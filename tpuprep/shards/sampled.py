"""``ConfigReader``: configs by row, the ``configs`` part of ``reader.Dataset`` — ``sample`` / ``read`` (k
unique configs of a graph, decoded: ``Dataset.sample_configs`` / ``read_configs``), ``blocks`` (every config
of a graph, a block at a time: ``iter_config_blocks``), ``count`` (``num_unique_configs``) and ``runtimes``
(``config_runtimes``).

Layout: only the row groups (≤ 64 configs each) holding the rows asked for are read, and of them only the
``config_id`` and ``codes`` column chunks — directly by ``pages.py`` where it handles them, else with
pyarrow —; the small per-config fields come from the graph's structure, derived once and kept in the
dataset's one ``DerivedCache`` (with the graph's tie array), which this part owns. Tile: the graph's
configs rows (small). A sampled read, step by step: ``docs/architecture.md``, "Reading shards".
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import BadShards, one_line
from ..kernels.base7 import decode_base7
from ..kernels.planes import join_planes
from . import arguments, pages, parquet
from .derived import DERIVED_BYTES, DerivedCache, expand_tied, sample_rows
from .loads import GraphLoader
from .parquet import codes_rows, flat
from .records import ConfigSample, flat_or_none, sample_fields, taken_column
from .shard_files import ShardSet
from .shard_index import GraphIndex


class _RowOutOfRange(Exception):
    """A row ``read`` was asked for is not one of the graph's unique configs."""


_TILE_COLUMNS = ["graph_id", "config_id", "runtime", "runtime_spread", "group_size", "first_index", "normalizer",
                 "config_feat"]
"""The configs columns a tile sample reads."""


class ConfigReader:
    """Configs by row of a dataset (see the module docstring), read through ``files`` where ``index`` says
    they are; a layout graph's structure comes from ``graphs`` once, into ``derived`` (a ``DerivedCache``
    of ``derived_bytes``)."""

    def __init__(self, files: ShardSet, index: GraphIndex, graphs: GraphLoader, derived_bytes: int = DERIVED_BYTES):
        self.files, self.index, self.graphs = files, index, graphs
        self.derived = DerivedCache(graphs.structure, derived_bytes)

    # -- what the Dataset hands over ------------------------------------------------------------
    def sample(self, graph_id: str, k: int, seed: int) -> ConfigSample:
        """``Dataset.sample_configs``: the rows ``sample_rows(c_u, k, seed)``, decoded."""
        self.index.place(graph_id)
        k, seed = arguments.count("k", k), arguments.seed(seed)
        return self._configs(graph_id, lambda count: sample_rows(count, k, seed))

    def read(self, graph_id: str, rows: np.ndarray | list[int]) -> ConfigSample:
        """``Dataset.read_configs``: the unique configs ``rows`` (any order, repeats allowed), decoded."""
        self.index.place(graph_id)
        wanted = arguments.rows(rows)

        def check(count: int) -> np.ndarray:
            if wanted.size and (wanted.min() < 0 or wanted.max() >= count):
                bad = int(wanted[(wanted < 0) | (wanted >= count)][0])
                raise _RowOutOfRange(f"row {bad} of {graph_id!r}: it has {count} unique configs")
            return wanted

        try:
            return self._configs(graph_id, check)
        except _RowOutOfRange as exc:
            raise IndexError(str(exc)) from None

    def deprecated_columns(self, graph_id: str, columns: object) -> None:
        """What is left of ``read_configs(..., columns=)``: a wrong argument is still refused as before
        (``TypeError`` / ``ValueError`` naming ``columns``), then a ``DeprecationWarning``; the columns are
        not used (this part derives and keeps them, ``derived``)."""
        if self.index.place(graph_id).kind == "layout":
            arguments.config_columns(columns, self.count(graph_id))
        warnings.warn("read_configs(columns=) is deprecated and ignored: the Dataset derives a layout graph's "
                      "per-config columns from its structure once and keeps them", DeprecationWarning, stacklevel=3)

    def count(self, graph_id: str) -> int:
        """``Dataset.num_unique_configs``: layout from the configs shards' footers (nothing decoded), tile
        from its graphs row."""
        if self.index.place(graph_id).kind == "tile":
            return int(self.graphs.row(graph_id)["num_unique_configs"])
        return int(self.index.plan(graph_id)[1][-1])

    def runtimes(self, graph_id: str) -> np.ndarray | None:
        """``Dataset.config_runtimes``: (c_u,) int64, a fresh array; None on the test split. Layout: the
        derived ``runtime`` column (``derived``: no configs row group read); tile: the stored ``runtime``
        column of its configs rows (with ``graph_id`` and ``config_id``, checked)."""
        kind = self.index.place(graph_id).kind
        groups = self.index.plan(graph_id)[0]
        try:
            if kind == "layout":
                runtime = self.derived.get(graph_id).columns["runtime"]
                return None if runtime is None else runtime.copy()
            pieces = []
            for path in dict.fromkeys(p for p, _ in groups):
                rgs = [rg for p, rg in groups if p == path]
                t = self.files.read(path, rgs, ["graph_id", "config_id", "runtime"], use_threads=False)
                pieces.append(parquet.rows_of(t, "graph_id", graph_id))
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

    def blocks(self, graph_id: str, rows_per_block: int, rows: np.ndarray | list[int] | None) -> Iterator[ConfigSample]:
        """``Dataset.iter_config_blocks``: ``read`` of consecutive pieces of ``rows`` (all if None); a
        generator, so its arguments are checked when the first block is asked for."""
        kind = self.index.place(graph_id).kind
        rows_per_block = arguments.count("rows_per_block", rows_per_block, 1)
        c_u = self.count(graph_id)
        want = np.arange(c_u, dtype=np.int64) if rows is None else arguments.rows(rows)
        if len(want) and (want.min() < 0 or want.max() >= c_u):
            raise ValueError(f"rows of {graph_id!r} must lie in 0..{c_u - 1}")
        for piece in self._pieces(graph_id, kind, want, rows_per_block):
            yield self.read(graph_id, piece)

    def _pieces(self, graph_id: str, kind: str, want: np.ndarray, rows_per_block: int) -> Iterator[np.ndarray]:
        """``want`` cut into consecutive pieces of ≤ rows_per_block rows; layout pieces also stop before
        the row groups they read would hold more than rows_per_block configs (sparse rows, e.g. a
        sample spread over a big graph, would otherwise decompress the whole graph at once)."""
        if kind != "layout":
            for start in range(0, len(want), rows_per_block):
                yield want[start:start + rows_per_block]
            return
        starts = self.index.plan(graph_id)[1]
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

    # -- the read itself ------------------------------------------------------------------------
    def _configs(self, graph_id: str, choose: Callable[[int], np.ndarray]) -> ConfigSample:
        """The configs ``choose(c_u)`` ((k,) int64 rows) of a graph, decoded; anything the shards hold
        wrongly is ``BadShards`` naming them."""
        groups, starts = self.index.plan(graph_id)
        try:
            if self.index.place(graph_id).kind == "layout":
                return self._layout(graph_id, groups, starts, choose(int(starts[-1])))
            return self._tile(graph_id, groups, choose)
        except (KeyError, ValueError, TypeError, IndexError, pa.ArrowException) as exc:
            if isinstance(exc, BadShards):
                raise
            where = ", ".join(sorted({str(p) for p, _ in groups}))
            raise BadShards(f"{where}: configs of {graph_id!r} cannot be sampled: {one_line(exc)}") from None

    def _layout(self, graph_id: str, groups: list[tuple[Path, int]], starts: np.ndarray,
                rows: np.ndarray) -> ConfigSample:
        """The configs ``rows`` of a layout graph whose row groups are ``groups`` with first config_ids
        ``starts`` (``GraphIndex.plan``): only the row groups holding a row are read, ``config_id`` and
        ``codes`` only; the other fields are the rows of the graph's derived columns."""
        tie, columns = self.derived.get(graph_id)
        nt = int(tie.max()) + 1 if len(tie) else 0
        direct = None if not len(rows) else pages.sample_codes(
            groups, starts, rows, 12 * nt, lambda path, rgs: self.files.codes_chunks(path, rgs, graph_id),
            self.files.fetcher)
        if direct is not None:  # the codes pages read directly (pages.py); else pyarrow reads the row groups
            stored = join_planes(direct).reshape(len(rows), nt, 3)
        else:
            stored = self._pyarrow_codes(graph_id, groups, starts, rows, nt)
        runtime, spread = columns["runtime"], columns["runtime_spread"]
        return ConfigSample(
            graph_id=graph_id, rows=rows, group_size=columns["group_size"][rows],
            first_index=columns["first_index"][rows],
            config_runtime=None if runtime is None else runtime[rows],
            config_runtime_spread=None if spread is None else spread[rows],
            # decode the stored columns, then spread them over the tied nodes (nt ≤ nc: less to decode)
            node_config_feat=expand_tied(decode_base7(stored), tie) if len(rows) else
            np.zeros((0, len(tie), 18), np.int8),
        )

    def _pyarrow_codes(self, graph_id: str, groups: list[tuple[Path, int]], starts: np.ndarray, rows: np.ndarray,
                       nt: int) -> np.ndarray:
        """The stored codes (k, nt, 3) int32 of ``rows`` read with pyarrow (``config_id`` and ``codes`` of
        the row groups holding them), each row checked to hold the config asked for."""
        sizes = np.diff(starts)
        where = np.searchsorted(starts, rows, side="right") - 1
        needed = np.unique(where) if len(rows) else np.zeros(1, np.int64)  # k = 0: one group, no rows
        pieces, offsets = [], {}
        for path in dict.fromkeys(groups[i][0] for i in needed):
            mine = [int(i) for i in needed if groups[i][0] == path]
            t = self.files.read_sampled(path, [groups[i][1] for i in mine], graph_id, ["config_id", "codes"])
            at = sum(p.num_rows for p in pieces)
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
        if not len(rows):
            return np.zeros((0, 0, 3), np.int32)
        return codes_rows(table.take(pa.array(pos)).column("codes"), len(rows), nt=nt)

    def _tile(self, graph_id: str, groups: list[tuple[Path, int]], choose: Callable[[int], np.ndarray]) -> ConfigSample:
        """The configs ``choose(c_u)`` of a tile graph: its configs rows (its row groups, shared with other
        graphs, filtered), every column."""
        pieces = []
        for path, rg in groups:
            t = self.files.read_group(path, rg, _TILE_COLUMNS)
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
