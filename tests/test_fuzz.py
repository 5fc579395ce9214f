"""Fuzzing the reader (issue 6): malformed arrays and byte-level corruptions of real files must end in
a converted graph or one clean ``BadInput`` — never another exception, never a hang."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npzfactory import layout_arrays, tile_arrays
from realdata import REAL

from tpuprep.convert import convert_file
from tpuprep.errors import BadInput
from tpuprep.inputs import InputFile
from tpuprep.options import BuildOptions

# bounded in CI; TPUPREP_FUZZ_EXAMPLES=5000 for a longer campaign
FUZZ = settings(max_examples=int(os.environ.get("TPUPREP_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.float16, np.float32, np.float64, np.complex64, np.bool_]


def _convert(data: bytes, kind: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rel = "layout/xla/random/train/x.npz" if kind == "layout" else "tile/xla/train/x.npz"
        path = Path(tmp) / rel
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        coll = "layout:xla:random" if kind == "layout" else "tile:xla"
        inp = InputFile(f"{coll}:x", rel, path, kind, coll, "train", "x", len(data))
        try:
            convert_file(inp, BuildOptions(chunk_bytes=4096), "0" * 64)
        except BadInput as exc:
            assert exc.path and str(exc).startswith(str(path))


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
