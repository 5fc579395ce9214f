"""The ``tpuprep`` command line (click). Exit codes: 0 all converted, 1 fatal, 2 usage,
3 finished but some inputs were quarantined."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import click

from .errors import UsageError

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tpuprep")
def main() -> None:
    """Exact, fast preprocessing of TpuGraphs into compact Parquet/zstd shards."""


def _run_build(src, dst, *, hops, no_prune, no_repad, no_dedup, folds, collections, splits, workers,
               scheduler, scheduler_file, resume, overwrite, compression_level, dry_run, quiet, verbose) -> int:
    from .build import build
    from .options import BuildOptions
    from .runners.local import make_runner, tune_malloc

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


def _guard(fn) -> int:
    try:
        return fn()
    except UsageError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_USAGE
    except (FileNotFoundError, PermissionError) as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_FATAL


@main.command()
@click.option("--dst", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--profile", default="tiny", show_default=True, type=click.Choice(["tiny", "small", "bench", "full"]))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--collections", default=None, help="Comma-separated collection ids to write.")
@click.option("--fraction", default=1.0, show_default=True, type=click.FloatRange(0, 1, min_open=True),
              help="Only the first ceil(F x count) files of every collection and split, each the same "
                   "file as in the whole profile (e.g. 0.25 for a quarter-scale rehearsal of full).")
@click.option("-q", "--quiet", is_flag=True)
def synth(dst, profile, seed, collections, fraction, quiet) -> None:
    """Write a synthetic TpuGraphs tree (DST/npz/...) and its noise-free runtimes (DST/truth/...).

    Resumable: run the same command again after an interruption; files already finished (as recorded
    in DST/synth-journal.jsonl, same size and sha256) are kept, the rest is written.
    """
    from .synth import synthesize

    started = time.perf_counter()
    summary = synthesize(dst, profile, seed, collections=_collection_list(collections), fraction=fraction,
                         progress=None if quiet else (lambda p: click.echo(f"done {p}", err=True)))
    if not quiet:
        reused = f" ({summary.reused} already there)" if summary.reused else ""
        click.echo(f"{len(summary.files)} files{reused} in {time.perf_counter() - started:.1f} s "
                   f"under {Path(dst) / 'npz'}")


@main.command()
@click.option("--keep", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Write the demo tree and shards here instead of a temporary folder.")
@click.option("--workers", default=min(2, os.cpu_count() or 1), show_default=True, type=click.IntRange(1, 64))
def demo(keep, workers) -> None:
    """Synthesise a small TpuGraphs tree, build it, verify it and print the summary."""
    from . import open_dataset
    from .build import build as run_build
    from .runners.local import make_runner
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

    try:
        m = read_manifest(dst)
    except FileNotFoundError:
        click.echo(f"error: {dst} has no manifest.json (not a finished tpuprep build)", err=True)
        sys.exit(EXIT_FATAL)
    if as_json:
        click.echo(json.dumps({k: v for k, v in m.items() if k != "inputs"}, indent=1))
        return
    click.echo(f"{dst}: schema {m['schema_version']}, tpuprep {m['versions']['tpuprep']}, options {m['options']}")
    click.echo(summary_table(m))
    total = sum(s["bytes"] for s in m["shards"])
    click.echo(f"\n{len(m['shards'])} shards, {_human(total)}; {len(m['quarantine'])} quarantined inputs")
    for q in m["quarantine"]:
        click.echo(f"  quarantined: {q['file']}: {q['error']}")


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
