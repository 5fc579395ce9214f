"""Issue 12 item 8: ``Dataset.counts`` and ``tpuprep info --from-shards`` recount the per-collection and
per-split table from the shards (their int columns, read through the opened files); the default
``tpuprep info`` keeps reading the manifest (its start-up budget: ``tests/test_cli_startup.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

import tpuprep
from tpuprep.cli import main


def _info(*args: str) -> str:
    r = CliRunner().invoke(main, ["info", *args])
    assert r.exit_code == 0, r.output
    return r.output


def test_counts_recount_the_manifest_table_from_the_shards(synth_shards: Path) -> None:
    ds = tpuprep.open_dataset(synth_shards)
    for cid in ds.collections:
        assert ds.counts(cid) == ds.manifest["collections"][cid]["splits"], cid


def test_info_from_shards_prints_the_same_table_and_json(synth_shards: Path) -> None:
    assert _info(str(synth_shards), "--from-shards") == _info(str(synth_shards))
    assert _info(str(synth_shards), "--json", "--from-shards") == _info(str(synth_shards), "--json")


def test_info_from_shards_reads_the_shards_not_the_manifest(synth_shards: Path, tmp_path: Path) -> None:
    copy = tmp_path / "shards"
    shutil.copytree(synth_shards, copy)
    m = json.loads((copy / "manifest.json").read_text())
    true = m["collections"]["tile:xla"]["splits"]["train"]["configs"]
    m["collections"]["tile:xla"]["splits"]["train"]["configs"] = true + 1000
    m["collections"]["tile:xla"]["totals"]["configs"] += 1000
    (copy / "manifest.json").write_text(json.dumps(m))
    shown = json.loads(_info(str(copy), "--json"))["collections"]["tile:xla"]
    recounted = json.loads(_info(str(copy), "--json", "--from-shards"))["collections"]["tile:xla"]
    assert shown["splits"]["train"]["configs"] == true + 1000
    assert recounted["splits"]["train"]["configs"] == true
    assert recounted["totals"]["configs"] == shown["totals"]["configs"] - 1000
