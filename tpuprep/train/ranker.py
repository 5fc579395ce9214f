"""A trained model bundled with what inference needs, saved as ``<M>.npz`` (weights) + ``<M>.json``.

The JSON holds the format tag, the collection, the architecture (:class:`ModelConfig`), the training
hyper-parameters and seed, the feature statistics (so test-time prediction never needs the train
split) and the training history; the NPZ holds one array per parameter name.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FatalError
from ..io.files import write_bytes_atomic
from .features import ConfigDigest, PreparedGraph, clean_stats, prepare_graph, tile_config_features
from .metrics import expand_to_original
from .model import ModelConfig, Params, StaticCache, forward, init_params, static_forward

FORMAT = "tpuprep-train-model"
FORMAT_VERSION = 3  # 2: tile inputs gained the iteration-space columns (42 wide); dot work excludes batch dims;
# 3: layout gained the operand-block and compute-share inputs (9 derived, 5 summaries) and the prior term
N_STATS = 134  # node_feat columns covered by the saved feature statistics
JSON_KEYS = ("format", "format_version", "tpuprep_version", "collection", "kind", "model", "seed",
             "hyper", "feature_stats", "params", "history")
REQUIRED_JSON_KEYS = ("format", "format_version", "collection", "model", "feature_stats", "params")


class BadModel(FatalError, ValueError):
    """A saved model cannot be used (missing, truncated, damaged, unknown keys, wrong shapes, non-finite
    weights). ``str()`` is the one line shown to the user: the file, the key where known, the problem."""

    def __init__(self, path: str | os.PathLike[str], key: str | None, problem: str):
        where = f"{path} [{key}]" if key else str(path)
        super().__init__(f"{where}: {problem}")


class BadScores(FatalError, ValueError):
    """A model gave non-finite scores (NaN or inf): any order built from them would be arbitrary."""


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
    source: str | None = field(default=None, compare=False, repr=False)  # the path it was loaded from

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

    def prepare(self, record: Any, digest: ConfigDigest | None = None) -> PreparedGraph:
        """Config-independent inputs of a GraphRecord for this model (a structure read with
        ``configs=False`` needs the ``digest`` of its configs, ``stream.config_digest``)."""
        return prepare_graph(record, self.config.kind, self.feat_mean, self.feat_std,
                             self.config.layers, self.dtype, digest)

    def sample_inputs(self, pg: PreparedGraph, sample: Any) -> np.ndarray:
        """Model input for the configs of a ConfigSample (``ds.sample_configs``, a sampler batch, a
        block of ``ds.iter_config_blocks``): layout (k, nc, 18) int8; tile (k, 42) float."""
        if self.config.kind == "layout":
            return np.asarray(sample.node_config_feat, np.int8)
        return tile_config_features(np.asarray(sample.config_feat), self.dtype, pg.tile_extents)

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

    def check_finite(self, scores: np.ndarray, graph_id: str) -> np.ndarray:
        """``scores`` unchanged if every one is finite; else :class:`BadScores` naming model and graph."""
        bad = int(np.size(scores) - np.isfinite(scores).sum())
        if bad:
            raise BadScores(f"model {self.source or self.collection} gave {bad} non-finite scores "
                            f"(NaN or inf) of {np.size(scores)} on graph {graph_id}; its weights are "
                            "out of range for this graph, so no order can be trusted")
        return scores

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
        npz.parent.mkdir(parents=True, exist_ok=True)  # written like every tpuprep file: mode from the umask
        write_bytes_atomic(npz, buf.getvalue())
        write_bytes_atomic(js, (json.dumps(self.to_json(), indent=1, allow_nan=True) + "\n").encode())
        return npz, js

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Ranker:
        """Load a model saved by :meth:`save` (path with or without the .npz/.json suffix).

        Raises :class:`BadModel` (one line: file, key, problem) for a missing, truncated or damaged
        file, an unknown or missing key, a foreign format or version, weights whose names or shapes do
        not fit the architecture, and non-finite weights or feature statistics.
        """
        npz, js = model_paths(path)
        meta = _read_meta(js)
        config = _model_config(js, meta)
        collection = meta["collection"]
        try:
            kind = collection_kind(str(collection))
        except ValueError as e:
            raise BadModel(js, "collection", str(e)) from None
        if kind != config.kind or meta.get("kind", kind) != kind:
            raise BadModel(js, "collection", f"{collection} is a {kind} collection but the model is "
                           f"kind {config.kind!r} (kind {meta.get('kind')!r})")
        mean, std = _feature_stats(js, meta["feature_stats"])
        params = _read_params(npz, js, meta["params"], config)
        seed, hyper, history = meta.get("seed", 0), meta.get("hyper", {}), meta.get("history", [])
        if not isinstance(seed, int) or not isinstance(hyper, dict) or not isinstance(history, list):
            raise BadModel(js, None, "seed must be an integer, hyper an object and history a list")
        return cls(config, str(collection), params, mean, std, seed, dict(hyper), list(history),
                   source=str(npz.with_suffix("")))


def _read_meta(js: Path) -> dict[str, Any]:
    """The JSON side of a saved model, checked for format, version and keys."""
    try:
        text = js.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadModel(js, None, "no such file (a model is <M>.json + <M>.npz written by "
                       "`tpuprep train`)") from None
    except UnicodeDecodeError:
        raise BadModel(js, None, "not UTF-8 text; not a tpuprep model") from None
    except OSError as e:
        raise BadModel(js, None, f"cannot read: {e.strerror or e}") from None
    try:
        meta = json.loads(text)
    except ValueError as e:
        raise BadModel(js, None, f"not valid JSON ({getattr(e, 'msg', e)} at line "
                       f"{getattr(e, 'lineno', '?')}); truncated or damaged") from None
    if not isinstance(meta, dict):
        raise BadModel(js, None, f"expected a JSON object, found {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise BadModel(js, "format", f"not a tpuprep trainer model (format {meta.get('format')!r})")
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise BadModel(js, "format_version", f"{version!r} is not an integer")
    if version > FORMAT_VERSION:
        raise BadModel(js, "format_version", f"model format version {version} is newer than supported "
                       f"({FORMAT_VERSION}); upgrade tpuprep")
    if version < FORMAT_VERSION:
        raise BadModel(js, "format_version", f"model format version {version} was trained on inputs "
                       f"this version computes differently (format {FORMAT_VERSION}); train it again")
    unknown = sorted(set(meta) - set(JSON_KEYS))
    if unknown:
        raise BadModel(js, unknown[0], f"unknown key (format {FORMAT_VERSION} has only "
                       f"{', '.join(JSON_KEYS)}); not written by this tpuprep")
    missing = [k for k in REQUIRED_JSON_KEYS if k not in meta]
    if missing:
        raise BadModel(js, missing[0], "required key is missing")
    return meta


def _model_config(js: Path, meta: dict[str, Any]) -> ModelConfig:
    """The architecture recorded under "model"."""
    model = meta["model"]
    if not isinstance(model, dict):
        raise BadModel(js, "model", "expected an object of architecture settings")
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(model) - known)
    if unknown:
        raise BadModel(js, f"model.{unknown[0]}", f"unknown architecture setting (known: "
                       f"{', '.join(sorted(known))})")
    try:
        return ModelConfig(**model)
    except (TypeError, ValueError) as e:
        raise BadModel(js, "model", str(e)) from None


def _feature_stats(js: Path, stats: Any) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) (134,) float64, finite."""
    out = []
    for name in ("node_feat_mean", "node_feat_std"):
        try:
            arr = np.asarray(stats[name], np.float64)
        except (TypeError, KeyError, IndexError, ValueError):
            raise BadModel(js, f"feature_stats.{name}", f"missing or not a list of {N_STATS} "
                           "numbers") from None
        if arr.shape != (N_STATS,):
            raise BadModel(js, f"feature_stats.{name}", f"{arr.shape} values, expected ({N_STATS},)")
        if not np.isfinite(arr).all():
            raise BadModel(js, f"feature_stats.{name}", f"{int((~np.isfinite(arr)).sum())} "
                           "non-finite values (NaN or inf)")
        out.append(arr)
    return out[0], out[1]


