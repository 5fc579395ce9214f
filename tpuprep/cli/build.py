"""``tpuprep build``: convert a TpuGraphs npz tree into Parquet shards."""

from __future__ import annotations

import sys
import time

import click

from .common import Progress, comma_list, json_errors, log, notes, open_log, report_build, shown
from .group import main
from .outputs import check_output


def _run_build(src, dst, *, hops, no_prune, no_repad, no_dedup, folds, collections, splits, collection,
               split, workers, scheduler, scheduler_file, resume, overwrite, compression_level, dry_run,
               quiet, verbose, as_json, log_file) -> int:
    from ..build import build
    from ..options import BuildOptions
    from ..request import cluster_of_flags, make_request, open_runner

    opts = BuildOptions(hops=hops, prune=not no_prune, repad=not no_repad, dedup=not no_dedup, folds=folds,
                        compression_level=compression_level)
    if as_json:
        json_errors()
    check_output(log_file, "--log-file", [("--src", src)], append=True, writes=[("--dst", dst)])
    if open_log(log_file):
        log(f"tpuprep build --src {shown(src)} --dst {shown(dst)}" + (" --resume" if resume else ""))
    request = make_request(src, dst, opts, collections=collections, splits=splits, collection=collection,
                           split=split, resume=resume, overwrite=overwrite, dry_run=dry_run,
                           cluster=cluster_of_flags(workers, scheduler, scheduler_file))
    progress = Progress(quiet, verbose)
    started = time.perf_counter()
    with notes(quiet, progress.note):
        runner = None if dry_run else open_runner(request.cluster, quiet=True, converter=True)
        try:
            report = build(request, runner=runner, progress=progress)
        finally:
            progress.close()
            if runner is not None:
                runner.close()
    return report_build(report, dry_run=dry_run, quiet=quiet, started=started, dst=dst, as_json=as_json)


@main.command()
@click.option("--src", required=True,
              help="npz/, npz_all/npz, a collection or split folder, one .npz file, a tar archive "
                   "(npz_all.tar, npz_tile_xla_train.tar, ...) or a folder of them, or a URL of any of "
                   "these (s3://bucket/npz_all.tar); or (with --collection and --split) a file or flat "
                   "folder outside a TpuGraphs tree.")
@click.option("--dst", required=True,
              help="Shard folder (a local folder outside --src) or an object-store URL (s3://bucket/prefix).")
@click.option("--hops", default=1, show_default=True, type=click.IntRange(0, 64), help="Pruning radius K.")
@click.option("--no-prune", is_flag=True, help="Keep whole layout graphs.")
@click.option("--no-repad", is_flag=True, help="Keep the original 0 padding of node_feat.")
@click.option("--no-dedup", is_flag=True, help="Keep duplicate configurations.")
@click.option("--folds", default=5, show_default=True, type=click.IntRange(1, 1000), help="K of the grouped K-fold ids.")
@click.option("--collections", default=None, help="Comma-separated collection ids or prefixes, e.g. layout:xla,tile.")
@click.option("--splits", default=None, help="Comma-separated splits (train,valid,test).")
@click.option("--collection", default=None,
              help="The collection of every file of a --src outside a TpuGraphs tree (e.g. layout:xla:random).")
@click.option("--split", default=None,
              help="The split of every file of a --src outside a TpuGraphs tree (with --collection).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 1024), help="Local worker processes.")
@click.option("--scheduler", default=None, help="Address of an existing Dask scheduler (tcp://host:port).")
@click.option("--scheduler-file", default=None, type=click.Path(dir_okay=False), help="Dask scheduler file.")
@click.option("--resume", is_flag=True, help="Finish an interrupted build in --dst.")
@click.option("--overwrite", is_flag=True, help="Replace a previous build in --dst.")
@click.option("--compression-level", default=3, show_default=True, type=click.IntRange(1, 22), help="zstd level.")
@click.option("--dry-run", is_flag=True, help="List what would be converted and exit.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
@click.option("-v", "--verbose", is_flag=True, help="One line per converted file.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document on stdout instead of the summary (docs/cli.md).")
@click.option("--log-file", default=None, type=click.Path(dir_okay=False),
              help="Also append progress lines, quarantined files, the summary and errors here.")
def build(src, dst, **kw) -> None:
    """Convert a TpuGraphs npz tree into Parquet shards."""
    kw["collections"] = comma_list(kw["collections"])
    kw["splits"] = comma_list(kw["splits"])
    sys.exit(_run_build(src, dst, **kw))


