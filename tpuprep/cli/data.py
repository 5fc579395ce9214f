"""``tpuprep info``, ``tpuprep verify`` and ``tpuprep export``: looking at, checking and exporting a shard folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import UsageError, display_name
from .common import (
    EXIT_FATAL,
    EXIT_OK,
    FiniteFloatRange,
    Progress,
    comma_list,
    emit_document,
    human,
    json_errors,
    log,
    open_log,
    shown,
    skipped_lines,
    summary_table,
)
from .group import main
from .outputs import check_output


def _recount(dst: Path, manifest: dict) -> dict:
    """``manifest`` with each collection's ``splits`` and ``totals`` recounted from the shards
    (``Dataset.counts``: one polars scan per collection) instead of read from the manifest."""
    from .. import open_dataset

    ds = open_dataset(dst)
    collections = {}
    for cid, coll in manifest["collections"].items():
        splits = ds.counts(cid)
        totals = {k: sum(s[k] for s in splits.values()) for k in coll["totals"]}
        collections[cid] = coll | {"splits": splits, "totals": totals}
    return manifest | {"collections": collections}


class ShardFolder(click.ParamType):
    """A shard folder: an existing local directory (``Path``, checked as ``click.Path`` checks it) or a
    URL (``s3://bucket/shards``: ``str``, resolved once by the command through ``io.storage``)."""

    name = "folder or URL"
    _local = click.Path(exists=True, file_okay=False, path_type=Path)

    def convert(self, value, param, ctx):
        from ..io.storage import local_path

        # the parameter as the command spells it: --shards (export), --dst (verify), DST (info)
        what = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name if param else "DST"
        try:
            path = local_path(value, what) if isinstance(value, str) else value
        except UsageError as exc:  # a file URL naming a host or a relative path
            self.fail(str(exc), param, ctx)
        return value if path is None else self._local.convert(path, param, ctx)


SHARD_FOLDER = ShardFolder()


@main.command()
@click.argument("dst", type=SHARD_FOLDER)
@click.option("--json", "as_json", is_flag=True,
              help="Print the manifest without its inputs as one JSON document (docs/cli.md).")
@click.option("--from-shards", is_flag=True,
              help="Recount the per-collection and per-split table from the shards (a polars scan) "
                   "instead of reading the manifest's counts; slower (docs/cli.md).")
def info(dst, as_json, from_shards) -> None:
    """Describe a shard folder (a local folder or a URL such as s3://bucket/shards)."""
    from ..io.storage import resolve
    from ..shards.manifest import read_manifest

    if as_json:
        json_errors()
    store = resolve(dst, what="DST")
    m = read_manifest(store)  # BadShards (one line, exit 1) for a folder that is not a finished build
    if from_shards:
        m = _recount(dst, m)
    if as_json:
        click.echo(json.dumps({k: v for k, v in m.items() if k != "inputs"}, indent=1))
        return
    lines = [f"{shown(dst)}: schema {m['schema_version']}, tpuprep {m['versions']['tpuprep']}, "
             f"options {m['options']}", summary_table(m),
             f"\n{len(m['shards'])} shards, {human(sum(s['bytes'] for s in m['shards']))}; "
             f"{len(m['quarantine'])} quarantined inputs"]
    lines += [f"  quarantined: {q['file']}: {q['error']}" for q in m["quarantine"]]
    click.echo("\n".join(lines))


def _source(ctx: click.Context, param: click.Parameter, value: str) -> Path | str:
    """--src of verify: a URL as it is, else a local folder or tar archive that exists."""
    from ..io.storage import local_path

    try:
        path = local_path(value, "--src")
    except UsageError as exc:  # a file URL naming a host or a relative path
        raise click.BadParameter(str(exc), ctx, param) from None
    if path is None:
        return value
    if not path.exists():
        raise click.BadParameter(f"{value} does not exist", ctx, param)
    return path


@main.command()
@click.option("--src", required=True, callback=_source,
              help="The --src of the build: a TpuGraphs tree or a part of it, a file or flat folder, a tar "
                   "archive, a folder of tars, or a URL of one.")
@click.option("--dst", required=True, type=SHARD_FOLDER, help="The shard folder (or its URL).")
@click.option("--collections", default=None)
@click.option("--splits", default=None)
@click.option("--collection", default=None, help="As given to the build (a --src outside a TpuGraphs tree).")
@click.option("--split", default=None, help="As given to the build (with --collection).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="Check graphs in N local processes (the report is the same as with 1).")
@click.option("--sample", default=None, type=FiniteFloatRange(0, 1, min_open=True),
              help="Check only this fraction of the graphs against their inputs (a subset drawn with "
                   "--seed); every shard is still checked (docs/cli.md).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0),
              help="Seed of the --sample subset (an integer ≥ 0).")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document on stdout instead of the report (docs/cli.md).")
@click.option("--log-file", default=None, type=click.Path(dir_okay=False),
              help="Also append progress lines, the result and errors here.")
def verify(src, dst, collections, splits, collection, split, workers, sample, seed, quiet, as_json,
           log_file) -> None:
    """Prove that the shards in DST (a folder or URL) reconstruct the inputs in SRC exactly."""
    import time

    from ..verify import verify as run_verify

    if as_json:
        json_errors()
    check_output(log_file, "--log-file", [("--src", src)], append=True)  # --dst: refused as a shard folder
    if open_log(log_file):
        log(f"tpuprep verify --src {shown(src)} --dst {shown(dst)}")
    started = time.perf_counter()
    progress = Progress(quiet, False, label="verifying")
    try:
        report = run_verify(src, dst, collections=comma_list(collections), splits=comma_list(splits),
                            collection=collection, split=split, progress=progress, workers=workers,
                            sample=sample, seed=seed)
    finally:
        progress.close()
    code = EXIT_OK if report.ok else EXIT_FATAL
    sampled = (f" (a --sample {sample:g} of {report.graphs_total} graphs, --seed {seed})"
               if sample is not None else "")
    verdict = (f"{report.graphs_checked} graphs{sampled} and {report.shards_checked} shards checked: "
               + ("all exact" if report.ok else f"{len(report.problems)} problems"))
    for p in report.problems:
        log(f"MISMATCH {display_name(p)}")
    notes = skipped_lines(report.skipped)  # under --src, neither built nor checked: "all exact" says nothing of them
    for line in notes:
        log(line)
    log(verdict)
    if as_json:
        emit_document({"ok": report.ok, "exit_code": code, "graphs_checked": report.graphs_checked,
                       "graphs_total": report.graphs_total,
                       "sample": None if sample is None else {"fraction": sample, "seed": seed},
                       "shards_checked": report.shards_checked, "problems": report.problems,
                       "skipped": [r | {"path": display_name(r["path"])} for r in report.skipped],
                       "seconds": round(time.perf_counter() - started, 3)})
    else:
        for p in report.problems:
            click.echo(f"MISMATCH {display_name(p)}")
        for line in notes:
            click.echo(line)
        click.echo(verdict)
    sys.exit(code)


@main.command("export")
@click.option("--shards", required=True, type=SHARD_FOLDER,
              help="A shard folder written by `tpuprep build` (with its manifest.json), or its URL.")
@click.option("--dst-npz", required=True, type=click.Path(file_okay=False),
              help="Output root: files go to DIR/<layout|tile>/.../<split>/<stem>.npz (not inside the shard "
                   "folder or the build's source tree).")
@click.option("--overwrite", is_flag=True,
              help="Replace existing files whose bytes differ (files with the same bytes are always kept).")
@click.option("--packed", is_flag=True,
              help="Write node_config_feat as (c_u, nc, 3) int32 base-7 codes instead of (c_u, nc, 18) float32.")
@click.option("--collections", default=None, help="Comma-separated collection ids or prefixes, e.g. layout:xla,tile.")
@click.option("--splits", default=None, help="Comma-separated splits (train,valid,test).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
def export_cmd(shards: Path | str, dst_npz: str, overwrite: bool, packed: bool, collections: str | None,
               splits: str | None, quiet: bool) -> None:
    """Write the preprocessed graphs back as TpuGraphs-style .npz files (pruned, re-padded, deduplicated)."""
    from .. import open_dataset
    from ..export import export, selected_graphs

    check_output(dst_npz, "--dst-npz", [("--shards", shards)])
    bar = None
    try:
        source = shards if isinstance(shards, Path) else open_dataset(shards)  # a URL: resolved once
        if not quiet:
            ds = source if not isinstance(source, Path) else open_dataset(source)
            total = len(selected_graphs(ds, comma_list(collections), comma_list(splits)))
            bar = click.progressbar(length=total, label="exporting", file=sys.stderr, show_pos=True)
            bar.__enter__()
        report = export(source, dst_npz, packed=packed, collections=comma_list(collections), splits=comma_list(splits),
                        progress=(lambda _rel: bar.update(1)) if bar else None, overwrite=overwrite)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if not quiet:
        click.echo(f"exported {report.graphs} graphs ({report.bytes / 2**20:.1f} MB) to {report.root}"
                   + (" with packed base-7 codes" if packed else "")
                   + (f"; {len(report.unchanged)} already there with the same bytes" if report.unchanged else "")
                   + (f"; {len(report.replaced)} replaced (--overwrite)" if report.replaced else ""))
