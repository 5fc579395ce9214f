"""Issue #28 item 5: sampled reads of layout codes straight from their pages (``tpuprep/shards/pages.py``),
bit for bit what pyarrow reads, locally and from a real S3 server; anything the direct reader does not
handle (another encoding, a dictionary, a corrupt page) goes to pyarrow, never to a guess."""

from __future__ import annotations

import io
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from s3server import upload_folder

import tpuprep
from tpuprep.errors import BadShards
from tpuprep.io.storage import FileReplaced, Store
from tpuprep.shards import pages
from tpuprep.shards.schema import table_schema
from tpuprep.shards.writer import parquet_options


def corrupt_codes_page(path, rg: int) -> None:
    """Flip one bit near the end of row group ``rg``'s ``codes`` column chunk in the shard ``path``
    (inside its last page: the page's CRC-32 no longer matches)."""
    chunk = pages.chunk_info(pq.ParquetFile(path).metadata, rg)
    with open(path, "r+b") as fh:
        fh.seek(chunk.end - 3)
        byte = fh.read(1)
        fh.seek(chunk.end - 3)
        fh.write(bytes([byte[0] ^ 0x10]))


def _shard(sizes: list[int], nt: int, seed: int, **overrides) -> tuple[bytes, np.ndarray]:
    """A layout_configs shard of one graph written with the build's options (row groups of ``sizes``
    configs, codes of ``nt`` columns): (file bytes, (c_u, 12·nt) uint8 codes)."""
    rng = np.random.default_rng(seed)
    c_u = sum(sizes)
    codes = rng.integers(0, 256, (c_u, 12 * nt), dtype=np.uint8)
    codes[:, 9 * nt:] = 0  # plane 3 of real codes is zero: long runs, as zstd sees them
    schema = table_schema("layout_configs").arrow
    table = pa.table({
        "graph_id": pa.array(["layout:xla:default:g"] * c_u, pa.string()),
        "config_id": pa.array(np.arange(c_u, dtype=np.int32)),
        "runtime": pa.array(rng.integers(1, 10**6, c_u), pa.int64()),
        "runtime_spread": pa.array(np.zeros(c_u, np.int64)),
        "group_size": pa.array(np.ones(c_u, np.int32)),
        "first_index": pa.array(np.arange(c_u, dtype=np.int32)),
        "codes": pa.array([bytes(r) for r in codes], pa.binary()),
    }, schema=schema)
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, schema, **(parquet_options("layout_configs", 3) | overrides)) as w:
        at = 0
        for size in sizes:
            w.write_table(table.slice(at, size), row_group_size=size)
            at += size
    return buf.getvalue(), codes


def _direct(data: bytes, sizes: list[int], rows: np.ndarray, nt: int) -> np.ndarray | None:
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    groups = [("shard", rg) for rg in range(len(sizes))]
    return pages.sample_codes(groups, starts, rows, 12 * nt,
                              lambda _, rgs: [pages.chunk_info(meta, rg) for rg in rgs],
                              lambda _: lambda ranges: [data[a:b] for a, b in ranges])


def _pyarrow(data: bytes, rows: np.ndarray) -> np.ndarray:
    """The oracle: the whole codes column read by pyarrow with page checksums verified."""
    column = pq.ParquetFile(io.BytesIO(data), page_checksum_verification=True).read(["codes"]).column(0)
    values = column.to_pylist()
    width = len(values[0]) if values else 0
    return np.array([np.frombuffer(values[r], np.uint8) for r in rows], np.uint8).reshape(len(rows), width)


@settings(max_examples=60)
@given(sizes=st.lists(st.integers(1, 80), min_size=1, max_size=12), nt=st.integers(1, 40),
       k=st.integers(0, 200), seed=st.integers(0, 2**32 - 1), page_rows=st.sampled_from([None, 7, 33]))
