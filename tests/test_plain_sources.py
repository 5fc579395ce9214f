"""Issue 12 item 2: one ``.npz`` file, or a hand-made flat folder of them, is built with
``--collection``/``--split`` (CLI, ``build()``, run files, ``verify``, ``--resume``); a tree refuses
them, files outside a tree need them, and neither case ever writes an empty build with exit 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write

import tpuprep
from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.errors import UsageError
from tpuprep.pipeline import parse_pipeline, run_pipeline
from tpuprep.verify import verify


def _flat(root: Path) -> Path:
    """A hand-made folder: two layout files directly in it, named like TpuGraphs files."""
    write(root, "alexnet_train_batch_32.npz", layout_arrays(1, n=30, c=40))
    write(root, "resnet50.2x2.fp16.npz", layout_arrays(2, n=25, c=30))
    return root


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from tpuprep.cli import main; sys.exit(main())"
    env = {k: v for k, v in os.environ.items() if k != "TPUPREP_CRASH_AT"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env=env)


def _manifest(dst: Path) -> dict:
    return json.loads((dst / "manifest.json").read_text())


def test_single_file_builds_with_collection_and_split(tmp_path):
    src = _flat(tmp_path / "in") / "alexnet_train_batch_32.npz"
    dst = tmp_path / "out"
    r = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "-q",
                                  "--collection", "layout:xla:random", "--split", "train"])
    assert r.exit_code == 0, r.output
    m = _manifest(dst)
    assert [(i["path"], i["graph_id"], i["status"]) for i in m["inputs"]] == [
        ("layout/xla/random/train/alexnet_train_batch_32.npz", "layout:xla:random:alexnet_train_batch_32", "ok")]
    assert m["quarantine"] == []
    ds = tpuprep.open_dataset(dst)
    assert ds.graph_ids("layout:xla:random", split="train") == ["layout:xla:random:alexnet_train_batch_32"]
    v = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst), "-q",
                                  "--collection", "layout:xla:random", "--split", "train"])
    assert v.exit_code == 0, v.output
    assert "1 graphs and" in v.output and "all exact" in v.output


def test_flat_folder_builds_with_collection_and_split_and_verifies(tmp_path):
    src = _flat(tmp_path / "in")
    dst = tmp_path / "out"
    r = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "-q",
                                  "--collection", "layout:nlp:default", "--split", "valid"])
    assert r.exit_code == 0, r.output
    m = _manifest(dst)
    assert sorted(i["path"] for i in m["inputs"]) == ["layout/nlp/default/valid/alexnet_train_batch_32.npz",
                                                       "layout/nlp/default/valid/resnet50.2x2.fp16.npz"]
    assert list(m["collections"]) == ["layout:nlp:default"]
    assert m["collections"]["layout:nlp:default"]["totals"]["graphs"] == 2
    report = verify(src, dst, collection="layout:nlp:default", split="valid")
    assert report.ok and report.graphs_checked == 2, report.problems


def test_tile_file_with_collection_and_split(tmp_path):
    src = write(tmp_path / "in", "conv.npz", tile_arrays(3))
    report = build(src, tmp_path / "out", collection="tile:xla", split="test")
    assert [r["path"] for r in report.converted] == ["tile/xla/test/conv.npz"]
    assert report.quarantined == []


@pytest.mark.parametrize("which", ["file", "folder"])
def test_outside_a_tree_without_collection_is_a_usage_error_and_writes_nothing(tmp_path, which):
    flat = _flat(tmp_path / "in")
    src = flat / "alexnet_train_batch_32.npz" if which == "file" else flat
    dst = tmp_path / "out"
    r = _cli("build", "--src", str(src), "--dst", str(dst))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "--collection and --split" in r.stderr and str(src) in r.stderr
    assert not dst.exists()


def test_a_tree_refuses_collection_and_split(tmp_path):
    tree = tmp_path / "npz"
    write(tree, "layout/xla/random/train/g.npz", layout_arrays(1))
    for src in (tree, tree / "layout/xla/random/train", tree / "layout/xla/random/train/g.npz"):
        r = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path / "out"),
                                      "--collection", "layout:xla:random", "--split", "train"])
        assert r.exit_code == 2, r.output
        assert "is a TpuGraphs tree" in r.output and "layout:xla:random train" in r.output
    assert not (tmp_path / "out").exists()


def test_a_file_in_a_tree_builds_without_flags(tmp_path):
    f = write(tmp_path / "npz", "layout/xla/default/valid/g.npz", layout_arrays(4))
    r = CliRunner().invoke(main, ["build", "--src", str(f), "--dst", str(tmp_path / "out"), "-q"])
    assert r.exit_code == 0, r.output
    assert [i["path"] for i in _manifest(tmp_path / "out")["inputs"]] == ["layout/xla/default/valid/g.npz"]


@pytest.mark.parametrize(("args", "words"), [
    (["--collection", "layout:xla:random"], "--collection needs --split"),
    (["--split", "train"], "--split needs --collection"),
    (["--collection", "layout:xla", "--split", "train"], "'layout:xla' is not a collection id"),
    (["--collection", "layout:xla:random", "--split", "validation"], "'validation' is not a split"),
    (["--collection", "layout:xla:random", "--split", "train", "--collections", "layout"],
     "--collections exclude each other"),
    (["--collection", "layout:xla:random", "--split", "train", "--splits", "train"], "--splits exclude each other"),
])
def test_bad_collection_or_split_is_one_usage_line(tmp_path, args, words):
    src = _flat(tmp_path / "in")
    r = _cli("build", "--src", str(src), "--dst", str(tmp_path / "out"), *args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_build_api_checks_the_assignment_like_the_cli(tmp_path):
    src = _flat(tmp_path / "in")
    with pytest.raises(UsageError, match="--split needs --collection"):
        build(src, tmp_path / "out", split="train")
    with pytest.raises(UsageError, match=r"none of its 2 \.npz files is in a TpuGraphs tree"):
        build(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_subfolder_files_are_refused_not_ignored(tmp_path):
    src = _flat(tmp_path / "in")
    write(src, "more/extra.npz", layout_arrays(5))
    r = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path / "out"), "-q",
                                  "--collection", "layout:xla:random", "--split", "train"])
    assert r.exit_code == 3, r.output
    m = _manifest(tmp_path / "out")
    assert m["collections"]["layout:xla:random"]["totals"]["graphs"] == 2
    assert [(q["file"], q["error"].split(";")[0]) for q in m["quarantine"]] == [
        ("more/extra.npz", "lies in a subfolder of --src")]


def test_refusals_made_while_listing_record_the_bytes_listed(tmp_path):
    """Issue #37 review: since the storage split the quarantine record of a file refused while --src
    was listed said ``bytes: 0`` although its size was listed: a file outside the tree (``Unplaced``),
    a file in a subfolder or an archive member with --collection/--split, an archive that is not a tar.
    Each records its size as listed."""
    import tarfile

    tree = tmp_path / "npz"
    write(tree, "layout/xla/random/train/g.npz", layout_arrays(1))
    stray = write(tree, "extra/stray.npz", layout_arrays(2))
    (tree / "junk.tar").write_bytes(b"not a tar archive at all" * 50)
    report = build(tree, tmp_path / "out")
    sizes = {r["path"]: (r["bytes"], r["error"].split(":")[0].split(" (")[0]) for r in report.quarantined}
    assert sizes == {"extra/stray.npz": (stray.stat().st_size, "cannot tell its collection and split"),
                     "junk.tar": (1200, "not a readable uncompressed tar archive")}, sizes

    flat = _flat(tmp_path / "in")
    sub = write(flat, "more/extra.npz", layout_arrays(5))
    with tarfile.open(flat / "held.tar", "w") as tf:
        tf.add(sub, arcname="member.npz")
    report = build(flat, tmp_path / "out2", collection="layout:xla:random", split="train")
    sizes = {r["path"]: (r["bytes"], r["error"].split(";")[0]) for r in report.quarantined}
    assert sizes == {"more/extra.npz": (sub.stat().st_size, "lies in a subfolder of --src"),
                     "held.tar!member.npz": (sub.stat().st_size, "is a member of an archive of --src")}, sizes


def test_an_input_file_made_by_hand_is_converted_from_its_path(tmp_path):
    """``InputFile(...)`` without an ``origin`` (what a caller of ``convert_file`` makes by hand) is
    opened by its path: ``process_batch`` converted it, then ``open_source`` and ``current_stamp``
    failed on ``origin.store`` (issue #37 review); its stamp is the file's size and mtime."""
    from tpuprep.build import process_batch
    from tpuprep.inputs import InputFile, current_stamp
    from tpuprep.io.storage import resolve
    from tpuprep.options import BuildOptions

    path = write(tmp_path, "g.npz", tile_arrays(1))
    inp = InputFile("tile:xla:g", "tile/xla/train/g.npz", path, "tile", "tile:xla", "train", "g",
                    path.stat().st_size)
    stamp = [path.stat().st_size, path.stat().st_mtime_ns]
    assert current_stamp(inp) == stamp
    done = process_batch([inp], BuildOptions(), resolve(tmp_path / "staging"))
    assert [r["status"] for r in done["records"]] == ["ok"]
    assert done["fingerprint"]["files"] == [["tile/xla/train/g.npz", *stamp]]


def test_run_file_with_collection_and_split(tmp_path):
    _flat(tmp_path / "in")
    text = 'src = "in"\ndst = "out"\ncollection = "tile:xla"\nsplit = "train"\n'
    for i in range(2):
        write(tmp_path / "in", f"t{i}.npz", tile_arrays(i))
    (tmp_path / "in" / "alexnet_train_batch_32.npz").unlink()
    (tmp_path / "in" / "resnet50.2x2.fp16.npz").unlink()
    p = parse_pipeline(text, tmp_path / "run.toml")
    assert (p.collection, p.split) == ("tile:xla", "train")
    assert "tile:xla (every file of src)" in p.describe()
    report = run_pipeline(p)
    assert [r["path"] for r in report.converted] == ["tile/xla/train/t0.npz", "tile/xla/train/t1.npz"]
    with pytest.raises(UsageError, match=r"\[collection\] collection needs split"):
        parse_pipeline('src = "in"\ndst = "out"\ncollection = "tile:xla"\n', tmp_path / "run.toml")
    with pytest.raises(UsageError, match=r"\[collection\] collection/split and collections/splits exclude"):
        parse_pipeline(text + 'splits = ["train"]\n', tmp_path / "run.toml")
    with pytest.raises(UsageError, match=r"\[collection\] 'tile' is not a collection id"):
        parse_pipeline(text.replace('"tile:xla"', '"tile"'), tmp_path / "run.toml")


def test_resume_reuses_with_the_same_assignment_and_refuses_another(tmp_path):
    src = _flat(tmp_path / "in")
    dst = tmp_path / "out"
    env = {**os.environ, "TPUPREP_CRASH_AT": "part:2"}
    code = "import sys; from tpuprep.cli import main; sys.exit(main())"
    args = ["build", "--src", str(src), "--dst", str(dst), "-q", "--collection", "layout:xla:random",
            "--split", "train"]
    killed = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -9, killed.stderr
    other = _cli(*args[:-4], "--collection", "layout:xla:default", "--split", "train", "--resume")
    assert other.returncode == 2, other.stderr
    assert "--resume would drop what --dst" in other.stderr and "layout:xla:random train" in other.stderr
    resumed = _cli(*args, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(resumed.stdout)
    assert (doc["converted"], doc["reused"]) == (1, 1)
    clean = tmp_path / "clean"
    assert _cli(*[a if a != str(dst) else str(clean) for a in args]).returncode == 0
    assert (dst / "manifest.json").read_bytes() == (clean / "manifest.json").read_bytes()
