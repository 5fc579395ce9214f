"""``tpuprep verify``: prove that the shards reconstruct the inputs exactly, and that everything the shard
folder says about them is true.

Deliberately independent of the Numba kernels: every check is plain NumPy written from docs/spec.md §2, so
a kernel bug cannot hide behind itself. What is checked:

- the manifest: the full JSON Schema (``schemas/manifest.schema.json``) on top of the cheap check every
  reader runs (``manifest.check_manifest``); its options are a valid ``BuildOptions``;
- every shard file: inside the folder, a regular file, size and sha256 as in the manifest, each column
  compressed as its schema says (zstd, or uncompressed where the schema says ``none``), the
  ``table`` its metadata names and that table's columns, rows, row groups, first and last graph as in
  the manifest; runtimes (``runtime``, ``runtime_spread``, tile ``normalizer``) null on every row of a
  test ``configs`` shard and on none of another split's; ``graphs``
  rows hold exactly the manifest's converted graphs of that collection and split (each once, sorted);
  ``configs`` rows are sorted by ``(graph_id, config_id)`` with ``config_id`` = 0..c_u−1 per graph and
  each graph's rows in one shard;
- every folder under ``--src`` listed (one that cannot be is a problem: its inputs would go unchecked);
  every input's zip structure read independently of the build's reader (``inputcheck``: the end
  record ends the file or archive member exactly, sizes and CRC-32 of every member as the zip
  directory declares); its declared shapes within the input limits (``limits.py``);
- per graph, against its input file: the kept node set and edge set (NumPy breadth-first search);
  ``node_feat`` rows re-padded exactly by the docs/spec.md §2.2 rule (or untouched with ``--no-repad``),
  opcodes, remapped edges, ``node_config_ids`` and ``node_splits``; every original config row (streamed)
  against the decoded codes of its unique config via ``config_inverse``; every original runtime; the
  minimum-runtime / ``group_size`` / ``first_index`` bookkeeping; with dedup, unique configs pairwise
  distinct, without it one config per group; every scalar column of the ``graphs`` row (``num_edges``,
  ``fold`` = ``graph_fold(graph_id, folds)``, ``source_sha256`` = the input's sha256 ...) and the
  manifest's per-input counts;
- per collection and split: the manifest's totals (sums of the per-input counts, shard bytes) and the
  train ``node_feat_stats`` recomputed from the shards' feature rows.

Layout configs are compared without holding a graph's configs: the shard's unique configs are read in
blocks (``Dataset.iter_config_blocks``) and each is kept as a 128-bit BLAKE2b digest of its int8 values,
then every input row (streamed) is digested the same way and compared with its unique config's digest;
"pairwise distinct" is distinct digests. A false "equal" would need a BLAKE2b collision (≈ 2^-128 per
pair); memory is O(c) per graph whatever nc, so ``verify`` runs beside a full-size build.

Options that leave no trace in the shards (``chunk_bytes``, ``row_group_bytes``, ``shard_bytes``, the
zstd level) are checked for type and range only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import stat
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import BadInput, BadShards
from .inputcheck import listing_problems, member_problems
from .inputs import InputFile, discover, open_source
from .io.files import sha256_stream
from .io.npz import NpzFile
from .limits import check_input_limits
from .shards.layout import MANIFEST
from .shards.manifest import COUNT_FIELDS, validate_schema
from .shards.parquet import check_shard_schema, read_row_group, read_row_groups
from .shards.reader import Dataset, GraphRecord, open_dataset
from .shards.schema import COMPRESSIONS, table_schema
from .tpugraphs import (
    FEATURE_STATS_COLUMNS,
    OPCODE_CONVOLUTION,
    config_rows_within,
    graph_fold,
    selected,
)

Progress = Callable[[str, dict], None]
"""``progress(event, info)``, the build's progress events (see ``verify``)."""


