"""Issue 11 (9, 10, 13): hostile faults end in bounded time with one clear line, never a
traceback, and leave no process behind.

- Dask: a cluster that loses every worker or its scheduler mid-build, a ``--scheduler`` that is a
  silent TCP server, an HTTP server or not an address at all (real ``dask scheduler`` / ``dask
  worker`` subprocesses and servers on 127.0.0.1; waits kept to seconds with
  ``TPUPREP_DASK_TIMEOUT`` or the run file's ``[cluster] timeout``).
- Local pools: a ``--workers 2`` build whose parent is SIGKILLed, SIGTERMed or Ctrl-C'd leaves no
  pool worker or resource tracker alive; an interrupted build is finished byte-identically by
  ``--resume``.
- Disk full / read-only destination, shard folders without a (valid) manifest, a NUL byte in a
  run-file path, bad ``TPUPREP_INFLATE`` / ``TPUPREP_CRASH_AT`` values, other commands' OS errors.
"""

from __future__ import annotations

import errno
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write
from trees import poll, tree_bytes

from tpuprep.cli import main

START_TIMEOUT = 60.0
CLI = "import sys; from tpuprep.cli import main; sys.exit(main())"


# ----------------------------------------------------------------------------------------- helpers


def one_error_line(stderr: str) -> str:
    """The single non-empty line of ``stderr``, which must start with ``error: ``."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def cli_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "TPUPREP_CRASH_AT",
            "TPUPREP_INFLATE",
            "TPUPREP_DASK_TIMEOUT",
            "DASK_SCHEDULER_ADDRESS",
        )
    }
    return env | extra


class Cli:
    """``tpuprep ARGS`` as a subprocess. Its output goes to files, not pipes: a pipe would stay open
    (and reading it block) as long as any orphaned child of the command lives."""

    def __init__(self, logs: Path, *args: str, session: bool = False, **env: str):
        """``session``: in a process group of its own, with Ctrl-C's default meaning (a shell's
        background jobs, so possibly this test run, ignore SIGINT, and children inherit that)."""
        logs.mkdir(parents=True, exist_ok=True)
        stamp = time.monotonic_ns()
        self.out, self.err = logs / f"cli-{stamp}.out", logs / f"cli-{stamp}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CLI, *args],
                env=cli_env(**env),
                stdout=out,
                stderr=err,
                start_new_session=session,
                preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
                if session
                else None,
            )
        self.pid = self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float) -> subprocess.CompletedProcess:
        """Wait for the command (killing it after ``timeout`` s, which fails the test)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"tpuprep still running after {timeout} s:\n{self.err.read_text()[-3000:]}")
        return subprocess.CompletedProcess(
            self.proc.args, self.proc.returncode, self.out.read_text(), self.err.read_text()
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_cli(
    logs: Path, *args: str, timeout: float = 60, **env: str
) -> tuple[subprocess.CompletedProcess, float]:
    """``tpuprep ARGS`` to completion; the result and the wall time it took."""
    started = time.monotonic()
    result = Cli(logs, *args, **env).wait(timeout)
    return result, time.monotonic() - started


def first_part_done(dst: Path) -> bool:
    """Has the build in ``dst`` finished at least one file (a sidecar under .tpuprep/parts)?"""
    return any((dst / ".tpuprep" / "parts").rglob("*.json"))


def children(pid: int) -> list:
    """The live descendants of ``pid`` (psutil.Process objects)."""
    psutil = pytest.importorskip("psutil")
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(procs: list) -> list:
    """The processes of ``procs`` that still run (zombies count as gone)."""
    import psutil

    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            pass
    return left


def describe(procs: list) -> str:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid}: {' '.join(p.cmdline())[:160]}")
        except Exception:  # gone meanwhile
            out.append(str(p.pid))
    return "\n".join(out)


