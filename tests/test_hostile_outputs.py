"""Where commands write (issue #27 items 4, 5, 14): no command writes into a shard folder or onto (or into)
one of its own inputs, and an export never replaces its build's source or a different file without
--overwrite. Every refusal is one line, exit 2, and leaves every byte as it was."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write

from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.cli.outputs import check_output, within
from tpuprep.errors import UsageError

LAYOUT, TILE = "layout:xla:random", "tile:xla"


def _run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_error_line(result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A TpuGraphs tree (src/npz) of two layout and two tile files, and its shards (shards/)."""
    root = tmp_path_factory.mktemp("outputs")
    src = root / "npz"
    for split in ("train", "test"):
        write(src, f"layout/xla/random/{split}/g_{split}.npz", layout_arrays(seed=1 if split == "train" else 2))
        write(src, f"tile/xla/{split}/t_{split}.npz", tile_arrays(seed=3 if split == "train" else 4))
    build(src, root / "shards")
    return root


@pytest.fixture(scope="module")
def model(tree) -> Path:
    """An untrained layout model (OUT.npz + OUT.json) for the tree's shards."""
    from tpuprep import open_dataset
    from tpuprep.train import Ranker
    from tpuprep.train.model import ModelConfig

    ds = open_dataset(tree / "shards")
    out = tree / "models" / "layout"
    out.parent.mkdir(exist_ok=True)
    Ranker.create(LAYOUT, ds.stats(LAYOUT), ModelConfig("layout", 8, 8, 1), 0).save(out)
    return out


# --------------------------------------------------------------------------- item 4: export and its source


@pytest.mark.parametrize("where", ["npz", "npz/layout", "npz/layout/xla/random/train"])
def test_export_into_the_builds_own_source_is_refused(tree, where):
    """The source tree itself, or a folder inside it: the manifest's inputs (path, size, sha256) are
    found there, so nothing is written (before: the originals were replaced, exit 0)."""
    src = tree / "npz"
    before = _snapshot(src)
    result = _run("export", "--shards", tree / "shards", "--dst-npz", tree / where, "-q")
    _one_error_line(result, "--dst-npz", "overlaps the source of these shards", "sha256")
    assert _snapshot(src) == before


def test_export_refuses_the_source_even_with_overwrite(tree):
    before = _snapshot(tree / "npz")
    result = _run("export", "--shards", tree / "shards", "--dst-npz", tree / "npz", "--overwrite", "-q")
    _one_error_line(result, "overlaps the source")
    assert _snapshot(tree / "npz") == before


def test_export_keeps_a_copy_of_the_source_tree_elsewhere_apart(tree, tmp_path):
    """A sibling whose name starts with the source's (``npz-evil``) is not the source: path tests, not
    string prefixes."""
    result = _run("export", "--shards", tree / "shards", "--dst-npz", tree.parent / (tree.name + "-evil"), "-q")
    assert result.exit_code == 0, result.output
    assert len(list((tree.parent / (tree.name + "-evil")).rglob("*.npz"))) == 4


def test_export_never_replaces_different_bytes_without_overwrite(tree, tmp_path):
    dst = tmp_path / "out"
    assert _run("export", "--shards", tree / "shards", "--dst-npz", dst, "-q").exit_code == 0
    fresh = _snapshot(dst)
    mine = dst / "tile/xla/train/t_train.npz"
    mine.write_bytes(b"my own notes, not an export")
    (dst / "tile/xla/test/t_test.npz").unlink()  # a refusal must come before any new file is written

    refused = _run("export", "--shards", tree / "shards", "--dst-npz", dst, "-q")
    _one_error_line(refused, str(mine), "different bytes", "--overwrite")
    assert mine.read_bytes() == b"my own notes, not an export"
    assert not (dst / "tile/xla/test/t_test.npz").exists()
    assert not [p for p in dst.rglob("*") if p.name.startswith(".")], "temporaries left behind"

    replaced = _run("export", "--shards", tree / "shards", "--dst-npz", dst, "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert "1 replaced (--overwrite)" in replaced.output
    assert _snapshot(dst) == fresh


def test_export_again_keeps_identical_files_without_overwrite(tree, tmp_path):
    dst = tmp_path / "out"
    assert _run("export", "--shards", tree / "shards", "--dst-npz", dst, "-q").exit_code == 0
    fresh = _snapshot(dst)
    stamps = {p: p.stat().st_ino for p in dst.rglob("*.npz")}
    again = _run("export", "--shards", tree / "shards", "--dst-npz", dst)
    assert again.exit_code == 0, again.output
    assert "4 already there with the same bytes" in again.output
    assert _snapshot(dst) == fresh
    assert {p: p.stat().st_ino for p in dst.rglob("*.npz")} == stamps  # left as they were, not rewritten


def test_export_api_refuses_the_source_and_an_empty_destination(tree, monkeypatch, tmp_path):
    from tpuprep.export import export

    with pytest.raises(UsageError, match="overlaps the source"):
        export(tree / "shards", tree / "npz")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="must not be empty"):
        export(tree / "shards", "")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- item 14: export --dst-npz ""


