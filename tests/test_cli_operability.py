"""Operability of the command line (#12): progress lines in non-terminal logs, ``verify --workers``,
``--json`` documents, ``--log-file`` and the converted/reused/quarantined summary of a resume."""

from __future__ import annotations

import errno
import io
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpuprep.cli import common as cli_common
from tpuprep.cli import main

PROGRESS = re.compile(r"(converting|verifying): (\d+)/(\d+) files.*input \(\d+%\), .*/s, elapsed "
                      r"\d+:\d\d:\d\d, ETA (\d+:\d\d:\d\d|\?)")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d ")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


@pytest.fixture
def src(tmp_path, synth_root) -> Path:
    """A private copy of the tiny synthetic tree (23 files)."""
    root = tmp_path / "src"
    shutil.copytree(synth_root / "npz", root)
    return root


def _slow_batches(monkeypatch, seconds: float) -> None:
    """Every build task sleeps first, so that a tiny build lasts long enough to report progress."""
    from tpuprep import build as build_module

    real = build_module.process_batch

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(build_module, "process_batch", slow)


def _progress(stderr: str) -> list[tuple[int, int]]:
    return [(int(m.group(2)), int(m.group(3))) for m in PROGRESS.finditer(stderr)]


# --------------------------------------------------------------------------- progress without a terminal


def test_a_build_logged_to_a_file_reports_progress_lines(monkeypatch, src, tmp_path):
    monkeypatch.setattr(cli_common, "PROGRESS_INTERVAL", 0.05)
    _slow_batches(monkeypatch, 0.03)
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    seen = _progress(result.stderr)
    total = len(list(src.rglob("*.npz")))
    assert seen[-1] == (total, total), result.stderr
    assert any(0 < done < total for done, _ in seen), result.stderr  # lines while it ran, not just the end
    assert all(t == total for _, t in seen)


def test_a_terminal_keeps_the_bar_and_gets_no_lines(monkeypatch, src, tmp_path):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    fake = Terminal()
    monkeypatch.setattr("sys.stderr", fake)
    progress = cli_common.Progress(quiet=False, verbose=False)
    from tpuprep.inputs import discover

    inputs, _ = discover(src)
    progress("discovered", {"inputs": inputs, "refused": []})
    for inp in inputs:
        progress("file", {"path": inp.relpath, "bytes": inp.size, "status": "ok"})
    progress.close()
    assert progress.bar is None and progress.ticker is None
    assert "converting" in fake.getvalue() and not _progress(fake.getvalue())


def test_progress_line_counts_reused_files_apart():
    progress = cli_common.Progress(quiet=True, verbose=False)
    progress.total, progress.bytes_total = 4, 4000
    progress("file", {"path": "a", "bytes": 1000, "status": "ok", "reused": True})
    progress("file", {"path": "b", "bytes": 1000, "status": "ok"})
    line = progress.line()
    assert line.startswith("converting: 2/4 files (1 reused), 2.0 KB of 3.9 KB input (50%)"), line


# --------------------------------------------------------------------------- verify: progress and workers


def _tampered_shards(tmp_path: Path, src: Path) -> Path:
    """Shards built without re-padding whose manifest then claims re-padding: many graphs fail."""
    from tpuprep.build import build
    from tpuprep.options import BuildOptions

    dst = tmp_path / "shards"
    build(src, dst, BuildOptions(repad=False))
    m = json.loads((dst / "manifest.json").read_text())
    m["options"] |= {"repad": True, "repad_rule": BuildOptions().repad_rule}
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def test_verify_with_workers_reports_exactly_what_a_serial_run_does(src, tmp_path):
    from tpuprep.verify import verify

    dst = _tampered_shards(tmp_path, src)
    victim = sorted(src.rglob("*.npz"))[3]
    victim.write_bytes(victim.read_bytes() + b"\0")  # one input changed since the build
    serial = verify(src, dst)
    events: list[tuple[str, dict]] = []
    parallel = verify(src, dst, workers=2, progress=lambda e, i: events.append((e, i)))
    assert len(serial.problems) > 3 and any("sha256 differs" in p for p in serial.problems)
    assert (parallel.problems, parallel.graphs_checked, parallel.shards_checked) == (
        serial.problems, serial.graphs_checked, serial.shards_checked)
    assert events[0][0] == "discovered" and len(events) == 1 + len(events[0][1]["inputs"])


