"""The build manifest (``<dst>/manifest.json``): what went in, what came out, with which options.

Written last and atomically. It is deterministic: no timestamps, inputs and shards in sorted order,
statistics merged in graph-id order, so identical builds give identical bytes.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..faults import checkpoint
from ..io.files import write_json_atomic
from ..moments import merge_moments
from ..options import BuildOptions
from .layout import MANIFEST
from .schema import SCHEMA_VERSION

COUNT_FIELDS = ("graphs", "configs", "unique_configs", "nodes_before", "nodes_after",
                "edges_before", "edges_after", "bytes_in", "bytes_out", "anomalies")


def library_versions() -> dict[str, str]:
    import numba
    import pyarrow

    from .. import __version__

    return {"tpuprep": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "pyarrow": pyarrow.__version__}


def write_manifest(dst: Path, manifest: dict) -> None:
    """Write ``<dst>/manifest.json`` atomically and durably: the last file of a build."""
    write_json_atomic(Path(dst) / MANIFEST, manifest, before_rename=lambda: checkpoint("manifest"))


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
