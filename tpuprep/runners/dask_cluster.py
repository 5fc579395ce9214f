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

Every wait is bounded: the scheduler must answer (in Dask's protocol, as a scheduler) within the
connect timeout, ``min_workers`` must join within ``timeout``, and a build whose cluster has had no
worker at all for ``no_workers_timeout`` seconds, or that lost its scheduler, stops with one
``ClusterError`` line (finished files are kept for ``--resume``). A malformed address is a
``SchedulerAddressError`` (a usage error).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import hashlib
import json
import os
import platform
import socket
import stat
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from distributed import WorkerPlugin

from ..errors import FatalError, UsageError
from .timeouts import timeout_problem
from .worker import compile_if_missing, warm_worker

PLUGIN_NAME = "tpuprep-worker"
LIBRARIES = ("numpy", "numba", "pyarrow")
SOURCE = "tpuprep source"
STRICT = ("tpuprep", "python", *LIBRARIES)
"""Must match: a difference is an error. The source digest (``SOURCE``) only warns: the same version
with edited files is normal during development (an editable install on a shared filesystem)."""


POLL_SECONDS = 0.5
"""How often a waiting build checks that its cluster still has a scheduler and workers."""
CLOSE_SECONDS = 5.0
"""The longest ``close()`` waits for a scheduler to acknowledge the disconnect."""


class ClusterError(FatalError):
    """The Dask cluster cannot run this build: unreachable or not a scheduler, no workers (at the
    start, or all of them lost mid-build), a lost scheduler, different software, or workers that do
    not see the data. ``str()`` is the message shown to the user (exit code 1)."""


class SchedulerAddressError(UsageError):
    """A scheduler address that is not one (e.g. ``not-a-url``, ``http://...``): exit code 2."""


class SchedulerFileError(UsageError):
    """A scheduler file that cannot be one (a FIFO, a device, a folder, megabytes): exit code 2."""


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

    seconds = float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds"))
    problem = timeout_problem(seconds)
    if problem:  # e.g. DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=1e300
        raise UsageError(f"Dask's distributed.comm.timeouts.connect {problem}")
    return seconds


QUIET_LOGGERS = ("distributed", "tornado")


def quiet_dask_logs() -> None:
    """From now on, let dask.distributed (and tornado, under it) log only CRITICAL records in this
    process. For the command line, which reports a cluster failure itself in one line: without
    this a lost scheduler adds Dask's reconnect errors and tracebacks to stderr."""
    import logging

    prefixes = tuple(f"{name}." for name in QUIET_LOGGERS)
    known = list(logging.root.manager.loggerDict)
    names = [*QUIET_LOGGERS, *(n for n in known if n.startswith(prefixes))]
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    events = logging.getLogger("asyncio")  # "Task exception was never retrieved" in Dask's loop
    if not any(isinstance(f, _DaskTaskErrors) for f in events.filters):
        events.addFilter(_DaskTaskErrors())


class _DaskTaskErrors:
    """A logging filter: drops records carrying an exception from dask.distributed or tornado."""

    @staticmethod
    def filter(record: Any) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or not type(exc).__module__.startswith(QUIET_LOGGERS)


def address_problem(address: Any) -> str | None:
    """What is wrong with ``address`` as a Dask scheduler address (``tcp://HOST:PORT``,
    ``HOST:PORT``, ``tls://...``), or None when it is one. Nothing is contacted."""
    from distributed.comm import registry
    from distributed.comm.addressing import parse_address, parse_host_port

    if not isinstance(address, str) or not address.strip():
        return "it is empty"
    if "\0" in address:
        return "it contains a NUL byte"
    try:
        scheme, location = parse_address(address)
        registry.get_backend(scheme)
        if scheme in ("tcp", "tls", "ws", "wss"):
            host, port = parse_host_port(location)
            if not host or not 0 < int(port) < 65536:
                return f"no host or no valid port in {location!r}"
    except (ValueError, TypeError) as exc:
        lines = str(exc).strip().splitlines()
        return lines[0] if lines else type(exc).__name__
    return None


def check_address(address: Any, what: str = "--scheduler") -> str:
    """``address`` if it is a Dask scheduler address, else ``SchedulerAddressError`` naming ``what``
    (the option, variable or file it came from)."""
    problem = address_problem(address)
    if problem:
        raise SchedulerAddressError(f"{what} {address!r} is not a Dask scheduler address (expected "
                                    f"tcp://HOST:PORT): {problem}")
    return address


async def _identity(address: str, timeout: float) -> Any:
    """Connect to ``address`` in Dask's protocol and ask for its identity (the reply, any type)."""
    from distributed.comm import connect
    from distributed.security import Security

    comm = await connect(address, timeout=timeout, **Security().get_connection_args("client"))
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def probe_scheduler(address: str, timeout: float) -> None:
    """Raise ``ClusterError`` unless a Dask scheduler answers at ``address`` within ``timeout`` s.

    Dask's own client waits for ever on a server that accepts connections and says nothing (its
    handshake read has no timeout) and misreads other protocols (e.g. an HTTP server); this probe
    runs in a daemon thread with its own event loop, so it returns within ``timeout`` + 1 s whatever
    the other end does.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout)))
        except BaseException as exc:  # any failure means "no scheduler there"
            outcome.append(exc)

    thread = threading.Thread(target=run, name="tpuprep-scheduler-probe", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    reply = outcome[0] if outcome else TimeoutError()
    if isinstance(reply, dict) and reply.get("type") == "Scheduler":
        return
    if isinstance(reply, dict) and isinstance(reply.get("type"), str):
        raise ClusterError(f"{address} is a Dask {reply['type'].lower()}, not a scheduler: pass "
                           "the scheduler's address")
    if isinstance(reply, asyncio.TimeoutError | TimeoutError):
        raise ClusterError(f"no Dask scheduler answered at {address} within {timeout:g} s "
                           "(something accepted the connection but did not speak Dask's protocol)"
                           if _accepts(address) else
                           f"cannot connect to Dask scheduler at {address} within {timeout:g} s")
    if isinstance(reply, OSError) and not _accepts(address):
        raise ClusterError(f"cannot connect to Dask scheduler at {address}: {_one_line(reply)}")
    raise ClusterError(f"{address} is not a Dask scheduler (it does not answer in Dask's protocol: "
                       f"{_one_line(reply)})")


def _accepts(address: str) -> bool:
    """Does something accept TCP connections at ``address`` (host:port after the scheme)?"""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        host, port = parse_host_port(parse_address(address)[1])
        with socket.create_connection((host.strip("[]"), port), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def _one_line(exc: BaseException) -> str:
    """An exception as one short line: its type when it has no message, its first line otherwise."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


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

    ``connect_timeout``: seconds to reach the scheduler and hear it answer as one (default:
    Dask's ``distributed.comm.timeouts.connect``); ``timeout``: seconds to wait for
    ``min_workers`` workers; ``no_workers_timeout``: seconds a build waits, mid-build, while the
    cluster has no worker at all (default: ``timeout``); ``retries``: reruns of a task that
    raised; ``address_source``: where ``address`` came from, named when it is malformed (an
    option, a variable or a run-file key); ``quiet``: silence Dask's own logging in this process
    (``quiet_dask_logs``; the CLI does).
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
        no_workers_timeout: float | None = None,
        address_source: str = "--scheduler",
        quiet: bool = False,
    ):
        from distributed import Client, LocalCluster

        for what, seconds in (("timeout", timeout), ("connect_timeout", connect_timeout),
                              ("no_workers_timeout", no_workers_timeout)):
            problem = None if seconds is None else timeout_problem(seconds)
            if problem:
                raise UsageError(f"Dask {what} {problem}")
        if quiet:
            quiet_dask_logs()
        self.retries = retries
        self.connect_timeout = _connect_timeout(connect_timeout)
        self.no_workers_timeout = float(timeout if no_workers_timeout is None
                                        else no_workers_timeout)
        self._cluster = None
        self._own_client = client is None
        self._paths_checked = False
        self._on_lost: dict[str, Callable[[str], Any]] = {}  # task key -> result when given up on
        self._submitted = 0
        self._workerless_since: float | None = None
        self.address = address
        if client is None and local_workers:
            compile_if_missing()  # its workers share this machine's kernel cache: compile once, here
            self._cluster = LocalCluster(n_workers=local_workers, threads_per_worker=1, processes=True,
                                         dashboard_address=":0")
            client = Client(self._cluster, set_as_default=False)
        elif client is None:
            what = address_source
            if not address and not scheduler_file:
                import dask

                address = dask.config.get("scheduler-address", None)
                what = "DASK_SCHEDULER_ADDRESS"
                if not address:
                    raise ClusterError("no Dask scheduler given: pass --scheduler ADDR or --scheduler-file F, "
                                       "or set DASK_SCHEDULER_ADDRESS")
            if scheduler_file and not address:
                address = _address_from_file(Path(scheduler_file), self.connect_timeout)
                what = f"the address in scheduler file {scheduler_file}"
            self.address = check_address(address, what)
            probe_scheduler(self.address, self.connect_timeout)
            try:
                client = Client(self.address, set_as_default=False, timeout=self.connect_timeout)
            except (OSError, TimeoutError, ValueError) as exc:
                raise ClusterError(f"cannot connect to Dask scheduler at {self.address}: "
                                   f"{_one_line(exc)}") from None
        self.client = client
        self.address = self.address or getattr(getattr(client, "scheduler", None), "address", None)
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
                               f"{timeout:g} s (need {min_workers})") from None
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
        as a finished future holding quarantine records for its files.

        While nothing finishes, the cluster is checked every ``POLL_SECONDS``: ``ClusterError`` when
        the scheduler is gone or no worker has been there for ``no_workers_timeout`` seconds.
        """
        from distributed import as_completed

        ac = as_completed(list(futures), loop=self.client.loop)
        next_check = time.monotonic() + POLL_SECONDS
        while not ac.is_empty():
            batch = ac.next_batch(block=False)
            for fut in batch:
                yield self._finished(fut, ac.count() + 1)
            now = time.monotonic()
            if batch:
                next_check = now + POLL_SECONDS
                continue
            if now >= next_check:
                self._check_cluster(ac.count())
                next_check = time.monotonic() + POLL_SECONDS
            with ac.thread_condition:
                ac.thread_condition.wait(timeout=0.05)

    def _finished(self, fut: Any, unfinished: int) -> Any:
        """A finished future-like for ``fut``: its result fetched here (bounded), a ``_Resolved``
        quarantine result for a task that kept killing its workers, or ``fut`` if it erred."""
        from distributed.scheduler import KilledWorker

        on_lost = self._on_lost.pop(fut.key, None)
        if fut.status == "cancelled":
            self._cancelled(fut)
        if fut.status == "error":
            exc = fut.exception()
            if isinstance(exc, KilledWorker) and on_lost is not None:
                return _Resolved(on_lost(_killed_reason(exc)))
            return fut
        while True:  # the result lives on a worker; if that one died, Dask recomputes it elsewhere
            try:
                return _Resolved(fut.result(timeout=POLL_SECONDS))
            except TimeoutError:
                self._check_cluster(unfinished)
            except OSError as exc:  # CommClosedError: the scheduler went away while sending it
                raise ClusterError(f"lost the Dask scheduler at {self.address} ({_one_line(exc)}); "
                                   "finished files are kept: run again with --resume") from None
            except (asyncio.CancelledError, concurrent.futures.CancelledError):
                self._cancelled(fut)  # cancelled while we waited (the scheduler connection was lost)

    def _cancelled(self, fut: Any) -> None:
        """Raise the one-line ``ClusterError`` for a task Dask cancelled (it lost the scheduler)."""
        raise ClusterError(f"lost the Dask scheduler at {self.address} (the build's tasks "
                           f"were cancelled: {_cancel_reason(fut)}); finished files are kept: "
                           "run again with --resume") from None

    def _check_cluster(self, unfinished: int) -> None:
        """Raise ``ClusterError`` if the scheduler is gone or has had no worker for too long."""
        if self.client.status not in ("running", "connecting"):
            raise ClusterError(f"lost the Dask scheduler at {self.address} (client "
                               f"{self.client.status}); finished files are kept: run again with "
                               "--resume")
        try:
            identity = self.client.sync(self.client.scheduler.identity, n_workers=0,
                                        callback_timeout=self.connect_timeout)
            workers = int(identity.get("n_workers", 1))
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"lost the Dask scheduler at {self.address} ({_one_line(exc)}); "
                               "finished files are kept: run again with --resume") from None
        now = time.monotonic()
        if workers:
            self._workerless_since = None
            return
        since = self._workerless_since = self._workerless_since or now
        if now - since >= self.no_workers_timeout:
            raise ClusterError(f"the Dask cluster at {self.address} has had no workers for "
                               f"{self.no_workers_timeout:g} s ({unfinished} tasks unfinished); "
                               "start workers and run again with --resume (finished files are "
                               "kept)")

    def close(self) -> None:
        """Disconnect (and stop the local cluster if this runner started one); an existing cluster
        stays up. Bounded: a scheduler that is gone does not make this wait."""
        client = getattr(self, "client", None) if self._own_client else None
        self._own_client = False
        if client is not None:
            with contextlib.suppress(OSError, TimeoutError, RuntimeError):  # the scheduler is gone
                client.close(timeout=CLOSE_SECONDS)
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


SCHEDULER_FILE_MAX_BYTES = 1 << 20
"""A Dask scheduler file is a small JSON document (about 1 KB); anything larger is not one."""


def read_scheduler_file(path: Path) -> bytes:
    """The bytes of a scheduler file: a regular file of at most ``SCHEDULER_FILE_MAX_BYTES``.

    Opened without blocking (a FIFO would wait for a writer for ever) and checked on the open
    descriptor: anything else (a FIFO, a device such as ``/dev/zero``, a folder) is a
    ``SchedulerFileError`` (a usage error), one line; so is a larger file, which is never read whole.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise SchedulerFileError(f"Dask scheduler file {path} is a folder, not a regular file") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SchedulerFileError(f"Dask scheduler file {path} is {_file_kind(st.st_mode)}, not a regular "
                                     "file (a scheduler writes it: `dask scheduler --scheduler-file F`)")
        data = fh.read(SCHEDULER_FILE_MAX_BYTES + 1)
    if len(data) > SCHEDULER_FILE_MAX_BYTES:
        raise SchedulerFileError(f"Dask scheduler file {path} is larger than {SCHEDULER_FILE_MAX_BYTES:,} bytes: "
                                 "not a scheduler file (a few hundred bytes of JSON)")
    return data


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return kind
    return "not a regular file"


def _address_from_file(path: Path, seconds: float) -> str:
    """The scheduler address in a Dask scheduler file (waiting ``seconds`` for it to appear)."""
    _wait_for_file(path, seconds)
    try:
        address = json.loads(read_scheduler_file(path))["address"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"{path} is not a Dask scheduler file (no scheduler address in it: "
                           f"{_one_line(exc)})") from None
    if not isinstance(address, str):
        raise ClusterError(f"{path} is not a Dask scheduler file (its address is {address!r})")
    return address


def _cancel_reason(fut: Any) -> str:
    """Why Dask cancelled ``fut`` (one line), e.g. ``scheduler-connection-lost``."""
    try:
        fut.result(timeout=0)
    except BaseException as exc:  # FutureCancelledError is a BaseException
        return getattr(exc, "reason", None) or _one_line(exc)
    return "unknown"


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