def pool_processes(pid: int) -> list:
    """``pid``'s spawned pool workers and resource tracker, once both workers exist."""
    kids = children(pid)
    workers = [p for p in kids if "spawn_main" in " ".join(p.cmdline())]
    return (
        kids
        if len(workers) >= 2 and any("resource_tracker" in " ".join(p.cmdline()) for p in kids)
        else []
    )


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    """44 small files (40 layout tasks): a build of a few seconds, to be hit mid-way."""
    root = tmp_path_factory.mktemp("hostile") / "npz"
    for i in range(40):
        write(root, f"layout/xla/random/train/g{i:02d}.npz", layout_arrays(i, n=60, c=3000))
    for i in range(4):
        write(root, f"tile/xla/train/t{i}.npz", tile_arrays(i))
    return root


@pytest.fixture(scope="module")
def clean(tmp_path_factory, src) -> dict[str, bytes]:
    """The bytes of an uninterrupted serial build of ``src``."""
    from tpuprep.build import build

    dst = tmp_path_factory.mktemp("hostile-clean") / "shards"
    build(src, dst)
    return tree_bytes(dst)


def resume_serially(src: Path, dst: Path) -> None:
    result = CliRunner().invoke(
        main, ["build", "--src", str(src), "--dst", str(dst), "--resume", "-q"]
    )
    assert result.exit_code == 0, result.output


# ------------------------------------------------------------------------------ Dask clusters (9)


