"""Sampled reads of layout ``codes`` at the cost of their bytes: the pages of the needed row groups read
directly, without pyarrow's per-row-group machinery (≈ 70 µs per row group touched).

For each row group holding a sampled row, the ``codes`` column chunk's byte range comes from the
footer (``data_page_offset``, ``total_compressed_size``) and is read at once (``ShardFile.read_ranges``:
locally one ``pread``, remotely all of a sample's ranges in one concurrent round of ranged GETs); its pages are found by decoding
their headers (Parquet's ``PageHeader``, Thrift compact protocol: ``thrift_struct`` is a small generic
decoder of it), each page's CRC-32 is checked when present, zstd pages are inflated with ``zstandard``
and the PLAIN ``BYTE_ARRAY`` values (4-byte length, then the bytes) are cut into rows of one width.
The row group's ``config_id`` chunk comes in the same read (it lies a few hundred bytes before ``codes``)
and its values (DELTA_BINARY_PACKED, ``delta_ints``) must be the config ids asked for: statistics that
say otherwise than the values are ``BadShards`` naming the file, never other configs' rows.

Only what tpuprep writes is handled: a required, non-repeated ``BYTE_ARRAY`` column, PLAIN encoded, no
dictionary, zstd or uncompressed, DATA_PAGE or DATA_PAGE_V2 pages, every value ``width`` bytes. Anything
else (another encoding, a dictionary page, a value of another width, a failed CRC, a truncated or
malformed header) makes ``sampled_codes`` return None, and the caller reads the row groups with pyarrow
(which then raises ``BadShards`` for a corrupt page, as every read does): this path never guesses. The
rows it returns are the pyarrow path's bit for bit (``tests/test_pages.py`` checks it on random shards).
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from ..errors import BadShards, FatalError

DATA_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 2, 3
PLAIN, DELTA_BINARY_PACKED = 0, 5
MAX_DEPTH = 16  # nested structs in a page header (statistics are 1 deep)


class Unhandled(Exception):
    """A page or column chunk this reader does not decode (the caller falls back to pyarrow)."""


class WrongIds(Exception):
    """A row group whose ``config_id`` values are not those its statistics (and the index) say."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 varint at ``pos``: (value, position after it)."""
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Unhandled("varint longer than 64 bits")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _value(buf: bytes, pos: int, kind: int, depth: int) -> tuple[object, int]:
    """One Thrift compact value of type ``kind`` at ``pos``: (value, position after it). ``depth``
    counts the containers around it (``Unhandled`` beyond ``MAX_DEPTH``: a malformed header)."""
    if depth > MAX_DEPTH:
        raise Unhandled("Thrift values nested too deep")
    if kind in (1, 2):  # a bool field: its value is in the type nibble
        return kind == 1, pos
    if kind == 3:
        return struct.unpack_from("<b", buf, pos)[0], pos + 1
    if kind in (4, 5, 6):  # i16, i32, i64: zigzag varints
        raw, pos = _varint(buf, pos)
        return _zigzag(raw), pos
    if kind == 7:
        return struct.unpack_from("<d", buf, pos)[0], pos + 8
    if kind == 8:
        size, pos = _varint(buf, pos)
        if pos + size > len(buf):
            raise Unhandled("binary value past the end")
        return bytes(buf[pos:pos + size]), pos + size
    if kind in (9, 10):  # list, set
        header = buf[pos]
        pos += 1
        size, element = header >> 4, header & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        items = []
        for _ in range(size):
            if element in (1, 2):  # bools inside a list are one byte each
                items.append(buf[pos] == 1)
                pos += 1
            else:
                item, pos = _value(buf, pos, element, depth + 1)
                items.append(item)
        return items, pos
    if kind == 11:  # map
        size, pos = _varint(buf, pos)
        if not size:
            return {}, pos
        types = buf[pos]
        pos += 1
        out = {}
        for _ in range(size):
            key, pos = _value(buf, pos, types >> 4, depth + 1)
            out[key], pos = _value(buf, pos, types & 0x0F, depth + 1)
        return out, pos
    if kind == 12:
        return thrift_struct(buf, pos, depth + 1)
    raise Unhandled(f"unknown Thrift compact type {kind}")


