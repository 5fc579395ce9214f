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

from ..io.files import TEMPORARY
from ..tpugraphs import KINDS, collection_path

MANIFEST = "manifest.json"
CARD = "README.md"
QUARANTINE = "quarantine.jsonl"
STAGING = ".tpuprep"
TABLES = ("graphs", "configs")
"""The two tables of every collection: one row per graph, one row per unique config."""

OUTPUT_ENTRIES = (MANIFEST, QUARANTINE, CARD, *KINDS, STAGING)
"""The top-level entries of ``<dst>`` that tpuprep writes (besides temporaries, ``TEMPORARY``)."""


def is_output_entry(name: str) -> bool:
    """Is a top-level name of ``<dst>`` one that a build writes (or a temporary of one)?"""
    return name in OUTPUT_ENTRIES or bool(TEMPORARY.fullmatch(name))


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
