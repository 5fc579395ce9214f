"""Byte planes: how a layout config's int32 codes are laid out in its ``codes`` value (schema 3).

A row of n int32 codes is stored as 4n bytes, plane by plane: bytes 0..n−1 hold byte 0 (least
significant) of every code, bytes n..2n−1 byte 1, and so on — Parquet's BYTE_STREAM_SPLIT, applied
within each value. Base-7 codes are below 7^6 < 2^17, so plane 2 holds 0 or 1 and plane 3 is zero; zstd
then finds long runs instead of interleaved high bytes. Against plain little-endian int32
(benchmarks/RESULTS.md §20): 0.74–0.85 × the zstd CPU and 0.85–0.88 × the bytes on the largest graphs of a
quarter of ``full`` (0.42 × and 0.67 × on ``bench``'s vgg19), 0.81 × the layout shard bytes overall.
"""

from __future__ import annotations

import numpy as np

from .jit import kernel

PLANES = 4


@kernel
def split_row(codes, out):
    """out[p·n + i] = byte p of codes[i]: (n,) int32 → (4n,) uint8, one plane at a time (contiguous stores)."""
    n = codes.shape[0]
    for p in range(PLANES):
        shift = 8 * p
        base = p * n
        for i in range(n):
            out[base + i] = np.uint8((codes[i] >> shift) & 0xFF)


@kernel
def join_row(data, out):
    """out[i] = Σ_p data[p·n + i] · 256^p: (4n,) uint8 → (n,) int32."""
    n = out.shape[0]
    for i in range(n):
        out[i] = (np.int32(data[i]) | (np.int32(data[n + i]) << 8) | (np.int32(data[2 * n + i]) << 16)
                  | (np.int32(data[3 * n + i]) << 24))


@kernel
def _split(codes, out):
    for r in range(codes.shape[0]):
        split_row(codes[r], out[r])


@kernel
def _join(data, out):
    for r in range(data.shape[0]):
        join_row(data[r], out[r])


def split_planes(codes: np.ndarray) -> np.ndarray:
    """(k, n) int32 codes → (k, 4n) uint8, each row's bytes plane by plane (the stored ``codes`` value)."""
    codes = np.ascontiguousarray(codes, np.int32)
    out = np.empty((codes.shape[0], PLANES * codes.shape[1]), np.uint8)
    _split(codes, out)
    return out


def join_planes(data: np.ndarray) -> np.ndarray:
    """(k, 4n) uint8, rows stored plane by plane → (k, n) int32 codes (the inverse of ``split_planes``).

    ``ValueError`` when a row's width is not a multiple of 4."""
    data = np.asarray(data, np.uint8)
    if data.ndim != 2 or data.shape[1] % PLANES:
        raise ValueError(f"codes rows of {data.shape[-1] if data.ndim else 0} bytes: not 4 bytes per code")
    out = np.empty((data.shape[0], data.shape[1] // PLANES), np.int32)
    _join(data, out)
    return out


@kernel
def _join_columns(data, columns, scratch, out):
    """out[r, m] = the 3 codes of column columns[m] of row r; each row joined into ``scratch`` (3·nt,)
    int32 first (in cache), then its columns copied."""
    for r in range(data.shape[0]):
        join_row(data[r], scratch)
        for m in range(columns.shape[0]):
            at = 3 * columns[m]
            out[r, m, 0] = scratch[at]
            out[r, m, 1] = scratch[at + 1]
            out[r, m, 2] = scratch[at + 2]


def join_columns(data: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Rows of nt columns of 3 codes, stored in byte planes: (k, 12·nt) uint8 → the codes of ``columns``
    (m,) int, (k, m, 3) int32, in one pass: ``join_planes(data).reshape(k, nt, 3)[:, columns]`` without the
    intermediate array. ``ValueError`` when a row is not whole columns; ``IndexError`` when a column is
    not one of the nt."""
    data = np.asarray(data, np.uint8)
    if data.ndim != 2 or data.shape[1] % (3 * PLANES):
        raise ValueError(f"codes rows of {data.shape[-1] if data.ndim else 0} bytes: not 12 bytes per column")
    nt = data.shape[1] // (3 * PLANES)
    columns = np.asarray(columns, np.int64)
    bad = columns[(columns < 0) | (columns >= nt)]
    if len(bad):
        raise IndexError(f"config_node_tie names column {int(bad[0])}, the codes hold {nt}")
    out = np.empty((data.shape[0], len(columns), 3), np.int32)
    _join_columns(data, columns, np.empty(3 * nt, np.int32), out)
    return out
