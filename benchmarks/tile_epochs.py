"""``python -m benchmarks.tile_epochs SHARDS [--structures N] [--epochs E]``: CPU per epoch of one
``ConfigBatches`` over ``tile:xla`` train (64-config batches), the way a training loop keeps it across
epochs (benchmarks/RESULTS.md §12: a tile graph's configs are read once, then sliced)."""

from __future__ import annotations

import argparse
import time

import tpuprep


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tile_epochs")
    ap.add_argument("shards")
    ap.add_argument("--structures", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    ds = tpuprep.open_dataset(args.shards)
    batches = tpuprep.ConfigBatches(ds, "tile:xla", split="train", k=64, seed=0, structures=args.structures)
    for epoch in range(args.epochs):
        batches.set_epoch(epoch)
        started, configs = time.process_time(), 0
        for b in batches:
            configs += len(b.sample.rows)
        cpu = time.process_time() - started
        print(f"epoch {epoch}: {len(batches)} batches, {configs} configs, CPU {cpu:.3f} s "
              f"({configs / max(cpu, 1e-9):,.0f} configs/s)")


if __name__ == "__main__":
    main()
