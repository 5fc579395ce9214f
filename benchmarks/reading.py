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
