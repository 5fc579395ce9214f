"""Check that the naive baseline and tpuprep computed identical content, graph by graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


def _rows(table, key="graph_id") -> dict:
    out: dict = {}
    for i, gid in enumerate(table.column(key).to_pylist()):
        out.setdefault(gid, []).append(i)
    return out


def compare(naive_dst: Path, shards: Path) -> list[str]:
    """Differences between the baseline's output and ``tpuprep.open_dataset(shards)`` (empty = identical)."""
    import tpuprep

    ds = tpuprep.open_dataset(shards)
    problems: list[str] = []
    for gfile in sorted(naive_dst.rglob("graphs-*.parquet")):
        graphs = pq.read_table(gfile)
        configs = pq.read_table(gfile.with_name(gfile.name.replace("graphs-", "configs-")))
        by_graph = _rows(configs)
        for i, gid in enumerate(graphs.column("graph_id").to_pylist()):
            g = ds.load_graph(gid)
            row = {c: graphs.column(c)[i].values.to_numpy(zero_copy_only=False) for c in graphs.column_names if c != "graph_id"}
            cfg = configs.take(by_graph[gid])
            checks = {
                "node_index": np.array_equal(row["node_index"], g.node_index),
                "node_feat": np.array_equal(row["node_feat"].reshape(-1, 140), g.node_feat),
                "edge_index": np.array_equal(row["edge_index"].reshape(-1, 2), g.edge_index),
                "config_inverse": np.array_equal(row["config_inverse"], g.config_inverse),
                "group_size": np.array_equal(cfg.column("group_size").to_numpy(), g.group_size),
                "first_index": np.array_equal(cfg.column("first_index").to_numpy(), g.first_index),
            }
            if g.config_runtime is not None:
                checks["runtime"] = np.array_equal(cfg.column("runtime").to_numpy(), g.config_runtime)
            if g.config_codes is not None:
                codes = np.concatenate([v.values.to_numpy() for v in cfg.column("codes")]) if len(cfg) else np.empty(0)
                checks["codes"] = np.array_equal(codes.reshape(g.config_codes.shape), g.config_codes)
            else:
                feats = np.concatenate([v.values.to_numpy() for v in cfg.column("config_feat")])
                checks["config_feat"] = np.array_equal(feats.reshape(-1, 24), g.config_feat)
            problems += [f"{gid}: {k} differs" for k, ok in checks.items() if not ok]
    return problems