def thrift_struct(buf: bytes, pos: int = 0, depth: int = 0) -> tuple[dict[int, object], int]:
    """A Thrift compact-protocol struct at ``pos`` of ``buf``: ({field id: value}, position after its
    stop byte). Nested structs are dicts, lists are lists, integers ints, binaries bytes. ``Unhandled``
    (or ``IndexError`` / ``struct.error`` for a truncated buffer) when it is not one."""
    if depth > MAX_DEPTH:
        raise Unhandled("Thrift structs nested too deep")
    fields: dict[int, object] = {}
    last = 0
    while True:
        byte = buf[pos]
        pos += 1
        if byte == 0:
            return fields, pos
        kind, delta = byte & 0x0F, byte >> 4
        if delta:
            fid = last + delta
        else:
            raw, pos = _varint(buf, pos)
            fid = _zigzag(raw)
        last = fid
        fields[fid], pos = _value(buf, pos, kind, depth)


_DECOMPRESSORS = threading.local()


def _inflate(payload: bytes, size: int, codec: str) -> bytes:
    """A page's data as stored → its ``size`` bytes (zstd through one decompressor per thread)."""
    if codec == "UNCOMPRESSED":
        return bytes(payload)
    dctx = getattr(_DECOMPRESSORS, "dctx", None)
    if dctx is None:
        import zstandard

        dctx = _DECOMPRESSORS.dctx = zstandard.ZstdDecompressor()
    out = dctx.decompress(payload, max_output_size=size)
    if len(out) != size:
        raise Unhandled(f"a page inflated to {len(out)} bytes, its header says {size}")
    return out


class Page(NamedTuple):
    """A page header as this reader uses it (``page_header``): its data start after the header (relative
    to the header's own position), stored and inflated sizes, CRC-32 (None without), values and
    whether its data are compressed."""

    offset: int
    stored: int
    size: int
    crc: int | None
    count: int
    compressed: bool
    encoding: int = PLAIN


_HEADERS: dict[tuple[int, bytes], Page] = {}
_HEADER_KEY = 64  # bytes of a page that name its header: tpuprep's codes page headers are ~30 bytes
_HEADERS_MAX = 1 << 14


def page_header(chunk: bytes, pos: int, encoding: int = PLAIN) -> Page:
    """The data page header at ``pos`` of a column chunk as a ``Page``, ``Unhandled`` unless it is a
    DATA_PAGE or a DATA_PAGE_V2 of non-null values without levels in ``encoding`` (PLAIN, or
    DELTA_BINARY_PACKED for ``config_id``). Parsed (``thrift_struct``) and checked once per distinct
    header: ``encoding`` and the next ``_HEADER_KEY`` bytes are the cache key, so an entry is reused only
    for the very same bytes (a header longer than the key is never cached)."""
    key = (encoding, bytes(chunk[pos:pos + _HEADER_KEY]))
    hit = _HEADERS.get(key)
    if hit is not None:
        return hit
    header, end = thrift_struct(chunk, pos)
    kind, size, stored, crc = header.get(1), header.get(2), header.get(3), header.get(4)
    if type(size) is not int or type(stored) is not int or size < 0 or stored < 0:
        raise Unhandled("a page header without its sizes")
    if kind == DATA_PAGE:
        data = header.get(5)
        if not isinstance(data, dict) or data.get(2) != encoding:
            raise Unhandled(f"a data page that is not of encoding {encoding}")
        count, compressed = data.get(1), True
    elif kind == DATA_PAGE_V2:
        data = header.get(8)
        if not isinstance(data, dict) or data.get(4) != encoding or data.get(2, 0) or data.get(5, 0) or \
                data.get(6, 0) or data.get(1) != data.get(3):
            raise Unhandled("a v2 data page that is not PLAIN, non-null values without levels")
        count, compressed = data.get(1), data.get(7, True) is not False
    else:
        raise Unhandled(f"a page of type {kind} (only PLAIN data pages are read directly)")
    if type(count) is not int or count < 0 or (crc is not None and type(crc) is not int):
        raise Unhandled("a page header without its number of values")
    page = Page(end - pos, stored, size, None if crc is None else crc & 0xFFFFFFFF, count, compressed, encoding)
    if end - pos <= len(key[1]):
        if len(_HEADERS) >= _HEADERS_MAX:
            _HEADERS.clear()
        _HEADERS[key] = page
    return page


