"""Sampled reads from object storage: bytes and requests per ``sample_configs(largest graph, 64)``.

``python -m benchmarks.remote_reading SHARDS [--samples 10]`` starts moto's S3 server on 127.0.0.1
(``moto[server]``), uploads the local shard folder SHARDS to a bucket, opens it as ``s3://…`` and
counts every S3 request s3fs sends (and the bytes of each ranged GET) while it samples 64 configs of
the graph with the most unique configs, through three ways of reading a remote shard:

- ``prefetch``: what the reader uses: footers through ``ShardFile.source`` (one ranged GET of the pinned
  version per read, no read-ahead), the sampled row groups' column chunks fetched at once and
  concurrently (``ShardFile.read_ranges`` / ``prefetched``);
- ``ranged``: ``ShardFile.source`` for everything (pyarrow's reads of the sampled row groups one GET
  after the other);
- ``arrow-filesystem``: ``pq.ParquetFile(path, filesystem=Store.arrow_filesystem())`` (pyarrow's
  ``PyFileSystem`` over the same fsspec filesystem, whose files read ahead by its block size).

``--latency-ms L`` adds L ms before every S3 request (a store farther away than loopback).

Cold: ``open_dataset`` + the first sample (manifest, shard metadata, footers, the graph's structure
row group for its tied columns, the sampled row groups). Warm: each further sample (new seed).

``--epochs`` measures the bucket cache (``open_dataset(url, cache_dir=, cache_bytes=)``, issue #38
item 3) instead: ``ConfigBatches`` epochs over the train split of every layout collection (k = 64,
``--batches-per-graph``), on the local folder (the floor), from the bucket without the cache and
through it with blocks of each ``--blocks`` size (``whole``: one block per object; the default is
16): epoch 0 in a fresh process, epoch 1 with the same objects (a
training loop's next epoch) and epoch 1 in another fresh process (a non-persistent DataLoader
worker, another job on the host) — requests, bytes received and wall time of each. The requests of
the uncached epochs also give what a cache of the exact byte ranges read would have saved (``exact``:
the bytes of epoch 1 not already read in epoch 0).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

SAMPLE = 64


class Requests:
    """Counts the S3 calls of s3fs (by operation), the bytes their ranged GETs asked for (``bytes``),
    the bytes every GET received (``received``) and, when ``log`` is a list, each GET as (key, start,
    end)."""

    def __init__(self, latency_ms: float = 0.0, log: list | None = None):
        self.calls: Counter = Counter()
        self.bytes = 0
        self.received = 0
        self.log = log
        self.latency = latency_ms / 1000

    def install(self) -> None:
        import s3fs

        original = s3fs.S3FileSystem._call_s3
        me = self

        async def counted(fs, method, *args, **kwargs):
            import asyncio

            await asyncio.sleep(me.latency)
            me.calls[method] += 1
            if method == "get_object" and "Range" in kwargs:
                lo, hi = kwargs["Range"].split("=")[1].split("-")
                me.bytes += int(hi) - int(lo) + 1
                if me.log is not None:
                    me.log.append((kwargs["Key"], int(lo), int(hi) + 1))
            elif method == "get_object":
                me.calls["get_object (whole)"] += 1
            out = await original(fs, method, *args, **kwargs)
            if method == "get_object" and isinstance(out, dict):
                me.received += int(out.get("ContentLength") or 0)
            return out

        s3fs.S3FileSystem._call_s3 = counted

    def take(self) -> dict:
        out = {"requests": sum(v for k, v in self.calls.items() if "(" not in k),
               "by_operation": dict(self.calls), "range_bytes": self.bytes, "received_bytes": self.received}
        self.calls.clear()
        self.bytes = self.received = 0
        return out


def start_moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
            return proc, endpoint
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto server did not start")


def measure(url: str, mode: str, samples: int, counter: Requests) -> dict:
    import fsspec

    import tpuprep
    from tpuprep.shards.parquet import open_parquet, read_row_groups
    from tpuprep.shards.shard_files import ShardSet

    fsspec.filesystem("s3").clear_instance_cache()
    saved = ShardSet.open, ShardSet.read_sampled
    if mode == "arrow-filesystem":
        def open_shard(self, path):
            fs = self.store.arrow_filesystem()
            return open_parquet(path, fs.open_input_file(self.store.fs._strip_protocol(path)))

        ShardSet.open = open_shard
    if mode != "prefetch":
        def read_sampled(self, path, rgs, graph_id, columns):
            return read_row_groups(self.footer(path), path, rgs, columns, use_threads=False)

        ShardSet.read_sampled = read_sampled
    try:
        counter.take()
        start = time.perf_counter()
        ds = tpuprep.open_dataset(url)
        layout = [g for c in ds.collections if c.startswith("layout") for g in ds.graph_ids(c)]
        gid = max(layout, key=lambda g: ds.graph_row(g)["num_unique_configs"])
        counter.take()  # choosing the graph reads the graphs rows: not part of a sample
        ds = tpuprep.open_dataset(url)
        ds.sample_configs(gid, SAMPLE, seed=0)
        cold = counter.take() | {"seconds": round(time.perf_counter() - start, 3)}
        warm = []
        for seed in range(1, samples + 1):
            t = time.perf_counter()
            s = ds.sample_configs(gid, SAMPLE, seed=seed)
            warm.append(counter.take() | {"seconds": round(time.perf_counter() - t, 4)})
        assert len(s.rows) == SAMPLE
        entry = next(e for e in ds.manifest["shards"] if e["table"] == "layout_configs"
                     and e["first_graph"] <= gid <= e["last_graph"])
        return {"mode": mode, "graph": gid, "unique_configs": ds.graph_row(gid)["num_unique_configs"],
                "configs_shard": entry["path"], "configs_shard_bytes": entry["bytes"], "cold": cold,
                "warm_mean_range_bytes": sum(w["range_bytes"] for w in warm) / len(warm),
                "warm_mean_requests": sum(w["requests"] for w in warm) / len(warm),
                "warm_best_seconds": min(w["seconds"] for w in warm), "warm": warm}
    finally:
        ShardSet.open, ShardSet.read_sampled = saved


LAYOUT_TRAIN = "train"


def epoch_run(url: str, cache_dir: str | None, block: int | None, epochs: list[int], batches_per_graph: int,
              latency_ms: float, log: bool = False) -> dict:
    """In this process (fresh: call it in a spawned one): open the dataset (through the cache when
    ``cache_dir``, blocks of ``block`` bytes), then one ``ConfigBatches`` per layout collection, and
    time and count each epoch of ``epochs`` in turn (the same objects)."""
    import dataclasses

    import tpuprep
    from tpuprep.io.storage import resolve

    counter = Requests(latency_ms, [] if log else None)
    counter.install()
    start = time.perf_counter()
    store = resolve(url, cache_dir=cache_dir, cache_bytes=None) if cache_dir else url
    if cache_dir and block:
        store = dataclasses.replace(store, block_bytes=block)
    ds = tpuprep.open_dataset(store)
    loaders = [tpuprep.ConfigBatches(ds, c, LAYOUT_TRAIN, k=SAMPLE, batches_per_graph=batches_per_graph)
               for c in ds.collections if c.startswith("layout")]
    out, opened = [], True
    for epoch in epochs:
        if not opened:
            start = time.perf_counter()
        batches = 0
        for loader in loaders:
            loader.set_epoch(epoch)
            batches += sum(1 for _ in loader)
        got = counter.take()
        out.append({"epoch": epoch, "batches": batches, "requests": got["requests"],
                    "received_bytes": got["received_bytes"], "seconds": round(time.perf_counter() - start, 3),
                    **({"gets": list(counter.log)} if log else {})})
        if log:
            counter.log.clear()
        opened = False
    return {"epochs": out}


def _child(queue, *args) -> None:
    queue.put(epoch_run(*args))


def in_fresh_process(*args) -> dict:
    """``epoch_run(*args)`` in a spawned process (nothing cached in memory, no fsspec instance)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, *args))
    proc.start()
    result = queue.get(timeout=3600)
    proc.join(60)
    return result


