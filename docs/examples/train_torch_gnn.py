"""Train a compact GraphSAGE ranker (the TGraph recipe) in PyTorch on tpuprep shards, then score the valid split.

Inputs per graph come from ``tpuprep.train.features`` (the NumPy trainer's own, so the two compare like for
like): node features (n, 177) — node_feat cols 0–133 standardised with the collection's train statistics,
the layout columns one-hot, a configurable-node flag — and an opcode embedding. Per layout config, every
configurable node gets its 18 layout values (7-way one-hot each) plus 9 derived layout features
(``derived_config_features``: lane alignment, a layout change, leaving the graph's modal output or
operand layout, weighted by the node's work, ...); five config summaries (``config_summary``) and, for tile, the 42
``tile_config_features`` go straight to the head. GraphSAGE layers average producers and consumers with
separate weights (residual, GELU) over all k configs at once; mean pooling; an MLP gives one score per
config (higher = slower). Loss: pairwise hinge (margin 1) over the k configs of a graph; AdamW with
linear warm-up and a cosine decay over the time budget.

Training reads ``tpuprep.torch.ConfigBatchDataset`` through a ``torch.utils.data.DataLoader`` (one graph's
k configs per step, ``set_epoch`` every epoch) until ``--time-budget`` seconds have passed. Validation
scores every unique config of every valid graph (``Dataset.iter_config_blocks``, one block at a time),
expands the scores to every original config (``config_inverse``) and takes Kendall's tau-b against the
original runtimes (tile: runtime / normalizer), as ``tpuprep evaluate`` does; the mean over graphs is
the last line printed.

Usage: python train_torch_gnn.py --shards DIR --collection C [--time-budget S] [--k K] [--lr LR] [--workers W] [--seed N]
  -> progress lines, then ``tau=<mean Kendall tau over the valid graphs>`` as the last line.
Needs tpuprep[torch]; CPU is fine.
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from collections.abc import Callable, Iterable

import numpy as np
import torch
from torch import nn
from torch.nn.functional import gelu, one_hot
from torch.utils.data import DataLoader

import tpuprep
from tpuprep.torch import ConfigBatchDataset
from tpuprep.train.features import (
    N_DERIVED,
    N_FEAT,
    N_OPCODES,
    N_SLOTS,
    N_SUMMARY,
    N_TILE_INPUT,
    clean_stats,
    config_summary,
    derived_config_features,
    prepare_graph,
    tile_config_features,
)
from tpuprep.train.metrics import expand_to_original, kendall_tau
from tpuprep.train.stream import config_digest


class GraphInputs:
    """Model inputs of a collection's graphs, built once per graph and cached (graphs are small).

    ``graph(gid)``: dict of tensors x (n, 177) float32, opcode (n,) int64, src / dst (m,) int64 (edge
    [src, dst]: src consumes dst), deg_in / deg_out (n, 1) float32 (≥ 1), pos (nc,) int64 configurable nodes.
    ``configs(gid, values)``: per-config inputs of ``values`` — layout (k, nc, 18) int8 → cfg (k, nc, 134)
    and extra (k, 3); tile config_feat (k, 24) → extra (k, 42); all float32."""

    def __init__(self, ds: tpuprep.Dataset, collection: str):
        self.ds, self.kind = ds, collection.split(":")[0]
        self.mean, self.std = clean_stats(*ds.normalizer(collection))
        self.cache: dict[str, tuple] = {}

    def prepared(self, gid: str) -> tuple:
        if gid not in self.cache:
            g = self.ds.load_graph(gid, configs=False)
            pg = prepare_graph(g, self.kind, self.mean, self.std, layers=1,
                               digest=config_digest(self.ds, g, self.kind))
            e = torch.from_numpy(np.asarray(g.edge_index, np.int64).reshape(-1, 2))
            ones = torch.ones(len(e))
            deg_in = torch.zeros(pg.n_nodes).index_add_(0, e[:, 0], ones).clamp(min=1)[:, None]
            deg_out = torch.zeros(pg.n_nodes).index_add_(0, e[:, 1], ones).clamp(min=1)[:, None]
            tensors = {"x": torch.from_numpy(pg.x), "opcode": torch.from_numpy(pg.opcode), "src": e[:, 0],
                       "dst": e[:, 1], "deg_in": deg_in, "deg_out": deg_out, "pos": torch.from_numpy(pg.config_pos)}
            self.cache[gid] = (pg, tensors)
        return self.cache[gid]

    def graph(self, gid: str) -> dict[str, torch.Tensor]:
        return self.prepared(gid)[1]

    def configs(self, gid: str, values: np.ndarray) -> dict[str, torch.Tensor]:
        pg = self.prepared(gid)[0]
        if self.kind == "tile":
            return {"extra": torch.from_numpy(tile_config_features(values, extents=pg.tile_extents))}
        derived, violation = derived_config_features(pg, values)  # (k, nc, 8), (k,)
        slots = one_hot(torch.from_numpy(np.asarray(values, np.int64) + 1), 7).flatten(2).float()  # (k, nc, 126)
        return {"cfg": torch.cat([slots, torch.from_numpy(derived)], 2),
                "extra": torch.from_numpy(config_summary(pg, derived, violation))}


class SageRanker(nn.Module):
    """Scores (k,) float32 of a graph's k configs from ``GraphInputs.graph`` and ``GraphInputs.configs``."""

    def __init__(self, layout: bool, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.node = nn.Linear(N_FEAT, hidden)
        self.opcode = nn.Embedding(N_OPCODES, hidden)
        self.config = nn.Linear(N_SLOTS * 7 + N_DERIVED, hidden) if layout else None
        self.convs = nn.ModuleList(nn.ModuleDict({"self": nn.Linear(hidden, hidden), "inp": nn.Linear(
            hidden, hidden, bias=False), "out": nn.Linear(hidden, hidden, bias=False)}) for _ in range(layers))
        self.pool = nn.Linear(hidden, hidden)
        self.extra = nn.Linear(N_SUMMARY if layout else N_TILE_INPUT, hidden, bias=False)
        self.score = nn.Linear(hidden, 1)

    def forward(self, g: dict[str, torch.Tensor], c: dict[str, torch.Tensor]) -> torch.Tensor:
        h = self.node(g["x"]) + self.opcode(g["opcode"])  # (n, H)
        if self.config is not None:  # one copy of the graph per config, its layouts on the configurable nodes
            h = h.expand(len(c["cfg"]), -1, -1).clone()  # (k, n, H)
            h[:, g["pos"]] += self.config(c["cfg"])
        else:  # tile: the graph is the same for every config; the config joins at the head
            h = h[None]  # (1, n, H)
        h = gelu(h)
        src, dst = g["src"], g["dst"]
        for conv in self.convs:
            producers = torch.zeros_like(h).index_add_(1, src, h[:, dst]) / g["deg_in"]  # mean over operands
            consumers = torch.zeros_like(h).index_add_(1, dst, h[:, src]) / g["deg_out"]  # mean over users
            h = h + gelu(conv["self"](h) + conv["inp"](producers) + conv["out"](consumers))
        return self.score(gelu(self.pool(h.mean(1)) + self.extra(c["extra"]))).squeeze(1)  # (k,)


def hinge_loss(scores: torch.Tensor, runtime: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """Mean over pairs (i, j) with runtime[i] > runtime[j] of max(0, margin − (s_i − s_j))."""
    slower = runtime[:, None] > runtime[None, :]
    gaps = torch.relu(margin - (scores[:, None] - scores[None, :]))
    return (gaps * slower).sum() / slower.sum().clamp(min=1)


def lr_factor(progress: float, warmup: float = 0.05, final: float = 0.05) -> float:
    """Learning-rate multiplier at ``progress`` (0..1 of the budget): linear warm-up, then cosine to ``final``."""
    if progress < warmup:
        return max(progress / warmup, 0.01)
    return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * min(1.0, (progress - warmup) / (1 - warmup))))


