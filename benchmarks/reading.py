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
        ds.graphs.recent.clear()
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


def _best_of_rounds(paths: dict, repeat: int, slow: frozenset = frozenset(),
                    cpu: dict[str, float] | None = None) -> dict[str, float]:
    """Best wall time (s) of each path (a callable) over ``repeat`` rounds: every path is timed once per
    round, in a rotated order (the ``slow`` ones in every third round only), so a change of the machine's
    speed during the run falls on every path alike and the ratios compare like with like. ``cpu``, when
    given, receives each path's best CPU time (s, ``process_time``: every thread of the process), the
    steadier figure on a shared machine (pyarrow's threads make wall time depend on idle cores)."""
    best = dict.fromkeys(paths, float("inf"))
    if cpu is not None:
        cpu.update(dict.fromkeys(paths, float("inf")))
    names = list(paths)
    for r in range(repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name in slow and r % 3:
                continue
            start, spent = time.perf_counter(), time.process_time()
            paths[name]()
            best[name] = min(best[name], time.perf_counter() - start)
            if cpu is not None:
                cpu[name] = min(cpu[name], time.process_time() - spent)
    return best


def largest_layout_graph(ds) -> str:
    """The layout graph of ``ds`` with the most unique configs (vgg19 on ``bench``)."""
    layout = [g for c in ds.collections if c.startswith("layout") for g in ds.graph_ids(c)]
    return max(layout, key=lambda g: ds.graph_row(g)["num_unique_configs"])


def _example(name: str):
    """A docs/examples sampled-read script as a module (pure pyarrow / polars / DuckDB, no tpuprep)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "docs" / "examples" / f"sample_{name}.py"
    spec = importlib.util.spec_from_file_location(f"sample_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_schema1_configs(ds, graph_id: str, path: Path) -> tuple[int, int]:
    """The graph's configs as schema 1.x stored them (before issue #14): one row per unique config whose
    ``codes`` hold every configurable node's 3 int32 codes (nc·12 bytes, no tied columns), zstd level 3,
    row groups cut only at ``BuildOptions.row_group_bytes``, so reading any config decompresses the
    graph's codes. Returns (the file's bytes, nc). (Schema 1 also held config_id, runtime, group_size and
    first_index: read whole too.)"""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tpuprep.options import BuildOptions
    from tpuprep.shards.writer import fixed_width_binary, rows_per_group

    g = ds.load_graph(graph_id)
    table = pa.table({
        "config_id": pa.array(np.arange(g.num_unique_configs, dtype=np.int32)),
        "runtime": pa.nulls(g.num_unique_configs, pa.int64()) if g.config_runtime is None
        else pa.array(g.config_runtime, pa.int64()),
        "group_size": pa.array(g.group_size, pa.int32()),
        "first_index": pa.array(g.first_index, pa.int32()),
        "codes": fixed_width_binary(g.config_codes.reshape(g.num_unique_configs, -1)),
    })
    rows = rows_per_group(table, BuildOptions().row_group_bytes)
    pq.write_table(table, path, compression="zstd", compression_level=3, row_group_size=rows)
    return path.stat().st_size, len(g.node_config_ids)


def schema1_sample(path: Path, nc: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The old ``load_graph`` + ``node_config_feat(rows)`` and ``config_runtime[rows]`` on a schema-1
    file: every column of every config read (decompressed, page checksums verified as the reader
    does), then only ``rows`` decoded (the cheaper of the old path's two ways: it favours the old path).
    Returns ((k, nc, 18) int8, (k,) int64 or None on test)."""
    import pyarrow.parquet as pq

    from tpuprep import decode_base7

    t = pq.ParquetFile(path, page_checksum_verification=True).read()
    data = t.column("codes").combine_chunks()
    codes = np.frombuffer(data.buffers()[2], "<i4")[: len(data) * nc * 3].reshape(len(data), nc, 3)
    runtime = t.column("runtime")
    runtimes = None if runtime.null_count else runtime.to_numpy()[rows]
    return decode_base7(codes[rows]), runtimes


