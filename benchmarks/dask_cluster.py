"""A real Dask cluster on 127.0.0.1 for the benchmark: ``dask scheduler`` and N single-threaded
``dask worker`` processes started as subprocesses, exactly as a user starts them by hand.

The build is then timed as ``tpuprep build --scheduler-file F`` against the already running cluster
(the way a cluster is used), and each worker's peak RSS is read from ``/proc/<pid>/status`` (VmHWM) of
every process in the worker's session (the nanny and the worker process it runs).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT = 60.0


def _session_pids(leader: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if os.getsid(int(entry.name)) == leader:
                    pids.append(int(entry.name))
    return pids


def _vm_hwm_mb(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class LocalDaskCluster:
    """``with LocalDaskCluster(workers, folder) as c``: ``c.scheduler_file``, ``c.peak_worker_rss_mb()``."""

    def __init__(self, workers: int, folder: Path):
        self.workers, self.folder = workers, folder
        self.scheduler_file = folder / "scheduler.json"
        self._procs: list[subprocess.Popen] = []
        self._worker_procs: list[subprocess.Popen] = []

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115  (closed in __exit__)
        env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        proc.log = log  # type: ignore[attr-defined]
        self._procs.append(proc)
        return proc

    def __enter__(self) -> LocalDaskCluster:
        import distributed

        self.folder.mkdir(parents=True, exist_ok=True)
        self.scheduler_file.unlink(missing_ok=True)
        try:
            self._start("scheduler", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                        "--no-dashboard", "--scheduler-file", str(self.scheduler_file))
            deadline = time.monotonic() + START_TIMEOUT
            while not self.scheduler_file.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Dask scheduler did not start; see {self.folder}/scheduler.log")
                time.sleep(0.1)
            for i in range(self.workers):
                self._worker_procs.append(self._start(
                    f"worker{i}", "distributed.cli.dask_worker", "--scheduler-file", str(self.scheduler_file),
                    "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard", "--memory-limit", "0"))
            with distributed.Client(scheduler_file=str(self.scheduler_file), timeout=START_TIMEOUT,
                                    set_as_default=False) as client:
                client.wait_for_workers(self.workers, timeout=START_TIMEOUT)
        except BaseException:
            self.__exit__()
            raise
        return self

    def peak_worker_rss_mb(self) -> float:
        """The largest peak RSS of any process of any worker (nanny or worker process)."""
        return max((_vm_hwm_mb(pid) for p in self._worker_procs for pid in _session_pids(p.pid)), default=0.0)

    def worker_cpu_s(self) -> float:
        """User + system CPU seconds used so far by every process of every worker (from /proc)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for p in self._worker_procs:
            for pid in _session_pids(p.pid):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    fields = stat[stat.rindex(")") + 2 :].split()
                    total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        return total / tick

    def __exit__(self, *exc: object) -> None:
        stop_sessions(self._procs)


def stop_sessions(procs: list[subprocess.Popen]) -> None:
    """Stop processes started each in a session of its own (``start_new_session``), last started first
    (workers before their scheduler): SIGTERM to each session, SIGKILL after 15 s; then close each
    process's ``log`` file."""
    for proc in reversed(procs):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    for proc in reversed(procs):
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.log.close()