def test_export_to_an_empty_destination_is_refused(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _run("export", "--shards", tree / "shards", "--dst-npz", "", "-q")
    _one_error_line(result, "--dst-npz must not be empty")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- item 5: outputs into shard folders


def test_train_out_in_the_shard_folder_is_refused(tree):
    shards = tree / "shards"
    before = _snapshot(shards)
    result = _run("train", "--shards", shards, "--collection", LAYOUT, "--out", shards / "manifest",
                  "--epochs", "0", "--no-validate", "-q")
    _one_error_line(result, "--out", "shard folder", str(shards))
    assert _snapshot(shards) == before


def test_predict_out_onto_the_manifest_is_refused(tree, model):
    shards = tree / "shards"
    before = _snapshot(shards)
    result = _run("predict", "--shards", shards, "--model", model, "--out", shards / "manifest.json")
    _one_error_line(result, "--out", "shard folder")
    assert _snapshot(shards) == before


def test_predict_out_onto_its_own_model_is_refused(tree, model):
    before = _snapshot(tree / "models")
    result = _run("predict", "--shards", tree / "shards", "--model", model, "--out", f"{model}.json")
    _one_error_line(result, "--out", "is --model", "an input of this command")
    assert _snapshot(tree / "models") == before


def test_evaluate_out_in_the_shard_folder_is_refused(tree, model):
    shards = tree / "shards"
    before = _snapshot(shards)
    result = _run("evaluate", "--shards", shards, "--model", model, "--split", "train", "--out", shards / "eval",
                  "-q")
    _one_error_line(result, "--out", "shard folder")
    assert _snapshot(shards) == before


def test_export_into_another_shard_folder_is_refused(tree, tmp_path):
    other = tmp_path / "other-shards"
    build(tree / "npz", other, collections=[TILE])
    before = _snapshot(other)
    result = _run("export", "--shards", tree / "shards", "--dst-npz", other / "npz", "-q")
    _one_error_line(result, "--dst-npz", "shard folder", str(other))
    assert _snapshot(other) == before


def test_synth_into_a_shard_folder_is_refused(tree):
    before = _snapshot(tree / "shards")
    result = _run("synth", "--dst", tree / "shards", "-q")
    _one_error_line(result, "--dst", "shard folder")
    result = _run("demo", "--keep", tree / "shards" / "demo", "--workers", "1")
    _one_error_line(result, "--keep", "shard folder")
    assert _snapshot(tree / "shards") == before


@pytest.mark.parametrize("command", ["build", "verify"])
def test_log_file_onto_an_input_npz_is_refused(tree, tmp_path, command):
    """``--log-file`` naming an input (directly, or through a hard link) would append to it."""
    src = tree / "npz"
    before = _snapshot(src)
    victim = src / "layout/xla/random/train/g_train.npz"
    link = tmp_path / "innocent.log"
    os.link(victim, link)
    dst = tmp_path / "out" if command == "build" else tree / "shards"
    for log in (victim, link):
        result = _run(command, "--src", src, "--dst", dst, "-q", "--log-file", log)
        _one_error_line(result, "--log-file", "--src" if log == victim else "a zip (.npz) file, not a log")
    assert _snapshot(src) == before
    assert not (tmp_path / "out").exists()


def test_log_file_in_the_shard_folder_is_refused(tree):
    before = _snapshot(tree / "shards")
    result = _run("verify", "--src", tree / "npz", "--dst", tree / "shards", "-q",
                  "--log-file", tree / "shards" / "verify.log")
    _one_error_line(result, "--log-file", "shard folder")
    assert _snapshot(tree / "shards") == before


@pytest.mark.parametrize("exists", [True, False])
def test_build_log_file_inside_its_own_destination_is_refused_saying_why(tree, tmp_path, exists):
    """Issue #36 item 13: it was refused as "an input of this command"; --dst is the output. A log there
    would make --dst non-empty and be a file --resume refuses as not tpuprep's: the line says that and
    where to put it instead, and nothing is created."""
    dst = tmp_path / "out"
    if exists:
        dst.mkdir()
    result = _run("build", "--src", tree / "npz", "--dst", dst, "-q", "--log-file", dst / "logs" / "build.log")
    _one_error_line(result, f"--log-file {dst / 'logs' / 'build.log'} lies inside --dst {dst}, the shard folder "
                    "this command writes", "refuse as not tpuprep's", f"e.g. --log-file {dst}.log")
    assert "an input of this command" not in result.stderr
    assert (list(dst.iterdir()) == []) if exists else not dst.exists()
    beside = _run("build", "--src", tree / "npz", "--dst", dst, "-q", "--log-file", f"{dst}.log")
    assert beside.exit_code == 0 and "converted" in (tmp_path / "out.log").read_text()


def test_run_log_file_inside_its_dst_is_refused_saying_why(tree, tmp_path):
    run_file = tmp_path / "job.toml"
    run_file.write_text(f'src = "{tree / "npz"}"\ndst = "out"\n[cluster]\ntype = "serial"\n')
    result = _run("run", run_file, "-q", "--log-file", tmp_path / "out" / "run.log")
    _one_error_line(result, f"lies inside dst {tmp_path / 'out'}, the shard folder this command writes")
    result = _run("run", run_file, "-q", "--dst", tmp_path / "other", "--log-file", tmp_path / "other" / "r.log")
    _one_error_line(result, f"lies inside --dst {tmp_path / 'other'}, the shard folder this command writes")
    assert not (tmp_path / "out").exists() and not (tmp_path / "other").exists()


USER_README = "# My experiment\n\nNotes that exist nowhere else.\n"


@pytest.mark.parametrize("mode", [[], ["--resume"], ["--overwrite"]])
def test_a_users_readme_in_a_fresh_dst_is_never_replaced(tree, tmp_path, mode):
    """Issue #36 item 12: a README.md tpuprep did not write was taken for the dataset card; --resume
    replaced it (and --overwrite deleted it). It is a foreign file now: refused, every byte kept."""
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "README.md").write_text(USER_README)
    result = _run("build", "--src", tree / "npz", "--dst", dst, "-q", *mode)
    _one_error_line(result, f"--dst {dst} holds files tpuprep did not write (README.md)")
    assert _snapshot(dst) == {"README.md": USER_README.encode()}