def sampled(shards: Path, k: int = SAMPLE, repeat: int = 9, graph_id: str | None = None,
            stacks: tuple[str, ...] = ("pyarrow", "polars", "duckdb")) -> dict:
    """k sampled, decoded unique configs of the largest layout graph (or ``graph_id``), warm, best of
    ``repeat``, side by side: the path before issue #14 (``schema1_sample`` on the graph written as
    schema 1 stored it), today's ``load_graph`` of every config + ``node_config_feat(rows)``,
    ``Dataset.sample_configs`` (its codes pages read directly, ``shards/pages.py``), the same with
    pyarrow reading the row groups instead (``sample_configs_pyarrow``: the path before issue #28
    item 5, what ``sample_configs`` falls back to) and the docs/examples sampled readers, timed in rounds
    (``_best_of_rounds``: each path once per round; the two whole-graph paths every third round). A new
    seed per call (no cache of the sample itself); the Dataset is opened once (its footers and index are
    warm, as in training)."""
    import tempfile
    from unittest import mock

    import tpuprep
    from tpuprep.shards import pages

    ds = tpuprep.open_dataset(shards)
    graph_id = graph_id or largest_layout_graph(ds)
    seeds = iter(range(10**6))
    c_u = ds.num_unique_configs(graph_id)

    def old_path():
        ds.graphs.recent.clear()  # the old path re-reads the graph for each sample (a cache holds ≤ 4 row groups)
        g = ds.load_graph(graph_id)
        rows = np.random.default_rng(next(seeds)).choice(g.num_unique_configs, k, replace=False)
        return g.node_config_feat(rows)

    def new_path():
        return ds.sample_configs(graph_id, k, seed=next(seeds)).node_config_feat

    def pyarrow_path():
        with mock.patch.object(pages, "sample_codes", lambda *_: None):  # pages declined: pyarrow reads
            return ds.sample_configs(graph_id, k, seed=next(seeds)).node_config_feat

    new_path()  # warm: footers, index, the graph's tie array
    out = {"graph_id": graph_id, "k": k, "num_unique_configs": c_u}
    check = ds.sample_configs(graph_id, k, seed=3)
    with tempfile.TemporaryDirectory(prefix="schema1-") as tmp:
        path = Path(tmp) / "configs.parquet"
        out["schema1_configs_bytes"], nc = write_schema1_configs(ds, graph_id, path)
        assert np.array_equal(schema1_sample(path, nc, check.rows)[0], check.node_config_feat)
        with mock.patch.object(pages, "sample_codes", lambda *_: None):
            assert np.array_equal(ds.sample_configs(graph_id, k, seed=3).node_config_feat, check.node_config_feat)
        paths = {"sample_configs": new_path, "sample_configs_pyarrow": pyarrow_path,
                 "old_load_graph_decode": old_path,
                 "schema1_load_decode": lambda: schema1_sample(
                     path, nc, np.random.default_rng(next(seeds)).choice(c_u, min(k, c_u), replace=False))}
        for name in stacks:
            module = _example(name)
            got = module.sample_configs(str(shards), graph_id, k, 3)  # also warms the example's caches
            assert np.array_equal(got["node_config_feat"], check.node_config_feat), name
            paths[name] = lambda m=module: m.sample_configs(str(shards), graph_id, k, next(seeds))
        cpu: dict[str, float] = {}
        best = _best_of_rounds(paths, repeat, slow=frozenset({"old_load_graph_decode", "schema1_load_decode"}),
                               cpu=cpu)
    out.update({f"{name}_s": seconds for name, seconds in best.items()})
    out.update({f"{name}_cpu_s": cpu[name] for name in ("sample_configs", "sample_configs_pyarrow",
                                                          "old_load_graph_decode")})
    out["speedup_vs_schema1"] = out["schema1_load_decode_s"] / out["sample_configs_s"]
    out["speedup"] = out["old_load_graph_decode_s"] / out["sample_configs_s"]
    out["speedup_pyarrow_row_groups"] = out["old_load_graph_decode_s"] / out["sample_configs_pyarrow_s"]
    out["direct_pages_vs_pyarrow"] = out["sample_configs_pyarrow_s"] / out["sample_configs_s"]
    out["speedup_cpu"] = out["old_load_graph_decode_cpu_s"] / out["sample_configs_cpu_s"]
    out["speedup_pyarrow_row_groups_cpu"] = out["old_load_graph_decode_cpu_s"] / out["sample_configs_pyarrow_cpu_s"]
    for name in stacks:
        out[f"{name}_vs_sample_configs"] = out[f"{name}_s"] / out["sample_configs_s"]
    return out


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m benchmarks.reading",
                                 description="sampled reads of the largest layout graph (sampled())")
    ap.add_argument("shards", type=Path)
    ap.add_argument("--repeat", type=int, default=9, help="rounds (the whole-graph paths: every third)")
    ap.add_argument("--graph", help="the layout graph id (default: the one with the most unique configs)")
    ap.add_argument("--stacks", default="pyarrow,polars,duckdb",
                    help="docs/examples readers timed too, comma-separated ('' for none)")
    args = ap.parse_args()
    stacks = tuple(x for x in args.stacks.split(",") if x)
    print(json.dumps(sampled(args.shards, repeat=args.repeat, graph_id=args.graph, stacks=stacks), indent=1))
