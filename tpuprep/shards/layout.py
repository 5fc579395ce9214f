"""The names of everything a build writes under ``<dst>``: the one module to change the output layout.

```
<dst>/manifest.json                 MANIFEST, written last
<dst>/README.md                     CARD, the dataset card
<dst>/quarantine.jsonl              QUARANTINE
<dst>/<collection path>/<table>/<split>-0000i-of-0000N.parquet     shard_relpath()
<dst>/.tpuprep/                     STAGING: per-batch parts and sidecars while a build runs
```
"""

from __future__ import annotations

import re

from ..tpugraphs import SAFE_STEM, collection_path

MANIFEST = "manifest.json"
CARD = "README.md"
QUARANTINE = "quarantine.jsonl"
STAGING = ".tpuprep"
LOCK = ".tpuprep.lock"
"""Held (flock) by the build that writes ``<dst>``; removed when it ends."""
TABLES = ("graphs", "configs")
"""The two tables of every collection: one row per graph, one row per unique config."""

SHARD_NAME = re.compile(r"(train|valid|test)-\d{5,}-of-\d{5,}\.parquet")
"""File names of shards (``shard_relpath``)."""
PART_NAME = re.compile(SAFE_STEM.pattern + r"\.(?:graphs\.arrow|configs\.parquet|json)")
"""File names in the staging folder's part folders (``part_relpaths``, ``sidecar_relpath``)."""


def shard_relpath(collection: str, table: str, split: str, index: int, count: int) -> str:
    """``layout/xla/random/configs/train-00001-of-00003.parquet`` (relative to ``<dst>``)."""
    return f"{collection_path(collection)}/{table}/{split}-{index:05d}-of-{count:05d}.parquet"


def part_relpaths(input_relpath: str, name: str) -> tuple[str, str]:
    """(graphs part, configs part) of the batch whose first input is ``input_relpath``, relative to
    the staging folder: ``parts/<input folder>/<name>.graphs.arrow`` and ``….configs.parquet``."""
    folder = "parts/" + input_relpath.rsplit("/", 1)[0]
    return f"{folder}/{name}.graphs.arrow", f"{folder}/{name}.configs.parquet"


def sidecar_relpath(input_relpath: str) -> str:
    """The JSON sidecar of the batch whose first input is ``input_relpath`` (relative to staging)."""
    return "parts/" + input_relpath[: -len(".npz")] + ".json"
