"""A trained model bundled with what inference needs, saved as ``<M>.npz`` (weights) + ``<M>.json``.

The JSON holds the format tag, the collection, the architecture (:class:`ModelConfig`), the training
hyper-parameters and seed, the feature statistics (so test-time prediction never needs the train
split) and the training history; the NPZ holds one array per parameter name.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .features import PreparedGraph, clean_stats, prepare_graph, tile_config_features
from .metrics import expand_to_original
from .model import ModelConfig, Params, StaticCache, forward, init_params, static_forward

FORMAT = "tpuprep-train-model"
FORMAT_VERSION = 2  # 2: tile inputs gained the iteration-space columns (42 wide); dot work excludes batch dims


def collection_kind(collection: str) -> str:
    """"layout" for ``layout:*`` collections, "tile" for ``tile:*``."""
    kind = collection.split(":", 1)[0]
    if kind not in ("layout", "tile"):
        raise ValueError(f"unknown collection {collection!r}: expected layout:... or tile:...")
    return kind


def model_paths(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """(weights .npz, config .json) for a model path given with or without either suffix."""
    p = Path(path)
    if p.suffix in (".npz", ".json"):
        p = p.with_suffix("")
    return p.with_name(p.name + ".npz"), p.with_name(p.name + ".json")


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class Ranker:
    """Model + metadata. params: name → array; feat_mean / feat_std: cleaned (134,) float64 stats."""

    config: ModelConfig
    collection: str
    params: Params
    feat_mean: np.ndarray
    feat_std: np.ndarray
    seed: int = 0
    hyper: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def create(cls, collection: str, stats: dict[str, np.ndarray], config: ModelConfig, seed: int,
               hyper: dict[str, Any] | None = None) -> Ranker:
        """A freshly initialised model for ``collection`` with dataset stats from ``ds.stats``."""
        if collection_kind(collection) != config.kind:
            raise ValueError(f"collection {collection} needs a {collection_kind(collection)} model")
        mean, std = clean_stats(stats["node_feat_mean"], stats["node_feat_std"])
        return cls(config, collection, init_params(config, seed), mean, std, seed, dict(hyper or {}))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.config.dtype)

    def prepare(self, record: Any) -> PreparedGraph:
        """Config-independent inputs of a GraphRecord for this model."""
        return prepare_graph(record, self.config.kind, self.feat_mean, self.feat_std,
                             self.config.layers, self.dtype)

    def batch_inputs(self, record: Any, pg: PreparedGraph, rows: np.ndarray) -> np.ndarray:
        """Model input for unique-config rows of ``record`` (prepared as ``pg``): layout (k, nc, 18) int8;
        tile (k, 42) float."""
        rows = np.asarray(rows, np.int64)
        if self.config.kind == "layout":
            return np.asarray(record.node_config_feat(rows), np.int8)
        return tile_config_features(np.asarray(record.config_feat)[rows], self.dtype, pg.tile_extents)

    def static(self, pg: PreparedGraph) -> StaticCache:
        """The config-independent forward pass (reusable across batches at inference)."""
        return static_forward(self.params, pg, self.config.layers)

    def predict_unique(self, record: Any, pg: PreparedGraph | None = None, batch_size: int = 1024,
                       rows: np.ndarray | None = None) -> np.ndarray:
        """Scores float64, higher = slower, of every unique config of ``record`` (c_u,), or of ``rows``."""
        pg = pg if pg is not None else self.prepare(record)
        c_u = int(np.asarray(record.group_size).shape[0])
        want = np.arange(c_u) if rows is None else np.asarray(rows, np.int64)
        st = self.static(pg)
        out = np.empty(len(want), np.float64)
        for start in range(0, len(want), batch_size):
            part = want[start:start + batch_size]
            s, _ = forward(self.params, pg, self.batch_inputs(record, pg, part), self.config, st, keep=False)
            out[start:start + len(part)] = s
        return out

    def predict_original(self, record: Any, pg: PreparedGraph | None = None,
                         batch_size: int = 1024) -> np.ndarray:
        """Scores (c,) float64 of every ORIGINAL config (unique scores expanded via config_inverse)."""
        return expand_to_original(self.predict_unique(record, pg, batch_size), record.config_inverse)

    # ---- persistence -------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The JSON side of a saved model."""
        from tpuprep import __version__

        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "tpuprep_version": __version__,
            "collection": self.collection,
            "kind": self.config.kind,
            "model": self.config.to_dict(),
            "seed": self.seed,
            "hyper": self.hyper,
            "feature_stats": {"node_feat_mean": self.feat_mean.tolist(),
                              "node_feat_std": self.feat_std.tolist(), "columns": "0..133"},
            "params": {k: list(v.shape) for k, v in self.params.items()},
            "history": self.history,
        }

    def save(self, path: str | os.PathLike[str]) -> tuple[Path, Path]:
        """Write ``<path>.npz`` and ``<path>.json`` atomically; returns both paths."""
        npz, js = model_paths(path)
        import io

        buf = io.BytesIO()
        np.savez(buf, **self.params)
        _atomic_write(npz, buf.getvalue())
        _atomic_write(js, (json.dumps(self.to_json(), indent=1, allow_nan=True) + "\n").encode())
        return npz, js

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Ranker:
        """Load a model saved by :meth:`save` (path with or without the .npz/.json suffix)."""
        npz, js = model_paths(path)
        meta = json.loads(js.read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"{js}: not a tpuprep trainer model (format {meta.get('format')!r})")
        if int(meta.get("format_version", 0)) > FORMAT_VERSION:
            raise ValueError(f"{js}: model format version {meta['format_version']} is newer than supported")
        if int(meta.get("format_version", 0)) < FORMAT_VERSION:
            raise ValueError(f"{js}: model format version {meta.get('format_version')} was trained on inputs this "
                             f"version computes differently (format {FORMAT_VERSION}); train it again")
        config = ModelConfig(**meta["model"])
        with np.load(npz, allow_pickle=False) as z:
            params = {k: z[k].astype(config.dtype) for k in meta["params"]}
        stats = meta["feature_stats"]
        return cls(config, meta["collection"], params,
                   np.asarray(stats["node_feat_mean"], np.float64),
                   np.asarray(stats["node_feat_std"], np.float64),
                   int(meta.get("seed", 0)), dict(meta.get("hyper", {})), list(meta.get("history", [])))
