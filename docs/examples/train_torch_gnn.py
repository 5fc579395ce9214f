"""Train a compact GraphSAGE ranker (the TGraph recipe) in PyTorch on tpuprep shards, then score the valid split.

The model: an opcode embedding plus the normalised node features (``ds.normalizer``), the configuration
features of each config scattered onto its configurable nodes (layout: 18 layout values one-hot over
-1..5 per configurable node; tile: the (24,) config features added to every node), GraphSAGE layers
(mean of both edge directions) over all k configs at once, mean-pooled over all nodes and over the
configurable nodes, and an MLP giving one score per config (higher = slower). Loss: pairwise hinge over
the k sampled configs of a graph (a slower config must score higher by a margin).

Training reads ``tpuprep.torch.ConfigBatchDataset`` through a ``torch.utils.data.DataLoader`` (one graph's
k configs per step, ``set_epoch`` every epoch) until ``--time-budget`` seconds have passed. Validation
scores every unique config of every valid graph (``Dataset.iter_config_blocks``, one block at a time),
expands the scores to every original config (``config_inverse``) and takes Kendall's tau-b against the
original runtimes (tile: runtime / normalizer), as ``tpuprep evaluate`` does; the mean over graphs is
the last line printed.

Usage: python train_torch_gnn.py --shards DIR --collection C [--time-budget S] [--k K] [--workers W]
  -> progress lines, then ``tau=<mean Kendall tau over the valid graphs>`` as the last line.
Needs tpuprep[torch]; CPU is fine.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

import tpuprep
from tpuprep.torch import ConfigBatchDataset
from tpuprep.train.metrics import expand_to_original, kendall_tau

OPCODES = 256  # node_opcode is uint8


class SageRanker(nn.Module):
    """Scores (k,) float32 for a graph's k configs. Inputs: node_feat (n, 140) float32, node_opcode (n,)
    int, edge_index (m, 2) int ([u, v]: u consumes v), and per kind node_config_ids (nc,) +
    node_config_feat (k, nc, 18) int8 (layout) or config_feat (k, 24) float32 (tile)."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, layout: bool, hidden: int = 64, layers: int = 3):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))  # (134,)
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32))  # (134,), never 0
        self.layout = layout
        self.opcode = nn.Embedding(OPCODES, hidden)
        self.node = nn.Linear(140, hidden)
        self.config = nn.Linear(18 * 7 if layout else 24, hidden)
        self.self_w = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.neigh_w = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        feat = b["node_feat"]
        x = torch.cat([((feat[:, :134] - self.mean) / self.std).clamp(-10, 10), feat[:, 134:]], 1)
        h = self.node(x) + self.opcode(b["node_opcode"].long())  # (n, H)
        if self.layout:
            cfg = b["node_config_feat"].long() + 1  # (k, nc, 18) in 0..6
            onehot = torch.nn.functional.one_hot(cfg, 7).flatten(2).float()  # (k, nc, 126)
            ids = b["node_config_ids"].long()
            h = h.expand(len(cfg), -1, -1).clone()  # (k, n, H): one copy of the graph per config
            h[:, ids] = h[:, ids] + self.config(onehot)
        else:
            ids = None
            h = h[None] + self.config(b["config_feat"])[:, None]  # (k, n, H)
        edges = b["edge_index"].long()
        src, dst = edges[:, 0], edges[:, 1]
        deg = torch.zeros(h.shape[1]).index_add_(0, src, torch.ones(len(src))).index_add_(
            0, dst, torch.ones(len(dst))).clamp(min=1)[None, :, None]
        for self_w, neigh_w, norm in zip(self.self_w, self.neigh_w, self.norms, strict=True):
            agg = torch.zeros_like(h).index_add_(1, src, h[:, dst]).index_add_(1, dst, h[:, src])
            h = h + torch.nn.functional.gelu(norm(self_w(h) + neigh_w(agg / deg)))
        pooled = h.mean(1)
        focus = h[:, ids].mean(1) if ids is not None else h.max(1).values
        return self.head(torch.cat([pooled, focus], 1)).squeeze(1)


