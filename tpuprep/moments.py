"""Mergeable feature statistics: per-graph (count, mean, M2) of ``node_feat[:, :134]`` in float64,
computed by each conversion task and merged in a fixed order into the manifest's train statistics.

mean and M2 travel between processes as base64 of little-endian float64: exact, and far cheaper to put
in JSON than 268 decimal numbers per graph.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

import numpy as np

from .tpugraphs import FEATURE_STATS_COLUMNS


def pack_floats(values: np.ndarray) -> str:
    """float64 array → base64 text (exact)."""
    return base64.b64encode(np.ascontiguousarray(values, "<f8").tobytes()).decode()


def unpack_floats(text: str) -> np.ndarray:
    """The inverse of ``pack_floats``."""
    return np.frombuffer(base64.b64decode(text), "<f8").astype(np.float64)


def feature_moments(node_feat: np.ndarray) -> dict:
    """{"count", "mean", "m2"} of ``node_feat[:, :134]`` ((n, 140) float32), mean and M2 packed."""
    x = node_feat[:, :FEATURE_STATS_COLUMNS].astype(np.float64)
    mean = x.mean(axis=0) if len(x) else np.zeros(FEATURE_STATS_COLUMNS)
    m2 = ((x - mean) ** 2).sum(axis=0)
    return {"count": len(x), "mean": pack_floats(mean), "m2": pack_floats(m2)}


def merge_moments(parts: Iterable[dict]) -> dict | None:
    """Merge per-graph moments (Chan et al.) in the given order.

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