def model_scorer(model: SageRanker, inputs: GraphInputs, chunk: int = 128) -> Callable:
    """``score(structure, block) -> (len(block.rows),) float64``: the model's scores, ``chunk`` configs at a time."""

    @torch.no_grad()
    def score(g: tpuprep.GraphRecord, block: tpuprep.ConfigSample) -> np.ndarray:
        values = block.node_config_feat if block.node_config_feat is not None else block.config_feat
        parts = [model(inputs.graph(g.graph_id), inputs.configs(g.graph_id, values[i:i + chunk]))
                 for i in range(0, len(values), chunk)]
        return torch.cat(parts).double().numpy()

    return score


def valid_tau(ds: tpuprep.Dataset, collection: str, score: Callable, split: str = "valid") -> list[float]:
    """Kendall tau-b per graph of ``split``: ``score`` over every unique config (streamed in blocks),
    expanded to every original config, against the original runtimes (tile: over the normalizers)."""
    taus = []
    for gid in ds.graph_ids(collection, split):
        g = ds.load_graph(gid, configs=False)
        pred_u = np.empty(g.num_unique_configs)
        for block in ds.iter_config_blocks(gid, 1024):
            pred_u[block.rows] = score(g, block)
        target = np.asarray(g.config_runtime_original, np.float64)
        if g.config_runtime_normalizers_original is not None:
            target = target / g.config_runtime_normalizers_original
        taus.append(kendall_tau(expand_to_original(pred_u, g.config_inverse), target))
    return taus