@dataclass
class DaskCluster:
    """A ``dask scheduler`` and ``dask worker --no-nanny`` processes (own process groups)."""

    root: Path
    scheduler: subprocess.Popen | None = None
    workers: list[subprocess.Popen] = field(default_factory=list)
    address: str = ""

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        env = cli_env()
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115  (closed in stop())
        proc = subprocess.Popen(
            [sys.executable, "-m", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        proc.log = log  # type: ignore[attr-defined]
        return proc

    def start(self, workers: int) -> DaskCluster:
        import distributed

        scheduler_file = self.root / "scheduler.json"
        self.scheduler = self._start(
            "scheduler",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            str(scheduler_file),
        )

        def address() -> str | None:
            try:
                return json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):  # not written (completely) yet
                assert self.scheduler.poll() is None, (self.root / "scheduler.log").read_text()
                return None

        self.address = poll(address, START_TIMEOUT, "the scheduler")
        for i in range(workers):
            self.workers.append(
                self._start(
                    f"worker{i}",
                    "distributed.cli.dask_worker",
                    self.address,
                    "--nthreads",
                    "1",
                    "--host",
                    "127.0.0.1",
                    "--no-dashboard",
                    "--no-nanny",
                    "--death-timeout",
                    "30",
                    "--name",
                    f"w{i}",
                )
            )
        with distributed.Client(
            self.address, timeout=START_TIMEOUT, set_as_default=False
        ) as client:
            client.wait_for_workers(workers, timeout=START_TIMEOUT)
        return self

    def kill_workers(self) -> None:
        for proc in self.workers:
            os.killpg(proc.pid, signal.SIGKILL)

    def kill_scheduler(self) -> None:
        os.killpg(self.scheduler.pid, signal.SIGKILL)

    def stop(self) -> None:
        procs = [*self.workers, *([self.scheduler] if self.scheduler else [])]
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.wait()
            proc.log.close()


@contextmanager
def dask_cluster(root: Path, workers: int = 2) -> Iterator[DaskCluster]:
    root.mkdir(parents=True, exist_ok=True)
    cluster = DaskCluster(root)
    try:
        yield cluster.start(workers)
    finally:
        cluster.stop()


@pytest.mark.parametrize("lose", ["workers", "scheduler"])
def test_dask_build_that_loses_its_cluster_ends_with_one_line(tmp_path, src, clean, lose):
    """Every worker (or the scheduler) SIGKILLed once the first file is done: the build stops within
    a bound with one line and exit code 1 (it hung for ever, or printed a 62-line CommClosedError);
    ``--resume`` then finishes it byte-identically."""
    dst = tmp_path / "shards"
    with dask_cluster(tmp_path / "cluster") as cluster:
        proc = Cli(tmp_path, "build", "--src", str(src), "--dst", str(dst), "-q", "--scheduler",
                   cluster.address, TPUPREP_DASK_TIMEOUT="2")
        try:
            poll(
                lambda: first_part_done(dst) or proc.poll() is not None,
                START_TIMEOUT,
                "the first file",
            )
            assert proc.poll() is None, "the build ended before the cluster could be broken"
            cluster.kill_workers() if lose == "workers" else cluster.kill_scheduler()
            killed = time.monotonic()
            result = proc.wait(timeout=30)
            elapsed = time.monotonic() - killed
        finally:
            proc.stop()
    assert result.returncode == 1, result.stderr
    line = one_error_line(result.stderr)
    if lose == "workers":
        assert f"the Dask cluster at {cluster.address} has had no workers for 2 s" in line
    else:
        assert f"lost the Dask scheduler at {cluster.address}" in line
    assert "--resume" in line
    assert elapsed < 15, f"took {elapsed:.1f} s after the kill"
    assert not (dst / "manifest.json").exists()
    resume_serially(src, dst)
    assert tree_bytes(dst) == clean


@contextmanager
def silent_server() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never says anything."""
    sock = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for s in [*held, sock]:
            s.close()


@contextmanager
def http_server() -> Iterator[str]:
    """A plain HTTP server on 127.0.0.1, addressed as if it were a Dask scheduler."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def closed_port() -> Iterator[str]:
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    yield f"tcp://127.0.0.1:{port}"


@contextmanager
def literally(address: str) -> Iterator[str]:
    yield address


@pytest.mark.parametrize(
    ("server", "code", "says"),
    [
        (silent_server, 1, "no Dask scheduler answered at tcp://127.0.0.1:"),
        (http_server, 1, "no Dask scheduler answered at tcp://127.0.0.1:"),
        (closed_port, 1, "cannot connect to Dask scheduler at tcp://127.0.0.1:"),
        (
            lambda: literally("not-a-url"),
            2,
            "--scheduler 'not-a-url' is not a Dask scheduler address",
        ),
        (lambda: literally("http://127.0.0.1:8786"), 2, "is not a Dask scheduler address"),
    ],
    ids=["silent-tcp", "http", "closed-port", "not-a-url", "http-scheme"],
)
def test_scheduler_that_is_not_one_is_one_line_in_bounded_time(tmp_path, src, server, code, says):
    """A silent TCP server or an HTTP server hung the build for ever; ``not-a-url`` took 62 s and
    printed tracebacks."""
    with server() as address:
        result, elapsed = run_cli(
            tmp_path,
            "build",
            "--src",
            str(src),
            "--dst",
            str(tmp_path / "out"),
            "-q",
            "--scheduler",
            address,
            timeout=40,
            TPUPREP_DASK_TIMEOUT="2",
        )
    assert result.returncode == code, result.stderr
    assert says in one_error_line(result.stderr)
    assert elapsed < 25
    assert not (tmp_path / "out").exists()  # nothing was started


def test_run_file_dask_waits_are_bounded_by_its_timeout(tmp_path, src):
    run = tmp_path / "run.toml"
    with silent_server() as address:
        run.write_text(
            f'src = "{src}"\ndst = "out"\n[cluster]\nscheduler = "{address}"\ntimeout = 1\n'
        )
        result, elapsed = run_cli(tmp_path, "run", str(run), "-q", timeout=30)
    assert result.returncode == 1, result.stderr
    assert f"no Dask scheduler answered at {address} within 1 s" in one_error_line(result.stderr)
    assert elapsed < 20
    run.write_text(f'src = "{src}"\ndst = "out"\n[cluster]\nscheduler = "not-a-url"\n')
    result = CliRunner().invoke(main, ["run", str(run), "-q"])
    assert result.exit_code == 2
    assert "[cluster.scheduler] 'not-a-url' is not a Dask scheduler address" in one_error_line(
        result.stderr
    )


def test_dask_runner_stops_waiting_when_no_worker_is_left():
    """The mid-build watchdog on its own: a runner whose cluster has no workers raises after
    ``no_workers_timeout`` (the scheduler being reachable)."""
    from tpuprep.runners.dask_cluster import ClusterError, DaskRunner

    runner = DaskRunner.__new__(
        DaskRunner
    )  # the check only needs a client, an address and the limit
    runner.address, runner.no_workers_timeout, runner.connect_timeout = (
        "tcp://127.0.0.1:1",
        0.3,
        1.0,
    )
    runner._workerless_since = None

    class Client:
        status = "running"
        scheduler = type("rpc", (), {"identity": staticmethod(lambda n_workers: None)})()

        def sync(self, fn, *args, callback_timeout=None, **kwargs):
            return {"n_workers": workers}

    runner.client = Client()
    workers = 0
    runner._check_cluster(3)
    time.sleep(0.35)
    with pytest.raises(ClusterError, match=r"has had no workers for 0.3 s \(3 tasks unfinished\)"):
        runner._check_cluster(3)
    workers = 1
    runner._check_cluster(3)  # a worker came back: the clock restarts
    assert runner._workerless_since is None
    Client.status = "closed"
    with pytest.raises(ClusterError, match=r"lost the Dask scheduler at tcp://127\.0\.0\.1:1"):
        runner._check_cluster(3)


# --------------------------------------------------------------------- local process pools (10)


def test_sigkilled_parent_leaves_no_pool_worker_or_resource_tracker(tmp_path, src):
    pytest.importorskip("psutil")
    proc = Cli(
        tmp_path, "build", "--src", str(src), "--dst", str(tmp_path / "out"), "-q", "--workers", "2"
    )
    kids: list = []
    try:
        kids = poll(
            lambda: pool_processes(proc.pid) or (proc.poll() is not None and ["ended"]),
            START_TIMEOUT,
            "two pool workers and the resource tracker",
        )
        assert proc.poll() is None, "the build ended before its parent could be killed"
        proc.stop()  # SIGKILL
        poll(lambda: not alive(kids), 5, "the pool processes to exit", interval=0.1)
    finally:
        proc.stop()
        for p in alive([k for k in kids if k != "ended"]):
            p.kill()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_interrupt_stops_a_pool_build_cleanly_and_resume_finishes_it(tmp_path, src, clean, how):
    """SIGTERM to the parent (a job scheduler, ``kill``) or SIGINT to its process group (Ctrl-C in a
    terminal): one line, exit 1, no process left, and ``--resume`` finishes the build."""
    pytest.importorskip("psutil")
    dst = tmp_path / "out"
    proc = Cli(tmp_path, "build", "--src", str(src), "--dst", str(dst), "-q", "--workers", "2",
               session=how == "SIGINT")
    kids: list = []
    try:
        poll(
            lambda: first_part_done(dst) or proc.poll() is not None, START_TIMEOUT, "the first file"
        )
        assert proc.poll() is None, "the build ended before it could be interrupted"
        kids = children(proc.pid)
        if how == "SIGTERM":
            proc.proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        result = proc.wait(timeout=15)
        poll(lambda: not alive(kids), 5, "the pool processes to exit", interval=0.1)
    finally:
        proc.stop()
        for p in alive(kids):
            p.kill()
    assert result.returncode == 1, result.stderr
    line = one_error_line(result.stderr)
    assert f"interrupted ({how})" in line and "--resume" in line
    assert not (dst / "manifest.json").exists()
    resume_serially(src, dst)
    assert tree_bytes(dst) == clean


WATCHED = """
import os, subprocess, sys, time
code = ("import os, time; from tpuprep.runners.local import follow_parent; "
        "follow_parent(int(os.environ['PARENT']), pdeathsig=False, interval=0.05); "
        "print('ready', flush=True); time.sleep(60)")
env = {**os.environ, "PARENT": str(os.getpid())}
child = subprocess.Popen([sys.executable, "-c", code], env=env)
print(child.pid, flush=True)
time.sleep(60)
"""


def test_watchdog_alone_ends_a_worker_whose_parent_died(tmp_path):
    """The portable fallback (no prctl): a process following its parent exits when it dies."""
    psutil = pytest.importorskip("psutil")
    out = tmp_path / "out"
    with open(out, "w") as fh:
        parent = subprocess.Popen(
            [sys.executable, "-c", WATCHED], stdout=fh, text=True, env=cli_env()
        )
    child = None
    try:
        lines = poll(
            lambda: (lambda t: t if len(t) == 2 else None)(out.read_text().split()),
            START_TIMEOUT,
            "the child to follow its parent",
        )
        child = psutil.Process(int(lines[0]))
        assert lines[1] == "ready"
        parent.kill()
        parent.wait()
        poll(lambda: not alive([child]), 5, "the orphan to exit", interval=0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait()
        for p in alive([child] if child else []):
            p.kill()


# ------------------------------------------------------------------- one clear line (13)


def _fail_on_call(n: int, exc: OSError, real: Callable) -> Callable:
    calls = []

    def fake(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise exc
        return real(*args, **kwargs)

    return fake


@pytest.mark.parametrize(
    ("target", "exc", "says"),
    [
        (
            "write_parts",
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
            "No space left on device (ENOSPC)",
        ),
        (
            "merge_parts",
            OSError(errno.EROFS, os.strerror(errno.EROFS), "/ro/shards/x.parquet"),
            "/ro/shards/x.parquet: Read-only file system (EROFS)",
        ),
        (
            "write_manifest",
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/full/.manifest.json.tmp"),
            "/full/.manifest.json.tmp: No space left on device (ENOSPC)",
        ),
    ],
    ids=["ENOSPC-parts", "EROFS-shards", "ENOSPC-manifest"],
)
def test_disk_full_or_read_only_dst_is_one_line_and_resume_is_identical(
    tmp_path, monkeypatch, src, clean, target, exc, says
):
    from tpuprep import build as build_module

    dst = tmp_path / "shards"
    nth = {"write_parts": 5, "merge_parts": 1, "write_manifest": 1}[target]
    monkeypatch.setattr(build_module, target, _fail_on_call(nth, exc, getattr(build_module, target)))
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "-q"])
    assert result.exit_code == 1, result.output
    assert one_error_line(result.stderr) == f"error: {says}"
    assert not (dst / "manifest.json").exists()
    monkeypatch.undo()
    resume_serially(src, dst)
    assert tree_bytes(dst) == clean


@pytest.mark.parametrize("command", ["info", "verify"])
@pytest.mark.parametrize("manifest", [None, "{}", "[1]", "{not json", '{"schema_version": "1.0"}'])
def test_folder_without_a_valid_manifest_is_one_line(tmp_path, synth_root, command, manifest):
    shards = tmp_path / "shards"
    shards.mkdir()
    if manifest is not None:
        (shards / "manifest.json").write_text(manifest)
    args = (
        [command, str(shards)]
        if command == "info"
        else [command, "--src", str(synth_root / "npz"), "--dst", str(shards), "-q"]
    )
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    line = one_error_line(result.stderr)
    assert line.startswith(f"error: {shards / 'manifest.json'}: ")  # the file, then what is wrong with it
    expected = {None: "missing", "{}": "not a tpuprep shard manifest", "[1]": "expected an object",
                "{not json": "is not valid JSON", '{"schema_version": "1.0"}': "not a tpuprep shard manifest"}
    assert expected[manifest] in line


def test_info_on_a_manifest_with_malformed_entries_is_one_line(tmp_path, synth_shards):
    shards = tmp_path / "shards"
    shards.mkdir()
    m = json.loads((synth_shards / "manifest.json").read_text())
    m["collections"] = {"tile:xla": {"splits": 7}}
    (shards / "manifest.json").write_text(json.dumps(m))
    result = CliRunner().invoke(main, ["info", str(shards)])
    assert result.exit_code == 1 and result.stdout == ""
    assert one_error_line(result.stderr).startswith(f"error: {shards / 'manifest.json'}: collections['tile:xla']")


def test_nul_byte_in_a_run_file_path_is_one_line(tmp_path):
    run = tmp_path / "run.toml"
    run.write_text('src = "np\\u0000z"\ndst = "out"\n')
    result = CliRunner().invoke(main, ["run", str(run)])
    assert result.exit_code == 2, result.output
    assert "[src] contains a NUL byte" in one_error_line(result.stderr)


def test_bad_fault_and_inflate_variables_do_not_break_other_commands(tmp_path, synth_shards):
    """Both broke every command (even --help) at import with a traceback."""
    result, _ = run_cli(
        tmp_path,
        "info",
        str(synth_shards),
        TPUPREP_INFLATE="zlib-ng-not-there",
        TPUPREP_CRASH_AT="part:x",
    )
    assert result.returncode == 0, result.stderr
    assert "shards" in result.stdout and result.stderr == ""


@pytest.fixture
def fresh_env_choices(monkeypatch):
    """Forget the inflate backend and crash points chosen so far in this process (and after)."""
    from tpuprep import faults
    from tpuprep.io import inflate

    monkeypatch.setattr(faults, "_remaining", None)
    inflate.backend.cache_clear()
    yield monkeypatch
    inflate.backend.cache_clear()


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        (
            "TPUPREP_INFLATE",
            "bogus",
            "TPUPREP_INFLATE='bogus' is not a DEFLATE backend: use one of isal, zlib-ng, zlib",
        ),
        (
            "TPUPREP_INFLATE",
            "zlib-ng",
            "TPUPREP_INFLATE=zlib-ng, but zlib-ng is not installed (pip install zlib-ng)",
        ),
        ("TPUPREP_CRASH_AT", "part:x", "TPUPREP_CRASH_AT='part:x' is not <point>:<n>"),
        ("TPUPREP_CRASH_AT", "nowhere:1", "TPUPREP_CRASH_AT='nowhere:1' is not <point>:<n>"),
    ],
)
def test_bad_fault_or_inflate_variable_stops_a_build_with_one_line(
    tmp_path, fresh_env_choices, synth_root, var, value, says
):
    if value == "zlib-ng":
        import importlib.util

        if importlib.util.find_spec("zlib_ng") is not None:
            pytest.skip("zlib-ng is installed here")
    fresh_env_choices.setenv(var, value)
    result = CliRunner().invoke(
        main, ["build", "--src", str(synth_root / "npz"), "--dst", str(tmp_path / "d"), "-q"]
    )
    assert result.exit_code == 1, result.output
    assert says in one_error_line(result.stderr)


