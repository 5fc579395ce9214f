"""One epoch of k-config batches with tpuprep's ConfigBatches: as NumPy, as a torch DataLoader with 2
workers, and as JAX arrays; then a resume mid-epoch (needs tpuprep[torch,jax]).

Usage: python batches_tpuprep.py SHARDS COLLECTION  -> prints one line per stack.
"""

import sys

import numpy as np
from torch.utils.data import DataLoader

import tpuprep
from tpuprep.jax import JaxBatches
from tpuprep.torch import ConfigBatchDataset

if __name__ == "__main__":
    shards, collection = sys.argv[1:3]
    ds = tpuprep.open_dataset(shards)

    def make() -> tpuprep.ConfigBatches:
        # k = 16 sampled unique configs per batch; two batches per graph, or "sqrt" for ∝ √(configs)
        return tpuprep.ConfigBatches(ds, collection, split="train", k=16, strategy="pairs", seed=0,
                                     rank=0, world_size=1, batches_per_graph=2, structures=32)

    batches = make()
    batches.set_epoch(0)  # every epoch: a new plan and new draws, the same for every rank
    for b in batches:  # NumPy: b.structure (GraphRecord, configs=False), b.sample (ConfigSample)
        runtimes = b.sample.config_runtime  # (k,) int64 ns; rows 2i, 2i+1 are close-runtime pairs
        assert (runtimes[0::2] <= runtimes[1::2]).all()
    print("numpy", len(batches), "batches of", b.sample.node_config_feat.shape, "node_config_feat")

    torch_ds = ConfigBatchDataset(make())
    loader = DataLoader(torch_ds, batch_size=None, num_workers=2)  # each worker reads every 2nd batch
    seen = []
    for item in loader:  # dicts of tensors: node_feat, edge_index, node_config_feat, config_runtime ...
        seen.append(item)
        if len(seen) == 3:
            break
    state = torch_ds.state_dict(seen[-1]["position"])  # JSON-able: epoch, position, seed, fingerprint
    resumed = ConfigBatchDataset(make())
    resumed.load_state_dict(state)
    resumed.set_epoch(state["epoch"])  # the resumed epoch keeps its resume point
    rest = list(DataLoader(resumed, batch_size=None, num_workers=2))
    print("torch", len(seen), "+", len(rest), "batches after a resume")

    for item in JaxBatches(make()):  # jax.numpy arrays; int64 (runtimes, rows) stay exact NumPy arrays
        assert isinstance(item["config_runtime"], np.ndarray)
    print("jax", item["node_config_feat"].dtype, item["config_runtime"].dtype)
