"""Sampled reads: ``load_graph`` + decode 64 random unique configs, against ``np.load`` of the npz +
indexing the same 64 rows, over many layout graphs. Both sides start cold for each graph (no cache
kept across graphs; the OS page cache is warm for both, which favours neither)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

SAMPLE = 64


def run(shards: Path, src: Path, max_graphs: int = 200, seed: int = 0) -> dict:
    import tpuprep

    ds = tpuprep.open_dataset(shards)
    rng = np.random.default_rng(seed)
    paths = {i["graph_id"]: src / i["path"] for i in ds.manifest["inputs"] if i["status"] == "ok"}
    layout = [g for c in ds.collections if c.startswith("layout") for g in ds.graph_ids(c)]
    chosen = [layout[i] for i in sorted(rng.choice(len(layout), min(max_graphs, len(layout)), replace=False))]
    t_shards = t_npz = 0.0
    for gid in chosen:
        meta = ds.load_graph(gid)  # untimed: decide which rows to sample
        rows = rng.choice(meta.num_unique_configs, min(SAMPLE, meta.num_unique_configs), replace=False)
        originals = meta.first_index[rows]
        ds._cache.clear()
        start = time.perf_counter()
        g = ds.load_graph(gid)
        feats = g.node_config_feat(rows)
        runtimes = g.config_runtime[rows] if g.config_runtime is not None else None
        t_shards += time.perf_counter() - start
        start = time.perf_counter()
        with np.load(paths[gid]) as z:
            raw = z["node_config_feat"][originals]
            raw_rt = z["config_runtime"][originals]
        t_npz += time.perf_counter() - start
        assert np.array_equal(feats, raw), gid
        assert runtimes is None or (runtimes <= raw_rt).all()
    return {"graphs": len(chosen), "sample": SAMPLE, "tpuprep_s": t_shards, "npz_s": t_npz,
            "speedup": t_npz / t_shards if t_shards else float("nan")}


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _example(name: str):
    """A docs/examples sampled-read script as a module (pure pyarrow / polars / DuckDB, no tpuprep)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "docs" / "examples" / f"sample_{name}.py"
    spec = importlib.util.spec_from_file_location(f"sample_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sampled(shards: Path, k: int = SAMPLE, repeat: int = 9, graph_id: str | None = None,
            stacks: tuple[str, ...] = ("pyarrow", "polars", "duckdb")) -> dict:
    """k sampled, decoded unique configs of the largest layout graph (or ``graph_id``), warm, best of
    ``repeat``, side by side: the old path (``load_graph`` of every config + ``node_config_feat(rows)``),
    ``Dataset.sample_configs`` and the docs/examples sampled readers. A new seed per call (no cache of
    the sample itself); the Dataset is opened once (its footers and index are warm, as in training)."""
    import tpuprep

    ds = tpuprep.open_dataset(shards)
    if graph_id is None:
        layout = [g for c in ds.collections if c.startswith("layout") for g in ds.graph_ids(c)]
        graph_id = max(layout, key=lambda g: ds.graph_row(g)["num_unique_configs"])
    seeds = iter(range(10**6))

    def old_path():
        ds._cache.clear()  # the old path re-reads the graph for each sample (a cache holds ≤ 4 row groups)
        g = ds.load_graph(graph_id)
        rows = np.random.default_rng(next(seeds)).choice(g.num_unique_configs, k, replace=False)
        return g.node_config_feat(rows)

    def new_path():
        return ds.sample_configs(graph_id, k, seed=next(seeds)).node_config_feat

    new_path()  # warm: footers, index, the graph's tie array
    out = {"graph_id": graph_id, "k": k, "num_unique_configs": ds.graph_row(graph_id)["num_unique_configs"],
           "old_load_graph_decode_s": _best(old_path, max(1, repeat // 3)),
           "sample_configs_s": _best(new_path, repeat)}
    check = ds.sample_configs(graph_id, k, seed=3)
    for name in stacks:
        module = _example(name)
        got = module.sample_configs(str(shards), graph_id, k, 3)
        assert np.array_equal(got["node_config_feat"], check.node_config_feat), name
        out[f"{name}_s"] = _best(lambda m=module: m.sample_configs(str(shards), graph_id, k, next(seeds)), repeat)
    out["speedup"] = out["old_load_graph_decode_s"] / out["sample_configs_s"]
    for name in stacks:
        out[f"{name}_vs_sample_configs"] = out[f"{name}_s"] / out["sample_configs_s"]
    return out


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(sampled(Path(sys.argv[1])), indent=1))
