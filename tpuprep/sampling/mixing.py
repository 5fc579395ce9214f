"""Which collections and graphs a ``ConfigBatches`` draws from: one collection, or a weighted mix of
collections of one kind (issue #38 item 2), checked before anything else is read.

``collection`` is a collection name, or a mapping {collection: weight} (weights finite numbers > 0, at
least one collection, all layout or all tile, each with the split). Collections are kept sorted by name
(the mapping's order does not matter); a one-entry mapping is that collection. ``graph_ids`` narrows
the collections to the listed graphs (in the order listed); a mix needs at least one graph left in
every collection.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Selection:
    """The collections (sorted names), their weights, and the graphs in plan order: collection by
    collection, the graphs of collection c being ``graph_ids[bounds[c]:bounds[c + 1]]``."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    graph_ids: list[str]
    counts: tuple[int, ...]

    @property
    def mixed(self) -> bool:
        return len(self.names) > 1

    def setting(self) -> Any:
        """The JSON value a state's fingerprint holds for the collections: the name of one collection
        (as before mixing existed), or [[name, weight], ...] of a mix."""
        if not self.mixed:
            return self.names[0]
        return [[n, float(w)] for n, w in zip(self.names, self.weights, strict=True)]


def _weights(collection: Any) -> dict[str, float]:
    if isinstance(collection, str):
        return {collection: 1.0}
    if not isinstance(collection, Mapping) or not collection:
        raise ValueError("collection must be a collection name or a non-empty mapping {collection: weight}, "
                         f"got {collection!r:.80}")
    out = {}
    for name, weight in collection.items():
        if not isinstance(name, str):
            raise ValueError(f"a mix's collections are names (str), got {name!r:.80}")
        if isinstance(weight, bool) or not isinstance(weight, int | float | np.integer | np.floating) \
                or not math.isfinite(weight) or weight <= 0:
            raise ValueError(f"the weight of {name} must be a finite number > 0, got {weight!r:.80}")
        out[name] = float(weight) if isinstance(weight, float | np.floating) else int(weight)
    return out


def select(ds: Any, collection: Any, split: str, graph_ids: Sequence[str] | None) -> Selection:
    """The ``Selection`` of a ``ConfigBatches`` (module docstring); ``KeyError`` for a collection, split or
    graph the dataset does not have, ``ValueError`` for a malformed mix."""
    weights = _weights(collection)
    names = sorted(weights)
    for name in names:
        if name not in ds.collections:
            raise KeyError(f"no collection {name!r} in {ds.root} (it has {', '.join(ds.collections)})")
        if split not in ds.splits(name):
            raise KeyError(f"{name} has no {split!r} split in {ds.root}")
    kinds = {name.split(":")[0] for name in names}
    if len(kinds) > 1:
        raise ValueError(f"a mix holds collections of one kind (layout or tile), not {' and '.join(sorted(kinds))}")
    listed = {name: ds.graph_ids(name, split) for name in names}
    if graph_ids is None:
        chosen = listed
    else:
        wanted = list(graph_ids)
        if len(set(wanted)) != len(wanted):
            raise ValueError("graph_ids lists a graph twice")
        known = {g for ids in listed.values() for g in ids}
        foreign = [g for g in wanted if g not in known]
        if foreign:
            raise KeyError(f"graph {foreign[0]!r} is not in {' or '.join(names)} {split} of {ds.root}")
        members = {name: set(ids) for name, ids in listed.items()}
        chosen = {name: [g for g in wanted if g in members[name]] for name in names}
        if len(names) > 1:
            empty = [name for name in names if not chosen[name]]
            if empty:
                raise ValueError(f"graph_ids leaves no graph of {empty[0]} in the mix")
    ids = [g for name in names for g in chosen[name]]
    return Selection(tuple(names), tuple(weights[n] for n in names), ids,
                     tuple(len(chosen[name]) for name in names))
