"""Reading shards from object storage (issue #15, the reading side): ``open_dataset("s3://…")``,
``tpuprep info|verify|export`` on a shard URL, sampled reads by ranged GETs, and the failures a store
adds (missing bucket, missing prefix, permission denied, a manifest path leaving the prefix).

Everything runs against a real moto S3 server (tests/s3server.py); the shard folder is built locally
and uploaded with ``upload_folder`` (fs.put), independent of the writer side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from s3server import start_moto, stop_moto, upload_folder

import tpuprep
from tpuprep.errors import BadShards, FatalError
from tpuprep.io.remote_store import RemoteStore
from tpuprep.shards.layout import MANIFEST

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``tpuprep ARGS`` in a subprocess that inherits the environment (the moto endpoint and dummy
    credentials of ``s3_env``) and imports this worktree's tpuprep."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    code = "import sys; from tpuprep.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                          timeout=300)


def _one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The single stderr line of a failed command (exit 1, no traceback) containing every needle."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "testing-secret" not in result.stderr + result.stdout  # credentials never printed
    return lines[0]


@pytest.fixture
def remote(bucket, synth_shards) -> str:
    """The tiny synthetic shard folder uploaded to a fresh bucket: its URL."""
    return upload_folder(synth_shards, f"{bucket}/shards")


def _same_record(a, b) -> None:
    for name, value in vars(a).items():
        other = getattr(b, name)
        if isinstance(value, np.ndarray):
            assert value.dtype == other.dtype and np.array_equal(value, other), name
        else:
            assert value == other, name


def _same_sample(a, b) -> None:
    for name, value in vars(a).items():
        other = getattr(b, name)
        assert (value is None) == (other is None), name
        if isinstance(value, np.ndarray):
            assert value.dtype == other.dtype and np.array_equal(value, other), name
        elif value is not None:
            assert value == other, name


# --------------------------------------------------------------------------- the reader API


def test_open_dataset_on_s3_reads_what_the_local_folder_holds(remote, synth_shards):
    local, ds = tpuprep.open_dataset(synth_shards), tpuprep.open_dataset(remote)
    assert ds.root == remote and isinstance(ds.store, RemoteStore)
    assert ds.manifest == local.manifest and ds.graph_ids() == local.graph_ids()
    for gid in local.graph_ids():
        _same_record(ds.load_graph(gid), local.load_graph(gid))
        _same_record(ds.load_graph(gid, configs=False), local.load_graph(gid, configs=False))
        assert ds.graph_row(gid) == local.graph_row(gid)
        for k, seed in ((5, 0), (64, 3)):
            _same_sample(ds.sample_configs(gid, k, seed), local.sample_configs(gid, k, seed))


def test_storage_options_reach_the_filesystem(remote, s3_env, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # only the storage options know the endpoint now
    ds = tpuprep.open_dataset(remote, storage_options={"endpoint_url": s3_env, "skip_instance_cache": True})
    gid = ds.graph_ids("layout:xla:random")[0]
    assert ds.sample_configs(gid, 4).node_config_feat.shape[0] == 4


def test_sampled_reads_fetch_ranges_of_the_needed_row_groups_only(remote, monkeypatch):
    """A warm ``sample_configs`` sends only ranged GETs, for fewer bytes than its configs shard."""
    import s3fs

    calls: list[tuple[str, str | None]] = []
    original = s3fs.S3FileSystem._call_s3

    async def counted(fs, method, *args, **kwargs):
        calls.append((method, kwargs.get("Range")))
        return await original(fs, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    ds = tpuprep.open_dataset(remote)
    gid = max(ds.graph_ids("layout:xla:random"), key=lambda g: ds.graph_row(g)["num_unique_configs"])
    ds.sample_configs(gid, 2, seed=0)  # footers and the graph's structure: read once
    calls.clear()
    sample = ds.sample_configs(gid, 2, seed=1)
    assert len(sample.rows) == 2
    assert calls and all(m == "get_object" and r is not None for m, r in calls), calls
    fetched = sum(int(r.split("-")[1]) - int(r.split("=")[1].split("-")[0]) + 1 for _, r in calls)
    shard = next(e for e in ds.manifest["shards"] if e["table"] == "layout_configs"
                 and e["first_graph"] <= gid <= e["last_graph"])
    assert fetched < shard["bytes"], (fetched, shard["bytes"])


def test_scan_reads_remote_shards_with_polars(remote, synth_shards):
    pl = pytest.importorskip("polars")
    local, ds = tpuprep.open_dataset(synth_shards), tpuprep.open_dataset(remote)
    got = ds.scan("graphs", "tile:xla").select("graph_id", "num_nodes", "split").collect().sort("graph_id")
    want = local.scan("graphs", "tile:xla").select("graph_id", "num_nodes", "split").collect().sort("graph_id")
    assert isinstance(got, pl.DataFrame) and got.equals(want)


def test_a_missing_bucket_is_one_fatal_line(s3_env):
    with pytest.raises(FatalError, match=r"s3://tpuprep-no-such-bucket/shards/manifest.json: the bucket "
                                         r"s3://tpuprep-no-such-bucket does not exist"):
        tpuprep.open_dataset("s3://tpuprep-no-such-bucket/shards")


def test_no_credentials_is_one_fatal_line(remote, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    import fsspec

    fsspec.filesystem("s3").clear_instance_cache()
    with pytest.raises(FatalError, match=rf"{remote}/manifest.json: cannot be read: NoCredentialsError"):
        tpuprep.open_dataset(remote)
    _one_line_error(_cli("info", remote), f"{remote}/manifest.json: cannot be read")


def test_a_prefix_without_a_manifest_is_not_a_finished_build(bucket):
    with pytest.raises(BadShards, match=rf"{bucket}/nothing/manifest.json: missing"):
        tpuprep.open_dataset(f"{bucket}/nothing")


def test_remote_shard_paths_stay_under_the_prefix(remote, bucket):
    """Defence in depth beyond the manifest check: a shard path with '..' or an absolute path is
    refused before any request leaves the prefix, and a listed prefix is not a file."""
    ds = tpuprep.open_dataset(remote)
    for rel, problem in (("../elsewhere/x.parquet", "contains '..'"), ("/etc/passwd", "absolute path"),
                         ("layout", "is not a file")):
        ds.manifest["shards"][0]["path"] = rel
        with pytest.raises(BadShards, match=rf"{remote}/manifest.json: shards\[0\]\.path .*{problem}"):
            ds.shard_path(0)


# --------------------------------------------------------------------------- the commands


def test_info_verify_and_export_take_a_shard_url(remote, synth_shards, synth_root, tmp_path):
    info = _cli("info", remote)
    assert info.returncode == 0, info.stderr
    assert info.stdout.startswith(f"{remote}: schema ") and "tile:xla" in info.stdout
    as_json = _cli("info", "--json", remote)
    assert json.loads(as_json.stdout)["shards"] == tpuprep.open_dataset(synth_shards).manifest["shards"]
    # 2 worker processes: each opens the URL itself (the environment's endpoint and credentials)
    verify = _cli("verify", "--src", str(synth_root / "npz"), "--dst", remote, "-q", "--workers", "2")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "all exact" in verify.stdout
    for where, out in ((remote, tmp_path / "from-s3"), (str(synth_shards), tmp_path / "from-disk")):
        result = _cli("export", "--shards", where, "--dst-npz", str(out), "-q", "--collections", "layout:xla")
        assert result.returncode == 0, result.stderr
    remote_files = sorted(p.relative_to(tmp_path / "from-s3") for p in (tmp_path / "from-s3").rglob("*.npz"))
    assert remote_files and remote_files == sorted(
        p.relative_to(tmp_path / "from-disk") for p in (tmp_path / "from-disk").rglob("*.npz"))
    for rel in remote_files:  # byte-identical to the export of the local folder
        assert (tmp_path / "from-s3" / rel).read_bytes() == (tmp_path / "from-disk" / rel).read_bytes()


def test_verify_finds_a_changed_remote_shard(remote, synth_root):
    import fsspec

    fs, path = fsspec.core.url_to_fs(remote)
    entry = tpuprep.open_dataset(remote).manifest["shards"][0]
    data = bytearray(fs.cat(f"{path}/{entry['path']}"))
    data[len(data) // 2] ^= 0xFF
    fs.pipe(f"{path}/{entry['path']}", bytes(data))
    result = _cli("verify", "--src", str(synth_root / "npz"), "--dst", remote, "-q")
    assert result.returncode == 1
    assert f"{entry['path']}: shard bytes changed" in result.stdout


def test_commands_on_a_missing_bucket_say_so_in_one_line(s3_env, tmp_path):
    url = "s3://tpuprep-no-such-bucket/shards"
    _one_line_error(_cli("info", url), url, "bucket s3://tpuprep-no-such-bucket does not exist")
    _one_line_error(_cli("export", "--shards", url, "--dst-npz", str(tmp_path / "out"), "-q"), "does not exist")
    assert not (tmp_path / "out").exists()  # nothing half-visible


def test_commands_on_a_prefix_without_manifest_say_so_in_one_line(bucket, synth_root):
    url = f"{bucket}/never-built"
    _one_line_error(_cli("info", url), f"{url}/manifest.json: missing")
    _one_line_error(_cli("verify", "--src", str(synth_root / "npz"), "--dst", url, "-q"),
                    f"{url}/manifest.json: missing")


def test_a_manifest_path_escaping_the_prefix_is_one_line(remote, tmp_path):
    import fsspec

    fs, path = fsspec.core.url_to_fs(remote)
    m = json.loads(fs.cat(f"{path}/{MANIFEST}"))
    m["shards"][0]["path"] = "../../" + m["shards"][0]["path"]
    fs.pipe(f"{path}/{MANIFEST}", json.dumps(m).encode())
    line = _one_line_error(_cli("info", remote), f"{remote}/manifest.json: shards[0].path")
    assert "../../" in line
    _one_line_error(_cli("export", "--shards", remote, "--dst-npz", str(tmp_path / "o"), "-q"), "shards[0].path")
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """A second moto server that checks credentials (``INITIAL_NO_AUTH_ACTION_COUNT=2``: its first two
    requests, creating a bucket and putting a manifest, are let through; every later request signed
    with the dummy test credentials is refused with 403): (endpoint, shard URL)."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    boto3 = pytest.importorskip("boto3")
    proc, endpoint = start_moto(tmp_path_factory.mktemp("moto-locked") / "moto.log",
                                {"INITIAL_NO_AUTH_ACTION_COUNT": "2"})
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing-secret")
        client.create_bucket(Bucket="tpuprep-locked")
        client.put_object(Bucket="tpuprep-locked", Key="shards/manifest.json", Body=b"{}")
        yield endpoint, "s3://tpuprep-locked/shards"
    finally:
        stop_moto(proc)


