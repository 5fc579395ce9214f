"""One training epoch of sampled configs: one k-config sample (decoded, with runtimes) of every graph of
every layout collection and split, through ``ConfigBatches`` against two old paths, side by side in one
run: the path before issue #14 (each graph's configs as schema 1 stored them, read whole, k rows decoded:
``Schema1Path``) and today's ``load_graph`` of the whole graph (tie-compressed shards), then
``node_config_feat(rows)`` and ``config_runtime[rows]``.

All paths take the same rows (the uniform strategy's rows of batch 0 of each epoch) and their decoded
configs and runtimes are checked equal (a digest per graph). Each path opens its own Dataset once, as a
training loop does; epoch 0 is reported apart (cold: shard index, footers, structures read), the speed-up
is the best of the following epochs. The OS page cache is warm for both, which favours neither.

    python -m benchmarks.sampling SHARDS [--k 64] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time
from pathlib import Path

import numpy as np


def _digest(feats: np.ndarray, runtimes: np.ndarray | None) -> str:
    h = hashlib.sha256(np.ascontiguousarray(feats).tobytes())
    if runtimes is not None:
        h.update(np.ascontiguousarray(runtimes, np.int64).tobytes())
    return h.hexdigest()


def _timed(start: float, cpu: float, out: dict) -> tuple[float, float, dict[str, str]]:
    """(wall s, CPU s) since ``start``/``cpu``, then the digest per graph of ``out`` (graph id -> (k, nc,
    18) configs, (k,) runtimes or None), hashed after the clocks stop: hashing is not sampling."""
    wall, spent = time.perf_counter() - start, time.process_time() - cpu
    return wall, spent, {gid: _digest(*arrays) for gid, arrays in out.items()}


def _parts(ds) -> list[tuple[str, str]]:
    return [(c, s) for c in ds.collections if c.startswith("layout") for s in ds.splits(c)]


class OldPath:
    """Today's path: ``load_graph`` of the whole graph + indexing k rows, one Dataset kept open."""

    def __init__(self, shards: Path, k: int, seed: int = 0):
        import tpuprep

        self.ds, self.k, self.seed = tpuprep.open_dataset(shards), k, seed

    def epoch(self, epoch: int) -> tuple[float, float, dict[str, str]]:
        """(wall s, CPU s, digest per graph) of one epoch: the rows ConfigBatches draws in that epoch."""
        from tpuprep.sampling.batches import item_rng
        from tpuprep.sampling.strategies import uniform

        out = {}
        start, cpu = time.perf_counter(), time.process_time()
        for collection, split in _parts(self.ds):
            for gid in self.ds.graph_ids(collection, split):
                g = self.ds.load_graph(gid)
                rows = uniform(g.num_unique_configs, self.k, item_rng(self.seed, epoch, gid, 0))
                feats = g.node_config_feat(rows)
                runtimes = None if g.config_runtime is None else g.config_runtime[rows]
                out[gid] = (feats, runtimes)
        return _timed(start, cpu, out)


class Schema1Path:
    """The path before issue #14: each graph's configs as schema 1 stored them (every node's codes, row
    groups cut only at 128 MB; ``reading.write_schema1_configs``, written once into ``folder`` before any
    timing), read whole for each sample, then k rows decoded (``reading.schema1_sample``). The graph's
    structure is not read, which favours this path."""

    def __init__(self, shards: Path, k: int, folder: Path, seed: int = 0):
        import tpuprep

        from .reading import write_schema1_configs

        ds = tpuprep.open_dataset(shards)
        self.k, self.seed, self.files = k, seed, {}
        for collection, split in _parts(ds):
            for gid in ds.graph_ids(collection, split):
                path = folder / f"{len(self.files)}.parquet"
                _, nc = write_schema1_configs(ds, gid, path)
                self.files[gid] = (path, nc, ds.num_unique_configs(gid))

    def epoch(self, epoch: int) -> tuple[float, float, dict[str, str]]:
        """(wall s, CPU s, digest per graph) of one epoch: the rows ConfigBatches draws in that epoch."""
        from tpuprep.sampling.batches import item_rng
        from tpuprep.sampling.strategies import uniform

        from .reading import schema1_sample

        out = {}
        start, cpu = time.perf_counter(), time.process_time()
        for gid, (path, nc, c_u) in self.files.items():
            out[gid] = schema1_sample(path, nc, uniform(c_u, self.k, item_rng(self.seed, epoch, gid, 0)))
        return _timed(start, cpu, out)


