"""Issue #27, the input side: what ``--src`` holds must be read as ``tar -x`` and ``ls`` would see it,
or refused with one line — never silently replaced, dropped or over-allocated.

- a GNU sparse tar member is refused (its data is not ``size`` plain bytes), and ``verify`` checks each
  input's zip structure itself (end record at the end of the member's window, sizes, CRC-32), so a
  reader fooled by a window would not be confirmed by it;
- a folder that cannot be listed is a quarantine record (exit 3), ``--src`` itself unlistable is fatal,
  and ``verify`` reports what it could not list;
- an appended tar: the last member of a name wins, as with ``tar -x``;
- declared shapes beyond the input limits are refused from the headers, before anything is allocated,
  in the build and in verify; ``TPUPREP_INPUT_LIMIT_SCALE`` raises the limits;
- files that are not read (``*.NPZ``, ``*.tar.gz``, others) are counted and listed as skipped.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write

from tpuprep.cli import main
from tpuprep.io import archive
from tpuprep.io.npz import NpzFile

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def _quarantine(dst: Path) -> list[dict]:
    return [json.loads(line) for line in (dst / "quarantine.jsonl").read_text().splitlines()]


def _graph_rows(dst: Path) -> dict[str, dict]:
    rows = {}
    for p in sorted(dst.rglob("*.parquet")):
        table = pq.read_table(p)
        if "source_sha256" in table.column_names:
            for r in table.to_pylist():
                rows[r["graph_id"]] = r
    return rows


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- 1. sparse members


def _holey_copy(data: bytes, path: Path, block: int = 4096) -> None:
    """Write ``data`` to ``path`` with every all-zero ``block`` left as a hole (a sparse file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(0, len(data), block):
            piece = data[i : i + block]
            if len(piece) == block and not piece.strip(b"\0"):
                os.lseek(fd, block, os.SEEK_CUR)
            else:
                os.write(fd, piece)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def sparse_tar(tmp_path_factory) -> Path:
    """``x.tar`` made by ``tar --sparse`` of tile/xla/train/{sp.npz (sparse), filler.bin, z.npz} and
    tail.bin, sized so that z.npz's zip end record lies inside sp.npz's ``size``-byte window."""
    root = tmp_path_factory.mktemp("sparse")
    folder = root / "tile" / "xla" / "train"
    folder.mkdir(parents=True)
    sp = {**tile_arrays(1), "padding": np.zeros(400_000, np.float32)}  # an extra key: 1.6 MB of zeros
    buf = io.BytesIO()
    np.savez(buf, **sp)  # STORED, so the zeros stay zeros in the file
    _holey_copy(buf.getvalue(), folder / "sp.npz")
    write(root, "tile/xla/train/z.npz", tile_arrays(2))
    size, z_size = len(buf.getvalue()), (folder / "z.npz").stat().st_size
    # sp's stored data is a few KB; put z so that it ends ~2 KB before sp's window does
    (folder / "filler.bin").write_bytes(b"\xa5" * (size - z_size - 16384))
    (root / "tail.bin").write_bytes(b"\x5a" * 200_000)
    tar = root / "x.tar"
    subprocess.run(["tar", "--sparse", "-cf", str(tar), "tile/xla/train/sp.npz", "tile/xla/train/filler.bin",
                    "tile/xla/train/z.npz", "tail.bin"], cwd=root, check=True)
    with tarfile.open(tar) as tf:
        members = {m.name: m for m in tf.getmembers()}
    sp_m, z_m = members["tile/xla/train/sp.npz"], members["tile/xla/train/z.npz"]
    assert sp_m.issparse(), "tar --sparse stored sp.npz as a plain member: the scenario needs a sparse one"
    window_end, z_end = sp_m.offset_data + sp_m.size, z_m.offset_data + z_m.size
    assert z_end <= window_end < z_end + 60_000 <= tar.stat().st_size, "z's end record must be in sp's window"
    out = root / "out"
    out.mkdir()
    shutil.move(tar, out / "x.tar")
    return out / "x.tar"


def test_a_sparse_tar_member_is_refused_not_read_as_the_next_members_bytes(sparse_tar, tmp_path):
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(sparse_tar), "--dst", str(dst), "-q")
    assert result.exit_code == 3, result.output
    [q] = _quarantine(dst)
    assert q["file"] == "x.tar!tile/xla/train/sp.npz" and "sparse" in q["error"]
    assert set(_graph_rows(dst)) == {"tile:xla:z"}  # sp is not converted from z's arrays
    verified = _run("verify", "--src", str(sparse_tar), "--dst", str(dst), "-q")
    assert verified.exit_code == 0, verified.output