def test_dask_timeout_variable_is_checked(tmp_path, synth_root):
    result = CliRunner().invoke(
        main,
        [
            "build",
            "--src",
            str(synth_root / "npz"),
            "--dst",
            str(tmp_path / "d"),
            "--scheduler",
            "tcp://127.0.0.1:1",
        ],
        env={"TPUPREP_DASK_TIMEOUT": "soon"},
    )
    assert result.exit_code == 2
    assert "TPUPREP_DASK_TIMEOUT='soon' must be a positive number of seconds" in one_error_line(
        result.stderr
    )


def test_every_command_turns_os_errors_into_one_line(tmp_path, synth_shards):
    """``cli.common.guard`` covers export and synth too (they printed tracebacks for these)."""
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    result = CliRunner().invoke(main, ["synth", "--dst", str(not_a_folder / "sub"), "-q"])
    assert result.exit_code == 1, result.output
    assert str(not_a_folder) in one_error_line(result.stderr)
    result = CliRunner().invoke(
        main,
        ["export", "--shards", str(synth_shards), "--dst-npz", str(not_a_folder / "npz"), "-q"],
    )
    assert result.exit_code == 1, result.output
    assert f"{not_a_folder}" in one_error_line(result.stderr)
    assert "Not a directory (ENOTDIR)" in one_error_line(result.stderr)


def test_sigterm_handler_is_restored_after_a_command(synth_shards):
    before = signal.getsignal(signal.SIGTERM)
    assert CliRunner().invoke(main, ["info", str(synth_shards)]).exit_code == 0
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_closed_stdout_is_not_reported_as_an_error(monkeypatch, synth_shards):
    """``tpuprep info | head``: EPIPE is left to click, which exits quietly (not "error: Broken pipe")."""
    import click

    echo = click.echo

    def closed(*args, err: bool = False, **kwargs):
        if not err:  # stdout is the closed pipe; stderr still works
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
        return echo(*args, err=err, **kwargs)

    monkeypatch.setattr(click, "echo", closed)
    result = CliRunner().invoke(main, ["info", str(synth_shards)])
    assert result.exit_code == 1 and result.stderr == ""