class NewPath:
    """``ConfigBatches`` (k uniform configs, one batch per graph), one per (collection, split), kept
    across epochs as a training loop keeps them (structures LRU of 32 graphs each)."""

    def __init__(self, shards: Path, k: int, seed: int = 0):
        import tpuprep

        self.ds = tpuprep.open_dataset(shards)
        self.batches = None
        self.k, self.seed = k, seed

    def epoch(self, epoch: int) -> tuple[float, float, dict[str, str]]:
        """(wall s, CPU s, digest per graph) of one epoch."""
        import tpuprep

        out = {}
        start, cpu = time.perf_counter(), time.process_time()
        if self.batches is None:
            self.batches = [tpuprep.ConfigBatches(self.ds, c, split=s, k=self.k, seed=self.seed)
                            for c, s in _parts(self.ds)]
        for batches in self.batches:
            batches.set_epoch(epoch)
            for b in batches:
                out[b.graph_id] = (b.sample.node_config_feat, b.sample.config_runtime)
        return _timed(start, cpu, out)


def run(shards: Path, k: int = 64, repeat: int = 3) -> dict:
    """Epoch 0 of each path from a freshly opened Dataset (cold: index, footers, structures), then
    epochs 1..``repeat`` (warm, as in training), the three paths in turn epoch by epoch (the schema-1
    files are written first, untimed). Wall and CPU
    time (``process_time``: every thread of the process) of each; speed-ups of the best warm epochs.
    On a shared machine the CPU ratio is the steadier figure (a busy neighbour stretches wall time)."""
    import tempfile

    import tpuprep

    tpuprep.decode_base7(np.zeros((1, 1, 3), np.int32))  # load the Numba kernel before any timing
    identical = True
    times: dict[str, list[tuple[float, float]]] = {"schema1": [], "old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="schema1-") as tmp:
        paths = {"schema1": Schema1Path(shards, k, Path(tmp)), "old": OldPath(shards, k), "new": NewPath(shards, k)}
        for epoch in range(repeat + 1):
            digests = []
            for name, path in paths.items():
                *spent, digest = path.epoch(epoch)
                times[name].append(tuple(spent))
                digests.append(digest)
            identical &= digests[0] == digests[1] == digests[2]

    def best(path: str, i: int) -> float:
        return min(t[i] for t in times[path][1:])

    res = {"graphs": len(digests[2]), "k": k, "repeat": repeat, "epochs_schema1_wall_cpu_s": times["schema1"],
           "epochs_old_wall_cpu_s": times["old"], "epochs_config_batches_wall_cpu_s": times["new"],
           "first_epoch_speedup_wall": times["old"][0][0] / times["new"][0][0],
           "first_epoch_speedup_cpu": times["old"][0][1] / times["new"][0][1],
           "old_load_graph_s": best("old", 0), "config_batches_s": best("new", 0),
           "old_load_graph_cpu_s": best("old", 1), "config_batches_cpu_s": best("new", 1)}
    res["schema1_s"], res["schema1_cpu_s"] = best("schema1", 0), best("schema1", 1)
    res["speedup_vs_schema1"] = res["schema1_s"] / res["config_batches_s"]
    res["speedup_vs_schema1_cpu"] = res["schema1_cpu_s"] / res["config_batches_cpu_s"]
    res["speedup"] = res["old_load_graph_s"] / res["config_batches_s"]
    res["speedup_cpu"] = res["old_load_graph_cpu_s"] / res["config_batches_cpu_s"]
    res["identical"] = identical
    res["machine"] = f"{platform.machine()} {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sampling", description=__doc__.split("\n")[0])
    parser.add_argument("shards", type=Path)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    res = run(args.shards, args.k, args.repeat)
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0 if res["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
