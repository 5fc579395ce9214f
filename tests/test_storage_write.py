"""Building shards into object storage (``--dst s3://…``) against a real S3-compatible server (moto,
``tests/s3server.py``): the same guarantees as a local build — nothing visible before the manifest,
``--resume`` after a kill, ``--overwrite`` removing only tpuprep's objects, the lock object, one-line
errors for a missing bucket or a refused request, byte-identical shards — and a Dask build whose
workers share no filesystem, plus run files with storage options whose secrets never leak."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from trees import reference_build, tiny_tree, tree_bytes

from benchmarks.dask_cluster import stop_sessions
from tpuprep.build import build
from tpuprep.errors import FatalError
from tpuprep.io import locks
from tpuprep.io.storage import resolve
from tpuprep.shards import destination
from tpuprep.shards.layout import LOCK, MANIFEST, STAGING

pytest.importorskip("s3fs", reason="s3fs is not installed")

TPUPREP = [sys.executable, "-c", "import sys; from tpuprep.cli import main; sys.exit(main())"]
START_TIMEOUT = 60.0


def objects(url: str) -> dict[str, bytes]:
    """Every object under ``url`` by path relative to it (a fresh listing)."""
    store = resolve(url)
    return {rel: store.read_bytes(rel) for rel in store.listing()}


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*TPUPREP, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def tiny_src(tmp_path_factory) -> Path:
    return tiny_tree(tmp_path_factory, "s3w-src", ["tile:xla", "layout:xla:random", "layout:nlp:default"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_src) -> Path:
    """A local serial build of ``tiny_src``."""
    return reference_build(tmp_path_factory, tiny_src, "s3w-ref")


# ------------------------------------------------------------------------------------- guarantees


def test_build_to_a_bucket_is_byte_identical_to_a_local_build(bucket, tiny_src, reference):
    url = f"{bucket}/shards/v1"
    report = build(tiny_src, url)
    got = objects(url)
    assert sorted(got) == sorted(tree_bytes(reference))  # no staging, no lock object left
    assert [k for k, v in tree_bytes(reference).items() if got[k] != v] == []
    assert report.manifest["shards"] and not report.quarantined
    assert not Path("s3:").exists() and not Path("s3:/").exists()  # never a local folder named s3:


def test_configs_shards_are_copied_inside_the_bucket_not_through_this_machine(bucket, tiny_src, reference,
                                                                             monkeypatch):
    """The merge places each configs part by a server-side copy (its shard id is in its footer already):
    no configs part is downloaded, and no configs shard uploaded, by the coordinating process."""
    from tpuprep.io.remote_store import RemoteStore

    calls: list[tuple[str, str, str]] = []

    def spy(name: str):
        real = getattr(RemoteStore, name)

        def call(self, a, b):
            calls.append((name, str(a), str(b)))
            return real(self, a, b)
        return call

    for name in ("get_file", "put_file", "copy"):
        monkeypatch.setattr(RemoteStore, name, spy(name))
    url = f"{bucket}/server-side"
    build(tiny_src, url)
    assert objects(url) == tree_bytes(reference)
    configs = sorted(s["path"] for s in json.loads(tree_bytes(reference)[MANIFEST])["shards"]
                     if "/configs/" in s["path"])
    assert configs and sorted(to for name, _, to in calls if name == "copy") == configs
    assert [c for c in calls if c[0] == "get_file" and c[1].endswith(".configs.parquet")] == []
    assert [c for c in calls if c[0] == "put_file" and c[2] in configs] == []


def test_local_worker_processes_write_to_the_bucket(bucket, tiny_src, reference):
    from tpuprep.runners import make_runner

    url = f"{bucket}/processes"
    runner = make_runner(2)
    try:
        build(tiny_src, url, runner=runner)
    finally:
        runner.close()
    assert objects(url) == tree_bytes(reference)


def test_a_file_url_is_a_local_folder(tmp_path, tiny_src, reference):
    build(tiny_src, f"file://{tmp_path}/out")
    assert tree_bytes(tmp_path / "out") == tree_bytes(reference)


def test_cli_build_to_a_bucket_and_refusals(bucket, tiny_src, reference):
    url = f"{bucket}/cli"
    dry = run_cli("build", "--src", str(tiny_src), "--dst", url, "--dry-run")
    assert dry.returncode == 0 and "would convert" in dry.stdout, dry.stderr
    assert objects(url) == {}  # a dry run writes nothing, not even the lock
    done = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q")
    assert done.returncode == 0, done.stderr
    assert objects(url) == tree_bytes(reference)
    again = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q")
    assert again.returncode == 2 and "is not empty" in again.stderr and url in again.stderr
    over = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q", "--overwrite")
    assert over.returncode == 0, over.stderr
    assert objects(url) == tree_bytes(reference)


def test_overwrite_deletes_only_tpuprep_objects(bucket, tiny_src, reference):
    url = f"{bucket}/mixed"
    build(tiny_src, url)
    store = resolve(url)
    store.write_bytes("notes/mine.txt", b"keep me")
    done = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q", "--overwrite")
    assert done.returncode == 2 and "notes/mine.txt" in done.stderr and "deletes only what it wrote" in done.stderr
    assert objects(url)["notes/mine.txt"] == b"keep me"
    assert objects(url)[MANIFEST] == (reference / MANIFEST).read_bytes()  # the build is untouched


def test_missing_bucket_is_one_line_exit_1_and_writes_nothing(s3_env, tiny_src):
    url = "s3://tpuprep-no-such-bucket-for-sure/shards"
    done = run_cli("build", "--src", str(tiny_src), "--dst", url)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "bucket s3://tpuprep-no-such-bucket-for-sure does not exist" in lines[0]
    assert "Traceback" not in done.stderr
    import fsspec

    assert not fsspec.filesystem("s3", skip_instance_cache=True).exists("tpuprep-no-such-bucket-for-sure")


def _moto_auth(endpoint: str, free_requests: float) -> None:
    """moto enforces credentials after ``free_requests`` more requests (a huge number: never)."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=str(free_requests).encode(),
                                     headers={"Content-Type": "text/plain"}, method="POST")
    urllib.request.urlopen(request, timeout=10).close()


