"""Builds on a real Dask cluster (scheduler + 2 workers as subprocesses on 127.0.0.1) and on local
process pools that lose a worker mid-build: the shards and manifest must be byte-identical to a
local serial build of the same inputs."""

from __future__ import annotations

import functools
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import distributed
import pytest
from click.testing import CliRunner
from trees import poll, reference_build, tiny_tree, tree_bytes

from benchmarks.dask_cluster import stop_sessions
from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.runners.local import ProcessRunner, WorkersLost

START_TIMEOUT = 60.0


# ----------------------------------------------------------------------------------------- helpers


def assert_same_build(dst: Path, reference: Path) -> None:
    got, want = tree_bytes(dst), tree_bytes(reference)
    assert sorted(got) == sorted(want)
    different = [name for name in want if got[name] != want[name]]
    assert different == []
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["quarantine"] == []
    assert any(s["path"].endswith(".parquet") for s in manifest["shards"])


@pytest.fixture(scope="module")
def tiny_src(tmp_path_factory) -> Path:
    """The synthetic 'tiny' tree (every collection and split)."""
    return tiny_tree(tmp_path_factory, "dask-src")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_src) -> Path:
    """A local serial build of ``tiny_src`` with the default options."""
    return reference_build(tmp_path_factory, tiny_src, "dask-reference")


@dataclass
class Cluster:
    address: str
    scheduler_file: Path
    client: object  # distributed.Client
    procs: list[subprocess.Popen]

    def executed(self) -> int:
        """Tasks executed so far by the current worker processes."""
        counts = self.client.run(lambda dask_worker: dask_worker.state.executed_count)
        return sum(counts.values())

    def worker_pids(self) -> dict[str, int]:
        return self.client.run(os.getpid)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """``dask scheduler`` and two ``dask worker --nthreads 1`` processes on 127.0.0.1."""
    tmp = tmp_path_factory.mktemp("dask-cluster")
    scheduler_file = tmp / "scheduler.json"
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    # the scheduler and workers can import this module, for the test-only task functions below
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
    procs: list[subprocess.Popen] = []
    client = None

    def start(name: str, *args: str) -> subprocess.Popen:
        log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115  (closed with the process below)
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        proc.log = log  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    try:
        scheduler = start("scheduler", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                          "--no-dashboard", "--scheduler-file", str(scheduler_file))
        poll(lambda: scheduler_file.exists() or scheduler.poll() is not None, START_TIMEOUT, "the scheduler file")
        assert scheduler.poll() is None, (tmp / "scheduler.log").read_text()
        for i in range(2):
            start(f"worker{i}", "distributed.cli.dask_worker", "--scheduler-file", str(scheduler_file),
                  "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard", "--name", f"w{i}",
                  "--death-timeout", "60")
        client = distributed.Client(scheduler_file=str(scheduler_file), timeout=START_TIMEOUT,
                                    set_as_default=False)
        client.wait_for_workers(2, timeout=START_TIMEOUT)
        yield Cluster(json.loads(scheduler_file.read_text())["address"], scheduler_file, client, procs)
    finally:
        if client is not None:
            client.close()
        stop_sessions(procs)  # workers first, then the scheduler


# ---------------------------------------------------------------------------- worker preparation


def test_workers_are_thread_capped_and_warmed(cluster):
    """First in this module: no task has run on the workers yet, so only the plugin can have loaded
    the kernels."""
    from tpuprep.runners.dask_cluster import DaskRunner

    runner = DaskRunner(address=cluster.address)
    try:
        assert runner.workers == 2

        def state() -> tuple:
            import pyarrow as pa

            from tpuprep.kernels.prune import hop_distance  # a Numba dispatcher

            return os.environ.get("NUMBA_NUM_THREADS"), os.environ.get("POLARS_MAX_THREADS"), pa.cpu_count(), \
                len(hop_distance.signatures)

        found = poll(lambda: (lambda s: s if all(v[3] for v in s.values()) else None)(cluster.client.run(state)),
                     START_TIMEOUT, "the worker plugin to warm every worker")
        assert set(found.values()) == {("1", "1", 1, found[next(iter(found))][3])}
    finally:
        runner.close()