def train(ds: tpuprep.Dataset, collection: str, time_budget: float, k: int = 64, lr: float = 2e-3,
          workers: int = 0, seed: int = 0, max_epochs: int | None = None) -> tuple[SageRanker, GraphInputs]:
    """Train on the ``train`` split for ``time_budget`` seconds (or ``max_epochs`` epochs, if sooner)."""
    torch.manual_seed(seed)
    inputs = GraphInputs(ds, collection)
    model = SageRanker(inputs.kind == "layout")
    dataset = ConfigBatchDataset(tpuprep.ConfigBatches(ds, collection, split="train", k=k, strategy="uniform",
                                                       seed=seed))
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)

    def scores(item: dict) -> torch.Tensor:
        values = item["node_config_feat" if inputs.kind == "layout" else "config_feat"].numpy()
        return model(inputs.graph(item["graph_id"]), inputs.configs(item["graph_id"], values))

    fit(model, scores, dataset, loader, time_budget, lr, max_epochs)
    return model.eval(), inputs


def fit(model: nn.Module, scores: Callable, dataset: ConfigBatchDataset, loader: Iterable, time_budget: float,
        lr: float, max_epochs: int | None = None) -> None:
    """The training loop (``train_pyg.py`` runs it too): epochs of ``loader``'s items until ``time_budget``
    seconds or ``max_epochs``; per item, the pairwise hinge loss of ``scores(item)`` (k,) against its
    runtimes (tile: over the normalizers), AdamW at ``lr`` × ``lr_factor`` of the progress."""
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    started, epoch, steps, configs, shown = time.monotonic(), 0, 0, 0, 0.0
    while time.monotonic() - started < time_budget and epoch != max_epochs:
        dataset.set_epoch(epoch)
        total, steps_before = 0.0, steps
        for i, item in enumerate(loader):
            target = item["config_runtime"].double()
            if "config_runtime_normalizers" in item:  # tile: rank runtime / normalizer
                target = target / item["config_runtime_normalizers"].double()
            if len(target) < 2:
                continue
            loss = hinge_loss(scores(item), target)
            progress = (time.monotonic() - started) / time_budget  # of the time, or of the epochs if sooner
            if max_epochs:
                progress = max(progress, (epoch + i / len(dataset)) / max_epochs)
            for group in optim.param_groups:
                group["lr"] = lr * lr_factor(progress)
            optim.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optim.step()
            steps, configs, total = steps + 1, configs + len(target), total + loss.item()
            if time.monotonic() - started >= time_budget:
                break
        if time.monotonic() - shown >= 10:  # a progress line at most every 10 s
            print(f"epoch {epoch}: mean loss {total / max(steps - steps_before, 1):.4f}", flush=True)
            shown = time.monotonic()
        epoch += 1
    seconds = time.monotonic() - started
    print(f"trained {epoch} epochs, {steps} steps, {configs} configs in {seconds:.1f} s "
          f"({configs / seconds:.0f} configs/s)")


def parse_args(description: str) -> argparse.Namespace:
    """The flags of this example and of ``train_pyg.py``."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--shards", required=True)
    parser.add_argument("--collection", required=True, help="e.g. layout:xla:random or tile:xla")
    parser.add_argument("--time-budget", type=float, default=120.0, help="seconds of training (default 120)")
    parser.add_argument("--k", type=int, default=64, help="configs per batch (one graph each)")
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (AdamW)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def report(ds: tpuprep.Dataset, collection: str, score: Callable) -> None:
    """Print the valid split's tau per graph and peak RSS, then ``tau=<mean>`` as the last line."""
    taus = valid_tau(ds, collection, score)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    defined = [t for t in taus if not np.isnan(t)]  # tau is undefined on a graph with < 2 distinct runtimes
    print(f"valid: {len(taus)} graphs ({len(taus) - len(defined)} without a defined tau), tau per graph "
          f"{np.round(taus, 3).tolist()}; peak RSS {rss:.0f} MB")
    print(f"tau={float(np.mean(defined)) if defined else float('nan'):.4f}")


def main() -> None:
    args = parse_args(__doc__)
    torch.set_num_threads(1)
    ds = tpuprep.open_dataset(args.shards)
    model, inputs = train(ds, args.collection, args.time_budget, args.k, args.lr, args.workers, args.seed)
    report(ds, args.collection, model_scorer(model, inputs))


if __name__ == "__main__":
    main()
