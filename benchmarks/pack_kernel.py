"""The packing kernel against its previous path and against the inflate floor, per MiB, in one run.

``python -m benchmarks.pack_kernel [NPZ ...] [--chunks 64] [--repeat 5] [--json F]``

``kernels.tied._pack_rows`` is the build's per-chunk kernel: it validates a 1 MiB chunk of
``node_config_feat`` (every value an integer in −1..5), packs it to base-7 codes, hashes every row and
checks the tie groups. Four passes over the same chunks, in one process:

- ``floor``: ISA-L inflate + CRC-32 of each chunk's own DEFLATE stream (``zlib`` level 6, as
  ``np.savez_compressed`` writes): the inflate floor's work on these bytes;
- ``previous``: the same, then the kernel as it was (validation row by row inside the row loop, and
  packing in float64 arithmetic: the int weights promoted float32 values), restated here;
- ``current``: the same, then today's ``_pack_rows``;
- ``check``: the same, then only the validation pass of ``_pack_rows`` (``all_valid`` over the chunk):
  the least any exact build must do with each value once it is inflated.

As in the build, the kernel reads each chunk right after the inflater wrote it (in cache); a kernel's
figure is the CPU time of its calls alone. Chunks are read from each ``NPZ`` (its first ``--chunks`` chunks of
node_config_feat, cut as the build cuts them) or, without one, are uniform random values for nc = 40, 283
and 1,119 (the floor's worst case: they compress worst). Each pass is the best of ``--repeat``, on the
thread CPU clock, in µs per MiB of float32 values; both kernels' outputs are checked equal.
"""

from __future__ import annotations

import argparse
import json
import time
import zlib
from pathlib import Path

import numpy as np
from numba import njit

from tpuprep.convert import rows_per_chunk
from tpuprep.io import inflate
from tpuprep.kernels.base7 import SLOTS, all_valid
from tpuprep.kernels.dedup import _hash_row
from tpuprep.kernels.tied import _pack_rows, note_ties
from tpuprep.options import BuildOptions

CHUNK_BYTES = BuildOptions().chunk_bytes


@njit(cache=False, nogil=True)
def _previous_pack_rows(values, codes, hashes, rep, differs):
    """The kernel as it was before benchmarks/RESULTS.md §21 (same outputs): validation row by row
    inside the row loop, and the previous ``pack_valid``, whose int weights made float64 arithmetic of
    float32 values. Hashing and the tie check are today's, unchanged since."""
    for r in range(codes.shape[0]):
        v = values[r]
        out = codes[r]
        if not all_valid(v):
            return False
        for i in range(out.size):
            b = 6 * i
            out[i] = np.int32((v[b] + 1) + 7 * (v[b + 1] + 1) + 49 * (v[b + 2] + 1) + 343 * (v[b + 3] + 1)
                              + 2401 * (v[b + 4] + 1) + 16807 * (v[b + 5] + 1))
        hashes[r] = _hash_row(out)
        note_ties(out, rep, differs)
    return True


@njit(cache=False, nogil=True)
def _check_only(values, codes, hashes, rep, differs):
    """Only the validation pass of ``_pack_rows`` (the same call, on the same chunk)."""
    return all_valid(values.reshape(-1))


def npz_chunks(path: Path, count: int) -> list[np.ndarray]:
    """The first ``count`` chunks of node_config_feat of a layout npz, (k, nc·18) float32 each, as the
    build cuts them (≈ 1 MiB)."""
    from tpuprep.io.npz import NpzFile

    with NpzFile(path) as f:
        member = f.members["node_config_feat"]
        nc = member.shape[1]
        rows = rows_per_chunk(nc * SLOTS * 4, CHUNK_BYTES)
        chunks = []
        for _, chunk in f.iter_rows("node_config_feat", rows):
            chunks.append(np.ascontiguousarray(chunk, np.float32).reshape(len(chunk), -1))
            if len(chunks) == count:
                break
    return chunks


