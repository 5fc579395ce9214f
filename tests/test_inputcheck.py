"""``inputcheck.py`` beside the code: verify's own reading of an input's zip structure, each rule reached
by a zip patched at the very field it checks, and held to the line it says (issue #36's mutation pass:
8 of 12 one-line mutants of these rules passed the suite). The zips are written by ``zipfile``, STORED
(every byte at a known place), then one field of one header is changed."""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np
import pytest

from tpuprep.inputcheck import zip_entries, zip_problems

END = struct.Struct("<4s4H2LH")


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _zip(method: int = zipfile.ZIP_STORED) -> bytearray:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        zf.writestr("a.npy", _npy(np.arange(50, dtype=np.int64)))
        zf.writestr("b.npy", _npy(np.arange(30, dtype=np.int32)))
    return bytearray(buf.getvalue())


def _end(data: bytearray) -> tuple[int, tuple]:
    at = data.rfind(b"PK\x05\x06")
    return at, END.unpack_from(data, at)


def _central(data: bytearray, name: str) -> int:
    """The offset of ``name``'s central directory entry."""
    _, (_, _, _, _, _, _, cd_offset, _) = _end(data)
    at = cd_offset
    while data[at:at + 4] == b"PK\x01\x02":
        nlen, xlen, clen = struct.unpack_from("<3H", data, at + 28)
        if data[at + 46:at + 46 + nlen].decode() == name:
            return at
        at += 46 + nlen + xlen + clen
    raise AssertionError(name)


def _local(data: bytearray, name: str) -> int:
    return struct.unpack_from("<L", data, _central(data, name) + 42)[0]


def _problems(data: bytearray) -> list[str]:
    return zip_problems(io.BytesIO(bytes(data)), len(data))


def test_the_unpatched_zips_have_no_problem():
    assert _problems(_zip()) == [] and _problems(_zip(zipfile.ZIP_DEFLATED)) == []


def test_an_end_record_counting_other_entries_here_than_in_all_is_a_multi_disk_archive():
    data = _zip()
    at, _ = _end(data)
    struct.pack_into("<H", data, at + 8, 1)  # entries on this disk: 1 of 2
    assert _problems(data) == ["the zip end record describes a multi-disk archive"]


def test_a_directory_holding_more_than_its_entries_is_named():
    data = _zip()
    at, _ = _end(data)
    struct.pack_into("<2H", data, at + 8, 1, 1)  # the end record counts one entry; the directory holds two
    [problem] = _problems(data)
    assert problem.startswith("the zip directory holds ") and problem.endswith(" bytes after its 1 entries")


def test_a_local_header_whose_crc_differs_from_the_directory_is_named():
    data = _zip()
    struct.pack_into("<L", data, _local(data, "b.npy") + 14, 0x12345678)
    assert _problems(data) == ["b.npy: its local header's sizes or CRC-32 differ from the zip directory's"]


def test_a_local_header_with_another_method_is_named():
    data = _zip()
    struct.pack_into("<H", data, _local(data, "a.npy") + 8, 8)
    assert _problems(data)[0] == "a.npy: its local header says 'a.npy' (method 8), the zip directory 'a.npy' (method 0)"


def _grow(data: bytearray, name: str, by: int) -> None:
    """Declare ``by`` more compressed and inflated bytes for ``name``, in both of its headers."""
    for at in (_local(data, name) + 18, _central(data, name) + 20):
        csize, size = struct.unpack_from("<2L", data, at)
        struct.pack_into("<2L", data, at, csize + by, size + by)


def test_a_members_data_overlapping_the_next_member_by_one_byte_is_named():
    data = _zip()
    _grow(data, "a.npy", 1)  # a's last byte is now b's local header's first
    problems = _problems(data)
    assert "b.npy: its bytes overlap those of a.npy" in problems, problems


def test_a_members_data_running_one_byte_into_the_directory_is_named():
    data = _zip()
    _grow(data, "b.npy", 1)
    assert "b.npy: its data runs into the zip directory" in _problems(data)


def test_a_member_inflating_one_byte_more_than_declared_is_named_so():
    data = _zip()
    for at in (_local(data, "a.npy") + 22, _central(data, "a.npy") + 24):  # the inflated size, one less
        struct.pack_into("<L", data, at, struct.unpack_from("<L", data, at)[0] - 1)
    _, entries = zip_entries(io.BytesIO(bytes(data)), len(data))
    assert [e.name for e in entries] == ["a.npy", "b.npy"]
    problems = _problems(data)
    assert problems[0].startswith("a.npy: inflates to more than the ") and \
        problems[0].endswith(" bytes the zip directory declares"), problems


@pytest.fixture
def zip64(monkeypatch) -> bytearray:
    """A small npz with zip64 end records (zipfile's limits shrunk while it is written)."""
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 100)
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 1)
    buf = io.BytesIO()
    np.savez(buf, a=np.arange(100), b=np.ones((5, 3)))
    monkeypatch.undo()
    data = bytearray(buf.getvalue())
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data and _problems(data) == []
    return data


def test_a_zip64_end_record_that_does_not_reach_its_locator_is_named(zip64):
    at = zip64.rfind(b"PK\x06\x06")
    size = struct.unpack_from("<Q", zip64, at + 4)[0]
    struct.pack_into("<Q", zip64, at + 4, size + 8)
    assert _problems(zip64) == ["the zip64 end record does not reach its locator"]


def test_a_zip64_locator_pointing_elsewhere_is_named(zip64):
    at = zip64.rfind(b"PK\x06\x07")
    struct.pack_into("<Q", zip64, at + 8, 3)
    assert _problems(zip64) == ["the zip64 end record is missing where its locator points"]
