"""``tpuprep run FILE.toml``: a batch build described by a run file (``tpuprep.pipeline``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from .common import EXIT_OK, Progress, log, notes, open_log, report_build
from .group import main
from .outputs import check_output


@main.command("run")
@click.argument("pipeline", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--src", default=None, type=click.Path(path_type=Path),
              help="Override the run file's src (relative to the current folder).")
@click.option("--dst", default=None, type=click.Path(path_type=Path),
              help="Override the run file's dst (relative to the current folder).")
@click.option("--workers", default=None, type=click.IntRange(1, 1024), help="Run on N local workers instead.")
@click.option("--scheduler", default=None, help="Run on the Dask scheduler at ADDR instead.")
@click.option("--scheduler-file", default=None, type=click.Path(dir_okay=False), help="Run on this Dask cluster instead.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run of this file.")
@click.option("--dry-run", is_flag=True, help="Print the plan and the files it would convert, and exit.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
@click.option("-v", "--verbose", is_flag=True, help="One line per converted file.")
@click.option("--log-file", default=None, type=click.Path(dir_okay=False),
              help="Also append progress lines, quarantined files, the summary and errors here.")
def run_cmd(pipeline: Path, src, dst, workers, scheduler, scheduler_file, resume, dry_run, quiet, verbose,
            log_file) -> None:
    """Run the batch build described by a PIPELINE run file (TOML; see pipelines/README.md)."""
    from ..errors import UsageError
    from ..pipeline import load_pipeline, override, run_pipeline

    check_output(log_file, "--log-file", [("the run file", pipeline), ("--src", src),
                                          ("--scheduler-file", scheduler_file)], append=True, writes=[("--dst", dst)])
    try:
        p = override(load_pipeline(pipeline), src=src, dst=dst, workers=workers, scheduler=scheduler,
                     scheduler_file=scheduler_file, resume=resume)
    except UsageError:
        _open_log(log_file, pipeline, resume)  # the run file's error goes to the log too
        raise
    check_output(log_file, "--log-file", [("src", p.src), ("the scheduler file", p.cluster.scheduler_file)],
                 append=True, writes=[("dst", p.dst)])
    _open_log(log_file, pipeline, resume)
    if dry_run or not quiet:
        click.echo(p.describe())
    if dry_run:
        if p.synth is not None and not p.src.exists():
            click.echo("\nsrc does not exist yet: it would be synthesised first, then converted")
            sys.exit(EXIT_OK)
        click.echo()
        sys.exit(report_build(run_pipeline(p, dry_run=True), dry_run=True, quiet=quiet, started=0.0, dst=p.dst))
    if p.synth is not None and not p.src.exists() and not quiet:
        click.echo(f"\nsynthesising the {p.synth.profile!r} profile (seed {p.synth.seed}) into {p.src} ...")
    progress = Progress(quiet, verbose)
    started = time.perf_counter()
    try:
        with notes(quiet, progress.note):
            report = run_pipeline(p, progress=progress, quiet_dask=True, converter=True)
    finally:
        progress.close()
    if not quiet:
        click.echo()
    sys.exit(report_build(report, dry_run=False, quiet=quiet, started=started, dst=p.dst))


def _open_log(log_file: str | None, pipeline: Path, resume: bool) -> None:
    """Open ``--log-file`` (already checked by ``check_output``) and record the command line."""
    if open_log(log_file):
        log(f"tpuprep run {pipeline}" + (" --resume" if resume else ""))