def test_verify_cli_reports_progress_and_takes_workers(monkeypatch, src, tmp_path, synth_shards):
    monkeypatch.setattr(cli_common, "PROGRESS_INTERVAL", 0.05)
    result = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(synth_shards),
                                       "--workers", "2"])
    assert result.exit_code == 0, result.output
    total = len(list(src.rglob("*.npz")))
    assert _progress(result.stderr)[-1] == (total, total), result.stderr
    assert result.stdout.strip().endswith("all exact")


# --------------------------------------------------------------------------- --json


def _one_document(stdout: str) -> dict:
    doc, end = json.JSONDecoder().raw_decode(stdout.strip())
    assert end == len(stdout.strip()), f"more than one JSON document on stdout: {stdout!r}"
    return doc


def test_build_json_is_one_document_with_the_documented_keys(src, tmp_path):
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    doc = _one_document(result.stdout)
    total = len(list(src.rglob("*.npz")))
    assert doc["status"] == "ok" and doc["exit_code"] == 0 and doc["converted"] == total
    assert doc["reused"] == 0 and doc["quarantined"] == [] and doc["seconds"] > 0
    assert doc["dst"] == str(tmp_path / "out") and "tile:xla" in doc["collections"]
    _documented("build", doc)


def test_build_json_lists_quarantined_files_with_exit_3(src, tmp_path):
    bad = sorted(src.rglob("*.npz"))[0]
    bad.write_bytes(b"not a zip")
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 3
    doc = _one_document(result.stdout)
    assert doc["status"] == "quarantined" and doc["exit_code"] == 3
    assert [q["file"] for q in doc["quarantined"]] == [bad.relative_to(src).as_posix()]


def test_an_error_under_json_is_one_error_document(src, tmp_path):
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(src / "inside"), "--json"])
    assert result.exit_code == 2
    doc = _one_document(result.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 2 and "overlap" in doc["error"]
    assert result.stderr.count("error: ") == 1
    missing = CliRunner().invoke(main, ["info", str(tmp_path), "--json"])
    assert missing.exit_code == 1 and _one_document(missing.stdout)["status"] == "error"
    _documented("error", doc)


def test_verify_and_info_json(src, synth_shards):
    result = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(synth_shards), "--json"])
    assert result.exit_code == 0, result.output
    doc = _one_document(result.stdout)
    assert doc["ok"] is True and doc["problems"] == [] and doc["graphs_checked"] == 23
    assert doc["shards_checked"] > 0
    _documented("verify", doc)
    info = CliRunner().invoke(main, ["info", str(synth_shards), "--json"])
    doc = _one_document(info.stdout)
    assert "inputs" not in doc and {"collections", "shards", "options"} <= set(doc)


class _FailingClose(io.TextIOWrapper):
    """A log file whose close fails with EIO, as a network file system may report a lost write."""

    def close(self):
        super().close()
        raise OSError(errno.EIO, "Input/output error")


@pytest.mark.parametrize("command", ["build", "verify"])
def test_json_never_says_ok_when_the_log_file_fails_to_close(monkeypatch, command, src, synth_shards, tmp_path):
    real_init = cli_common.LogFile.__init__

    def init(self, path):
        real_init(self, path)
        self.fh = _FailingClose(self.fh.detach(), encoding="utf-8", line_buffering=True)

    monkeypatch.setattr(cli_common.LogFile, "__init__", init)
    log = tmp_path / "run.log"
    dst = str(tmp_path / "out") if command == "build" else str(synth_shards)
    result = CliRunner().invoke(main, [command, "--src", str(src), "--dst", dst, "--json", "--log-file", str(log)])
    assert result.exit_code == 1, result.output
    doc = _one_document(result.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 1
    assert str(log) in doc["error"] and "EIO" in doc["error"]
    assert result.stderr.count("error: ") == 1, result.stderr
    assert "tpuprep " + command in log.read_text()


def _documented(section: str, doc: dict) -> None:
    """Every top-level key of a --json document is described in docs/cli.md's section for it."""
    text = DOCS.read_text()
    part = text.split(f"<!-- json:{section} -->", 1)[1].split("<!-- /json -->", 1)[0]
    missing = [k for k in doc if f"`{k}`" not in part]
    assert not missing, f"docs/cli.md does not document {missing} of the {section} document"


# --------------------------------------------------------------------------- resume: converted vs reused


def _interrupted_build(monkeypatch, src: Path, dst: Path) -> None:
    """A build that stops with ENOSPC after every file was converted (staged parts are kept)."""
    from tpuprep import build as build_module

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst / "x.parquet"))

    with monkeypatch.context() as m:
        m.setattr(build_module, "merge_task", full)
        result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "-q"])
    assert result.exit_code == 1, result.output


