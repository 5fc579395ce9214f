"""``python -m benchmarks.loaders SHARDS [--collection C] [--split S] [--workers 0,1,2] [--epochs 2]
[--batches-per-graph B] [--k 64] [--steady-epochs 8] [--block-epochs 4] [--prefetch-factors 2,8]
[--ceiling SECONDS] [--json FILE]``: configs/s of ``ConfigBatchDataset``
through a real torch ``DataLoader(batch_size=None, num_workers=n, persistent_workers=n > 0)``, per epoch,
for each n; then the steady state, 0 workers against the largest n, interleaved in one process.

Each n runs in its own process (a clean peak RSS): one loader kept across the epochs, ``set_epoch(e)``
before each, as a training loop does. ``setup_s`` (reported apart, the same work for every n) is opening
the dataset and constructing ``ConfigBatchDataset``, which reads one batch in the main process (the
per-process kernel load, ~2 s, that fork workers then inherit); the epochs are timed from ``iter(loader)``
(worker start-up included) to the last item. Per epoch: wall seconds, configs and configs/s (every item's k rows
counted when the main process receives it); per run: peak RSS (VmHWM) of the main process and of each
worker, in MB. The speed-up is configs/s of n workers / configs/s of 0 workers in the same epoch (epoch
0 is cold: structures read; later epochs reuse the persistent workers' caches). The OS page cache is warm
for every n. The machine may be shared: run it when quiet and repeat to see the spread.

**Steady state** (``--steady-epochs E``, 0 to skip; issue #38 item 5), once per DataLoader
``prefetch_factor`` of ``--prefetch-factors``: one process holds two loaders over the same settings, 0
workers and n persistent workers; after a warm-up epoch each (epoch 0: structures read, kernels loaded),
epochs 1..E alternate between them in blocks of ``--block-epochs`` (0 workers, then n, the same epochs),
so both see the same machine load while the workers are not put to sleep after every short epoch. Per
loader: the median configs/s over blocks, and the CPU time per batch of the main process and of its
workers (``/proc/PID/stat``: all threads); the speed-up is the median of the per-block ratios n ÷ 0. ``cpu_bound_speedup`` is what those CPU times allow on n free cores: min(n ÷ total CPU per batch
with workers, 1 ÷ the main process's CPU per batch) ÷ (1 ÷ CPU per batch without workers) — the figure to
compare when other jobs share the machine (the load averages are reported too).

**Ceiling** (``--ceiling SECONDS``): n independent processes (n the largest worker count), each iterating its
own ``ConfigBatchDataset`` in-process as 0 workers do, forked after a warm-up epoch and started together,
against one alone: what the cores give when nothing is handed between processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _hwm_mb(pid: int | str = "self") -> float:
    """Peak resident set (VmHWM) of a process in MB, 0 when it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in text.splitlines() if line.startswith("VmHWM:")), 0.0)


def run_one(shards: str, collection: str, split: str, workers: int, epochs: int, k: int,
            batches_per_graph: int | str) -> dict:
    """One loader with ``workers`` persistent workers over ``epochs`` epochs (in this process)."""
    from torch.utils.data import DataLoader

    import tpuprep
    from tpuprep.torch import ConfigBatchDataset

    started = time.perf_counter()
    ds = tpuprep.open_dataset(shards)
    batches = tpuprep.ConfigBatches(ds, collection, split=split, k=k, seed=0,
                                    batches_per_graph=batches_per_graph)
    dataset = ConfigBatchDataset(batches)  # warms up: kernels and the first graph, inherited by fork workers
    loader = DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
    out: dict = {"workers": workers, "batches": len(batches), "setup_s": round(time.perf_counter() - started, 3),
                 "epochs": []}
    worker_hwm: dict[int, float] = {}
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        started, configs, items = time.perf_counter(), 0, 0
        for item in loader:
            configs += len(item["rows"])
            items += 1
        wall = time.perf_counter() - started
        out["epochs"].append({"epoch": epoch, "wall_s": round(wall, 3), "batches": items, "configs": configs,
                              "configs_per_s": round(configs / max(wall, 1e-9), 1)})
        iterator = getattr(loader, "_iterator", None)
        for w in getattr(iterator, "_workers", []) or []:
            worker_hwm[w.pid] = max(worker_hwm.get(w.pid, 0.0), _hwm_mb(w.pid))
    out["peak_rss_mb"] = {"main": round(_hwm_mb(), 1), "workers": [round(v, 1) for v in worker_hwm.values()]}
    return out


