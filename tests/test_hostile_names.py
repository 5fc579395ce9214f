"""Hostile input file names (issue #27 items 7, 8 and 14): names that are not UTF-8, names holding a
newline or another control character, and stems so long that a name derived from them would not fit in
a file name. Every build, resume, log file, JSON document, quarantine record, card and verify must
cope: names are written in the one escaped form of ``errors.display_name`` (with the exact bytes in
``*_hex``), and the files tpuprep makes are named independently of the input's length."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write

import tpuprep.build
from tpuprep.cli import main
from tpuprep.errors import BadInput, display_name, raw_name_hex
from tpuprep.shards.layout import (
    PART_NAME,
    PART_STEM_CHARS,
    part_name,
    part_relpaths,
    sidecar_relpath,
)

BAD_BYTES = b"bad\xff\xfename"  # not UTF-8: Python sees U+DCFF U+DCFE
NEWLINE = "two\nlines\x1b[31m"  # valid UTF-8, but a newline and an escape sequence


# --------------------------------------------------------------------------- display_name


def test_display_name_escapes_undecodable_bytes_and_control_characters():
    assert display_name(os.fsdecode(BAD_BYTES)) == "bad\\xff\\xfename"
    assert display_name(BAD_BYTES) == "bad\\xff\\xfename"
    assert display_name(NEWLINE) == "two\\nlines\\x1b[31m"
    assert display_name("a\rb\tc\x7fd\x85e\u2028f") == "a\\rb\\tc\\x7fd\\x85e\\u2028f"
    assert display_name(None) == "<input>"


@pytest.mark.parametrize("name", ["layout/xla/random/train/g0.npz", "ünïcödé ok.npz", "back\\slash.npz", ""])
def test_display_name_keeps_ordinary_names(name):
    assert display_name(name) == name and display_name(Path(name)) == str(Path(name))
    assert raw_name_hex(name) is None


def test_raw_name_hex_gives_back_the_bytes():
    assert bytes.fromhex(raw_name_hex(os.fsdecode(BAD_BYTES))) == BAD_BYTES
    assert bytes.fromhex(raw_name_hex(NEWLINE)) == NEWLINE.encode()


def test_bad_input_message_is_one_line_whatever_the_name():
    exc = BadInput(f"/src/{NEWLINE}.npz", "node_feat", "bad\nproblem")
    assert "\n" not in str(exc) and str(exc) == "/src/two\\nlines\\x1b[31m.npz [node_feat]: bad\\nproblem"
    assert exc.path == f"/src/{NEWLINE}.npz"  # the record keeps the name itself


# --------------------------------------------------------------------------- end to end


@pytest.fixture
def hostile_src(tmp_path) -> Path:
    src = tmp_path / "npz"
    write(src, "layout/xla/random/train/g0.npz", layout_arrays(0))
    write(src, "tile/xla/train/t0.npz", tile_arrays(0))
    write(src, f"layout/xla/random/train/{os.fsdecode(BAD_BYTES)}.npz", layout_arrays(1))
    write(src, f"tile/xla/train/{NEWLINE}.npz", tile_arrays(1))
    return src


def _strict_json(text: str):
    """Parse JSON as a strict parser would: the text must be UTF-8 and no string in it may hold a lone
    surrogate (``json.dumps`` writes one as an escape, which strict parsers refuse) or a newline."""
    text.encode("utf-8")
    doc = json.loads(text)

    def strings(v):
        if isinstance(v, dict):
            for k, x in v.items():
                yield k
                yield from strings(x)
        elif isinstance(v, list):
            for x in v:
                yield from strings(x)
        elif isinstance(v, str):
            yield v

    for s in strings(doc):
        s.encode("utf-8")  # raises on a lone surrogate
        assert "\n" not in s, s
    return doc


def _check_outputs(dst: Path, src: Path) -> dict:
    """The manifest, quarantine list and card of a finished build with the two hostile names."""
    manifest = _strict_json((dst / "manifest.json").read_bytes().decode("utf-8"))
    quarantine = [_strict_json(line) for line in (dst / "quarantine.jsonl").read_text("utf-8").splitlines()]
    assert quarantine == manifest["quarantine"]
    files = sorted(q["file"] for q in quarantine)
    assert files == ["layout/xla/random/train/bad\\xff\\xfename.npz", "tile/xla/train/two\\nlines\\x1b[31m.npz"]
    for q in quarantine:  # the manifest keeps the exact bytes: the file can be found again
        assert os.path.isfile(os.fsencode(src) + b"/" + bytes.fromhex(q["file_hex"]))
        assert "\n" not in q["error"] and "\x1b" not in q["error"]
    by_path = {e["path"]: e for e in manifest["inputs"]}
    assert by_path["layout/xla/random/train/bad\\xff\\xfename.npz"]["path_hex"]
    assert "path_hex" not in by_path["layout/xla/random/train/g0.npz"]
    card = (dst / "README.md").read_text("utf-8")
    assert "- `layout/xla/random/train/bad\\xff\\xfename.npz`:" in card
    assert "- `tile/xla/train/two\\nlines\\x1b[31m.npz`:" in card
    return manifest


def _one_line_each(text: str, prefix: str) -> list[str]:
    """The lines starting with ``prefix``; each must name a whole file (no line broken by a name)."""
    lines = [line for line in text.splitlines() if prefix in line]
    assert not [line for line in text.splitlines() if line.startswith(("lines", "name"))], text
    return lines


def test_build_log_json_and_verify_cope_with_hostile_names(hostile_src, tmp_path):
    dst, log = tmp_path / "out", tmp_path / "build.log"
    r = CliRunner().invoke(main, ["build", "--src", str(hostile_src), "--dst", str(dst), "--json",
                                  "--log-file", str(log)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    assert r.exit_code == 3, r.output
    doc = _strict_json(r.stdout)
    assert doc["converted"] == 2 and len(doc["quarantined"]) == 2
    manifest = _check_outputs(dst, hostile_src)
    assert doc["quarantined"] == manifest["quarantine"]
    text = log.read_bytes().decode("utf-8")
    assert all(line[:4].isdigit() for line in text.splitlines()), text  # every line is stamped: none broken
    assert len(_one_line_each(text, "quarantined: ")) == 2
    assert "quarantined: tile/xla/train/two\\nlines\\x1b[31m.npz" in text
    assert "quarantined: layout/xla/random/train/bad\\xff\\xfename.npz" in text
    assert len(_one_line_each(r.stderr, "quarantined: ")) == 2
    v = CliRunner().invoke(main, ["verify", "--src", str(hostile_src), "--dst", str(dst)])
    assert v.exit_code == 0, v.output


def test_dry_run_json_escapes_refused_names(hostile_src, tmp_path):
    r = CliRunner().invoke(main, ["build", "--src", str(hostile_src), "--dst", str(tmp_path / "out"),
                                  "--dry-run", "--json"])
    assert r.exit_code == 3, r.output
    doc = _strict_json(r.stdout)
    assert sorted(f["file"] for f in doc["refused"]) == ["layout/xla/random/train/bad\\xff\\xfename.npz",
                                                         "tile/xla/train/two\\nlines\\x1b[31m.npz"]
    assert all(bytes.fromhex(f["file_hex"]) for f in doc["refused"])


def _interrupted_in_the_merge(src, dst, monkeypatch) -> None:
    """A build of ``src`` into ``dst`` stopped after every part was staged (KeyboardInterrupt in the merge)."""
    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(tpuprep.build, "merge_task", crash)
        with pytest.raises(KeyboardInterrupt):
            tpuprep.build.build(src, dst)


def test_resume_with_hostile_names(hostile_src, tmp_path, monkeypatch):
    """Interrupted after the parts were staged, then resumed from the command line (log file, JSON)."""
    dst, log = tmp_path / "out", tmp_path / "resume.log"
    _interrupted_in_the_merge(hostile_src, dst, monkeypatch)
    r = CliRunner().invoke(main, ["build", "--src", str(hostile_src), "--dst", str(dst), "--resume",
                                  "--json", "--log-file", str(log)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    assert r.exit_code == 3, r.output
    doc = _strict_json(r.stdout)
    assert doc["reused"] == 2 and doc["converted"] == 0
    _check_outputs(dst, hostile_src)
    assert len(_one_line_each(log.read_text("utf-8"), "quarantined: ")) == 2


def test_hostile_src_and_dst_names_stay_on_one_line(tmp_path):
    """A --src / --dst holding a newline and undecodable bytes: the log and every message stay one line each."""
    src = tmp_path / ("in" + NEWLINE + os.fsdecode(b"\xff"))
    write(src, "layout/xla/random/train/g0.npz", layout_arrays(0))
    dst, log = tmp_path / f"out{NEWLINE}", tmp_path / "log"
    r = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "--json", "--log-file", str(log)])
    assert r.exit_code == 0, r.output
    assert _strict_json(r.stdout)["dst"] == display_name(str(dst))
    text = log.read_bytes().decode("utf-8")
    assert all(line[:4].isdigit() for line in text.splitlines()), text
    assert f"--src {display_name(str(src))} --dst {display_name(str(dst))}" in text
    missing = CliRunner().invoke(main, ["build", "--src", str(src / f"no{NEWLINE}"), "--dst", str(tmp_path / "x"),
                                        "--json"])
    assert missing.exit_code == 2
    assert len(missing.stderr.splitlines()) == 1, missing.stderr
    assert _strict_json(missing.stdout)["status"] == "error"


# --------------------------------------------------------------------------- long stems (item 8)


def test_part_names_do_not_grow_with_the_input_name():
    folder = "layout/xla/random/train"
    assert part_name(f"{folder}/g0.npz") == "g0"  # ordinary names as before: old staging still resumes
    assert part_name(f"{folder}/{'a' * PART_STEM_CHARS}.npz") == "a" * PART_STEM_CHARS
    assert sidecar_relpath(f"{folder}/g0.npz") == f"parts/{folder}/g0.json"
    names = {part_name(f"{folder}/{'a' * n}.npz") for n in range(PART_STEM_CHARS + 1, 256)}
    assert len(names) == 255 - PART_STEM_CHARS  # distinct
    assert all(len(n) == PART_STEM_CHARS + 17 for n in names)
    # never equal to a kept stem, and still a part name the destination scan recognises
    long_name = part_name(f"{folder}/{'b' * 251}.npz")
    assert len(long_name) > PART_STEM_CHARS
    for rel in (*part_relpaths(f"{folder}/{'b' * 251}.npz", long_name), sidecar_relpath(f"{folder}/{'b' * 251}.npz")):
        assert PART_NAME.fullmatch(rel.rsplit("/", 1)[1]) and len(rel.rsplit("/", 1)[1]) < 140


@pytest.mark.parametrize("length", [229, 251])
def test_long_stems_build_and_resume(tmp_path, monkeypatch, length):
    src, dst = tmp_path / "npz", tmp_path / "out"
    long_layout, long_tile = "L" * length, "T" * length
    write(src, f"layout/xla/random/train/{long_layout}.npz", layout_arrays(0))
    write(src, "layout/xla/random/train/g1.npz", layout_arrays(1))
    write(src, f"tile/xla/train/{long_tile}.npz", tile_arrays(0))
    _interrupted_in_the_merge(src, dst, monkeypatch)
    staged = [p.name for p in (dst / ".tpuprep").rglob("*") if p.is_file()]
    assert staged and max(len(n) for n in staged) < 140, staged
    r = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "--resume", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["reused"] == 3
    clean = tmp_path / "clean"
    assert CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(clean), "-q"]).exit_code == 0
    files = {p.relative_to(clean): p.read_bytes() for p in clean.rglob("*") if p.is_file()}
    assert files == {p.relative_to(dst): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    ids = {e.get("graph_id") for e in json.loads((clean / "manifest.json").read_text())["inputs"]}
    assert {f"layout:xla:random:{long_layout}", f"tile:xla:{long_tile}"} <= ids
    v = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(clean)])
    assert v.exit_code == 0, v.output
    # export writes <stem>.npz through a temporary name: it must not outgrow the 255 bytes of a name
    out = tmp_path / "exported"
    for _ in range(2):  # the second export compares through a candidate file
        e = CliRunner().invoke(main, ["export", "--shards", str(clean), "--dst-npz", str(out)])
        assert e.exit_code == 0, e.output
    assert (out / f"layout/xla/random/train/{long_layout}.npz").is_file()
    assert (out / f"tile/xla/train/{long_tile}.npz").is_file()
    assert not [p for p in out.rglob(".*")], "temporaries left behind"


def test_build_into_a_bucket_with_hostile_and_long_names(hostile_src, tmp_path, bucket):
    """The object-store path writes the same escaped records and bounded part names (moto server)."""
    from tpuprep.build import build
    from tpuprep.io.storage import resolve

    write(hostile_src, f"layout/xla/random/valid/{'L' * 251}.npz", layout_arrays(2))
    local = tmp_path / "local"
    build(hostile_src, local)
    url = f"{bucket}/shards"
    report = build(hostile_src, url)
    assert len(report.quarantined) == 2
    store = resolve(url)
    got = {rel: store.read_bytes(rel) for rel in store.listing()}
    want = {p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*") if p.is_file()}
    assert sorted(got) == sorted(want) and [k for k in want if got[k] != want[k]] == []
    _check_outputs(local, hostile_src)


def test_an_archive_with_hostile_names(tmp_path):
    """A tar archive whose own name and one member's name are hostile: the manifest's archive and
    member fields are escaped too, with their bytes in archive_hex / member_hex."""
    import io
    import tarfile

    plain = tmp_path / "plain"
    good = write(plain, "g0.npz", layout_arrays(0))
    src = tmp_path / "src"
    src.mkdir()
    archive_name = "all" + os.fsdecode(b"\xff") + "\n.tar"
    with tarfile.open(src / archive_name, "w") as tar:
        tar.add(good, arcname="npz/layout/xla/random/train/g0.npz")
        data = good.read_bytes()
        info = tarfile.TarInfo(f"npz/tile/xla/train/{NEWLINE}.npz")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    dst = tmp_path / "out"
    r = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "--json"])
    assert r.exit_code == 3, r.output
    _strict_json(r.stdout)
    manifest = _strict_json((dst / "manifest.json").read_text("utf-8"))
    entry = next(e for e in manifest["inputs"] if e["status"] == "ok")
    assert entry["archive"] == "all\\xff\\n.tar" and bytes.fromhex(entry["archive_hex"]) == os.fsencode(archive_name)
    assert "member_hex" not in entry
    (q,) = manifest["quarantine"]
    assert q["file"] == "all\\xff\\n.tar!npz/tile/xla/train/two\\nlines\\x1b[31m.npz"
    assert bytes.fromhex(q["file_hex"]) == os.fsencode(f"{archive_name}!npz/tile/xla/train/{NEWLINE}.npz")
    assert CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst)]).exit_code == 0


def test_the_log_file_splits_only_on_newlines_and_escapes_the_other_separators(tmp_path):
    """U+2028, U+0085 and a vertical tab in a file name stay inside one log line, escaped
    (``str.splitlines`` split on all of them)."""
    from tpuprep.cli.common import LogFile

    log = LogFile(tmp_path / "log")
    log.write("skipped: a\u2028b\x85c\x0bd.npz: not an npz name")
    log.write("two\nlines")
    log.close()
    lines = (tmp_path / "log").read_text(encoding="utf-8").split("\n")
    assert len(lines) == 4 and lines[-1] == ""
    assert lines[0].endswith("skipped: a\\u2028b\\x85c\\x0bd.npz: not an npz name")
    assert lines[1].endswith(" two") and lines[2].endswith(" lines")


def test_skipped_names_are_escaped_in_the_verbose_lines_and_the_log(tmp_path):
    src = tmp_path / "npz"
    write(src, "tile/xla/train/ok.npz", tile_arrays(1))
    (src / "tile/xla/train/bad\nname.NPZ").write_bytes(b"x")
    log = tmp_path / "build.log"
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path / "s"), "-v",
                                       "--log-file", str(log)])
    assert result.exit_code == 0, result.output
    assert "bad\\nname.NPZ" in result.output and "bad\nname" not in result.output
    text = log.read_text(encoding="utf-8")
    assert "bad\\nname.NPZ" in text and "bad\nname" not in text
