"""The ``tpuprep`` command line (click). Exit codes: 0 all converted, 1 fatal, 2 usage,
3 finished but some inputs were quarantined."""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from .errors import FatalError, UsageError

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_QUARANTINED = 0, 1, 2, 3


def _human(n: float) -> str:
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
                         f"{_human(c['bytes_in'])} → {_human(c['bytes_out'])}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class _Progress:
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


class _GuardedGroup(click.Group):
    """Runs every subcommand under ``_guard`` (one line instead of a traceback) and handles SIGTERM
    like Ctrl-C."""

    def invoke(self, ctx: click.Context):
        outcome: list = []

        def run() -> None:
            outcome.append(super(_GuardedGroup, self).invoke(ctx))

        with _sigterm_like_sigint():
            code = _guard(run)
        if outcome:
            return outcome[0]
        ctx.exit(code)


@click.group(cls=_GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tpuprep")
def main() -> None:
    """Exact, fast preprocessing of TpuGraphs into compact Parquet/zstd shards."""


def _run_build(src, dst, *, hops, no_prune, no_repad, no_dedup, folds, collections, splits, workers,
               scheduler, scheduler_file, resume, overwrite, compression_level, dry_run, quiet, verbose) -> int:
    from .build import build
    from .options import BuildOptions
    from .runners import make_runner
    from .runners.worker import tune_malloc

    opts = BuildOptions(hops=hops, prune=not no_prune, repad=not no_repad, dedup=not no_dedup, folds=folds,
                        compression_level=compression_level)
    scheduler = scheduler or (None if scheduler_file or workers > 1 else os.environ.get("DASK_SCHEDULER_ADDRESS"))
    progress = _Progress(quiet, verbose)
    started = time.perf_counter()
    runner = None if dry_run else make_runner(workers, scheduler, scheduler_file)
    if runner is not None and runner.name == "serial":
        tune_malloc()  # this process converts the files itself (a library caller's process is left alone)
    try:
        report = build(src, dst, opts, collections=collections, splits=splits, runner=runner, resume=resume,
                       overwrite=overwrite, dry_run=dry_run, progress=progress)
    finally:
        progress.close()
        if runner is not None:
            runner.close()
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


def _collection_list(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


@main.command()
@click.option("--src", required=True, help="npz/, npz_all/npz, a collection folder or a split folder.")
@click.option("--dst", required=True, help="Shard folder (a local folder outside --src).")
@click.option("--hops", default=1, show_default=True, type=click.IntRange(0, 64), help="Pruning radius K.")
@click.option("--no-prune", is_flag=True, help="Keep whole layout graphs.")
@click.option("--no-repad", is_flag=True, help="Keep the original 0 padding of node_feat.")
@click.option("--no-dedup", is_flag=True, help="Keep duplicate configurations.")
@click.option("--folds", default=5, show_default=True, type=click.IntRange(1, 1000), help="K of the grouped K-fold ids.")
@click.option("--collections", default=None, help="Comma-separated collection ids or prefixes, e.g. layout:xla,tile.")
@click.option("--splits", default=None, help="Comma-separated splits (train,valid,test).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 1024), help="Local worker processes.")
@click.option("--scheduler", default=None, help="Address of an existing Dask scheduler (tcp://host:port).")
@click.option("--scheduler-file", default=None, type=click.Path(dir_okay=False), help="Dask scheduler file.")
@click.option("--resume", is_flag=True, help="Finish an interrupted build in --dst.")
@click.option("--overwrite", is_flag=True, help="Replace a previous build in --dst.")
@click.option("--compression-level", default=3, show_default=True, type=click.IntRange(1, 22), help="zstd level.")
@click.option("--dry-run", is_flag=True, help="List what would be converted and exit.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
@click.option("-v", "--verbose", is_flag=True, help="One line per converted file.")
def build(src, dst, **kw) -> None:
    """Convert a TpuGraphs npz tree into Parquet shards."""
    kw["collections"] = _collection_list(kw["collections"])
    kw["splits"] = _collection_list(kw["splits"])
    sys.exit(_guard(lambda: _run_build(src, dst, **kw)))


def _guard(fn: Callable[[], int | None]) -> int | None:
    """Run a command body; turn what stops it into one line on stderr and an exit code.

    ``UsageError`` -> 2; ``FatalError`` (and ``BadShards``), ``OSError`` (its errno name and file),
    lost local workers, Dask's comm errors and cancelled futures, and an interrupt (Ctrl-C, SIGTERM)
    -> 1. Anything else is a bug and keeps its traceback.
    """
    import asyncio
    import concurrent.futures as cf

    from .runners.local import WorkersLost

    try:
        return fn()
    except UsageError as exc:
        return _say(str(exc), EXIT_USAGE)
    except (FatalError, WorkersLost) as exc:
        return _say(str(exc), EXIT_FATAL)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise  # stdout closed early (`tpuprep info | head`): click exits quietly
        return _say(describe_os_error(exc), EXIT_FATAL)
    except (asyncio.CancelledError, cf.CancelledError) as exc:  # Dask's, or a closed pool's
        return _say(f"work was cancelled: {_first_line(exc)}; finished files are kept (--resume)",
                    EXIT_FATAL)
    except KeyboardInterrupt as exc:
        what = exc.args[0] if isinstance(exc, Interrupted) and exc.args else "SIGINT"
        hint = ("; finished files are kept: run the same command with --resume to finish the build"
                if _command_name() in ("build", "run") else "")
        return _say(f"interrupted ({what}){hint}", EXIT_FATAL)


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


@main.command()
@click.option("--dst", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--profile", default="tiny", show_default=True, type=click.Choice(["tiny", "small", "bench", "full"]))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--collections", default=None, help="Comma-separated collection ids to write.")
@click.option("-q", "--quiet", is_flag=True)
def synth(dst, profile, seed, collections, quiet) -> None:
    """Write a synthetic TpuGraphs tree (DST/npz/...) and its noise-free runtimes (DST/truth/...)."""
    from .synth import synthesize

    started = time.perf_counter()
    summary = synthesize(dst, profile, seed, collections=_collection_list(collections),
                         progress=None if quiet else (lambda p: click.echo(f"wrote {p}", err=True)))
    if not quiet:
        click.echo(f"{len(summary.files)} files in {time.perf_counter() - started:.1f} s under {Path(dst) / 'npz'}")


@main.command()
@click.option("--keep", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Write the demo tree and shards here instead of a temporary folder.")
@click.option("--workers", default=min(2, os.cpu_count() or 1), show_default=True, type=click.IntRange(1, 64))
def demo(keep, workers) -> None:
    """Synthesise a small TpuGraphs tree, build it, verify it and print the summary."""
    from . import open_dataset
    from .build import build as run_build
    from .runners import make_runner
    from .synth import synthesize
    from .verify import verify as run_verify

    with tempfile.TemporaryDirectory(prefix="tpuprep-demo-") as tmp:
        root = keep or Path(tmp)
        click.echo(f"1/3 synthesising the 'small' profile under {root / 'synth'} ...")
        t0 = time.perf_counter()
        synthesize(root / "synth", "small", 0)
        click.echo(f"    done in {time.perf_counter() - t0:.1f} s")
        click.echo(f"2/3 building shards into {root / 'shards'} with {workers} worker(s) ...")
        t0 = time.perf_counter()
        runner = make_runner(workers)
        try:
            report = run_build(root / "synth" / "npz", root / "shards", runner=runner, overwrite=True)
        finally:
            runner.close()
        click.echo(f"    done in {time.perf_counter() - t0:.1f} s\n")
        click.echo(summary_table(report.manifest))
        click.echo("\n3/3 verifying that the shards reconstruct every input exactly ...")
        check = run_verify(root / "synth" / "npz", root / "shards")
        click.echo(f"    {check.graphs_checked} graphs, {check.shards_checked} shards: "
                   + ("all exact" if check.ok else f"{len(check.problems)} problems"))
        for p in check.problems[:20]:
            click.echo(f"    {p}", err=True)
        ds = open_dataset(root / "shards")
        gid = ds.graph_ids(ds.collections[0], "train")[0]
        g = ds.load_graph(gid)
        click.echo(f"\nexample: tpuprep.open_dataset(...).load_graph({gid!r}) -> node_feat {g.node_feat.shape}, "
                   f"{g.num_unique_configs} unique of {g.num_configs} configs")
        if not check.ok:
            sys.exit(EXIT_FATAL)


@main.command()
@click.argument("dst", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest's collections as JSON.")
def info(dst, as_json) -> None:
    """Describe a shard folder."""
    from .shards.manifest import read_manifest

    m = read_manifest(dst)  # BadShards (one line, exit 1) for a folder that is not a finished build
    if as_json:
        click.echo(json.dumps({k: v for k, v in m.items() if k != "inputs"}, indent=1))
        return
    lines = [f"{dst}: schema {m['schema_version']}, tpuprep {m['versions']['tpuprep']}, "
             f"options {m['options']}", summary_table(m),
             f"\n{len(m['shards'])} shards, {_human(sum(s['bytes'] for s in m['shards']))}; "
             f"{len(m['quarantine'])} quarantined inputs"]
    lines += [f"  quarantined: {q['file']}: {q['error']}" for q in m["quarantine"]]
    click.echo("\n".join(lines))


@main.command()
@click.option("--src", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--dst", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--collections", default=None)
@click.option("--splits", default=None)
@click.option("-q", "--quiet", is_flag=True)
def verify(src, dst, collections, splits, quiet) -> None:
    """Prove that the shards in DST reconstruct the inputs in SRC exactly."""
    from .verify import verify as run_verify

    report = run_verify(src, dst, collections=_collection_list(collections), splits=_collection_list(splits),
                        progress=None if quiet else (lambda p: click.echo(f"checked {p}", err=True)))
    for p in report.problems:
        click.echo(f"MISMATCH {p}")
    click.echo(f"{report.graphs_checked} graphs and {report.shards_checked} shards checked: "
               + ("all exact" if report.ok else f"{len(report.problems)} problems"))
    sys.exit(EXIT_OK if report.ok else EXIT_FATAL)


def _register_commands() -> None:
    from .export import export_cmd
    from .pipeline import run_cmd

    main.add_command(export_cmd, "export")
    main.add_command(run_cmd, "run")


_register_commands()


def _register_training_commands() -> None:
    try:
        from .train.cli import evaluate_cmd, predict_cmd, train_cmd
    except ImportError:
        return
    main.add_command(train_cmd, "train")
    main.add_command(evaluate_cmd, "evaluate")
    main.add_command(predict_cmd, "predict")


_register_training_commands()