@pytest.mark.parametrize("mode", ["--resume", "--overwrite"])
def test_a_card_replaced_by_the_users_readme_is_kept_and_tpuprep_s_own_card_is_rewritten(tree, tmp_path, mode):
    """After a build (or while one is interrupted: no manifest yet), the card is tpuprep's and --resume /
    --overwrite rewrite it; a README the user put in its place stops them with every byte kept."""
    dst = tmp_path / "out"
    assert _run("build", "--src", tree / "npz", "--dst", dst, "-q").exit_code == 0
    card = (dst / "README.md").read_bytes()
    assert card.startswith(b"---\n") and b"\n# TpuGraphs, preprocessed by tpuprep\n" in card
    (dst / "README.md").write_text("stale")  # the user's words in place of the card
    (dst / "manifest.json").unlink()  # an interrupted build: the card was written, the manifest not yet
    before = _snapshot(dst)
    result = _run("build", "--src", tree / "npz", "--dst", dst, "-q", mode)
    _one_error_line(result, "README.md", "refusing to " + mode.removeprefix("--"))
    assert _snapshot(dst) == before
    (dst / "README.md").write_bytes(card)
    assert _run("build", "--src", tree / "npz", "--dst", dst, "-q", mode).exit_code == 0
    assert (dst / "README.md").read_bytes() == card and (dst / "manifest.json").exists()


def test_run_log_file_onto_the_run_file_or_into_its_src_is_refused(tree, tmp_path):
    run_file = tmp_path / "job.toml"
    text = f'src = "{tree / "npz"}"\ndst = "{tmp_path / "out"}"\n[cluster]\ntype = "serial"\n'
    run_file.write_text(text)
    result = _run("run", run_file, "-q", "--log-file", run_file)
    _one_error_line(result, "--log-file", "the run file")
    assert run_file.read_text() == text
    before = _snapshot(tree / "npz")
    result = _run("run", run_file, "-q", "--log-file", tree / "npz" / "run.log")
    _one_error_line(result, "--log-file", "lies inside src")
    assert _snapshot(tree / "npz") == before
    assert not (tmp_path / "out").exists()


