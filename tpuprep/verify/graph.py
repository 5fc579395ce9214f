"""``verify``'s per-graph checks: one converted graph in the shards against its input file (the
kept structure, re-padded features, edges, config rows, runtimes and group bookkeeping), and its
``graphs`` row and manifest counts."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import BadInput
from ..inputcheck import MemberReader, zip_entries
from ..inputs import InputFile
from ..io.npz import NpzFile
from ..limits import check_input_limits
from ..options import REPAD_RULE
from ..shards.manifest import keys_of, manifest_version, repad_rule
from ..shards.reader import Dataset, GraphRecord
from ..tpugraphs import graph_fold
from .layout import layout_pass
from .reading import InputReader
from .reference import InputFacts, expected_structure, repad_reference


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
    _check(_tile_minimum(inv, u, runtime, normalizer, g), problems, gid,
           "tile runtime/normalizer is not the group minimum")


def _tile_minimum(inv: np.ndarray, u: int, runtime: np.ndarray, normalizer: np.ndarray, g: GraphRecord) -> bool:
    """Each unique tile config's stored runtime / normalizer equals the smallest runtime / normalizer of
    its group, compared exactly: vectorised by cross-multiplication in int64 when every value is below
    2^31 and every normalizer positive (the products stay below 2^62), else as Python ``Fraction``s."""
    best_r, best_n = np.asarray(g.config_runtime, np.int64), np.asarray(g.config_runtime_normalizers, np.int64)
    values = (runtime, normalizer, best_r, best_n)
    if len(best_r) == len(best_n) == u and all(len(v) == 0 or int(np.abs(v).max()) < 2**31 for v in values) \
            and normalizer.min(initial=1) > 0 and best_n.min(initial=1) > 0:
        chosen, each = best_r[inv] * normalizer, runtime * best_n[inv]  # R_g·n_i against r_i·N_g
        reached = np.bincount(inv, weights=chosen == each, minlength=u) > 0  # some row of the group equals it
        return bool((chosen <= each).all() and reached.all())
    best_ratio: dict[int, Fraction] = {}
    for i, grp in enumerate(inv.tolist()):
        ratio = Fraction(int(runtime[i]), int(normalizer[i]))
        if grp not in best_ratio or ratio < best_ratio[grp]:
            best_ratio[grp] = ratio
    chosen = [Fraction(int(r), int(n)) for r, n in zip(g.config_runtime, g.config_runtime_normalizers, strict=True)]
    return chosen == [best_ratio[i] for i in range(u)]


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


def _check_dedup(g: GraphRecord, options: dict, problems: list[str], keys: np.ndarray | None = None) -> None:
    """With dedup, the unique configs are pairwise distinct (by value; layout: by the ``keys`` of their
    codes, ``layout.layout_pass``); without it, one config per group."""
    gid = g.graph_id
    if not options["dedup"]:
        _check(g.num_unique_configs == g.num_configs and np.array_equal(g.config_inverse, np.arange(g.num_configs)),
               problems, gid, "options say --no-dedup, but configs were merged")
        return
    if keys is not None:
        _check(len(np.unique(keys)) == len(keys), problems, gid, "unique configs are not pairwise distinct")
        return
    flat = np.ascontiguousarray((np.asarray(g.config_feat, np.float32) + np.float32(0)).view(np.uint32))  # -0.0 is 0.0
    rows = flat.view(np.dtype((np.void, 4 * flat.shape[1]))).ravel() if flat.ndim == 2 and flat.shape[1] else flat
    distinct = len(np.unique(rows)) if len(flat) else 0  # each row as one bytes value: 10x faster than axis=0
    _check(distinct == len(flat), problems, gid, "unique configs are not pairwise distinct")


def verify_graph(ds: Dataset, path: Path | str, graph_id: str, options: dict, problems: list[str],
                 record: GraphRecord | None = None, fh: BinaryIO | None = None,
                 where: str | None = None) -> InputFacts:
    """Check one graph of ``ds`` (``record``, loaded if None) against its input file ``path`` (appends
    to ``problems``); returns what the input says the graph's counts must be. ``fh``: the input
    already open (``inputs.open_source``: an archive member, a remote object), else ``path`` is opened.

    The input's zip structure is checked first (``inputcheck.zip_entries``), then every member is
    inflated once, for the arrays compared and for its size and CRC-32 (``reading.InputReader``);
    those lines name the input as ``where`` (default ``path``). Raises ``BadInput`` when the input
    cannot be read at all (the zip lines found before are in ``problems``)."""
    if fh is None:
        with open(path, "rb") as own:
            return verify_graph(ds, path, graph_id, options, problems, record, own, where)
    g = ds.load_graph(graph_id, configs=False) if record is None else record
    if g.kind == "tile" and g.group_size is None:  # tile configs are small: read whole
        g = ds.load_graph(graph_id)
    name = str(path) if where is None else where
    size = fh.seek(0, os.SEEK_END)
    structure, entries = zip_entries(fh, size)
    problems += [f"{name}: {p}" for p in structure]
    try:
        f = NpzFile(path, fh)
    except BadInput:
        problems += [f"{name}: {e.name}: {p}" for e in entries if (p := MemberReader(fh, e).finish())]
        raise
    r = InputReader(f, fh, entries)
    try:
        return _check_input(ds, r, g, options, problems)
    finally:
        problems += [f"{name}: {p}" for p in r.finish()]
        f.close()


def _check_input(ds: Dataset, r: InputReader, g: GraphRecord, options: dict, problems: list[str]) -> InputFacts:
    """``verify_graph``'s checks of ``g`` against its input's arrays, read through ``r``."""
    gid, layout, f = g.graph_id, g.kind == "layout", r
    check_input_limits(r.f, g.kind)  # from the headers, before anything is read
    feat = f.read("node_feat").astype(np.float32)
    n = len(feat)
    opcode = f.read("node_opcode")
    edges = f.read("edge_index").reshape(-1, 2).astype(np.int64)
    ids = f.read("node_config_ids").astype(np.int64) if layout else None
    runtime = f.read("config_runtime").astype(np.int64)
    nodes, edge_mask = expected_structure(edges, n, ids, options)
    rule = repad_rule(options)
    if rule is not None:
        kept, anomalous, undecided = repad_reference(feat, opcode, edges, nodes, rule)
    else:
        kept, anomalous, undecided = feat[nodes], np.zeros(len(nodes), bool), np.zeros(len(nodes), bool)
    facts = InputFacts(n, len(edges), len(runtime), len(nodes), int(edge_mask.sum()), int(anomalous.sum()),
                       int(undecided.sum()), len(ids) if layout else None)
    if not _check(np.array_equal(g.node_index, nodes), problems, gid, "kept node set differs from the pruning rule"):
        return facts
    if rule is not None and rule > REPAD_RULE:
        problems.append(f"{gid}: node_feat was re-padded by the rule {rule} (options.repad_rule), which this "
                        f"tpuprep does not know (its rule is {REPAD_RULE}): not verified")
    else:
        rule = f"re-padded by the docs/spec.md §2.2 rule {rule}" if rule else "unchanged (options say --no-repad)"
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
        read = layout_pass(ds, r, g, problems)
        if read is None:
            return facts
        g = read.g
        _check_dedup(g, options, problems, read.keys)
        _check(read.stored == g.num_unique_configs, problems, gid,
               f"configs shard holds {read.stored} unique configs, graphs row says {g.num_unique_configs}")
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


def check_graph_row(ds: Dataset, inp: InputFile, entry: dict, sha: str, facts: InputFacts,
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
    if keys_of(("dimensions_undecided",), manifest_version(ds.manifest)):  # schema >= 3.3
        want["dimensions_undecided"] = facts.undecided
    if facts.config_nodes is not None:
        want["num_config_nodes"] = facts.config_nodes
    for name, value in want.items():
        if row.get(name) != value:
            problems.append(f"{gid}: graphs column {name} is {row.get(name)!r}, expected {value!r}")
    counts = {"configs": facts.configs, "unique_configs": unique, "nodes_before": facts.nodes_before,
              "nodes_after": facts.nodes_after, "edges_before": facts.edges_before,
              "edges_after": facts.edges_after, "bytes_in": inp.size, "anomalies": facts.anomalies}
    if "dimensions_undecided" in want:
        counts["dimensions_undecided"] = facts.undecided
    for name, value in counts.items():
        if entry["counts"].get(name) != value:
            problems.append(f"{inp.relpath}: manifest counts.{name} is {entry['counts'].get(name)!r}, expected {value!r}")
    if entry["bytes"] != inp.size:
        problems.append(f"{inp.relpath}: manifest bytes is {entry['bytes']}, the file has {inp.size}")