def _page_data(chunk: bytes, num_values: int, codec: str, encoding: int = PLAIN) -> Iterator[tuple[bytes, int]]:
    """(inflated data, values) of each page of a column chunk (its pages' bytes, headers included), each
    page's CRC-32 checked when its header has one; ``Unhandled`` for a page past the chunk's end, a
    failed CRC or pages that do not hold ``num_values`` values."""
    view = memoryview(chunk)
    pos = seen = 0
    while seen < num_values:
        page = page_header(chunk, pos, encoding)
        start = pos + page.offset
        pos = start + page.stored
        if pos > len(chunk):
            raise Unhandled("a page past the chunk's end")
        payload = view[start:pos]
        if page.crc is not None and zlib.crc32(payload) != page.crc:
            raise Unhandled("a page's CRC-32 differs from its header's")
        yield (_inflate(payload, page.size, codec) if page.compressed else bytes(payload)), page.count
        seen += page.count
    if seen != num_values or pos != len(chunk):
        raise Unhandled(f"the pages hold {seen} values, the footer says {num_values}")


def chunk_values(chunk: bytes, num_values: int, codec: str, width: int) -> np.ndarray:
    """The values of one column chunk (its pages' bytes, headers included) of a required PLAIN
    BYTE_ARRAY column whose every value is ``width`` bytes: (num_values, width) uint8. Each page's
    CRC-32 is checked when its header has one. ``Unhandled`` for anything else."""
    rows, stride, prefix = [], 4 + width, width.to_bytes(4, "little")
    for data, count in _page_data(chunk, num_values, codec):
        if len(data) != count * stride:
            raise Unhandled("a page whose values are not all of the expected width")
        if count:  # every value's 4-byte length must be width (byte p of each, compared at once)
            if any(data[p::stride] != bytes([byte]) * count for p, byte in enumerate(prefix)):
                raise Unhandled("a value of another width")
            rows.append(np.ndarray((count, width), np.uint8, data, 4, (stride, 1)))  # a view of the page
        else:
            rows.append(np.zeros((0, width), np.uint8))
    if not rows:
        return np.zeros((0, width), np.uint8)
    return rows[0] if len(rows) == 1 else np.concatenate(rows)


