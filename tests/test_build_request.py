"""One build request (issue #29): ``--src`` and ``--dst`` resolved once by ``request.make_request``, which
``tpuprep build``, ``tpuprep run`` and the keyword form of ``build()`` all go through. The same inputs
make EQUAL requests whichever way they are given (a local folder and a moto bucket); every check that
``make_request`` makes refuses both commands with the same line, and lives in that one place (a mutant
of it changes both commands at once); discovery takes the resolved ``Source`` and never classifies
``--src`` again; an unsafe file name is shown with ``display_name``'s escapes like every other message."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write
from s3server import upload_folder

import tpuprep.build
import tpuprep.inputs
import tpuprep.io.storage
import tpuprep.request
from tpuprep.cli import main
from tpuprep.inputs import MissingSource, Source, discover, resolve_source
from tpuprep.io.local_store import LocalStore
from tpuprep.io.remote_store import RemoteStore
from tpuprep.io.store import Store
from tpuprep.options import BuildOptions
from tpuprep.request import BuildRequest, ClusterSpec, cluster_of_flags, make_request

L = "layout/xla/random/train"


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "data" / "npz"
    write(root, f"{L}/g1.npz", layout_arrays(1))
    write(root, "layout/xla/random/valid/g2.npz", layout_arrays(2))
    write(root, "tile/xla/train/t1.npz", tile_arrays(3))
    return root


@pytest.fixture
def requests(monkeypatch) -> list[BuildRequest]:
    """Every request ``build()`` is given (it then runs as usual)."""
    seen: list[BuildRequest] = []
    real = tpuprep.build.build

    def spy(request, *args, **kw):
        seen.append(request)
        return real(request, *args, **kw)

    monkeypatch.setattr(tpuprep.build, "build", spy)
    return seen


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _run_file(folder: Path, text: str) -> Path:
    path = folder / "run.toml"
    path.write_text(text)
    return path


# ------------------------------------------------------------------------ equal requests


def test_the_cli_and_a_run_file_make_equal_requests_for_a_local_folder(tree, tmp_path, requests, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dst = tmp_path / "out"
    result = _cli("build", "--src", "data/npz", "--dst", "out", "--collections", "layout", "--splits", "train,valid",
                  "--hops", "2", "--compression-level", "5", "--workers", "2", "--dry-run")
    assert result.exit_code == 0, result.output
    run = _run_file(tmp_path / "data", 'src = "npz"\ndst = "../out"\ncollections = ["layout"]\n'
                    'splits = ["train", "valid"]\n[options]\nhops = 2\ncompression_level = 5\n'
                    '[cluster]\nworkers = 2\n')
    result = _cli("run", str(run), "--dry-run")
    assert result.exit_code == 0, result.output
    cli, from_file = requests
    assert cli == from_file
    assert cli.source == Source(cli.source.store, "folder") and cli.source.location == tree.resolve()
    assert cli.destination.root == str(dst.resolve()) and isinstance(cli.destination, LocalStore)
    assert cli.options == BuildOptions(hops=2, compression_level=5)
    assert (cli.collections, cli.splits, cli.dry_run) == (("layout",), ("train", "valid"), True)
    assert cli.cluster == ClusterSpec("local", workers=2)
    # the library's keyword form makes the same request through the same function
    assert make_request(tree, dst, BuildOptions(hops=2, compression_level=5), collections=["layout"],
                        splits=["train", "valid"], dry_run=True, cluster=ClusterSpec("local", workers=2)) == cli


def test_the_cli_and_a_run_file_make_equal_requests_for_a_bucket(tree, tmp_path, bucket, requests):
    src, dst = upload_folder(tree, f"{bucket}/npz"), f"{bucket}/shards"
    result = _cli("build", "--src", src, "--dst", dst, "--splits", "train", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would convert 2 files" in result.output
    run = _run_file(tmp_path, f'src = "{src}"\ndst = "{dst}"\nsplits = ["train"]\n[cluster]\ntype = "serial"\n')
    result = _cli("run", str(run), "--dry-run")
    assert result.exit_code == 0, result.output
    # the same URLs as command-line overrides (click's Path type squeezes s3:// into s3:/ on the way)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = _run_file(elsewhere, 'src = "npz"\ndst = "out"\nsplits = ["train"]\n[cluster]\ntype = "serial"\n')
    result = _cli("run", str(other), "--src", src, "--dst", dst, "--dry-run")
    assert result.exit_code == 0, result.output
    cli, from_file, overridden = requests
    assert overridden == from_file
    # the one difference a command's flags and a run file's [cluster] table mean to make: tpuprep build's
    # one worker follows DASK_SCHEDULER_ADDRESS when it is set, a run file's serial cluster does not
    assert cli.cluster == ClusterSpec("serial", scheduler_from_env=True) != from_file.cluster
    assert BuildRequest(**{**cli.__dict__, "cluster": from_file.cluster}) == from_file
    assert isinstance(cli.source.store, RemoteStore) and cli.source.location == src and cli.source.kind is None
    assert cli.destination.display == dst and cli.destination.url() == dst


def test_command_flags_and_run_file_tables_name_the_same_runners():
    assert cluster_of_flags(1) == ClusterSpec("serial", scheduler_from_env=True)
    assert cluster_of_flags(4).canonical() == ClusterSpec("local", workers=4, engine="processes").canonical()
    assert ClusterSpec("local", workers=1).canonical() == ClusterSpec("serial")
    flags = cluster_of_flags(1, "tcp://10.0.0.1:8786")
    assert (flags.type, flags.scheduler, flags.timeout) == ("dask", "tcp://10.0.0.1:8786", None)


# ------------------------------------------------------------- each check in one place


def _refusal(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


CASES = {
    "overlap": ("npz", "npz/out", "overlap (one lies inside the other)"),
    "dst is a file": ("npz", "notes.txt", "exists and is not a folder"),
    "src is not a folder, npz or tar": ("notes.txt", "out", "is neither a folder, an .npz file nor a tar archive"),
}


@pytest.mark.parametrize("case", CASES)
def test_both_commands_are_refused_with_the_same_line(tree, case):
    src, dst, phrase = CASES[case]
    base = tree.parent
    (base / "notes.txt").write_text("not shards")
    before = sorted(p for p in base.rglob("*"))
    by_cli = _refusal(_cli("build", "--src", str(base / src), "--dst", str(base / dst), "-q"))
    run = _run_file(base, f'src = "{src}"\ndst = "{dst}"\noverwrite = true\n[cluster]\ntype = "serial"\n')
    by_run = _refusal(_cli("run", str(run), "-q"))
    assert by_cli == by_run and phrase in by_cli
    if case == "dst is a file":  # and so is run's --dst override (no check of its own in the command)
        assert _refusal(_cli("run", str(run), "--dst", str(base / dst), "-q")) == by_cli
    assert sorted(p for p in base.rglob("*") if p != run) == before  # nothing written


def test_the_overlap_check_lives_in_make_request_alone(tree, monkeypatch):
    """A mutant of the one overlap test lets both commands through: no caller checks on its own."""
    monkeypatch.setattr(Store, "overlaps", lambda self, other: False)
    base = tree.parent
    assert _cli("build", "--src", str(tree), "--dst", str(tree / "out"), "--dry-run").exit_code == 0
    run = _run_file(base, 'src = "npz"\ndst = "npz/out"\n[cluster]\ntype = "serial"\n')
    assert _cli("run", str(run), "--dry-run").exit_code == 0


def test_a_missing_src_is_found_once_and_named_by_each_command(tree, tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(MissingSource, match=f"--src {missing} does not exist"):
        make_request(missing, tmp_path / "out")
    assert _refusal(_cli("build", "--src", str(missing), "--dst", str(tmp_path / "out"))) == \
        f"error: --src {missing} does not exist"
    run = _run_file(tmp_path, 'src = "nowhere"\ndst = "out"\n')  # a run file names itself (no [synth])
    assert _refusal(_cli("run", str(run), "-q")) == f"error: {run}: src {missing} does not exist"


def test_resume_with_overwrite_is_refused_before_the_source_is_listed(tree, tmp_path, monkeypatch):
    listed = []
    monkeypatch.setattr(LocalStore, "walk", lambda *a: listed.append(a) or [])
    line = _refusal(_cli("build", "--src", str(tree), "--dst", str(tmp_path / "out"), "--resume", "--overwrite"))
    assert line == "error: --resume and --overwrite exclude each other" and listed == []


def test_build_takes_a_request_or_the_keyword_form_never_both(tree, tmp_path):
    request = make_request(tree, tmp_path / "out", dry_run=True)
    inputs = tpuprep.build.build(request).manifest["inputs"]
    assert inputs == tpuprep.build.build(tree, tmp_path / "out", dry_run=True).manifest["inputs"]
    assert sorted(inputs) == [f"{L}/g1.npz", "layout/xla/random/valid/g2.npz",
                              "tile/xla/train/t1.npz"]
    with pytest.raises(TypeError, match="takes the request alone"):
        tpuprep.build.build(request, tmp_path / "elsewhere")
    with pytest.raises(TypeError, match="takes the request alone"):
        tpuprep.build.build(request, dry_run=False)


# ------------------------------------------------------------- --src classified once


def test_a_build_classifies_its_src_once(tree, tmp_path, monkeypatch):
    """From the command line to the last discovery (``_no_inputs`` discovers a second time to name what
    exists), ``--src`` is resolved from its string once; everything after takes the ``Source``."""
    calls = []
    real = tpuprep.inputs.resolve_source

    def spy(src, storage_options=None):
        if not isinstance(src, Source):
            calls.append(src)
        return real(src, storage_options)

    monkeypatch.setattr(tpuprep.inputs, "resolve_source", spy)
    monkeypatch.setattr(tpuprep.request, "resolve_source", spy)
    result = _cli("build", "--src", str(tree), "--dst", str(tmp_path / "out"), "--collections", "tile:xla",
                  "--splits", "test", "-q")
    assert result.exit_code == 2 and "matches none of the 3 .npz files" in result.stderr, result.output
    assert calls == [str(tree)]


def test_discovery_of_a_source_resolves_nothing_again(tree, monkeypatch):
    source = resolve_source(tree)
    monkeypatch.setattr(tpuprep.inputs, "resolve", lambda *a, **k: pytest.fail("resolved again"))
    monkeypatch.setattr(tpuprep.io.storage, "location", lambda *a: pytest.fail("classified again"))
    inputs, refused = discover(source, ["layout"])
    assert [i.relpath for i in inputs] == [f"{L}/g1.npz", "layout/xla/random/valid/g2.npz"] and not refused


def _tar_of(tree: Path, path: Path) -> Path:
    with tarfile.open(path, "w") as tf:
        for f in sorted(tree.rglob("*.npz")):
            tf.add(f, arcname="npz/" + f.relative_to(tree).as_posix())
    return path


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_inputs_are_opened_without_classifying_their_origin_again(tree, tmp_path, monkeypatch, request, where):
    """An archive member (local or in a bucket) is opened as its ``Source`` said at listing time: its
    ``Origin`` carries its store, so no task resolves or classifies a location again (``io.storage.location``
    is what every resolution goes through)."""
    tar = _tar_of(tree, tmp_path / "npz_all.tar")
    if where == "bucket":
        bucket = request.getfixturevalue("bucket")
        tar = upload_folder(tmp_path, bucket) + "/npz_all.tar"
    build_request = make_request(tar, tmp_path / "out")
    monkeypatch.setattr(tpuprep.io.storage, "location", lambda *a: pytest.fail("classified again"))
    report = tpuprep.build.build(build_request)
    assert len(report.converted) == 3 and not report.quarantined
    assert {r["archive"] for r in report.records} == {"npz_all.tar"}


# ------------------------------------------------------------- names shown with display_name


def test_an_unsafe_file_name_is_shown_with_the_escapes_of_every_other_message(tree, tmp_path):
    name = os.fsdecode(b"bad\x80name")  # a byte that is not UTF-8 (a lone surrogate once decoded)
    write(tree, f"{L}/{name}.npz", layout_arrays(4))
    (refusal,) = discover(tree)[1]
    assert "'bad\\x80name' is not a safe graph id" in refusal.problem and "\\udc80" not in refusal.problem
    result = _cli("build", "--src", str(tree), "--dst", str(tmp_path / "out"), "-q")
    assert result.exit_code == 3, result.output
    (line,) = [line for line in result.stderr.splitlines() if "safe graph id" in line]
    assert line == f"quarantined: {L}/bad\\x80name.npz: file name 'bad\\x80name' is not a safe graph id " \
                   "(letters, digits and . _ + - only)"
    (entry,) = [json.loads(x) for x in (tmp_path / "out" / "quarantine.jsonl").read_text().splitlines()]
    assert entry["error"].startswith("file name 'bad\\x80name' is not") and "\\udc80" not in entry["error"]


def test_file_urls_name_the_folder_they_say_in_a_run_file_and_on_the_command_line(tree, tmp_path):
    """``file:/x`` (as TOML or click's Path type gives ``file:///x``) is the folder ``/x``: it once became
    ``file://x``, whose first component was taken for a host and dropped (shards elsewhere, exit 0)."""
    out = tmp_path / "out"
    run = _run_file(tmp_path, f'src = "file:{tree}"\ndst = "file:{out}"\n')
    result = _cli("run", str(run), "-q")
    assert result.exit_code == 0, result.output
    assert (out / "manifest.json").is_file()
    result = _cli("run", str(run), "-q", "--dst", f"file://{tmp_path}/out2")  # click squeezes it to file:/...
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out2" / "manifest.json").is_file()
    host = f"file:/{tmp_path}/out3"  # file://tmp/...: a host named tmp
    result = _cli("build", "--src", str(tree), "--dst", host)
    assert result.exit_code == 2, result.output
    assert "a file URL names no host" in result.output
    assert not (tmp_path / "out3").exists()
    result = _cli("build", "--src", f"file:/{tree}", "--dst", str(tmp_path / "out4"))  # a host in --src too
    assert result.exit_code == 2 and "a file URL names no host" in result.output, result.output


@pytest.mark.parametrize("which", ["--dst", "--src", "run-dst", "run-src"])
def test_a_relative_file_url_is_a_usage_error_never_a_folder_of_that_name(tree, tmp_path, monkeypatch, which):
    """Issue #36 item 4: ``build --dst file:rel_dst`` exited 0 and made a folder literally named
    ``file:rel_dst``. A file URL names an absolute path: a relative one is refused (exit 2) before anything
    is written, on the command line and in a run file alike (``./file:rel`` is still the folder of that
    name); docs/spec.md §5."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tree, tmp_path / "src")
    if which.startswith("run"):
        run = _run_file(tmp_path, 'src = "file:src"\ndst = "out"\n' if which == "run-src"
                        else 'src = "src"\ndst = "file:rel_dst"\n')
        result = _cli("run", str(run), "-q")
    else:
        paths = {"--src": "src", "--dst": "out", which: "file:rel_dst" if which == "--dst" else "file:src"}
        result = _cli("build", "--src", paths["--src"], "--dst", paths["--dst"], "-q")
    assert result.exit_code == 2, result.output
    assert "a file URL names an absolute path (file:///path/to/folder), or give the path itself" in result.output
    assert not (tmp_path / "file:rel_dst").exists() and not (tmp_path / "out").exists()
    result = _cli("build", "--src", "src", "--dst", "./file:rel_dst", "-q")  # the path itself: that name
    assert result.exit_code == 0, result.output
    assert (tmp_path / "file:rel_dst" / "manifest.json").is_file()
