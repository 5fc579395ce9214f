"""Table scans of a dataset: ``scan`` (a lazy polars frame over the ``graphs`` or ``configs`` shards of a
collection) and ``counts`` (per split, its counts recounted from the shards).

``Scans`` is a part of ``reader.Dataset`` (a mixin): it uses ``ShardFiles`` and the dataset's manifest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BadShards
from ..tpugraphs import collection_kind
from .manifest import COUNT_FIELDS
from .parquet import check_shard_schema
from .schema import table_name

if TYPE_CHECKING:
    import polars as pl


class Scans:
    """``scan`` and ``counts`` of a ``Dataset`` (see the module docstring)."""

    def scan(self, table: str, collection: str, split: str | None = None,
             storage_options: dict | None = None) -> pl.LazyFrame:
        """A lazy polars frame over the ``table`` shards (``"graphs"``: one row per graph, ``"configs"``:
        one row per unique config) of ``collection``, one split or all, plus a ``split`` column.

        Nothing is read until ``.collect()``: polars pushes filters down to the Parquet row groups
        (their ``graph_id`` statistics skip other graphs) and reads only the columns a query uses.
        Columns are those of ``docs/schema.md`` (runtimes int64 ns; ``codes`` binary). Each shard is
        confined to the folder and its schema checked as in ``load_graph``; page checksums are not
        verified by polars (``load_graph`` and ``tpuprep verify`` do). ``ValueError`` for another
        ``table``, ``KeyError`` for an unknown collection or split.

        Remote datasets: polars reads the shard URLs with its own object-store client, not the
        dataset's fsspec filesystem. It takes endpoint and credentials from the standard environment
        variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, …) or from ``storage_options`` given
        here in *polars'* spelling (``{"aws_endpoint_url": ..., "aws_region": ...}``, see
        ``polars.scan_parquet``); the fsspec ``storage_options`` of ``open_dataset`` are not
        translated. Locally ``storage_options`` is ignored."""
        import polars as pl

        if table not in ("graphs", "configs"):
            raise ValueError(f"table must be 'graphs' or 'configs', not {table!r}")
        if collection not in self.manifest["collections"]:
            raise KeyError(f"no collection {collection!r} in {self.root} (it has {', '.join(self.collections)})")
        splits = self.splits(collection)
        if split is not None and split not in splits:
            raise KeyError(f"{collection} has no {split!r} split in {self.root} (it has {', '.join(splits)})")
        name = table_name(collection_kind(collection), table)
        frames = []
        for s in splits if split is None else [split]:
            paths = [self.shard_path(i) for i, e in enumerate(self.manifest["shards"])
                     if e["collection"] == collection and e["split"] == s and e["table"] == name]
            for path in paths:
                check_shard_schema(self.open_shard(path), path, name)
            if paths:
                options = self.store.polars_options(storage_options)
                frames.append(pl.scan_parquet([str(p) for p in paths], **options).with_columns(split=pl.lit(s)))
        if not frames:
            raise BadShards(f"{self.manifest_path}: lists no {table} shards of {collection}")
        return pl.concat(frames) if len(frames) > 1 else frames[0]

    def counts(self, collection: str) -> dict[str, dict[str, int]]:
        """Per split of ``collection``, its counts recounted from the shards themselves (not taken from
        the manifest), under the manifest's ``COUNT_FIELDS`` keys: ``graphs``, ``configs``,
        ``unique_configs``, ``nodes_before``/``nodes_after``, ``edges_before``/``edges_after``,
        ``bytes_in`` (npz bytes), ``anomalies``, ``dimensions_undecided`` (sums of the ``graphs`` rows'
        scalars, int; the last one only when the shards have it, schema >= 3.3) and ``bytes_out`` (the
        bytes of the split's shard files on disk). One ``scan`` aggregated per split: polars reads only
        those int columns of the ``graphs`` shards, never the features."""
        import polars as pl

        sums = {"configs": "num_configs", "unique_configs": "num_unique_configs",
                "nodes_before": "num_nodes_original", "nodes_after": "num_nodes",
                "edges_before": "num_edges_original", "edges_after": "num_edges",
                "bytes_in": "source_bytes", "anomalies": "num_repad_anomalies",
                "dimensions_undecided": "dimensions_undecided"}
        scan = self.scan("graphs", collection)
        held = set(scan.collect_schema().names())
        sums = {k: c for k, c in sums.items() if c in held}
        frame = (scan
                 .group_by("split")
                 .agg(pl.len().alias("graphs"), *(pl.col(c).cast(pl.Int64).sum().alias(k) for k, c in sums.items()))
                 .collect())
        rows = {r["split"]: r for r in frame.iter_rows(named=True)}
        out: dict[str, dict[str, int]] = {}
        for split in self.splits(collection):
            row = rows.get(split, {"graphs": 0} | dict.fromkeys(sums, 0))
            on_disk = sum(self.shard_size(i) for i, e in enumerate(self.manifest["shards"])
                          if e["collection"] == collection and e["split"] == split)
            out[split] = {k: on_disk if k == "bytes_out" else int(row[k]) for k in COUNT_FIELDS
                          if k in sums or k in ("graphs", "bytes_out")}
        return out

