"""Read a shard folder in object storage (S3, MinIO, Ceph …) with tpuprep, pyarrow, polars and DuckDB: the
same sampled configs of one graph from each, fetched as ranged reads of the row groups that hold them.

Endpoint and credentials come from the standard variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``); needs tpuprep[s3], polars and duckdb.

Usage: python object_storage.py s3://BUCKET/SHARDS GRAPH_ID  -> one line per reader, the same runtimes.
"""

import sys

import duckdb
import numpy as np
import polars as pl
import pyarrow.compute as pc
import pyarrow.dataset as pads
import s3fs

import tpuprep

if __name__ == "__main__":
    url, graph_id = sys.argv[1:3]
    ds = tpuprep.open_dataset(url)  # or storage_options={"endpoint_url": ..., "key": ..., "secret": ...}
    sample = ds.sample_configs(graph_id, 8, seed=0)  # footers once, then concurrent ranged GETs
    rows = sorted(sample.rows.tolist())
    expected = ds.read_configs(graph_id, rows).config_runtime
    print("tpuprep", rows, expected.tolist())

    collection = graph_id.rsplit(":", 1)[0]  # "layout:xla:random" → folder layout/xla/random
    configs = f"{url.removeprefix('s3://')}/{collection.replace(':', '/')}/configs"  # bucket path, no scheme
    wanted = (pc.field("graph_id") == graph_id) & pc.field("config_id").isin(rows)

    fs = s3fs.S3FileSystem()  # fsspec: the same variables (or endpoint_url=..., key=..., secret=...)
    table = pads.dataset(configs, filesystem=fs).to_table(columns=["config_id", "runtime"], filter=wanted)
    got = table.sort_by("config_id").column("runtime").to_numpy()
    print("pyarrow", got.tolist())
    assert np.array_equal(got, expected)

    # polars' own object-store client reads the same variables; storage_options takes ITS names
    # (aws_endpoint_url, aws_region, aws_access_key_id, ...), not fsspec's
    frame = (pl.scan_parquet(f"s3://{configs}/*.parquet")
             .filter((pl.col("graph_id") == graph_id) & pl.col("config_id").is_in(rows))
             .select("config_id", "runtime").sort("config_id").collect())
    print("polars", frame["runtime"].to_list())
    assert np.array_equal(frame["runtime"].to_numpy(), expected)

    con = duckdb.connect()
    con.register_filesystem(s3fs.S3FileSystem())  # DuckDB reads s3:// through fsspec: no extension download
    result = con.execute(f"SELECT runtime FROM read_parquet('s3://{configs}/*.parquet') "
                         f"WHERE graph_id = ? AND config_id IN ({', '.join(map(str, rows))}) ORDER BY config_id",
                         [graph_id]).fetchnumpy()["runtime"]
    print("duckdb", result.tolist())
    assert np.array_equal(result, expected)
