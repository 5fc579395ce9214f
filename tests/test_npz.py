"""The streaming npz reader against np.load, and its refusal of broken members."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from npzfactory import Tripwire

from tpuprep.errors import BadInput
from tpuprep.io.npz import NpzFile


def _write(path, compressed=True, **arrays):
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return path


@pytest.mark.parametrize("compressed", [True, False])
def test_reads_and_streams_like_np_load(tmp_path, compressed):
    rng = np.random.default_rng(0)
    arrays = {"a": rng.normal(size=(1000, 7, 18)).astype(np.float32), "b": np.arange(5, dtype=np.int64),
              "c": rng.integers(0, 255, 33).astype(np.uint8), "big_endian": np.arange(6, dtype=">i4").reshape(3, 2)}
    path = _write(tmp_path / "x.npz", compressed, **arrays)
    with NpzFile(path) as f:
        assert set(f.members) == set(arrays)
        for key, arr in arrays.items():
            np.testing.assert_array_equal(f.read(key), arr)
        chunks = list(f.iter_rows("a", 97))
        assert [s for s, _ in chunks] == list(range(0, 1000, 97))
        np.testing.assert_array_equal(np.concatenate([c for _, c in chunks]), arrays["a"])
        assert f.read("big_endian").dtype == np.dtype("int32")


def test_header_claiming_a_gigantic_shape_is_refused(tmp_path):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 140)})
    with zipfile.ZipFile(tmp_path / "x.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("node_feat.npy", buf.getvalue() + b"\0" * 64)
    with NpzFile(tmp_path / "x.npz") as f:  # an error for whoever reads it, before any allocation
        assert "header claims shape" in f.unreadable["node_feat"] and f.keys == ["node_feat"]
        for read in (f.member, f.read, lambda k: list(f.iter_rows(k, 10))):
            with pytest.raises(BadInput, match=r"node_feat.*header claims shape"):
                read("node_feat")


def test_corrupt_member_is_detected_by_crc(tmp_path):
    path = _write(tmp_path / "x.npz", False, a=np.arange(1000, dtype=np.int64))
    data = bytearray(path.read_bytes())
    data[data.index(b"\x93NUMPY") + 200] ^= 0xFF  # flip one data byte of the STORED member
    path.write_bytes(bytes(data))
    with NpzFile(path) as f, pytest.raises(BadInput, match="CRC"):
        f.read("a")


def test_truncated_and_non_zip_files_are_bad_input(tmp_path):
    path = _write(tmp_path / "x.npz", True, a=np.random.default_rng(1).normal(size=(5000,)))
    (tmp_path / "t.npz").write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(BadInput, match="zip"):
        NpzFile(tmp_path / "t.npz")
    (tmp_path / "n.npz").write_text("hello")
    with pytest.raises(BadInput, match="not a readable zip"):
        NpzFile(tmp_path / "n.npz")


def test_object_arrays_are_never_unpickled(tmp_path):
    tripwire = tmp_path / "unpickled"
    np.savez(tmp_path / "o.npz", a=np.array([Tripwire(tripwire)], dtype=object), b=np.arange(4))
    with NpzFile(tmp_path / "o.npz") as f:
        assert f.keys == ["a", "b"] and list(f.members) == ["b"] and "never unpickled" in f.unreadable["a"]
        np.testing.assert_array_equal(f.read("b"), np.arange(4))
        for read in (f.member, f.read, lambda k: list(f.iter_rows(k, 1))):
            with pytest.raises(BadInput, match=r"\[a\]: dtype object is not a numeric array"):
                read("a")
    assert not tripwire.exists()


def _installed_backends() -> list[str]:
    import importlib

    from tpuprep.io.inflate import BACKENDS

    found = []
    for name, module in BACKENDS.items():
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        found.append(name)
    return found


@pytest.fixture(params=_installed_backends())
def backend(request, monkeypatch):
    """Each installed DEFLATE backend in turn, as this process's choice (TPUPREP_INFLATE)."""
    from tpuprep.io import inflate

    monkeypatch.setenv("TPUPREP_INFLATE", request.param)
    inflate.backend.cache_clear()
    yield request.param
    inflate.backend.cache_clear()


def test_isal_and_zlib_are_both_exercised():
    assert {"isal", "zlib"} <= set(_installed_backends())