# ------------------------------------------------------------------------------- the CLI on Dask


def test_cli_build_on_scheduler_matches_local_build(tmp_path, cluster, tiny_src, reference):
    before = cluster.executed()
    dst = tmp_path / "shards"
    result = CliRunner().invoke(main, ["build", "--src", str(tiny_src), "--dst", str(dst),
                                       "--scheduler", cluster.address, "-q"])
    assert result.exit_code == 0, result.output
    assert cluster.executed() > before  # the workers did the work, not this process
    assert_same_build(dst, reference)


@pytest.mark.parametrize("how", ["scheduler-file", "DASK_SCHEDULER_ADDRESS"])
def test_cli_finds_the_cluster_by_file_or_environment(tmp_path, cluster, tiny_src, reference, how):
    dst = tmp_path / "shards"
    args = ["build", "--src", str(tiny_src), "--dst", str(dst), "-q"]
    env = {}
    if how == "scheduler-file":
        args += ["--scheduler-file", str(cluster.scheduler_file)]
    else:
        env["DASK_SCHEDULER_ADDRESS"] = cluster.address
    before = cluster.executed()
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    assert cluster.executed() > before
    assert_same_build(dst, reference)


# ------------------------------------------------------------------------ cluster checks


def test_version_mismatch_is_reported_clearly(cluster):
    from tpuprep.runners.dask_cluster import ClusterError, DaskRunner

    def set_version(v: str | None = None) -> str:
        import tpuprep

        old = tpuprep.__version__
        tpuprep.__version__ = v or old
        return old

    original = next(iter(cluster.client.run(set_version).values()))
    try:
        cluster.client.run(set_version, "9.9.9")
        with pytest.raises(ClusterError) as info:
            DaskRunner(address=cluster.address)
        message = str(info.value)
        assert "tpuprep 9.9.9 (client has " in message
        assert all(addr in message for addr in cluster.worker_pids())
    finally:
        cluster.client.run(set_version, original)
    DaskRunner(address=cluster.address).close()  # and fine again


def test_same_version_with_other_source_files_only_warns(cluster):
    from tpuprep.runners.dask_cluster import DaskRunner, SourceMismatchWarning

    def set_digest(value: str | None) -> None:
        import tpuprep.runners.dask_cluster as d

        d.source_digest = (lambda: value) if value else d._real_source_digest  # type: ignore[attr-defined]

    def keep_real() -> None:
        import tpuprep.runners.dask_cluster as d

        d._real_source_digest = getattr(d, "_real_source_digest", d.source_digest)  # type: ignore[attr-defined]

    cluster.client.run(keep_real)
    try:
        cluster.client.run(set_digest, "0123456789ab")
        with pytest.warns(SourceMismatchWarning, match=r"tpuprep source 0123456789ab \(client has "):
            DaskRunner(address=cluster.address).close()
    finally:
        cluster.client.run(set_digest, None)


def test_task_checks_the_worker_environment():
    from tpuprep.runners.dask_cluster import ClusterError, environment, run_task

    expected = environment()
    assert run_task(expected, max, 2, 3) == 3
    with pytest.raises(ClusterError, match=r"pyarrow \d+\S* \(client has 0\.0\.1\)"):
        run_task({**expected, "pyarrow": "0.0.1"}, max, 2, 3)


def test_workers_must_see_the_data(cluster, tmp_path):
    from tpuprep.runners.dask_cluster import ClusterError, DaskRunner

    runner = DaskRunner(scheduler_file=cluster.scheduler_file)
    try:
        runner.check_paths(tmp_path)  # seen by everyone
        with pytest.raises(ClusterError, match=r"cannot see .*not-shared"):
            runner.check_paths(tmp_path / "not-shared")
    finally:
        runner.close()


def test_unreachable_scheduler_is_one_clear_error(tmp_path):
    from tpuprep.runners.dask_cluster import ClusterError, DaskRunner

    with pytest.raises(ClusterError, match="cannot connect"):
        DaskRunner(address="tcp://127.0.0.1:9", connect_timeout=1)
    with pytest.raises(ClusterError, match=r"scheduler file .*missing\.json does not exist"):
        DaskRunner(scheduler_file=tmp_path / "missing.json", connect_timeout=0.5)


