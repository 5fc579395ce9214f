"""Hostile and faulty situations around ``tpuprep build`` (issues #11, #12): a ``--dst`` that overlaps
``--src``, deletion of files tpuprep did not write, a ``--resume`` with a narrower selection, two builds
into one folder, URLs, input files that vanish, change, turn into links or are FIFOs, and filters that
match nothing. Each case refuses with one line (exit 2) or quarantines the file, never loses data."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write
from trees import reference_build, run_tpuprep, tree_bytes

from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.io.files import looks_like_url

LOCK = ".tpuprep.lock"


def _tree(root: Path) -> Path:
    for i in range(3):
        write(root, f"layout/xla/random/train/g{i}.npz", layout_arrays(i, n=30, c=60))
        write(root, f"tile/xla/train/t{i}.npz", tile_arrays(i))
    write(root, "layout/xla/random/valid/v0.npz", layout_arrays(7))
    write(root, "tile/xla/valid/tv0.npz", tile_arrays(7))
    return root


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """(src tree, the files of a clean full build of it)."""
    src = _tree(tmp_path_factory.mktemp("hostile") / "npz")
    return src, tree_bytes(reference_build(tmp_path_factory, src, "hostile-clean"))


@pytest.fixture
def tree(tmp_path) -> Path:
    """A private copy of the tree (tests here change or delete inputs)."""
    return _tree(tmp_path / "data" / "npz")


@pytest.fixture
def built(tmp_path, clean) -> Path:
    src, _ = clean
    dst = tmp_path / "shards"
    assert _run("build", "--src", str(src), "--dst", str(dst), "-q").exit_code == 0
    return dst


# ------------------------------------------------------------------------ 1. --src and --dst overlap


@pytest.mark.parametrize("flags", [[], ["--resume"], ["--overwrite"], ["--dry-run"], ["--dry-run", "--resume"]])
def test_dst_that_is_a_parent_of_src_is_refused_and_nothing_is_deleted(tree, flags):
    before = tree_bytes(tree)
    result = _run("build", "--src", str(tree / "tile" / "xla"), "--dst", str(tree), "-q", *flags)
    assert result.exit_code == 2, result.output
    assert "overlap" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert tree_bytes(tree) == before


@pytest.mark.parametrize("flags", [[], ["--dry-run"]])
def test_dst_inside_src_is_refused_before_anything_is_written(tree, flags):
    before = tree_bytes(tree)
    result = _run("build", "--src", str(tree), "--dst", str(tree / "out"), "-q", *flags)
    assert result.exit_code == 2 and "overlap" in result.stderr, result.output
    assert "would convert" not in result.output
    assert not (tree / "out").exists() and tree_bytes(tree) == before


def test_overlap_through_a_symbolic_link_is_refused(tree, tmp_path):
    alias = tmp_path / "alias"
    alias.symlink_to(tree)
    before = tree_bytes(tree)
    result = _run("build", "--src", str(tree / "tile" / "xla"), "--dst", str(alias), "--overwrite", "-q")
    assert result.exit_code == 2 and "overlap" in result.stderr
    result = _run("build", "--src", str(alias), "--dst", str(tree / "layout" / "out"), "-q")
    assert result.exit_code == 2 and "overlap" in result.stderr
    assert tree_bytes(tree) == before


def test_run_file_with_overwrite_into_a_parent_of_src_is_refused(tree):
    run_file = tree.parent / "bad.toml"
    run_file.write_text('src = "npz/tile/xla"\ndst = "npz"\noverwrite = true\n[cluster]\ntype = "serial"\n')
    before = tree_bytes(tree)
    result = _run("run", str(run_file), "-q")
    assert result.exit_code == 2 and "overlap" in result.stderr, result.output
    assert tree_bytes(tree) == before


# ------------------------------------------------------------ deleting only what tpuprep wrote


@pytest.mark.parametrize("flag", ["--overwrite", "--resume"])
def test_a_foreign_file_inside_the_shard_folders_is_never_deleted(built, clean, flag):
    src, _ = clean
    precious = built / "layout" / "xla" / "notes.txt"
    precious.write_text("mine")
    before = tree_bytes(built)
    result = _run("build", "--src", str(src), "--dst", str(built), flag, "-q")
    assert result.exit_code == 2 and "did not write" in result.stderr and "layout/xla/notes.txt" in result.stderr
    assert tree_bytes(built) == before
    dry = _run("build", "--src", str(src), "--dst", str(built), flag, "--dry-run")
    assert dry.exit_code == 2 and "did not write" in dry.stderr


def test_a_symbolic_link_inside_dst_is_neither_followed_nor_deleted(built, clean, tmp_path):
    src, _ = clean
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (built / "tile" / "xla" / "graphs" / "train-00009-of-00010.parquet").symlink_to(outside / "keep.txt")
    (built / "layout" / "xla" / "elsewhere").symlink_to(outside)
    result = _run("build", "--src", str(src), "--dst", str(built), "--overwrite", "-q")
    assert result.exit_code == 2 and "did not write" in result.stderr
    assert (outside / "keep.txt").read_text() == "keep"
    assert (built / "layout" / "xla" / "elsewhere").is_symlink()


def test_overwrite_of_a_previous_build_still_replaces_it_exactly(built, clean):
    src, files = clean
    for stale in ("graphs/test-00000-of-00001.parquet", "configs/.train-00000-of-00002.parquet.tmp-999"):
        (built / "tile" / "xla" / stale).write_bytes(b"left over by tpuprep")
    result = _run("build", "--src", str(src), "--dst", str(built), "--overwrite", "-q")
    assert result.exit_code == 0, result.output
    assert tree_bytes(built) == files


# ----------------------------------------------------------------- 2. --resume with a narrower selection


@pytest.mark.parametrize("narrower", [["--collections", "tile"], ["--splits", "train"]])
def test_resume_with_a_narrower_selection_is_refused(built, clean, narrower):
    src, files = clean
    result = _run("build", "--src", str(src), "--dst", str(built), "--resume", "-q", *narrower)
    assert result.exit_code == 2, result.output
    assert "--resume would drop" in result.stderr and "layout:xla:random valid" in result.stderr
    assert tree_bytes(built) == files


def test_resume_after_a_crash_refuses_to_drop_staged_parts_and_accepts_a_wider_selection(tmp_path, clean):
    src, files = clean
    dst = tmp_path / "out"
    killed = run_tpuprep("build", "--src", str(src), "--dst", str(dst), "--collections", "tile", "-q", crash="part:2")
    assert killed.returncode == -9, killed.stderr
    result = _run("build", "--src", str(src), "--dst", str(dst), "--resume", "--collections", "layout", "-q")
    assert result.exit_code == 2 and "tile:xla train" in result.stderr
    result = _run("build", "--src", str(src), "--dst", str(dst), "--resume", "-q")
    assert result.exit_code == 0, result.output
    assert tree_bytes(dst) == files


# ---------------------------------------------------------------------------- 3. one build per --dst

HELD_BUILD = """
import pathlib, sys, time
import tpuprep.build as b
ready, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def hold(point):
    if point == "part" and not ready.exists():
        ready.write_text("held")
        while not go.exists():
            time.sleep(0.05)
