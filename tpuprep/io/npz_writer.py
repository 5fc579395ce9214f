"""Streaming npz writing, for everything tpuprep writes in the TpuGraphs format (``synth``, ``export``).

``write_npz`` writes an ``np.savez_compressed``-compatible .npz member by member, deflating
``StreamedArray`` members chunk by chunk so memory never holds them whole (same zipfile calls, same
.npy headers, fixed 1980-01-01 entry time: the bytes equal ``np.savez_compressed``'s for the same
arrays); ``write_npy`` writes one .npy; both atomically (``io.files.atomic_path``). ``prefetched``
overlaps computing the next chunk with deflating the current one.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import atomic_path


@dataclass(frozen=True)
class StreamedArray:
    """An array member written chunk by chunk: never held whole in memory.

    shape/dtype: of the whole array; chunks: C-ordered pieces along axis 0 whose concatenation is the
    array (each piece: shape (k, *shape[1:]), any k ≥ 0).
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: Iterable[np.ndarray]


def _npy_header(fid, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Write the .npy header exactly as ``np.lib.format.write_array`` would for this array."""
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
        "fortran_order": False,
        "shape": tuple(int(s) for s in shape),
    }
    try:
        np.lib.format.write_array_header_1_0(fid, header)
    except ValueError:
        np.lib.format.write_array_header_2_0(fid, header)


def _atomic(path: Path):
    """``atomic_path(path)`` after creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_path(path)


def _write_member(zf: zipfile.ZipFile, name: str, value: np.ndarray | StreamedArray) -> None:
    """Write one ``<name>.npy`` entry: plain arrays as ``np.savez_compressed`` does, streamed ones
    header first, then chunk by chunk (each checked against the declared shape)."""
    with zf.open(name + ".npy", "w", force_zip64=True) as fid:
        if isinstance(value, np.ndarray):
            np.lib.format.write_array(fid, value, allow_pickle=False)
            return
        _npy_header(fid, value.shape, value.dtype)
        rows, row_shape, dtype = 0, tuple(value.shape[1:]), np.dtype(value.dtype)
        for chunk in value.chunks:
            piece = np.ascontiguousarray(chunk, dtype=dtype)
            if piece.shape[1:] != row_shape:
                raise ValueError(f"{name}: chunk shape {piece.shape} does not fit {value.shape}")
            rows += piece.shape[0]
            fid.write(piece.reshape(-1).view(np.uint8).data)
        if rows != value.shape[0]:
            raise ValueError(f"{name}: chunks hold {rows} rows, expected {value.shape[0]}")


def write_npz(path: str | Path,
              members: Mapping[str, np.ndarray | StreamedArray] | Sequence[tuple[str, np.ndarray | StreamedArray]]) -> int:
    """Write an ``np.savez_compressed``-compatible .npz; returns its size in bytes.

    members: (key, array) pairs (or a mapping) in file order; a ``StreamedArray`` is deflated chunk by
    chunk. Errors name the file and the member. Plain
    arrays go through ``np.lib.format.write_array`` like ``np.savez_compressed`` does, into the same
    ZIP_DEFLATED, zip64-forced entries with the fixed 1980-01-01 timestamp, so the bytes are
    deterministic. The file appears atomically (written under a temporary name, then renamed).
    """
    path = Path(path)
    with (
        _atomic(path) as tmp,
        zipfile.ZipFile(tmp, mode="w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf,
    ):
        for name, value in (members.items() if isinstance(members, Mapping) else members):
            try:
                _write_member(zf, name, value)
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from None
    return path.stat().st_size


def write_npy(path: str | Path, array: np.ndarray) -> int:
    """Write one .npy file atomically (the truth side files); returns its size in bytes."""
    path = Path(path)
    with _atomic(path) as tmp, open(tmp, "wb") as fh:
        np.lib.format.write_array(fh, array, allow_pickle=False)
    return path.stat().st_size


def prefetched(chunks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    """Yield the items of ``chunks`` while the next one is computed in a helper thread.

    NumPy gathers and zlib both release the GIL, so building chunk k+1 overlaps deflating chunk k.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(next, chunks, None)
        while True:
            item = pending.result()
            if item is None:
                return
            pending = pool.submit(next, chunks, None)
            yield item
