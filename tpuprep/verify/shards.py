"""``verify``'s checks of the shard folder itself: every shard file against its manifest entry, the
graphs and configs rows of each (collection, split), the manifest's totals and quarantine list, and
the train ``node_feat_stats`` recomputed from the shards' feature rows."""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BadShards
from ..io.files import sha256_stream
from ..shards.layout import MANIFEST
from ..shards.manifest import COUNT_FIELDS, keys_of, manifest_version
from ..shards.parquet import check_shard_schema, read_row_group, read_row_groups
from ..shards.reader import Dataset
from ..shards.schema import COMPRESSIONS, table_schema
from ..tpugraphs import selected
from .reference import feature_moments
from .report import VerifyReport
from .stored import int_values


def check_totals(manifest: dict, problems: list[str]) -> None:
    """Per collection and split: counts are the sums of the per-input counts; bytes_out of the shard bytes."""
    expect: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: dict.fromkeys(COUNT_FIELDS, 0)))
    for entry in manifest["inputs"]:
        if entry["status"] != "ok":
            continue
        coll, split = entry["graph_id"].rsplit(":", 1)[0], entry["path"].split("/")[-2]
        for target in (expect[coll][split], expect[coll]["<totals>"]):
            target["graphs"] += 1
            for k, v in entry["counts"].items():
                if k in target and k != "bytes_out":
                    target[k] += v
    for shard in manifest["shards"]:
        for split in (shard["split"], "<totals>"):
            expect[shard["collection"]][split]["bytes_out"] += shard["bytes"]
    listed = manifest["collections"]
    for coll in sorted(set(expect) | set(listed)):
        if coll not in listed or coll not in expect:
            problems.append(f"{MANIFEST}: collection {coll} is {'missing from' if coll not in listed else 'listed in'} "
                            f"collections, but has {'converted inputs' if coll in expect else 'no converted input'}")
            continue
        have = {**listed[coll]["splits"], "<totals>": listed[coll]["totals"]}
        for split in sorted(set(have) | set(expect[coll])):
            where = f"collections[{coll!r}]." + ("totals" if split == "<totals>" else f"splits.{split}")
            got, want = have.get(split), expect[coll].get(split)
            if got is None or want is None:
                problems.append(f"{MANIFEST}: {where} is {'missing' if got is None else 'listed without converted inputs'}")
                continue
            for k in keys_of(COUNT_FIELDS, manifest_version(manifest)):
                if got.get(k) != want[k]:
                    problems.append(f"{MANIFEST}: {where}.{k} is {got.get(k)!r}, the inputs and shards sum to {want[k]}")


def check_quarantine(manifest: dict, problems: list[str]) -> None:
    listed = [q.get("file") for q in manifest["quarantine"]]
    want = [e["path"] for e in manifest["inputs"] if e["status"] != "ok"]
    if listed != want:
        problems.append(f"{MANIFEST}: quarantine lists {len(listed)} files, inputs have {len(want)} quarantined ones "
                        "(or in another order)")



def check_stats(ds: Dataset, moments: dict[str, tuple], collections, problems: list[str]) -> None:
    """Each selected collection's ``node_feat_stats`` against its train graphs' feature rows, pooled
    directly (not by the build's sequential merge); graphs not loaded during the run are read now."""
    for coll, info in ds.manifest["collections"].items():
        if not selected(coll, collections):
            continue
        parts = []
        for gid in ds.graph_ids(coll, "train"):
            if gid not in moments:
                try:
                    moments[gid] = feature_moments(ds.load_graph(gid, configs=False).node_feat)
                except BadShards as exc:
                    problems.append(f"{gid}: cannot be read for the statistics: {exc}")
                    continue
            parts.append(moments[gid])
        count = sum(p[0] for p in parts)
        stats = info["node_feat_stats"]
        where = f"{MANIFEST}: collections[{coll!r}].node_feat_stats"
        if count == 0 or stats is None:
            if (count == 0) != (stats is None):
                problems.append(f"{where} is {'null' if stats is None else 'set'}, the train split has {count} kept nodes")
            continue
        mean = sum(p[0] * p[1] for p in parts) / count
        m2 = sum(p[2] + p[0] * (p[1] - mean) ** 2 for p in parts)
        std = np.sqrt(m2 / count)
        if stats["count"] != count:
            problems.append(f"{where}.count is {stats['count']}, the train split has {count} kept nodes")
        for name, want in (("mean", mean), ("std", std)):
            got = np.asarray(stats[name], np.float64)
            close = np.isclose(got, want, rtol=1e-9, atol=1e-9)
            if not close.all():
                j = int(np.flatnonzero(~close)[0])
                problems.append(f"{where}.{name}[{j}] is {got[j]!r}, the train rows give {want[j]!r}")