def test_verify_reads_the_zip_itself_and_catches_a_reader_fooled_by_a_sparse_window(sparse_tar, tmp_path,
                                                                                      monkeypatch):
    """Put the build's reader back as it was (a sparse member indexed as ``size`` plain bytes, the zip
    end record searched for anywhere near the end): it converts sp.npz from z.npz's arrays; verify,
    reading the window with its own zip parser, must say so even when it lists the archive the same way."""
    refusal = archive._refusal
    monkeypatch.setattr(archive, "_refusal", lambda info: None if info.issparse() else refusal(info))
    monkeypatch.setattr(NpzFile, "_check_end_record", lambda self: None)
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(sparse_tar), "--dst", str(dst), "-q")
    assert result.exit_code == 0, result.output  # the old reader's silent wrong result
    rows = _graph_rows(dst)
    assert rows["tile:xla:sp"]["num_nodes_original"] == rows["tile:xla:z"]["num_nodes_original"] == 5
    verified = _run("verify", "--src", str(sparse_tar), "--dst", str(dst), "-q")
    assert verified.exit_code == 1, verified.output
    assert "MISMATCH " + str(sparse_tar) + "!tile/xla/train/sp.npz: no zip end record ends the member's bytes" \
        in verified.output


def test_the_independent_zip_check_finds_what_the_zip_directory_does_not_match(tmp_path):
    from tpuprep.inputcheck import zip_problems

    path = write(tmp_path, "a.npz", tile_arrays(3, n=40))
    good = path.read_bytes()

    def problems(data: bytes) -> list[str]:
        return zip_problems(io.BytesIO(data), len(data))

    assert problems(good) == []
    assert "no zip end record ends" in problems(good + b"\0" * 100)[0]
    assert "bytes before or inside the zip" in problems(b"\0" * 100 + good)[0]
    start, info = _data_start(good, "node_feat.npy")
    flipped = bytearray(good)
    flipped[start + info.compress_size - 1] ^= 0xFF  # the last byte of node_feat's DEFLATE data
    assert any(p.startswith("node_feat.npy: ") for p in problems(bytes(flipped)))
    stored = io.BytesIO()
    np.savez(stored, a=np.arange(1000, dtype=np.int64))
    data = bytearray(stored.getvalue())
    start, info = _data_start(bytes(data), "a.npy")
    data[start + 500] ^= 1  # inside the STORED array bytes: only the CRC can tell
    got = zlib.crc32(bytes(data[start : start + info.compress_size]))
    assert problems(bytes(data)) == [f"a.npy: CRC-32 {got:08x} differs from the zip directory's {info.CRC:08x}"]


