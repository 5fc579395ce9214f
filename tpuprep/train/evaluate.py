"""Evaluation per graph and per collection, against the ORIGINAL configs and runtimes.

Per layout graph (scores expanded from unique configs to every original config via config_inverse):
``tau`` Kendall τ-b(score, original runtime) — duplicates share a score, τ-b counts them as ties;
``tau_submission`` τ of the submission's permutation (ties broken by index, what Kaggle sees);
``opa``; ``slowdown_1/5/10`` (best runtime among the k listed first / best overall, ≥ 1);
``tau_violation`` the training-free violation-ratio baseline (baseline.py); with a truth directory,
``tau_oracle`` = τ(noise-free runtime, measured runtime) — the ceiling that measurement noise leaves —
and ``tau_vs_truth`` = τ(score, noise-free runtime).

Per tile graph (target = runtime / normalizer of every original config): ``tile_score`` (the Kaggle
score of the 5 configs the submission lists), ``slowdown_1/5``, ``tau``, ``opa``; with truth,
``tau_oracle`` and ``tile_score_oracle`` (top 5 by the noise-free value).

Truth side files (written by the synthetic generator): ``<truth>/<collection path>/<split>/<stem>.npy``,
float64 (c,), e.g. ``truth/layout/xla/random/valid/foo.npy`` for ``layout:xla:random:foo``.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from . import plot
from ._blas import blas_threads
from .baseline import node_info, violation_of_configs, violation_ratio
from .features import PreparedGraph
from .metrics import (
    collection_means,
    expand_to_original,
    fastest_first,
    kendall_tau,
    ordered_pair_accuracy,
    slowdown_at_k,
    tile_score_of_listed,
)
from .predict import check_models_fit, tile_top_configs
from .ranker import Ranker
from .stream import prepare_streamed, score_streamed

LAYOUT_KEYS = ["tau", "tau_submission", "opa", "slowdown_1", "slowdown_5", "slowdown_10",
               "tau_violation", "tau_oracle", "tau_vs_truth"]
TILE_KEYS = ["tile_score", "slowdown_1", "slowdown_5", "tau", "opa", "tau_oracle", "tile_score_oracle"]
CSV_KEYS = ["graph_id", "collection", "split", "configs", "unique_configs", "sampled", "tau", "tau_submission",
            "opa", "slowdown_1", "slowdown_5", "slowdown_10", "tile_score", "tau_violation",
            "tau_oracle", "tau_vs_truth", "tile_score_oracle", "seconds"]
N_SCATTER = 4


def truth_root(path: str | Path | None) -> Path | None:
    """The truth directory: accepts ``<synth_root>/truth`` or ``<synth_root>`` itself."""
    if path is None:
        return None
    p = Path(path)
    if (p / "truth").is_dir() and not (p / "layout").is_dir() and not (p / "tile").is_dir():
        return p / "truth"
    return p


def truth_path(root: Path, graph_id: str, collection: str, split: str) -> Path:
    """``<root>/<collection with ':' → '/'>/<split>/<stem>.npy``."""
    stem = graph_id[len(collection) + 1:] if graph_id.startswith(collection + ":") else graph_id
    return root.joinpath(*collection.split(":"), split, f"{stem}.npy")


def load_truth(root: Path | None, graph_id: str, collection: str, split: str, c: int) -> np.ndarray | None:
    """The noise-free runtimes (c,) float64 of a graph, or None when there is no (valid) side file."""
    if root is None:
        return None
    p = truth_path(root, graph_id, collection, split)
    if not p.is_file():
        return None
    t = np.load(p, allow_pickle=False)
    t = np.asarray(t, np.float64).reshape(-1)
    if t.shape[0] != c:
        raise ValueError(f"{p}: truth has {t.shape[0]} values, the graph has {c} configs")
    return t


def _rank_positions(order: np.ndarray) -> np.ndarray:
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order))
    return pos


def evaluate_graph(ranker: Ranker, record: Any, truth: np.ndarray | None = None,
                   baseline: bool = True, max_configs: int | None = None,
                   ) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """Metrics of one labelled graph held whole (a GraphRecord with its configs); also returns
    (predicted scores, true target) of the scored configs. :func:`evaluate_streamed` gives the same
    numbers from the shards without holding the graph's codes.

    max_configs (layout): when the graph has more unique configs, score a seeded random sample of that
    many unique configs and all their original duplicates (the row then has ``sampled = True``).
    """
    _check_labelled(ranker, record)
    rows_u = evaluation_rows(ranker, record, max_configs)
    pred_u = ranker.predict_unique(record, rows=rows_u)
    vr_u = None
    if baseline and ranker.config.kind == "layout":
        vr_u = violation_ratio(record, rows_u)
    return graph_metrics(ranker, record, pred_u, rows_u, vr_u, record.first_index, truth)


def evaluate_streamed(ranker: Ranker, ds: Any, graph_id: str, truth: np.ndarray | None = None,
                      baseline: bool = True, max_configs: int | None = None,
                      prepared: tuple[Any, PreparedGraph] | None = None,
                      ) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """:func:`evaluate_graph` of a graph of ``ds``, bit for bit, holding one block of its configs at
    a time (``stream.score_streamed``) instead of the whole graph. prepared: (structure, PreparedGraph)
    when the caller has them (``stream.prepare_streamed``)."""
    structure, pg = prepared if prepared is not None else prepare_streamed(ranker, ds, graph_id)
    _check_labelled(ranker, structure)
    rows_u = evaluation_rows(ranker, structure, max_configs)
    info = node_info(structure) if baseline and ranker.config.kind == "layout" else None
    violations: list[np.ndarray] = []
    firsts: list[np.ndarray] = []

    def on_block(block: Any) -> None:
        if info is not None:
            violations.append(violation_of_configs(info, block.node_config_feat))
        firsts.append(block.first_index)

    pred_u = score_streamed(ranker, ds, graph_id, pg, rows_u, on_block)
    vr_u = None if info is None else np.concatenate(violations) if violations else np.zeros(0)
    first = np.concatenate(firsts) if firsts else np.zeros(0, np.int32)
    return graph_metrics(ranker, structure, pred_u, rows_u, vr_u, first, truth)


def _check_labelled(ranker: Ranker, record: Any) -> None:
    """ValueError unless ``record`` carries what its collection's metrics need (runtimes; tile:
    normalizers)."""
    if record.config_runtime_original is None:
        raise ValueError(f"{record.graph_id}: no runtimes (test split?) — nothing to evaluate")
    if ranker.config.kind == "tile" and record.config_runtime_normalizers_original is None:
        raise ValueError(f"{record.graph_id}: no runtime normalizers")


def evaluation_rows(ranker: Ranker, record: Any, max_configs: int | None) -> np.ndarray | None:
    """The unique-config rows evaluated (sorted (k,) int64), or None for all: layout graphs with more
    than ``max_configs`` unique configs get a sample seeded by the graph id's CRC-32."""
    c_u = record.num_unique_configs
    if ranker.config.kind != "layout" or max_configs is None or c_u <= max_configs:
        return None
    rng = np.random.Generator(np.random.PCG64(zlib.crc32(record.graph_id.encode())))
    return np.sort(rng.choice(c_u, max_configs, replace=False))