@dataclass
class VerifyReport:
    graphs_checked: int = 0
    shards_checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class InputFacts:
    """What an input file and the build options say a graph's shards must hold (recomputed here).

    Counts of the input (``*_before``, ``configs``) and of the kept graph (``*_after``), re-padding
    anomalies among the kept nodes (0 with ``--no-repad``), configurable nodes (None for tile).
    """

    nodes_before: int
    edges_before: int
    configs: int
    nodes_after: int
    edges_after: int
    anomalies: int
    config_nodes: int | None


def hop_distances(edge_index: np.ndarray, n: int, sources: np.ndarray, max_hops: int) -> np.ndarray:
    """Undirected hop distance from ``sources`` (−1 beyond ``max_hops``) by frontier expansion."""
    dist = np.full(n, -1, np.int64)
    dist[sources] = 0
    u, v = edge_index[:, 0], edge_index[:, 1]
    for d in range(1, max_hops + 1):
        frontier = dist == d - 1
        reached = np.zeros(n, bool)
        reached[v[frontier[u]]] = True
        reached[u[frontier[v]]] = True
        new = reached & (dist < 0)
        if not new.any():
            break
        dist[new] = d
    return dist


def _expected_structure(edge_index, n, config_ids, options) -> tuple[np.ndarray, np.ndarray]:
    if not options["prune"] or config_ids is None:
        return np.arange(n), np.ones(len(edge_index), bool)
    k = options["hops"]
    dist = hop_distances(edge_index, n, config_ids, k)
    keep_node = dist >= 0
    du, dv = dist[edge_index[:, 0]], dist[edge_index[:, 1]]
    near = max(k - 1, 0)
    keep_edge = keep_node[edge_index[:, 0]] & keep_node[edge_index[:, 1]] & (
        ((du >= 0) & (du <= near)) | ((dv >= 0) & (dv <= near)))
    return np.flatnonzero(keep_node), keep_edge