b.checkpoint = hold
from tpuprep.cli import main
main(sys.argv[3:])
"""


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the held build ended early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the held build never reached its first part")
        time.sleep(0.05)


def test_a_second_build_into_a_busy_dst_is_refused_and_the_first_succeeds(tmp_path, clean):
    src, files = clean
    dst, ready, go = tmp_path / "out", tmp_path / "ready", tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-c", HELD_BUILD, str(ready), str(go),
                              "build", "--src", str(src), "--dst", str(dst), "-q"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(ready, first)
        lock = json.loads((dst / LOCK).read_text())
        assert lock["pid"] == first.pid and lock["host"] and lock["started"]
        for flags in (["--overwrite"], ["--resume"], [], ["--overwrite", "--dry-run"]):
            second = _run("build", "--src", str(src), "--dst", str(dst), "-q", *flags)
            assert second.exit_code == 2, (flags, second.output)
            assert f"another tpuprep build (pid {first.pid} on " in second.stderr, second.stderr
            assert len(second.stderr.strip().splitlines()) == 1
    finally:
        go.write_text("go")
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert tree_bytes(dst) == files  # undisturbed, and the lock file is gone


def test_the_lock_of_a_killed_build_is_taken_over(tmp_path, clean):
    src, files = clean
    dst = tmp_path / "out"
    killed = run_tpuprep("build", "--src", str(src), "--dst", str(dst), "-q", crash="part:1")
    assert killed.returncode == -9, killed.stderr
    assert json.loads((dst / LOCK).read_text())["pid"] > 0  # left behind, but nobody holds it
    assert _run("build", "--src", str(src), "--dst", str(dst), "--resume", "--dry-run").exit_code == 0
    result = _run("build", "--src", str(src), "--dst", str(dst), "--resume", "-q")
    assert result.exit_code == 0, result.output
    assert tree_bytes(dst) == files


def test_a_lone_stale_lock_does_not_make_dst_non_empty(tmp_path, clean):
    src, files = clean
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / LOCK).write_text('{"pid": 1, "host": "gone", "started": "2020-01-01T00:00:00Z"}\n')
    result = _run("build", "--src", str(src), "--dst", str(dst), "-q")
    assert result.exit_code == 0, result.output
    assert tree_bytes(dst) == files


# --------------------------------------------------------------------------------------- 4. URLs


@pytest.mark.parametrize("text", ["s3://bucket/out", "s3x://bucket/out", "gs://b", "file:///tmp/x", "hdfs://nn:8020/x",
                                  "s3:/bucket/out"])
def test_looks_like_url(text):
    assert looks_like_url(text)


@pytest.mark.parametrize("text", ["/tmp/out", "out", "C:/data", "a:b", "./s3", "my-folder:old/x"])
def test_does_not_look_like_url(text):
    assert not looks_like_url(text)


@pytest.mark.parametrize(("which", "says"), [("--dst", "unknown storage scheme s3x://"),
                                           ("--src", "--src s3x://bucket/out: unknown storage scheme s3x://")])
def test_a_url_is_refused_and_nothing_is_written_locally(tmp_path, clean, monkeypatch, which, says):
    """URLs are read and written (tests/test_storage_sources.py, tests/test_storage_write.py), but an
    unknown scheme is one usage error line and nothing is written locally."""
    src, _ = clean
    monkeypatch.chdir(tmp_path)
    paths = {"--src": str(src), "--dst": str(tmp_path / "out")}
    paths[which] = "s3x://bucket/out"
    result = _run("build", "--src", paths["--src"], "--dst", paths["--dst"], "-q")
    assert result.exit_code == 2 and says in result.stderr and len(result.stderr.splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == []


def test_an_unknown_url_scheme_in_a_run_file_or_its_override_is_refused(tmp_path, clean, monkeypatch):
    src, _ = clean
    monkeypatch.chdir(tmp_path)
    run_file = tmp_path / "r.toml"
    run_file.write_text(f'src = "{src}"\ndst = "s3x://bucket/out"\n')
    result = _run("run", str(run_file), "-q")
    assert result.exit_code == 2 and "unknown storage scheme s3x://" in result.stderr
    run_file.write_text(f'src = "{src}"\ndst = "out"\n')
    result = _run("run", str(run_file), "--dst", "s3x://bucket/out", "-q")
    assert result.exit_code == 2 and "--dst s3x://bucket/out: unknown storage scheme" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["r.toml"]


# ------------------------------------------------- 5, 8. inputs that vanish, change or are not files


def _on_discovered(action):
    def progress(event, info):
        if event == "discovered":
            action()
    return progress


def _manifest(dst: Path) -> dict:
    return json.loads((dst / "manifest.json").read_text())


def test_a_file_that_vanishes_after_discovery_is_quarantined_and_the_build_goes_on(tree, tmp_path):
    victim = tree / "tile" / "xla" / "train" / "t1.npz"
    report = build(tree, tmp_path / "out", progress=_on_discovered(victim.unlink))
    bad = {q["file"]: q["error"] for q in _manifest(tmp_path / "out")["quarantine"]}
    assert list(bad) == ["tile/xla/train/t1.npz"] and "vanished" in bad["tile/xla/train/t1.npz"]
    assert len(report.records) - len(report.quarantined) == 7


def test_a_file_replaced_after_discovery_is_hashed_and_sized_as_read(tree, tmp_path):
    victim = tree / "tile" / "xla" / "train" / "t1.npz"
    write(tmp_path / "new", "t1.npz", tile_arrays(5, n=9, c=40))
    replacement = (tmp_path / "new" / "t1.npz").read_bytes()
    assert len(replacement) != victim.stat().st_size
    build(tree, tmp_path / "out", progress=_on_discovered(lambda: os.replace(tmp_path / "new" / "t1.npz", victim)))
    entry = next(i for i in _manifest(tmp_path / "out")["inputs"] if i["path"] == "tile/xla/train/t1.npz")
    assert entry["status"] == "ok"
    assert entry["bytes"] == len(replacement) == entry["counts"]["bytes_in"]
    assert entry["sha256"] == hashlib.sha256(replacement).hexdigest()
    graphs = pq.read_table(next((tmp_path / "out" / "tile" / "xla" / "graphs").glob("train-*.parquet"))).to_pylist()
    row = next(r for r in graphs if r["graph_id"] == "tile:xla:t1")
    assert row["source_bytes"] == len(replacement) and row["num_configs"] == 40
    assert _run("verify", "--src", str(tree), "--dst", str(tmp_path / "out"), "-q").exit_code == 0


def test_a_file_swapped_for_a_symbolic_link_after_discovery_is_not_followed(tree, tmp_path):
    victim = tree / "tile" / "xla" / "train" / "t1.npz"
    outside = write(tmp_path / "outside", "secret.npz", tile_arrays(9))

    def swap():
        victim.unlink()
        victim.symlink_to(outside)

    build(tree, tmp_path / "out", progress=_on_discovered(swap))
    bad = {q["file"]: q["error"] for q in _manifest(tmp_path / "out")["quarantine"]}
    assert "symbolic link" in bad["tile/xla/train/t1.npz"]
    assert "tile:xla:t1" not in {i.get("graph_id") for i in _manifest(tmp_path / "out")["inputs"]}


def test_a_fifo_named_npz_is_refused_without_hanging(tree, tmp_path):
    os.mkfifo(tree / "tile" / "xla" / "train" / "pipe.npz")
    result = run_tpuprep("build", "--src", str(tree), "--dst", str(tmp_path / "out"), "-q", timeout=120)
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stderr.splitlines() if "pipe.npz" in line]
    assert len(lines) == 1 and "FIFO" in lines[0] and "regular file" in lines[0]


SWAP_FOR_FIFO = """
import os, sys
from tpuprep.build import build
src, dst = sys.argv[1], sys.argv[2]
victim = os.path.join(src, "tile/xla/train/t1.npz")
def progress(event, info):
    if event == "discovered":
        os.unlink(victim)
        os.mkfifo(victim)
