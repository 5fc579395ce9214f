"""The TpuGraphs dataset's vocabulary, in one place: collections, splits, graph ids and the paths they
map to, the node_feat columns and opcodes tpuprep relies on, and the grouped fold of a graph.

Facts from ``TPUGRAPHS.md`` (the official tree and feature layout). Every other module names these
things through this module; nothing here imports the rest of tpuprep.

Tree: ``tile/xla/<split>/<stem>.npz`` and ``layout/<xla|nlp>/<default|random>/<split>/<stem>.npz``.
Graph id: ``<collection id>:<stem>``, e.g. ``layout:xla:random:alexnet_train_batch_32`` (the Kaggle ``ID``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

# --------------------------------------------------------------------------- collections and splits

SPLITS = ("train", "valid", "test")
"""Split folder names, in their natural order."""
KINDS = ("layout", "tile")
COLLECTIONS = (
    "layout:nlp:default",
    "layout:nlp:random",
    "layout:xla:default",
    "layout:xla:random",
    "tile:xla",
)
"""Every collection id, sorted."""
SAFE_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+\-]{0,254}")
"""A file stem that is safe as a graph id and as a path component (no separators, no leading dot)."""


def collection_kind(collection: str) -> str:
    """``"layout"`` or ``"tile"``: the first field of a collection id (or of a graph id)."""
    return collection.split(":", 1)[0]


def collection_path(collection: str) -> str:
    """The collection's folder in the tree: ``layout:xla:random`` → ``layout/xla/random``."""
    return collection.replace(":", "/")


def graph_id_of(collection: str, stem: str) -> str:
    """``<collection>:<stem>``."""
    return f"{collection}:{stem}"


def is_safe_stem(stem: str) -> bool:
    """True when ``stem`` can be a graph id's last field and a file name (see ``SAFE_STEM``)."""
    return bool(SAFE_STEM.fullmatch(stem)) and not stem.endswith(".")


def split_graph_id(gid: object) -> tuple[str, str]:
    """``(collection, stem)`` of a graph id ``<collection>:<stem>``, or ``ValueError`` saying what is wrong.

    The one rule for every place a graph id becomes a path: the collection must be one of
    ``COLLECTIONS`` and the stem a safe file name (``is_safe_stem``), so no graph id can hold ``/``,
    ``..`` or a drive.
    """
    if not isinstance(gid, str) or ":" not in gid:
        raise ValueError(f"graph id {gid!r} is not '<collection>:<stem>'")
    collection, stem = gid.rsplit(":", 1)
    if collection not in COLLECTIONS:
        raise ValueError(f"graph id {gid!r} has an unknown collection {collection!r} "
                         f"(known: {', '.join(COLLECTIONS)})")
    if not is_safe_stem(stem):
        raise ValueError(f"graph id {gid!r}: {stem!r} is not a safe file name "
                         "(letters, digits and . _ + - only)")
    return collection, stem


def npz_relpath(collection: str, split: str, stem: str) -> str:
    """``layout/xla/random/train/<stem>.npz``: where a graph's file sits in the TpuGraphs tree."""
    return f"{collection_path(collection)}/{split}/{stem}.npz"


def classify(parts: Sequence[str]) -> tuple[str, str, str, str]:
    """(kind, collection, split, canonical relpath) from the components of a file's path (the last
    being the file name); ``ValueError`` saying why when the path is not a place in the tree."""
    split = parts[-2] if len(parts) >= 2 else ""
    if split not in SPLITS:
        raise ValueError(f"its folder {split!r} is not a split ({', '.join(SPLITS)})")
    if len(parts) >= 5 and parts[-5] == "layout" and parts[-4] in ("xla", "nlp") and parts[-3] in ("default", "random"):
        return "layout", f"layout:{parts[-4]}:{parts[-3]}", split, "/".join(parts[-5:])
    if len(parts) >= 4 and parts[-4] == "tile" and parts[-3] == "xla":
        return "tile", "tile:xla", split, "/".join(parts[-4:])
    raise ValueError("the path does not end in tile/xla/<split>/ or layout/<xla|nlp>/<default|random>/<split>/")


def selected(collection: str, wanted: Iterable[str] | None) -> bool:
    """Does ``collection`` match one of ``wanted`` (ids or prefixes such as ``layout:xla``; all if empty)?"""
    if not wanted:
        return True
    return any(collection == w or collection.startswith(w.rstrip(":") + ":") for w in wanted)


def unselected(wanted: Iterable[str] | None) -> list[str]:
    """The entries of ``wanted`` that select no collection (neither an id nor a prefix of one)."""
    return [w for w in wanted or () if not any(selected(c, [w]) for c in COLLECTIONS)]


