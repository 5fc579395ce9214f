"""What every command shares: exit codes, the one-line error guard, SIGTERM handling, progress on
stderr, the build summary table and comma-separated option lists."""

from __future__ import annotations

import errno
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import click

from ..errors import FatalError, UsageError

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_QUARANTINED = 0, 1, 2, 3


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
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Progress:
    """A click progress bar on stderr that follows the build's events (silent with -q)."""

    def __init__(self, quiet: bool, verbose: bool):
        self.quiet, self.verbose = quiet, verbose
        self.bar = None
        self.bad = 0

    def __call__(self, event: str, info: dict) -> None:
        if event == "discovered":
            for r in info["refused"]:
                self._bad(r)
            if not self.quiet and info["inputs"]:
                self.bar = click.progressbar(length=len(info["inputs"]), label="converting", file=sys.stderr,
                                             show_pos=True, show_eta=True)
                self.bar.__enter__()
        elif event == "file":
            if info["status"] != "ok":
                self._bad(info)
            elif self.verbose:
                click.echo(f"ok  {info['path']}", err=True)
            if self.bar:
                self.bar.update(1)

    def _bad(self, r: dict) -> None:
        self.bad += 1
        key = f" [{r['key']}]" if r.get("key") else ""
        lead = "\n" if self.bar else ""  # step off the progress bar's line
        click.echo(f"{lead}quarantined: {r['path']}{key}: {r['error']}", err=True)

    def close(self) -> None:
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
    click.echo(f"error: {message}", err=True)
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


def report_build(report, *, dry_run: bool, quiet: bool, started: float, dst: str | Path) -> int:
    """Print what a build did (or, for a dry run, would do) and return its exit code: 3 when inputs
    were quarantined (or refused, on a dry run), else 0."""
    if dry_run:
        click.echo(f"would convert {len(report.manifest['inputs'])} files; {len(report.records)} refused")
        for path in report.manifest["inputs"]:
            click.echo(f"  {path}")
        return EXIT_QUARANTINED if report.records else EXIT_OK
    if not quiet:
        click.echo(summary_table(report.manifest))
        click.echo(f"\n{len(report.records) - len(report.quarantined)} converted, {len(report.quarantined)} "
                   f"quarantined in {time.perf_counter() - started:.1f} s -> {dst}")
    return EXIT_QUARANTINED if report.quarantined else EXIT_OK
