"""``tpuprep synth`` (a synthetic TpuGraphs tree) and ``tpuprep demo`` (the main job on an embedded default)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import click

from .common import EXIT_FATAL, FiniteFloatRange, comma_list, format_table, notes, summary_table
from .group import main
from .outputs import check_output


@main.command()
@click.option("--dst", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--profile", default="tiny", show_default=True, type=click.Choice(["tiny", "small", "bench", "full"]))
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0),
              help="An integer ≥ 0: the same profile and seed give byte-identical files.")
@click.option("--collections", default=None,
              help="Comma-separated collection ids or prefixes to write (e.g. layout:xla, tile).")
@click.option("--fraction", default=1.0, show_default=True, type=FiniteFloatRange(0, 1, min_open=True),
              help="Only the first ceil(F x count) files of every collection and split, each the same "
                   "file as in the whole profile (e.g. 0.25 for a quarter-scale rehearsal of full).")
@click.option("--dry-run", is_flag=True,
              help="Print the plan's sizes (files, c, nc, inflated node_config_feat per collection and "
                   "split) and exit; nothing is written.")
@click.option("-q", "--quiet", is_flag=True)
def synth(dst, profile, seed, collections, fraction, dry_run, quiet) -> None:
    """Write a synthetic TpuGraphs tree (DST/npz/...) and its noise-free runtimes (DST/truth/...).

    Resumable: run the same command again after an interruption; files already finished (as recorded
    in DST/synth-journal.jsonl, same size and sha256) are kept, the rest is written.
    """
    from ..inputs import check_selection
    from ..synth import synthesize

    check_selection(comma_list(collections), None)
    check_output(dst, "--dst")
    if dry_run:
        click.echo(plan_table(profile, seed, fraction, comma_list(collections)))
        return
    started = time.perf_counter()
    summary = synthesize(dst, profile, seed, collections=comma_list(collections), fraction=fraction,
                         progress=None if quiet else (lambda p: click.echo(f"done {p}", err=True)))
    if not quiet:
        reused = f" ({summary.reused} already there)" if summary.reused else ""
        click.echo(f"{len(summary.files)} files{reused} in {time.perf_counter() - started:.1f} s "
                   f"under {Path(dst) / 'npz'}")


def _gb(n: float) -> str:
    """Decimal units, as the dataset's sizes are published (≈ 400 GB)."""
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.2f} MB"


def plan_table(profile: str, seed: int, fraction: float, collections: list[str] | None) -> str:
    """The ``--dry-run`` report: per layout collection and split, files, files at c = 100,040, mean c,
    largest nc and inflated float32 node_config_feat bytes (decimal GB), then the train + valid total
    (and, for ``full``, its calibration target) and the tile file count. Writes nothing."""
    from ..synth import FULL_TARGETS, MAX_CONFIGS, file_plan, layout_size_plan
    from ..tpugraphs import selected

    planned = [p for p in layout_size_plan(profile, seed, fraction) if selected(p.spec.collection, collections)]
    groups: dict[tuple[str, str], list] = {}
    for p in planned:
        groups.setdefault((p.spec.collection, p.spec.split), []).append(p)
    head = ("collection", "split", "files", "c = 100,040", "mean c", "max nc", "node_config_feat")
    rows = [head] + [
        (c, s, f"{len(g):,}", f"{sum(p.configs == MAX_CONFIGS for p in g):,}",
         f"{sum(p.configs for p in g) / len(g):,.0f}", f"{max(p.config_nodes for p in g):,}",
         _gb(sum(p.config_feat_bytes for p in g)))
        for (c, s), g in sorted(groups.items())]
    train_valid = sum(p.config_feat_bytes for p in planned if p.spec.split != "test")
    target = (f" (calibrated to ≈ {_gb(FULL_TARGETS['config_feat_train_valid_bytes'])}, TPUGRAPHS.md §1)"
              if profile == "full" and fraction == 1.0 and not collections else "")
    tiles = sum(1 for s in file_plan(profile, seed, fraction)
                if s.collection == "tile:xla" and selected(s.collection, collections))
    return "\n".join([f"profile {profile}, seed {seed}, fraction {fraction:g}: nothing written",
                      format_table(rows, rule=True),
                      f"node_config_feat, train + valid: {_gb(train_valid)}{target}; all splits: "
                      f"{_gb(sum(p.config_feat_bytes for p in planned))}",
                      f"{len(planned):,} layout files and {tiles:,} tile files"])


@main.command()
@click.option("--keep", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Write the demo tree and shards here instead of a temporary folder.")
@click.option("--workers", default=min(2, os.cpu_count() or 1), show_default=True, type=click.IntRange(1, 64))
def demo(keep, workers) -> None:
    """Synthesise a small TpuGraphs tree, build it, verify it and print the summary."""
    from .. import open_dataset
    from ..build import build as run_build
    from ..runners import make_runner
    from ..synth import synthesize
    from ..verify import verify as run_verify

    check_output(keep, "--keep")
    with tempfile.TemporaryDirectory(prefix="tpuprep-demo-") as tmp:
        root = keep or Path(tmp)
        click.echo(f"1/3 synthesising the 'small' profile under {root / 'synth'} ...")
        t0 = time.perf_counter()
        synthesize(root / "synth", "small", 0)
        click.echo(f"    done in {time.perf_counter() - t0:.1f} s")
        click.echo(f"2/3 building shards into {root / 'shards'} with {workers} worker(s) ...")
        t0 = time.perf_counter()
        with notes():
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
        click.echo(keep_line(keep))
        if not check.ok:
            sys.exit(EXIT_FATAL)


def keep_line(keep: Path | None) -> str:
    """The demo's last line: where its files stay (``--keep DIR``), or that they go and how to keep them."""
    if keep is not None:
        return (f"kept: the tree in {keep / 'synth'}, the shards in {keep / 'shards'} "
                f"(tpuprep.open_dataset({str(keep / 'shards')!r}))")
    return "the demo's tree and shards are deleted now; to keep them: tpuprep demo --keep DIR"