def test_a_permission_error_is_one_line_naming_the_url(s3_env, locked, monkeypatch, tmp_path):
    """A real 403 from the S3 server (moto with credentials checked), not a simulated one."""
    endpoint, url = locked
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    import fsspec

    fsspec.filesystem("s3").clear_instance_cache()
    with pytest.raises(FatalError, match=rf"{url}/manifest.json: permission denied"):
        tpuprep.open_dataset(url)
    _one_line_error(_cli("info", url), f"{url}/manifest.json: permission denied")
    _one_line_error(_cli("export", "--shards", url, "--dst-npz", str(tmp_path / "o"), "-q"), "permission denied")
    assert not (tmp_path / "o").exists()


def test_a_request_refused_in_the_middle_of_a_read_is_not_called_corruption(remote, monkeypatch):
    """A GET denied (or a connection lost) after the dataset was opened is the store's one line, not
    'row group … is corrupt'."""
    import s3fs

    ds = tpuprep.open_dataset(remote)
    gid = ds.graph_ids("layout:xla:random")[0]
    ds.sample_configs(gid, 1)  # footers read; now every GET is refused
    original = s3fs.S3FileSystem._call_s3

    async def refused(fs, method, *args, **kwargs):
        if method == "get_object":
            raise PermissionError("Forbidden")
        return await original(fs, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", refused)
    with pytest.raises(FatalError, match=r"s3://.*\.parquet: permission denied") as info:
        ds.sample_configs(gid, 8, seed=1)
    assert not isinstance(info.value, BadShards)


def test_a_prefetched_file_serves_its_ranges_and_fetches_the_rest(bucket):
    from tpuprep.io.storage import resolve

    store = resolve(bucket)
    data = bytes(range(256)) * 40  # 10,240 bytes
    with store.open("blob", "wb") as fh:
        fh.write(data)
    f = store.open_shard_file("blob").prefetched([(100, 300), (5000, 5100)])
    for start, n in ((100, 200), (150, 10), (5000, 100), (0, 50), (250, 100), (10_200, 100), (4990, 20)):
        f.seek(start)
        assert f.read(n) == data[start:start + n], (start, n)
    assert f.seek(-10, 2) == len(data) - 10 and f.read() == data[-10:]


def test_the_remote_reading_benchmark_runs(synth_shards, s3_endpoint):
    """``python -m benchmarks.remote_reading`` (benchmarks/RESULTS.md §10) on the tiny shards: every
    way of reading is measured, and the reader's own fetches less than the configs shard per sample."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "benchmarks.remote_reading", str(synth_shards), "--samples", "2"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    results = {r["mode"]: r for r in json.loads(out.stdout)["results"]}
    assert set(results) == {"prefetch", "ranged", "arrow-filesystem"}
    used = results["prefetch"]
    assert 0 < used["warm_mean_range_bytes"] < used["configs_shard_bytes"]
