"""Table scans of a dataset: ``scan`` (a lazy polars frame over the ``graphs`` or ``configs`` shards of a
collection), ``counts`` (per split, its counts recounted from the shards) and ``graph_columns`` (int
columns of a collection's ``graphs`` rows): functions of a dataset's shard files (its ``ShardSet``) and
manifest (``Dataset.scan`` and ``Dataset.counts`` say what they give).

``counts`` and ``graph_columns`` read through the files the dataset opened (``ShardSet.read``: pinned,
page checksums verified), so a shard changed after it was opened is the one line "the shard folder
changed after it was opened", never another build's rows (issue #36). ``scan`` hands polars the shard
paths: its frame reads whatever files are at those paths when it is collected.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import BadShards
from ..tpugraphs import collection_kind
from .manifest import COUNT_FIELDS
from .parquet import check_shard_schema
from .schema import table_name
from .shard_files import ShardSet

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa


def _shards(files: ShardSet, manifest: dict, table: str, collection: str,
            split: str | None = None) -> list[tuple[str, list[int]]]:
    """(split, the manifest entries of its ``table`` shards of ``collection``) for one split or all, in
    the manifest's order; ``ValueError`` for another ``table``, ``KeyError`` for an unknown collection or
    split, ``BadShards`` when the collection has no such shards at all."""
    if table not in ("graphs", "configs"):
        raise ValueError(f"table must be 'graphs' or 'configs', not {table!r}")
    if collection not in manifest["collections"]:
        raise KeyError(f"no collection {collection!r} in {files.root} (it has {', '.join(manifest['collections'])})")
    splits = list(manifest["collections"][collection]["splits"])
    if split is not None and split not in splits:
        raise KeyError(f"{collection} has no {split!r} split in {files.root} (it has {', '.join(splits)})")
    name = table_name(collection_kind(collection), table)
    out = [(s, [i for i, e in enumerate(files.entries)
                if e["collection"] == collection and e["split"] == s and e["table"] == name])
           for s in (splits if split is None else [split])]
    if not any(entries for _, entries in out):
        raise BadShards(f"{files.manifest_path}: lists no {table} shards of {collection}")
    return out


def scan(files: ShardSet, manifest: dict, table: str, collection: str, split: str | None = None,
         storage_options: dict | None = None) -> pl.LazyFrame:
    """``Dataset.scan``: a lazy polars frame over the ``table`` shards of ``collection`` (one split or all)
    plus a ``split`` column, each shard's schema checked first. Polars reads the files at the shards'
    paths when the frame is collected (not the pinned files: a shard changed after this call is not
    noticed)."""
    import polars as pl

    shards = _shards(files, manifest, table, collection, split)
    name = table_name(collection_kind(collection), table)
    frames = []
    for s, entries in shards:
        paths = [files.path(i) for i in entries]
        for path in paths:
            check_shard_schema(files.open(path), path, name)
        if paths:
            options = files.store.polars_options(storage_options)
            frames.append(pl.scan_parquet([str(p) for p in paths], **options).with_columns(split=pl.lit(s)))
    return pl.concat(frames) if len(frames) > 1 else frames[0]


def _read_graphs(files: ShardSet, manifest: dict, collection: str,
                 columns: list[str]) -> Iterator[tuple[str, Path | str, pa.Table]]:
    """(split, path, the shard's ``columns`` present in it) of each ``graphs`` shard of ``collection``, one
    shard at a time, read through its pinned file (``ShardSet.read``: the folder-changed line for a file
    changed since it was opened), its schema checked first."""
    name = table_name(collection_kind(collection), "graphs")
    for s, entries in _shards(files, manifest, "graphs", collection):
        for i in entries:
            path = files.path(i)
            pf = files.footer(path)
            check_shard_schema(pf, path, name)
            held = [c for c in columns if c in pf.schema_arrow.names]
            if pf.metadata.num_row_groups:
                yield s, path, files.read(path, list(range(pf.metadata.num_row_groups)), held)


def graph_columns(files: ShardSet, manifest: dict, collection: str, columns: list[str]) -> dict[str, np.ndarray]:
    """{column: (G,) int64} of every ``graphs`` row of ``collection`` (all splits, in the manifest's
    shard order), read through the opened files (``_read_graphs``); ``BadShards`` naming the shard when
    one lacks a column."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    for _, path, table in _read_graphs(files, manifest, collection, columns):
        for c in columns:
            if c not in table.column_names:
                raise BadShards(f"{path}: has no column {c}")
            parts[c].append(table.column(c).to_numpy().astype(np.int64))
    return {c: np.concatenate(p) if p else np.zeros(0, np.int64) for c, p in parts.items()}


_SUMS = {"configs": "num_configs", "unique_configs": "num_unique_configs",
         "nodes_before": "num_nodes_original", "nodes_after": "num_nodes",
         "edges_before": "num_edges_original", "edges_after": "num_edges",
         "bytes_in": "source_bytes", "anomalies": "num_repad_anomalies",
         "dimensions_undecided": "dimensions_undecided"}
"""The manifest's count fields → the ``graphs`` column whose sum they are."""


def counts(files: ShardSet, manifest: dict, collection: str) -> dict[str, dict[str, int]]:
    """``Dataset.counts``: per split of ``collection``, its counts recounted from its ``graphs`` shards
    (read through the opened files, those int columns only, one shard at a time) and the bytes of its
    shard files as they were opened (each one's id checked against the manifest: ``ShardSet.footer``). A
    count whose column some shard lacks (``dimensions_undecided`` before schema 3.3) is left out."""
    sums: dict[str, dict[str, int]] = {}
    held = set(_SUMS)
    for split, _, table in _read_graphs(files, manifest, collection, list(_SUMS.values())):
        held &= {k for k, c in _SUMS.items() if c in table.column_names}
        got = sums.setdefault(split, dict.fromkeys(_SUMS, 0) | {"graphs": 0})
        got["graphs"] += table.num_rows
        for k, c in _SUMS.items():
            if c in table.column_names:
                got[k] += int(table.column(c).to_numpy().astype(np.int64).sum())
    out: dict[str, dict[str, int]] = {}
    for split in manifest["collections"][collection]["splits"]:
        row = sums.get(split, dict.fromkeys(_SUMS, 0) | {"graphs": 0})
        entries = [i for i, e in enumerate(files.entries) if e["collection"] == collection and e["split"] == split]
        for i in entries:
            files.footer(files.path(i))  # the file whose size is counted is this build's shard
        on_disk = sum(files.size(i) for i in entries)
        out[split] = {k: on_disk if k == "bytes_out" else row[k] for k in COUNT_FIELDS
                      if k in held or k in ("graphs", "bytes_out")}
    return out