def _read_params(npz: Path, js: Path, listed: Any, config: ModelConfig) -> Params:
    """The weights, checked against the architecture (names, shapes) and for finiteness."""
    expected = {k: tuple(v.shape) for k, v in init_params(config, 0).items()}
    if not isinstance(listed, dict) or {k: tuple(v) for k, v in listed.items()} != expected:
        raise BadModel(js, "params", f"the listed weights do not fit the architecture {config}")
    params: Params = {}
    try:
        with np.load(npz, allow_pickle=False) as z:
            names = set(z.files)
            if names != set(expected):
                extra, lack = sorted(names - set(expected)), sorted(set(expected) - names)
                what = f"unknown weights {extra}" if extra else f"weights {lack} are missing"
                raise BadModel(npz, None, f"{what}; the .npz does not belong to {js.name}")
            for k, shape in expected.items():
                arr = z[k]
                if arr.shape != shape or arr.dtype.kind != "f":
                    raise BadModel(npz, k, f"{arr.dtype} {arr.shape}, expected float {shape}")
                params[k] = arr.astype(config.dtype)
    except BadModel:
        raise
    except FileNotFoundError:
        raise BadModel(npz, None, "no such file (the weights beside the .json)") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
        raise BadModel(npz, None, f"cannot read the weights, truncated or damaged ({e})") from None
    for k, arr in params.items():
        bad = int(arr.size - np.isfinite(arr).sum())
        if bad:
            raise BadModel(npz, k, f"{bad} of {arr.size} weights are not finite (NaN or inf): the "
                           "training diverged or the file is damaged; train it again")
    return params
