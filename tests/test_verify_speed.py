"""Issue #30 item 1: ``verify`` at the speed of the build.

- every input member is inflated once (the zip check's sizes and CRC-32 on the same bytes as the
  content checks), and a member whose CRC-32 the build's reader was fooled about is still reported;
- ``verify --sample FRACTION --seed N`` checks a seeded subset of the graphs, says so in the report and
  the ``--json`` document, and still checks every shard;
- ``benchmarks/verify_speed.py`` runs end to end on a tiny corpus.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write

import tpuprep.io.inflate as inflate
import tpuprep.io.npz as npz
from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.verify import sample_inputs, sample_size, verify

REPO = Path(__file__).resolve().parent.parent


def _tree(root: Path) -> Path:
    for i in range(3):
        write(root, f"layout/xla/random/train/g{i}.npz", layout_arrays(i, n=40, c=30))
        write(root, f"tile/xla/train/t{i}.npz", tile_arrays(i, n=20, c=10))
    write(root, "layout/xla/random/valid/v0.npz", layout_arrays(7, n=30, c=20))
    write(root, "tile/xla/test/x0.npz", tile_arrays(9))
    return root


@pytest.fixture
def built(tmp_path) -> tuple[Path, Path]:
    src = _tree(tmp_path / "npz")
    dst = tmp_path / "shards"
    build(src, dst)
    return src, dst


def _inflated_bytes(src: Path) -> int:
    """Every member's inflated size, as the zip directories declare."""
    total = 0
    for path in src.rglob("*.npz"):
        with zipfile.ZipFile(path) as zf:
            total += sum(i.file_size for i in zf.infolist())
    return total


def _members(src: Path) -> int:
    return sum(len(zipfile.ZipFile(p).infolist()) for p in src.rglob("*.npz"))


def test_verify_inflates_every_member_once(built, monkeypatch):
    """Counted at every DEFLATE decompressor verify can use: the build reader's and the zip check's.
    Before, the zip check inflated every member a second time with zlib (2x the bytes)."""
    src, dst = built
    produced = [0]
    real = inflate.raw_inflater

    class Counting:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def decompress(self, data, limit):
            out = self._inner.decompress(data, limit)
            produced[0] += len(out)
            return out

    monkeypatch.setattr(inflate, "raw_inflater", lambda *a: Counting(real(*a)))
    import tpuprep.inputcheck as inputcheck

    if hasattr(inputcheck, "zlib"):  # the old zip check's own zlib inflater
        zlib_real = inputcheck.zlib.decompressobj

        class Zlib:
            error = inputcheck.zlib.error
            crc32 = staticmethod(inputcheck.zlib.crc32)

            @staticmethod
            def decompressobj(*a):
                return Counting(zlib_real(*a))

        monkeypatch.setattr(inputcheck, "zlib", Zlib)
    report = verify(src, dst)
    assert report.ok, report.problems
    assert report.graphs_checked == 8
    declared = _inflated_bytes(src)
    # each member once, plus the few .npy header bytes the build's reader inflates to open the file
    assert declared <= produced[0] <= declared + 128 * _members(src), (produced[0], declared)


