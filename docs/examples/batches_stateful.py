"""Checkpoint a training loop's data mid-epoch and resume it with torchdata's StatefulDataLoader over
tpuprep's ConfigBatchDataset (needs tpuprep[torch]): 2 persistent workers, set_epoch before every epoch,
the loader's state saved in a JSON checkpoint; a new process would build the same loader, load the
checkpoint and go on with exactly the batches the uninterrupted run had left, in the same order.

Usage: python batches_stateful.py SHARDS COLLECTION [STOP]  -> one line per run; the run interrupted
after STOP steps of epoch 1 (default 5) and resumed yields what the uninterrupted run yielded.
"""

import json
import sys

from torchdata.stateful_dataloader import StatefulDataLoader

import tpuprep
from tpuprep.torch import ConfigBatchDataset

EPOCHS = 3


def make_loader(shards: str, collection: str) -> StatefulDataLoader:
    """The same settings every time: a loader resumes a state of the same sampler and number of workers."""
    batches = tpuprep.ConfigBatches(tpuprep.open_dataset(shards), collection, split="train", k=16,
                                    strategy="uniform", seed=0, batches_per_graph=3)
    return StatefulDataLoader(ConfigBatchDataset(batches), batch_size=None, num_workers=2,
                              persistent_workers=True)


def train(loader: StatefulDataLoader, checkpoint: dict | None, stop_after: int | None) -> tuple[list, dict]:
    """The loop: (epoch, graph_id, rows) of every step taken, and the last checkpoint written."""
    start = 0
    if checkpoint is not None:  # resume: the epoch it was in, and the loader's own state
        start = checkpoint["epoch"]
        loader.load_state_dict(checkpoint["loader"])
    steps, saved = [], checkpoint
    for epoch in range(start, EPOCHS):
        loader.dataset.set_epoch(epoch)  # every epoch, on the dataset the loader holds
        for item in loader:
            steps.append((epoch, item["graph_id"], item["rows"].tolist()))  # a training step goes here
            saved = json.loads(json.dumps({"epoch": epoch, "loader": loader.state_dict()}))  # e.g. every N steps
            if stop_after is not None and epoch == 1 and len([s for s in steps if s[0] == 1]) == stop_after:
                return steps, saved  # the job is killed here
    return steps, saved


if __name__ == "__main__":
    shards, collection = sys.argv[1:3]
    stop = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    whole, _ = train(make_loader(shards, collection), None, None)
    print("uninterrupted", len(whole), "steps")
    before, checkpoint = train(make_loader(shards, collection), None, stop)
    after, _ = train(make_loader(shards, collection), checkpoint, None)  # a new loader, as after a restart
    print("interrupted after", len(before), "steps, resumed for", len(after), "more")
    print("same steps:", before + after == whole)
