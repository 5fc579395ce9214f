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
    """Counts the S3 calls of s3fs (by operation) and the bytes their ranged GETs asked for."""

    def __init__(self, latency_ms: float = 0.0):
        self.calls: Counter = Counter()
        self.bytes = 0
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
            elif method == "get_object":
                me.calls["get_object (whole)"] += 1
            return await original(fs, method, *args, **kwargs)

        s3fs.S3FileSystem._call_s3 = counted

    def take(self) -> dict:
        out = {"requests": sum(v for k, v in self.calls.items() if "(" not in k),
               "by_operation": dict(self.calls), "range_bytes": self.bytes}
        self.calls.clear()
        self.bytes = 0
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shards", type=Path)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    proc, endpoint = start_moto()
    try:
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
                           "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1"})
        import fsspec

        fs = fsspec.filesystem("s3")
        fs.mkdir("tpuprep-bench")
        fs.put(f"{args.shards}/", "tpuprep-bench/shards/", recursive=True)
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
