"""Where tasks run: in this process, in local worker processes, or on a Dask cluster.

``make_runner`` is the one factory; ``local.SerialRunner``, ``local.ProcessRunner`` and
``dask_cluster.DaskRunner`` share one interface (``submit(fn, *args, paths=(), on_lost=None)``,
``as_completed(futures)``, ``close()``) and know nothing of the build.
"""

from __future__ import annotations

import os


def make_runner(workers: int = 1, scheduler: str | None = None, scheduler_file: str | os.PathLike | None = None,
                *, dask_local: bool = False, retries: int = 2, min_workers: int = 1, timeout: float = 60.0,
                connect_timeout: float | None = None):
    """The runner for these settings.

    A scheduler address or file selects an existing Dask cluster (``retries``, ``min_workers`` to wait
    for, ``timeout`` and ``connect_timeout`` in seconds); ``dask_local`` starts a local Dask cluster of
    ``workers`` processes; otherwise ``workers`` > 1 starts a local process pool and 1 runs everything
    in this process (the debugging path). Dask is imported only when a Dask runner is asked for.
    """
    if scheduler or scheduler_file:
        from .dask_cluster import DaskRunner

        return DaskRunner(address=scheduler, scheduler_file=scheduler_file, retries=retries,
                          min_workers=min_workers, timeout=timeout, connect_timeout=connect_timeout)
    if dask_local:
        from .dask_cluster import DaskRunner

        return DaskRunner(local_workers=workers, retries=retries, timeout=timeout)
    from .local import ProcessRunner, SerialRunner

    return SerialRunner() if workers <= 1 else ProcessRunner(workers)
