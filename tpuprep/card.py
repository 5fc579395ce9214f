"""The dataset card ``<dst>/README.md``: HuggingFace card conventions, columns from ``schemas/``."""

from __future__ import annotations

import os
from pathlib import Path

from .schema import table_schema


def _configs_yaml(manifest: dict) -> list[str]:
    lines = ["configs:"]
    for cid, coll in manifest["collections"].items():
        for table in ("graphs", "configs"):
            lines.append(f"- config_name: {cid.replace(':', '_')}_{table}")
            lines.append("  data_files:")
            for split in coll["splits"]:
                lines.append(f"  - split: {'validation' if split == 'valid' else split}")
                lines.append(f"    path: {coll['path']}/{table}/{split}-*.parquet")
    return lines


def _column_table(name: str) -> list[str]:
    ts = table_schema(name)
    rows = [f"### `{name}`", "", ts.description, "", "| column | type | nullable | unit | meaning |",
            "|---|---|---|---|---|"]
    for c in ts.columns:
        rows.append(f"| `{c['name']}` | `{c['type']}` | {'yes' if c['nullable'] else 'no'} | "
                    f"{c.get('unit') or ''} | {c['description']} |")
    return [*rows, ""]


def render_card(manifest: dict) -> str:
    """The card's Markdown text (YAML front matter + human description)."""
    lines = ["---", "license: other", "pretty_name: TpuGraphs (tpuprep shards)", "tags:",
             "- tpugraphs", "- learned-cost-model", *_configs_yaml(manifest), "---", "",
             "# TpuGraphs, preprocessed by tpuprep", "",
             f"Schema version {manifest['schema_version']}, built by tpuprep "
             f"{manifest['versions']['tpuprep']} with options `{manifest['options']}`.", "",
             "| collection | split | graphs | configs | unique configs | nodes before → after | edges before → after |",
             "|---|---|---|---|---|---|---|"]
    kinds = set()
    for cid, coll in manifest["collections"].items():
        kinds.add(coll["kind"])
        for split, c in coll["splits"].items():
            lines.append(f"| {cid} | {split} | {c['graphs']} | {c['configs']} | {c['unique_configs']} | "
                         f"{c['nodes_before']} → {c['nodes_after']} | {c['edges_before']} → {c['edges_after']} |")
    lines += ["", "Read with `tpuprep.open_dataset(path)`, or directly with pyarrow, polars, DuckDB or "
              "`datasets.load_dataset(\"parquet\", ...)`. Layout configs store base-7 codes: "
              "value = (code // 7**i) % 7 - 1 for slot i of each 6-slot block.", "", "## Columns", ""]
    for kind in sorted(kinds):
        lines += _column_table(f"{kind}_graphs") + _column_table(f"{kind}_configs")
    if manifest["quarantine"]:
        lines += ["## Quarantined inputs", ""] + [f"- `{q['file']}`: {q['error']}" for q in manifest["quarantine"]]
    return "\n".join(lines) + "\n"


def write_card(dst: Path, manifest: dict) -> None:
    tmp = dst / ".README.md.tmp"
    tmp.write_text(render_card(manifest))
    os.replace(tmp, dst / "README.md")
