"""``verify/reading.py``: verify reads an input's members itself (``InputReader``, through
``inputcheck.MemberReader``), each member inflated once for the arrays it compares and for its size and
CRC-32. A Fortran-ordered member (issue #36 item 9) is streamed by rows by verify's own code, never by
the build's ``NpzFile.fortran_rows``, and checked against ``np.load``.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuprep import inputcheck
from tpuprep.errors import BadInput
from tpuprep.inputcheck import zip_entries
from tpuprep.io.npz import NpzFile
from tpuprep.verify.reading import InputReader


def _npz(compressed: bool = True, **arrays) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def _reader(data: bytes) -> InputReader:
    fh = io.BytesIO(data)
    problems, entries = zip_entries(fh, len(data))
    assert problems == []
    return InputReader(NpzFile("in.npz", fh), fh, entries)


@pytest.fixture
def no_build_reader(monkeypatch):
    """verify must not stream a Fortran member through the build's code (it would share its bugs)."""
    def refuse(*_a, **_k):
        raise AssertionError("verify called NpzFile.fortran_rows")
    monkeypatch.setattr(NpzFile, "fortran_rows", refuse)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])  # it only refuses
@given(shape=st.lists(st.integers(1, 8), min_size=2, max_size=4).map(tuple),
       dtype=st.sampled_from(["<f4", ">f4", "<i8", ">u2", "|i1"]), window=st.integers(1, 3000),
       step=st.integers(1, 10), compressed=st.booleans(), seed=st.integers(0, 99))
def test_fortran_rows_equal_np_load_and_each_member_is_checked_once(shape, dtype, window, step, compressed, seed,
                                                                   no_build_reader):
    arr = np.random.default_rng(seed).integers(0, 100, shape).astype(dtype)
    data = _npz(compressed, x=np.asfortranarray(arr), y=np.arange(3))
    r = _reader(data)
    chunks = [(start, c.copy()) for start, c in r.iter_rows("x", step, window)]
    assert [s for s, _ in chunks] == [sum(len(c) for _, c in chunks[:i]) for i in range(len(chunks))]
    assert all(1 <= len(c) <= step and c.flags.c_contiguous and c.dtype.isnative for _, c in chunks)
    assert np.array_equal(np.concatenate([c for _, c in chunks]), np.load(io.BytesIO(data))["x"])
    assert r.finish() == []


def test_a_fortran_member_is_one_pass_per_window_and_not_inflated_again_by_finish(monkeypatch, no_build_reader):
    arr = np.random.default_rng(3).integers(-1, 6, (60, 7, 18)).astype(np.float32)
    r = _reader(_npz(x=np.asfortranarray(arr)))
    assert r.f.members["x"].fortran_order
    made = []
    real = inputcheck.MemberReader.__init__

    def counting(self, fh, entry):
        made.append(entry.name)
        real(self, fh, entry)

    monkeypatch.setattr(inputcheck.MemberReader, "__init__", counting)
    got = np.concatenate([c.copy() for _, c in r.iter_rows("x", 5, 25 * 7 * 18 * 4)])
    assert np.array_equal(got, arr) and made == ["x.npy"] * 3  # ⌈60 / 25⌉ passes
    assert r.finish() == [] and made == ["x.npy"] * 3


def test_a_corrupt_fortran_member_is_bad_input_and_a_problem_line(no_build_reader):
    arr = np.random.default_rng(4).normal(size=(300, 9, 18)).astype(np.float32)
    data = bytearray(_npz(False, x=np.asfortranarray(arr)))
    data[data.index(b"\x93NUMPY") + 4000] ^= 0x04  # a STORED data byte: only the CRC-32 can tell
    r = _reader(bytes(data))
    with pytest.raises(BadInput, match=r"in\.npz \[x\]: CRC-32 .* differs from the zip directory's"):
        next(r.iter_rows("x", 10))
    assert len(r.finish()) == 1 and r.finish()[0].startswith("x.npy: CRC-32")


def test_c_order_rows_and_whole_reads_still_share_one_inflate(monkeypatch):
    arr = np.arange(6000, dtype=np.int32).reshape(100, 60)
    r = _reader(_npz(x=arr, y=np.arange(5.0)))
    made = []
    real = inputcheck.MemberReader.__init__
    monkeypatch.setattr(inputcheck.MemberReader, "__init__",
                        lambda self, fh, entry: made.append(entry.name) or real(self, fh, entry))
    assert np.array_equal(np.concatenate([c.copy() for _, c in r.iter_rows("x", 33)]), arr)
    assert np.array_equal(r.read("y"), np.arange(5.0))
    assert r.finish() == [] and made == ["x.npy", "y.npy"]


def test_a_member_read_twice_is_inflated_once_by_verify(monkeypatch):
    r = _reader(_npz(x=np.arange(12.0).reshape(3, 4), y=np.arange(5)))
    made = []
    real = inputcheck.MemberReader.__init__
    monkeypatch.setattr(inputcheck.MemberReader, "__init__",
                        lambda self, fh, entry: made.append(entry.name) or real(self, fh, entry))
    assert np.array_equal(r.read("y"), np.arange(5)) and np.array_equal(r.read("y"), np.arange(5))
    assert made == ["y.npy"]
    assert r.finish() == [] and made == ["y.npy", "x.npy"]