def random_chunks(nc: int, count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = rows_per_chunk(nc * SLOTS * 4, CHUNK_BYTES)
    return [rng.integers(-1, 6, size=(rows, nc * SLOTS)).astype(np.float32) for _ in range(count)]


def measure_chunks(name: str, chunks: list[np.ndarray], repeat: int) -> dict:
    """µs per MiB of inflate + CRC alone (the floor) and followed by each kernel, on ``chunks``.

    Each chunk is inflated from its own DEFLATE stream and handed to the kernel straight away, as the
    build does, so the kernel reads values the inflater has just written (in cache)."""
    nc = chunks[0].shape[1] // SLOTS
    deflated = []
    for c in chunks:
        z = zlib.compressobj(6, zlib.DEFLATED, -15)
        deflated.append(z.compress(c.tobytes()) + z.flush())
    codes = [np.empty((len(c), nc * 3), np.int32) for c in chunks]
    hashes = [np.empty(len(c), np.uint64) for c in chunks]
    rep, differs = np.zeros(nc, np.int32), np.zeros(nc, bool)

    def run(kernel) -> float:
        """CPU seconds of the pass: inflate + CRC of every chunk (kernel None), else of the kernel alone."""
        spent = 0.0
        t0 = time.thread_time()
        for d, c, o, h in zip(deflated, chunks, codes, hashes, strict=True):
            out = inflate.raw_inflater().decompress(d, c.nbytes)
            inflate.crc32(out, 0)
            if kernel is not None:
                values = np.frombuffer(out, np.float32).reshape(c.shape)
                t1 = time.thread_time()
                assert kernel(values, o, h, rep, differs)
                spent += time.thread_time() - t1
        return spent if kernel is not None else time.thread_time() - t0

    seconds, results = {}, {}
    passes = (("floor", None), ("previous", _previous_pack_rows), ("current", _pack_rows), ("check", _check_only))
    for label, kernel in passes:
        run(kernel)  # compile / load, warm the caches
        seconds[label] = min(run(kernel) for _ in range(repeat))
        results[label] = [a.copy() for a in codes + hashes]
    for a, b in zip(results["current"], results["previous"], strict=True):
        np.testing.assert_array_equal(a, b)
    mib = sum(c.nbytes for c in chunks) / (1 << 20)
    floor, cur, prev, check = seconds["floor"], seconds["current"], seconds["previous"], seconds["check"]
    return {"chunks": name, "nc": nc, "mib": round(mib, 2), "inflater": inflate.backend()[0],
            "floor_us_per_mib": round(1e6 * floor / mib, 1),
            "current_us_per_mib": round(1e6 * cur / mib, 1), "previous_us_per_mib": round(1e6 * prev / mib, 1),
            "current_over_previous": round(cur / prev, 3), "current_over_floor": round(cur / floor, 3),
            "previous_over_floor": round(prev / floor, 3),
            "check_us_per_mib": round(1e6 * check / mib, 1), "check_over_floor": round(check / floor, 3)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("npz", nargs="*", type=Path, help="layout npz files (default: random chunks)")
    ap.add_argument("--chunks", type=int, default=64, help="chunks per input (≈ 1 MiB each)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.npz:
        sets = [(p.name, npz_chunks(p, args.chunks)) for p in args.npz]
    else:
        sets = [(f"random nc={nc}", random_chunks(nc, args.chunks)) for nc in (40, 283, 1119)]
    rows = [measure_chunks(name, chunks, args.repeat) for name, chunks in sets]
    print("| chunks | nc | MiB | floor µs/MiB | kernel µs/MiB: previous | current | current ÷ previous | "
          "÷ floor: previous | current | check alone µs/MiB | ÷ floor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['chunks']} | {r['nc']} | {r['mib']} | {r['floor_us_per_mib']} | {r['previous_us_per_mib']} "
              f"| {r['current_us_per_mib']} | {r['current_over_previous']} | {r['previous_over_floor']} "
              f"| {r['current_over_floor']} | {r['check_us_per_mib']} | {r['check_over_floor']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