def test_direct_pages_equal_pyarrow_bit_for_bit(sizes, nt, k, seed, page_rows):
    """Random shards (row group sizes, code widths, several pages per chunk or one), random samples
    (k beyond c_u: rows repeat; any order): the direct path returns exactly pyarrow's bytes."""
    extra = {} if page_rows is None else {"data_page_size": page_rows * (4 + 12 * nt)}
    data, codes = _shard(sizes, nt, seed, **extra)
    rows = np.random.default_rng(seed).integers(0, sum(sizes), k).astype(np.int64)
    got = _direct(data, sizes, rows, nt)
    assert got is not None
    assert got.dtype == np.uint8 and got.shape == (k, 12 * nt)
    assert np.array_equal(got, _pyarrow(data, rows))
    assert np.array_equal(got, codes[rows])


def _options(case: str) -> dict:
    base = parquet_options("layout_configs", 3)
    if case == "dictionary":
        base.pop("column_encoding", None)
        return base | {"use_dictionary": ["codes"]}
    if case == "delta":
        return base | {"column_encoding": {**base.get("column_encoding", {}), "codes": "DELTA_BYTE_ARRAY"}}
    return base | {"v2": {"data_page_version": "2.0"}, "snappy": {"compression": "snappy", "compression_level": None}}[case]


@pytest.mark.parametrize("case", ["dictionary", "delta", "snappy", "v2"])
def test_what_the_direct_reader_does_not_handle_is_declined_or_exact(case):
    """Another encoding, a dictionary or another codec: None (pyarrow reads it); v2 data pages, which
    it does read, must still equal pyarrow."""
    options = _options(case)
    sizes = [20, 30, 14]
    with mock.patch(f"{__name__}.parquet_options", lambda *_: options):
        data, _ = _shard(sizes, 5, 1)
    rows = np.array([0, 25, 63, 3], np.int64)
    try:
        got = _direct(data, sizes, rows, 5)
    except pages.Unhandled:  # chunk_info declines a chunk it does not handle
        got = None
    if case == "v2":
        assert got is not None and np.array_equal(got, _pyarrow(data, rows))
    else:
        assert got is None


def test_a_flipped_byte_is_declined_never_decoded():
    sizes = [40, 40]
    data, _ = _shard(sizes, 6, 2)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    chunk = pages.chunk_info(meta, 1)
    bad = bytearray(data)
    bad[chunk.end - 5] ^= 0x40  # inside the last page's compressed bytes: its CRC no longer matches
    assert _direct(bytes(bad), sizes, np.array([50, 0]), 6) is None
    assert _direct(data, sizes, np.array([50, 0]), 6) is not None


def test_page_header_decoder_reads_thrift_compact():
    # PageHeader{1: DATA_PAGE, 2: 100, 3: 60, 4: crc -5, 5: DataPageHeader{1: 3, 2: PLAIN, 3: RLE, 4: RLE}}
    header = bytes([0x15, 0x00, 0x15, 0xC8, 0x01, 0x15, 0x78, 0x15, 0x09, 0x1C,
                    0x15, 0x06, 0x15, 0x00, 0x15, 0x06, 0x15, 0x06, 0x00, 0x00])
    fields, end = pages.thrift_struct(header)
    assert end == len(header)
    assert fields == {1: 0, 2: 100, 3: 60, 4: -5, 5: {1: 3, 2: 0, 3: 3, 4: 3}}
    with pytest.raises(IndexError):
        pages.thrift_struct(header[:7])


@pytest.fixture(scope="module")
def ds(synth_shards):
    return tpuprep.open_dataset(synth_shards)


def _layout_ids(ds):
    return [g for c in ds.collections if c.startswith("layout") for g in ds.graph_ids(c)]


def _samples(ds, gids, k=9):
    return {(g, seed): ds.sample_configs(g, k, seed) for g in gids for seed in (0, 1)}


