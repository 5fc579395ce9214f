"""The names of everything a build writes under ``<dst>``: the one module to change the output layout.

```
<dst>/manifest.json                 MANIFEST, written last
<dst>/README.md                     CARD, the dataset card
<dst>/quarantine.jsonl              QUARANTINE
<dst>/<collection path>/<table>/<split>-0000i-of-0000N.parquet     shard_relpath()
<dst>/.tpuprep/                     STAGING: per-batch parts and sidecars while a build runs (part_name)
```
"""

from __future__ import annotations

import hashlib
import re

from ..tpugraphs import SAFE_STEM, collection_path

MANIFEST = "manifest.json"
CARD = "README.md"
CARD_HEADING = "# TpuGraphs, preprocessed by tpuprep"
"""The first line after the card's YAML front matter, in every card tpuprep has written: how a
``README.md`` in ``<dst>`` is told to be tpuprep's (``destination.is_tpuprep_card``), never replaced
or deleted otherwise."""
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


PART_STEM_CHARS = 100
"""Input stems up to this long name their batch's parts and sidecar as they are; longer ones are cut
(``part_name``), so no name tpuprep makes grows with an input's name (a stem may have 255 characters)."""


def part_name(input_relpath: str) -> str:
    """The name (without suffix) of the parts and sidecar of the batch whose first input is
    ``input_relpath``: its stem when that has at most ``PART_STEM_CHARS`` characters (the names of every
    earlier tpuprep, so an interrupted build still resumes), else the first ``PART_STEM_CHARS`` characters,
    a dot and 16 hex digits of the relpath's sha256 — at most 117 characters, longer than any kept stem,
    so the two forms never meet. With the longest suffix and a temporary name's it stays far below the
    255 bytes a file name may have."""
    stem = input_relpath.rsplit("/", 1)[-1].removesuffix(".npz")
    if len(stem) <= PART_STEM_CHARS:
        return stem
    digest = hashlib.sha256(input_relpath.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{stem[:PART_STEM_CHARS]}.{digest}"


def part_relpaths(input_relpath: str, name: str) -> tuple[str, str]:
    """(graphs part, configs part) of the batch whose first input is ``input_relpath``, relative to
    the staging folder: ``parts/<input folder>/<name>.graphs.arrow`` and ``….configs.parquet``."""
    folder = "parts/" + input_relpath.rsplit("/", 1)[0]
    return f"{folder}/{name}.graphs.arrow", f"{folder}/{name}.configs.parquet"


def sidecar_relpath(input_relpath: str) -> str:
    """The JSON sidecar of the batch whose first input is ``input_relpath`` (relative to staging):
    ``parts/<input folder>/<part_name>.json``."""
    return "parts/" + input_relpath.rsplit("/", 1)[0] + "/" + part_name(input_relpath) + ".json"
