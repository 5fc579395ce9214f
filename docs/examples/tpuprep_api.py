"""Read tpuprep shards with tpuprep itself: a graph's record, its statistics, sampled and streamed configs,
and lazy scans across graphs (needs only ``pip install tpuprep``).

Usage: python tpuprep_api.py SHARDS COLLECTION  -> one line per step, shapes and dtypes as the API gives them.
"""

import sys

import numpy as np
import polars as pl

import tpuprep

if __name__ == "__main__":
    shards, collection = sys.argv[1:3]
    ds = tpuprep.open_dataset(shards)  # a folder or a URL (s3://…, gs://…): the manifest is checked here
    print("collections", ds.collections)
    gid = ds.graph_ids(collection, split="train")[0]  # "<collection>:<file stem>"

    g = ds.load_graph(gid)  # a GraphRecord: every array read-only (zero-copy Arrow views)
    print("node_feat", g.node_feat.shape, g.node_feat.dtype, "edge_index", g.edge_index.shape, g.edge_index.dtype)
    print("config_runtime", g.config_runtime.shape, g.config_runtime.dtype, "config_inverse", g.config_inverse.shape)
    mean, std = ds.normalizer(collection)  # (134,) float64 train statistics; a constant column's std is 1
    x = g.node_feat.copy()  # writable copy: g.node_feat[:, :134] -= mean would raise (read-only)
    x[:, :134] = (x[:, :134] - mean) / std
    print("standardised", x.shape, "finite", bool(np.isfinite(x).all()))
    print("graph row", {k: ds.graph_row(gid)[k] for k in ("num_nodes", "num_unique_configs", "fold")})

    s = ds.sample_configs(gid, 8, seed=0)  # 8 distinct unique configs; reads only their row groups
    values = s.node_config_feat if s.node_config_feat is not None else s.config_feat
    print("sample rows", s.rows.tolist(), "configs", values.shape, values.dtype)
    if g.kind == "layout":  # a record decodes the rows asked for (codes stay compressed as stored)
        assert np.array_equal(g.node_config_feat(rows=s.rows[:2]), s.node_config_feat[:2])
    again = ds.read_configs(gid, s.rows)  # the same ConfigSample for explicit rows, in that order
    assert np.array_equal(again.config_runtime, s.config_runtime)
    assert np.array_equal(ds.config_runtimes(gid)[s.rows], s.config_runtime)  # every runtime, no codes read
    seen = 0
    for block in ds.iter_config_blocks(gid, 256):  # every unique config, one decoded block at a time
        seen += len(block.rows)
    print("streamed", seen, "of", g.num_unique_configs, "unique configs; originals", len(g.config_inverse))
    scores = g.config_runtime.astype(np.float64)  # a stand-in for a model's per-unique-config scores
    ranking = np.argsort(scores[g.config_inverse], kind="stable")  # over the ORIGINAL configs (Kaggle)
    print("lowest-scored original config", int(ranking[0]))

    runtimes = (ds.scan("configs", collection, split="train")  # polars.LazyFrame: nothing read yet
                .group_by("graph_id").agg(pl.col("runtime").min().alias("best")).sort("graph_id").collect())
    print("scan", runtimes.height, "graphs, best runtime of the first", runtimes["best"][0])
    train = ds.counts(collection)["train"]  # the manifest's counts, recounted from the shards
    print("counts: train", train["graphs"], "graphs,", train["unique_configs"], "unique configs")
