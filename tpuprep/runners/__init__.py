"""Where tasks run: in this process, in local worker processes, or on a Dask cluster.

``make_runner`` is the one factory; ``local.SerialRunner``, ``local.ProcessRunner`` and
``dask_cluster.DaskRunner`` share one interface (``submit(fn, *args, paths=(), on_lost=None)``,
``as_completed(futures)``, ``close()``) and know nothing of the build.
"""

from __future__ import annotations

import os

DASK_TIMEOUT_ENV = "TPUPREP_DASK_TIMEOUT"
SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"


def env_scheduler() -> str | None:
    """The Dask scheduler address ``DASK_SCHEDULER_ADDRESS`` gives, or None: the one place tpuprep
    reads it (``DaskRunner`` given no address asks Dask's configuration, which reads it as well)."""
    return os.environ.get(SCHEDULER_ENV) or None


def dask_timeout(value: str | None = None) -> float | None:
    """Seconds from ``TPUPREP_DASK_TIMEOUT`` (or ``value``), None when unset; ``UsageError`` (one
    line naming the variable) unless it is a number in (0, a week] (``timeouts.timeout_problem``)."""
    from ..errors import UsageError

    text = os.environ.get(DASK_TIMEOUT_ENV, "") if value is None else value
    if not text.strip():
        return None
    from .timeouts import MAX_TIMEOUT_SECONDS, timeout_problem

    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if timeout_problem(seconds):
        raise UsageError(f"{DASK_TIMEOUT_ENV}={text!r} must be a positive number of seconds, "
                         f"at most {MAX_TIMEOUT_SECONDS:.0f} (a week)")
    return seconds


def make_runner(workers: int = 1, scheduler: str | None = None, scheduler_file: str | os.PathLike | None = None,
                *, dask_local: bool = False, cluster: bool = False, use_env: bool = False, retries: int = 2,
                min_workers: int = 1, timeout: float | None = None, quiet: bool = True, converter: bool = False,
                kernels: bool = True):
    """The runner for these settings; ``tpuprep build`` and ``tpuprep run`` both make theirs here.

    A scheduler address or file selects an existing Dask cluster, and so does ``cluster`` without
    either (the address then comes from ``DASK_SCHEDULER_ADDRESS``; ``ClusterError`` when it is
    unset); ``use_env``: with nothing else asked for and one worker, ``DASK_SCHEDULER_ADDRESS`` when
    set selects its cluster (as Dask users expect of a command). ``dask_local`` starts a local Dask
    cluster of ``workers`` processes; otherwise ``workers`` > 1 starts a local process pool and 1 runs
    everything in this process (the debugging path), which ``converter`` then sets up to convert
    many files (``worker.as_converter``: a command's process; a library caller's is left alone). For
    Dask: ``retries`` per task, ``min_workers``
    to wait for, and ``timeout`` (default: ``TPUPREP_DASK_TIMEOUT``, else Dask's connect timeout and
    60 s) bounds every wait for the cluster: to reach the scheduler, for the first worker and,
    mid-build, while no worker is left; ``quiet`` silences Dask's own log output (the command
    reports cluster failures itself). Dask is imported only when a Dask runner is asked for.
    ``kernels=False``: local worker processes do not load the Numba kernels (tasks that use none).
    """
    env = env_scheduler()
    if not (scheduler or scheduler_file or dask_local) and (cluster or (use_env and workers <= 1)):
        scheduler = env
    if scheduler or scheduler_file or dask_local or cluster:
        from .dask_cluster import DaskRunner

        timeout = dask_timeout() if timeout is None else timeout
        waits = {} if timeout is None else {"timeout": timeout, "connect_timeout": timeout,
                                            "no_workers_timeout": timeout}
        if dask_local:
            return DaskRunner(local_workers=workers, retries=retries, quiet=quiet, **waits)
        source = SCHEDULER_ENV if scheduler and scheduler == env else "--scheduler"
        return DaskRunner(address=scheduler, scheduler_file=scheduler_file, retries=retries,
                          min_workers=min_workers, address_source=source, quiet=quiet, **waits)
    from .local import ProcessRunner, SerialRunner

    if workers > 1:
        return ProcessRunner(workers, kernels=kernels)
    if converter:
        from . import worker

        worker.as_converter()  # this process converts the files itself (kernels compile on first use)
    return SerialRunner()
