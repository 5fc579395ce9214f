"""Table scans of a dataset: ``scan`` (a lazy polars frame over the ``graphs`` or ``configs`` shards of a
collection) and ``counts`` (per split, its counts recounted from the shards): functions of a dataset's
shard files (its ``ShardSet``) and manifest (``Dataset.scan`` and ``Dataset.counts`` say what they give).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BadShards
from ..tpugraphs import collection_kind
from .manifest import COUNT_FIELDS
from .parquet import check_shard_schema
from .schema import table_name
from .shard_files import ShardSet

if TYPE_CHECKING:
    import polars as pl


def scan(files: ShardSet, manifest: dict, table: str, collection: str, split: str | None = None,
         storage_options: dict | None = None) -> pl.LazyFrame:
    """``Dataset.scan``: a lazy polars frame over the ``table`` shards of ``collection`` (one split or all)
    plus a ``split`` column, each shard's schema checked first."""
    import polars as pl

    if table not in ("graphs", "configs"):
        raise ValueError(f"table must be 'graphs' or 'configs', not {table!r}")
    if collection not in manifest["collections"]:
        raise KeyError(f"no collection {collection!r} in {files.root} (it has {', '.join(manifest['collections'])})")
    splits = list(manifest["collections"][collection]["splits"])
    if split is not None and split not in splits:
        raise KeyError(f"{collection} has no {split!r} split in {files.root} (it has {', '.join(splits)})")
    name = table_name(collection_kind(collection), table)
    frames = []
    for s in splits if split is None else [split]:
        paths = [files.path(i) for i, e in enumerate(files.entries)
                 if e["collection"] == collection and e["split"] == s and e["table"] == name]
        for path in paths:
            check_shard_schema(files.open(path), path, name)
        if paths:
            options = files.store.polars_options(storage_options)
            frames.append(pl.scan_parquet([str(p) for p in paths], **options).with_columns(split=pl.lit(s)))
    if not frames:
        raise BadShards(f"{files.manifest_path}: lists no {table} shards of {collection}")
    return pl.concat(frames) if len(frames) > 1 else frames[0]


_SUMS = {"configs": "num_configs", "unique_configs": "num_unique_configs",
         "nodes_before": "num_nodes_original", "nodes_after": "num_nodes",
         "edges_before": "num_edges_original", "edges_after": "num_edges",
         "bytes_in": "source_bytes", "anomalies": "num_repad_anomalies",
         "dimensions_undecided": "dimensions_undecided"}
"""The manifest's count fields → the ``graphs`` column whose sum they are."""


def counts(files: ShardSet, manifest: dict, collection: str) -> dict[str, dict[str, int]]:
    """``Dataset.counts``: per split of ``collection``, its counts recounted from the shards (one ``scan``
    of the ``graphs`` shards aggregated per split) and the bytes of its shard files."""
    import polars as pl

    frames = scan(files, manifest, "graphs", collection)
    held = set(frames.collect_schema().names())
    sums = {k: c for k, c in _SUMS.items() if c in held}
    frame = (frames
             .group_by("split")
             .agg(pl.len().alias("graphs"), *(pl.col(c).cast(pl.Int64).sum().alias(k) for k, c in sums.items()))
             .collect())
    rows = {r["split"]: r for r in frame.iter_rows(named=True)}
    out: dict[str, dict[str, int]] = {}
    for split in manifest["collections"][collection]["splits"]:
        row = rows.get(split, {"graphs": 0} | dict.fromkeys(sums, 0))
        on_disk = sum(files.size(i) for i, e in enumerate(files.entries)
                      if e["collection"] == collection and e["split"] == split)
        out[split] = {k: on_disk if k == "bytes_out" else int(row[k]) for k in COUNT_FIELDS
                      if k in sums or k in ("graphs", "bytes_out")}
    return out
