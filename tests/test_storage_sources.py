"""--src as a tar archive (local or in a bucket), a folder of tars, or an npz tree in a bucket: the
members are read in place and the shards are byte-identical to a build from the extracted tree; the
manifest records archive + member; bad members are quarantined one by one; a missing bucket or key is
one line. Object storage is a real moto S3 server (tests/s3server.py)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpuprep.build import build
from tpuprep.cli.group import main
from tpuprep.inputs import discover
from tpuprep.io.archive import MemberView, index_tar
from tpuprep.runners import make_runner


def _shards(dst: Path) -> dict[str, str]:
    """sha256 of every shard under ``dst`` by relative path."""
    return {p.relative_to(dst).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(dst.rglob("*.parquet"))}


def _tar(path: Path, root: Path, files: list[Path], prefix: str = "npz/") -> Path:
    """A tar at ``path`` of ``files`` (below ``root``), named ``prefix + relative path``."""
    with tarfile.open(path, "w") as tf:
        for f in files:
            tf.add(f, arcname=prefix + f.relative_to(root).as_posix(), recursive=False)
    return path


def _npz(root: Path, *under: str) -> list[Path]:
    return sorted(p for u in under for p in (root / u).rglob("*.npz"))


@pytest.fixture(scope="module")
def tree(synth_root) -> Path:
    return synth_root / "npz"


@pytest.fixture(scope="module")
def tree_shards(synth_shards) -> Path:
    """The shards of a build from the extracted tree (``tree``)."""
    return synth_shards


@pytest.fixture(scope="module")
def npz_all(tmp_path_factory, tree) -> Path:
    return _tar(tmp_path_factory.mktemp("tar") / "npz_all.tar", tree, _npz(tree, "."))


def test_a_local_tar_builds_exactly_the_shards_of_the_extracted_tree(npz_all, tree, tree_shards, tmp_path):
    report = build(npz_all, tmp_path / "out")
    assert not report.quarantined
    assert _shards(tmp_path / "out") == _shards(tree_shards) != {}
    entries = {e["path"]: e for e in report.manifest["inputs"]}
    rel = "tile/xla/train/" + next((tree / "tile/xla/train").glob("*.npz")).name
    assert entries[rel]["archive"] == "npz_all.tar" and entries[rel]["member"] == f"npz/{rel}"
    data = (tree / rel).read_bytes()
    assert entries[rel]["sha256"] == hashlib.sha256(data).hexdigest() and entries[rel]["bytes"] == len(data)
    on_disk = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk["inputs"] == report.manifest["inputs"]


def test_per_collection_tars_in_a_folder_with_and_without_the_leading_npz(tree, tmp_path):
    tars = tmp_path / "tars"
    tars.mkdir()
    packed = {"layout/xla/random/train": "npz/", "tile/xla/valid": "", "tile/xla/train": "x/npz/",
              "tile/xla/test": "npz/"}
    for folder, prefix in packed.items():
        _tar(tars / f"npz_{folder.replace('/', '_')}.tar", tree, _npz(tree, folder), prefix=prefix)
    inputs, refused = discover(tars, ["layout:xla:random", "tile"], ["train", "valid"])
    assert not refused
    expected, _ = discover(tree, ["layout:xla:random", "tile"], ["train", "valid"])
    expected = [i for i in expected if i.relpath.rsplit("/", 1)[0] in packed]
    assert [i.relpath for i in inputs] == [i.relpath for i in expected] != []
    assert [i.graph_id for i in inputs] == [i.graph_id for i in expected]
    assert {i.origin.archive for i in inputs} == {p.name for p in tars.iterdir()} - {"npz_tile_xla_test.tar"}

    report = build(tars, tmp_path / "a", collections=["tile"], splits=["valid"])
    build(tree, tmp_path / "b", collections=["tile"], splits=["valid"])
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b") != {}
    assert {e["archive"] for e in report.manifest["inputs"]} == {"npz_tile_xla_valid.tar"}
    assert all(e["member"] == e["path"] for e in report.manifest["inputs"])


def test_bad_members_are_quarantined_one_by_one_and_the_rest_converts(tree, tmp_path):
    good = _npz(tree, "tile/xla/train")[:2]
    archive = _tar(tmp_path / "npz_all.tar", tree, good)
    with tarfile.open(archive, "a") as tf:
        junk = b"this is not a zip file" * 10
        info = tarfile.TarInfo("npz/tile/xla/train/junk.npz")
        info.size = len(junk)
        tf.addfile(info, io.BytesIO(junk))
        for name, kind in (("link", tarfile.SYMTYPE), ("hard", tarfile.LNKTYPE), ("dev", tarfile.CHRTYPE)):
            info = tarfile.TarInfo(f"npz/tile/xla/train/{name}.npz")
            info.type = kind
            info.linkname = "npz/" + good[0].relative_to(tree).as_posix()
            tf.addfile(info)
    result = CliRunner().invoke(main, ["build", "--src", str(archive), "--dst", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 3, result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert sum(e["status"] == "ok" for e in manifest["inputs"]) == 2
    errors = {q["file"]: q for q in manifest["quarantine"]}
    assert set(errors) == {"tile/xla/train/junk.npz", *(f"npz_all.tar!npz/tile/xla/train/{n}.npz"
                                                        for n in ("link", "hard", "dev"))}
    assert errors["tile/xla/train/junk.npz"]["member"] == "npz/tile/xla/train/junk.npz"
    assert "not a readable zip" in errors["tile/xla/train/junk.npz"]["error"]
    assert "symbolic link" in errors["npz_all.tar!npz/tile/xla/train/link.npz"]["error"]
    assert "hard link" in errors["npz_all.tar!npz/tile/xla/train/hard.npz"]["error"]
    assert "device" in errors["npz_all.tar!npz/tile/xla/train/dev.npz"]["error"]


def test_a_file_that_is_not_a_tar_is_one_quarantined_entry(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "npz_all.tar").write_bytes(b"\x1f\x8b compressed, not a plain tar" * 40)
    inputs, refused = discover(tmp_path / "src")
    assert inputs == [] and len(refused) == 1
    assert "not a readable uncompressed tar archive" in str(refused[0])


def test_member_view_reads_only_its_member(tmp_path):
    data = bytes(range(256)) * 4
    (tmp_path / "f").write_bytes(data)
    with MemberView(open(tmp_path / "f", "rb"), 100, 50) as view:
        assert view.read(10) == data[100:110]
        assert view.seek(-5, os.SEEK_END) == 45 and view.read() == data[145:150]
        assert view.read(7) == b""
        view.seek(0)
        buf = bytearray(80)
        assert view.readinto(buf) == 50 and bytes(buf[:50]) == data[100:150]


def test_a_truncated_archive_keeps_the_members_before_the_damage(tree, tmp_path):
    files = _npz(tree, "tile/xla/train")[:3]
    archive = _tar(tmp_path / "a.tar", tree, files)
    with tarfile.open(archive) as tf:
        last = tf.getmembers()[-1]
    cut = archive.read_bytes()[: last.offset_data + last.size // 2]  # inside the third member's data
    with io.BytesIO(cut) as fh:
        members, refused = index_tar(fh, "a.tar", len(cut))
    assert [m.name for m in members] == ["npz/" + f.relative_to(tree).as_posix() for f in files[:2]]
    assert "a.tar!npz/tile/xla/train/" in str(refused[0]) and "past the end of the archive" in str(refused[0])
    assert [str(r) for r in refused[1:]] == ["a.tar: the tar archive is corrupt or truncated after 3 members "
                                             "(2 .npz members are read) (unexpected end of data)"]


def test_a_damaged_archive_counts_every_member_before_the_damage(tree, tmp_path):
    """The damage is placed by every header read (folders and other files too), not by the .npz kept."""
    files = _npz(tree, "tile/xla/train")[:2]
    archive = tmp_path / "b.tar"
    (tmp_path / "README.txt").write_text("notes")
    with tarfile.open(archive, "w") as tf:
        tf.add(tmp_path / "README.txt", arcname="npz/README.txt")
        for f in files:
            tf.add(f, arcname="npz/" + f.relative_to(tree).as_posix())
    data = archive.read_bytes()
    with tarfile.open(archive) as tf:
        last = tf.getmembers()[-1]
    end = last.offset_data + -(-last.size // 512) * 512  # the end of the last member's data blocks
    cut = data[:end] + b"\x01" * 512  # a garbage header where the end marker was
    skipped: list = []
    with io.BytesIO(cut) as fh:
        members, refused = index_tar(fh, "b.tar", len(cut), skipped=skipped)
    assert len(members) == 2 and len(skipped) == 1
    assert [str(r) for r in refused] == [
        f"b.tar: the tar archive is corrupt after 3 members (2 .npz members are read): byte {end} is not a "
        "valid member header nor the zero end of the archive (a damaged header?); the members after it are "
        "not read"]


def test_archives_concatenated_with_cat_are_not_silently_cut(tree, tmp_path):
    """``cat a.tar b.tar``: b's members sit behind a's end marker (tar -x stops there too): refused."""
    files = _npz(tree, "tile/xla/train")[:2]
    a, b = _tar(tmp_path / "a.tar", tree, files[:1]), _tar(tmp_path / "b.tar", tree, files[1:])
    both = a.read_bytes() + b.read_bytes()
    with io.BytesIO(both) as fh:
        members, refused = index_tar(fh, "ab.tar", len(both))
    assert [m.name for m in members] == ["npz/" + files[0].relative_to(tree).as_posix()]
    assert len(refused) == 1
    assert f"data follows its end-of-archive marker at byte {a.stat().st_size}" in str(refused[0])
    assert "not read" in str(refused[0])


def test_a_damaged_header_in_the_middle_is_refused_not_silently_ended(tree, tmp_path):
    """tarfile ends its listing at an invalid header after the first member: the members behind it
    must be reported, not dropped with exit 0."""
    files = _npz(tree, "tile/xla/train")[:3]
    archive = _tar(tmp_path / "a.tar", tree, files)
    with tarfile.open(archive) as tf:
        second = tf.getmembers()[1]
    data = bytearray(archive.read_bytes())
    data[second.offset : second.offset + 512] = b"\x01" * 512
    with io.BytesIO(bytes(data)) as fh:
        members, refused = index_tar(fh, "a.tar", len(data))
    assert [m.name for m in members] == ["npz/" + files[0].relative_to(tree).as_posix()]
    assert len(refused) == 1 and f"byte {second.offset} is not a valid member header" in str(refused[0])
    # and the build says so: exit 3, the archive quarantined, one file converted
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.tar").write_bytes(bytes(data))
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 3, result.output
    assert "a damaged header" in result.stderr


def test_resume_reuses_archive_members_until_the_archive_changes(npz_all, tmp_path, monkeypatch):
    from tpuprep import build as build_module

    original = build_module._remove_own
    # keep the staged parts at the end, as an interrupted build leaves them
    monkeypatch.setattr(build_module, "_remove_own",
                        lambda dst, under: None if under == (build_module.STAGING,) else original(dst, under))
    archive = tmp_path / "npz_all.tar"
    archive.write_bytes(npz_all.read_bytes())
    dst = tmp_path / "out"
    build(archive, dst, collections=["tile"], splits=["valid"])
    again = build(archive, dst, collections=["tile"], splits=["valid"], resume=True)
    assert again.reused and not again.converted
    os.utime(archive, ns=(1, 1))  # the archive changed: nothing read from it may be reused
    changed = build(archive, dst, collections=["tile"], splits=["valid"], resume=True)
    assert changed.converted and not changed.reused


def test_two_worker_processes_give_the_same_shards(npz_all, tmp_path):
    runner = make_runner(2)
    try:
        build(npz_all, tmp_path / "w2", collections=["layout:xla"], runner=runner)
    finally:
        runner.close()
    build(npz_all, tmp_path / "w1", collections=["layout:xla"])
    assert _shards(tmp_path / "w2") == _shards(tmp_path / "w1") != {}


def test_verify_reads_the_inputs_from_the_archive(npz_all, tree_shards):
    result = CliRunner().invoke(main, ["verify", "--src", str(npz_all), "--dst", str(tree_shards)])
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------- object storage


def _upload(bucket: str, local: Path, key: str) -> str:
    import fsspec

    fs = fsspec.filesystem("s3")
    fs.put(str(local), f"{bucket}/{key}", recursive=local.is_dir())
    return f"{bucket}/{key}"


def test_a_tar_in_a_bucket_builds_the_shards_of_the_extracted_tree(bucket, npz_all, tree_shards, tmp_path):
    url = _upload(bucket, npz_all, "data/npz_all.tar")
    result = CliRunner().invoke(main, ["build", "--src", url, "--dst", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    assert _shards(tmp_path / "out") == _shards(tree_shards)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {e["archive"] for e in manifest["inputs"]} == {"npz_all.tar"}
    assert "testing" not in (tmp_path / "out" / "manifest.json").read_text()


def test_a_folder_of_tars_in_a_bucket_with_two_workers(bucket, tree, tmp_path):
    local = tmp_path / "tars"
    local.mkdir()
    _tar(local / "npz_tile_xla_valid.tar", tree, _npz(tree, "tile/xla/valid"))
    _tar(local / "npz_layout_nlp_random_test.tar", tree, _npz(tree, "layout/nlp/random/test"))
    url = _upload(bucket, local, "tars")
    result = CliRunner().invoke(main, ["build", "--src", url, "--dst", str(tmp_path / "out"), "-q",
                                       "--workers", "2"])
    assert result.exit_code == 0, result.output
    extracted = tmp_path / "npz"
    for folder in ("tile/xla/valid", "layout/nlp/random/test"):
        shutil.copytree(tree / folder, extracted / folder)
    build(extracted, tmp_path / "ref")
    assert _shards(tmp_path / "out") == _shards(tmp_path / "ref") != {}


def test_a_tar_gone_from_the_bucket_after_listing_is_refused_and_the_rest_builds(bucket, tree, tmp_path,
                                                                               monkeypatch):
    """Issue #37 review: an archive deleted between the listing and the reading of its headers stopped
    the whole build with "--src <root>: does not exist" (false, and not naming the archive). It is one
    refusal naming the archive, with its listed size, as locally; the other archive converts."""
    from tpuprep.io.remote_store import RemoteStore

    local = tmp_path / "tars"
    local.mkdir()
    _tar(local / "npz_tile_xla_valid.tar", tree, _npz(tree, "tile/xla/valid"))
    _tar(local / "npz_tile_xla_test.tar", tree, _npz(tree, "tile/xla/test"))
    url = _upload(bucket, local, "tars")
    listed = RemoteStore.walk

    def walk_then_delete(store, *args, **kwargs):
        entries = listed(store, *args, **kwargs)
        store.fs.rm(store.path("npz_tile_xla_test.tar"))
        return entries

    monkeypatch.setattr(RemoteStore, "walk", walk_then_delete)
    report = build(url, tmp_path / "out")
    gone = [q for q in report.quarantined if q["path"] == "npz_tile_xla_test.tar"]
    assert len(gone) == 1 and gone[0]["bytes"] == (local / "npz_tile_xla_test.tar").stat().st_size, gone
    assert gone[0]["error"].startswith("vanished after it was found"), gone
    assert report.quarantined == gone
    converted = sorted(r["path"] for r in report.converted)
    assert converted == sorted(p.relative_to(tree).as_posix() for p in _npz(tree, "tile/xla/valid")) != []


def test_a_bucket_gone_after_listing_is_fatal_naming_the_archive(bucket, tree, tmp_path, monkeypatch):
    """Every input would be refused one by one when the bucket itself went away meanwhile: that stops
    the build, in a line naming the archive being read and the bucket."""
    from tpuprep.errors import FatalError
    from tpuprep.io.remote_store import RemoteStore

    _tar(tmp_path / "npz_tile_xla_valid.tar", tree, _npz(tree, "tile/xla/valid"))
    url = _upload(bucket, tmp_path / "npz_tile_xla_valid.tar", "tars/npz_tile_xla_valid.tar")
    listed = RemoteStore.walk

    def walk_then_delete_the_bucket(store, *args, **kwargs):
        entries = listed(store, *args, **kwargs)
        store.fs.rm(bucket, recursive=True)
        store.fs.invalidate_cache()
        return entries

    monkeypatch.setattr(RemoteStore, "walk", walk_then_delete_the_bucket)
    with pytest.raises(FatalError, match=f"^{url}: the bucket {bucket} does not exist"):
        discover(url.rsplit("/", 1)[0])


def _same_size_graphs(seeds: tuple[int, ...]) -> list[bytes]:
    """Valid tile files of one size (stored, not deflated: the same shapes give the same bytes count)
    holding different graphs."""
    import numpy as np
    from npzfactory import tile_arrays

    files = []
    for seed in seeds:
        buf = io.BytesIO()
        np.savez(buf, **tile_arrays(seed))
        files.append(buf.getvalue())
    assert len({len(f) for f in files}) == 1 and len(set(files)) == len(files)
    return files


def test_an_object_replaced_by_one_of_the_same_size_after_listing_is_refused(bucket, tmp_path):
    """Issue #37 review: ``open_input`` never checked the object's version, so an object replaced after
    the listing by one of the same size was converted — a graph the listing never saw, recorded with
    the listed version's stamp: a wrong result that looks like success. The read is of the version
    listed (S3 ``If-Match``); the file is refused in one line and the rest converts."""
    import fsspec

    fs = fsspec.filesystem("s3")
    first, second, replacement = _same_size_graphs((1, 3, 2))
    fs.pipe({f"{bucket}/npz/tile/xla/train/a.npz": first, f"{bucket}/npz/tile/xla/train/b.npz": second})

    def replace(event, _info):
        if event == "discovered":
            fs.pipe(f"{bucket}/npz/tile/xla/train/a.npz", replacement)

    report = build(f"{bucket}/npz", tmp_path / "out", progress=replace)
    assert [(q["path"], q["error"]) for q in report.quarantined] == [
        ("tile/xla/train/a.npz", "was replaced after it was listed: another ETag")]
    assert [r["path"] for r in report.converted] == ["tile/xla/train/b.npz"]


def test_an_archive_replaced_by_one_of_the_same_size_after_listing_refuses_its_members(bucket, tmp_path):
    """The same for an archive member: read by a ranged GET of the archive's version listed."""
    import fsspec

    from tpuprep.errors import BadInput
    from tpuprep.inputs import open_source

    tars = []
    for data in _same_size_graphs((1, 2)):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            info = tarfile.TarInfo("npz/tile/xla/train/a.npz")
            info.size, info.mtime = len(data), 0
            tf.addfile(info, io.BytesIO(data))
        tars.append(buf.getvalue())
    fs = fsspec.filesystem("s3")
    fs.pipe(f"{bucket}/a.tar", tars[0])
    (inp,), refused = discover(f"{bucket}/a.tar")
    assert not refused
    fs.pipe(f"{bucket}/a.tar", tars[1])
    with pytest.raises(BadInput) as err:
        open_source(inp)
    assert str(err.value) == f"{bucket}/a.tar!npz/tile/xla/train/a.npz: was replaced after it was listed: " \
                             "another ETag"


