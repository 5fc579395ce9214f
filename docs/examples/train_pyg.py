"""Train a GraphSAGE ranker with PyTorch Geometric on tpuprep shards, then score the valid split.

Batches come from ``tpuprep.torch.ConfigBatchDataset`` through a ``DataLoader`` whose ``collate_fn`` is
``tpuprep.pyg.to_data``: every step is one ``ConfigGraph`` (a ``torch_geometric.data.Data``) holding one
graph and k of its configs. The model uses PyG's ``SAGEConv`` and ``global_mean_pool`` on the stored features
alone: ``node_feat`` standardised with the collection's train statistics (``Dataset.normalizer``) plus an
opcode embedding; for layout, the graph is copied once per config (k graphs in one disjoint union) and each
copy's configurable nodes get that config's 18 layout values, one-hot, and the size of the output dimension
each of the 6 output slots names (log1p of ``node_feat`` 21–26 at that index: which dimension is minor-most
is what makes a layout fast or slow); for tile, the config's 24 features join the pooled graph at the head. Each layer is a ``SAGEConv`` along the data flow (``edge_index``: operand
→ user, see ``tpuprep.pyg``) plus one against it, with a residual. Loss: pairwise hinge over the k configs;
AdamW with a warm-up and a cosine decay over the time budget (``train_torch_gnn.fit``).

Validation is ``train_torch_gnn.py``'s own (``valid_tau``: every unique config of every valid graph scored,
expanded to every original config, Kendall's tau-b against the original runtimes, over the normalizers for
tile), and so is the training loop (``fit``: the same loss, optimiser, schedule and budget), so the two
examples compare like for like; this file imports both from there (keep the two files side by side).

Usage: python train_pyg.py --shards DIR --collection C [--time-budget S] [--k K] [--lr LR] [--workers W] [--seed N]
  -> progress lines, then ``tau=<mean Kendall tau over the valid graphs>`` as the last line.
Needs tpuprep[pyg]; CPU is fine.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn.functional import gelu, one_hot
from torch.utils.data import DataLoader
from torch_geometric.nn import SAGEConv, global_mean_pool
from train_torch_gnn import fit, parse_args, report

import tpuprep
from tpuprep.pyg import ConfigGraph, to_data
from tpuprep.torch import ConfigBatchDataset

N_OPCODES = 256  # opcode ids are < 256 (docs/schema.md: node_opcode uint8)


class PygSageRanker(nn.Module):
    """Scores (k,) float32 of the k configs of one ``ConfigGraph`` (higher = slower)."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, layout: bool, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))  # (134,) train statistics
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32))
        self.layout = layout
        self.node = nn.Linear(140, hidden)
        self.opcode = nn.Embedding(N_OPCODES, hidden)
        self.config = nn.Linear(18 * 7 + 6, hidden) if layout else nn.Linear(24, hidden)
        self.along = nn.ModuleList(SAGEConv(hidden, hidden) for _ in range(layers))  # operands → user
        self.against = nn.ModuleList(SAGEConv(hidden, hidden) for _ in range(layers))  # users → operand
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, data: ConfigGraph) -> torch.Tensor:
        x = data.x.clone()
        x[:, :134] = (x[:, :134] - self.mean) / self.std
        h = self.node(x) + self.opcode(data.node_opcode)  # (n, H)
        n, k = h.shape[0], data.config_mask.shape[0]
        copies = k if self.layout else 1
        # the graph once per config: nodes of copy c are c·n … c·n + n − 1, edges shifted alike
        h = h.repeat(copies, 1)  # (copies·n, H)
        shift = torch.arange(copies).repeat_interleave(data.edge_index.shape[1]) * n
        edges = data.edge_index.repeat(1, copies) + shift
        graph_of_node = torch.arange(copies).repeat_interleave(n)
        if self.layout:  # each copy's configurable nodes get that config's layouts
            layouts = data.node_config_feat.long()  # (k, nc, 18) in −1..5
            values = one_hot(layouts + 1, 7).flatten(2).float()  # (k, nc, 126)
            # the size of the output dimension each output slot names (node_feat 21–26: the output shape)
            dims = data.x[data.node_config_ids, 21:27].expand(k, -1, -1)  # (k, nc, 6)
            named = dims.gather(2, layouts[..., :6].clamp(min=0)) * (layouts[..., :6] >= 0)
            values = torch.cat([values, torch.log1p(named)], 2)  # (k, nc, 132)
            at = (torch.arange(k)[:, None] * n + data.node_config_ids[None, :]).reshape(-1)
            h = h.index_add(0, at, self.config(values).reshape(-1, h.shape[1]))
        h = gelu(h)
        for along, against in zip(self.along, self.against, strict=True):
            h = h + gelu(along(h, edges) + against(h, edges.flip(0)))
        pooled = global_mean_pool(h, graph_of_node, size=copies)  # (copies, H)
        if not self.layout:  # tile: one graph, the k configs' features at the head
            pooled = pooled + self.config(data.config_feat)
        return self.head(pooled).squeeze(-1)  # (k,)


def train(ds: tpuprep.Dataset, collection: str, time_budget: float, k: int = 64, lr: float = 2e-3,
          workers: int = 0, seed: int = 0, max_epochs: int | None = None) -> PygSageRanker:
    """Train on the ``train`` split for ``time_budget`` seconds (or ``max_epochs`` epochs, if sooner)."""
    torch.manual_seed(seed)
    mean, std = ds.normalizer(collection)
    model = PygSageRanker(mean, std, layout=collection.startswith("layout:"))
    dataset = ConfigBatchDataset(tpuprep.ConfigBatches(ds, collection, split="train", k=k, seed=seed))
    loader = DataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=to_data)  # ConfigGraphs
    fit(model, model, dataset, loader, time_budget, lr, max_epochs)
    return model.eval()


def pyg_scorer(model: PygSageRanker, chunk: int = 128):
    """``score(structure, block) -> (len(block.rows),) float64`` for ``valid_tau``, ``chunk`` configs at a time."""

    @torch.no_grad()
    def score(g: tpuprep.GraphRecord, block: tpuprep.ConfigSample) -> np.ndarray:
        structure = {"node_feat": g.node_feat, "node_opcode": g.node_opcode, "edge_index": g.edge_index,
                     "graph_id": g.graph_id}
        if g.node_config_ids is not None:
            structure["node_config_ids"] = g.node_config_ids
        parts = []
        for i in range(0, len(block.rows), chunk):
            configs = {"rows": block.rows[i:i + chunk], "group_size": block.group_size[i:i + chunk]}
            for key in ("node_config_feat", "config_feat"):
                if getattr(block, key) is not None:
                    configs[key] = getattr(block, key)[i:i + chunk]
            parts.append(model(to_data(structure | configs)))
        return torch.cat(parts).double().numpy()

    return score


def main() -> None:
    args = parse_args(__doc__)  # the flags of train_torch_gnn.py
    torch.set_num_threads(1)
    ds = tpuprep.open_dataset(args.shards)
    model = train(ds, args.collection, args.time_budget, args.k, args.lr, args.workers, args.seed)
    report(ds, args.collection, pyg_scorer(model))  # ends with tau=<mean over the valid graphs>


if __name__ == "__main__":
    main()