def test_permission_error_is_one_line_exit_1_and_writes_nothing(bucket, s3_env, tiny_src):
    url = f"{bucket}/denied"
    _moto_auth(s3_env, 0)  # the test credentials are unknown to moto's IAM from now on
    try:
        done = run_cli("build", "--src", str(tiny_src), "--dst", url)
    finally:
        _moto_auth(s3_env, 1e12)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "permission denied" in lines[0], done.stderr
    assert objects(url) == {}
    assert "testing-secret" not in done.stderr + done.stdout


def _memory_dst() -> str:
    import uuid

    return f"memory://tpuprep-w-{uuid.uuid4().hex}/shards"


def test_only_storage_errors_become_the_dst_line(tiny_src, monkeypatch):
    """Issue #37 review: ``store_errors`` wraps a build to a URL and worded any third-party exception
    as ``--dst …: cannot be written``, the traceback lost. Storage's own error is still that one line;
    pyarrow's ``ArrowInvalid`` and a lost Dask connection (an ``OSError``) keep their type."""
    import pyarrow as pa
    from distributed.comm.core import CommClosedError

    from tpuprep import build as build_module

    def arrow(*_args, **_kwargs):
        pa.array([1, "a"])  # pyarrow's own ArrowInvalid, raised in pyarrow

    def comm(*_args, **_kwargs):
        raise CommClosedError("in <TCP (closed)>: Stream is closed")

    def denied(*_args, **_kwargs):
        raise PermissionError("Forbidden")

    url = _memory_dst()
    monkeypatch.setattr(build_module, "build_manifest", arrow)
    with pytest.raises(pa.ArrowInvalid):
        build(tiny_src, url, collections=["tile:xla"])
    monkeypatch.setattr(build_module, "build_manifest", comm)
    with pytest.raises(CommClosedError):
        build(tiny_src, url, collections=["tile:xla"], overwrite=True)
    monkeypatch.setattr(build_module, "build_manifest", denied)
    with pytest.raises(FatalError, match=f"^--dst {url}: permission denied: the credentials in use may not "
                                         "write it"):
        build(tiny_src, url, collections=["tile:xla"], overwrite=True)


