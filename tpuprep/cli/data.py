"""``tpuprep info``, ``tpuprep verify`` and ``tpuprep export``: looking at, checking and exporting a shard folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .common import (
    EXIT_FATAL,
    EXIT_OK,
    Progress,
    comma_list,
    human,
    json_errors,
    log,
    open_log,
    summary_table,
)
from .group import main


@main.command()
@click.argument("dst", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help="Print the manifest without its inputs as one JSON document (docs/cli.md).")
def info(dst, as_json) -> None:
    """Describe a shard folder."""
    from ..shards.manifest import read_manifest

    if as_json:
        json_errors()
    m = read_manifest(dst)  # BadShards (one line, exit 1) for a folder that is not a finished build
    if as_json:
        click.echo(json.dumps({k: v for k, v in m.items() if k != "inputs"}, indent=1))
        return
    lines = [f"{dst}: schema {m['schema_version']}, tpuprep {m['versions']['tpuprep']}, "
             f"options {m['options']}", summary_table(m),
             f"\n{len(m['shards'])} shards, {human(sum(s['bytes'] for s in m['shards']))}; "
             f"{len(m['quarantine'])} quarantined inputs"]
    lines += [f"  quarantined: {q['file']}: {q['error']}" for q in m["quarantine"]]
    click.echo("\n".join(lines))


def _source(ctx: click.Context, param: click.Parameter, value: str) -> Path | str:
    """--src of verify: a URL as it is, else a local folder or tar archive that exists."""
    from ..io.files import looks_like_url

    if looks_like_url(value):
        return value
    if not Path(value).exists():
        raise click.BadParameter(f"{value} does not exist", ctx, param)
    return Path(value)


@main.command()
@click.option("--src", required=True, callback=_source,
              help="The build's inputs: a folder, a tar archive, a folder of tars, or a URL of one.")
@click.option("--dst", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--collections", default=None)
@click.option("--splits", default=None)
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="Check graphs in N local processes (the report is the same as with 1).")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document on stdout instead of the report (docs/cli.md).")
@click.option("--log-file", default=None, type=click.Path(dir_okay=False),
              help="Also append progress lines, the result and errors here.")
def verify(src, dst, collections, splits, workers, quiet, as_json, log_file) -> None:
    """Prove that the shards in DST reconstruct the inputs in SRC exactly."""
    import time

    from ..verify import verify as run_verify

    if as_json:
        json_errors()
    if open_log(log_file):
        log(f"tpuprep verify --src {src} --dst {dst}")
    started = time.perf_counter()
    progress = Progress(quiet, False, label="verifying")
    try:
        report = run_verify(src, dst, collections=comma_list(collections), splits=comma_list(splits),
                            progress=progress, workers=workers)
    finally:
        progress.close()
    code = EXIT_OK if report.ok else EXIT_FATAL
    verdict = (f"{report.graphs_checked} graphs and {report.shards_checked} shards checked: "
               + ("all exact" if report.ok else f"{len(report.problems)} problems"))
    for p in report.problems:
        log(f"MISMATCH {p}")
    log(verdict)
    if as_json:
        click.echo(json.dumps({"ok": report.ok, "exit_code": code, "graphs_checked": report.graphs_checked,
                               "shards_checked": report.shards_checked, "problems": report.problems,
                               "seconds": round(time.perf_counter() - started, 3)}))
    else:
        for p in report.problems:
            click.echo(f"MISMATCH {p}")
        click.echo(verdict)
    sys.exit(code)


@main.command("export")
@click.option("--shards", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A shard folder written by `tpuprep build` (with its manifest.json).")
@click.option("--dst-npz", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output root: files go to DIR/<layout|tile>/.../<split>/<stem>.npz.")
@click.option("--packed", is_flag=True,
              help="Write node_config_feat as (c_u, nc, 3) int32 base-7 codes instead of (c_u, nc, 18) float32.")
@click.option("--collections", default=None, help="Comma-separated collection ids or prefixes, e.g. layout:xla,tile.")
@click.option("--splits", default=None, help="Comma-separated splits (train,valid,test).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
def export_cmd(shards: Path, dst_npz: Path, packed: bool, collections: str | None, splits: str | None,
               quiet: bool) -> None:
    """Write the preprocessed graphs back as TpuGraphs-style .npz files (pruned, re-padded, deduplicated)."""
    from .. import open_dataset
    from ..export import export, selected_graphs

    bar = None
    try:
        if not quiet:
            total = len(selected_graphs(open_dataset(shards), comma_list(collections), comma_list(splits)))
            bar = click.progressbar(length=total, label="exporting", file=sys.stderr, show_pos=True)
            bar.__enter__()
        report = export(shards, dst_npz, packed=packed, collections=comma_list(collections), splits=comma_list(splits),
                        progress=(lambda _rel: bar.update(1)) if bar else None)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if not quiet:
        click.echo(f"exported {report.graphs} graphs ({report.bytes / 2**20:.1f} MB) to {report.root}"
                   + (" with packed base-7 codes" if packed else ""))
