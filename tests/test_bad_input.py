"""docs/spec.md §7: every kind of broken file gives one clear line (file, key, problem), a quarantine entry,
exit code 3, and the rest of the batch is converted."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from npzfactory import Tripwire, layout_arrays, tile_arrays, write

from tpuprep.cli import main

L = "layout/xla/random/train"
T = "tile/xla/train"


def _with(arrays, **changes):
    out = dict(arrays)
    for k, v in changes.items():
        if v is None:
            out.pop(k)
        else:
            out[k] = v
    return out


def _layout(**changes):
    return _with(layout_arrays(), **changes)


def _tile(**changes):
    return _with(tile_arrays(), **changes)


def _cfg(value, row=2, node=1, slot=4):
    cfg = layout_arrays()["node_config_feat"].copy()
    cfg[row, node, slot] = value
    return cfg


def _raw(root: Path, rel: str, data: bytes) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(data)


def _zip_member(root: Path, rel: str, members: dict[str, bytes]) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(root / rel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


# (file stem, how to make it, expected key or None, a phrase of the message)
CASES = [
    ("not_a_zip", lambda r, p: _raw(r, p, b"this is not a zip file"), None, "not a readable zip"),
    ("truncated_zip", lambda r, p: _raw(r, p, _bytes_of(layout_arrays())[:700]), None, "zip"),
    ("member_not_npy", lambda r, p: _zip_member(r, p, {"node_feat.txt": b"hello"}), "node_feat.txt", "not a .npy"),
    ("missing_key", lambda r, p: write(r, p, _layout(node_opcode=None)), "node_opcode", "required key is missing"),
    ("float_opcodes", lambda r, p: write(r, p, _layout(node_opcode=np.full(12, 2.0, np.float32))), "node_opcode", "not an integer"),
    ("complex_features", lambda r, p: write(r, p, _layout(node_feat=np.zeros((12, 140), np.complex64))), "node_feat", "not floating point"),
    ("node_feat_not_140", lambda r, p: write(r, p, _layout(node_feat=np.zeros((12, 139), np.float32))), "node_feat", "expected (n, 140)"),
    ("slots_not_18", lambda r, p: write(r, p, _layout(node_config_feat=np.full((9, 3, 17), -1, np.float32))), "node_config_feat", "expected (c, nc, 18)"),
    ("runtime_count_mismatch", lambda r, p: write(r, p, _layout(config_runtime=np.arange(8, dtype=np.int64))), "node_config_feat", "expected (c, nc, 18) = (8, 3, 18)"),
    ("edge_out_of_range", lambda r, p: write(r, p, _layout(edge_index=np.array([[1, 0], [12, 3]], np.int64))), "edge_index", "out of range"),
    ("edge_negative", lambda r, p: write(r, p, _layout(edge_index=np.array([[1, 0], [4, -1]], np.int64))), "edge_index", "out of range"),
    ("config_id_out_of_range", lambda r, p: write(r, p, _layout(node_config_ids=np.array([3, 7, 99]))), "node_config_ids", "out of range"),
    ("config_id_negative", lambda r, p: write(r, p, _layout(node_config_ids=np.array([-3, 7, 10]))), "node_config_ids", "out of range"),
    ("config_ids_unsorted", lambda r, p: write(r, p, _layout(node_config_ids=np.array([7, 3, 10]))), "node_config_ids", "not strictly increasing"),
    ("config_ids_duplicate", lambda r, p: write(r, p, _layout(node_config_ids=np.array([3, 3, 10]))), "node_config_ids", "not strictly increasing"),
    ("nan_feature", lambda r, p: write(r, p, _layout(node_feat=_feat_with(np.nan))), "node_feat", "non-finite"),
    ("inf_feature", lambda r, p: write(r, p, _layout(node_feat=_feat_with(np.inf))), "node_feat", "non-finite"),
    ("negative_runtime", lambda r, p: write(r, p, _layout(config_runtime=-np.arange(9, dtype=np.int64))), "config_runtime", "out of range"),
    ("config_value_6", lambda r, p: write(r, p, _layout(node_config_feat=_cfg(6.0))), "node_config_feat", "config row 2, configurable node 1, slot 4: value 6.0"),
    ("config_value_half", lambda r, p: write(r, p, _layout(node_config_feat=_cfg(0.5))), "node_config_feat", "value 0.5 is not an integer"),
    ("config_value_nan", lambda r, p: write(r, p, _layout(node_config_feat=_cfg(np.nan))), "node_config_feat", "not an integer in -1..5"),
    ("empty_graph", lambda r, p: write(r, p, _layout(node_feat=np.zeros((0, 140), np.float32))), "node_feat", "no nodes"),
    ("zero_configs", lambda r, p: write(r, p, _layout(config_runtime=np.zeros(0, np.int64), node_config_feat=np.zeros((0, 3, 18), np.float32))), "config_runtime", "no configurations"),
    ("object_array", lambda r, p: _zip_member(r, p, {"node_feat.npy": _npy(np.array([{"a": 1}], dtype=object))}), "node_feat", "never unpickled"),
    ("gigantic_header", lambda r, p: _zip_member(r, p, {"node_feat.npy": _header((10**11, 140))}), "node_feat", "header claims shape"),
    ("splits_descending", lambda r, p: write(r, p, _layout(node_splits=np.array([[0, 9, 5, 12]]))), "node_splits", "not in ascending order"),
    ("splits_down_by_one", lambda r, p: write(r, p, _layout(node_splits=np.array([[0, 5, 4, 12]]))), "node_splits", "not in ascending order"),
    ("opcode_count_mismatch", lambda r, p: write(r, p, _layout(node_opcode=np.full(11, 2, np.uint8))), "node_opcode", "shape (11,), expected (12,) to match node_feat"),
    ("no_config_nodes", lambda r, p: write(r, p, _layout(node_config_ids=np.zeros(0, np.int64), node_config_feat=np.zeros((9, 0, 18), np.float32))), "node_config_ids", "expected (nc,) with nc >= 1"),
]
TILE_CASES = [
    ("zero_normalizer", lambda r, p: write(r, p, _tile(config_runtime_normalizers=np.zeros(6, np.int64))), "config_runtime_normalizers", "out of range"),
    ("tile_config_nan", lambda r, p: write(r, p, _tile(config_feat=np.full((6, 24), np.nan, np.float32))), "config_feat", "non-finite"),
]


def _bytes_of(arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _feat_with(value):
    feat = layout_arrays()["node_feat"].copy()
    feat[4, 30] = value
    return feat


def _header(shape) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buf.getvalue() + b"\0" * 128


@pytest.fixture(scope="module")
def broken_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad") / "npz"
    for stem, make, _, _ in CASES:
        make(root, f"{L}/{stem}.npz")
    for stem, make, _, _ in TILE_CASES:
        make(root, f"{T}/{stem}.npz")
    write(root, f"{L}/good_layout.npz", layout_arrays(1))
    write(root, f"{L}/extra_key.npz", {**layout_arrays(2), "mystery": np.arange(3)})
    write(root, f"{T}/good_tile.npz", tile_arrays(1))
    write(root, "layout/xla/random/valid/bad name!.npz", layout_arrays(3))
    outside = tmp_path_factory.mktemp("outside")
    write(outside, "secret.npz", layout_arrays(4))
    os.symlink(outside / "secret.npz", root / L / "link.npz")
    os.symlink(outside, root / L / "escape")
    dst = root.parent / "shards"
    result = CliRunner().invoke(main, ["build", "--src", str(root), "--dst", str(dst), "-q"])
    return root, dst, result


def test_exit_code_3_and_good_files_converted(broken_build):
    _, dst, result = broken_build
    assert result.exit_code == 3, result.output
    manifest = json.loads((dst / "manifest.json").read_text())
    ok = sorted(i["path"] for i in manifest["inputs"] if i["status"] == "ok")
    assert ok == [f"{L}/extra_key.npz", f"{L}/good_layout.npz", f"{T}/good_tile.npz"]
    extra = next(i for i in manifest["inputs"] if i["path"].endswith("extra_key.npz"))
    assert extra["warnings"] == ["unknown key 'mystery' ignored"]


@pytest.mark.parametrize(("stem", "key", "phrase", "folder"),
                         [(s, k, p, L) for s, _, k, p in CASES] + [(s, k, p, T) for s, _, k, p in TILE_CASES])
def test_each_broken_file_gets_one_clear_line(broken_build, stem, key, phrase, folder):
    _, dst, result = broken_build
    entries = [json.loads(line) for line in (dst / "quarantine.jsonl").read_text().splitlines()]
    mine = [e for e in entries if e["file"] == f"{folder}/{stem}.npz"]
    assert len(mine) == 1, entries
    assert mine[0]["key"] == key
    assert phrase in mine[0]["error"]
    lines = [line for line in result.stderr.splitlines() if f"{stem}.npz" in line]
    assert len(lines) == 1 and phrase in lines[0] and (key is None or f"[{key}]" in lines[0])


@pytest.mark.parametrize(("name", "phrase"), [("link.npz", "symbolic link"), ("escape", "symbolic link to a folder"),
                                              ("bad name!.npz", "not a safe graph id")])
def test_links_and_unsafe_names_are_refused(broken_build, name, phrase):
    _, dst, _ = broken_build
    entries = [json.loads(line) for line in (dst / "quarantine.jsonl").read_text().splitlines()]
    assert [e for e in entries if e["file"].endswith(name) and phrase in e["error"]]


def test_graph_id_clash_is_bad_input(tmp_path):
    root = tmp_path / "npz"
    write(root, f"{L}/same.npz", layout_arrays())
    write(root, "layout/xla/random/valid/same.npz", layout_arrays(1))
    result = CliRunner().invoke(main, ["build", "--src", str(root), "--dst", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 3
    assert "clashes with" in result.stderr


def test_members_tpuprep_does_not_read_are_ignored_never_unpickled_and_named(tmp_path):
    """Issue #36 item 10: a valid npz with an extra member of dtype object was quarantined as a whole.
    A member the build does not read — objects, a structured dtype, a header lying about its size —
    is ignored (never unpickled), the file converts exactly (verify says so) and the warnings name each
    member: in the manifest, on stderr and in the log."""
    root, wire = tmp_path / "npz", tmp_path / "unpickled"
    arrays = {**layout_arrays(5), "meta": np.array([Tripwire(wire)], dtype=object),
              "pairs": np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])}
    write(root, f"{L}/extras.npz", arrays)
    with zipfile.ZipFile(root / L / "extras.npz", "a") as zf:  # a header claiming more than it holds
        zf.writestr("liar.npy", _header((10**9, 140))[:-64])
    write(root, f"{T}/tile_extras.npz", {**tile_arrays(3), "notes": np.array([Tripwire(wire)], dtype=object)})
    dst, log = tmp_path / "shards", tmp_path / "build.log"
    result = CliRunner().invoke(main, ["build", "--src", str(root), "--dst", str(dst), "--log-file", str(log)])
    assert result.exit_code == 0, result.output
    inputs = {i["path"]: i for i in json.loads((dst / "manifest.json").read_text())["inputs"]}
    assert [i["status"] for i in inputs.values()] == ["ok", "ok"]
    warned = inputs[f"{L}/extras.npz"]["warnings"]
    assert [w.split(",")[0] for w in warned] == ["unknown key 'meta' ignored", "unknown key 'pairs' ignored",
                                                 "unknown key 'liar' ignored"], warned
    assert "never read (dtype object is not a numeric array (objects are never unpickled))" in warned[0]
    assert "structured dtype" in warned[1] and "header claims shape (1000000000, 140)" in warned[2]
    assert inputs[f"{T}/tile_extras.npz"]["warnings"][0].startswith("unknown key 'notes' ignored, never read")
    for text in (result.stderr, log.read_text()):
        assert f"warning: {L}/extras.npz: unknown key 'meta' ignored, never read" in text
        assert f"warning: {T}/tile_extras.npz: unknown key 'notes' ignored" in text
    verified = CliRunner().invoke(main, ["verify", "--src", str(root), "--dst", str(dst), "-q"])
    assert verified.exit_code == 0 and "all exact" in verified.output, verified.output
    assert not wire.exists()


def test_a_required_member_whose_header_cannot_be_used_is_still_refused(tmp_path):
    root = tmp_path / "npz"
    wire = tmp_path / "unpickled"
    write(root, f"{L}/obj.npz", {**layout_arrays(1), "node_splits": np.array([Tripwire(wire)], dtype=object)})
    result = CliRunner().invoke(main, ["build", "--src", str(root), "--dst", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 3
    entry = json.loads((tmp_path / "out" / "quarantine.jsonl").read_text())
    assert entry["key"] == "node_splits" and "never unpickled" in entry["error"]
    assert not wire.exists()


def test_a_fortran_ordered_node_config_feat_converts_like_its_c_order_twin(tmp_path, monkeypatch):
    """Issue #36 item 9: a valid npz whose (c, nc, 18) node_config_feat is Fortran-ordered was quarantined
    ("cannot be streamed by rows"). It is streamed in passes of a bounded window (here shrunk so that it
    takes several), converts to exactly the graph its C-order twin gives, says so in a warning, and
    verify (its own reader) finds it exact."""
    from tpuprep.io import npz

    arrays = layout_arrays(7, n=30, c=40)
    twin, fortran = tmp_path / "c" / "npz", tmp_path / "f" / "npz"
    write(twin, f"{L}/g.npz", arrays)
    write(fortran, f"{L}/g.npz", {**arrays, "node_config_feat": np.asfortranarray(arrays["node_config_feat"])})
    assert np.load(fortran / L / "g.npz")["node_config_feat"].flags.f_contiguous
    monkeypatch.setattr(npz, "FORTRAN_WINDOW_BYTES", 3 * 3 * 18 * 4)  # 3 configs per pass: 14 passes
    for src in (twin, fortran):
        result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(src.parent / "shards"), "-q"])
        assert result.exit_code == 0, result.output
        verified = CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(src.parent / "shards"), "-q"])
        assert verified.exit_code == 0 and "all exact" in verified.output, verified.output
    [entry] = json.loads((fortran.parent / "shards" / "manifest.json").read_text())["inputs"]
    assert entry["warnings"] == ["node_config_feat is in Fortran order: streamed in 14 passes over the member "
                                 "(saved in C order, np.ascontiguousarray, it takes one)"]
    import tpuprep

    a, b = (tpuprep.open_dataset(p.parent / "shards") for p in (twin, fortran))
    ga, gb = (d.load_graph("layout:xla:random:g") for d in (a, b))
    assert np.array_equal(ga.config_codes, gb.config_codes) and np.array_equal(ga.config_inverse, gb.config_inverse)
    assert np.array_equal(gb.node_config_feat()[gb.config_inverse],
                          arrays["node_config_feat"].astype(np.int8))


@pytest.mark.parametrize(("window_configs", "warned"), [(40, False), (39, True), (20, True)])
def test_the_fortran_warning_counts_passes_from_two(tmp_path, monkeypatch, window_configs, warned):
    """One pass (the window holds every config) is no different from C order: no warning; two or more
    passes are named."""
    from tpuprep.inputs import discover
    from tpuprep.io import npz
    from tpuprep.readgraph import read_graph

    arrays = layout_arrays(2, c=40)
    write(tmp_path / "npz", f"{L}/g.npz", {**arrays, "node_config_feat": np.asfortranarray(arrays["node_config_feat"])})
    monkeypatch.setattr(npz, "FORTRAN_WINDOW_BYTES", window_configs * 3 * 18 * 4)
    [inp], _ = discover(tmp_path / "npz")
    with npz.NpzFile(inp.path) as f:
        warnings = read_graph(f, inp).warnings
    passes = -(-40 // window_configs)
    assert warnings == ([f"node_config_feat is in Fortran order: streamed in {passes} passes over the member "
                         "(saved in C order, np.ascontiguousarray, it takes one)"] if warned else [])
