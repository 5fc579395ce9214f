"""Running a build's per-file tasks on a Dask cluster (``dask.distributed``).

``DaskRunner`` connects to an existing scheduler (``--scheduler tcp://HOST:PORT``,
``--scheduler-file F`` or, as Dask users expect, ``DASK_SCHEDULER_ADDRESS``), or starts a local
cluster of single-threaded worker processes. What travels through the scheduler is small: an
``InputFile`` and the options go out, a JSON-able record comes back. Every task reads its input
from, and writes its part files and shards to, a filesystem that the client and all workers see at
the same path (the build checks this before the first task runs).

On connect the runner checks that every worker runs the same tpuprep (version and source digest)
and the same numpy/numba/pyarrow as the client, since those decide the bytes of the shards, and
says which worker differs when one does. A worker plugin caps each worker's native thread pools to
its thread count and loads the Numba kernels once per worker process (workers that join later,
e.g. restarted by their nanny, get it too). A lost worker's tasks are rescheduled by the scheduler;
``retries`` covers tasks that raised (e.g. a flaky filesystem); a file whose workers die again and
again (``KilledWorker``, typically out of memory) is quarantined and the batch goes on.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import platform
import socket
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from distributed import WorkerPlugin

from ..errors import UsageError
from .worker import warm_worker

PLUGIN_NAME = "tpuprep-worker"
LIBRARIES = ("numpy", "numba", "pyarrow")
SOURCE = "tpuprep source"
STRICT = ("tpuprep", "python", *LIBRARIES)
"""Must match: a difference is an error. The source digest (``SOURCE``) only warns: the same version
with edited files is normal during development (an editable install on a shared filesystem)."""


class ClusterError(UsageError):
    """The Dask cluster cannot run this build: unreachable, no workers, different software, or
    workers that do not see the data. ``str()`` is the one line shown to the user."""


class SourceMismatchWarning(UserWarning):
    """Client and workers run the same tpuprep version built from different source files."""


@functools.cache
def source_digest() -> str:
    """A short digest of tpuprep's own source and schema files (same version, same code?)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    files = {p.relative_to(root).as_posix(): p for p in root.rglob("*.py")}
    files |= {f"schemas/{p.name}": p for p in (root / "schemas").glob("*.json")}  # a link: not walked
    for name, path in sorted(files.items()):
        h.update(name.encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def environment() -> dict[str, str]:
    """What must match between client and workers for byte-identical shards (see ``STRICT``)."""
    import importlib

    import tpuprep

    env = {"tpuprep": tpuprep.__version__, "python": ".".join(platform.python_version_tuple()[:2])}
    for lib in LIBRARIES:
        env[lib] = importlib.import_module(lib).__version__
    env[SOURCE] = source_digest()
    return env


def describe_mismatch(client_env: dict[str, str], worker_envs: dict[str, dict[str, str]],
                      keys: Iterable[str] = STRICT) -> str | None:
    """One readable message naming every worker whose ``keys`` differ from the client's, or None."""
    keys = list(keys)
    lines = []
    for addr, env in sorted(worker_envs.items()):
        diffs = [f"{k} {env.get(k, '?')} (client has {client_env.get(k, '?')})" for k in keys
                 if env.get(k) != client_env.get(k)]
        if diffs:
            lines.append(f"  worker {addr}: " + ", ".join(diffs))
    if not lines:
        return None
    if keys == [SOURCE]:
        return ("the Dask workers run the same tpuprep version as this client but different source files "
                "(an edited or differently built install); the shards may differ from a local build:\n"
                + "\n".join(lines))
    return ("the Dask workers do not run the same software as this client, so the shards would not be "
            "byte-identical to a local build:\n" + "\n".join(lines) + "\n"
            "Install the same tpuprep (and numpy, numba, pyarrow) on the client and on every worker, "
            "e.g. one environment on the shared filesystem.")


class TpuprepWorkerPlugin(WorkerPlugin):
    """Caps a worker's native thread pools to its thread count and loads the Numba kernels, once
    per worker process (in a thread, so the worker's event loop keeps answering heartbeats)."""

    idempotent = True  # a worker that already has it (from an earlier build) is not warmed again
    name = PLUGIN_NAME

    async def setup(self, worker: Any) -> None:
        threads = max(int(getattr(worker.state, "nthreads", 1) or 1), 1)
        await asyncio.get_running_loop().run_in_executor(None, warm_worker, threads)


def _connect_timeout(seconds: float | None) -> float:
    """``seconds``, or Dask's ``distributed.comm.timeouts.connect``."""
    if seconds is not None:
        return float(seconds)
    import dask
    from dask.utils import parse_timedelta

    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds"))


def _wait_for_file(path: Path, seconds: float | None) -> None:
    """Wait for a scheduler file to appear (a scheduler that is still starting writes it); Dask's
    client would wait for ever."""
    deadline = time.monotonic() + _connect_timeout(seconds)
    while not path.exists():
        if time.monotonic() > deadline:
            raise ClusterError(f"Dask scheduler file {path} does not exist (a running scheduler writes it: "
                               "`dask scheduler --scheduler-file F`)")
        time.sleep(0.2)


def _missing_paths(paths: list[str]) -> dict[str, Any]:
    """Run on a worker: which of ``paths`` this worker cannot see, and where it runs."""
    return {"host": socket.gethostname(), "missing": [p for p in paths if not os.path.exists(p)]}


def run_task(expected: dict[str, str], fn: Callable[..., Any], *args: Any) -> Any:
    """Run one task on a worker after checking that the worker runs the client's software.

    The check repeats what the runner did on connect, for workers that joined since (a nanny
    restart, an autoscaled worker); it costs a dict comparison.
    """
    here = environment()
    if any(here.get(k) != expected.get(k) for k in STRICT):
        try:
            from distributed import get_worker

            where = f"{get_worker().address} on {socket.gethostname()}"
        except ValueError:  # not on a worker
            where = socket.gethostname()
        message = describe_mismatch(expected, {where: here})
        raise ClusterError(message or "worker environment differs from the client's")
    return fn(*args)


class DaskRunner:
    """Submits tasks to a Dask cluster; same interface as ``executors.ProcessRunner``.

    Exactly one of: ``address`` (``tcp://host:port``), ``scheduler_file``, ``local_workers`` (start a
    ``LocalCluster`` of that many single-threaded worker processes), or ``client`` (an existing
    ``distributed.Client``, not closed by ``close()``). With none, the scheduler address comes from
    Dask's configuration (``DASK_SCHEDULER_ADDRESS`` or ``scheduler-address``).

    ``timeout``: seconds to wait for ``min_workers`` workers; ``connect_timeout``: seconds to reach the
    scheduler (default: Dask's ``distributed.comm.timeouts.connect``); ``retries``: reruns of a task
    that raised.
    """

    name = "dask"

    def __init__(
        self,
        address: str | None = None,
        scheduler_file: str | os.PathLike | None = None,
        *,
        local_workers: int | None = None,
        client: Any = None,
        retries: int = 2,
        min_workers: int = 1,
        timeout: float = 60.0,
        connect_timeout: float | None = None,
    ):
        from distributed import Client, LocalCluster

        self.retries = retries
        self._cluster = None
        self._own_client = client is None
        self._paths_checked = False
        self._on_lost: dict[str, Callable[[str], Any]] = {}  # task key -> result when given up on
        self._submitted = 0
        if client is None and local_workers:
            self._cluster = LocalCluster(n_workers=local_workers, threads_per_worker=1, processes=True,
                                         dashboard_address=":0")
            client = Client(self._cluster, set_as_default=False)
        elif client is None:
            if not address and not scheduler_file:
                import dask

                address = dask.config.get("scheduler-address", None)
                if not address:
                    raise ClusterError("no Dask scheduler given: pass --scheduler ADDR or --scheduler-file F, "
                                       "or set DASK_SCHEDULER_ADDRESS")
            where = address or f"the scheduler in {scheduler_file}"
            if scheduler_file and not address:
                _wait_for_file(Path(scheduler_file), connect_timeout)
            try:
                extra = {} if connect_timeout is None else {"timeout": connect_timeout}
                client = Client(address, scheduler_file=str(scheduler_file) if scheduler_file else None,
                                set_as_default=False, **extra)
            except (OSError, TimeoutError, ValueError) as exc:
                raise ClusterError(f"cannot connect to Dask scheduler at {where}: {exc}") from None
        self.client = client
        try:
            self._prepare(min_workers, timeout)
        except BaseException:
            self.close()
            raise

    def _prepare(self, min_workers: int, timeout: float) -> None:
        try:
            self.client.wait_for_workers(min_workers, timeout=timeout)
        except TimeoutError:
            raise ClusterError(f"no Dask workers joined scheduler {self.client.scheduler.address} within "
                               f"{timeout:.0f} s (need {min_workers})") from None
        self.environment = environment()
        try:
            found = self.client.run(environment)
        except (ImportError, AttributeError) as exc:
            raise ClusterError(f"the Dask workers cannot import tpuprep ({exc}); install the client's "
                               "tpuprep in the workers' environment") from None
        message = describe_mismatch(self.environment, found)
        if message:
            raise ClusterError(message)
        message = describe_mismatch(self.environment, found, [SOURCE])
        if message:
            warnings.warn(message, SourceMismatchWarning, stacklevel=3)
        self.client.register_plugin(TpuprepWorkerPlugin(), name=PLUGIN_NAME)
        info = self.client.scheduler_info()
        self.workers = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()) or len(found)

    @property
    def dashboard_link(self) -> str | None:
        """The cluster's dashboard, when it has one."""
        try:
            return self.client.dashboard_link
        except Exception:
            return None

    def check_paths(self, *paths: str | os.PathLike) -> None:
        """Raise ``ClusterError`` unless every worker sees every path (the shared-filesystem rule)."""
        wanted = [str(p) for p in paths]
        problems = [f"  worker {addr} on {r['host']}: cannot see {', '.join(r['missing'])}"
                    for addr, r in sorted(self.client.run(_missing_paths, wanted).items()) if r["missing"]]
        if problems:
            raise ClusterError("the Dask workers do not see the build's files at the same paths as this "
                               "client:\n" + "\n".join(problems) + "\nPut --src and --dst on a filesystem "
                               "that the client and every worker mount at the same path.")

    def submit(self, fn: Callable[..., Any], *args: Any, paths: Sequence[str | os.PathLike] = (),
               on_lost: Callable[[str], Any] | None = None) -> Any:
        """Submit ``fn(*args)``; the first task with ``paths`` checks that every worker sees them."""
        if paths and not self._paths_checked:
            self.check_paths(*paths)
            self._paths_checked = True
        key = f"tpuprep-{fn.__name__}-{uuid.uuid4().hex}"
        if on_lost is not None:
            self._on_lost[key] = on_lost
        self._submitted += 1  # earlier submissions first (the build submits the largest files first)
        return self.client.submit(run_task, self.environment, fn, *args, key=key, pure=False,
                                  retries=self.retries, priority=-self._submitted)

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        """Yield futures as they finish; a conversion task given up on (``KilledWorker``) comes back
        as a finished future holding quarantine records for its files."""
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        for fut in as_completed(list(futures), loop=self.client.loop):
            on_lost = self._on_lost.pop(fut.key, None)
            if fut.status == "error" and on_lost is not None and isinstance(fut.exception(), KilledWorker):
                yield _Resolved(on_lost(_killed_reason(fut.exception())))
                continue
            yield fut

    def close(self) -> None:
        """Disconnect (and stop the local cluster if this runner started one); an existing cluster stays up."""
        if self._own_client and getattr(self, "client", None) is not None:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def _killed_reason(exc: BaseException) -> str:
    """Why a task was given up on (``KilledWorker``), to follow "the workers running it ...": e.g. "died 4
    times (last on tcp://…); most likely it needs more memory than a worker has (…)"."""
    deaths = getattr(exc, "allowed_failures", None)
    last = getattr(getattr(exc, "last_worker", None), "address", None)
    times = f"{deaths + 1} times" if isinstance(deaths, int) else "repeatedly"
    where = f" (last on {last})" if last else ""
    return (f"died {times}{where}; most likely it needs more "
            "memory than a worker has (see pipelines/README.md on memory per worker)")


class _Resolved:
    """A finished future-like holding a value computed on the client."""

    def __init__(self, value: Any):
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        return self._value

    def done(self) -> bool:
        return True