def test_sample_configs_reads_pages_directly_and_equals_pyarrow(ds):
    calls = []
    real = pages.sampled_codes
    with mock.patch.object(pages, "sampled_codes", lambda *a: calls.append(1) or real(*a)):
        direct = _samples(ds, _layout_ids(ds))
    assert calls, "the direct page reader was not used"
    fresh = tpuprep.open_dataset(ds.root)
    with mock.patch.object(pages, "sample_codes", lambda *a: None):
        oracle = _samples(fresh, _layout_ids(fresh))
    for key, sample in direct.items():
        for name in ("rows", "node_config_feat", "config_runtime", "group_size", "first_index"):
            a, b = getattr(sample, name), getattr(oracle[key], name)
            assert (a is None and b is None) or (a.dtype == b.dtype and np.array_equal(a, b)), (key, name)


def test_a_corrupt_codes_page_is_bad_shards_through_pyarrow(synth_shards, tmp_path):
    import shutil

    dst = tmp_path / "shards"
    shutil.copytree(synth_shards, dst)
    ds = tpuprep.open_dataset(dst)
    gid = max(_layout_ids(ds), key=ds.num_unique_configs)
    groups, _ = ds._index(*ds._where(gid)).config_plan(gid)
    path, rg = groups[0]
    corrupt_codes_page(path, rg)
    with pytest.raises(BadShards, match=rf"{path.name}: row groups? .*corrupt"):
        ds.sample_configs(gid, ds.num_unique_configs(gid))


def test_remote_direct_reads_equal_local(ds, synth_shards, bucket):
    remote = tpuprep.open_dataset(upload_folder(synth_shards, f"{bucket}/shards"))
    calls = []
    real = pages.sampled_codes
    with mock.patch.object(pages, "sampled_codes", lambda *a: calls.append(1) or real(*a)):
        got = _samples(remote, _layout_ids(remote))
    assert calls
    for key, sample in _samples(ds, _layout_ids(ds)).items():
        assert np.array_equal(sample.node_config_feat, got[key].node_config_feat), key
        assert np.array_equal(sample.rows, got[key].rows), key


def test_a_shard_replaced_after_its_footer_was_read_is_not_read_with_it(tmp_path):
    """The direct reader reads the very file whose footer the Dataset holds: after the folder is rebuilt
    (other rows at the same offsets), it declines, and pyarrow reads the file it holds open, so the
    sample is the one the open Dataset's index describes, bit for bit."""
    from npzfactory import layout_arrays, write

    from tpuprep.build import build

    def source(names):
        root = tmp_path / "-".join(names)
        for i, name in enumerate(names):
            write(root, f"layout/xla/default/train/{name}.npz", layout_arrays(seed=ord(name), c=200 + 50 * i))
        return root

    dst = tmp_path / "shards"
    build(source(["a", "b", "c"]), dst)
    ds = tpuprep.open_dataset(dst)
    gid = ds.graph_ids()[1]
    before = ds.sample_configs(gid, 40, seed=5)  # the shard's footer is read and kept
    build(source(["a", "x", "c"]), dst, overwrite=True)  # the same shard names, other bytes
    fetched = []
    real_read = Store.read_ranges

    def spy(self, name, ranges, **kwargs):
        try:
            return real_read(self, name, ranges, **kwargs)
        except FileReplaced:  # the reader declines (pyarrow reads the file it holds open)
            fetched.append("declined")
            raise

    with mock.patch.object(Store, "read_ranges", spy):
        after = ds.sample_configs(gid, 40, seed=5)
    assert fetched == ["declined"]
    assert np.array_equal(after.node_config_feat, before.node_config_feat)
    assert np.array_equal(after.rows, before.rows)


