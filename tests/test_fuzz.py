"""Fuzzing the reader (issue 6): malformed arrays and byte-level corruptions of real files must end in
a converted graph or one clean ``BadInput`` — never another exception, never a hang. A converted graph
must be RIGHT, not just produced: every successful conversion is compared with the slow references of
tests/reference.py (prune, re-pad, dedup, base-7) run on the arrays NumPy reads from the same bytes.

Examples are derandomized by the ``ci`` hypothesis profile (tests/conftest.py), so every run checks the
same inputs; ``TPUPREP_FUZZ_EXAMPLES=5000`` (optionally with ``TPUPREP_HYPOTHESIS_PROFILE=campaign``
for fresh random inputs) runs a longer campaign."""

from __future__ import annotations

import io
import os
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npzfactory import layout_arrays, tile_arrays
from realdata import REAL
from reference import ref_dedup, ref_encode_base7, ref_prune, ref_remap_node_splits, ref_repad

from tpuprep.convert import ConvertedGraph, convert_file
from tpuprep.errors import BadInput
from tpuprep.inputs import InputFile
from tpuprep.options import BuildOptions

# bounded in CI; TPUPREP_FUZZ_EXAMPLES=5000 for a longer campaign
FUZZ = settings(max_examples=int(os.environ.get("TPUPREP_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.float16, np.float32, np.float64, np.complex64, np.bool_]


OPTIONS = BuildOptions(chunk_bytes=4096)  # several config chunks per file: the streaming path


def _convert(data: bytes, kind: str, opts: BuildOptions = OPTIONS) -> ConvertedGraph | None:
    """Convert ``data`` as a train file of ``kind``; a success must equal the reference pipeline."""
    with tempfile.TemporaryDirectory() as tmp:
        rel = "layout/xla/random/train/x.npz" if kind == "layout" else "tile/xla/train/x.npz"
        path = Path(tmp) / rel
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        coll = "layout:xla:random" if kind == "layout" else "tile:xla"
        inp = InputFile(f"{coll}:x", rel, path, kind, coll, "train", "x", len(data))
        try:
            g = convert_file(inp, opts, "0" * 64)
        except BadInput as exc:
            assert exc.path and str(exc).startswith(str(path))
            return None
    check_against_reference(g, data, kind, opts.hops)
    return g


def _numpy_arrays(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an npz read independently of tpuprep: Python's zipfile finds the members through
    the central directory (bytes in front of the archive allowed, as zip readers do); each member is
    inflated with zlib, its size and CRC-32 checked, and parsed by ``np.lib.format.read_array``. The
    local header's copy of the name is not compared (tpuprep does not use it either: the data are
    CRC-checked)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
        out = {}
        for info in infos:
            head = data[info.header_offset : info.header_offset + 30]
            assert head[:4] == b"PK\x03\x04", "no local header"
            start = info.header_offset + 30 + int.from_bytes(head[26:28], "little") \
                + int.from_bytes(head[28:30], "little")
            raw = data[start : start + info.compress_size]
            if info.compress_type == zipfile.ZIP_DEFLATED:
                raw = zlib.decompressobj(-15).decompress(raw)
            else:
                assert info.compress_type == zipfile.ZIP_STORED, info.compress_type
            assert len(raw) == info.file_size and zlib.crc32(raw) == info.CRC, "size or CRC"
            arr = np.lib.format.read_array(io.BytesIO(raw), allow_pickle=False)
            out[info.filename.removesuffix(".npy")] = arr
        return out
    except Exception as exc:  # tpuprep accepted bytes no other reader can read: a reader bug
        raise AssertionError(f"converted, but the file cannot be read without tpuprep: {exc!r}") from exc


def check_against_reference(g: ConvertedGraph, data: bytes, kind: str, hops: int = 1) -> None:
    """Assert that ``g`` is what docs/spec.md §2 makes of the arrays in ``data`` (train split, all steps on),
    computed by the slow references only."""
    a = _numpy_arrays(data)
    eq = np.testing.assert_array_equal
    feat = a["node_feat"].astype(np.float32)
    opcode = a["node_opcode"]
    n = feat.shape[0]
    edges = a["edge_index"].astype(np.int64).reshape(-1, 2)
    runtime = a["config_runtime"].astype(np.int64)
    assert (g.num_nodes_original, g.num_edges_original) == (n, len(edges))
    if kind == "layout":
        ids = a["node_config_ids"].astype(np.int64)
        ref = ref_prune(edges, n, ids, hops)
        node_index, kept_edges = ref.node_index, ref.edge_index
        eq(g.node_config_ids, ref.node_config_ids)
        eq(g.node_splits, ref_remap_node_splits(a["node_splits"].reshape(-1), node_index))
        configs = a["node_config_feat"]
        dd = ref_dedup(configs, runtime)
        eq(g.config_codes, ref_encode_base7(configs[dd.first_index]))
    else:
        node_index, kept_edges = np.arange(n, dtype=np.int32), edges
        dd = ref_dedup(a["config_feat"].astype(np.float32), runtime,
                       a["config_runtime_normalizers"].astype(np.int64))
        eq(g.config_feat, dd.unique_rows)
        eq(g.config_runtime_normalizers, dd.normalizer)
        eq(g.config_runtime_normalizers_original, a["config_runtime_normalizers"])
    eq(g.node_index, node_index)
    eq(g.edge_index.reshape(-1, 2), kept_edges)
    feat_ref, anomalous, undecided = ref_repad(feat, opcode, edges, node_index)
    eq(g.node_feat, feat_ref)
    eq(g.node_opcode, opcode[node_index])
    assert g.num_repad_anomalies == int(anomalous.sum())
    assert g.dimensions_undecided == int(undecided.sum())
    eq(g.config_inverse, dd.inverse)
    eq(g.group_size, dd.group_size)
    eq(g.first_index, dd.first_index)
    eq(g.config_runtime, dd.runtime)
    eq(g.config_runtime_original, runtime)
    dtypes = {"node_index": np.int32, "edge_index": np.int32, "node_feat": np.float32,
              "node_opcode": np.uint8, "config_inverse": np.int32, "group_size": np.int32,
              "first_index": np.int32, "config_runtime": np.int64, "config_runtime_original": np.int64}
    dtypes |= ({"node_config_ids": np.int32, "node_splits": np.int32, "config_codes": np.int32}
               if kind == "layout" else
               {"config_feat": np.float32, "config_runtime_normalizers": np.int64,
                "config_runtime_normalizers_original": np.int64})
    for name, dtype in dtypes.items():
        assert getattr(g, name).dtype == dtype, (name, getattr(g, name).dtype)


def _savez(arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


@st.composite
def malformed(draw, kind):
    arrays = layout_arrays(draw(st.integers(0, 5))) if kind == "layout" else tile_arrays(draw(st.integers(0, 5)))
    for key in draw(st.lists(st.sampled_from(sorted(arrays)), min_size=1, max_size=3, unique=True)):
        action = draw(st.sampled_from(["dtype", "shape", "values", "drop"]))
        arr = arrays[key]
        if action == "drop":
            del arrays[key]
        elif action == "dtype":
            arrays[key] = arr.astype(draw(st.sampled_from(DTYPES)))
        elif action == "shape":
            shape = tuple(draw(st.lists(st.integers(0, 20), min_size=0, max_size=4)))
            arrays[key] = np.zeros(shape, arr.dtype)
        else:
            flat = arr.astype(np.float64).reshape(-1).copy()
            if flat.size:
                idx = draw(st.integers(0, flat.size - 1))
                flat[idx] = draw(st.sampled_from([np.nan, np.inf, -1e30, -7, -1, 0.5, 6, 2**40]))
            with np.errstate(invalid="ignore", over="ignore"):
                arrays[key] = flat.reshape(arr.shape).astype(arr.dtype)
    return arrays


@FUZZ
@given(malformed("layout"))
def test_malformed_layout_arrays(arrays):
    _convert(_savez(arrays), "layout")


@FUZZ
@given(malformed("tile"))
def test_malformed_tile_arrays(arrays):
    _convert(_savez(arrays), "tile")


@st.composite
def varied_valid(draw, kind):
    """Well-formed files with what the fixed factories lack: random DAGs and configurable sets, shapes
    with zero-size dims and odd layouts, heavy config duplication with tied and distinct runtimes,
    varying tile normalizers, and K in 0..3 — most convert, and each conversion is checked."""
    n = draw(st.integers(1, 24))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = np.array([(max(p), min(p)) for p in pairs if p[0] != p[1]], np.int64).reshape(-1, 2)
    feat = np.zeros((n, 140), np.float32)
    feat[:, 13] = 1
    for i in range(n):
        r = draw(st.integers(0, 6))
        dims = draw(st.lists(st.sampled_from([0, 1, 2, 8, 128]), min_size=r, max_size=r))
        feat[i, 21 : 21 + r] = dims
        feat[i, 28] = np.prod(dims) if r else 1
        feat[i, 134 : 134 + r] = draw(st.one_of(st.permutations(list(range(r))),
                                                st.lists(st.integers(0, 5), min_size=r, max_size=r)))
        feat[i, 95:99] = draw(st.lists(st.integers(0, 3), min_size=4, max_size=4))
    opcode = np.array(draw(st.lists(st.sampled_from([2, 26, 34, 41, 75]), min_size=n, max_size=n)),
                      np.uint8)
    c = draw(st.integers(1, 40))
    pick = draw(st.lists(st.integers(0, draw(st.integers(0, 7))), min_size=c, max_size=c))
    runtime = np.array(draw(st.lists(st.integers(0, draw(st.sampled_from([3, 10**9]))), min_size=c,
                                     max_size=c)), np.int64)
    arrays = {"node_feat": feat, "node_opcode": opcode, "edge_index": edges, "config_runtime": runtime}
    if kind == "layout":
        ids = np.array(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=6))), np.int64)
        pool = np.array(draw(st.lists(st.integers(-1, 5), min_size=8 * len(ids) * 18,
                                      max_size=8 * len(ids) * 18)), np.float32)
        arrays["node_config_feat"] = pool.reshape(8, len(ids), 18)[pick]
        arrays["node_config_ids"] = ids
        cuts = sorted(draw(st.sets(st.integers(0, n), max_size=3)) | {0, n})
        arrays["node_splits"] = np.array([cuts], np.int64)
    else:
        pool = np.array(draw(st.lists(st.sampled_from([0.0, -0.0, 1.0, 2.0, 4.0, 0.5]),
                                      min_size=8 * 24, max_size=8 * 24)), np.float32)
        arrays["config_feat"] = pool.reshape(8, 24)[pick]
        arrays["config_runtime_normalizers"] = np.array(
            draw(st.lists(st.integers(1, 5), min_size=c, max_size=c)), np.int64)
    return arrays


@FUZZ
@given(varied_valid("layout"), st.integers(0, 3))
def test_varied_valid_layout_files_equal_reference(arrays, hops):
    assert _convert(_savez(arrays), "layout", BuildOptions(hops=hops, chunk_bytes=1024)) is not None


@FUZZ
@given(varied_valid("tile"))
def test_varied_valid_tile_files_equal_reference(arrays):
    assert _convert(_savez(arrays), "tile") is not None


def test_reference_check_catches_a_wrong_conversion():
    """The checker is not vacuous: a graph with one changed value is rejected."""
    data = _savez(layout_arrays(1))
    g = _convert(data, "layout")
    g.node_feat[0, 139] = 0 if g.node_feat[0, 139] else -1
    with pytest.raises(AssertionError):
        check_against_reference(g, data, "layout")


def _real_bytes(rel: str) -> bytes:
    path = REAL / rel
    if not path.exists():
        pytest.skip(f"{path} is absent (a clone without ../shared)")
    return path.read_bytes()


@st.composite
def corruption(draw, size):
    ops = draw(st.lists(st.tuples(st.sampled_from(["flip", "truncate", "insert", "zero"]),
                                  st.integers(0, size - 1), st.integers(1, 255)), min_size=1, max_size=4))
    return ops


def _corrupt(data: bytes, ops) -> bytes:
    out = bytearray(data)
    for op, pos, val in ops:
        if not out:
            break
        pos %= len(out)
        if op == "flip":
            out[pos] ^= val
        elif op == "truncate":
            del out[pos:]
        elif op == "insert":
            out[pos:pos] = bytes([val]) * (val % 7 + 1)
        else:
            out[pos : pos + val] = bytes(len(out[pos : pos + val]))
    return bytes(out)


@FUZZ
@given(st.data())
def test_byte_corruptions_of_a_real_layout_file(data):
    raw = _real_bytes("npz/layout/xla/default/train/main__.10904.npz")
    _convert(_corrupt(raw, data.draw(corruption(len(raw)))), "layout")


@FUZZ
@given(st.data())
def test_byte_corruptions_of_a_real_tile_file(data):
    raw = _real_bytes("npz/tile/xla/train/fusion.191_4ae805e53b8d2b8a.npz")
    _convert(_corrupt(raw, data.draw(corruption(len(raw)))), "tile")