def _data_start(data: bytes, name: str) -> tuple[int, zipfile.ZipInfo]:
    """Where member ``name``'s data starts in the zip ``data`` (after its local header), and its entry."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = zf.getinfo(name)
    at = info.header_offset
    name_len, extra_len = int.from_bytes(data[at + 26 : at + 28], "little"), int.from_bytes(data[at + 28 : at + 30], "little")
    return at + 30 + name_len + extra_len, info


def test_the_builds_reader_refuses_bytes_after_the_zip_end_record(tmp_path):
    path = write(tmp_path, "a.npz", tile_arrays(3))
    path.write_bytes(path.read_bytes() + b"junk" * 10)
    with pytest.raises(ValueError, match="40 bytes that are not part of it follow its end record"):
        NpzFile(path)


# --------------------------------------------------------------------------- 2. listing errors


def _tree(root: Path) -> Path:
    for i in range(2):
        write(root, f"layout/xla/random/train/g{i}.npz", layout_arrays(i, n=20, c=12))
        write(root, f"tile/xla/train/t{i}.npz", tile_arrays(i))
    write(root, "layout/xla/random/valid/v0.npz", layout_arrays(7))
    return root


def _deny(monkeypatch, folder: Path) -> None:
    """Listing ``folder`` raises PermissionError (as ``chmod 000`` does for a non-root user)."""
    real = os.scandir

    def scandir(path="."):
        if Path(os.fsdecode(path)) == folder:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_folder_that_cannot_be_listed_is_quarantined_and_verify_says_what_it_could_not_list(tmp_path,
                                                                                              monkeypatch):
    src = _tree(tmp_path / "npz")
    denied = src / "layout" / "xla" / "random" / "train"
    _deny(monkeypatch, denied)
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(src), "--dst", str(dst))
    assert result.exit_code == 3, result.output  # was: 3 converted, 0 quarantined, exit 0
    assert "3 converted, 0 reused, 1 quarantined" in result.output
    [q] = _quarantine(dst)
    assert q["file"] == "layout/xla/random/train"
    assert q["error"] == "folder cannot be listed (Permission denied); the files in it are not read"
    verified = _run("verify", "--src", str(src), "--dst", str(dst), "-q")
    assert verified.exit_code == 1, verified.output  # was: "all exact", the split unchecked
    assert verified.output.splitlines() == [
        f"MISMATCH {denied}: cannot be listed, so the inputs in it are not checked (folder cannot be listed "
        "(Permission denied); the files in it are not read)", "3 graphs and 4 shards checked: 1 problems"]


def test_an_unlistable_src_is_fatal_in_one_line(tmp_path, monkeypatch):
    src = _tree(tmp_path / "npz")
    _deny(monkeypatch, src)
    result = _run("build", "--src", str(src), "--dst", str(tmp_path / "shards"))
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == f"error: --src {src}: cannot be listed: Permission denied"


def test_a_dangling_symlink_or_a_file_where_a_folder_is_expected_is_not_silent(tmp_path):
    src = _tree(tmp_path / "npz")
    (src / "tile" / "xla" / "valid").symlink_to(tmp_path / "gone")
    (src / "layout" / "xla" / "random" / "test").write_bytes(b"not a folder")
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(src), "--dst", str(dst), "--json")
    assert result.exit_code == 3, result.output
    [q] = _quarantine(dst)
    assert q["file"] == "tile/xla/valid" and "dangling symbolic link" in q["error"]
    assert json.loads(result.stdout)["skipped"] == [{"path": "layout/xla/random/test",
                                                     "reason": "neither an .npz file nor a .tar archive"}]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to run the build as nobody with setpriv")
def test_chmod_000_stops_a_build_run_as_nobody_from_reading_silently(tmp_path):
    """The issue's own repro with real permissions: ``chmod 000`` on a split folder, the build run as an
    unprivileged user (``setpriv`` to nobody)."""
    base = Path(tmp_path_shared := os.path.join("/tmp", f"tpuprep-perm-{os.getpid()}"))
    shutil.rmtree(base, ignore_errors=True)
    try:
        src = _tree(base / "npz")
        os.chmod(base, 0o777)
        for p in [base, *base.rglob("*")]:
            os.chmod(p, 0o777 if p.is_dir() else 0o644)
        (src / "layout" / "xla" / "random" / "train").chmod(0o000)
        env = {**os.environ, "HOME": tmp_path_shared, "PYTHONPATH": str(REPO), "NUMBA_CACHE_DIR": f"{base}/numba"}
        cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c",
               "from tpuprep.cli import main; main()", "build", "--src", str(src), "--dst", f"{base}/shards",
               "-q", "--json"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 3, done.stderr
        doc = json.loads(done.stdout)
        assert [q["file"] for q in doc["quarantined"]] == ["layout/xla/random/train"]
        assert "Permission denied" in doc["quarantined"][0]["error"]
    finally:
        denied = base / "npz" / "layout" / "xla" / "random" / "train"
        if denied.exists():
            denied.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- 6. appended tar


def test_an_appended_member_replaces_the_older_copy_as_tar_x_does(tmp_path):
    root = tmp_path / "files"
    old = write(root / "old", "tile/xla/train/a.npz", tile_arrays(1, n=4))
    write(root / "old", "tile/xla/train/b.npz", tile_arrays(2))
    new = write(root / "new", "tile/xla/train/a.npz", tile_arrays(3, n=7))
    tar = tmp_path / "t.tar"
    subprocess.run(["tar", "-cf", str(tar), "tile"], cwd=root / "old", check=True)
    subprocess.run(["tar", "-rf", str(tar), "tile/xla/train/a.npz"], cwd=root / "new", check=True)
    extracted = tmp_path / "x"
    extracted.mkdir()
    subprocess.run(["tar", "-xf", str(tar)], cwd=extracted, check=True)
    wins = extracted / "tile/xla/train/a.npz"
    assert _sha(wins) == _sha(new) != _sha(old)  # what tar -x leaves

    dst = tmp_path / "shards"
    result = _run("build", "--src", str(tar), "--dst", str(dst), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["converted"] == 2 and doc["quarantined"] == []
    assert doc["skipped"] == [{"path": "t.tar!tile/xla/train/a.npz",
                               "reason": "an older copy: a later member of the archive (tile/xla/train/a.npz) "
                                         "replaces it, as with tar -x"}]
    row = _graph_rows(dst)["tile:xla:a"]
    assert row["source_sha256"] == _sha(wins) and row["num_nodes_original"] == 7
    verified = _run("verify", "--src", str(tar), "--dst", str(dst), "-q")
    assert verified.exit_code == 0, verified.output


def test_a_later_link_of_the_same_name_refuses_the_name(tmp_path):
    """tar -x would leave the link, not the older file: the older file is not converted."""
    write(tmp_path / "f", "tile/xla/train/a.npz", tile_arrays(1))
    tar = tmp_path / "t.tar"
    with tarfile.open(tar, "w") as tf:
        tf.add(tmp_path / "f" / "tile/xla/train/a.npz", arcname="tile/xla/train/a.npz")
        link = tarfile.TarInfo("./tile/xla/train/a.npz")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
        tf.add(tmp_path / "f" / "tile/xla/train/a.npz", arcname="tile/xla/train/b.npz")
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(tar), "--dst", str(dst), "-q")
    assert result.exit_code == 3, result.output
    assert [(q["file"], "symbolic link" in q["error"]) for q in _quarantine(dst)] == \
        [("t.tar!./tile/xla/train/a.npz", True)]
    assert set(_graph_rows(dst)) == {"tile:xla:b"}


# --------------------------------------------------------------------------- 9. input limits


def test_a_tile_file_beyond_the_node_limit_is_refused_in_the_build_and_in_verify(tmp_path):
    src = tmp_path / "npz"
    write(src, "tile/xla/train/big.npz", tile_arrays(1, n=12_000))
    write(src, "tile/xla/train/ok.npz", tile_arrays(2))
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(src), "--dst", str(dst), "-q")
    assert result.exit_code == 3, result.output
    [q] = _quarantine(dst)
    assert (q["file"], q["key"]) == ("tile/xla/train/big.npz", "node_feat")
    assert q["error"].startswith("nodes 12,000 exceeds the limit of 10,000 for a tile file")
    assert "TPUPREP_INPUT_LIMIT_SCALE" in q["error"]

    raised = tmp_path / "raised"
    scale = {"TPUPREP_INPUT_LIMIT_SCALE": "2"}
    result = _run("build", "--src", str(src), "--dst", str(raised), "-q", env=scale)
    assert result.exit_code == 0, result.output
    assert _graph_rows(raised)["tile:xla:big"]["num_nodes_original"] == 12_000
    verified = _run("verify", "--src", str(src), "--dst", str(raised), "-q")  # verify's own limit check
    assert verified.exit_code == 1
    assert "node_feat" in verified.output and "exceeds the limit of 10,000" in verified.output
    assert _run("verify", "--src", str(src), "--dst", str(raised), "-q", env=scale).exit_code == 0
    bad = _run("build", "--src", str(src), "--dst", str(tmp_path / "x"), env={"TPUPREP_INPUT_LIMIT_SCALE": "-1"})
    assert bad.exit_code == 2 and bad.output.splitlines()[-1] == \
        "error: TPUPREP_INPUT_LIMIT_SCALE='-1' is not a positive number (it multiplies every input limit)"
    assert not (tmp_path / "x").exists()  # refused before anything was written


def test_a_member_read_whole_that_inflates_beyond_the_ratio_bound_is_refused(tmp_path):
    arrays = layout_arrays(1, n=20, c=12)
    arrays["node_splits"] = np.zeros((1, 700_000), np.int64)  # 5.6 MB of zeros: ~1000 : 1
    src = tmp_path / "npz"
    write(src, "layout/xla/random/train/g.npz", arrays)
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(src), "--dst", str(dst), "-q")
    assert result.exit_code == 3, result.output
    [q] = _quarantine(dst)
    assert q["key"] == "node_splits" and "above the limit of 400 : 1 for a member read whole" in q["error"]


def test_a_member_the_build_never_reads_is_not_held_to_the_read_whole_limits(tmp_path):
    """Issue #36 item 10: the limits bound what the build reads; an extra member (here ~1000 : 1 zeros,
    which node_splits may not be) is never inflated by it, so it is ignored with a warning."""
    arrays = {**layout_arrays(1, n=20, c=12), "junk": np.zeros((1, 700_000), np.int64)}
    src = tmp_path / "npz"
    write(src, "layout/xla/random/train/g.npz", arrays)
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(src), "--dst", str(dst), "-q")
    assert result.exit_code == 0, result.output
    [entry] = json.loads((dst / "manifest.json").read_text())["inputs"]
    assert entry["status"] == "ok" and entry["warnings"] == ["unknown key 'junk' ignored"]


def _bomb(path: Path, n: int, m: int) -> None:
    """A tile npz whose node_feat (n, 140) float32 and edge_index (m, 2) int64 are zeros, written by
    streaming DEFLATE (never held in memory); the other members are small."""
    small = tile_arrays(0)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for key, shape, dtype in (("node_feat", (n, 140), "<f4"), ("edge_index", (m, 2), "<i8")):
            head = io.BytesIO()
            np.lib.format.write_array_header_1_0(head, {"descr": dtype, "fortran_order": False, "shape": shape})
            with zf.open(f"{key}.npy", "w", force_zip64=True) as fh:
                fh.write(head.getvalue())
                zeros, left = bytes(1 << 22), int(np.prod(shape)) * np.dtype(dtype).itemsize
                while left:
                    fh.write(zeros[: min(left, len(zeros))])
                    left -= min(left, len(zeros))
        for key in ("node_opcode", "config_feat", "config_runtime", "config_runtime_normalizers"):
            buf = io.BytesIO()
            np.save(buf, np.zeros(n, np.uint8) if key == "node_opcode" else small[key])
            zf.writestr(f"{key}.npy", buf.getvalue())


def test_the_issues_tile_bomb_is_refused_from_its_headers_without_allocating(tmp_path):
    """1.5 M nodes and 20 M edges of zeros in a few MB: refused in one line; the build's peak RSS stays
    far below the 1.2 GB the arrays would take (it was 4.3 GB)."""
    src = tmp_path / "npz"
    (src / "tile/xla/train").mkdir(parents=True)
    _bomb(src / "tile/xla/train/bomb.npz", 1_500_000, 20_000_000)
    assert (src / "tile/xla/train/bomb.npz").stat().st_size < 8 << 20  # 1.16 GB declared
    # The kernels are compiled (or loaded from Numba's cache) first and the peak is reset after that
    # (clear_refs 5: VmHWM := VmRSS), so a cold compile cannot hide or fake the bomb's allocation.
    code = ("import sys; from tpuprep.cli import main; from tpuprep.kernels import warm; warm()\n"
            "def kb(key):\n"
            "    return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1])\n"
            "open('/proc/self/clear_refs', 'w').write('5'); base = kb('VmRSS:')\n"
            "try:\n    main()\nexcept SystemExit as e:\n"
            "    print('RSS', kb('VmHWM:') - base, file=sys.stderr); raise")
    done = subprocess.run([sys.executable, "-c", code, "build", "--src", str(src), "--dst", str(tmp_path / "s"),
                           "--json"], env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 3, done.stderr
    [q] = json.loads(done.stdout)["quarantined"]
    assert (q["file"], q["key"]) == ("tile/xla/train/bomb.npz", "node_feat")
    assert "1,500,000 exceeds the limit of 10,000" in q["error"]
    grown_kb = int(done.stderr.rsplit("RSS ", 1)[1].split()[0])
    assert grown_kb < 300_000, f"the build's peak RSS grew by {grown_kb} KB"  # node_feat alone: 840 MB


# --------------------------------------------------------------------------- 14. skipped files


def test_files_that_are_not_read_are_counted_and_listed_as_skipped(tmp_path):
    src = _tree(tmp_path / "npz")
    shutil.copy(src / "tile/xla/train/t0.npz", src / "tile/xla/train/t9.NPZ")
    with tarfile.open(src / "more.tar.gz", "w:gz") as tf:
        tf.add(src / "tile/xla/train/t1.npz", arcname="tile/xla/train/t5.npz")
    (src / "README.txt").write_text("hello")
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(src), "--dst", str(dst), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["converted"] == 5 and doc["quarantined"] == []
    assert {s["path"]: s["reason"].split(";")[0].split(",")[0] for s in doc["skipped"]} == {
        "README.txt": "neither an .npz file nor a .tar archive",
        "more.tar.gz": "a compressed tar archive",
        "tile/xla/train/t9.NPZ": "its name ends in '.NPZ'"}
    result = _run("build", "--src", str(src), "--dst", str(tmp_path / "s2"), "-v", "--log-file",
                  str(tmp_path / "log"))
    assert result.exit_code == 0, result.output
    assert "5 converted, 0 reused, 0 quarantined, 3 skipped in " in result.output
    assert "skipped: more.tar.gz: a compressed tar archive; only uncompressed .tar archives are read in place" \
        in result.output
    assert "skipped 1 (e.g. tile/xla/train/t9.NPZ): its name ends in '.NPZ', not '.npz'" in result.output
    assert "skipped: tile/xla/train/t9.NPZ: its name ends in '.NPZ'" in (tmp_path / "log").read_text()
    dry = _run("build", "--src", str(src), "--dst", str(tmp_path / "s3"), "--dry-run")
    assert "would convert 5 files; 0 refused, 3 skipped" in dry.output


def test_non_npz_archive_members_are_skipped_with_a_word(tmp_path):
    write(tmp_path / "f", "tile/xla/train/a.npz", tile_arrays(1))
    (tmp_path / "f" / "tile/xla/train/notes.txt").write_text("x")
    tar = tmp_path / "t.tar"
    with tarfile.open(tar, "w") as tf:
        tf.add(tmp_path / "f" / "tile", arcname="tile")
    result = _run("build", "--src", str(tar), "--dst", str(tmp_path / "s"), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["skipped"] == [{"path": "t.tar!tile/xla/train/notes.txt",
                                                     "reason": "not a .npz member"}]


def test_a_refused_member_replaced_by_a_later_regular_copy_is_read_and_named_right(tmp_path):
    """tar -x leaves the later regular file; the older link is reported as a skipped copy, named by its
    member even when the archive's own name holds a ``!``."""
    write(tmp_path / "f", "tile/xla/train/a.npz", tile_arrays(4))
    tar = tmp_path / "odd!name.tar"
    with tarfile.open(tar, "w") as tf:
        link = tarfile.TarInfo("tile/xla/train/a.npz")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
        tf.add(tmp_path / "f" / "tile/xla/train/a.npz", arcname="tile/xla/train/a.npz")
    result = _run("build", "--src", str(tar), "--dst", str(tmp_path / "s"), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["converted"] == 1 and doc["quarantined"] == []
    assert [s["path"] for s in doc["skipped"]] == ["odd!name.tar!tile/xla/train/a.npz"]


def test_the_independent_zip_check_reads_zip64_records(monkeypatch):
    """numpy writes zip64 local headers always, and zip64 directory entries and end records for big
    files; shrink zipfile's limits so a small file gets all of them."""
    from tpuprep.inputcheck import zip_problems

    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 100)
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 1)
    buf = io.BytesIO()
    np.savez_compressed(buf, a=np.arange(1000), b=np.ones((50, 3)))
    monkeypatch.undo()
    data = buf.getvalue()
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data  # the zip64 end record and its locator
    assert zip_problems(io.BytesIO(data), len(data)) == []
    assert NpzFile("z.npz", io.BytesIO(data)).read("a").tolist() == list(range(1000))
    start, _ = _data_start(data, "b.npy")
    broken = bytearray(data)
    broken[start + 5] ^= 0x55
    assert [p.split(":")[0] for p in zip_problems(io.BytesIO(bytes(broken)), len(data))] == ["b.npy"]