def test_resume_summary_tells_converted_from_reused(monkeypatch, src, tmp_path):
    dst = tmp_path / "out"
    _interrupted_build(monkeypatch, src, dst)
    sidecars = sorted((dst / ".tpuprep" / "parts" / "layout").rglob("*.json"))
    sidecars[0].unlink()  # that one layout file is converted again, the rest reused
    total = len(list(src.rglob("*.npz")))
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "--resume"])
    assert result.exit_code == 0, result.output
    assert f"1 converted, {total - 1} reused, 0 quarantined in " in result.stdout


def test_resume_json_and_report_name_the_reused_files(monkeypatch, src, tmp_path):
    from tpuprep.build import build

    dst = tmp_path / "out"
    _interrupted_build(monkeypatch, src, dst)
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "--resume", "--json"])
    doc = _one_document(result.stdout)
    total = len(list(src.rglob("*.npz")))
    assert (doc["converted"], doc["reused"]) == (0, total)
    report = build(src, tmp_path / "fresh")
    assert report.reused == frozenset() and len(report.converted) == total


def test_resume_converts_again_the_parts_an_older_schema_wrote(monkeypatch, src, tmp_path):
    """Parts staged by a tpuprep of another schema (2.x stored plain int32 codes, and its fingerprints
    had no schema_version) are never reused: the resumed shards equal a fresh build's."""
    from tpuprep.build import build

    dst = tmp_path / "out"
    _interrupted_build(monkeypatch, src, dst)
    sidecars = sorted((dst / ".tpuprep" / "parts").rglob("*.json"))
    for i, sidecar in enumerate(sidecars):
        done = json.loads(sidecar.read_text())
        if i % 2:
            done["fingerprint"]["schema_version"] = "2.1"
        else:
            del done["fingerprint"]["schema_version"]
        sidecar.write_text(json.dumps(done))
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "--resume", "--json"])
    doc = _one_document(result.stdout)
    assert (doc["converted"], doc["reused"]) == (len(list(src.rglob("*.npz"))), 0)
    build(src, tmp_path / "fresh")
    assert {p.relative_to(dst).as_posix(): p.read_bytes() for p in dst.rglob("*.parquet")} == \
        {p.relative_to(tmp_path / "fresh").as_posix(): p.read_bytes() for p in (tmp_path / "fresh").rglob("*.parquet")}


# --------------------------------------------------------------------------- --log-file


def test_log_file_gets_timestamped_progress_summary_and_errors(monkeypatch, src, tmp_path):
    monkeypatch.setattr(cli_common, "PROGRESS_INTERVAL", 0.05)
    log = tmp_path / "build.log"
    dst = tmp_path / "out"
    ok = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "-q", "--log-file", str(log)])
    assert ok.exit_code == 0, ok.output
    assert "converting:" not in ok.stderr  # -q: nothing on stderr, the log still gets everything
    lines = log.read_text().splitlines()
    assert all(STAMP.match(x) for x in lines), lines
    total = len(list(src.rglob("*.npz")))
    assert _progress("\n".join(lines))[-1] == (total, total)
    assert re.search(rf"{total} converted, 0 reused, 0 quarantined in [\d.]+ s -> ", lines[-1])
    again = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "--log-file", str(log)])
    assert again.exit_code == 2
    last = log.read_text().splitlines()[-1]
    assert STAMP.match(last) and "error: --dst" in last and "is not empty" in last
    assert len(log.read_text().splitlines()) == len(lines) + 2  # appended: the command line and the error


def test_verify_and_run_take_a_log_file(tmp_path, src, synth_shards):
    log = tmp_path / "verify.log"
    result = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(synth_shards), "-q",
                                       "--log-file", str(log)])
    assert result.exit_code == 0
    assert log.read_text().splitlines()[-1].endswith("shards checked: all exact")
    assert "--log-file" in CliRunner().invoke(main, ["run", "--help"]).output