def _fails_once(marker: str) -> str:
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise OSError("flaky filesystem")
    return "ok"


def test_failed_tasks_are_retried(cluster, tmp_path):
    from tpuprep.runners.dask_cluster import DaskRunner

    runner = DaskRunner(address=cluster.address, retries=1)
    try:
        futs = [runner.submit(_fails_once, str(tmp_path / "marker"))]
        assert [f.result() for f in runner.as_completed(futs)] == ["ok"]
    finally:
        runner.close()
    runner = DaskRunner(address=cluster.address, retries=0)
    try:
        futs = [runner.submit(_fails_once, str(tmp_path / "marker-2"))]
        with pytest.raises(OSError, match="flaky"):
            [f.result() for f in runner.as_completed(futs)]
    finally:
        runner.close()


def _killed_worker() -> None:
    from types import SimpleNamespace

    from distributed.scheduler import KilledWorker

    raise KilledWorker("task", SimpleNamespace(address="tcp://127.0.0.1:1"), 3)


def test_a_file_that_keeps_killing_workers_is_quarantined(cluster, tiny_src, tmp_path):
    """``KilledWorker`` (the scheduler gave up on a task) quarantines that task's files; the batch goes on."""
    from tpuprep.build import lost_batch_result
    from tpuprep.inputs import discover
    from tpuprep.options import BuildOptions
    from tpuprep.runners.dask_cluster import DaskRunner

    inputs = discover(tiny_src)[0][:2]
    opts = BuildOptions()
    runner = DaskRunner(address=cluster.address, retries=0)
    try:
        # as if the first had been process_batch on one file, the second on two
        futs = [runner.submit(_killed_worker, on_lost=functools.partial(lost_batch_result, inputs[:1], opts)),
                runner.submit(_killed_worker, on_lost=functools.partial(lost_batch_result, inputs, opts))]
        results = sorted((f.result() for f in runner.as_completed(futs)), key=lambda d: len(d["records"]))
    finally:
        runner.close()
    one, two = results
    assert one["parts"] is None and [r["path"] for r in one["records"]] == [inputs[0].relpath]
    record = one["records"][0]
    assert record["status"] == "quarantined" and record["graph_id"] == inputs[0].graph_id
    assert record["error"].startswith("the workers converting this file died 4 times (last on tcp://127.0.0.1:1)")
    assert [r["path"] for r in two["records"]] == [i.relpath for i in inputs]
    assert all("converting 2 files together" in r["error"] for r in two["records"])


# ------------------------------------------------------------------------------- losing a worker


def test_build_survives_a_killed_dask_worker(tmp_path, cluster, tiny_src, reference):
    """SIGKILL the busiest worker as soon as the first file is done; its tasks are rescheduled."""
    from tpuprep.runners.dask_cluster import DaskRunner

    total = len(list(tiny_src.rglob("*.npz")))
    killed: list[tuple[int, int]] = []
    runner = DaskRunner(scheduler_file=cluster.scheduler_file)

    def progress(event: str, info: dict) -> None:
        if event != "file" or killed:
            return
        processing = cluster.client.processing()
        victim = max(processing, key=lambda addr: len(processing[addr]))
        pid = cluster.worker_pids()[victim]
        os.kill(pid, signal.SIGKILL)
        killed.append((pid, len(processing[victim])))

    try:
        report = build(tiny_src, tmp_path / "shards", runner=runner, progress=progress)
    finally:
        runner.close()
    assert killed, "the build finished before a worker could be killed"
    pid, busy = killed[0]
    assert busy >= 1, "the killed worker had no task in flight"
    assert len(report.records) == total
    assert_same_build(tmp_path / "shards", reference)
    # the nanny brings the worker back; later tests (if any) get two workers again
    cluster.client.wait_for_workers(2, timeout=START_TIMEOUT)
    assert pid not in cluster.worker_pids().values()


# ------------------------------------------------------------------------- local process pools