def test_a_plain_npz_tree_in_a_bucket(bucket, tree, tmp_path):
    url = _upload(bucket, tree, "npz")
    report = build(url, tmp_path / "out", collections=["tile", "layout:xla:default"])
    build(tree, tmp_path / "ref", collections=["tile", "layout:xla:default"])
    assert not report.quarantined
    assert _shards(tmp_path / "out") == _shards(tmp_path / "ref") != {}
    assert all("archive" not in e for e in report.manifest["inputs"])


def test_resume_from_a_bucket_reuses_members_until_the_object_changes(bucket, tree, tmp_path, monkeypatch):
    from tpuprep import build as build_module

    original = build_module._remove_own
    monkeypatch.setattr(build_module, "_remove_own",
                        lambda dst, under: None if under == (build_module.STAGING,) else original(dst, under))
    files = _npz(tree, "tile/xla/valid")
    url = _upload(bucket, _tar(tmp_path / "a.tar", tree, files), "npz_tile_xla_valid.tar")
    dst = tmp_path / "out"
    build(url, dst)
    again = build(url, dst, resume=True)
    assert again.reused and not again.converted
    _upload(bucket, _tar(tmp_path / "b.tar", tree, files[::-1]), "npz_tile_xla_valid.tar")  # new ETag
    changed = build(url, dst, resume=True)
    assert changed.converted and not changed.reused