def _shard_file(ds: Dataset, i: int, problems: list[str]) -> Path | str | None:
    """The checked file of shard entry ``i`` (inside the folder, regular, bytes and sha256 as listed;
    remotely an object under the prefix, read through the dataset's store)."""
    shard = ds.manifest["shards"][i]
    if not ds.store.exists(shard["path"]):
        problems.append(f"{shard['path']}: shard is missing")
        return None
    try:
        path = ds.shard_path(i)  # confined to the folder, a regular file or an object
    except BadShards as exc:
        problems.append(str(exc))
        return None
    digest = None
    with ds.store.open_url(str(path), "rb") as fh:  # sequential: a store's read-ahead suits it
        size = fh.seek(0, os.SEEK_END)  # the size of the file hashed, not of the one listed
        fh.seek(0)
        if size == shard["bytes"]:
            digest = sha256_stream(fh)[0]
    if digest != shard["sha256"]:
        problems.append(f"{shard['path']}: shard bytes changed (sha256 differs from the manifest)")
        return None
    return path


def _column(pf, path: Path | str, name: str) -> pa.ChunkedArray:
    """Column ``name`` of every row group, in one read (remotely: few ranged GETs, not one per row
    group); a corrupt page names its row group."""
    groups = list(range(pf.metadata.num_row_groups))
    if not groups:
        return pa.chunked_array([read_row_group(pf, path, rg, [name]).column(0) for rg in groups])
    return read_row_groups(pf, path, groups, [name]).column(0)


def _check_codecs(meta, rel: str, table: str, problems: list[str]) -> None:
    """Every column chunk compressed as its schema column says: zstd, or (``compression: none``) stored
    uncompressed — or zstd there too, as schema 3.0 stored every column. One line names every column
    compressed otherwise, with the codecs found."""
    schema = table_schema(table)
    want = {name: schema.compression(name) for name in schema.arrow.names}  # a column of a newer minor: zstd
    bad: dict[str, set[str]] = defaultdict(set)
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for c in range(group.num_columns):
            col = group.column(c)
            name = col.path_in_schema.split(".")[0]
            if col.compression not in (COMPRESSIONS[want.get(name, "zstd")], "ZSTD"):
                bad[name].add(col.compression)
    if bad:
        problems.append(f"{rel}: " + "; ".join(
            f"column {name} is compressed with {sorted(codecs)}, the {table} schema says {want.get(name, 'zstd')}"
            for name, codecs in sorted(bad.items())))


RUNTIME_COLUMNS = ("runtime", "runtime_spread", "normalizer")
"""The configs columns that are null exactly on the test split (``normalizer``: tile only)."""


def _check_runtime_nulls(pf, path: Path | str, shard: dict, problems: list[str]) -> None:
    """A configs shard's runtime columns are null on every row of a test shard and on none of another
    split's. (The reader takes a column holding any null as absent, so a few runtimes on a test graph,
    or a few missing on a train graph, would otherwise pass unseen.)"""
    if not shard["table"].endswith("_configs"):
        return
    test = shard["split"] == "test"
    for name in RUNTIME_COLUMNS:
        if name not in pf.schema_arrow.names:
            continue
        nulls = _column(pf, path, name).null_count
        if nulls != (pf.metadata.num_rows if test else 0):
            problems.append(f"{shard['path']}: column {name} holds {nulls} nulls in {pf.metadata.num_rows} rows; "
                            f"a {shard['split']} shard holds {'only nulls' if test else 'none'}")