def test_process_runner_survives_a_killed_worker(tmp_path, tiny_src, reference):
    runner = ProcessRunner(2)
    killed: list[int] = []

    def progress(event: str, info: dict) -> None:
        if event == "file" and not killed:
            pids = runner.worker_pids()
            assert pids, "no worker processes"
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    try:
        report = build(tiny_src, tmp_path / "shards", runner=runner, progress=progress)
    finally:
        runner.close()
    assert killed and runner.restarts == 1  # the kill broke the pool, and one fresh pool finished the job
    assert len(report.records) == len(list(tiny_src.rglob("*.npz")))
    assert_same_build(tmp_path / "shards", reference)


def test_process_runner_delivers_task_errors_and_gives_up_after_bounded_restarts():
    runner = ProcessRunner(1, max_restarts=1)
    try:
        tasks = [runner.submit(int, "12"), runner.submit(int, "x")]
        results = {}
        for t in runner.as_completed(tasks):
            try:
                results[t.args[0]] = t.result()
            except ValueError as exc:  # a task's own error is delivered, not retried
                results[t.args[0]] = type(exc).__name__
        assert results == {"12": 12, "x": "ValueError"}
        assert runner.restarts == 0
        task = runner.submit(os._exit, 3)  # every attempt kills its worker process
        with pytest.raises(WorkersLost, match="died 2 times"):
            list(runner.as_completed([task]))
        assert runner.restarts == 2
    finally:
        runner.close()


def manager_threads() -> list:
    """The live ``concurrent.futures`` pool manager threads of this process."""
    from concurrent.futures.process import _ExecutorManagerThread

    return [t for t in threading.enumerate() if isinstance(t, _ExecutorManagerThread) and t.is_alive()]


def test_process_runner_close_leaves_no_pool_thread_behind():
    """close() with tasks running, and pools retired after a worker died, leave no manager thread
    alive: one alive at interpreter exit races concurrent.futures' exit hook, which then prints
    'Exception ignored … Bad file descriptor' under the user's one error line (an interrupted build)."""
    before = set(manager_threads())
    retiring = ProcessRunner(1, max_restarts=1)
    try:  # every attempt kills its worker: the first pool is retired, the second breaks too
        with pytest.raises(WorkersLost):
            list(retiring.as_completed([retiring.submit(os._exit, 3)]))
    finally:
        retiring.close()
    busy = ProcessRunner(1)
    try:
        task = busy.submit(time.sleep, 30)
        while not busy.worker_pids():
            time.sleep(0.05)
        time.sleep(1.0)  # the task is running
        assert not task.done()
    finally:
        busy.close()  # kills the worker
    assert set(manager_threads()) - before == set()


def test_workers_tune_malloc_so_large_blocks_are_reused(monkeypatch):
    """Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which makes glibc unmap every
    freed block over 128 KB; warm_worker (pool initializer and Dask plugin) fixes both thresholds."""
    import platform

    from tpuprep.runners import worker as executors

    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert executors.tune_malloc() is True
    calls = []
    monkeypatch.setattr(executors, "tune_malloc", lambda: calls.append(1) or True)
    monkeypatch.setattr(executors, "cap_threads", lambda threads: None)
    executors.warm_worker(1)
    assert calls == [1]
    assert gc.get_freeze_count() > 10_000  # modules and kernels frozen out of the collector's walks


def test_cli_build_tunes_malloc_only_when_it_converts_in_its_own_process(monkeypatch, tiny_src, tmp_path):
    from tpuprep.runners import worker as executors

    calls = []
    monkeypatch.setattr(executors, "tune_malloc", lambda: calls.append(1) or True)
    result = CliRunner().invoke(main, ["build", "--src", str(tiny_src), "--dst", str(tmp_path / "a"), "-q"])
    assert result.exit_code == 0, result.output
    assert calls == [1]
    assert gc.get_freeze_count() > 10_000  # the serial path is a converter: its heap is frozen too
    gc.unfreeze()
    # with worker processes the workers tune themselves (warm_worker); this process is left alone
    result = CliRunner().invoke(main, ["build", "--src", str(tiny_src), "--dst", str(tmp_path / "b"), "-q",
                                       "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert calls == [1]
    assert gc.get_freeze_count() == 0
