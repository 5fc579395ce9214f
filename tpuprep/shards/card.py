"""The dataset card ``<dst>/README.md``, following the HuggingFace dataset-card conventions.

The YAML front matter declares one *config* per (collection, table) — e.g. ``layout_xla_random_graphs``,
``tile_xla_configs`` — with its ``data_files`` per split, and ``dataset_info`` with every config's
``features`` (derived from ``schemas/*.json``) and per-split row counts. So a shard folder can be pushed
to a hub as is, and ``datasets.load_dataset(<shard folder>, "<config>")`` works on it locally.

Split names: HuggingFace's convention is ``validation``; TpuGraphs (and the shard file names and the
``split`` column) say ``valid``. The card maps ``valid`` → ``validation`` (``train`` and ``test`` are
unchanged), which is also the name ``datasets`` gives a ``valid-*`` file when it guesses splits itself.

The YAML is written by a tiny emitter here (no PyYAML needed) and is deterministic.
"""

from __future__ import annotations

import json
import os
from typing import Any

import yaml

from ..io.storage import resolve
from ..io.store import Store
from ..tpugraphs import SPLITS
from .layout import CARD, CARD_HEADING
from .schema import split_type, table_schema
from .schema_doc import render_table

HF_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
"""tpuprep split (folder and file name) → HuggingFace split name."""



# --------------------------------------------------------------------------- features


def _hf_inner(text: str) -> Any:
    """The YAML form of a nested HF feature (``"int32"``, ``{"list": ..., "length": n}``)."""
    kind, inner, size = split_type(text)
    if kind == "fixed":
        return {"list": _hf_inner(inner), "length": size}
    if kind == "list":
        return {"list": _hf_inner(inner)}
    return inner


def hf_feature(name: str, type_text: str) -> dict[str, Any]:
    """One column as an entry of HF ``dataset_info.features`` (the ``datasets`` ≥ 4 YAML form)."""
    inner = _hf_inner(type_text)
    if isinstance(inner, str):
        return {"name": name, "dtype": inner}
    return {"name": name, **inner}


def hf_features(table: str) -> list[dict[str, Any]]:
    """The HF ``features`` list of a table, in column order."""
    return [hf_feature(c["name"], c["type"]) for c in table_schema(table).columns]


def config_name(collection: str, table: str) -> str:
    """``config_name("layout:xla:random", "graphs") == "layout_xla_random_graphs"``."""
    return f"{collection.replace(':', '_')}_{table}"


def _splits(coll: dict) -> list[str]:
    return sorted(coll["splits"], key=lambda s: (SPLITS.index(s) if s in SPLITS else 99, s))


def _uncompressed_bytes(root: Store, rel: str) -> int:
    import pyarrow.parquet as pq

    with root.open(rel) as fh:
        meta = pq.ParquetFile(fh).metadata
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def hf_metadata(manifest: dict, root: Store | str | os.PathLike | None = None) -> dict[str, Any]:
    """The card's ``configs`` and ``dataset_info`` (HF conventions) for the shards of a manifest.

    ``dataset_info`` gives each config's features and, per split, ``num_examples`` (rows; ``datasets``
    checks it when loading), ``num_bytes`` (informational: the uncompressed data bytes of the Parquet footers
    under ``root``, or the file bytes when ``root`` is None; ``datasets``' own Arrow size differs and is not
    checked) and each config's ``download_size`` (file bytes).
    """
    root = root if root is None or isinstance(root, Store) else resolve(root)
    rows: dict[tuple[str, str, str], int] = {}
    data_bytes: dict[tuple[str, str, str], int] = {}
    files: dict[tuple[str, str], int] = {}
    for shard in manifest["shards"]:
        table = shard["table"].split("_", 1)[1]
        key = (shard["collection"], table, shard["split"])
        rows[key] = rows.get(key, 0) + shard["rows"]
        size = shard["bytes"] if root is None else _uncompressed_bytes(root, shard["path"])
        data_bytes[key] = data_bytes.get(key, 0) + size
        files[(shard["collection"], table)] = files.get((shard["collection"], table), 0) + shard["bytes"]
    configs, infos = [], []
    for cid, coll in manifest["collections"].items():
        for table in ("graphs", "configs"):
            splits = _splits(coll)
            name = config_name(cid, table)
            configs.append({"config_name": name, **({"default": True} if not configs else {}), "data_files": [
                {"split": HF_SPLITS.get(s, s), "path": f"{coll['path']}/{table}/{s}-*.parquet"} for s in splits]})
            split_info = [{"name": HF_SPLITS.get(s, s), "num_bytes": data_bytes.get((cid, table, s), 0),
                           "num_examples": rows.get((cid, table, s), 0)} for s in splits]
            infos.append({"config_name": name, "features": hf_features(f"{coll['kind']}_{table}"),
                          "splits": split_info, "download_size": files.get((cid, table), 0),
                          "dataset_size": sum(s["num_bytes"] for s in split_info)})
    return {"configs": configs, "dataset_info": infos}