def test_a_missing_bucket_is_one_line_and_exit_1(s3_env, tmp_path):
    result = CliRunner().invoke(main, ["build", "--src", "s3://no-such-bucket-tpuprep/npz",
                                       "--dst", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "s3://no-such-bucket-tpuprep" in lines[0] and "does not exist" in lines[0]
    assert "testing" not in result.output and not (tmp_path / "out").exists()


def test_a_missing_key_is_one_line_and_exit_2(bucket, tmp_path):
    result = CliRunner().invoke(main, ["build", "--src", f"{bucket}/nothing/here.tar",
                                       "--dst", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{bucket}/nothing/here.tar does not exist" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_dask_build_from_a_tar_in_a_bucket(bucket, npz_all, tree, tmp_path):
    """Dask worker processes open the bucket themselves (AWS_* from their environment): the task
    carries the archive's URL and the member's offset, never an open file."""
    distributed = pytest.importorskip("distributed")
    from tpuprep.runners.dask_cluster import DaskRunner

    url = _upload(bucket, npz_all, "npz_all.tar")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        runner = DaskRunner(address=cluster.scheduler_address)
        try:
            report = build(url, tmp_path / "out", collections=["tile"], splits=["train"], runner=runner)
        finally:
            runner.close()
    build(tree, tmp_path / "ref", collections=["tile"], splits=["train"])
    assert not report.quarantined
    assert _shards(tmp_path / "out") == _shards(tmp_path / "ref") != {}


def test_a_run_file_builds_from_a_tar_in_a_bucket_to_a_bucket(bucket, npz_all, tree_shards, tmp_path):
    """The shape of pipelines/full-tpugraphs-cluster.toml: the official archive in a bucket, shards
    written to a bucket, through `tpuprep run`; the shards equal a local build of the extracted tree,
    and open_dataset reads them back from the bucket."""
    import fsspec

    import tpuprep

    src = _upload(bucket, npz_all, "official/npz_all.tar")
    dst = f"{bucket}/shards/v1"
    run_file = tmp_path / "cluster.toml"
    run_file.write_text(f'name = "archive-to-bucket"\nsrc = "{src}"\ndst = "{dst}"\n[cluster]\ntype = "serial"\n')
    result = CliRunner().invoke(main, ["run", str(run_file), "-q"])
    assert result.exit_code == 0, result.output
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    root = dst.removeprefix("s3://")
    remote = {p[len(root) + 1:]: hashlib.sha256(fs.cat_file(p)).hexdigest()
              for p in sorted(fs.find(root)) if p.endswith(".parquet")}
    assert remote == _shards(tree_shards)
    manifest = json.loads(fs.cat_file(f"{root}/manifest.json"))
    assert {e["archive"] for e in manifest["inputs"]} == {"npz_all.tar"}
    ds = tpuprep.open_dataset(dst)
    local = tpuprep.open_dataset(tree_shards)
    assert ds.graph_ids() == local.graph_ids()
    gid = local.graph_ids("layout:xla:random")[0]
    assert ds.sample_configs(gid, 4, seed=1).rows.tolist() == local.sample_configs(gid, 4, seed=1).rows.tolist()


def test_a_flat_folder_in_a_bucket_builds_with_collection_and_split(bucket, tree, tmp_path):
    """--collection/--split work for a flat folder of npz objects in a bucket as for a local one;
    an object in a deeper prefix is refused as lying in a subfolder."""
    flat = tmp_path / "flat"
    flat.mkdir()
    files = _npz(tree, "tile/xla/train")[:3]
    for f in files:
        shutil.copy(f, flat / f.name)
    (flat / "deeper").mkdir()
    shutil.copy(files[0], flat / "deeper" / "extra.npz")
    url = _upload(bucket, flat, "flat")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", "--src", url, "--dst", str(out), "-q",
                                       "--collection", "tile:xla", "--split", "valid"])
    assert result.exit_code == 3, result.output  # the deeper object is quarantined, the rest built
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["collections"]["tile:xla"]["splits"]["valid"]["graphs"] == 3
    assert [q["error"].split(";")[0] for q in manifest["quarantine"]] == ["lies in a subfolder of --src"]


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_what_a_folder_of_tars_holds_besides_tars_is_named_by_build_and_verify(tree, tmp_path, request, where):
    """Issue #36 item 11: in a folder of tars, a ``.tar.gz``, a file named ``*.NPZ`` and a member named
    ``*.NPZ`` are not read: each is named with why, in the build's report lines, its ``--json`` and
    verify's report (whose "all exact" covers only what was built), locally and in a bucket."""
    folder = tmp_path / "tars"
    folder.mkdir()
    train, valid = _npz(tree, "tile/xla/train"), _npz(tree, "tile/xla/valid")
    _tar(folder / "tile.tar", tree, train[:2])
    with tarfile.open(folder / "tile.tar", "a") as tf:  # a member in upper case, beside the two read
        tf.add(train[2], arcname="npz/tile/xla/train/UPPER.NPZ")
    with tarfile.open(folder / "more.tar.gz", "w:gz") as tf:
        tf.add(valid[0], arcname="npz/tile/xla/valid/zipped.npz")
    shutil.copy(valid[1], folder / "loose.NPZ")
    src = str(folder) if where == "local" else _upload(request.getfixturevalue("bucket"), folder, "tars")
    want = {"more.tar.gz": "a compressed tar archive; only uncompressed .tar archives are read in place "
                           "(decompress it first, e.g. gunzip)",
            "loose.NPZ": "its name ends in '.NPZ', not '.npz' (names are case-sensitive); rename it to read it",
            "tile.tar!npz/tile/xla/train/UPPER.NPZ": "not a .npz member: its name ends in '.NPZ', not '.npz' "
                                                     "(names are case-sensitive)"}
    dst = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", "--src", src, "--dst", str(dst), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["converted"] == 2 and {s["path"]: s["reason"] for s in doc["skipped"]} == want
    result = CliRunner().invoke(main, ["build", "--src", src, "--dst", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert "2 converted, 0 reused, 0 quarantined, 3 skipped in" in result.output
    assert "skipped 1 (e.g. more.tar.gz): a compressed tar archive" in result.output
    checked = CliRunner().invoke(main, ["verify", "--src", src, "--dst", str(dst)])
    assert checked.exit_code == 0, checked.output
    lines = checked.output.splitlines()
    assert {line for line in lines if line.startswith("skipped 1 (e.g. ")} == {
        f"skipped 1 (e.g. {path}): {reason}" for path, reason in want.items()}
    assert lines[-1] == "2 graphs and 2 shards checked: all exact"
    checked = CliRunner().invoke(main, ["verify", "--src", src, "--dst", str(dst), "--json"])
    assert {s["path"]: s["reason"] for s in json.loads(checked.stdout)["skipped"]} == want


def test_a_graph_id_held_twice_is_refused_wherever_the_two_lie(tmp_path):
    """Graph ids are the collection and the file stem, not the split: ``train/g`` and ``valid/g`` clash
    even with ``train/h`` between them in path order. The first by canonical path is kept, the other
    refused naming both (issue #36: a check of neighbours in path order missed it)."""
    from npzfactory import layout_arrays, write

    root = tmp_path / "npz"
    for rel in ("layout/xla/random/train/g.npz", "layout/xla/random/train/h.npz",
                "layout/xla/random/valid/g.npz"):
        write(root, rel, layout_arrays(len(rel)))
    inputs, refused = discover(root)
    assert [i.relpath for i in inputs] == ["layout/xla/random/train/g.npz", "layout/xla/random/train/h.npz"]
    (clash,) = refused
    assert clash.path.endswith("layout/xla/random/valid/g.npz")
    assert clash.problem == ("graph id layout:xla:random:g clashes with layout/xla/random/train/g.npz; graph "
                             "ids must be unique within a build")
    report = build(root, tmp_path / "out")
    assert [(q["path"], q["bytes"] > 0) for q in report.quarantined] == [("layout/xla/random/valid/g.npz", True)]
