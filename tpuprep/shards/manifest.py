"""The build manifest (``<dst>/manifest.json``): what went in, what came out, with which options.

Written last and atomically. It is deterministic: no timestamps, inputs and shards in sorted order,
statistics merged in graph-id order, so identical builds give identical bytes.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ..convert import FEATURE_STATS_COLUMNS, BuildOptions, unpack_floats
from ..faults import checkpoint
from .schema import SCHEMA_VERSION

MANIFEST = "manifest.json"
QUARANTINE = "quarantine.jsonl"
COUNT_FIELDS = ("graphs", "configs", "unique_configs", "nodes_before", "nodes_after",
                "edges_before", "edges_after", "bytes_in", "bytes_out", "anomalies")


def library_versions() -> dict[str, str]:
    import numba
    import pyarrow

    from .. import __version__

    return {"tpuprep": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "pyarrow": pyarrow.__version__}


def write_json_atomic(path: Path, obj, durable: bool = True, indent: int | None = 1) -> None:
    """Write JSON to a temporary name in the same folder, then rename over ``path``.

    ``durable`` also fsyncs before the rename (the manifest); staging sidecars skip it: after a power
    loss an unreadable sidecar only means that batch is converted again.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=indent, sort_keys=False, allow_nan=False)
        fh.write("\n")
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    if path.name == MANIFEST:
        checkpoint("manifest")
    os.replace(tmp, path)


def merge_moments(parts: Iterable[dict]) -> dict | None:
    """Merge per-graph (count, mean, M2) moments (Chan et al.) in the given order.

    Returns {"count", "mean" (134,), "std" (134,)} (population std) or None when empty.
    """
    count = 0
    mean = np.zeros(FEATURE_STATS_COLUMNS)
    m2 = np.zeros(FEATURE_STATS_COLUMNS)
    for p in parts:
        nb = p["count"]
        if nb == 0:
            continue
        mb = unpack_floats(p["mean"])
        delta = mb - mean
        total = count + nb
        mean = mean + delta * (nb / total)
        m2 = m2 + unpack_floats(p["m2"]) + delta**2 * (count * nb / total)
        count = total
    if count == 0:
        return None
    return {"count": count, "mean": mean.tolist(), "std": np.sqrt(m2 / count).tolist()}


def _empty_counts() -> dict[str, int]:
    return dict.fromkeys(COUNT_FIELDS, 0)


def build_manifest(
    opts: BuildOptions,
    records: Sequence[dict],
    shards: Sequence[dict],
) -> dict:
    """Assemble the manifest from per-input records (sorted by path) and shard records."""
    collections: dict[str, dict] = {}
    for r in records:
        if r["status"] != "ok":
            continue
        coll = collections.setdefault(r["collection"], {"kind": r["kind"], "path": r["collection"].replace(":", "/"),
                                                        "splits": {}, "totals": _empty_counts()})
        split = coll["splits"].setdefault(r["split"], _empty_counts())
        c = r["counts"]
        for target in (split, coll["totals"]):
            target["graphs"] += 1
            for k in COUNT_FIELDS[1:]:
                if k != "bytes_out":
                    target[k] += c[k]
    for s in shards:
        coll = collections[s["collection"]]
        coll["splits"][s["split"]]["bytes_out"] += s["bytes"]
        coll["totals"]["bytes_out"] += s["bytes"]
    for cid, coll in collections.items():
        train = sorted((r["graph_id"], r["moments"]) for r in records
                       if r["status"] == "ok" and r["collection"] == cid and r["split"] == "train")
        train = [moments for _, moments in train]
        coll["node_feat_stats"] = merge_moments(train)
        coll["splits"] = dict(sorted(coll["splits"].items()))
    quarantine = [{"file": r["path"], "key": r.get("key"), "error": r["error"]}
                  for r in records if r["status"] != "ok"]
    inputs = []
    for r in records:
        entry = {"path": r["path"], "bytes": r["bytes"], "sha256": r.get("sha256"), "status": r["status"]}
        if r["status"] == "ok":
            entry |= {"graph_id": r["graph_id"], "counts": {k: r["counts"][k] for k in COUNT_FIELDS if k not in ("graphs", "bytes_out")}}
            if r.get("warnings"):
                entry["warnings"] = r["warnings"]
        inputs.append(entry)
    return {
        "format": "tpuprep-shards",
        "schema_version": SCHEMA_VERSION,
        "versions": library_versions(),
        "options": opts.to_dict(),
        "collections": dict(sorted(collections.items())),
        "inputs": inputs,
        "shards": list(shards),
        "quarantine": quarantine,
    }


def read_manifest(root: str | Path) -> dict:
    with open(Path(root) / MANIFEST) as fh:
        return json.load(fh)