def test_values_of_mixed_widths_are_declined_even_when_the_page_size_fits():
    """Values of 12 and 36 bytes alternating fill a page exactly as 24-byte values would: the length of
    every value is checked, not the page's size alone."""
    values = [bytes([i]) * (12 if i % 2 else 36) for i in range(10)]
    buf = io.BytesIO()
    schema = pa.schema([pa.field("codes", pa.binary(), False)])
    table = pa.table({"codes": pa.array(values, pa.binary())}, schema=schema)
    pq.write_table(table, buf, use_dictionary=False, compression="zstd", write_page_checksum=True)
    data = buf.getvalue()
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    chunk = pages.chunk_info(meta, 0)
    block = data[chunk.start:chunk.end]
    with pytest.raises(pages.Unhandled, match="another width"):
        pages.chunk_values(block, 10, chunk.codec, 24)


# --------------------------------------------------------------------------- review fixes


def test_a_malformed_header_nested_in_lists_is_declined_not_a_recursion_error():
    """Lists inside lists count towards MAX_DEPTH: 5,000 nested list headers were a RecursionError
    out of ``sampled_codes`` (a traceback) instead of a page the reader declines."""
    with pytest.raises(pages.Unhandled):
        pages.thrift_struct(bytes([0x19]) * 5000)


def test_the_first_sample_of_a_freshly_opened_dataset_reads_the_pages_directly(synth_shards):
    """The chunks are found (opening the shard, keeping its identity) before the fetch is asked for:
    the first sample of each shard in each process used to go through pyarrow."""
    fresh = tpuprep.open_dataset(synth_shards)
    gid = _layout_ids(fresh)[0]
    used = []
    real = pages.sampled_codes
    with mock.patch.object(pages, "sampled_codes", lambda *a: used.append(1) or real(*a)):
        fresh.sample_configs(gid, 3, seed=0)
    assert used, "the first sample fell back to pyarrow"


@pytest.mark.parametrize("replacement", ["larger", "smaller"])
def test_a_remote_shard_replaced_under_an_open_dataset_is_refused_in_one_line(synth_shards, bucket, replacement):
    """Remotely the last 8 bytes of the object come with the sampled pages: an object replaced since
    its footer was read (here by another shard's bytes) is the folder-changed line, never pages read at
    the old footer's offsets."""
    import fsspec

    url = upload_folder(synth_shards, f"{bucket}/replaced-{replacement}")
    remote = tpuprep.open_dataset(url)
    gids = _layout_ids(remote)
    gid = max(gids, key=remote.num_unique_configs)
    remote.sample_configs(gid, 3, seed=0)  # footers read and kept
    groups, _ = remote._index(*remote._where(gid)).config_plan(gid)
    target = str(groups[0][0])
    fs, path = fsspec.core.url_to_fs(target)
    others = [p for p in fs.find(url.split("://", 1)[1]) if p.endswith(".parquet") and "/configs/" in p
              and (fs.size(p) > fs.size(path) if replacement == "larger" else fs.size(p) < fs.size(path))]
    fs.pipe_file(path, fs.cat_file(others[0]))  # larger: the tail check; smaller: past its end
    fs.invalidate_cache()
    with pytest.raises(BadShards, match=r"changed after it was opened"):
        remote.sample_configs(gid, 3, seed=1)


def test_config_id_values_that_differ_from_their_statistics_are_bad_shards_naming_the_file():
    """Review item (low): the direct path checked the ``config_id`` statistics, not the values. A shard
    whose statistics say 0..c_u−1 but whose values are other configs (here 1000.., as if the footer's
    statistics were edited) must be an error naming the file, never those rows as the asked configs."""
    sizes, nt = [64, 40], 5
    data, codes = _shard(sizes, nt, seed=3)
    shifted = pq.read_table(io.BytesIO(data))
    shifted = shifted.set_column(1, shifted.schema.field(1), pa.array(np.arange(104, dtype=np.int32) + 1000))
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, shifted.schema, **parquet_options("layout_configs", 3)) as w:
        w.write_table(shifted.slice(0, 64), row_group_size=64)
        w.write_table(shifted.slice(64), row_group_size=40)
    tampered = buf.getvalue()
    meta = pq.ParquetFile(io.BytesIO(tampered)).metadata
    starts = np.array([0, 64, 104], np.int64)

    def lying(_, rgs):  # the statistics as an edited footer would state them
        return [pages.chunk_info(meta, rg)._replace(first_id=int(starts[rg]), last_id=int(starts[rg + 1]) - 1)
                for rg in rgs]

    with pytest.raises(BadShards, match=r"^shard\.parquet: row group 0 holds config_id 1000 where config 0 belongs"):
        pages.sample_codes([("shard.parquet", 0), ("shard.parquet", 1)], starts, np.array([70, 3]), 12 * nt, lying,
                           lambda _: lambda ranges: [tampered[a:b] for a, b in ranges])
    honest = pages.sample_codes([("s", 0), ("s", 1)], starts, np.array([70, 3]), 12 * nt,
                                lambda _, rgs: [pages.chunk_info(pq.ParquetFile(io.BytesIO(data)).metadata, rg)
                                                for rg in rgs],
                                lambda _: lambda ranges: [data[a:b] for a, b in ranges])
    assert np.array_equal(honest, codes[[70, 3]])


