"""A weighted mix of collections with tpuprep's ConfigBatches: one stream of batches drawn 3 : 1 from two
layout collections, each batch naming its collection; the over-weighted collection is up-sampled (its
graphs drawn again, with fresh rows), the other down-sampled; an epoch has as many batches as the
collections have together. Read in this process and by a torch DataLoader with 2 workers (needs
tpuprep[torch]), with a resume mid-epoch.

Usage: python batches_mix.py SHARDS COLLECTION=WEIGHT COLLECTION=WEIGHT ...  -> per epoch, batches per
collection; then the DataLoader's and the resumed stream's checks.
"""

import sys
from collections import Counter
from itertools import islice

from torch.utils.data import DataLoader

import tpuprep
from tpuprep.torch import ConfigBatchDataset

if __name__ == "__main__":
    shards, *pairs = sys.argv[1:]
    weights = {name: float(w) for name, w in (p.rsplit("=", 1) for p in pairs)}  # e.g. layout:xla:random=3
    ds = tpuprep.open_dataset(shards)

    def make() -> tpuprep.ConfigBatches:
        return tpuprep.ConfigBatches(ds, weights, split="train", k=16, seed=0, batches_per_graph=2)

    batches = make()
    for epoch in range(2):
        batches.set_epoch(epoch)
        counts = Counter(b.collection for b in batches)  # b.collection: the collection it was drawn for
        print(f"epoch {epoch}: {len(batches)} batches,", ", ".join(f"{c} {n}" for c, n in sorted(counts.items())))

    batches.set_epoch(0)
    want = [(b.graph_id, b.sample.rows.tolist()) for b in batches]
    loader = DataLoader(ConfigBatchDataset(make()), batch_size=None, num_workers=2)
    items = [(item["graph_id"], item["rows"].tolist()) for item in loader]  # dicts name their collection too
    print("DataLoader with 2 workers gives the same stream:", items == want)

    first = make()
    seen = [(b.graph_id, b.sample.rows.tolist()) for b in islice(first, 5)]  # a pass stopped after 5 batches
    state = first.state_dict()  # JSON-able; resumes the mix exactly, in any world size
    resumed = make()
    resumed.load_state_dict(state)
    print("resumed after 5 batches:", seen + [(b.graph_id, b.sample.rows.tolist()) for b in resumed] == want)