def graph_metrics(ranker: Ranker, record: Any, pred_u: np.ndarray, rows_u: np.ndarray | None,
                  vr_u: np.ndarray | None, first_index: np.ndarray, truth: np.ndarray | None,
                  ) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """The metrics row of a graph from the scores ``pred_u`` of its unique configs ``rows_u`` (all if
    None), the violation ratios ``vr_u`` of the same configs (None: no baseline) and ``first_index``
    (c_u,) (tile); ``record`` needs only the structure (config_inverse, original runtimes)."""
    ranker.check_finite(pred_u, record.graph_id)
    inv = np.asarray(record.config_inverse, np.int64)
    c_u = record.num_unique_configs
    row: dict[str, Any] = {"graph_id": record.graph_id, "collection": ranker.collection,
                           "split": record.split, "configs": len(inv), "unique_configs": c_u}
    if ranker.config.kind == "layout":
        target = np.asarray(record.config_runtime_original, np.int64)
        if rows_u is None:
            pred, sel = expand_to_original(pred_u, inv), slice(None)
        else:
            row["sampled"] = True
            pos = np.full(c_u, -1, np.int64)
            pos[rows_u] = np.arange(len(rows_u))
            sel = np.flatnonzero(pos[inv] >= 0)  # original configs of the sampled unique ones
            pred = pred_u[pos[inv[sel]]]
            target = target[sel]
        row["tau"] = kendall_tau(pred, target)
        row["tau_submission"] = kendall_tau(_rank_positions(fastest_first(pred)), target)
        row["opa"] = ordered_pair_accuracy(pred, target)
        for k in (1, 5, 10):
            row[f"slowdown_{k}"] = slowdown_at_k(pred, target, k)
        if vr_u is not None:
            vr = expand_to_original(vr_u, inv) if rows_u is None else vr_u[pos[inv[sel]]]
            row["tau_violation"] = kendall_tau(vr, target)
        if truth is not None:
            tr = truth[sel]
            row["tau_oracle"] = kendall_tau(tr, target)
            row["tau_vs_truth"] = kendall_tau(pred, tr)
    else:
        pred = expand_to_original(pred_u, inv)
        target = (np.asarray(record.config_runtime_original, np.float64)
                  / np.asarray(record.config_runtime_normalizers_original, np.float64))
        listed = tile_top_configs(pred_u, inv, first_index)
        row["tile_score"] = tile_score_of_listed(listed, target)
        row["slowdown_1"] = float(target[listed[:1]].min() / target.min())
        row["slowdown_5"] = float(target[listed].min() / target.min())
        row["tau"] = kendall_tau(pred, target)
        row["opa"] = ordered_pair_accuracy(pred, target)
        if truth is not None:
            row["tau_oracle"] = kendall_tau(truth, target)
            row["tile_score_oracle"] = tile_score_of_listed(fastest_first(truth)[:5], target)
    return row, pred, np.asarray(target, np.float64)