def _check_shard_layout(ds: Dataset, path: Path | str, shard: dict, problems: list[str], graph_rows: dict,
                        config_rows: dict) -> None:
    """One shard's footer and id columns against its manifest entry; records where graphs live."""
    rel = shard["path"]
    pf = ds.open_shard(path)
    check_shard_schema(pf, path, shard["table"])
    meta = pf.metadata
    for what, got, want in (("rows", meta.num_rows, shard["rows"]), ("row groups", meta.num_row_groups, shard["row_groups"])):
        if got != want:
            problems.append(f"{rel}: holds {what} {got!r}, the manifest says {want!r}")
            return
    _check_codecs(meta, rel, shard["table"], problems)
    _check_runtime_nulls(pf, path, shard, problems)
    ids = _column(pf, path, "graph_id").combine_chunks()
    if len(ids) and (ids[0].as_py() != shard["first_graph"] or ids[-1].as_py() != shard["last_graph"]):
        problems.append(f"{rel}: graphs {ids[0]}..{ids[-1]}, the manifest says {shard['first_graph']}..{shard['last_graph']}")
    if len(ids) > 1 and pc.any(pc.less(ids[1:], ids[:-1])).as_py():
        problems.append(f"{rel}: rows are not sorted by graph_id")
    key = (shard["collection"], shard["split"])
    if shard["table"].endswith("_graphs"):
        for name in ("collection", "split"):
            values = set(_column(pf, path, name).to_pylist())
            if values - {shard[name]}:
                problems.append(f"{rel}: {name} column holds {sorted(values)}, the shard is {shard[name]!r}")
        unique = _column(pf, path, "num_unique_configs").to_pylist()
        graph_rows[key] += zip(ids.to_pylist(), [rel] * len(ids), unique, strict=True)
        return
    config_ids = int_values(_column(pf, path, "config_id"))
    if config_ids is None:
        problems.append(f"{rel}: column config_id holds nulls")
        return
    changes = int_values(pc.indices_nonzero(pc.not_equal(ids[1:], ids[:-1]))) + 1 if len(ids) > 1 else []
    bounds = [0, *(int(j) for j in changes), len(ids)] if len(ids) else []
    for start, stop in itertools.pairwise(bounds):  # a graph's configs rows are consecutive
        gid = ids[start].as_py()
        if not np.array_equal(config_ids[start:stop], np.arange(stop - start)):
            problems.append(f"{rel}: configs rows of {gid} are not config_id 0..{stop - start - 1} in order")
        config_rows[key].append((gid, rel, stop - start))


def check_shards(ds: Dataset, report: VerifyReport) -> None:
    """Every shard file, then: the graphs rows and configs rows of each (collection, split) belong to
    exactly the manifest's converted graphs, each once, in as many configs rows as its graphs row says."""
    problems = report.problems
    graph_rows: dict[tuple[str, str], list] = defaultdict(list)
    config_rows: dict[tuple[str, str], list] = defaultdict(list)
    for i, shard in enumerate(ds.manifest["shards"]):
        report.shards_checked += 1
        path = _shard_file(ds, i, problems)
        if path is None:
            continue
        try:
            _check_shard_layout(ds, path, shard, problems, graph_rows, config_rows)
        except BadShards as exc:
            problems.append(str(exc))
    listed: dict[tuple[str, str], set[str]] = defaultdict(set)
    for entry in ds.manifest["inputs"]:
        if entry["status"] == "ok":
            listed[(entry["graph_id"].rsplit(":", 1)[0], entry["path"].split("/")[-2])].add(entry["graph_id"])
    for key in sorted(set(listed) | set(graph_rows) | set(config_rows)):
        where = f"{key[0]} {key[1]}"
        for table, rows in (("graphs", graph_rows[key]), ("configs", config_rows[key])):
            seen: dict[str, str] = {}
            for gid, rel, *_ in rows:
                if gid in seen:
                    problems.append(f"{rel}: {table} rows of {gid} also in {seen[gid]}" if seen[gid] != rel
                                    else f"{rel}: {gid} has more than one graphs row")
                seen[gid] = rel
            extra, missing = sorted(set(seen) - listed[key]), sorted(listed[key] - set(seen))
            if extra:
                problems.append(f"{where}: {table} shards hold {len(extra)} graphs the manifest does not list, e.g. {extra[0]}")
            if missing:
                problems.append(f"{where}: {table} shards lack {len(missing)} graphs the manifest lists, e.g. {missing[0]}")
        have = {gid: (rel, k) for gid, rel, k in config_rows[key]}
        for gid, rel, unique in graph_rows[key]:
            if gid in have and have[gid][1] != unique:
                problems.append(f"{have[gid][0]}: {have[gid][1]} configs rows of {gid}, its graphs row in {rel} "
                                f"says num_unique_configs {unique}")

