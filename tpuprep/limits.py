"""How much one input file may make a build (or ``verify``) allocate, checked from the zip directory
and the ``.npy`` headers before any member is read (issue #27: a 1.1 MB tile file of zeros that
declared 1.5 M nodes and 20 M edges peaked at 4.3 GB).

The limits are the dataset's published maxima (TpuGraphs: layout n ≤ 43,615,
nc ≤ 3,143, c ≤ 100,040, so ``node_config_feat`` ≤ c × nc × 18 × 4 ≈ 22.6 GB; tile n ≈ 2..100,
c ≤ ≈ 7,000) with headroom, per kind of file:

==================================  ===========  ===========
limit                               layout       tile
==================================  ===========  ===========
nodes (node_feat rows)              700,000      10,000
edges (edge_index rows)             2,800,000    40,000
configs (config_runtime rows)       1,000,000    200,000
configurable nodes (nc)             50,000       —
node_config_feat inflated bytes     32 GiB       —
any member read whole, bytes        512 MiB      512 MiB
inflated ÷ compressed, read whole   400          400
==================================  ===========  ===========

The limits bound the members the build reads (``LAYOUT_KEYS`` / ``TILE_KEYS``): another member is never
inflated by it (issue #36 item 10). The ratio bound applies to the members read whole (all but
``node_config_feat``, which is streamed) once they inflate to more than ``RATIO_FREE_BYTES``; real members
stay below 110 : 1. Every member also must not claim more than DEFLATE can produce (``DEFLATE_MAX_RATIO``).

The environment variable ``TPUPREP_INPUT_LIMIT_SCALE`` (a positive number, default 1) multiplies
every limit (the ratio up to ``DEFLATE_MAX_RATIO``): set it for the build and for ``verify`` (on
every Dask worker too) to read files larger than the published dataset's. Users read this in
docs/cli.md ("Input limits").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .errors import BadInput, UsageError
from .io.npz import NpzFile
from .tpugraphs import LAYOUT_KEYS, TILE_KEYS

ENV_SCALE = "TPUPREP_INPUT_LIMIT_SCALE"
"""The environment variable whose value multiplies every input limit."""

DEFLATE_MAX_RATIO = 1100
"""No DEFLATE stream inflates by more than ~1032 : 1; a member that claims more is corrupt."""

RATIO_FREE_BYTES = 4 << 20
"""Members read whole that inflate to at most this many bytes are not held to ``InputLimits.ratio``."""

STREAMED = "node_config_feat"
"""The one member a build streams in row chunks instead of reading it whole."""


@dataclass(frozen=True)
class InputLimits:
    """The bounds of one kind of input file: rows of node_feat (``nodes``), of edge_index (``edges``),
    of config_runtime (``configs``), of node_config_ids (``config_nodes``, None: not bounded), the
    inflated bytes of node_config_feat (``config_bytes``) and of any member read whole
    (``whole_bytes``), and the inflated ÷ compressed ``ratio`` of a member read whole."""

    nodes: int
    edges: int
    configs: int
    config_nodes: int | None
    config_bytes: int | None
    whole_bytes: int
    ratio: float
    published: str

    def scaled(self, factor: float) -> InputLimits:
        """Every bound multiplied by ``factor`` (the ratio at most ``DEFLATE_MAX_RATIO``)."""
        def up(v: int | None) -> int | None:
            return None if v is None else int(v * factor)
        return InputLimits(up(self.nodes), up(self.edges), up(self.configs), up(self.config_nodes),
                           up(self.config_bytes), up(self.whole_bytes),
                           min(self.ratio * factor, DEFLATE_MAX_RATIO), self.published)


LIMITS = {
    "layout": InputLimits(nodes=700_000, edges=2_800_000, configs=1_000_000, config_nodes=50_000,
                          config_bytes=32 << 30, whole_bytes=512 << 20, ratio=400.0,
                          published="n ≤ 43,615, nc ≤ 3,143, c ≤ 100,040"),
    "tile": InputLimits(nodes=10_000, edges=40_000, configs=200_000, config_nodes=None, config_bytes=None,
                        whole_bytes=512 << 20, ratio=400.0, published="n ≈ 2..100, c ≤ ≈ 7,000"),
}
"""The default limits per kind of file (``layout``, ``tile``)."""


def scale() -> float:
    """The factor of ``TPUPREP_INPUT_LIMIT_SCALE`` (1 when unset); UsageError when it is not a
    positive number."""
    text = os.environ.get(ENV_SCALE, "").strip()
    if not text:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{ENV_SCALE}={text!r} is not a positive number (it multiplies every input limit)")
    return value


def limits_for(kind: str) -> InputLimits:
    """The limits of a ``layout`` or ``tile`` file, scaled by ``TPUPREP_INPUT_LIMIT_SCALE``."""
    factor = scale()
    base = LIMITS[kind]
    return base if factor == 1.0 else base.scaled(factor)


def _over(f: NpzFile, key: str, what: str, count: int, limit: int | None, kind: str, lim: InputLimits) -> None:
    if limit is not None and count > limit:
        raise BadInput(f.path, key, f"{what} {count:,} exceeds the limit of {limit:,} for a {kind} file "
                       f"(the published dataset has {lim.published}; {ENV_SCALE} raises the limits)")


def check_input_limits(f: NpzFile, kind: str) -> None:
    """Raise BadInput (naming the file, the key and the limit) when the zip directory or an ``.npy``
    header of ``f``, a ``layout`` or ``tile`` file, declares more than the limits allow. Reads
    nothing: ``NpzFile`` has parsed the headers already. Members are checked in the zip directory's order, so
    with several over their limits the first of them is the one reported. Only the members a ``kind``
    file is read for (``LAYOUT_KEYS`` / ``TILE_KEYS``) are bounded: another member is never inflated by
    the build, so its size cannot cost anything (it must still not claim more than DEFLATE can make)."""
    lim = limits_for(kind)
    read = LAYOUT_KEYS if kind == "layout" else TILE_KEYS
    members = f.members
    for key, m in members.items():
        if m.compress_type and m.file_size > DEFLATE_MAX_RATIO * m.compress_size + (1 << 20):
            raise BadInput(f.path, key, f"declares {m.file_size:,} bytes from {m.compress_size:,} compressed "
                           "bytes, more than DEFLATE can produce (a zip bomb?)")
    rows = {"node_feat": ("nodes", lim.nodes), "edge_index": ("edges", lim.edges),
            "config_runtime": ("configs", lim.configs), "node_config_ids": ("configurable nodes", lim.config_nodes)}
    for key, (what, limit) in rows.items():
        if key in members and members[key].shape:
            _over(f, key, what, members[key].shape[0], limit, kind, lim)
    for key, m in members.items():
        if key not in read:
            continue
        if key == STREAMED and kind == "layout":
            _over(f, key, "inflated bytes", m.file_size, lim.config_bytes, kind, lim)
            continue
        _over(f, key, "inflated bytes (read whole)", m.file_size, lim.whole_bytes, kind, lim)
        if m.file_size > RATIO_FREE_BYTES and m.file_size > lim.ratio * max(m.compress_size, 1):
            raise BadInput(f.path, key, f"inflates {m.file_size / max(m.compress_size, 1):,.0f} : 1 "
                           f"({m.file_size:,} bytes from {m.compress_size:,}), above the limit of "
                           f"{lim.ratio:,.0f} : 1 for a member read whole (real files stay below 110 : 1; "
                           f"{ENV_SCALE} raises the limits)")
