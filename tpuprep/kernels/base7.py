"""Base-7 packing of layout configurations (SPEC §2.4, the TGraph convention).

Each node's 18 layout values (integers in −1..5) form three 6-slot blocks t (0 output, 1 operand 0,
2 operand 1 / kernel). Digit = value + 1 and ``code_t = Σ_{i=0..5} digit_{6t+i} · 7^i`` (first slot least
significant), so a node's configuration is 3 int32 codes in 0..117,648 and the codes are an exact key.
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel

SLOTS = 18
BLOCKS = 3
BLOCK = 6
MIN_VALUE = -1
MAX_VALUE = 5
POWERS = 7 ** np.arange(BLOCK, dtype=np.int32)  # (6,) int32: 1, 7, ..., 16807


@kernel
def pack_rows(values, out):
    """Pack (k, nc, 18) float values into (k, nc, 3) int32 codes written to ``out``.

    Returns −1 when every value is an integer in −1..5, else the flat index (into ``values``) of the
    first offending value; ``out`` is then partly written.
    """
    k, nc, _ = values.shape
    for r in range(k):
        for j in range(nc):
            for t in range(BLOCKS):
                code = 0
                scale = 1
                for i in range(BLOCK):
                    v = values[r, j, BLOCK * t + i]
                    digit = int(v) + 1 if MIN_VALUE <= v <= MAX_VALUE else -1
                    if digit < 0 or v != digit - 1:
                        return (r * nc + j) * SLOTS + BLOCK * t + i
                    code += digit * scale
                    scale *= 7
                out[r, j, t] = code
    return -1


class ConfigValueError(ValueError):
    """A layout value is not an integer in −1..5; names the row, node and slot."""

    def __init__(self, row: int, node: int, slot: int, value: float):
        self.row, self.node, self.slot, self.value = row, node, slot, value
        super().__init__(
            f"config row {row}, configurable node {node}, slot {slot}: value {value!r} "
            "is not an integer in -1..5"
        )


def pack_chunk(values: np.ndarray, first_row: int = 0) -> np.ndarray:
    """Validate and pack (k, nc, 18) layout values into (k, nc, 3) int32 codes.

    Raises ConfigValueError naming the original row (``first_row`` + local row), node and slot.
    """
    out = np.empty((values.shape[0], values.shape[1], BLOCKS), np.int32)
    if values.size == 0:
        return out
    bad = pack_rows(np.ascontiguousarray(values), out)
    if bad >= 0:
        row, rest = divmod(int(bad), values.shape[1] * SLOTS)
        node, slot = divmod(rest, SLOTS)
        raise ConfigValueError(first_row + row, node, slot, float(values[row, node, slot]))
    return out


def encode_base7(x: np.ndarray) -> np.ndarray:
    """Encode layout values (..., 18), integers in −1..5, as base-7 codes (..., 3) int32."""
    x = np.asarray(x)
    if x.shape[-1:] != (SLOTS,):
        raise ValueError(f"expected a last axis of {SLOTS} layout slots, got shape {x.shape}")
    lead = x.shape[:-1]
    # (configs, nodes, 18), so that an error names the config row and node of the caller's array
    nodes = lead[-1] if lead else 1
    rows = x.reshape(-1, nodes, SLOTS) if len(lead) >= 2 else x.reshape(1, nodes, SLOTS)
    return pack_chunk(rows.astype(np.float64, copy=False)).reshape(*lead, BLOCKS)


def decode_base7(codes: np.ndarray) -> np.ndarray:
    """Decode base-7 codes (..., 3) into layout values (..., 18) int8 in −1..5."""
    codes = np.asarray(codes)
    if codes.shape[-1:] != (BLOCKS,):
        raise ValueError(f"expected a last axis of {BLOCKS} codes, got shape {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() >= 7**BLOCK):
        raise ValueError(f"base-7 codes must lie in 0..{7**BLOCK - 1}")
    digits = (codes.astype(np.int32)[..., None] // POWERS) % 7  # (..., 3, 6)
    return (digits - 1).astype(np.int8).reshape(*codes.shape[:-1], SLOTS)