def config_rows_within(num_config_nodes: int, max_bytes: int) -> int:
    """Layout configs whose decoded values (num_config_nodes × LAYOUT_SLOTS int8 each) fit in
    ``max_bytes``; at least 1."""
    return max(1, max_bytes // max(1, num_config_nodes * LAYOUT_SLOTS))


class ConfigCounts:
    """``num_configs`` (c) and ``num_unique_configs`` (c_u) of a graph record that holds
    ``config_inverse`` (c,) and ``group_size`` (c_u,): the converter's ``ConvertedGraph`` and the
    reader's ``GraphRecord`` alike."""

    @property
    def num_configs(self) -> int:
        return int(self.config_inverse.shape[0])

    @property
    def num_unique_configs(self) -> int:
        if self.group_size is None:  # a record read with configs=False: c_u from the inverse map
            return int(self.config_inverse.max()) + 1 if len(self.config_inverse) else 0
        return int(self.group_size.shape[0])


def graph_fold(gid: str, folds: int) -> int:
    """Deterministic grouped K-fold id of a graph: sha256 of its id modulo K."""
    return int.from_bytes(hashlib.sha256(gid.encode()).digest()[:8], "big") % max(folds, 1)


# --------------------------------------------------------------------------- arrays and columns

LAYOUT_KEYS = ("edge_index", "node_feat", "node_opcode", "node_config_feat", "node_config_ids",
               "node_splits", "config_runtime")
"""The arrays of a layout file, in the order the official files store them."""
TILE_KEYS = ("node_feat", "node_opcode", "edge_index", "config_feat", "config_runtime",
             "config_runtime_normalizers")
"""The arrays of a tile file, in the order the official files store them."""

NODE_FEATURES = 140
"""node_feat columns."""
LAYOUT_SLOTS = 18
"""node_config_feat values per configurable node: 3 tensors × 6 minor-to-major slots."""
TILE_CONFIG_FEATURES = 24
"""config_feat columns of a tile config."""
FEATURE_STATS_COLUMNS = 134
"""node_feat columns covered by the feature statistics (0..133: all but the layout columns)."""

COL_TUPLE = 18
"""node_feat column: element type is tuple (one-hot)."""
COLS_SHAPE_DIMS = slice(21, 27)
"""node_feat columns: output shape dims 0..5 (0-padded)."""
COL_SHAPE_PRODUCT = 28
"""node_feat column: output shape product (1 for an empty shape)."""
COL_DIMENSIONS = 31
"""node_feat columns 31..36: the HLO ``dimensions`` attribute (0-padded, ambiguous)."""
COLS_DIMENSIONS = slice(COL_DIMENSIONS, COL_DIMENSIONS + 6)
COL_CONV_INPUT_SPATIAL = 95
"""node_feat columns 95..98: conv input spatial dims (0-padded, ambiguous)."""
COL_CONV_KERNEL_SPATIAL = 101
"""node_feat columns 101..104: conv kernel spatial dims (0-padded, ambiguous)."""
COL_LAYOUT = 134
"""node_feat columns 134..139: layout_minor_to_major of the output (0-padded, ambiguous)."""
COLS_LAYOUT = slice(COL_LAYOUT, COL_LAYOUT + 6)
_REPADDED = (*range(COL_DIMENSIONS, COL_DIMENSIONS + 6), *range(COL_CONV_INPUT_SPATIAL, COL_CONV_INPUT_SPATIAL + 4),
             *range(COL_CONV_KERNEL_SPATIAL, COL_CONV_KERNEL_SPATIAL + 4), *range(COL_LAYOUT, COL_LAYOUT + 6))
# REPADDED_COLUMNS: (20,) int64 array, the node_feat columns whose zero padding tpuprep's re-padding
# may turn into −1. Built on first use (module __getattr__ below), so that reading this vocabulary
# (e.g. ``tpuprep info``) does not import NumPy.

OPCODE_CONVOLUTION = 26
OPCODE_DOT = 34
OPCODE_RESHAPE = 75
CONFIGURABLE_OPCODES = (OPCODE_CONVOLUTION, OPCODE_DOT, OPCODE_RESHAPE)
"""The only opcodes whose nodes carry layout configurations."""

KNOWN_OPCODES = tuple(i for i in range(1, 121) if i not in (97, 101))
"""Every opcode id the featurizer gives (1..120; 97 and 101 are unused, 0 is "unknown")."""
OPCODE_BROADCAST = 13
OPCODE_REDUCE = 70
# The HLO ``dimensions`` attribute (node_feat cols 31–36): which opcodes carry how many entries,
# from what XLA's instructions write into ``HloInstructionProto.dimensions`` (docs/spec.md §2.2).
OPCODES_ONE_DIMENSION = (22, 43, 44, 48, 93, 104, 111, 112)
"""Opcodes whose ``dimensions`` is one entry: concatenate, get-dimension-size, set-dimension-size,
iota, sort, all-gather, reduce-scatter, all-gather-start."""
OPCODES_RANK_DIMENSIONS = (56, 98)
"""Opcodes whose ``dimensions`` has one entry per output dimension: map (always 0..r−1), transpose."""
OPCODES_UNDECIDED_DIMENSIONS = (6, 76)
"""Opcodes whose ``dimensions`` length the npz does not tell: all-to-all (a split dimension or none),
reverse (any subset of the dimensions)."""


def __getattr__(name: str) -> Any:
    """``REPADDED_COLUMNS`` on first use (imports NumPy then)."""
    if name == "REPADDED_COLUMNS":
        import numpy as np

        value = np.array(_REPADDED, dtype=np.int64)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