def _size_category(n: int) -> str:
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
              (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B")]
    return next((label for bound, label in bounds if n < bound), "n>1B")


# --------------------------------------------------------------------------- card


def render_card(manifest: dict, root: Store | str | os.PathLike | None = None) -> str:
    """The card's Markdown text: YAML front matter (HF conventions) + a human description.

    ``root`` is the shard folder (for the uncompressed sizes in ``dataset_info``); optional.
    """
    meta = hf_metadata(manifest, root)
    total_rows = sum(s["rows"] for s in manifest["shards"])
    front = {
        "license": "other",
        "pretty_name": "TpuGraphs (tpuprep shards)",
        "task_categories": ["graph-ml"],
        "tags": ["tpugraphs", "learned-cost-model", "xla", "tpuprep"],
        "size_categories": [_size_category(total_rows)],
        **meta,
    }
    front_matter = yaml.safe_dump(front, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000)
    lines = ["---", front_matter.rstrip("\n"), "---", "",
             CARD_HEADING, "",
             f"Schema version {manifest['schema_version']}, built by tpuprep {manifest['versions']['tpuprep']} "
             f"with options `{json.dumps(manifest['options'], sort_keys=True)}`. "
             "`manifest.json` beside this card lists every input and shard with its sha256.", "",
             "| collection | split | graphs | configs | unique configs | nodes before → after | edges before → after |",
             "|---|---|---|---|---|---|---|"]
    kinds: set[str] = set()
    for cid, coll in manifest["collections"].items():
        kinds.add(coll["kind"])
        for split in _splits(coll):
            c = coll["splits"][split]
            lines.append(f"| {cid} | {split} | {c['graphs']} | {c['configs']} | {c['unique_configs']} | "
                         f"{c['nodes_before']} → {c['nodes_after']} | {c['edges_before']} → {c['edges_after']} |")
    example = meta["configs"][0]["config_name"] if meta["configs"] else "layout_xla_random_graphs"
    lines += [
        "", "## Configs and splits", "",
        "Each (collection, table) is a config named `<collection with _>_<graphs|configs>`, e.g. "
        f"`{example}`. Split names follow the HuggingFace convention: the TpuGraphs split `valid` "
        "(file names `valid-*.parquet`, the `split` column) is the split `validation` here; `train` and "
        "`test` keep their names. Test graphs have null runtimes. "
        f"`load_dataset` without a config name loads the default config, `{example}`.", "",
        "## Loading", "",
        f"- HuggingFace: `datasets.load_dataset(\"<this folder or repo>\", \"{example}\", split=\"train\")` "
        "(`datasets` ≥ 4). Its NumPy format upcasts integer lists to int64 (cast back with the features) and "
        "returns a binary column as fixed-width bytes whose elements lose trailing zero bytes (view the "
        "array's buffer instead).",
        "- tpuprep: `tpuprep.open_dataset(\"<this folder>\").load_graph(graph_id)`.",
        "- Without tpuprep: pyarrow, polars, DuckDB, PyTorch and JAX loaders are in tpuprep's `docs/readers.md`; "
        "filter on `graph_id` (row-group statistics make that read only the graph's row groups).",
        "- Layout configs are stored as base-7 codes (column `codes`, described below): value = "
        "(code // 7**i) % 7 - 1 for slot i of each 6-slot block t (slots 6t..6t+5, first slot least significant). "
        "A config's codes value holds its int32 codes in byte planes (byte 0 of every code, then byte 1, ...). "
        "Configurable nodes equal in every config of a graph share one stored column: a config's (nc, 3) codes "
        "are `frombuffer(codes, 'u1').reshape(4, -1).T.copy().view('<i4').reshape(-1, 3)[config_node_tie]` "
        "(`config_node_tie` from the graphs row).",
        "- Sampled reads: a layout graph's configs are cut into row groups of ≈ 32 KiB of codes (at least 64 "
        "configs, config_id order), so filtering on `graph_id` and `config_id IN (...)` decompresses only the "
        "row groups holding the sampled configs (`Dataset.sample_configs` in tpuprep).",
        "- Data quality: `runtime_spread` (per unique config: largest − smallest runtime of its duplicate group) "
        "and, per graph, `num_duplicate_groups` / `num_noisy_groups` (groups whose runtimes disagree by > 1 %).",
        "", "## Columns", ""]
    for kind in sorted(kinds):
        lines += [render_table(f"{kind}_graphs"), render_table(f"{kind}_configs")]
    if manifest["quarantine"]:
        lines += ["## Quarantined inputs", ""] + [f"- `{q['file']}`: {q['error']}" for q in manifest["quarantine"]]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_card(dst: Store, manifest: dict) -> None:
    """Write ``README.md`` under ``dst`` whole (a temporary renamed over it locally, one object remotely)."""
    dst.write_bytes(CARD, render_card(manifest, dst).encode("utf-8"))