def delta_ints(data: bytes, count: int) -> np.ndarray | range:
    """The ``count`` int32 values of one DELTA_BINARY_PACKED page (Parquet's encoding: a header of block
    size, miniblocks per block, value count and first value, then blocks of a min delta, one bit width
    per miniblock and the bit-packed deltas, least significant bit first): (count,) int64, wrapped to
    int32 as the encoding does. ``Unhandled`` for anything malformed."""
    block, pos = _varint(data, 0)
    minis, pos = _varint(data, pos)
    total, pos = _varint(data, pos)
    first, pos = _varint(data, pos)
    if not minis or block % minis or (block // minis) % 8 or total != count:
        raise Unhandled("a DELTA_BINARY_PACKED header that does not describe this page")
    per, left, first = block // minis, count - 1, _zigzag(first)
    deltas: list[np.ndarray] = []
    steps: list[int] = []  # the min deltas of blocks whose miniblocks are all of width 0 (no bits)
    while left > 0:
        low, pos = _varint(data, pos)
        widths = bytes(data[pos:pos + minis])
        pos += minis
        if len(widths) != minis:
            raise Unhandled("a DELTA_BINARY_PACKED block past the page's end")
        used = min(minis, -(-left // per))
        if not any(widths[:used]):  # equal deltas (consecutive ids: all 1), nothing packed
            take = min(block, left)
            steps.append(_zigzag(low))
            deltas.append(np.full(take, _zigzag(low), np.int64))
            left -= take
            continue
        for width in widths[:used]:
            size = per * width // 8
            if width > 32 or pos + size > len(data):
                raise Unhandled("a DELTA_BINARY_PACKED miniblock past the page's end")
            bits = np.unpackbits(np.frombuffer(data, np.uint8, size, pos), bitorder="little")
            pos += size
            values = bits.reshape(per, width).astype(np.int64) @ (np.int64(1) << np.arange(width, dtype=np.int64))
            deltas.append(values[:min(per, left)] + _zigzag(low))
            left -= min(per, left)
    if len(steps) == len(deltas) and len(set(steps)) <= 1:  # one step throughout: an arithmetic sequence
        step = steps[0] if steps else 1
        if step and -2**31 <= first <= 2**31 - 1 and -2**31 <= first + step * (count - 1) <= 2**31 - 1:
            return range(first, first + step * count, step)
    out = np.cumsum(np.concatenate([np.zeros(min(count, 1), np.int64), *deltas])) + first
    return (out & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)


def chunk_ints(chunk: bytes, num_values: int, codec: str) -> np.ndarray | range:
    """The values of one column chunk of a required int32 column, DELTA_BINARY_PACKED (how tpuprep writes
    ``config_id``) or PLAIN: (num_values,) int64, or a ``range`` for one page of an arithmetic sequence
    (``delta_ints``). ``Unhandled`` for anything else."""
    out: list = []
    for encoding in (DELTA_BINARY_PACKED, PLAIN):
        try:
            for data, count in _page_data(chunk, num_values, codec, encoding):
                if encoding == PLAIN:
                    if len(data) != 4 * count:
                        raise Unhandled("a PLAIN int32 page of another size")
                    out.append(np.frombuffer(data, "<i4").astype(np.int64))
                else:
                    out.append(delta_ints(data, count))
            break
        except Unhandled:
            if encoding == PLAIN or out:
                raise
    if len(out) == 1 and isinstance(out[0], range):
        return out[0]
    return np.concatenate([np.asarray(o, np.int64) for o in out]) if out else np.zeros(0, np.int64)


class Chunk(NamedTuple):
    """What a sampled read needs of one row group's ``codes`` chunk, from the footer (``chunk_info``)."""

    start: int  # byte offset of its first page header
    end: int  # one past its last page byte
    values: int
    codec: str  # "ZSTD" or "UNCOMPRESSED"
    first_id: int | None  # config_id statistics (None when absent)
    last_id: int | None
    graph_ids: tuple[str, str] | None  # graph_id statistics (min, max)
    ids: tuple[int, int, str] | None = None  # the config_id chunk: (start, end, codec); None without one


def chunk_info(meta, rg: int, column: str = "codes") -> Chunk:
    """The ``Chunk`` of ``column`` in row group ``rg`` (``meta``: pyarrow's ``FileMetaData``) when it is a
    required, non-repeated, PLAIN BYTE_ARRAY chunk without dictionary, zstd or uncompressed;
    ``Unhandled`` otherwise. Reading a footer's Python objects costs ≈ 10 µs each: keep the answer."""
    names = meta.schema.names
    index = names.index(column)
    described = meta.schema.column(index)
    group = meta.row_group(rg)
    chunk = group.column(index)
    if described.physical_type != "BYTE_ARRAY" or described.max_definition_level or \
            described.max_repetition_level or chunk.has_dictionary_page or \
            chunk.compression not in ("ZSTD", "UNCOMPRESSED") or not set(chunk.encodings) <= {"PLAIN", "RLE"}:
        raise Unhandled(f"row group {rg}: {column} is not a plain required binary chunk")

    def stats(name: str) -> tuple | None:
        found = group.column(names.index(name)).statistics if name in names else None
        return (found.min, found.max) if found is not None and found.has_min_max else None

    ids = stats("config_id")
    start = chunk.data_page_offset
    where = None
    if "config_id" in names:
        ids_chunk = group.column(names.index("config_id"))
        if ids_chunk.has_dictionary_page or ids_chunk.physical_type != "INT32":
            raise Unhandled(f"row group {rg}: config_id is not a plain or delta int32 chunk")
        where = (ids_chunk.data_page_offset, ids_chunk.data_page_offset + ids_chunk.total_compressed_size,
                 ids_chunk.compression)
    return Chunk(start, start + chunk.total_compressed_size, chunk.num_values, chunk.compression,
                 None if ids is None else int(ids[0]), None if ids is None else int(ids[1]), stats("graph_id"),
                 where)


def _span(chunk: Chunk) -> tuple[int, int]:
    """The one byte range [start, end) a sampled read fetches of a row group: its ``codes`` chunk and its
    ``config_id`` chunk (a few dozen bytes; the small columns between them come along)."""
    if chunk.ids is None:
        return chunk.start, chunk.end
    return min(chunk.start, chunk.ids[0]), max(chunk.end, chunk.ids[1])


def sampled_codes(chunks: Sequence[Chunk], firsts: Sequence[int], sizes: Sequence[int], width: int,
                  fetch: Callable[[list[tuple[int, int]]], list[bytes]]) -> list[np.ndarray] | None:
    """The ``codes`` values of some row groups of one shard: for row group i (its ``chunks[i]``, config
    ids ``firsts[i]``.., ``sizes[i]`` rows) its (sizes[i], width) uint8 values. The ``config_id``
    statistics must say the row group holds exactly those config ids, and its ``config_id`` values are
    read too (the same fetched range) and must be them: ``WrongIds`` (with the position i) otherwise,
    never rows of other configs. ``fetch(ranges)`` returns the bytes of each [start, end) range (one read
    each). None when any chunk or page is not one this reader handles (``Unhandled``, including a failed
    CRC): then read them with pyarrow."""
    try:
        for chunk, first, size in zip(chunks, firsts, sizes, strict=True):
            if chunk.values != size or chunk.first_id != first or chunk.last_id != first + size - 1 or \
                    chunk.ids is None:
                raise Unhandled(f"a row group whose config_id statistics do not say {first}..{first + size - 1}")
        spans = [_span(c) for c in chunks]
        blocks = fetch(spans)
        out = []
        for i, (chunk, block, (lo, hi)) in enumerate(zip(chunks, blocks, spans, strict=True)):
            if len(block) != hi - lo:
                raise Unhandled("a short read")
            view = memoryview(block)
            ids = chunk_ints(view[chunk.ids[0] - lo:chunk.ids[1] - lo], chunk.values, chunk.ids[2])
            want = range(firsts[i], firsts[i] + sizes[i])
            if not (ids == want if isinstance(ids, range) else np.array_equal(ids, np.asarray(want, np.int64))):
                bad = int(np.flatnonzero(np.asarray(ids, np.int64) != np.asarray(want, np.int64))[0])
                raise WrongIds(i, int(ids[bad]), firsts[i] + bad)
            out.append(chunk_values(view[chunk.start - lo:chunk.end - lo], chunk.values, chunk.codec, width))
        return out
    except (FatalError, WrongIds):  # the store's one line, a shard that changed: not a page to fall back on
        raise
    except (Unhandled, IndexError, ValueError, struct.error, OverflowError, MemoryError, RecursionError):
        return None
    except Exception as exc:  # zstandard.ZstdError: a page that does not inflate
        if type(exc).__module__.startswith("zstandard") or type(exc).__name__ == "ZstdError":
            return None
        raise


def sample_codes(groups: Sequence[tuple[object, int]], starts: np.ndarray, rows: np.ndarray, width: int,
                 chunks_of: Callable[[object, list[int]], list[Chunk]],
                 fetch_of: Callable[[object], Callable | None]) -> np.ndarray | None:
    """The ``codes`` values of unique configs ``rows`` ((k,) int64, any order) of a layout graph whose
    row groups are ``groups`` ((shard, row group), ``ShardIndex.config_plan``) with first config ids
    ``starts`` ((g + 1,) int64, then c_u): (k, width) uint8, row i the value of config ``rows[i]``.
    ``chunks_of(shard, row groups)``: their ``Chunk``s (checked to hold the graph; ``Unhandled`` to
    decline); ``fetch_of(shard)``: its ``fetch`` (the reader's ``ShardFile.read_ranges``: the pinned file's
    bytes, or the folder-changed line), or None to decline.
    None when a shard declines or holds a chunk this reader does not handle (read with pyarrow)."""
    where = np.searchsorted(starts, rows, side="right") - 1
    local, where = (rows - starts[where]).tolist(), where.tolist()
    by_shard: dict[object, list[int]] = {}
    for i in sorted(set(where)):
        by_shard.setdefault(groups[i][0], []).append(i)
    tables: dict[int, np.ndarray] = {}
    for shard, mine in by_shard.items():
        try:  # the chunks first: they open the shard, whose identity ``fetch_of`` needs
            chunks = chunks_of(shard, [groups[i][1] for i in mine])
        except Unhandled:
            return None
        fetch = fetch_of(shard)
        if fetch is None:
            return None
        try:
            got = sampled_codes(chunks, [int(starts[i]) for i in mine],
                                [int(starts[i + 1] - starts[i]) for i in mine], width, fetch)
        except WrongIds as exc:
            at, found, want = exc.args
            raise BadShards(f"{shard}: row group {groups[mine[at]][1]} holds config_id {found} where config "
                            f"{want} belongs (its config_id statistics say otherwise)") from None
        if got is None:
            return None
        tables.update(zip(mine, got, strict=True))
    out = np.empty((len(rows), width), np.uint8)
    for n, (i, at) in enumerate(zip(where, local, strict=True)):
        out[n] = tables[i][at]
    return out
