"""The states ``ConfigBatches`` saves and resumes from, and the checks that refuse a bad one in one line.

A *rank state* (``state_dict``) is {"version", "epoch", "base", "position", "world_size", "rank", "seed",
"fingerprint"}: every rank of a lockstep world has consumed ``position`` items of its share of the
layout from plan position ``base`` of epoch ``epoch``. A *worker state* (``worker_state``: what
torchdata's ``StatefulDataLoader`` saves for each DataLoader worker) is the rank state of the pass the
worker is in (``position`` = the share index the pass began at) plus {"worker": i, "num_workers": n,
"next": j}: the worker's next batch is share index j (j ≡ position + i mod n), so the worker yields
j, j + n, j + 2n, … of the share. All values are JSON ints and strings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .plan import MAX_EPOCH
from .sharding import share_length

STATE_VERSION = 2


def check_int(value: Any, name: str, top: int | None = None) -> int:
    """``value`` as an int when it is an int (Python or NumPy, not bool) in 0 … ``top``; else
    ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0 \
            or (top is not None and value > top):
        bound = "≥ 0" if top is None else f"in 0..{top}"
        raise ValueError(f"{name} must be an int {bound}, got {value!r:.80}")
    return int(value)


def check_epoch(epoch: Any) -> int:
    """An epoch number: an int in 0 … 2**63 − 1 (what the shared progress holds), else ``ValueError``."""
    return check_int(epoch, "epoch", MAX_EPOCH)


def rank_state(epoch: int, base: int, position: int, world_size: int, rank: int, seed: int,
               fingerprint: str) -> dict[str, Any]:
    return {"version": STATE_VERSION, "epoch": int(epoch), "base": int(base), "position": int(position),
            "world_size": world_size, "rank": rank, "seed": seed, "fingerprint": fingerprint}


def parse_state(state: Any, fingerprint: str, seed: int, total: int, drop_last: bool) -> tuple[int, int, int, int]:
    """(epoch, base, position, world_size) of a rank or worker state made by a ``ConfigBatches`` of this
    ``fingerprint`` and ``seed`` over epochs of ``total`` items; ``ValueError`` in one line otherwise."""
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ValueError(f"not a ConfigBatches state (version {STATE_VERSION}): {state!r:.80}")
    if state.get("fingerprint") != fingerprint or state.get("seed") != seed:
        raise ValueError("this state was made by a ConfigBatches with other settings or seed "
                         f"(fingerprint {state.get('fingerprint')}, seed {state.get('seed')}; this one "
                         f"{fingerprint}, seed {seed})")
    epoch, base, position, world = (state.get(key) for key in ("epoch", "base", "position", "world_size"))
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (epoch, base, position, world))
    if not ints or not 0 <= epoch <= MAX_EPOCH or world < 1 or not 0 <= base <= total or position < 0 \
            or position > share_length(total, world, drop_last, base):
        raise ValueError(f"bad epoch, base, position or world_size in the state: {epoch!r}, {base!r}, "
                         f"{position!r}, {world!r} (epochs of {total} items)")
    return epoch, base, position, world


def parse_worker(state: dict[str, Any], worker: int, num_workers: int, world_size: int, position: int,
                 world: int, length: int) -> int:
    """The share index a worker state says worker ``worker`` of ``num_workers`` reads next (module
    docstring), checked against this reader: the same worker count and world size (a worker's progress
    says nothing of the others'), and a ``next`` of this worker within the share (``length`` items)."""
    saved, of, nxt = state.get("worker"), state.get("num_workers"), state.get("next")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (saved, of, nxt)) or not 0 <= saved < of:
        raise ValueError(f"bad worker, num_workers or next in the state: {saved!r}, {of!r}, {nxt!r}")
    if (saved, of) != (worker, num_workers):
        raise ValueError(f"this state was saved by DataLoader worker {saved} of {of}: resume it with "
                         f"num_workers={of}, or save ds.state_dict(batch['position']), which any number of "
                         f"workers and ranks resumes (this is worker {worker} of {num_workers})")
    if world != world_size:
        raise ValueError(f"this DataLoader worker's state was saved in a world of {world} ranks, not "
                         f"{world_size}: resume across world sizes from ds.state_dict(batch['position'])")
    if nxt < position + saved or (nxt - position - saved) % of or nxt >= length + of:
        raise ValueError(f"bad next {nxt} in the state of worker {saved} of {of} (pass from {position}, "
                         f"{length} batches)")
    return nxt