@dataclass
class EvalResult:
    """Per-graph rows, per-collection means, and a few graphs kept for the rank plots."""

    rows: list[dict[str, Any]]
    summary: dict[str, dict[str, float]]
    samples: dict[str, list[tuple[str, np.ndarray, np.ndarray]]] = field(default_factory=dict)


def evaluate(ds: Any, rankers: list[Ranker], split: str = "valid", truth: str | Path | None = None,
             baseline: bool = True, max_graphs: int | None = None,
             log: TextIO | None = sys.stderr, threads: int | None = 1,
             max_configs: int | None = None) -> EvalResult:
    """Evaluate each model on its collection's graphs of ``split`` (which must carry runtimes).

    Refuses (:class:`~.predict.SubmissionError`) a model whose collection has no ``split`` graphs in
    ``ds`` and (:class:`~.ranker.BadScores`) non-finite scores, instead of reporting nothing or NaN.

    threads: BLAS threads while scoring (see _blas.py; None leaves BLAS alone); max_configs: see
    :func:`evaluate_graph` (layout graphs with more unique configs are scored on a seeded sample).
    """
    # overflow in an intermediate (gelu's x³) is harmless; non-finite results are refused
    with blas_threads(threads), np.errstate(over="ignore", invalid="ignore"):
        return _evaluate(ds, rankers, split, truth, baseline, max_graphs, log, max_configs)


def _evaluate(ds: Any, rankers: list[Ranker], split: str, truth: str | Path | None, baseline: bool,
              max_graphs: int | None, log: TextIO | None, max_configs: int | None) -> EvalResult:
    import time

    root = truth_root(truth)
    check_models_fit(ds, rankers, split)  # a model for a collection the data lacks: refused, not 0 rows
    rows: list[dict[str, Any]] = []
    samples: dict[str, list[tuple[str, np.ndarray, np.ndarray]]] = {}
    for ranker in rankers:
        ids = list(ds.graph_ids(ranker.collection, split=split))
        if max_graphs is not None:
            ids = ids[:max_graphs]
        for i, gid in enumerate(ids, start=1):
            t0 = time.monotonic()
            prepared = prepare_streamed(ranker, ds, gid)  # the structure; configs streamed below
            tr = load_truth(root, gid, ranker.collection, split, len(prepared[0].config_inverse))
            row, pred, target = evaluate_streamed(ranker, ds, gid, tr, baseline, max_configs, prepared)
            row["seconds"] = round(time.monotonic() - t0, 3)
            rows.append(row)
            kept = samples.setdefault(ranker.collection, [])
            if len(kept) < N_SCATTER:
                kept.append((gid, target, pred))
            if log is not None:
                main = row.get("tile_score") if ranker.config.kind == "tile" else row.get("tau")
                print(f"[{i}/{len(ids)}] {gid}: {'score' if ranker.config.kind == 'tile' else 'tau'} "
                      f"{main:.4f}", file=log, flush=True)
    keys = list(dict.fromkeys(LAYOUT_KEYS + TILE_KEYS))
    summary = collection_means(rows, keys)
    for coll, s in summary.items():
        kind = coll.split(":", 1)[0]
        wanted = LAYOUT_KEYS if kind == "layout" else TILE_KEYS
        summary[coll] = {k: v for k, v in s.items() if k in wanted or k == "graphs"}
    return EvalResult(rows, summary, samples)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.4f}"
    return str(v)


