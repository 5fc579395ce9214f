"""The README's training path for users (issue #28 item 7): the "Train your first model" block and the
torch-free training block run exactly as written (taken from README.md) on a synthetic tree packed as
the official archive, ending in a valid submission; the README says where the archives are published;
``tpuprep demo`` ends by saying how to keep its files."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import tpuprep
from tpuprep.cli import main
from tpuprep.cli.synth import keep_line

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def section(heading: str) -> str:
    """The text of a README section, from its ``## heading`` to the next ``## ``."""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## )", README, re.M | re.S)
    assert m, f"README.md has no section '## {heading}'"
    return m.group(1)


def first_bash_block(text: str) -> str:
    m = re.search(r"^```bash\n(.*?)^```", text, re.M | re.S)
    assert m, "no ```bash block"
    return m.group(1)


def run_as_written(block: str, cwd: Path) -> subprocess.CompletedProcess:
    """``bash -euo pipefail`` runs the block in ``cwd`` with ``tpuprep`` on PATH (this checkout's CLI)."""
    bin_dir = cwd / ".bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "tpuprep"
    tool.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'from tpuprep.cli import main; main()' \"$@\"\n")
    tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(cwd),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)


def test_train_your_first_model_is_short_and_says_where_the_archives_are():
    text = section("Train your first model")
    assert len(text.strip().splitlines()) <= 15
    assert "https://github.com/google-research-datasets/tpu_graphs" in text
    assert '"Google - Fast or Slow? Predict AI Model Runtime"' in text and "Kaggle" in text
    block = first_bash_block(text)
    assert "--src npz_all.tar" in block and "tpuprep train" in block and "tpuprep predict" in block


def _submission_ids(path: Path) -> list[str]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and set(rows[0]) == {"ID", "TopConfigs"}
    return [r["ID"] for r in rows]


def test_train_your_first_model_runs_as_written_from_the_archive_to_a_csv(tmp_path, synth_root):
    """The block, verbatim, on the tiny synthetic tree packed as npz_all.tar: build, one model per
    collection, evaluate, predict --check; the CSV has one row per test graph of every collection."""
    with tarfile.open(tmp_path / "npz_all.tar", "w") as tar:
        tar.add(synth_root / "npz", arcname="npz")
    out = run_as_written(first_bash_block(section("Train your first model")), tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    ds = tpuprep.open_dataset(tmp_path / "shards")
    assert len(ds.collections) == 5
    for c in ds.collections:
        assert (tmp_path / "models" / f"{c.replace(':', '_')}.npz").exists()
    ids = _submission_ids(tmp_path / "submission.csv")
    assert len(ids) == sum(len(ds.graph_ids(c, "test")) for c in ds.collections)
    assert "submission is valid" in out.stderr


def test_the_torch_free_training_block_runs_as_written(tmp_path, synth_root, synth_shards):
    """The block of "Training on the shards (torch-free)", verbatim, next to shards/ and synth/ (the
    synthetic tree with its truth): the predict line's models are all trained by the lines above it."""
    (tmp_path / "shards").symlink_to(synth_shards)
    (tmp_path / "synth").symlink_to(synth_root)
    block = first_bash_block(section("Training on the shards (torch-free)"))
    for model in re.findall(r"--model (\S+)", block):
        assert f"--out {model} " in block, f"README predicts with {model}, which no line above trains"
    out = run_as_written(block, tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    ids = _submission_ids(tmp_path / "submission.csv")
    ds = tpuprep.open_dataset(synth_shards)
    assert sorted(ids) == sorted(ds.graph_ids("layout:xla:random", "test") + ds.graph_ids("tile:xla", "test"))


@pytest.mark.parametrize("keep", [False, True])
def test_demo_ends_by_saying_how_to_keep_its_files(tmp_path, keep):
    args = ["demo", "--workers", "1"] + (["--keep", str(tmp_path)] if keep else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last == keep_line(tmp_path if keep else None)
    if keep:
        assert str(tmp_path / "shards") in last and (tmp_path / "shards" / "manifest.json").exists()
    else:
        assert "tpuprep demo --keep DIR" in last
        made = Path(re.search(r"under (\S+)/synth ", result.output).group(1))
        assert not made.exists()  # deleted, as the line says