def test_a_file_that_cannot_be_examined_is_refused_not_a_crash(tmp_path, monkeypatch):
    """A folder readable but not searchable (``chmod 644``) lists its names, but ``lstat`` of each
    fails with EACCES for a non-root user: one refusal per file, the build goes on."""
    src = _tree(tmp_path / "npz")
    hidden = src / "tile" / "xla" / "train" / "t1.npz"
    real = os.lstat

    def lstat(path, *args, **kwargs):
        if os.fspath(path) == str(hidden):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    dst = tmp_path / "shards"
    result = _run("build", "--src", str(src), "--dst", str(dst), "-q")
    assert result.exit_code == 3, result.output
    assert [(q["file"], q["error"]) for q in _quarantine(dst)] == \
        [("tile/xla/train/t1.npz", "cannot be examined: Permission denied")]


def test_objects_that_are_not_read_in_a_bucket_are_listed_as_skipped(bucket, tmp_path):
    from s3server import upload_folder

    src = tmp_path / "npz"
    write(src, "tile/xla/train/t0.npz", tile_arrays(0))
    shutil.copy(src / "tile/xla/train/t0.npz", src / "tile/xla/train/t1.NPZ")
    (src / "notes.txt").write_text("x")
    url = upload_folder(src, f"{bucket}/npz")
    result = _run("build", "--src", url, "--dst", str(tmp_path / "s"), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["converted"] == 1
    assert sorted((s["path"], s["reason"][:24]) for s in doc["skipped"]) == [
        ("notes.txt", "neither an .npz file nor"), ("tile/xla/train/t1.NPZ", "its name ends in '.NPZ',")]


def test_a_resume_with_raised_limits_converts_what_the_old_limits_refused(tmp_path):
    """The input limits' scale is part of the resume fingerprint: the limit error says the variable
    raises the limits, so a ``--resume`` under a raised scale must convert the file again, not hand
    back the old quarantine (review of #27 item 9)."""
    src = tmp_path / "npz"
    write(src, "tile/xla/train/big.npz", tile_arrays(1, n=12_000))
    write(src, "tile/xla/train/ok.npz", tile_arrays(2))
    dst = tmp_path / "shards"
    crashed = subprocess.run([sys.executable, "-c", "from tpuprep.cli import main; main()", "build", "--src",
                              str(src), "--dst", str(dst), "-q"], capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PYTHONPATH": str(REPO), "TPUPREP_CRASH_AT": "shard:1"})
    assert crashed.returncode == -9, crashed.stderr  # killed in the merge: the batch's sidecar is kept
    result = _run("build", "--src", str(src), "--dst", str(dst), "--resume",
                  env={"TPUPREP_INPUT_LIMIT_SCALE": "2"})
    assert result.exit_code == 0, result.output
    assert "2 converted, 0 reused, 0 quarantined" in result.output, result.output
    assert _graph_rows(dst)["tile:xla:big"]["num_nodes_original"] == 12_000
    assert not _quarantine(dst)


def test_a_link_whose_target_cannot_be_reached_is_not_called_dangling(tmp_path, monkeypatch):
    """Only a missing target makes a link dangling: EACCES or ELOOP on stat is another problem, and
    a link removed between listing and stat is not a crash (``LocalStore.walk``'s entries)."""
    import errno as errno_

    from tpuprep.io.storage import resolve

    link = tmp_path / "l.npz"
    link.symlink_to(tmp_path / "missing.npz")
    store = resolve(tmp_path)

    def entry():
        (found,) = [e for e in store.walk() if e.rel == "l.npz"]
        return found.kind, found.detail, found.target

    assert entry() == ("link", "dangling", str(tmp_path / "missing.npz"))
    (tmp_path / "missing.npz").write_bytes(b"")
    assert entry() == ("link", "", "")
    real_stat = os.stat

    def denied(path, *a, **k):
        if os.fspath(path) == str(link):
            raise PermissionError(errno_.EACCES, "Permission denied", os.fspath(path))
        return real_stat(path, *a, **k)

    monkeypatch.setattr(os, "stat", denied)
    assert entry() == ("link", "", "")
    monkeypatch.undo()
    (tmp_path / "missing.npz").unlink()
    real_readlink = os.readlink
    monkeypatch.setattr(os, "readlink", lambda path, *a, **k: (_ for _ in ()).throw(FileNotFoundError(path))
                        if os.fspath(path) == str(link) else real_readlink(path, *a, **k))
    assert entry() == ("link", "dangling", "?")  # removed between the listing and the readlink