def format_table(summary: dict[str, dict[str, float]]) -> str:
    """A plain-text table: one row per collection, the collection's main score first."""
    lines = []
    for kind, keys in (("layout", LAYOUT_KEYS), ("tile", TILE_KEYS)):
        colls = [c for c in summary if c.startswith(kind + ":")]
        if not colls:
            continue
        present = [k for k in keys if any(not math.isnan(summary[c].get(k, math.nan)) for c in colls)]
        head = ["collection", "graphs", *present]
        body = [[c, str(int(summary[c]["graphs"])), *[_fmt(summary[c].get(k)) for k in present]]
                for c in colls]
        widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
        lines.extend("  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)) for r in body)
        lines.append("")
    main = [summary[c]["tau"] if c.startswith("layout") else summary[c].get("tile_score", math.nan)
            for c in summary]
    if main:
        lines.append(f"mean of collection scores: {_fmt(float(np.nanmean(main)) if any(map(math.isfinite, main)) else math.nan)}")
    return "\n".join(lines)


def write_outputs(result: EvalResult, out_dir: str | Path, log: TextIO | None = sys.stderr) -> list[Path]:
    """per_graph.csv, summary.json, summary.txt and, with matplotlib (the ``plot`` extra), per collection
    rank_<c>.png + hist_<c>.png; returns the paths written. Without matplotlib the tables are written and
    one line to ``log`` (``plot.NO_PLOTS``) says how to get the plots."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    p = out / "per_graph.csv"
    with p.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_KEYS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for row in result.rows:
            w.writerow({k: _fmt(row.get(k)) if isinstance(row.get(k), float) else row.get(k, "")
                        for k in CSV_KEYS})
    written.append(p)
    p = out / "summary.json"
    p.write_text(json.dumps({c: {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                 for k, v in s.items()} for c, s in result.summary.items()},
                            indent=1) + "\n")
    written.append(p)
    p = out / "summary.txt"
    p.write_text(format_table(result.summary) + "\n")
    written.append(p)
    if (why := plot.missing()) is not None:
        if log is not None:
            print(why, file=log)
        return written
    for coll in result.summary:
        safe = coll.replace(":", "_")
        kind = coll.split(":", 1)[0]
        if result.samples.get(coll):
            p = out / f"rank_{safe}.png"
            plot.plot_rank_scatter(p, result.samples[coll], f"{coll}: predicted vs true rank")
            written.append(p)
        rows = [r for r in result.rows if r["collection"] == coll]
        if kind == "layout":
            series = {"model tau": np.array([r.get("tau", math.nan) for r in rows], np.float64)}
            vt = np.array([r.get("tau_violation", math.nan) for r in rows], np.float64)
            if np.isfinite(vt).any():
                series["violation tau"] = vt
            ot = np.array([r.get("tau_oracle", math.nan) for r in rows], np.float64)
            if np.isfinite(ot).any():
                series["oracle tau"] = ot
            lo, hi, label = -1.0, 1.0, "Kendall tau per graph"
        else:
            series = {"tile score": np.array([r.get("tile_score", math.nan) for r in rows], np.float64)}
            lo, hi, label = 0.0, 1.0, "tile score per graph"
        p = out / f"hist_{safe}.png"
        plot.plot_histogram(p, series, f"{coll}: {label}", label, lo, hi, 20)
        written.append(p)
    return written
