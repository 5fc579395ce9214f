"""The training-free "violation ratio" heuristic of seeds/002 (Karan et al.) §5.2, for comparison.

The paper: TPU memory is tiled in 128×8 chunks, so a tensor whose largest dimension is not on the
128-lane side pads and slows down; the violation ratio of a configuration is "the fraction of times
over all configurable nodes that the largest dimension size of the tensor is not first in the
major-to-minor ordering", and it correlates positively with runtime.

Our reading, written down because the paper leaves it open:
* only the **output** tensor of each configurable node is scored (node_feat holds the output shape,
  cols 21–26; operand shapes are not recorded per node);
* the layout is the config's output block (slots 0–5, minor-to-major); a block that is all −1 means
  "compiler default", and then the node's own layout from node_feat cols 134–139 is used;
* "aligned with the 128-side" is the **minor-most** position (slot 0 of minor_to_major), which is the
  lane dimension of a TPU tile; ``position="major"`` scores the major-most position instead, the
  literal "first in major-to-minor";
* nodes of rank < 2, or without a usable layout, are not counted; a config with no counted node
  scores 0. The score is the ratio itself (higher = predicted slower), so ties are common and τ-b
  handles them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tpugraphs import COLS_LAYOUT, COLS_SHAPE_DIMS
from .features import output_rank, violation_ratio_of

POSITIONS = ("minor", "major")


def node_info(record: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per configurable node of a layout GraphRecord (its structure is enough): largest output dim
    (nc,) int64, rank (nc,) int64, default layout (nc, 6) int64."""
    cfg = np.asarray(record.node_config_ids, np.int64)
    nf = np.asarray(record.node_feat)[cfg].astype(np.float64)
    dims = nf[:, COLS_SHAPE_DIMS]
    largest = dims.argmax(axis=1)
    rank = output_rank(dims)
    default = np.rint(nf[:, COLS_LAYOUT]).astype(np.int64)
    return largest, rank, default


def violation_ratio(record: Any, rows: np.ndarray | None = None, position: str = "minor",
                    chunk: int = 4096) -> np.ndarray:
    """Violation ratio (k,) float64 of the unique-config ``rows`` of a layout GraphRecord (all if None)."""
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {POSITIONS}")
    c_u = int(np.asarray(record.group_size).shape[0])
    rows = np.arange(c_u) if rows is None else np.asarray(rows, np.int64)
    info = node_info(record)
    out = np.zeros(len(rows), np.float64)
    for start in range(0, len(rows), chunk):
        out[start:start + chunk] = violation_of_configs(
            info, record.node_config_feat(rows[start:start + chunk]), position)
    return out


def violation_of_configs(info: tuple[np.ndarray, np.ndarray, np.ndarray], values: np.ndarray,
                         position: str = "minor") -> np.ndarray:
    """Violation ratio (k,) float64 of decoded configs ``values`` (k, nc, 18) int8 of a graph whose
    :func:`node_info` is ``info`` (configs streamed in blocks get the same numbers as a whole record)."""
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {POSITIONS}")
    largest, rank, default = info
    vals = np.asarray(values, np.int64)[:, :, :6]
    if len(largest) == 0:
        return np.zeros(len(vals), np.float64)
    lay = np.where((vals[:, :, :1] >= 0), vals, default[None])  # (k, nc, 6)
    n_set = (lay >= 0).sum(axis=2)  # (k, nc)
    if position == "minor":
        pos = lay[:, :, 0]
    else:
        idx = np.maximum(n_set - 1, 0)
        pos = np.take_along_axis(lay, idx[:, :, None], axis=2)[:, :, 0]
    return violation_ratio_of(pos, largest, rank)


def modal_work_share(record: Any, chunk: int = 4096) -> np.ndarray:
    """(c_u,) float64 per unique config of a layout GraphRecord: the share of its configurable nodes'
    √(multiply-adds) whose output block left the node's modal block — the model's third config summary
    (``features.config_summary``) on its own, with no training. Higher = predicted slower.

    Reported next to the model by ``benchmarks.training`` to show what the hand-made features alone rank.
    """
    from .features import config_summary, derived_config_features, prepare_graph

    pg = prepare_graph(record, "layout", np.zeros(134), np.ones(134), 0, np.float64)
    c_u = int(np.asarray(record.group_size).shape[0])
    out = np.zeros(c_u, np.float64)
    for start in range(0, c_u, chunk):
        vals = np.asarray(record.node_config_feat(np.arange(start, min(c_u, start + chunk))))
        feats, viol = derived_config_features(pg, vals, np.float64)
        out[start:start + chunk] = config_summary(pg, feats, viol)[:, 2]
    return out
