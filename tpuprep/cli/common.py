"""What every command shares: exit codes, the one-line error guard, SIGTERM handling, progress on
stderr, the build summary table and comma-separated option lists."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import click

from ..errors import FatalError, UsageError, display_name

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_QUARANTINED = 0, 1, 2, 3


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses NaN and infinity (a NaN passes every bound comparison)."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> object:
        rv = super().convert(value, param, ctx)
        if isinstance(rv, float) and not math.isfinite(rv):
            self.fail(f"{rv!r} is not a finite number", param, ctx)
        return rv


def shown(location: str | Path) -> str:
    """A --src/--dst as it may be printed or logged: a URL without credentials (``user:secret@``,
    query strings), a local path as it is; either on one line (``errors.display_name``)."""
    from ..io.storage import shown as without_secrets

    return display_name(without_secrets(location))


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def summary_table(manifest: dict) -> str:
    """Per collection and split: graphs, configs → unique, nodes and edges before → after, bytes in → out."""
    head = ("collection", "split", "graphs", "configs → unique", "nodes → kept", "edges → kept", "bytes in → out")
    rows = [head]
    for cid, coll in manifest["collections"].items():
        for split, c in [*coll["splits"].items(), ("all", coll["totals"])]:
            rows.append((cid, split, f"{c['graphs']:,}", f"{c['configs']:,} → {c['unique_configs']:,}",
                         f"{c['nodes_before']:,} → {c['nodes_after']:,}", f"{c['edges_before']:,} → {c['edges_after']:,}",
                         f"{human(c['bytes_in'])} → {human(c['bytes_out'])}"))
    return format_table(rows, rule=True)


def format_table(rows: Sequence[Sequence[str]], left: int = 2, rule: bool = False) -> str:
    """Rows of strings (the first is the header) as aligned columns two spaces apart: the first ``left``
    columns left-aligned, the others right-aligned; ``rule``: a line of dashes under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) if i < left else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


PROGRESS_INTERVAL = 10.0
"""Seconds between two progress lines when stderr is not a terminal (a batch or SLURM log)."""


def clock(seconds: float) -> str:
    """``3725.0`` → ``"1:02:05"`` (h:mm:ss)."""
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class LogFile:
    """``--log-file PATH``: progress lines, quarantined files, the summary and the one-line error
    appended to PATH as plain text, each line prefixed by a local timestamp (``2025-06-01T14:03:07``).

    A FIFO that nobody reads is an ``OSError`` (ENXIO) when opening, not a hang. A write that fails
    (``/dev/full``: ENOSPC, a disk that fills up, EIO) breaks the log: ``error`` keeps the first
    ``OSError`` (naming PATH), later writes and ``close()`` are no-ops and never raise, and ``log()``
    raises that error once in the main thread (the guard turns it into one line, exit 1).
    A line never holds a control character or an undecodable byte of a file name (``display_name``)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        # O_NONBLOCK: a FIFO nobody reads is ENXIO at once instead of a hang; then blocking writes as usual
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        os.set_blocking(fd, True)
        self.fh = open(fd, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (closed by close())
        self.lock = threading.Lock()
        self.error: OSError | None = None
        self.reported = False

    def write(self, message: str) -> None:
        stamp = datetime.now().isoformat(timespec="seconds")
        with self.lock:
            if self.error is not None:
                return
            try:
                for line in message.split("\n"):  # other separators are escaped, not split on
                    self.fh.write(f"{stamp} {display_name(line)}\n")
            except OSError as exc:
                self.error = OSError(exc.errno, exc.strerror or str(exc), self.path)

    def close(self) -> OSError | None:
        """Close the file; the error that broke the log (or closing it) if it was never reported."""
        with self.lock:
            try:
                self.fh.close()
            except OSError as exc:
                if self.error is None:
                    self.error = OSError(exc.errno, exc.strerror or str(exc), self.path)
            return None if self.reported else self.error

    def raise_error(self) -> None:
        """Raise the error that broke the log (once, in the main thread: the command stops there)."""
        if self.error is not None and not self.reported and threading.current_thread() is threading.main_thread():
            self.reported = True
            raise self.error


_session: dict = {"log": None, "json": False}
"""What the running command asked of the guard: its log file and whether errors go out as JSON."""


def open_log(path: str | Path | None) -> LogFile | None:
    """Open ``--log-file`` for this command (the guard closes it after the command, error included)."""
    if path is not None:
        _session["log"] = LogFile(path)
    return _session["log"]


def log(message: str) -> None:
    """Append ``message`` to the command's ``--log-file``, if it has one."""
    if _session["log"] is not None:
        _session["log"].write(message)
        _session["log"].raise_error()