@settings(max_examples=40)
@given(values=st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=300),
       page_rows=st.sampled_from([None, 5, 129]))
def test_config_id_delta_pages_decode_as_pyarrow_reads_them(values, page_rows):
    table = pa.table({"config_id": pa.array(values, pa.int32())},
                     schema=pa.schema([pa.field("config_id", pa.int32(), nullable=False)]))
    buf = io.BytesIO()
    options = {"column_encoding": {"config_id": "DELTA_BINARY_PACKED"}, "use_dictionary": False,
               "compression": "none", "write_page_checksum": True}
    if page_rows:
        options["data_page_size"] = 1
        options["write_batch_size"] = page_rows
    pq.write_table(table, buf, **options)
    data = buf.getvalue()
    col = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(0)
    start = col.data_page_offset
    got = pages.chunk_ints(data[start:start + col.total_compressed_size], len(values), col.compression)
    assert [int(v) for v in got] == values


# ------------------------------------------------------------------- planted-bug gaps (issue #36)


_UNCOMPRESSED = {"compression": "none", "compression_level": None}


def _uncompressed_chunk(seed: int = 4) -> tuple[bytes, pages.Chunk, np.ndarray]:
    """(bytes of one row group's ``codes`` chunk written UNCOMPRESSED with page CRCs, its Chunk, the
    (40, 12·3) uint8 values it holds): a flipped byte there is not caught by zstd, only by the CRC."""
    data, codes = _shard([40], 3, seed, **_UNCOMPRESSED)
    chunk = pages.chunk_info(pq.ParquetFile(io.BytesIO(data)).metadata, 0)
    assert chunk.codec == "UNCOMPRESSED"
    return data[chunk.start:chunk.end], chunk, codes


def test_a_flipped_value_byte_in_an_uncompressed_page_fails_its_crc():
    """The CRC is the only check a flipped byte of a stored value meets (no inflate to fail first):
    without it the wrong value would be returned as the config's codes."""
    block, chunk, codes = _uncompressed_chunk()
    assert np.array_equal(pages.chunk_values(block, 40, chunk.codec, 36), codes)
    bad = bytearray(block)
    bad[-7] ^= 0x01  # inside the last value's bytes
    with pytest.raises(pages.Unhandled, match="CRC-32 differs"):
        pages.chunk_values(bytes(bad), 40, chunk.codec, 36)
    data, _ = _shard([40], 3, 4, **_UNCOMPRESSED)
    corrupt = bytearray(data)
    corrupt[chunk.end - 7] ^= 0x01
    assert _direct(bytes(corrupt), [40], np.array([39, 0]), 3) is None  # pyarrow reads it (and refuses)


def test_pages_that_do_not_fill_their_column_chunk_are_declined():
    """The footer's chunk ends after the last page: bytes left over (a chunk longer than its pages, or a
    page count short of the footer's values) are not a chunk this reader understands."""
    block, chunk, _ = _uncompressed_chunk()
    with pytest.raises(pages.Unhandled, match="the pages hold 40 values"):
        pages.chunk_values(block + b"\0" * 9, 40, chunk.codec, 36)
    with pytest.raises(pages.Unhandled, match="the pages hold 40 values, the footer says 39"):
        pages.chunk_values(block, 39, chunk.codec, 36)


