"""The floor: stream-inflate every member of every file and discard the bytes (no other work).

``python -m benchmarks.floor DIR [--backend zlib|isal] [--processes N]``. With ``zlib`` this is
``zipfile`` itself (stdlib inflate + CRC check), what any npz reader must pay; ``isal`` is the same with
ISA-L, the inflater tpuprep uses. With ``--processes N`` the files are shared among N spawned processes
(largest inflated size first, each to the least loaded process): the floor of an N-core machine.
Prints the inflated byte count.
"""

from __future__ import annotations

import argparse
import struct
import zipfile
from pathlib import Path

BLOCK = 16 << 20
STEP = 1 << 20  # inflated bytes per ISA-L step: stays in the L2 cache for the CRC


def inflate_zipfile(path: Path) -> int:
    total = 0
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            with zf.open(info) as fh:
                while data := fh.read(BLOCK):
                    total += len(data)
    return total


def inflate_isal(path: Path) -> int:
    """ISA-L through its streaming ``IgzipDecompressor`` (input kept inside, 1 MiB output steps): the
    fastest way to inflate with it here. The zlib-style ``isal_zlib.decompressobj`` hands unused input
    back as a copy on every call and was 3x slower on a 2.7 GB member (RESULTS.md §15)."""
    from isal import igzip_lib, isal_zlib

    total = 0
    with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
        for info in zf.infolist():
            fh.seek(info.header_offset)
            head = fh.read(30)
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            fh.seek(info.header_offset + 30 + name_len + extra_len)
            remaining = info.compress_size
            d = igzip_lib.IgzipDecompressor(flag=igzip_lib.DECOMP_DEFLATE)
            crc = 0
            while not d.eof:
                data = b""
                if d.needs_input:
                    data = fh.read(min(1 << 20, remaining))
                    remaining -= len(data)
                    if not data:
                        raise ValueError(f"{path}: {info.filename} is truncated")
                out = d.decompress(data, STEP)
                crc = isal_zlib.crc32(out, crc)
                total += len(out)
            if crc != info.CRC:
                raise ValueError(f"{path}: {info.filename}: CRC mismatch")
    return total


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.npz") if p.is_file())


def inflated_size(path: Path) -> int:
    """Sum of the members' inflated sizes (from the zip directory)."""
    with zipfile.ZipFile(path) as zf:
        return sum(i.file_size for i in zf.infolist())


def shares(paths: list[Path], n: int) -> list[list[Path]]:
    """``paths`` split into n lists of nearly equal inflated bytes (LPT: largest first, to the lightest)."""
    load, out = [0] * n, [[] for _ in range(n)]
    for size, p in sorted(((inflated_size(p), p) for p in paths), key=lambda t: -t[0]):
        k = load.index(min(load))
        load[k] += size
        out[k].append(p)
    return out


def inflate_all(paths: list[Path], backend: str) -> int:
    fn = inflate_zipfile if backend == "zlib" else inflate_isal
    return sum(fn(p) for p in paths)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("--backend", choices=["zlib", "isal"], default="zlib")
    ap.add_argument("--processes", type=int, default=1)
    args = ap.parse_args()
    if args.processes <= 1:
        print(inflate_all(files(args.root), args.backend))
        return
    import multiprocessing

    parts = shares(files(args.root), args.processes)
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        print(sum(pool.starmap(inflate_all, [(part, args.backend) for part in parts])))


if __name__ == "__main__":
    main()