def exact_range_bytes(first: list, then: list) -> int:
    """Bytes of the GETs of ``then`` that a cache of every byte range already read in ``first`` (the
    same keys) would still have to fetch."""
    seen: dict[str, list[tuple[int, int]]] = {}
    for key, lo, hi in first:
        seen.setdefault(key, []).append((lo, hi))
    missing = 0
    for key, lo, hi in then:
        covered = sorted(r for r in seen.get(key, []) if r[1] > lo and r[0] < hi)
        pos, got = lo, 0
        for a, b in covered:
            a = max(a, pos)
            if b > a:
                got += min(b, hi) - a
                pos = min(b, hi)
        missing += (hi - lo) - got
    return missing


def measure_epochs(url: str, blocks: list[str], batches_per_graph: int, latency_ms: float, work: Path,
                   local: Path | None = None) -> list:
    """Epoch 0 and 1 in one process, then epoch 1 in another fresh one: the local folder ``local`` (the
    floor: no request at all), uncached, then through the cache per block size."""
    import shutil

    rows = []
    if local is not None:
        first = in_fresh_process(str(local), None, None, [0, 1], batches_per_graph, latency_ms)
        other = in_fresh_process(str(local), None, None, [1], batches_per_graph, latency_ms)
        rows.append({"cache": "local folder", "epoch0": first["epochs"][0], "epoch1": first["epochs"][1],
                     "epoch1_other_process": other["epochs"][0]})
    for block in ["none", *blocks]:
        cache_dir = None if block == "none" else str(work / f"cache-{block}")
        if cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)
        size = None if block in ("none", "whole") else int(float(block) * (1 << 20))
        if block == "whole":
            size = 1 << 62
        first = in_fresh_process(url, cache_dir, size, [0, 1], batches_per_graph, latency_ms, block == "none")
        other = in_fresh_process(url, cache_dir, size, [1], batches_per_graph, latency_ms, block == "none")
        e0, e1, e1p = first["epochs"][0], first["epochs"][1], other["epochs"][0]
        row = {"cache": block if block == "none" else f"blocks of {block} MiB" if block != "whole" else "whole objects",
               "epoch0": e0, "epoch1": e1, "epoch1_other_process": e1p}
        if block == "none":
            row["exact_range_cache_epoch1_bytes"] = exact_range_bytes(e0["gets"], e1["gets"])
            row["exact_range_cache_epoch1_other_process_bytes"] = exact_range_bytes(e0["gets"] + e1["gets"],
                                                                                     e1p["gets"])
            for e in (e0, e1, e1p):
                e.pop("gets")
        if cache_dir:
            from tpuprep.io.block_cache import block_cache

            row["cache_usage"] = block_cache(cache_dir, None).usage()
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shards", type=Path)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--epochs", action="store_true", help="measure the bucket cache over ConfigBatches epochs")
    parser.add_argument("--blocks", default="1,4,16,whole", help="block sizes in MiB (or 'whole') with --epochs")
    parser.add_argument("--batches-per-graph", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None, help="where the cache folders go (default: a temp)")
    args = parser.parse_args()
    proc, endpoint = start_moto()
    try:
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
                           "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1"})
        import fsspec

        fs = fsspec.filesystem("s3")
        fs.mkdir("tpuprep-bench")
        fs.put(f"{args.shards}/", "tpuprep-bench/shards/", recursive=True)
        if args.epochs:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="tpuprep-cache-bench-", dir=args.work) as work:
                rows = measure_epochs("s3://tpuprep-bench/shards", [b for b in args.blocks.split(",") if b],
                                      args.batches_per_graph, args.latency_ms, Path(work), args.shards)
            print(json.dumps({"latency_ms": args.latency_ms, "batches_per_graph": args.batches_per_graph,
                              "shard_bytes": sum(f.stat().st_size for f in args.shards.rglob("*.parquet")),
                              "epochs": rows}, indent=1))
            return
        counter = Requests(args.latency_ms)
        counter.install()
        results = [measure("s3://tpuprep-bench/shards", mode, args.samples, counter)
                   for mode in ("prefetch", "ranged", "arrow-filesystem")]
        for r in results:
            r.pop("warm")
        print(json.dumps({"latency_ms": args.latency_ms, "results": results}, indent=1))
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
