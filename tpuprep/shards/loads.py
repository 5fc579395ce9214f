"""``GraphLoader``: whole graphs, the ``graphs`` part of ``reader.Dataset`` — ``load(id)`` → ``GraphRecord``
(its ``graphs`` row and all its unique configs, ``Dataset.load_graph``), ``structure(id)`` (the graphs row
alone) and ``row(id)`` (the row's scalars, ``Dataset.graph_row``).

A layout graph's codes are kept as stored (``StoredCodes``: the compressed ``codes`` chunks of its row
groups, read in one ranged read per shard and every page checked once), never as a whole-graph int32
array: memory ≈ the shard's bytes instead of 12 bytes per config per configurable node (issue #30).
Chunks the direct page decoder does not handle are read with pyarrow as before (``config_codes`` then
holds the joined codes). Graphs rows are read a row group at a time; the last few row groups read are
kept (``row_groups``), so consecutive graphs (``iter_graphs``) read each once.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import BadShards, one_line
from . import arguments, pages
from .parquet import check_graph_groups, codes_rows, flat, merge_ranges, rows_of
from .records import GraphRecord, flat_or_none, list_cell, read_only
from .shard_files import ShardSet
from .shard_index import GraphIndex
from .stored_codes import CODE_LIMIT, StoredCodes

_SMALL_COLUMNS = ["config_id", "runtime", "runtime_spread", "group_size", "first_index"]
"""The layout configs columns read with pyarrow when the codes are kept as stored (28 bytes a config)."""
MERGE_GAP = 1 << 16
"""Byte gap up to which the codes chunks of a graph's row groups are fetched as one range (the small
columns between two row groups' codes are a few hundred bytes)."""