def test_a_bug_checking_the_dst_is_not_blamed_on_its_storage_options(tiny_src, monkeypatch):
    """A ``TypeError`` raised by tpuprep while the destination is checked is a bug and keeps its
    traceback; it is not "cannot be reached with its storage options" (what botocore's own refusal of an
    option is: ``test_pipeline_files``)."""
    from tpuprep.io.remote_store import RemoteStore

    def buggy(store):
        return store.path(1)  # tpuprep's own TypeError

    monkeypatch.setattr(RemoteStore, "check_reachable", buggy)
    with pytest.raises(TypeError):
        build(tiny_src, _memory_dst(), collections=["tile:xla"])


def test_a_killed_build_publishes_nothing_and_resume_reuses_its_parts(bucket, tiny_src, reference):
    url = f"{bucket}/killed"
    crashed = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q", env={"TPUPREP_CRASH_AT": "part:4"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    left = objects(url)
    assert MANIFEST not in left and LOCK in left  # nothing published; the dead build's lock remains
    assert sum(name.startswith(f"{STAGING}/parts/") and name.endswith(".json") for name in left) >= 3
    plain = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q")
    assert plain.returncode == 2 and "--resume" in plain.stderr
    resumed = run_cli("build", "--src", str(tiny_src), "--dst", url, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["reused"] >= 3  # the killed build's finished parts
    assert objects(url) == tree_bytes(reference)


def test_a_killed_merge_is_finished_by_resume(bucket, tiny_src, reference):
    url = f"{bucket}/killed-merge"
    crashed = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q", env={"TPUPREP_CRASH_AT": "shard:2"})
    assert crashed.returncode == -signal.SIGKILL
    assert MANIFEST not in objects(url)
    resumed = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert objects(url) == tree_bytes(reference)


def test_the_lock_object_refuses_a_live_holder_and_takes_over_a_stale_one(bucket, tiny_src, reference):
    url = f"{bucket}/locked"
    store = resolve(url)
    live = {"owner": "x", "pid": 1, "host": "elsewhere.example", "started": "2026-01-01T00:00:00Z",
            "renewed": time.time()}
    store.write_bytes(LOCK, json.dumps(live).encode())
    busy = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q")
    assert busy.returncode == 2 and "being written by another tpuprep build" in busy.stderr
    assert "elsewhere.example" in busy.stderr and objects(url) == {LOCK: json.dumps(live).encode()}
    stale = live | {"renewed": time.time() - locks.LOCK_STALE_SECONDS - 60}
    store.write_bytes(LOCK, json.dumps(stale).encode())
    done = run_cli("build", "--src", str(tiny_src), "--dst", url, "-q", "--resume")
    assert done.returncode == 0, done.stderr
    assert objects(url) == tree_bytes(reference)  # taken over, then removed


def test_the_build_stops_before_publishing_when_its_lock_was_taken_over(bucket, tiny_src, monkeypatch):
    url = f"{bucket}/stolen"
    real = destination.Lock.acquire

    def acquire_then_lose(store):
        lock = real(store)
        store.write_bytes(LOCK, json.dumps({"owner": "thief", "renewed": time.time()}).encode())
        return lock

    monkeypatch.setattr(destination.Lock, "acquire", staticmethod(acquire_then_lose))

    with pytest.raises(FatalError, match="took over this build's lock"):
        build(tiny_src, url)
    assert MANIFEST not in objects(url)


# -------------------------------------------------------------------------- Dask, no shared files


@pytest.fixture(scope="module")
def s3_cluster(tmp_path_factory, s3_endpoint) -> Iterator[str]:
    """``dask scheduler`` + 2 ``dask worker`` subprocesses on 127.0.0.1, each worker in a working
    folder of its own with a temporary folder of its own, the S3 endpoint and test credentials in
    their environment. Yields the scheduler address."""
    import distributed

    tmp = tmp_path_factory.mktemp("s3w-cluster")
    scheduler_file = tmp / "scheduler.json"
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    env |= {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing-secret", "AWS_DEFAULT_REGION": "us-east-1"}
    procs: list[subprocess.Popen] = []

    def start(name: str, cwd: Path, *args: str, extra: dict | None = None) -> subprocess.Popen:
        cwd.mkdir(parents=True, exist_ok=True)
        log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115  (closed with the process below)
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                env=env | (extra or {}), start_new_session=True)
        proc.log = log  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    try:
        scheduler = start("scheduler", tmp / "scheduler", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                          "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file))
        deadline = time.monotonic() + START_TIMEOUT
        while not scheduler_file.exists() and scheduler.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scheduler_file.exists(), (tmp / "scheduler.log").read_text()
        for i in range(2):
            own = tmp / f"worker{i}"
            (own / "tmp").mkdir(parents=True)
            start(f"worker{i}", own, "distributed.cli.dask_worker", "--scheduler-file", str(scheduler_file),
                  "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard", "--name", f"w{i}",
                  "--death-timeout", "60", "--local-directory", str(own), extra={"TMPDIR": str(own / "tmp")})
        with distributed.Client(scheduler_file=str(scheduler_file), timeout=START_TIMEOUT,
                                set_as_default=False) as client:
            client.wait_for_workers(2, timeout=START_TIMEOUT)
            cwds = client.run(os.getcwd)
            assert len(set(cwds.values())) == 2  # every worker in a folder of its own
        yield json.loads(scheduler_file.read_text())["address"]
    finally:
        stop_sessions(procs)


def test_dask_workers_write_their_parts_straight_to_the_bucket(bucket, s3_cluster, tiny_src, reference,
                                                               monkeypatch, tmp_path):
    import tpuprep.build
    from tpuprep.runners import make_runner

    # this process must not write a part or a shard: the workers (their own imports, unpatched) do
    def not_here(*args, **kwargs):
        raise AssertionError("the client wrote shard data")

    for name in ("write_parts", "merge_parts"):
        monkeypatch.setattr(tpuprep.build, name, not_here)
    url = f"{bucket}/dask"
    runner = make_runner(scheduler=s3_cluster, timeout=START_TIMEOUT)
    try:
        report = build(tiny_src, url, runner=runner)
    finally:
        runner.close()
    assert not report.quarantined
    assert objects(url) == tree_bytes(reference)


# ------------------------------------------------------------------------------------- run files


def test_run_file_storage_options_reach_the_store_and_never_leak(bucket, s3_endpoint, tiny_src, reference,
                                                                tmp_path, monkeypatch):
    secret = "s3cr3t-VALUE-never-shown-9f2c"
    # no AWS_* credentials in the environment: the run file's options are the only way in
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TPUPREP_TEST_SECRET", secret)
    url = f"{bucket}/from-run-file"
    run_file = tmp_path / "s3.toml"
    run_file.write_text(f'src = "{tiny_src}"\ndst = "{url}"\n[dst_storage_options]\nkey = "testing"\n'
                        f'secret = "$TPUPREP_TEST_SECRET"\nendpoint_url = "{s3_endpoint}"\n'
                        '[cluster]\ntype = "serial"\n')
    log = tmp_path / "run.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    shown = subprocess.run([*TPUPREP, "run", str(run_file), "--log-file", str(log), "-v"], capture_output=True,
                           text=True, timeout=300, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "storage options: endpoint_url, key, secret" in shown.stdout
    dry = subprocess.run([*TPUPREP, "run", str(run_file), "--dry-run"], capture_output=True, text=True,
                         timeout=300, env=env)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    written = objects(url)
    assert written == tree_bytes(reference)
    everything = [shown.stdout, shown.stderr, dry.stdout, dry.stderr, log.read_text(),
                  *(v.decode("utf-8", "replace") for v in written.values())]
    assert [i for i, text in enumerate(everything) if secret in text] == []


def test_run_file_storage_options_need_a_url(tmp_path):
    from tpuprep.pipeline import PipelineError, parse_pipeline

    with pytest.raises(PipelineError, match=r"\[dst_storage_options\] applies only when dst is an object-store URL"):
        parse_pipeline('src = "a"\ndst = "b"\n[dst_storage_options]\nkey = "k"\n', tmp_path / "x.toml")
    p = parse_pipeline('src = "a"\ndst = "s3://b/p"\n[dst_storage_options]\nkey = "k"\nsecret = "s"\n',
                       tmp_path / "x.toml")
    assert p.dst == "s3://b/p" and p.dst_storage_options == {"key": "k", "secret": "s"}
    assert "secret" in p.describe() and "'s'" not in p.describe() and "= s" not in p.describe()
    assert "'s'" not in repr(p)