def json_errors() -> None:
    """The running command prints one JSON document: an error then prints ``{"status": "error", ...}``."""
    _session["json"] = True


def emit_document(doc: dict) -> None:
    """Print the command's ``--json`` result document, the log file closed first: a log that broke (in
    any thread) or fails to close raises its ``OSError`` here, so the guard prints the error document and
    exits 1 instead of a document saying the command succeeded."""
    entry = _session["log"]
    if entry is not None:
        _session["log"] = None
        error = entry.close()
        if error is not None:
            entry.reported = True
            raise error
    click.echo(json.dumps(doc))


def _end_session() -> OSError | None:
    """Close the log file; the error that broke it if the command never reported it."""
    error = _session["log"].close() if _session["log"] is not None else None
    _session.update(log=None, json=False)
    return error


class _Notes(logging.Handler):
    """Shows the notes tpuprep's modules log for people (level INFO on the ``tpuprep`` loggers: a first
    compile of the kernels, ``kernels.jit``) as one line: ``say(line)``, else on stderr (not with
    ``quiet``) and in the log file."""

    def __init__(self, quiet: bool, say: Callable[[str], None] | None):
        super().__init__(logging.INFO)
        self.quiet, self.say = quiet, say

    def emit(self, record: logging.LogRecord) -> None:
        text = display_name(record.getMessage())
        if self.say is not None:
            self.say(text)
            return
        log(text)
        if not self.quiet:
            click.echo(text, err=True)


