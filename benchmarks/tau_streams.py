"""τ of the trainer under two streams of sampled configs, at a fixed number of steps.

``python -m benchmarks.tau_streams --work DIR [--collection layout:nlp:default] [--epochs 466]
[--seeds 0,1,2] [--jobs 2] [--json F] [--profile small]``

The trainer since issue #14 draws its batches from ``tpuprep.ConfigBatches`` (``"configbatches"``: a
generator per item, seeded by seed, epoch, graph and batch). The trainer before it (RESULTS.md §5,
commit ``3a83bd5``) drew from one generator (``"legacy"``: ``PCG64([seed, 1])``, a permutation of the
graphs per epoch, then ``sort(choice(c_u, k, replace=False))`` rows of each graph), read from the graph
held whole. ``LegacyStream`` replays that stream through today's trainer (``train(..., batches=)``), so
the two runs of a seed differ in which rows are drawn and nothing else; with a fixed step count (no
time budget) each run is deterministic and independent of the machine's speed. Each run is scored on
the valid split like ``benchmarks.training`` (the same shards: ``DIR/synth`` and ``DIR/shards``, made
once). Runs go ``--jobs`` at a time in separate processes (one BLAS thread each).
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

STREAMS = ("legacy", "configbatches")


class LegacyStream:
    """The pre-#14 trainer's batches: one ``PCG64([seed, 1])`` generator for the whole run; each epoch a
    permutation of the graphs, then ``min(k, c_u)`` sorted rows of each drawn without replacement."""

    def __init__(self, ds: Any, graph_ids: list[str], seed: int, k: int):
        self.ds, self.ids, self.k = ds, graph_ids, k
        self.rng = np.random.Generator(np.random.PCG64([seed, 1]))
        self.structures = {g: ds.load_graph(g, configs=False) for g in graph_ids}

    def set_epoch(self, epoch: int) -> None:
        """The stream runs on across epochs (one generator), as the old trainer's did."""

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self):
        for gid in (self.ids[i] for i in self.rng.permutation(len(self.ids))):
            c_u = self.structures[gid].num_unique_configs
            rows = np.sort(self.rng.choice(c_u, min(self.k, c_u), replace=False))
            yield SimpleNamespace(graph_id=gid, structure=self.structures[gid],
                                  sample=self.ds.read_configs(gid, rows))


def one_run(shards: str, collection: str, stream: str, seed: int, epochs: int) -> dict:
    """Train ``epochs`` epochs with ``stream`` and ``seed``; τ on the valid split."""
    import tpuprep
    from tpuprep.train import TrainConfig, evaluate, train

    ds = tpuprep.open_dataset(shards)
    cfg = TrainConfig(epochs=epochs, seed=seed, validate=False)
    batches = (lambda ids: LegacyStream(ds, ids, seed, cfg.batch_configs)) if stream == "legacy" else None
    ranker = train(ds, collection, cfg, log=None, batches=batches)
    summary = evaluate(ds, [ranker], split="valid", log=None).summary[collection]
    return {"stream": stream, "seed": seed, "steps": ranker.history[-1]["steps"], "tau": summary["tau"]}


def main() -> None:
    from .training import prepare

    ap = argparse.ArgumentParser(prog="python -m benchmarks.tau_streams")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder of benchmarks.training (reused)")
    ap.add_argument("--collection", default="layout:nlp:default")
    ap.add_argument("--epochs", type=int, default=466, help="466 x 12 graphs = 5,592 steps (§5: 5,595)")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (one process each)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--profile", default="small", help="synthetic profile (tiny: a smoke run)")
    args = ap.parse_args()
    _, shards = prepare(args.work, args.profile)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = [(str(shards), args.collection, stream, seed, args.epochs) for seed in seeds for stream in STREAMS]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one_run, *zip(*runs, strict=True)))
    for row in rows:
        print(json.dumps(row), flush=True)
    taus = {s: np.array([r["tau"] for r in rows if r["stream"] == s]) for s in STREAMS}
    diff = taus["configbatches"] - taus["legacy"]
    summary = {s: {"mean": float(t.mean()), "min": float(t.min()), "max": float(t.max())} for s, t in taus.items()}
    summary["configbatches_minus_legacy"] = {"mean": float(diff.mean()), "sd": float(diff.std(ddof=1))
                                             if len(diff) > 1 else float("nan")}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"collection": args.collection, "epochs": args.epochs, "runs": rows,
                                         "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