def _stored_with_a_flipped_byte(path: Path) -> None:
    """Rewrite ``path`` with STORED members, then flip one byte inside node_feat's array data (only
    the CRC-32 can tell)."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = bytearray(buf.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo("node_feat.npy")
    at = info.header_offset
    start = at + 30 + int.from_bytes(data[at + 26 : at + 28], "little") + int.from_bytes(data[at + 28 : at + 30], "little")
    data[start + info.file_size - 3] ^= 0x01  # the last float's low byte: the array still reads
    path.write_bytes(bytes(data))


def test_a_member_whose_crc_the_builds_reader_missed_is_reported(tmp_path, monkeypatch):
    """The build's reader is made to skip its CRC-32 check; verify's own check, on the bytes it
    inflates once for its content checks, still reports the member."""
    src = _tree(tmp_path / "npz")
    bad = src / "tile/xla/train/t1.npz"
    _stored_with_a_flipped_byte(bad)
    real_finish = npz._MemberStream.finish

    def no_crc(self):
        self._crc_expected = self._crc & 0xFFFFFFFF
        real_finish(self)

    monkeypatch.setattr(npz._MemberStream, "finish", no_crc)
    dst = tmp_path / "shards"
    build(src, dst)
    report = verify(src, dst)
    assert report.graphs_checked == 8
    crc = [p for p in report.problems if "CRC-32" in p]
    assert crc and all(p.startswith("tile/xla/train/t1.npz: node_feat.npy: CRC-32 ") for p in crc), report.problems
    assert "differs from the zip directory's" in crc[0]


def test_sample_inputs_is_a_seeded_subset_in_order():
    todo = list(range(100))
    a, b = sample_inputs(todo, 0.1, 3), sample_inputs(todo, 0.1, 3)
    assert a == b and len(a) == 10 and a == sorted(a) and set(a) <= set(todo)
    assert sample_inputs(todo, 0.1, 4) != a
    assert sample_inputs(todo, 1.0, 0) == todo
    assert len(sample_inputs(todo, 0.001, 0)) == 1
    assert len(sample_inputs(list(range(7)), 0.3, 0)) == math.ceil(0.3 * 7)


@pytest.mark.parametrize(("fraction", "n", "k"), [(1e-300, 23, 1), (5e-324, 1, 1), (1e-9, 10**6, 1),
                                                   (0.05, 540, 27), (0.1, 30, 3), (0.3, 7, 3),
                                                   (0.5, 1, 1), (1.0, 8, 8), (0.7, 0, 0)])
def test_a_sample_is_the_ceiling_of_the_fraction_as_written_and_never_empty(fraction, n, k):
    """docs/cli.md: ⌈F × n⌉ of them, so ≥ 1 of n ≥ 1 however small F (1e-300 checked none and printed
    "all exact"); exact on the decimal F is written as (0.05 × 540 is 27, not 28)."""
    assert sample_size(fraction, n) == k
    assert len(sample_inputs(list(range(n)), fraction, 0)) == k


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5, math.nan])
def test_a_fraction_outside_zero_to_one_is_refused(fraction):
    with pytest.raises(ValueError, match="fraction in"):
        sample_size(fraction, 10)


def test_verify_sample_checks_a_subset_and_says_so(built):
    src, dst = built
    result = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst), "--sample", "0.5",
                                       "--seed", "2", "--json", "-q"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] and doc["graphs_total"] == 8 and doc["graphs_checked"] == 4
    assert doc["sample"] == {"fraction": 0.5, "seed": 2}
    assert doc["shards_checked"] == len(json.loads((dst / "manifest.json").read_text())["shards"])
    text = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst), "--sample", "0.5",
                                     "--seed", "2", "-q"])
    assert "4 graphs (a --sample 0.5 of 8 graphs, --seed 2) and " in text.output
    full = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst), "--json", "-q"])
    doc = json.loads(full.stdout)
    assert doc["graphs_checked"] == doc["graphs_total"] == 8 and doc["sample"] is None
    refused = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst), "--sample", "0"])
    assert refused.exit_code == 2


def test_a_tiny_sample_checks_one_graph_never_none(built):
    src, dst = built
    result = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst), "--sample", "1e-300",
                                       "--json", "-q"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["graphs_checked"] == 1 and doc["graphs_total"] == 8, doc


def test_a_negative_seed_is_a_usage_error_not_a_traceback(built):
    src, dst = built
    result = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst), "--sample", "0.5",
                                       "--seed", "-1"])
    assert result.exit_code == 2, result.output
    assert "--seed" in result.output and "Traceback" not in result.output
    with pytest.raises(ValueError, match="seed must be an integer"):
        verify(src, dst, sample=0.5, seed=-1)


def test_a_sampled_verify_checks_only_its_graphs_but_every_shard(built):
    """A changed input outside the sample goes unseen (the sample proves only what it checks); one in
    it is found; a changed shard is found whatever the sample."""
    src, dst = built
    report = verify(src, dst, sample=0.25, seed=5)
    assert report.ok and report.graphs_checked == 2 and report.graphs_total == 8
    from tpuprep.inputs import discover

    inputs, _ = discover(src)  # every input converted: the sampled list is discover's
    picked = [i.relpath for i in sample_inputs(inputs, 0.25, 5)]
    unpicked = sorted({i.relpath for i in inputs} - set(picked))
    assert len(picked) == 2
    for rel in (unpicked[0], picked[0]):
        data = (src / rel).read_bytes()
        (src / rel).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    report = verify(src, dst, sample=0.25, seed=5)
    assert [p for p in report.problems if "input changed since the build" in p] == [
        f"{picked[0]}: input changed since the build (sha256 differs)"], report.problems
    shard = json.loads((dst / "manifest.json").read_text())["shards"][0]["path"]
    with open(dst / shard, "ab") as fh:
        fh.write(b"x")
    report = verify(src, dst, sample=0.01, seed=0)
    assert any(p.startswith(f"{shard}: shard bytes changed") for p in report.problems), report.problems


def test_verify_speed_benchmark_runs_on_a_tiny_corpus(synth_root, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out = tmp_path / "v.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.verify_speed", str(synth_root / "npz"),
                           str(tmp_path / "shards"), "--workers", "1", "--sample", "0.5", "--floor", "--json", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["build_s"] > 0 and res["verify_s"] > 0 and res["files"] == 23
    assert res["ratio"] == pytest.approx(res["verify_s"] / res["build_s"]) and res["cpu_ratio"] > 0
    assert "verify/build = " in proc.stdout and res["sample"]["verify_s"] > 0
    run = res["runs"][0]  # the floor: every input inflated, every shard decoded, no check
    assert run["floor_s"] > 0 and run["floor_cpu_s"] > 0 and "x the build, CPU" in proc.stdout
    again = subprocess.run([sys.executable, "-m", "benchmarks.verify_speed", str(synth_root / "npz"),
                            str(tmp_path / "shards")], cwd=REPO, env=env, capture_output=True, text=True)
    assert again.returncode == 2 and "exists: give a new folder" in again.stderr


def test_a_repeated_config_row_pointed_at_another_unique_config_is_found(synth_shards, synth_root, tmp_path):
    """The one-pass layout check compares first occurrences directly and repeats by digest: a repeat
    re-pointed (in ``config_inverse``) at another, earlier unique config keeps the first-occurrence
    order, so only the digest comparison of that repeat can see it."""
    import shutil

    from test_hostile_read import GRAPH, first_graph, tamper_cell

    import tpuprep

    shards = Path(shutil.copytree(synth_shards, tmp_path / "shards"))
    gid = first_graph(shards, GRAPH, "train")
    inv = np.asarray(tpuprep.open_dataset(shards).load_graph(gid, configs=False).config_inverse, np.int64)
    first = {int(u): int(np.flatnonzero(inv == u)[0]) for u in np.unique(inv)}
    row = next(i for i in range(len(inv)) if first[int(inv[i])] < i and inv[i] != 0)  # a repeat
    assert first[0] == 0 < row

    def repoint(cell):
        cell = list(cell)
        cell[row] = 0
        return cell

    tamper_cell(shards, gid, "graphs", "config_inverse", repoint)
    problems = verify(synth_root / "npz", shards, collections=[GRAPH]).problems
    assert f"{gid}: original config row {row} is not reconstructed" in problems, problems


def test_config_rows_are_valid_only_with_integer_codes_in_minus_1_to_5():
    from tpuprep.verify.reference import LayoutEncoder, tie_columns

    rows = np.zeros((9, 2, 18), np.float32)
    rows[0, 0, 0], rows[1, 1, 17] = -1, 5  # valid
    for i, bad in enumerate([6, -2, 2.5, np.nan, 127, -128, 255], start=2):
        rows[i, 0, 3] = bad
    got, _ = LayoutEncoder(tie_columns(np.arange(2))).encode(rows)
    assert got.tolist() == [True, True] + [False] * 7


# ------------------------------------------------------------------------- verify/run.py beside the code


def _todo(*sizes: int, kind: str = "tile") -> list:
    from types import SimpleNamespace

    return [(SimpleNamespace(kind=kind, collection="tile:xla", split="train", graph_id=f"tile:xla:g{i:03d}", size=s),
             {}) for i, s in enumerate(sizes)]


def test_tile_inputs_are_batched_up_to_64_files_and_32_mib_each_layout_alone():
    from tpuprep.verify.run import BATCH_BYTES, BATCH_FILES, plan_batches

    assert BATCH_FILES == 64
    assert sorted(len(b) for b in plan_batches(_todo(*[10] * 64))) == [64]
    assert sorted(len(b) for b in plan_batches(_todo(*[10] * 65))) == [1, 64]
    half = BATCH_BYTES // 2
    assert sorted(len(b) for b in plan_batches(_todo(half, half, 1))) == [1, 2]  # 32 MiB exactly fits
    assert sorted(len(b) for b in plan_batches(_todo(half, half + 1))) == [1, 1]
    assert plan_batches(_todo(5, 7, kind="layout")) == [[1], [0]]  # largest first, one each


def test_quarantined_inputs_are_not_checked_and_may_leave_src(tmp_path):
    """Only converted inputs are checked against graphs (a quarantined one has none) and listed as
    expected under --src; the quarantine list itself is the shard-side check's."""
    src = _tree(tmp_path / "npz")
    (src / "tile/xla/train/broken.npz").write_bytes(b"not a zip")
    dst = tmp_path / "shards"
    assert build(src, dst).quarantined
    report = verify(src, dst)
    assert report.ok and report.graphs_total == report.graphs_checked == 8, report.problems
    (src / "tile/xla/train/broken.npz").unlink()
    report = verify(src, dst)
    assert report.ok, report.problems


@pytest.mark.parametrize("splits", [None, ["train"], ["train", "valid"], ["valid"]])
def test_the_train_statistics_are_checked_whenever_train_is_selected(built, splits):
    src, dst = built
    manifest = json.loads((dst / "manifest.json").read_text())
    coll = next(c for c in manifest["collections"].values() if c["node_feat_stats"] is not None)
    coll["node_feat_stats"]["mean"][0] += 1.0
    (dst / "manifest.json").write_text(json.dumps(manifest))
    problems = verify(src, dst, splits=splits).problems
    found = [p for p in problems if "node_feat_stats.mean[0]" in p]
    assert bool(found) == (splits is None or "train" in splits), problems


def test_verify_exits_1_with_a_mismatch_line_per_problem(built):
    src, dst = built
    data = (src / "tile/xla/train/t0.npz").read_bytes()
    (src / "tile/xla/train/t0.npz").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    result = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst), "-q"])
    assert result.exit_code == 1, result.output
    assert "MISMATCH tile/xla/train/t0.npz: input changed since the build (sha256 differs)" in result.output
    assert result.output.strip().splitlines()[-1].endswith("shards checked: 1 problems")