def _cpu_s(pid: int) -> float:
    """CPU seconds a process has run, all its live threads (``/proc/PID/task/*/schedstat``: nanoseconds,
    where ``/proc/PID/stat`` counts 10 ms clock ticks); 0 when it is gone."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def run_steady(shards: str, collection: str, split: str, workers: int, epochs: int, k: int,
               batches_per_graph: int | str, block: int = 4, prefetch_factor: int = 2) -> dict:
    """0 workers and ``workers`` persistent workers, epochs alternated in this process (module docstring)."""
    from torch.utils.data import DataLoader

    import tpuprep
    from tpuprep.torch import ConfigBatchDataset

    ds = tpuprep.open_dataset(shards)
    loaders = {}
    for n in (0, workers):
        dataset = ConfigBatchDataset(tpuprep.ConfigBatches(ds, collection, split=split, k=k, seed=0,
                                                           batches_per_graph=batches_per_graph))
        more = {"persistent_workers": True, "prefetch_factor": prefetch_factor} if n else {}
        loaders[n] = (dataset, DataLoader(dataset, batch_size=None, num_workers=n, **more))
    rows: dict[int, list[tuple[float, float, float]]] = {0: [], workers: []}
    load_before = os.getloadavg()
    for first in [0, *range(1, epochs + 1, block)]:  # epoch 0 warms both up, then blocks of epochs
        span = range(first, min(first + block, epochs + 1)) if first else range(1)
        for n, (dataset, loader) in loaders.items():
            pids: list[int] = []
            cpu0: list[float] = []
            started, main0, configs, items = time.perf_counter(), time.process_time(), 0, 0
            for epoch in span:
                dataset.set_epoch(epoch)
                it = iter(loader)
                if not pids:
                    pids = [w.pid for w in getattr(it, "_workers", [])]
                    cpu0 = [_cpu_s(pid) for pid in pids]
                for item in it:
                    configs += len(item["rows"])
                    items += 1
            wall = time.perf_counter() - started
            if first and items:
                worker_cpu = sum(_cpu_s(pid) - c for pid, c in zip(pids, cpu0, strict=True))
                rows[n].append((configs / wall, (time.process_time() - main0) / items * 1e3,
                                worker_cpu / items * 1e3))
    ratios = [b[0] / a[0] for a, b in zip(rows[0], rows[workers], strict=True)]
    med = {n: [statistics.median(r[i] for r in rows[n]) for i in range(3)] for n in rows}
    single, main, spent = med[0][1], med[workers][1], med[workers][1] + med[workers][2]
    bound = min(workers / spent, 1 / main) * single if spent and main else 0.0
    return {"workers": workers, "epochs": epochs, "block_epochs": block, "prefetch_factor": prefetch_factor,
            "batches": len(loaders[0][0]),
            "configs_per_s": {str(n): round(med[n][0], 1) for n in rows},
            "cpu_ms_per_batch": {str(n): {"main": round(med[n][1], 3), "workers": round(med[n][2], 3)} for n in rows},
            "speedup_per_block": [round(r, 3) for r in ratios], "speedup": round(statistics.median(ratios), 3),
            "cpu_bound_speedup": round(bound, 3), "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()]}


def run_ceiling(shards: str, collection: str, split: str, k: int, batches_per_graph: int | str,
                processes: int, seconds: float) -> dict:
    """What the machine allows without a DataLoader: configs/s of ``processes`` independent processes,
    each iterating its own ``ConfigBatchDataset`` in-process (as 0 workers do) for ``seconds``, against
    one alone. Forked after a warm-up epoch (structures cached), started together through a pipe."""
    import tpuprep
    from tpuprep.torch import ConfigBatchDataset

    dataset = ConfigBatchDataset(tpuprep.ConfigBatches(tpuprep.open_dataset(shards), collection, split=split,
                                                       k=k, seed=0, batches_per_graph=batches_per_graph))
    for _ in dataset:  # epoch 0: structures read, kernels loaded, inherited by the forks
        pass

    def together(n: int) -> list[float]:
        go_r, go_w = os.pipe()
        out_r, out_w = os.pipe()
        pids = []
        for _ in range(n):
            pid = os.fork()
            if pid == 0:  # a child: iterate epochs 1, 2, ... for `seconds`, write its configs/s
                os.read(go_r, 1)
                started, configs, epoch = time.perf_counter(), 0, 1
                while time.perf_counter() - started < seconds:
                    dataset.set_epoch(epoch)
                    epoch += 1
                    configs += sum(len(item["rows"]) for item in dataset)
                os.write(out_w, f"{configs / (time.perf_counter() - started)}\n".encode())
                os._exit(0)
            pids.append(pid)
        os.write(go_w, b"x" * n)
        for pid in pids:
            os.waitpid(pid, 0)
        os.close(out_w)
        with os.fdopen(out_r) as f:
            return [float(line) for line in f]

    alone = together(1)[0]
    each = together(processes)
    return {"processes": processes, "seconds": seconds, "alone_configs_per_s": round(alone, 1),
            "each_configs_per_s": [round(x, 1) for x in each], "aggregate_speedup": round(sum(each) / alone, 3)}


def speedups(runs: list[dict]) -> dict[str, float]:
    """configs/s of each n > 0 over n = 0, per epoch: {"n=2 epoch 0": 1.52, ...}."""
    base = next((r for r in runs if r["workers"] == 0), None)
    if base is None:
        return {}
    out = {}
    for r in runs:
        if r["workers"]:
            for e, b in zip(r["epochs"], base["epochs"], strict=False):
                out[f"n={r['workers']} epoch {e['epoch']}"] = round(e["configs_per_s"] / b["configs_per_s"], 3)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.loaders")
    ap.add_argument("shards")
    ap.add_argument("--collection", default="layout:xla:random")
    ap.add_argument("--split", default="train")
    ap.add_argument("--workers", default="0,1,2", help="comma-separated DataLoader worker counts")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--batches-per-graph", default="1", help='an int, or "sqrt"')
    ap.add_argument("--steady-epochs", type=int, default=8,
                    help="epochs of the interleaved steady-state comparison (0: skip it)")
    ap.add_argument("--block-epochs", type=int, default=4, help="epochs per block of the steady state")
    ap.add_argument("--prefetch-factors", default="2,8",
                    help="comma-separated DataLoader prefetch_factor values, one steady state each")
    ap.add_argument("--ceiling", type=float, default=0.0, metavar="SECONDS",
                    help="also run as many independent in-process loops as the largest worker count, "
                         "for SECONDS each, against one alone (0: skip)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # internal: one run, JSON out
    ap.add_argument("--steady", type=int, default=None, help=argparse.SUPPRESS)  # internal: steady state
    args = ap.parse_args(argv)
    bpg = args.batches_per_graph if args.batches_per_graph == "sqrt" else int(args.batches_per_graph)
    if args.one is not None:
        print(json.dumps(run_one(args.shards, args.collection, args.split, args.one, args.epochs, args.k, bpg)))
        return
    if args.steady is not None:
        print(json.dumps(run_steady(args.shards, args.collection, args.split, args.steady, args.steady_epochs,
                                    args.k, bpg, args.block_epochs, int(args.prefetch_factors))))
        return
    runs = []
    for n in [int(x) for x in args.workers.split(",") if x]:
        cmd = [sys.executable, "-m", "benchmarks.loaders", args.shards, "--collection", args.collection,
               "--split", args.split, "--epochs", str(args.epochs), "--k", str(args.k),
               "--batches-per-graph", str(args.batches_per_graph), "--one", str(n)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            sys.exit(f"benchmarks.loaders: the {n}-worker run failed:\n{proc.stderr[-3000:]}")
        run = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(run)
        for e in run["epochs"]:
            print(f"workers {n} epoch {e['epoch']}: {e['batches']} batches, {e['configs']} configs in "
                  f"{e['wall_s']:.2f} s = {e['configs_per_s']:,.0f} configs/s", flush=True)
        print(f"workers {n} setup {run['setup_s']:.2f} s", flush=True)
        print(f"workers {n} peak RSS MB: main {run['peak_rss_mb']['main']}, workers "
              f"{run['peak_rss_mb']['workers']}", flush=True)
    result = {"shards": args.shards, "collection": args.collection, "split": args.split, "k": args.k,
              "batches_per_graph": args.batches_per_graph, "runs": runs, "speedup": speedups(runs)}
    for name, value in result["speedup"].items():
        print(f"speed-up {name}: {value:.2f}x")
    most = max((r["workers"] for r in runs), default=0)
    if args.steady_epochs > 0 and most > 0:
        result["steady"] = []
        for factor in [int(x) for x in args.prefetch_factors.split(",") if x]:
            cmd = [sys.executable, "-m", "benchmarks.loaders", args.shards, "--collection", args.collection,
                   "--split", args.split, "--k", str(args.k), "--batches-per-graph", str(args.batches_per_graph),
                   "--steady-epochs", str(args.steady_epochs), "--block-epochs", str(args.block_epochs),
                   "--prefetch-factors", str(factor), "--steady", str(most)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode:
                sys.exit(f"benchmarks.loaders: the steady-state run failed:\n{proc.stderr[-3000:]}")
            steady = json.loads(proc.stdout.strip().splitlines()[-1])
            result["steady"].append(steady)
            cpu = steady["cpu_ms_per_batch"]
            print(f"steady state, prefetch_factor {factor}, epochs 1-{steady['epochs']} in blocks of "
                  f"{steady['block_epochs']}: {steady['configs_per_s']['0']:,.0f} configs/s with 0 workers, "
                  f"{steady['configs_per_s'][str(most)]:,.0f} with {most}: speed-up {steady['speedup']:.2f}x "
                  f"(per block {steady['speedup_per_block']}); CPU ms per batch: 0 workers {cpu['0']['main']}, "
                  f"{most} workers main {cpu[str(most)]['main']} + workers {cpu[str(most)]['workers']}; "
                  f"CPU-bound speed-up {steady['cpu_bound_speedup']:.2f}x; load {steady['load_before']} -> "
                  f"{steady['load_after']}", flush=True)
    if args.ceiling > 0 and most > 0:
        ceiling = result["ceiling"] = run_ceiling(args.shards, args.collection, args.split, args.k, bpg, most,
                                                  args.ceiling)
        print(f"ceiling: {most} independent in-process loops {ceiling['each_configs_per_s']} configs/s each, "
              f"one alone {ceiling['alone_configs_per_s']:,.0f}: {ceiling['aggregate_speedup']:.2f}x in aggregate",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