def test_every_backend_streams_rows_exactly_and_refuses_corrupt_members(tmp_path, backend):
    from tpuprep.io import inflate

    assert inflate.backend()[0] == backend
    rng = np.random.default_rng(2)
    # compressible enough that one 1 MiB input block inflates to many output steps, and not so much
    # that the stream is trivial
    a = rng.integers(-1, 6, size=(3000, 41, 18)).astype(np.float32)
    path = _write(tmp_path / "x.npz", True, a=a, b=rng.normal(size=777))
    with NpzFile(path) as f:
        for rows in (1, 7, 1000, 5000):
            got = np.concatenate([c for _, c in f.iter_rows("a", rows)])
            np.testing.assert_array_equal(got, a)
        np.testing.assert_array_equal(f.read("b"), np.load(path)["b"])

    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("a.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start + info.compress_size // 2 : start + info.compress_size // 2 + 64] = bytes(64)
    (tmp_path / "bad.npz").write_bytes(bytes(data))
    with NpzFile(tmp_path / "bad.npz") as f, pytest.raises(BadInput, match=r"bad\.npz.*a.*(corrupt|CRC|ends after|more bytes)"):
        for _ in f.iter_rows("a", 100):
            pass


def test_raw_inflater_matches_zlib_for_any_step(backend):
    """The one streaming interface over every backend: any output step and input split gives the bytes
    zlib gives, and ``needs_input``/``eof`` say when to feed."""
    import zlib

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tpuprep.io.inflate import raw_inflater

    @settings(max_examples=60, deadline=None)
    @given(st.binary(max_size=5000), st.integers(1, 6), st.integers(1, 4097), st.integers(1, 3000))
    def check(raw, repeat, step, split):
        payload = raw * repeat
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        stream = c.compress(payload) + c.flush()
        inf = raw_inflater(backend)
        out, pos = [], 0
        for _ in range(10 * (len(stream) + len(payload) + 10)):
            if inf.eof:
                break
            data = b""
            if inf.needs_input and pos < len(stream):
                data, pos = stream[pos : pos + split], pos + split
            piece = inf.decompress(data, step)
            assert len(piece) <= step
            out.append(piece)
        assert inf.eof and b"".join(out) == payload

    check()


@pytest.mark.parametrize("cut", [3, 10])
def test_a_file_cut_inside_its_end_record_is_called_truncated(tmp_path, cut):
    """A download cut short ends inside the zip's end record: the message says so, not that bytes of
    another file follow the record (what it said with a negative byte count)."""
    path = tmp_path / "a.npz"
    np.savez(path, x=np.arange(10))
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(BadInput, match=r"end record is cut short \(a truncated file\?\)"):
        NpzFile(path)


# ---------------------------------------------------------------------- Fortran-ordered members (#36 item 9)


def _fortran_npz(arr: np.ndarray, compressed: bool = True) -> bytes:
    """An npz whose member ``x`` is ``arr`` saved in Fortran order (as np.save writes an F-contiguous
    array), beside a small C-order member."""
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, x=np.asfortranarray(arr), y=np.arange(3))
    return buf.getvalue()


@settings(max_examples=40)
@given(shape=st.lists(st.integers(1, 9), min_size=2, max_size=4).map(tuple),
       dtype=st.sampled_from(["<f4", ">f4", "<i8", ">i2", "|i1", "<f8"]),
       window=st.integers(1, 4000), step=st.integers(1, 12), compressed=st.booleans(), seed=st.integers(0, 99))
def test_a_fortran_member_streams_by_rows_exactly_as_np_load_reads_it(shape, dtype, window, step, compressed, seed):
    """Any shape, byte order and window (one row per pass up to the whole member): the rows in order,
    each chunk ≤ step rows, C-contiguous, native byte order, equal to np.load's array."""
    arr = np.random.default_rng(seed).integers(-100, 100, shape).astype(dtype)
    data = _fortran_npz(arr, compressed)
    with NpzFile("x.npz", io.BytesIO(data)) as f:
        chunks = [(start, chunk.copy()) for start, chunk in f.iter_rows("x", step, window)]
    assert [s for s, _ in chunks] == [sum(len(c) for _, c in chunks[:i]) for i in range(len(chunks))]
    assert all(1 <= len(c) <= step and c.flags.c_contiguous and c.dtype.isnative for _, c in chunks)
    got = np.concatenate([c for _, c in chunks])
    assert got.dtype == arr.dtype.newbyteorder("=") and np.array_equal(got, np.load(io.BytesIO(data))["x"])


