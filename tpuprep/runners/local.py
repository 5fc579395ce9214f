"""Where per-file work runs: in this process, in local worker processes, or on a Dask cluster.

Every runner has the same small interface: ``submit(fn, *args, paths=(), on_lost=None)`` returns a
future-like object and ``as_completed(futures)`` yields them as they finish (each with ``.result()``),
so the build loop is the same everywhere. ``paths`` are the files and folders the task reads or
writes (a cluster checks that its workers see them); ``on_lost(reason)`` gives the task's result when
the infrastructure gives up on it (a Dask task whose workers keep dying). Runners know nothing else
of the tasks they run. Worker processes cap their Numba/Arrow/BLAS/polars threads at their share, so
N single-threaded workers use N cores, and load every Numba kernel once before their first task.

Worker death is an infrastructure failure, not a property of the batch: ``ProcessRunner`` resubmits
the unfinished tasks on a fresh pool (a bounded number of times), and ``DaskRunner``
(``tpuprep.runners.dask_cluster``) relies on the scheduler to reschedule the tasks of a lost worker.

The reverse holds too: local worker processes never outlive their parent. They die with it
(``PR_SET_PDEATHSIG`` on Linux, and a watchdog thread that polls the parent's pid everywhere), they
ignore SIGINT (the parent decides what an interrupt means), and ``ProcessRunner.close()`` with tasks
still running kills them rather than waiting for work nobody will collect.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .worker import compile_if_missing, warm_worker

PARENT_POLL_SECONDS = 0.2
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def follow_parent(parent_pid: int, pdeathsig: bool = True,
                  interval: float = PARENT_POLL_SECONDS) -> None:
    """Make this process die when ``parent_pid`` (its parent) does.

    On Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has the kernel kill it at once, even inside a long
    native call; the kernel ties that to the *thread* that started this process, so ``pdeathsig`` is
    only set when that was the parent's main thread. Everywhere a daemon thread also polls
    ``os.getppid()`` every ``interval`` s (a dead parent's children are re-parented) and exits.
    """
    if pdeathsig and sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):  # no prctl: the watchdog remains
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before this process got here
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="tpuprep-parent-watch", daemon=True).start()


def pool_worker_init(parent_pid: int, pdeathsig: bool, kernels: bool = True) -> None:
    """Initializer of ``ProcessRunner`` workers: follow the parent, ignore SIGINT (Ctrl-C reaches
    the whole process group; the parent stops the workers), then ``warm_worker(kernels=kernels)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    follow_parent(parent_pid, pdeathsig)
    warm_worker(kernels=kernels)


class WorkersLost(RuntimeError):
    """Worker processes kept dying, more often than a runner is willing to restart them."""


class SerialRunner:
    """Runs each task at submit time, in this process: the debugging path."""

    name = "serial"
    workers = 1

    def submit(self, fn: Callable[..., Any], *args: Any, paths: Sequence[str | os.PathLike] = (),
               on_lost: Callable[[str], Any] | None = None) -> cf.Future:
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


class PoolTask:
    """A task of a ``ProcessRunner``: a handle that outlives the pool it first ran on.

    ``future`` is the attempt in flight; when its pool breaks (a worker process died), the runner
    submits the same call again on a fresh pool and swaps ``future``.
    """

    __slots__ = ("args", "fn", "future", "generation", "runner")

    def __init__(self, runner: ProcessRunner, fn: Callable[..., Any], args: tuple):
        self.runner, self.fn, self.args = runner, fn, args
        self.future: cf.Future
        self.generation = -1

    def done(self) -> bool:
        return self.future.done() and not _lost(self.future)

    def result(self, timeout: float | None = None) -> Any:
        """The task's return value (or its exception), resubmitting it if its pool broke."""
        while True:
            try:
                return self.future.result(timeout)
            except (BrokenProcessPool, cf.CancelledError):
                if not _lost(self.future):
                    raise
                self.runner._resubmit(self)


def _lost(fut: cf.Future) -> bool:
    """Did this attempt end because its pool broke (or was torn down), rather than by the task?"""
    if not fut.done():
        return False
    if fut.cancelled():
        return True
    return isinstance(fut.exception(), BrokenProcessPool)


class ProcessRunner:
    """A pool of ``workers`` local processes (spawned, thread-capped, kernels warmed: compiled here first,
    when the disk cache does not have them yet, then loaded by each worker).

    When a worker process dies (killed, out of memory), ``concurrent.futures`` fails every pending
    future with ``BrokenProcessPool``. The runner then starts a fresh pool and resubmits the tasks
    that had not finished, at most ``max_restarts`` times per runner; after that it raises
    ``WorkersLost``. Tasks must be idempotent (tpuprep's are: they write their outputs atomically
    under deterministic names), which also makes ``close()`` with tasks in flight (an interrupted
    build) safe: it kills the workers instead of waiting for them.
    """

    name = "processes"

    def __init__(self, workers: int, max_restarts: int = 3, kernels: bool = True):
        self.workers = workers
        self.kernels = kernels  # load the Numba kernels in each worker (``warm_worker``)
        self.max_restarts = max_restarts
        self.restarts = 0
        self._generation = 0
        self._closed = False
        self._inflight: set[cf.Future] = set()
        self._retired: list[threading.Thread] = []  # manager threads of pools replaced after a death
        if kernels:
            compile_if_missing()  # once here, not in every worker at the same time
        self._pool = self._new_pool()

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        main = threading.current_thread() is threading.main_thread()
        return cf.ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=pool_worker_init, initargs=(os.getpid(), main, self.kernels),
        )

    def worker_pids(self) -> list[int]:
        """Process ids of the current pool's workers (started lazily, so possibly fewer than ``workers``)."""
        return sorted((getattr(self._pool, "_processes", None) or {}).keys())

    def _restart(self, generation: int) -> None:
        """Replace the pool that ran ``generation`` (once, however many of its tasks report it)."""
        if self._closed:
            raise cf.CancelledError("the runner was closed")
        if generation != self._generation:
            return  # already replaced
        self.restarts += 1
        if self.restarts > self.max_restarts:
            raise WorkersLost(
                f"local worker processes died {self.restarts} times during this build; giving up "
                f"(at most {self.max_restarts} restarts). The usual cause is a file that needs more "
                "memory than a worker has: retry with fewer --workers, or with --workers 1 to see "
                "which file it is; --resume keeps the files already converted.")
        self._retired.extend(_manager_thread(self._pool))
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._generation += 1
        self._pool = self._new_pool()

    def _start(self, task: PoolTask) -> None:
        while True:
            generation = self._generation
            try:
                task.future = self._pool.submit(task.fn, *task.args)
            except BrokenProcessPool:
                self._restart(generation)
                continue
            task.generation = generation
            self._inflight.add(task.future)
            task.future.add_done_callback(self._inflight.discard)
            return

    def _resubmit(self, task: PoolTask) -> None:
        self._restart(task.generation)
        self._start(task)

    def submit(self, fn: Callable[..., Any], *args: Any, paths: Sequence[str | os.PathLike] = (),
               on_lost: Callable[[str], Any] | None = None) -> PoolTask:
        task = PoolTask(self, fn, args)
        self._start(task)
        return task

    def as_completed(self, futures: Iterable[PoolTask]) -> Iterator[PoolTask]:
        """Yield tasks as they finish; tasks whose pool broke are rerun first, not yielded."""
        pending = {t.future: t for t in futures}
        while pending:
            done, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            lost = []
            for fut in done:
                task = pending.pop(fut)
                if _lost(fut):
                    lost.append(task)
                else:
                    yield task
            for task in lost:
                self._resubmit(task)
                pending[task.future] = task

    def close(self) -> None:
        """Stop the pool. Idle workers exit normally; with tasks still running (an interrupted or
        failed build) the workers are killed at once: nobody will collect their results."""
        self._closed = True
        pool = self._pool
        # shutdown(wait=False) forgets the pool's manager thread: keep it to join below. A manager
        # thread still running at interpreter exit races concurrent.futures' exit hook ("Exception
        # ignored ... Bad file descriptor" printed under an interrupted build's one error line).
        threads = self._retired + _manager_thread(pool)
        if any(not f.done() for f in list(self._inflight)):
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for p in processes:
                p.kill()
            for p in processes:
                p.join(5)
        pool.shutdown(wait=True, cancel_futures=True)
        for thread in threads:
            thread.join(10)
        self._retired = [t for t in threads if t.is_alive()]


def _manager_thread(pool: cf.ProcessPoolExecutor) -> list[threading.Thread]:
    """The pool's ``concurrent.futures`` manager thread, if it started one (a list of 0 or 1)."""
    thread = getattr(pool, "_executor_manager_thread", None)
    return [thread] if thread is not None else []