class GraphLoader:
    """Whole graphs of a dataset (see the module docstring), read through ``files`` where ``index`` says
    they are; the last ``row_groups`` graphs row groups read are kept (an LRU)."""

    def __init__(self, files: ShardSet, index: GraphIndex, row_groups: int = 4):
        self.files, self.index, self.row_groups = files, index, row_groups
        self.recent: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()  # the last row groups read

    def _row_group(self, path: Path | str, rg: int) -> pa.Table:
        """Row group ``rg`` of a shard, all columns, from the LRU or read now."""
        key = (str(path), rg)
        if key in self.recent:
            self.recent.move_to_end(key)
            return self.recent[key]
        table = self.recent[key] = self.files.read_group(path, rg)
        if len(self.recent) > self.row_groups:
            self.recent.popitem(last=False)
        return table

    def _graph_row_group(self, graph_id: str) -> tuple[Path | str, pa.Table, int]:
        """(graphs shard, row group table, row) of a listed graph, its graph id checked in the row read."""
        path, rg, row = self.index.graph_row(graph_id)
        table = self._row_group(path, rg)
        found = table.column("graph_id")[row].as_py() if row < table.num_rows else None
        if found != graph_id:
            raise BadShards(f"{path}: row {row} of row group {rg} holds graph {found!r}, not {graph_id!r}: "
                            f"the shard changed under the open dataset {self.files.root}?")
        return path, table, row

    def load(self, graph_id: str, configs: bool = True) -> GraphRecord:
        """``Dataset.load_graph``: the graph, with all its unique configs unless ``configs`` is False."""
        configs = arguments.flag("configs", configs)
        path, g, row = self._graph_row_group(graph_id)
        collection, split, kind = self.index.place(graph_id)
        groups = self.index.plan(graph_id)[0] if configs else []
        try:
            record, scalar = self._structure(graph_id, collection, split, g, row)
            if not configs:
                return record
            if kind == "layout":
                stored = self._stored_codes(graph_id, record.config_node_tie)
                pieces = self._layout_pieces(graph_id, groups, None if stored is None else _SMALL_COLUMNS)
            else:
                stored, pieces = None, []
                for cpath, crg in groups:
                    t = self._row_group(cpath, crg)
                    pieces.append(rows_of(t, "graph_id", graph_id))
            return self._with_configs(record, scalar, pieces, stored)
        except (KeyError, ValueError, TypeError, IndexError, pa.ArrowException) as exc:
            if isinstance(exc, BadShards):
                raise
            where = ", ".join(sorted({str(path), *(str(p) for p, _ in groups)}))
            raise BadShards(f"{where}: graph {graph_id!r} cannot be read back: {one_line(exc)}") from None

    def _layout_pieces(self, graph_id: str, groups: list, columns: list[str] | None) -> list[pa.Table]:
        """The graph's own (small) configs row groups, ``columns`` only (None: all), one read per shard."""
        pieces = []
        for cpath in dict.fromkeys(p for p, _ in groups):
            rgs = [rg for p, rg in groups if p == cpath]
            check_graph_groups(self.files.footer(cpath).metadata, cpath, rgs, graph_id)
            pieces.append(self.files.read(cpath, rgs, columns))
        return pieces

    def _stored_codes(self, graph_id: str, tie: np.ndarray) -> StoredCodes | None:
        """The graph's codes as stored (``StoredCodes``), every page decoded once to check it, or None when
        a chunk or page is not one the direct decoder handles (then pyarrow reads them)."""
        groups, starts = self.index.plan(graph_id)
        chunks, blocks = [], []
        for cpath in dict.fromkeys(p for p, _ in groups):
            rgs = [rg for p, rg in groups if p == cpath]
            try:
                mine = self.files.codes_chunks(cpath, rgs, graph_id)
                spans = merge_ranges([(c.start, c.end) for c in mine], MERGE_GAP)
                fetched = self.files.fetcher(cpath)(spans)
            except pages.Unhandled:
                return None
            at = 0
            for chunk in mine:  # views of the fetched ranges: the chunks are not copied
                while chunk.end > spans[at][1]:
                    at += 1
                lo = spans[at][0]
                blocks.append(memoryview(fetched[at])[chunk.start - lo:chunk.end - lo])
            chunks.extend(mine)
            del fetched
        stored = StoredCodes(", ".join(str(p) for p in dict.fromkeys(p for p, _ in groups)), chunks, blocks,
                             starts, tie, graph_id)
        try:
            stored.check()
        except (pages.Unhandled, ValueError, IndexError):
            return None
        except Exception as exc:  # zstandard.ZstdError: a page that does not inflate
            if type(exc).__module__.startswith("zstandard"):
                return None
            raise
        return stored

    def _with_configs(self, record: GraphRecord, scalar: dict, pieces: list[pa.Table],
                      stored: StoredCodes | None) -> GraphRecord:
        """``record`` (its structure) with its configs rows (``pieces``; a layout graph's codes in
        ``stored`` when kept as stored, else in the pieces' ``codes``)."""
        rows = sum(p.num_rows for p in pieces)
        if rows != scalar["num_unique_configs"]:
            raise ValueError(f"{rows} configs rows, its graphs row says num_unique_configs "
                             f"{scalar['num_unique_configs']}")
        configs = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        ids = flat(configs.column("config_id"))
        if not np.array_equal(ids, np.arange(rows)):  # rows by position: they must be configs 0..c_u-1
            bad = int(np.flatnonzero(ids != np.arange(rows))[0])
            raise ValueError(f"configs row {bad} holds config_id {int(ids[bad])}, expected {bad}")
        record.config_runtime = flat_or_none(configs.column("runtime"))
        record.config_runtime_spread = flat_or_none(configs.column("runtime_spread"))
        record.group_size = flat(configs.column("group_size"))
        record.first_index = flat(configs.column("first_index"))
        if record.kind == "layout" and stored is not None:
            if stored.num_rows != rows:
                raise ValueError(f"{stored.num_rows} codes rows, {rows} configs rows")
            record.stored_codes = stored
        elif record.kind == "layout":
            codes = codes_rows(configs.column("codes"), rows, record.config_node_tie,
                               scalar["num_config_columns"])  # expanded while joined
            outside = (codes < 0) | (codes >= CODE_LIMIT)
            if outside.any():  # what node_config_feat would meet later, named now with its config
                row, node, block = (int(i) for i in np.argwhere(outside)[0])
                raise ValueError(f"config {row} holds the code {int(codes[row, node, block])} (node {node}, "
                                 f"block {block}); base-7 codes lie in 0..{CODE_LIMIT - 1}")
            record.config_codes = codes
        else:
            record.config_feat = flat(configs.column("config_feat")).reshape(-1, 24)
            record.config_runtime_normalizers = (None if configs.column("normalizer").null_count
                                                 else flat(configs.column("normalizer")))
        return read_only(record)

    @staticmethod
    def _structure(graph_id: str, collection: str, split: str, g: pa.Table, row: int) -> tuple[GraphRecord, dict]:
        """(a GraphRecord of the graphs row alone, every per-unique-config array None; the row's scalars)."""
        scalar = {name: g.column(name)[row].as_py()
                  for name in ("fold", "source_file", "num_config_nodes", "num_config_columns",
                               "num_unique_configs")
                  if name in g.column_names}
        record = GraphRecord(
            graph_id=graph_id, collection=collection, split=split, fold=scalar["fold"],
            source_file=scalar["source_file"],
            node_feat=list_cell(g, "node_feat", row, 140),
            node_opcode=list_cell(g, "node_opcode", row),
            edge_index=list_cell(g, "edge_index", row, 2),
            node_index=list_cell(g, "node_index", row),
            config_inverse=list_cell(g, "config_inverse", row),
            config_runtime_original=list_cell(g, "config_runtime_original", row),
            config_runtime=None, group_size=None, first_index=None,
        )
        if record.kind == "layout":
            record.node_config_ids = list_cell(g, "node_config_ids", row)
            record.node_splits = list_cell(g, "node_splits", row)
            record.config_node_tie = list_cell(g, "config_node_tie", row)
            tie = record.config_node_tie
            if len(tie) != scalar["num_config_nodes"]:
                raise ValueError(f"config_node_tie has {len(tie)} entries, "
                                 f"num_config_nodes is {scalar['num_config_nodes']}")
            if scalar["num_config_columns"] != (int(tie.max()) + 1 if len(tie) else 0):
                raise ValueError(f"num_config_columns is {scalar['num_config_columns']}, config_node_tie names "
                                 f"{int(tie.max()) + 1 if len(tie) else 0} columns")
        else:
            record.config_runtime_normalizers_original = list_cell(g, "config_runtime_normalizers_original", row)
        return read_only(record), scalar

    def structure(self, graph_id: str) -> GraphRecord:
        """The graph's structure: ``load(graph_id, configs=False)`` (no configs shard opened)."""
        return self.load(graph_id, configs=False)

    def row(self, graph_id: str) -> dict:
        """``Dataset.graph_row``: the scalar columns of a graph's ``graphs`` row as Python values."""
        _, g, row = self._graph_row_group(graph_id)
        return {f.name: g.column(f.name)[row].as_py() for f in g.schema
                if not (pa.types.is_list(f.type) or pa.types.is_fixed_size_list(f.type))}
