"""The ``tpuprep`` command group. Exit codes: 0 all converted, 1 fatal, 2 usage, 3 finished but some
inputs were quarantined. Every subcommand runs under ``common.guard`` (one line, never a traceback)."""

from __future__ import annotations

import click

from .common import GuardedGroup


@click.group(cls=GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tpuprep")
def main() -> None:
    """Exact, fast preprocessing of TpuGraphs into compact Parquet/zstd shards."""