@pytest.mark.parametrize(("window_rows", "passes"), [(1, 50), (7, 8), (50, 1), (10**6, 1)])
def test_a_fortran_member_is_read_in_one_pass_per_window_holding_one_window(monkeypatch, window_rows, passes):
    """⌈rows / window⌉ passes over the member, and nothing larger than the window (plus a read block)
    is allocated for its rows."""
    arr = np.random.default_rng(1).integers(-1, 6, (50, 30, 18)).astype(np.float32)
    row_bytes = 30 * 18 * 4
    with NpzFile("x.npz", io.BytesIO(_fortran_npz(arr))) as f:
        opened = []
        real_open = f._open_data
        monkeypatch.setattr(f, "_open_data", lambda m: opened.append(m.key) or real_open(m))
        allocated = []
        real_empty = np.empty

        def empty(shape, dtype=float, *a, **k):
            out = real_empty(shape, dtype, *a, **k)
            allocated.append(out.nbytes)
            return out

        monkeypatch.setattr(np, "empty", empty)
        got = np.concatenate([c.copy() for _, c in f.iter_rows("x", 4, window_rows * row_bytes)])
        monkeypatch.undo()
    assert np.array_equal(got, arr) and opened == ["x"] * passes
    assert max(allocated) <= max(min(window_rows, 50) * row_bytes, 1 << 20)


def test_a_corrupt_fortran_member_fails_before_any_of_its_rows(tmp_path):
    arr = np.random.default_rng(2).normal(size=(400, 20, 18)).astype(np.float32)
    data = bytearray(_fortran_npz(arr, compressed=False))
    data[data.index(b"\x93NUMPY") + 5000] ^= 0x01  # a STORED data byte: only the CRC can tell
    with NpzFile("x.npz", io.BytesIO(bytes(data))) as f:
        rows = f.iter_rows("x", 10, 10**9)
        with pytest.raises(BadInput, match=r"x\.npz \[x\]: CRC-32 mismatch"):
            next(rows)


@pytest.mark.parametrize(("claim", "holds"), [((10,), 11), ((10,), 9), ((2, 5), 11)])
def test_a_header_claiming_more_or_fewer_bytes_than_the_member_holds_is_unreadable(tmp_path, claim, holds):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i8", "fortran_order": False, "shape": claim})
    with zipfile.ZipFile(tmp_path / "x.npz", "w") as zf:
        zf.writestr("a.npy", buf.getvalue() + np.arange(holds, dtype="<i8").tobytes())
    with NpzFile(tmp_path / "x.npz") as f:
        assert f.unreadable["a"] == f"header claims shape {claim} of int64 ({80} bytes) but the member holds " \
                                    f"{8 * holds} bytes of data"


@pytest.mark.parametrize("arr", [np.array(["ab", "c"]), np.array([b"x"]), np.array([1], "datetime64[s]"),
                                 np.array([1], "timedelta64[s]"), np.zeros(2, "V4")])
def test_arrays_that_are_not_numbers_are_unreadable_members(tmp_path, arr):
    np.savez(tmp_path / "x.npz", a=arr, b=np.arange(2))
    with NpzFile(tmp_path / "x.npz") as f:
        assert "is not a numeric array" in f.unreadable["a"] and list(f.members) == ["b"]


def test_a_member_whose_stream_holds_more_than_declared_is_refused(tmp_path):
    """The zip directory and the .npy header agree on n bytes, the DEFLATE stream holds n + 1: reads
    take the n bytes the header describes, and the member's end is checked before it is used."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "|i1", "fortran_order": False, "shape": (100,)})
    body = head.getvalue() + bytes(range(100))
    with zipfile.ZipFile(tmp_path / "x.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.npy", body + b"!")
    data = bytearray((tmp_path / "x.npz").read_bytes())
    central = data.rfind(b"PK\x01\x02")
    for pos in (22, central + 24):  # the inflated size, in the local header and the directory: n
        data[pos:pos + 4] = len(body).to_bytes(4, "little")
    with NpzFile("x.npz", io.BytesIO(bytes(data))) as f, \
            pytest.raises(BadInput, match=r"\[a\]: member holds more bytes than its array header describes"):
        f.read("a")