def test_run_file_errors_still_reach_a_good_log_file(tmp_path):
    run_file = tmp_path / "bad.toml"
    run_file.write_text("src = 3\n")
    log = tmp_path / "run.log"
    result = _run("run", run_file, "--log-file", log)
    assert result.exit_code == 2
    assert "error:" in log.read_text() and str(run_file) in log.read_text()


# --------------------------------------------------------------------------- the check itself


def test_outputs_beside_a_folder_with_a_common_prefix_are_allowed(tree, tmp_path):
    """Confinement is a path test: ``<shards>-evil/`` is not inside ``<shards>/``, ``<npz>.log`` is not
    the input ``<npz>``."""
    shards = tree / "shards"
    sibling = tree / "shards-evil" / "model"
    assert check_output(sibling, "--out", [("--shards", shards)]) == sibling.resolve()
    assert not within(sibling.resolve(), shards.resolve())
    assert within((shards / "x" / "y").resolve(), shards.resolve())
    victim = tree / "npz/tile/xla/train/t_train.npz"
    assert check_output(f"{victim}.log", "--log-file", [("--src", victim)]) is not None
    with pytest.raises(UsageError, match="is --src"):
        check_output(victim, "--log-file", [("--src", victim)])


def test_a_manifest_json_that_is_not_tpuprep_does_not_make_a_shard_folder(tmp_path):
    (tmp_path / "manifest.json").write_text('{"name": "some web app"}')
    assert check_output(tmp_path / "model", "--out") == (tmp_path / "model").resolve()
    fifo_dir = tmp_path / "f"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "manifest.json")  # never opened (a FIFO would block)
    assert check_output(fifo_dir / "model", "--out") is not None


def test_train_out_beside_the_shards_with_a_common_prefix_works(tree):
    out = tree.parent / (tree.name + "-models") / "m"
    result = _run("train", "--shards", tree / "shards", "--collection", TILE, "--out", out, "--epochs", "0",
                  "--no-validate", "-q")
    assert result.exit_code == 0, result.output
    assert Path(f"{out}.npz").is_file() and Path(f"{out}.json").is_file()
    assert np.load(f"{out}.npz", allow_pickle=False) is not None


def test_export_with_overwrite_refuses_a_folder_in_the_way_before_replacing_anything(tree, tmp_path):
    """With --overwrite an earlier existing file used to be replaced before a later target turned out
    to be a folder: the refusal comes before any file is replaced now."""
    dst = tmp_path / "out"
    assert _run("export", "--shards", tree / "shards", "--dst-npz", dst, "-q").exit_code == 0
    files = sorted(dst.rglob("*.npz"))
    mine, blocked = files[0], files[-1]
    mine.write_bytes(b"mine")
    blocked.unlink()
    blocked.mkdir()  # a folder where an export file goes
    refused = _run("export", "--shards", tree / "shards", "--dst-npz", dst, "--overwrite", "-q")
    _one_error_line(refused, str(blocked), "not a regular file")
    assert mine.read_bytes() == b"mine"


# --------------------------------------------------------------------------- check_output itself, edge by edge


def test_a_log_file_onto_a_tar_archive_is_refused(tmp_path):
    import tarfile

    archive = tmp_path / "inputs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(__file__, arcname="x.py")
    with pytest.raises(UsageError, match=r"is a tar archive, not a log: refusing to append to it"):
        check_output(archive, "--log-file", append=True)
    assert check_output(tmp_path / "fine.log", "--log-file", append=True) == (tmp_path / "fine.log").resolve()


def test_a_path_with_a_nul_byte_is_refused_in_one_line():
    with pytest.raises(UsageError, match=r"--out contains a NUL byte, which no path can hold"):
        check_output("a\0b", "--out")


def test_a_folder_holding_only_a_builds_staging_folder_is_a_shard_folder(tmp_path):
    """An interrupted build's folder (staging, no manifest yet) is a shard folder too."""
    (tmp_path / "shards" / ".tpuprep").mkdir(parents=True)
    with pytest.raises(UsageError, match="lies inside the shard folder"):
        check_output(tmp_path / "shards" / "model", "--out")


def test_an_input_folder_that_does_not_exist_yet_still_holds_no_output(tmp_path):
    """A run's src synthesised later, a build's --dst made later: a path inside either is refused now."""
    src = tmp_path / "later" / "npz"
    with pytest.raises(UsageError, match=r"lies inside src"):
        check_output(src / "run.log", "--log-file", [("src", src)], append=True)
