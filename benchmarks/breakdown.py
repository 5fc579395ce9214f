"""Where the build's time goes: the serial build profiled on chosen files of a corpus.

``python -m benchmarks.breakdown --corpus DIR/npz --work DIR [--small 400] [--json F]``

Three trees are made of hard links into the corpus (nothing is copied): the largest layout file (by
inflated node_config_feat), the layout train file of median size, and the first ``--small`` tile train
files. On each, in its own process: the ISA-L inflate floor (one process, ``floor.py``), then
``tpuprep build`` (one worker: this process) under ``cProfile`` with the process's CPU clock — so other
load on the machine does not inflate the figures. Start-up (imports, loading the Numba kernels: a
first build of a 6-file tiny tree) is measured apart (``startup_cpu_s``), so the profile is the
steady state. Each
function's own time (tottime) is put in one bucket (``BUCKETS``: inflate, CRC-32, sha256, file reads,
the npz stream's Python layer, value check + base-7 packing + hashing, dedup, prune/repad, Parquet +
zstd writes, other Arrow work, JSON, Numba kernel loading, imports, everything else); the phases
``process_batch`` (convert + write parts) and ``merge_task`` are given by their cumulative time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

from .measure import measure

BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    ("inflate", ("'decompress' of 'igzip_lib", "'decompress' of 'isal_zlib", "'decompress' of 'zlib")),
    ("CRC-32", ("crc32",)),
    ("sha256 of the input", ("_hashlib.HASH",)),
    ("file reads", ("'read' of '_io.", "'readinto' of '_io.")),
    ("npz stream (Python layer, copies)", ("tpuprep/io/npz.py",)),
    ("value check + base-7 pack + row hash + tie check (Numba)", ("tpuprep/kernels/base7.py", ":_pack_rows")),
    ("dedup + tie-column store (Numba)", ("tpuprep/kernels/dedup.py", ":_add_configs", "tpuprep/kernels/tied.py")),
    ("prune + repad (Numba)", ("tpuprep/kernels/prune.py", "tpuprep/kernels/repad.py")),
    ("Parquet + zstd write", ("pyarrow/parquet", "pyarrow._parquet", "'write_table'", "ParquetWriter")),
    ("Arrow IPC, tables, reads", ("pyarrow",)),
    ("JSON (sidecars, manifest)", ("json/",)),
    ("dataset card (YAML)", ("yaml/",)),
    ("Numba kernel loading", ("numba/", "llvmlite/")),
    ("imports", ("importlib", "marshal", "<frozen")),
]
OTHER = "everything else"


def bucket_of(key: tuple[str, int, str]) -> str:
    """The bucket of a pstats key (file, line, function)."""
    text = f"{key[0]}:{key[2]}"
    for name, patterns in BUCKETS:
        if any(p in text for p in patterns):
            return name
    return OTHER


def profile_build(src: str, dst: str, out: str) -> None:
    """Run the serial build of src under cProfile (CPU clock); write buckets and phases to ``out``."""
    import cProfile
    import pstats
    import tempfile
    import time

    start = time.process_time()
    from tpuprep.build import build
    from tpuprep.synth import synthesize

    with tempfile.TemporaryDirectory(prefix="breakdown-warm-") as tmp:  # imports, kernels loaded once
        synthesize(tmp, "tiny", 0, collections=["layout:xla:random", "tile:xla"], fraction=0.01)
        build(Path(tmp) / "npz", Path(tmp) / "shards")
    startup = time.process_time() - start
    prof = cProfile.Profile(time.process_time)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    prof.enable()
    build(src, dst, overwrite=True)
    prof.disable()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    stats = pstats.Stats(prof).stats  # key -> (cc, nc, tottime, cumtime, callers)
    buckets: dict[str, float] = {}
    for key, (_, _, tottime, _, _) in stats.items():
        name = bucket_of(key)
        buckets[name] = buckets.get(name, 0.0) + tottime
    phases = {f"{fn} (cumulative)": round(sum(v[3] for k, v in stats.items() if k[2] == fn and "tpuprep/build.py"
                                              in k[0]), 3) for fn in ("process_batch", "merge_task", "build")}
    order = [b for b, _ in BUCKETS] + [OTHER]
    other = sorted(((v[2], f"{Path(k[0]).name}:{k[1]}({k[2]})") for k, v in stats.items() if bucket_of(k) == OTHER),
                   reverse=True)[:8]
    Path(out).write_text(json.dumps({
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "phases": phases,
        "startup_cpu_s": round(startup, 3),
        "buckets_s": {b: round(buckets.get(b, 0.0), 3) for b in order},
        "largest_other_s": {name: round(t, 3) for t, name in other},
    }, indent=1))


def _inflated(path: Path) -> tuple[int, int]:
    """(inflated bytes of every member, of node_config_feat) of one npz."""
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    return sum(i.file_size for i in infos), sum(i.file_size for i in infos if i.filename == "node_config_feat.npy")


def _link_tree(corpus: Path, files: list[Path], root: Path) -> Path:
    """root/npz/... with a hard link (a copy across filesystems) of each file at its corpus path."""
    shutil.rmtree(root, ignore_errors=True)
    for f in files:
        dst = root / "npz" / f.relative_to(corpus)
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(f, dst)
        except OSError:
            shutil.copyfile(f, dst)
    return root / "npz"


def choose(corpus: Path, small: int) -> dict[str, list[Path]]:
    """The three file sets: the largest layout file, the median layout train file, ``small`` tile files."""
    layout = sorted(corpus.glob("layout/*/*/train/*.npz"))
    sized = sorted(layout, key=lambda p: _inflated(p)[1])
    tiles = sorted(corpus.glob("tile/xla/train/*.npz"))[:small]
    out: dict[str, list[Path]] = {}
    if sized:
        out["largest layout file"] = [sized[-1]]
        out["median layout train file"] = [sized[len(sized) // 2]]
    if tiles:
        out[f"{len(tiles)} tile files"] = tiles
    return out


def run(corpus: Path, work: Path, small: int) -> dict:
    res: dict = {}
    for i, (name, files) in enumerate(choose(corpus, small).items()):
        src = _link_tree(corpus, files, work / f"tree{i}")
        total = sum(_inflated(f)[0] for f in files)
        floor = measure([sys.executable, "-m", "benchmarks.floor", str(src), "--backend", "isal"])
        out = work / f"profile{i}.json"
        m = measure([sys.executable, "-c", "import sys; from benchmarks.breakdown import profile_build; "
                     "profile_build(sys.argv[1], sys.argv[2], sys.argv[3])", str(src), str(work / f"out{i}"), str(out)])
        row = json.loads(out.read_text())
        row.update({"files": [str(f.relative_to(corpus)) for f in files][:3], "file_count": len(files),
                    "npz_bytes": sum(f.stat().st_size for f in files), "inflated_bytes": total,
                    "floor_wall_s": round(floor.wall_s, 3), "floor_cpu_s": round(floor.cpu_s, 3),
                    "process_peak_rss_mb": round(m.peak_rss_mb, 1),
                    "cpu_over_floor_cpu": round(row["cpu_s"] / floor.cpu_s, 2) if floor.cpu_s else None,
                    "cpu_ms_per_file": round(row["cpu_s"] / len(files) * 1e3, 2)})
        res[name] = row
        shutil.rmtree(work / f"out{i}", ignore_errors=True)
        shutil.rmtree(work / f"tree{i}", ignore_errors=True)
        print(f"{name}: {len(files)} files, {total / 1e9:.2f} GB inflated; build {row['cpu_s']:.2f} s CPU "
              f"({row['wall_s']:.2f} s wall), floor {floor.cpu_s:.2f} s CPU", flush=True)
        for b, s in row["buckets_s"].items():
            if s >= 0.005:
                print(f"    {b:38s} {s:8.3f} s  {100 * s / row['cpu_s']:5.1f} %")
        print(f"    phases: {row['phases']}", flush=True)
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.breakdown")
    ap.add_argument("--corpus", type=Path, required=True, help="an npz/ tree")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder (emptied)")
    ap.add_argument("--small", type=int, default=400, help="how many tile files in the small-file batch")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    res = run(args.corpus, args.work, args.small)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