def repad_reference(feat: np.ndarray, opcode: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """docs/spec.md §2.2 in plain NumPy: the re-padded copy (n, 140) float32 of ``feat`` (n, 140) float32 and the
    anomaly mask (n,) bool (first r layout entries not a permutation of 0..r−1); ``opcode`` (n,)."""
    dims = feat[:, 21:27] != 0
    r_dims = np.where(dims.any(1), 6 - np.argmax(dims[:, ::-1], axis=1), 0)
    layout = feat[:, 134:140]
    r_perm = np.trunc(np.clip(layout.max(1), -1.0, 5.0)).astype(np.int64) + 1
    r = np.maximum(r_dims, r_perm)
    r[(r_dims == 0) & (feat[:, 28] == 1.0)] = 0
    r[feat[:, 18] == 1.0] = 0
    out = feat.copy()
    slot = np.arange(6)
    out[:, 134:140][slot[None, :] >= r[:, None]] = -1.0
    spatial = np.where(np.asarray(opcode) == OPCODE_CONVOLUTION, np.minimum(np.maximum(r - 2, 0), 4), 0)
    pad = np.arange(4)[None, :] >= spatial[:, None]
    out[:, 95:99][pad] = -1.0
    out[:, 101:105][pad] = -1.0
    head = slot[None, :] < r[:, None]
    fine = (layout == np.trunc(layout)) & (layout >= 0) & (layout < r[:, None])
    value = np.where(head & fine, layout, -1).astype(np.int64)
    repeated = np.stack([(value == k).sum(1) for k in range(6)], axis=1) > 1
    anomalous = (head & ~fine).any(1) | repeated.any(1)
    return out, anomalous


def _check(cond: bool, problems: list[str], gid: str, what: str) -> bool:
    if not cond:
        problems.append(f"{gid}: {what}")
    return cond


def _check_groups(g: GraphRecord, runtime: np.ndarray | None, normalizer: np.ndarray | None,
                  problems: list[str]) -> None:
    gid, inv, u = g.graph_id, g.config_inverse.astype(np.int64), g.num_unique_configs
    if not _check(inv.min(initial=0) >= 0 and inv.max(initial=-1) < u, problems, gid, "config_inverse out of range"):
        return
    first = np.full(u, len(inv), np.int64)
    np.minimum.at(first, inv, np.arange(len(inv)))
    _check(np.array_equal(first, g.first_index), problems, gid, "first_index is not the first occurrence")
    _check(bool((np.diff(first) > 0).all()), problems, gid, "unique configs are not numbered in first-occurrence order")
    _check(np.array_equal(np.bincount(inv, minlength=u), g.group_size), problems, gid, "group_size mismatch")
    if runtime is None:
        _check(g.config_runtime is None, problems, gid, "test graph has runtimes")
        _check(g.config_runtime_spread is None, problems, gid, "test graph has runtime_spread")
        return
    low = np.full(u, np.iinfo(np.int64).max, np.int64)
    high = np.full(u, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(low, inv, runtime)
    np.maximum.at(high, inv, runtime)
    _check(g.config_runtime_spread is not None and np.array_equal(high - low, g.config_runtime_spread), problems,
           gid, "runtime_spread is not the group's largest minus smallest runtime")
    if not _check(g.config_runtime is not None and (normalizer is None or g.config_runtime_normalizers is not None),
                  problems, gid, "runtimes are missing from the shards (null)"):
        return
    if normalizer is None:
        best = np.full(u, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(best, inv, runtime)
        _check(np.array_equal(best, g.config_runtime), problems, gid, "config_runtime is not the group minimum")
        return
    best_ratio: dict[int, Fraction] = {}
    for i, grp in enumerate(inv.tolist()):
        ratio = Fraction(int(runtime[i]), int(normalizer[i]))
        if grp not in best_ratio or ratio < best_ratio[grp]:
            best_ratio[grp] = ratio
    chosen = [Fraction(int(r), int(n)) for r, n in zip(g.config_runtime, g.config_runtime_normalizers, strict=True)]
    _check(chosen == [best_ratio[i] for i in range(u)], problems, gid, "tile runtime/normalizer is not the group minimum")


def _check_quality(ds: Dataset, g: GraphRecord, runtime: np.ndarray | None, problems: list[str]) -> None:
    """The graphs row's num_duplicate_groups / num_noisy_groups (spread > 1 %) from the inputs."""
    inv = g.config_inverse.astype(np.int64)
    u = int(inv.max(initial=-1)) + 1
    size = np.bincount(inv, minlength=u)
    want: dict[str, int | None] = {"num_duplicate_groups": int(np.count_nonzero(size > 1)), "num_noisy_groups": None}
    if runtime is not None:
        lo = np.full(u, np.iinfo(np.int64).max, np.int64)
        hi = np.full(u, np.iinfo(np.int64).min, np.int64)
        np.minimum.at(lo, inv, runtime)
        np.maximum.at(hi, inv, runtime)
        want["num_noisy_groups"] = int(np.count_nonzero((size > 1) & (hi > lo * 1.01)))
    row = ds.graph_row(g.graph_id)
    for name, value in want.items():
        _check(row.get(name) == value, problems, g.graph_id, f"graphs column {name} is {row.get(name)!r}, expected {value!r}")


def _check_dedup(g: GraphRecord, options: dict, problems: list[str], digests: list[bytes] | None = None) -> None:
    """With dedup, the unique configs are pairwise distinct (by value; layout: by ``digests`` of their
    rows); without it, one config per group."""
    gid = g.graph_id
    if not options["dedup"]:
        _check(g.num_unique_configs == g.num_configs and np.array_equal(g.config_inverse, np.arange(g.num_configs)),
               problems, gid, "options say --no-dedup, but configs were merged")
        return
    if digests is not None:
        _check(len(set(digests)) == len(digests), problems, gid, "unique configs are not pairwise distinct")
        return
    flat = (np.asarray(g.config_feat, np.float32) + np.float32(0)).view(np.uint32)  # by value: -0.0 equals 0.0
    distinct = len(np.unique(flat, axis=0)) if len(flat) else 0
    _check(distinct == len(flat), problems, gid, "unique configs are not pairwise distinct")


VERIFY_BLOCK_BYTES = 16 << 20
"""Decoded int8 config values per block read from the shards (and per input chunk) in ``verify``."""


def _row_digests(values: np.ndarray) -> list[bytes]:
    """128-bit BLAKE2b digest of every row of ``values`` (k, ...) int8 (C order)."""
    rows = np.ascontiguousarray(values, np.int8).reshape(len(values), -1)
    return [hashlib.blake2b(row, digest_size=16).digest() for row in rows]


def _layout_configs(ds: Dataset, g: GraphRecord, problems: list[str]) -> tuple[GraphRecord, list[bytes]] | None:
    """Read a layout graph's unique configs block by block: (``g`` with its per-unique-config columns
    filled in, the digest of every unique config's values); None, with a problem, if the shards do not
    give configs 0..c_u−1 in order."""
    nc = len(g.node_config_ids)
    per_block = config_rows_within(nc, VERIFY_BLOCK_BYTES)
    digests: list[bytes] = []
    columns: dict[str, list[np.ndarray]] = {"config_runtime": [], "config_runtime_spread": [], "group_size": [],
                                            "first_index": []}
    done = 0
    for block in ds.iter_config_blocks(g.graph_id, rows_per_block=per_block):
        if not _check(np.array_equal(block.rows, np.arange(done, done + len(block.rows))), problems, g.graph_id,
                      "configs rows are not config_id 0..c_u-1 in order"):
            return None
        done += len(block.rows)
        digests += _row_digests(block.node_config_feat)
        for name, parts in columns.items():
            parts.append(getattr(block, name))
    if not done:  # a graph with no configs
        runtimes = None if g.config_runtime_original is None else np.zeros(0, np.int64)
        joined = {"config_runtime": runtimes, "config_runtime_spread": runtimes,
                  "group_size": np.zeros(0, np.int32), "first_index": np.zeros(0, np.int32)}
    else:
        joined = {name: None if any(p is None for p in parts) else np.concatenate(parts)
                  for name, parts in columns.items()}
    return dataclasses.replace(g, **joined), digests


def _check_layout_rows(f: NpzFile, g: GraphRecord, digests: list[bytes], problems: list[str]) -> None:
    """Every original config row of the input (streamed) has the digest of its unique config."""
    rows = max(1, VERIFY_BLOCK_BYTES // max(chunk_row_bytes(f), 1))
    for start, chunk in f.iter_rows("node_config_feat", rows):
        as_int = chunk.astype(np.int8)
        valid = ((chunk >= -1) & (chunk <= 5) & (chunk == as_int)).reshape(len(chunk), -1).all(1)
        want = g.config_inverse[start : start + len(chunk)]
        same = np.array([bool(ok) and digest == digests[u]
                         for ok, digest, u in zip(valid, _row_digests(as_int), want.tolist(), strict=True)], bool)
        if not same.all():
            problems.append(f"{g.graph_id}: original config row {start + int(np.flatnonzero(~same)[0])} is not reconstructed")
            return


def verify_graph(ds: Dataset, path: Path | str, graph_id: str, options: dict, problems: list[str],
                 record: GraphRecord | None = None, fh: BinaryIO | None = None) -> InputFacts:
    """Check one graph of ``ds`` (``record``, loaded if None) against its input file ``path`` (appends
    to ``problems``); returns what the input says the graph's counts must be. ``fh``: the input
    already open (``inputs.open_source``: an archive member, a remote object), else ``path`` is opened."""
    g = ds.load_graph(graph_id, configs=False) if record is None else record
    if g.kind == "tile" and g.group_size is None:  # tile configs are small: read whole
        g = ds.load_graph(graph_id)
    gid = graph_id
    layout = g.kind == "layout"
    with NpzFile(path, fh) as f:
        check_input_limits(f, g.kind)  # from the headers, before anything is read
        feat = f.read("node_feat").astype(np.float32)
        n = len(feat)
        opcode = f.read("node_opcode")
        edges = f.read("edge_index").reshape(-1, 2).astype(np.int64)
        ids = f.read("node_config_ids").astype(np.int64) if layout else None
        runtime = f.read("config_runtime").astype(np.int64)
        nodes, edge_mask = _expected_structure(edges, n, ids, options)
        kept = feat[nodes]
        if options["repad"]:
            kept, anomalous = repad_reference(kept, opcode[nodes])
        else:
            anomalous = np.zeros(len(nodes), bool)
        facts = InputFacts(n, len(edges), len(runtime), len(nodes), int(edge_mask.sum()), int(anomalous.sum()),
                           len(ids) if layout else None)
        if not _check(np.array_equal(g.node_index, nodes), problems, gid, "kept node set differs from the pruning rule"):
            return facts
        rule = "re-padded by the SPEC §2.2 rule" if options["repad"] else "unchanged (options say --no-repad)"
        _check(g.node_feat.shape == kept.shape and np.array_equal(g.node_feat, kept), problems, gid,
               f"node_feat differs from the input's kept rows {rule}")
        _check(np.array_equal(g.node_opcode, opcode[g.node_index]), problems, gid, "node_opcode differs")
        _check(g.edge_index.max(initial=-1) < len(g.node_index) and g.edge_index.min(initial=0) >= 0
               and np.array_equal(g.node_index[g.edge_index].reshape(-1, 2), edges[edge_mask]),
               problems, gid, "edges differ from the input's kept edges (or their order)")
        labelled = g.split != "test"
        if labelled:
            _check(g.config_runtime_original is not None and np.array_equal(g.config_runtime_original, runtime),
                   problems, gid, "original runtimes differ")
        else:
            _check(g.config_runtime_original is None, problems, gid, "test graph stores runtimes")
        if not _check(len(g.config_inverse) == len(runtime), problems, gid,
                      f"config_inverse has {len(g.config_inverse)} entries, input has {len(runtime)} configs"):
            return facts
        if layout:
            _check(g.node_config_ids.max(initial=-1) < len(g.node_index)
                   and np.array_equal(g.node_index[g.node_config_ids], ids), problems, gid, "node_config_ids differ")
            splits = f.read("node_splits").reshape(-1)
            _check(np.array_equal(g.node_splits, np.searchsorted(g.node_index, splits)), problems, gid, "node_splits differ")
            read = _layout_configs(ds, g, problems)
            if read is None:
                return facts
            g, digests = read
            _check_dedup(g, options, problems, digests)
            _check(len(digests) == g.num_unique_configs, problems, gid,
                   f"configs shard holds {len(digests)} unique configs, graphs row says {g.num_unique_configs}")
            if g.num_unique_configs and g.config_inverse.max(initial=-1) < len(digests) and g.config_inverse.min() >= 0:
                _check_layout_rows(f, g, digests, problems)
            _check_groups(g, runtime if labelled else None, None, problems)
            _check_quality(ds, g, runtime if labelled else None, problems)
        else:
            _check_dedup(g, options, problems)
            cfeat = f.read("config_feat").astype(np.float32)
            _check(np.array_equal(g.config_feat[g.config_inverse], cfeat), problems, gid, "tile config_feat rows are not reconstructed")
            norm = f.read("config_runtime_normalizers").astype(np.int64)
            if labelled:
                _check(g.config_runtime_normalizers_original is not None
                       and np.array_equal(g.config_runtime_normalizers_original, norm), problems, gid, "original normalizers differ")
            _check_groups(g, runtime if labelled else None, norm if labelled else None, problems)
            _check_quality(ds, g, runtime if labelled else None, problems)
    return facts


def chunk_row_bytes(f: NpzFile) -> int:
    m = f.members["node_config_feat"]
    return int(np.prod(m.shape[1:])) * m.dtype.itemsize


# --------------------------------------------------------------------------- graphs row, counts


def _check_graph_row(ds: Dataset, inp: InputFile, entry: dict, sha: str, facts: InputFacts,
                     problems: list[str]) -> None:
    """Every scalar column of the graph's ``graphs`` row and the manifest's per-input counts."""
    gid = inp.graph_id
    row = ds.graph_row(gid)
    unique = row.get("num_unique_configs")  # == the configs rows (the reader checks), checked by _check_groups
    want = {"graph_id": gid, "collection": inp.collection, "split": inp.split, "source_file": inp.relpath,
            "source_sha256": sha, "source_bytes": inp.size, "fold": graph_fold(gid, ds.manifest["options"]["folds"]),
            "num_nodes_original": facts.nodes_before, "num_edges_original": facts.edges_before,
            "num_nodes": facts.nodes_after, "num_edges": facts.edges_after, "num_configs": facts.configs,
            "num_repad_anomalies": facts.anomalies}
    if facts.config_nodes is not None:
        want["num_config_nodes"] = facts.config_nodes
    for name, value in want.items():
        if row.get(name) != value:
            problems.append(f"{gid}: graphs column {name} is {row.get(name)!r}, expected {value!r}")
    counts = {"configs": facts.configs, "unique_configs": unique, "nodes_before": facts.nodes_before,
              "nodes_after": facts.nodes_after, "edges_before": facts.edges_before,
              "edges_after": facts.edges_after, "bytes_in": inp.size, "anomalies": facts.anomalies}
    for name, value in counts.items():
        if entry["counts"].get(name) != value:
            problems.append(f"{inp.relpath}: manifest counts.{name} is {entry['counts'].get(name)!r}, expected {value!r}")
    if entry["bytes"] != inp.size:
        problems.append(f"{inp.relpath}: manifest bytes is {entry['bytes']}, the file has {inp.size}")


def _check_totals(manifest: dict, problems: list[str]) -> None:
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
            for k in COUNT_FIELDS:
                if got.get(k) != want[k]:
                    problems.append(f"{MANIFEST}: {where}.{k} is {got.get(k)!r}, the inputs and shards sum to {want[k]}")


def _check_quarantine(manifest: dict, problems: list[str]) -> None:
    listed = [q.get("file") for q in manifest["quarantine"]]
    want = [e["path"] for e in manifest["inputs"] if e["status"] != "ok"]
    if listed != want:
        problems.append(f"{MANIFEST}: quarantine lists {len(listed)} files, inputs have {len(want)} quarantined ones "
                        "(or in another order)")


# --------------------------------------------------------------------------- statistics


def _moments(node_feat: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """(count, mean (134,), sum of squared deviations (134,)) of node_feat[:, :134] in float64."""
    x = np.asarray(node_feat, np.float64)[:, :FEATURE_STATS_COLUMNS]
    if not len(x):
        return 0, np.zeros(FEATURE_STATS_COLUMNS), np.zeros(FEATURE_STATS_COLUMNS)
    mean = x.mean(axis=0)
    return len(x), mean, ((x - mean) ** 2).sum(axis=0)


def _check_stats(ds: Dataset, moments: dict[str, tuple], collections, problems: list[str]) -> None:
    """Each selected collection's ``node_feat_stats`` against its train graphs' feature rows, pooled
    directly (not by the build's sequential merge); graphs not loaded during the run are read now."""
    for coll, info in ds.manifest["collections"].items():
        if not selected(coll, collections):
            continue
        parts = []
        for gid in ds.graph_ids(coll, "train"):
            if gid not in moments:
                try:
                    moments[gid] = _moments(ds.load_graph(gid).node_feat)
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


# --------------------------------------------------------------------------- shard files


def _shard_file(ds: Dataset, i: int, problems: list[str]) -> Path | str | None:
    """The checked file of shard entry ``i`` (inside the folder, regular, bytes and sha256 as listed;
    remotely an object under the prefix, read through the dataset's store)."""
    shard = ds.manifest["shards"][i]
    if ds.store.is_local and not os.path.lexists(ds.root / shard["path"]):
        problems.append(f"{shard['path']}: shard is missing")
        return None
    try:
        path = ds.shard_path(i)
    except BadShards as exc:
        problems.append(str(exc))
        return None
    digest = None
    if not ds.store.is_local:
        with ds.store.open_url(str(path), "rb") as fh:  # sequential: the store's read-ahead suits it
            if fh.size == shard["bytes"]:
                digest = sha256_stream(fh)[0]
    else:
        with open(path, "rb") as fh:  # fstat: the file hashed is the regular file checked
            st = os.fstat(fh.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_size == shard["bytes"]:
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
    config_ids = _column(pf, path, "config_id").to_numpy()
    changes = np.flatnonzero(pc.not_equal(ids[1:], ids[:-1]).to_numpy(zero_copy_only=False)) + 1 if len(ids) > 1 else []
    bounds = [0, *(int(j) for j in changes), len(ids)] if len(ids) else []
    for start, stop in itertools.pairwise(bounds):  # a graph's configs rows are consecutive
        gid = ids[start].as_py()
        if not np.array_equal(config_ids[start:stop], np.arange(stop - start)):
            problems.append(f"{rel}: configs rows of {gid} are not config_id 0..{stop - start - 1} in order")
        config_rows[key].append((gid, rel, stop - start))


def _check_shards(ds: Dataset, report: VerifyReport) -> None:
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


# --------------------------------------------------------------------------- verify


_OPEN: dict[str, Dataset] = {}
"""Datasets a verify worker process has opened, by folder or URL (one per process, reused across graphs)."""


def verify_input(ds: Dataset | str, inp: InputFile, entry: dict,
                 storage_options: dict | None = None) -> tuple[list[str], tuple | None, bool]:
    """Check one converted input against its graph in ``ds`` (a ``Dataset``, or a shard folder or URL
    a worker process opens once, with ``storage_options``): (problems, the graph's feature moments if
    it is a train graph, whether it was checked — False when the input changed since the build)."""
    if not isinstance(ds, Dataset):
        ds = _OPEN.get(ds) or _OPEN.setdefault(ds, open_dataset(ds, storage_options))
    problems: list[str] = []
    try:
        fh, _ = open_source(inp)
    except BadInput as exc:
        return [f"{inp.graph_id}: cannot be checked: {exc}"], None, False
    with fh:
        sha = sha256_stream(fh)[0]
        if sha != entry["sha256"]:
            return [f"{inp.relpath}: input changed since the build (sha256 differs)"], None, False
        problems += member_problems(inp, fh)  # the zip itself, not through the build's reader
        moments = None
        try:
            # a layout graph's configs are streamed by verify_graph, never loaded whole
            g = ds.load_graph(inp.graph_id, configs=inp.kind != "layout")
            if inp.split == "train":
                moments = _moments(g.node_feat)
            facts = verify_graph(ds, inp.path, inp.graph_id, ds.manifest["options"], problems, g, fh)
            _check_graph_row(ds, inp, entry, sha, facts, problems)
        except (BadInput, OSError, KeyError, ValueError) as exc:
            problems.append(f"{inp.graph_id}: cannot be checked: {exc}")
    return problems, moments, True


def _verify_inputs(ds: Dataset, todo: list[tuple[InputFile, dict]], workers: int,
                   progress: Progress | None) -> Iterator[tuple[InputFile, tuple[list[str], tuple | None, bool]]]:
    """``verify_input`` of each (input, manifest entry), in this process or on ``workers`` local worker
    processes; yields (input, result) in the order of ``todo`` whatever order the workers finish in, so
    the report is the same as a serial run's."""
    notify = progress or (lambda event, info: None)
    if workers <= 1 or len(todo) <= 1:
        for inp, entry in todo:
            result = verify_input(ds, inp, entry)
            notify("file", {"path": inp.relpath, "bytes": inp.size, "status": "ok"})
            yield inp, result
        return
    from .runners import make_runner

    runner = make_runner(workers)
    try:
        local = (ds.root,) if ds.store.is_local else ()  # a remote dataset: every worker reads the store
        futures = [runner.submit(verify_input, str(ds.root), inp, entry, ds.storage_options,
                                 paths=(*filter(None, [inp.local_file]), *local)) for inp, entry in todo]
        index = {id(f): k for k, f in enumerate(futures)}
        results: dict[int, tuple] = {}
        for fut in runner.as_completed(futures):
            k = index[id(fut)]
            results[k] = fut.result()
            notify("file", {"path": todo[k][0].relpath, "bytes": todo[k][0].size, "status": "ok"})
    finally:
        runner.close()
    for k, (inp, _) in enumerate(todo):
        yield inp, results[k]


def verify(src: str | Path, dst: str | Path, *, collections=None, splits=None,
           collection: str | None = None, split: str | None = None,
           progress: Progress | None = None, workers: int = 1,
           storage_options: dict | None = None) -> VerifyReport:
    """Verify the manifest, every shard and every graph of ``dst`` against the inputs under ``src``.

    ``collection``/``split``: ``src`` is a plain file or flat folder built with them (``build``'s
    arguments of the same names); only what the build holds for them is expected under ``src``.
    ``dst`` may be a URL (``s3://bucket/shards``, opened with ``storage_options``): the shard-side
    checks are the same, each shard read through the store; the inputs under ``src`` stay local.

    ``progress(event, info)``: ``"discovered"`` ``{"inputs": [InputFile ...], "refused": []}`` once,
    then ``"file"`` ``{"path", "bytes", "status": "ok"}`` per input checked (the build's events).
    ``workers`` > 1: graphs are checked in that many local processes; the report is identical.
    Raises ``BadShards`` when ``dst`` cannot be opened at all (no or malformed manifest); everything
    else found wrong is a line of ``report.problems``.
    """
    report = VerifyReport()
    ds = open_dataset(dst, storage_options)
    problem = validate_schema(ds.manifest, ds.manifest_path)
    if problem:
        report.problems.append(problem)
    _check_shards(ds, report)
    inputs, refused = discover(src, collections, splits, collection=collection, split=split)
    report.problems += listing_problems(refused)
    if collection is not None and split is not None:
        collections, splits = [collection], [split]
    listed = {i["path"]: i for i in ds.manifest["inputs"]}
    present = {inp.relpath for inp in inputs}
    moments: dict[str, tuple] = {}
    todo = []
    for inp in inputs:
        entry = listed.get(inp.relpath)
        if entry is None:
            report.problems.append(f"{inp.relpath}: input is not in the manifest")
        elif entry["status"] == "ok":
            todo.append((inp, entry))
    if progress:
        progress("discovered", {"inputs": [inp for inp, _ in todo], "refused": []})
    for inp, (problems, graph_moments, checked) in _verify_inputs(ds, todo, workers, progress):
        report.problems.extend(problems)
        if graph_moments is not None:
            moments[inp.graph_id] = graph_moments
        report.graphs_checked += checked
    for path, entry in listed.items():
        if entry["status"] != "ok" or path in present:
            continue
        collection, split = entry["graph_id"].rsplit(":", 1)[0], path.split("/")[-2]
        if selected(collection, collections) and (not splits or split in splits):
            report.problems.append(f"{path}: in the manifest but not under --src")
    _check_totals(ds.manifest, report.problems)
    _check_quarantine(ds.manifest, report.problems)
    if not splits or "train" in splits:
        _check_stats(ds, moments, collections, report.problems)
    return report