@contextmanager
def notes(quiet: bool = False, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """While a command runs: say what tpuprep logs for people (``_Notes``; ``say``: a build's
    ``Progress.note``, which steps off its progress bar), e.g. that this process is compiling the
    kernels, which makes a first run on a machine take longer. Never on stdout (``--json``)."""
    logger = logging.getLogger("tpuprep")
    handler, level = _Notes(quiet, say), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class Progress:
    """Follows a build's (or verify's) events on stderr (silent with -q).

    Events: ``discovered`` ``{"inputs": [InputFile ...], "refused": [record ...]}``, then ``file``
    ``{"path", "bytes", "status", ["reused"]}`` per file done. On a terminal: a click progress bar.
    Otherwise (a batch or SLURM log) one line every ``PROGRESS_INTERVAL`` seconds, and one at the start
    and the end: files done/total, input bytes done/total, rate, elapsed time and ETA. With a log file
    (``--log-file``) the same lines go there too, whatever stderr is.
    """

    def __init__(self, quiet: bool, verbose: bool, *, label: str = "converting"):
        self.quiet, self.verbose, self.label = quiet, verbose, label
        self.bar = None
        self.bad = 0
        self.total = self.done = self.reused = 0
        self.bytes_total = self.bytes_done = self.bytes_reused = 0
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ticker: threading.Thread | None = None
        self.lines = not quiet and not sys.stderr.isatty()  # periodic lines on stderr

    def __call__(self, event: str, info: dict) -> None:
        if event == "skipped":  # files not read and why: in the log file, and on stderr with -v
            for r in info["skipped"]:
                log(f"skipped: {display_name(r['path'])}: {r['reason']}")
                if self.verbose:
                    click.echo(f"skipped: {display_name(r['path'])}: {r['reason']}", err=True)
        elif event == "discovered":
            for r in info["refused"]:
                self._bad(r)
            self._start(info["inputs"])
        elif event == "file":
            with self.lock:
                self.done += 1
                self.bytes_done += info.get("bytes") or 0
                if info.get("reused"):
                    self.reused += 1
                    self.bytes_reused += info.get("bytes") or 0
            if info["status"] != "ok":
                self._bad(info)
            elif self.verbose:
                self._echo(f"{'reused' if info.get('reused') else 'ok'}  {display_name(info['path'])}")
            if not info.get("reused"):  # a reused file's warnings were said by the build that converted it
                for warning in info.get("warnings") or ():
                    self.note(display_name(f"warning: {info['path']}: {warning}"))
            if self.bar:
                self.bar.update(1)

    def _start(self, inputs: list) -> None:
        if not inputs:
            return
        self.total, self.bytes_total = len(inputs), sum(i.size for i in inputs)
        self.started = time.monotonic()
        if not self.quiet and not self.lines:
            self.bar = click.progressbar(length=self.total, label=self.label, file=sys.stderr,
                                         show_pos=True, show_eta=True)
            self.bar.__enter__()
        if self.lines or _session["log"] is not None:
            self.report()
            self.ticker = threading.Thread(target=self._tick, name="tpuprep-progress", daemon=True)
            self.ticker.start()

    def _tick(self) -> None:
        interval = PROGRESS_INTERVAL
        while not self.stop.wait(interval):
            self.report()

    def line(self) -> str:
        """``converting: 7/23 files, 1.2 MB of 4.5 MB input (27%), 310.4 KB/s, elapsed 0:00:04, ETA 0:00:11``
        (the rate counts only work done by this run, not files reused by --resume)."""
        with self.lock:
            done, total, reused = self.done, self.total, self.reused
            bdone, btotal, breused = self.bytes_done, self.bytes_total, self.bytes_reused
        elapsed = time.monotonic() - self.started
        rate = (bdone - breused) / elapsed if elapsed > 0 else 0.0
        left = max(btotal - bdone, 0)
        eta = clock(left / rate) if rate > 0 else ("0:00:00" if left == 0 else "?")
        pct = 100.0 * bdone / btotal if btotal else 100.0
        extra = f" ({reused} reused)" if reused else ""
        return (f"{self.label}: {done}/{total} files{extra}, {human(bdone)} of {human(btotal)} input "
                f"({pct:.0f}%), {human(rate)}/s, elapsed {clock(elapsed)}, ETA {eta}")

    def report(self) -> None:
        """Write the progress line now (stderr when it is not a terminal, and the log file)."""
        text = self.line()
        log(text)
        if self.lines:
            with self.lock:
                click.echo(text, err=True)

    def _echo(self, text: str) -> None:
        log(text)
        with self.lock:
            click.echo(text, err=True)

    def note(self, text: str) -> None:
        """One line for people (``notes``): in the log file, and on stderr unless quiet, off the bar's line."""
        log(text)
        if not self.quiet:
            lead = "\n" if self.bar else ""  # step off the progress bar's line
            with self.lock:
                click.echo(f"{lead}{text}", err=True)

    def _bad(self, r: dict) -> None:
        self.bad += 1
        key = f" [{r['key']}]" if r.get("key") else ""
        lead = "\n" if self.bar else ""  # step off the progress bar's line
        text = display_name(f"quarantined: {r['path']}{key}: {r['error']}")  # one line, whatever the name
        log(text)
        with self.lock:
            click.echo(f"{lead}{text}", err=True)

    def close(self) -> None:
        if self.ticker is not None:
            self.stop.set()
            self.ticker.join()
            self.ticker = None
            self.report()  # the last line: everything done (or where an interrupt stopped it)
        if self.bar:
            self.bar.__exit__(None, None, None)
            self.bar = None


class LazyChoice(click.Choice):
    """A ``click.Choice`` whose choices come from ``load()`` when first needed (parsing the option,
    or the command's own ``--help``), so that defining the command imports nothing heavy."""

    def __init__(self, load: Callable[[], Sequence[str]], case_sensitive: bool = True):
        self._load = load
        super().__init__((), case_sensitive)

    @property
    def choices(self) -> Sequence[str]:  # type: ignore[override]
        return tuple(self._load())

    @choices.setter
    def choices(self, value: Sequence[str]) -> None:
        pass  # click.Choice.__init__ sets it; the loader is the source


class Interrupted(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C (``KeyboardInterrupt``) so that the same clean-up runs."""


def _raise_interrupted(signum: int, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Interrupted(signal.Signals(signum).name)


@contextmanager
def _sigterm_like_sigint() -> Iterator[None]:
    """While a command runs (in the main thread), SIGTERM raises ``Interrupted``; restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class GuardedGroup(click.Group):
    """Runs every subcommand under ``_guard`` (one line instead of a traceback) and handles SIGTERM
    like Ctrl-C."""

    def invoke(self, ctx: click.Context):
        outcome: list = []

        def run() -> None:
            outcome.append(super(GuardedGroup, self).invoke(ctx))

        with _sigterm_like_sigint():
            code = guard(run)
        if outcome:
            return outcome[0]
        ctx.exit(code)


def guard(fn: Callable[[], int | None]) -> int | None:
    """Run a command body; turn what stops it into one line on stderr and an exit code.

    ``UsageError`` -> 2; ``FatalError`` (and ``BadShards``), ``OSError`` (its errno name and file),
    lost local workers, Dask's comm errors and cancelled futures, and an interrupt (Ctrl-C, SIGTERM)
    -> 1. Anything else is a bug and keeps its traceback.
    """
    try:
        code = _guarded(fn)
    except SystemExit:
        if _log_failed(_end_session()):
            raise SystemExit(EXIT_FATAL) from None
        raise
    except BaseException:
        _end_session()
        raise
    return EXIT_FATAL if _log_failed(_end_session()) else code


def _log_failed(error: OSError | None) -> bool:
    """Say (one line on stderr) that the log file could not be written, when it could not."""
    if error is None:
        return False
    click.echo(f"error: {describe_os_error(error)} (the --log-file is incomplete)", err=True)
    return True


def _guarded(fn: Callable[[], int | None]) -> int | None:
    try:
        return fn()
    except UsageError as exc:
        return _say(str(exc), EXIT_USAGE)
    except FatalError as exc:
        return _say(str(exc), EXIT_FATAL)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise  # stdout closed early (`tpuprep info | head`): click exits quietly
        return _say(describe_os_error(exc), EXIT_FATAL)
    except KeyboardInterrupt as exc:
        what = exc.args[0] if isinstance(exc, Interrupted) and exc.args else "SIGINT"
        hint = ("; finished files are kept: run the same command with --resume to finish the build"
                if _command_name() in ("build", "run") else "")
        return _say(f"interrupted ({what}){hint}", EXIT_FATAL)
    except BaseException as exc:
        # Types of modules a command imported (runners, asyncio for Dask, a process pool): looked up
        # only now, so that a command that never loads them (``info``, ``--help``) does not pay for them.
        if isinstance(exc, _loaded(("tpuprep.runners.local", "WorkersLost"))):
            return _say(str(exc), EXIT_FATAL)
        if isinstance(exc, _loaded(("asyncio", "CancelledError"), ("concurrent.futures", "CancelledError"))):
            return _say(f"work was cancelled: {_first_line(exc)}; finished files are kept (--resume)",
                        EXIT_FATAL)
        raise


def _loaded(*names: tuple[str, str]) -> tuple[type, ...]:
    """The classes ``module.attribute`` of those modules already imported (an exception of a module
    never imported cannot have been raised)."""
    return tuple(getattr(sys.modules[m], a) for m, a in names if m in sys.modules)


def _say(message: str, code: int) -> int:
    """The one error line: on stderr, in the log file, and with --json the error document on stdout
    (a file name in it escaped by ``display_name``, so it stays one line)."""
    message = display_name(message)
    click.echo(f"error: {message}", err=True)
    if _session["log"] is not None:
        _session["log"].write(f"error: {message}")  # a log that breaks now is reported when it is closed
    if _session["json"]:
        click.echo(json.dumps({"status": "error", "exit_code": code, "error": message}))
    return code


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _command_name() -> str | None:
    """The subcommand being run (``build``, ``run``, ...), if any."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    return ctx.invoked_subcommand or ctx.info_name


def describe_os_error(exc: OSError) -> str:
    """One line for an ``OSError``: the file(s), what happened and the errno name, e.g.
    ``/data/shards/x.parquet: No space left on device (ENOSPC)``; Dask's comm errors say so."""
    if type(exc).__module__.startswith("distributed"):
        return f"lost the connection to the Dask cluster ({type(exc).__name__}: {_first_line(exc)})"
    what = exc.strerror or _first_line(exc)
    code = errno.errorcode.get(exc.errno) if isinstance(exc.errno, int) else None
    if code and code not in what:
        what += f" ({code})"
    files = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    return f"{' -> '.join(files)}: {what}" if files else what




def comma_list(value: str | None) -> list[str] | None:
    """``"a, b,,c"`` → ``["a", "b", "c"]``; None for an empty option."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def build_document(report, *, code: int, seconds: float, dst: str | Path) -> dict:
    """The ``--json`` document of ``build`` and ``run`` (keys documented in docs/cli.md). File names in
    it are escaped as in the manifest (``shards.manifest.named``)."""
    from ..shards.manifest import named

    if report.dry_run:
        return {"status": "dry-run", "exit_code": code, "dst": shown(dst),
                "would_convert": [display_name(p) for p in report.manifest["inputs"]],
                "refused": [named("file", r["path"]) | {"key": r.get("key") and display_name(r["key"]),
                                                         "error": display_name(r["error"])}
                            for r in report.records], "skipped": _skipped_entries(report.skipped)}
    return {"status": "quarantined" if code == EXIT_QUARANTINED else "ok", "exit_code": code,
            "dst": shown(dst), "converted": len(report.converted), "reused": len(report.reused_records),
            "quarantined": report.manifest["quarantine"], "skipped": _skipped_entries(report.skipped),
            "seconds": round(seconds, 3),
            "collections": report.manifest["collections"]}


def _skipped_note(skipped: list[dict]) -> str:
    """``, 2 skipped`` for the summary line; empty when nothing was skipped."""
    return f", {len(skipped)} skipped" if skipped else ""


def _skipped_entries(skipped: list[dict]) -> list[dict]:
    """The ``skipped`` entries of the ``--json`` document, their paths escaped (``display_name``)."""
    return [r | {"path": display_name(r["path"])} for r in skipped]


def skipped_lines(skipped: list[dict]) -> list[str]:
    """What was skipped, grouped by reason: ``skipped 2 (e.g. x.tar.gz): a compressed tar archive; ...``."""
    groups: dict[str, list[str]] = {}
    for r in skipped:
        groups.setdefault(r["reason"], []).append(display_name(r["path"]))
    return [f"skipped {len(paths)} (e.g. {paths[0]}): {reason}" for reason, paths in sorted(groups.items())]


def report_build(report, *, dry_run: bool, quiet: bool, started: float, dst: str | Path,
                 as_json: bool = False) -> int:
    """Print what a build did (or, for a dry run, would do) and return its exit code: 3 when inputs
    were quarantined (or refused, on a dry run), else 0. ``as_json``: only the JSON document on stdout.
    The one-line summary (``1 converted, 16 reused, 0 quarantined in 2.1 s -> DST``) also goes to
    the log file."""
    seconds = time.perf_counter() - started
    if dry_run:
        code = EXIT_QUARANTINED if report.records else EXIT_OK
        if as_json:
            emit_document(build_document(report, code=code, seconds=seconds, dst=dst))
            return code
        click.echo(f"would convert {len(report.manifest['inputs'])} files; {len(report.records)} refused"
                   + _skipped_note(report.skipped))
        for line in skipped_lines(report.skipped):
            click.echo(line)
        for path in report.manifest["inputs"]:
            click.echo(f"  {display_name(path)}")
        return code
    code = EXIT_QUARANTINED if report.quarantined else EXIT_OK
    summary = (f"{len(report.converted)} converted, {len(report.reused_records)} reused, "
               f"{len(report.quarantined)} quarantined{_skipped_note(report.skipped)} in {seconds:.1f} s -> {shown(dst)}")
    log(summary)
    if as_json:
        emit_document(build_document(report, code=code, seconds=seconds, dst=dst))
    elif not quiet:
        click.echo(summary_table(report.manifest))
        for line in skipped_lines(report.skipped):
            click.echo(line)
        click.echo(f"\n{summary}")
    return code