report = build(src, dst, progress=progress)
print([q["error"] for q in report.quarantined])
"""


def test_a_file_swapped_for_a_fifo_after_discovery_is_refused_without_hanging(tree, tmp_path):
    result = subprocess.run([sys.executable, "-c", SWAP_FOR_FIFO, str(tree), str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "FIFO" in result.stdout and "t1" not in json.dumps(_manifest(tmp_path / "out")["shards"])


# ------------------------------------------------------------------------- filters that match nothing


def test_an_unknown_collection_is_refused_with_the_valid_ids(tree, tmp_path):
    for value in ("layout:xla:rand", "tile,layout:xla:rand"):
        result = _run("build", "--src", str(tree), "--dst", str(tmp_path / "out"), "--collections", value, "-q")
        assert result.exit_code == 2 and "'layout:xla:rand' names no collection" in result.stderr
        assert "layout:xla:random" in result.stderr
    assert not (tmp_path / "out").exists()


def test_an_unknown_split_is_refused(tree, tmp_path):
    result = _run("build", "--src", str(tree), "--dst", str(tmp_path / "out"), "--splits", "train,validation")
    assert result.exit_code == 2 and "'validation' is not a split (train, valid, test)" in result.stderr


@pytest.mark.parametrize(("flags", "named"), [(["--collections", "layout:nlp"], "--collections layout:nlp"),
                                              (["--splits", "test"], "--splits test"),
                                              (["--collections", "tile", "--splits", "test"],
                                               "--collections tile --splits test")])
def test_a_filter_that_matches_nothing_names_itself_and_what_exists(tree, tmp_path, flags, named):
    for extra in ([], ["--dry-run"]):
        result = _run("build", "--src", str(tree), "--dst", str(tmp_path / "out"), *flags, *extra)
        assert result.exit_code == 2, result.output
        assert f"{named} matches none of the 8 .npz files" in result.stderr
        assert "layout:xla:random (train, valid), tile:xla (train, valid)" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["build", "verify"])
def test_credentials_in_a_url_never_reach_the_log_or_the_terminal(tmp_path, command):
    """A URL may carry credentials (s3://KEY:SECRET@bucket/...): the --log-file line that records the
    command, and the one error line, show the URL without them."""
    log_file = tmp_path / "run.log"
    url = "s3x://AKIDEXAMPLE:wJalrXUtnFEMI-SECRET@bucket/npz"
    args = (["build", "--src", url, "--dst", str(tmp_path / "out")] if command == "build"
            else ["verify", "--src", url, "--dst", str(tmp_path)])
    result = _run(*args, "-q", "--log-file", str(log_file))
    assert result.exit_code in (1, 2), result.stderr  # verify stops at the folder that holds no build
    text = log_file.read_text() + result.stderr + result.stdout
    assert "s3x://bucket/npz" in log_file.read_text()
    assert "SECRET" not in text and "AKIDEXAMPLE" not in text