def hinge_loss(scores: torch.Tensor, runtime: torch.Tensor, margin: float = 0.1) -> torch.Tensor:
    """Mean over pairs (i, j) with runtime[i] > runtime[j] of max(0, margin − (s_i − s_j))."""
    slower = runtime[:, None] > runtime[None, :]
    gaps = torch.relu(margin - (scores[:, None] - scores[None, :]))
    return (gaps * slower).sum() / slower.sum().clamp(min=1)


def structure_tensors(g: tpuprep.GraphRecord) -> dict[str, torch.Tensor]:
    out = {"node_feat": torch.from_numpy(g.node_feat.copy()), "node_opcode": torch.from_numpy(g.node_opcode.copy()),
           "edge_index": torch.from_numpy(g.edge_index.copy())}
    if g.node_config_ids is not None:
        out["node_config_ids"] = torch.from_numpy(g.node_config_ids.copy())
    return out


def model_scorer(model: SageRanker, chunk: int = 128) -> Callable:
    """``score(structure, block) -> (len(block.rows),) float64``: the model's scores, ``chunk`` configs at a time."""

    @torch.no_grad()
    def score(g: tpuprep.GraphRecord, block: tpuprep.ConfigSample) -> np.ndarray:
        base = structure_tensors(g)
        cfg = block.node_config_feat if block.node_config_feat is not None else block.config_feat
        key = "node_config_feat" if block.node_config_feat is not None else "config_feat"
        parts = [model({**base, key: torch.from_numpy(cfg[i:i + chunk])}) for i in range(0, len(cfg), chunk)]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True)
    parser.add_argument("--collection", required=True, help="e.g. layout:xla:random or tile:xla")
    parser.add_argument("--time-budget", type=float, default=120.0, help="seconds of training (default 120)")
    parser.add_argument("--k", type=int, default=32, help="configs per batch (one graph each)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    ds = tpuprep.open_dataset(args.shards)
    mean, std = ds.normalizer(args.collection)
    model = SageRanker(mean, std, args.collection.startswith("layout"))
    optim = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=1e-4)
    batches = tpuprep.ConfigBatches(ds, args.collection, split="train", k=args.k, strategy="uniform",
                                    seed=args.seed, batches_per_graph="sqrt")
    dataset = ConfigBatchDataset(batches)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers)
    started, epoch, steps, configs, shown = time.monotonic(), 0, 0, 0, 0.0
    while time.monotonic() - started < args.time_budget:
        dataset.set_epoch(epoch)
        total = 0.0
        for item in loader:
            if len(item["config_runtime"]) < 2:
                continue
            loss = hinge_loss(model(item), item["config_runtime"])
            optim.zero_grad()
            loss.backward()
            optim.step()
            steps, configs, total = steps + 1, configs + len(item["config_runtime"]), total + loss.item()
            if time.monotonic() - started >= args.time_budget:
                break
        if time.monotonic() - shown >= 10:  # a progress line at most every 10 s
            print(f"epoch {epoch}: mean loss {total / max(len(dataset), 1):.4f}", flush=True)
            shown = time.monotonic()
        epoch += 1
    seconds = time.monotonic() - started
    print(f"trained {epoch} epochs, {steps} steps, {configs} configs in {seconds:.1f} s "
          f"({configs / seconds:.0f} configs/s)")
    model.eval()
    taus = valid_tau(ds, args.collection, model_scorer(model))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    defined = [t for t in taus if not np.isnan(t)]  # tau is undefined on a graph with < 2 distinct runtimes
    print(f"valid: {len(taus)} graphs ({len(taus) - len(defined)} without a defined tau), tau per graph "
          f"{np.round(taus, 3).tolist()}; peak RSS {rss:.0f} MB")
    print(f"tau={float(np.mean(defined)) if defined else float('nan'):.4f}")


if __name__ == "__main__":
    main()