def test_the_page_header_cache_tells_encodings_apart(monkeypatch):
    """A header parsed once as PLAIN is cached; the same bytes asked for as DELTA_BINARY_PACKED must be
    parsed (and declined) again, not served as a PLAIN page from the cache."""
    monkeypatch.setattr(pages, "_HEADERS", {})
    block, _, _ = _uncompressed_chunk()
    page = pages.page_header(block, 0, pages.PLAIN)
    assert page.encoding == pages.PLAIN and pages.page_header(block, 0, pages.PLAIN) is page  # cached
    with pytest.raises(pages.Unhandled, match="not of encoding 5"):
        pages.page_header(block, 0, pages.DELTA_BINARY_PACKED)


def test_a_chunk_cut_inside_a_page_is_declined_as_such():
    block, chunk, _ = _uncompressed_chunk()
    with pytest.raises(pages.Unhandled, match="a page past the chunk's end"):
        pages.chunk_values(block[:-5], 40, chunk.codec, 36)


def _varint(n: int) -> bytes:
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def _header(size: int, filler: int) -> bytes:
    """A DATA_PAGE header (Thrift compact) whose DataPageHeader, with a ``filler``-byte max statistic,
    comes first and the page sizes last: two such headers share their first ``filler`` bytes."""
    def i32(n: int) -> bytes:
        return _varint((n << 1) ^ (n >> 31))

    data_page = (b"\x15" + i32(3) + b"\x15" + i32(pages.PLAIN) + b"\x15" + i32(3) + b"\x15" + i32(3)
                 + b"\x1c" + b"\x58" + _varint(filler) + b"m" * filler + b"\x00" + b"\x00")
    return (b"\x5c" + data_page + b"\x05\x02" + i32(pages.DATA_PAGE)  # field 5, then field 1 by its id
            + b"\x15" + i32(size) + b"\x15" + i32(size) + b"\x00")


def test_a_header_longer_than_the_cache_key_is_never_served_from_the_cache(monkeypatch):
    """The cache key is a header's first bytes: two headers equal in those bytes but not after them (here
    their sizes) must each be parsed, never one served as the other."""
    monkeypatch.setattr(pages, "_HEADERS", {})
    a, b = _header(100, 90), _header(120, 90)
    assert a[:pages._HEADER_KEY] == b[:pages._HEADER_KEY] and a != b
    assert (pages.page_header(a, 0).size, pages.page_header(b, 0).size) == (100, 120)
    short = _header(100, 3)  # a short header is cached, and the cache gives it back for its bytes
    assert pages.page_header(short, 0) is pages.page_header(bytes(short), 0)


def test_a_constant_step_wrapping_past_int32_decodes_as_pyarrow_reads_it():
    """One delta throughout is returned as a range only while it stays within int32: past 2^31−1 the
    encoding wraps (the column is int32), so the values are the wrapped ones pyarrow gives."""
    values = [2**31 - 3, 2**31 - 2, 2**31 - 1, -2**31, -2**31 + 1]  # a step of 1 in int32 arithmetic
    table = pa.table({"config_id": pa.array(values, pa.int32())},
                     schema=pa.schema([pa.field("config_id", pa.int32(), nullable=False)]))
    buf = io.BytesIO()
    pq.write_table(table, buf, column_encoding={"config_id": "DELTA_BINARY_PACKED"}, use_dictionary=False,
                   compression="none", write_page_checksum=True)
    data = buf.getvalue()
    col = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(0)
    got = pages.chunk_ints(data[col.data_page_offset:col.data_page_offset + col.total_compressed_size],
                           len(values), col.compression)
    assert [int(v) for v in got] == values
