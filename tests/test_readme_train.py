"""The README's training path for users (issue #28 item 7, #37 item 3): the "Train your first model" block
runs as written on a synthetic tree (the one edit: the `tiny` profile for `small`, seconds instead of
minutes), its archive path builds the same tree packed as the official archive, and the torch-free
training block of docs/training.md runs as written; the README says where the archives are published;
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
TRAINING = (ROOT / "docs" / "training.md").read_text()
TORCH_FREE = "`tpuprep train`, `evaluate`, `predict` (torch-free)"


def section(heading: str, text: str = README) -> str:
    """The text of a Markdown section, from its ``## heading`` to the next ``## `` (or the end)."""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"no section '## {heading}'"
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
    assert "tpuprep synth --dst synth/ --profile small" in block and "\nsrc=synth/npz " in block
    assert "src=npz_all.tar" in block  # the archive path, in the comment the reader follows
    assert "--src $src" in block and "tpuprep train" in block and "tpuprep predict" in block


def test_the_readme_is_a_short_introduction():
    assert len(README.splitlines()) <= 250


def _submission_ids(path: Path) -> list[str]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and set(rows[0]) == {"ID", "TopConfigs"}
    return [r["ID"] for r in rows]


def test_train_your_first_model_runs_as_written_on_a_synthetic_tree(tmp_path):
    """The block, verbatim but for the profile (tiny for small): synth, build, one model per collection,
    evaluate, predict --check; the CSV has one row per test graph of every collection."""
    block = first_bash_block(section("Train your first model"))
    assert block.count("--profile small") == 1
    out = run_as_written(block.replace("--profile small", "--profile tiny"), tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    ds = tpuprep.open_dataset(tmp_path / "shards")
    assert len(ds.collections) == 5
    for c in ds.collections:
        assert (tmp_path / "models" / f"{c.replace(':', '_')}.npz").exists()
    ids = _submission_ids(tmp_path / "submission.csv")
    assert len(ids) == sum(len(ds.graph_ids(c, "test")) for c in ds.collections)
    assert "submission is valid" in out.stderr


def test_train_your_first_model_builds_from_the_archive_as_its_comment_says(tmp_path, synth_root, synth_shards):
    """With the real data the reader skips the synth line and sets src=npz_all.tar: the build line then
    reads the archive in place and makes the shards the extracted tree makes (same graphs, same rows)."""
    with tarfile.open(tmp_path / "npz_all.tar", "w") as tar:
        tar.add(synth_root / "npz", arcname="npz")
    lines = first_bash_block(section("Train your first model")).splitlines()
    assert lines[0].startswith("tpuprep synth ") and lines[1].startswith("src=synth/npz ")
    build = next(line for line in lines if line.startswith("tpuprep build "))
    out = run_as_written(f"src=npz_all.tar\n{build}\n", tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    from_tar, from_tree = tpuprep.open_dataset(tmp_path / "shards"), tpuprep.open_dataset(synth_shards)
    assert from_tar.collections == from_tree.collections and len(from_tar.collections) == 5
    for c in from_tree.collections:
        assert from_tar.graph_ids(c) == from_tree.graph_ids(c)
        assert from_tar.counts(c) == from_tree.counts(c)


def test_the_torch_free_training_block_runs_as_written(tmp_path, synth_root, synth_shards):
    """The block of docs/training.md's torch-free section, verbatim, next to shards/ and synth/ (the
    synthetic tree with its truth): the predict line's models are all trained by the lines above it."""
    (tmp_path / "shards").symlink_to(synth_shards)
    (tmp_path / "synth").symlink_to(synth_root)
    block = first_bash_block(section(TORCH_FREE, TRAINING))
    for model in re.findall(r"--model (\S+)", block):
        assert f"--out {model} " in block, f"docs/training.md predicts with {model}, which no line above trains"
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
