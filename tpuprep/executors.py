"""Where per-file work runs: in this process, in local worker processes, or on a Dask cluster.

Every runner has the same small interface: ``submit(fn, *args)`` returns a future-like object and
``as_completed(futures)`` yields them as they finish, so the build loop is the same everywhere. Worker
processes cap their Numba/Arrow/BLAS threads at one, so N workers use N cores.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from collections.abc import Iterable, Iterator
from typing import Any

THREAD_ENV = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "POLARS_MAX_THREADS")


def cap_threads(threads: int = 1) -> None:
    """Limit this process's native thread pools (call before heavy imports where possible)."""
    for name in THREAD_ENV:
        os.environ[name] = str(threads)
    import pyarrow as pa

    pa.set_cpu_count(threads)
    pa.set_io_thread_count(max(threads, 1))


def warm_worker() -> None:
    """Cap threads and load every Numba kernel once, so no task pays a compile or cache load."""
    cap_threads(1)
    from .kernels import warm

    warm()


class SerialRunner:
    """Runs each task at submit time, in this process: the debugging path."""

    name = "serial"
    workers = 1

    def submit(self, fn, *args) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # delivered through the future, like a pool would
            fut.set_exception(exc)
        return fut

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        yield from futures

    def close(self) -> None:
        pass


class ProcessRunner:
    """A pool of ``workers`` local processes (spawned, thread-capped, kernels warmed)."""

    name = "processes"

    def __init__(self, workers: int):
        self.workers = workers
        self._pool = cf.ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=warm_worker,
        )

    def submit(self, fn, *args) -> cf.Future:
        return self._pool.submit(fn, *args)

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        return cf.as_completed(list(futures))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def make_runner(workers: int = 1, scheduler: str | None = None, scheduler_file: str | None = None):
    """Pick the runner for the CLI options (``--workers``, ``--scheduler``, ``--scheduler-file``)."""
    if scheduler or scheduler_file:
        from .dask_runner import DaskRunner

        return DaskRunner(address=scheduler, scheduler_file=scheduler_file)
    if workers <= 1:
        return SerialRunner()
    return ProcessRunner(workers)
