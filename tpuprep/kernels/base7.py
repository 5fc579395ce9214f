"""Base-7 packing of layout configurations (docs/spec.md §2.4, the TGraph convention).

Each node's 18 layout values (integers in −1..5) form three 6-slot blocks t (0 output, 1 operand 0,
2 operand 1 / kernel). Digit = value + 1 and ``code_t = Σ_{i=0..5} digit_{6t+i} · 7^i`` (first slot least
significant), so a node's configuration is 3 int32 codes in 0..117,648 and the codes are an exact key.
"""

from __future__ import annotations

import numpy as np

from .jit import kernel

SLOTS = 18
BLOCKS = 3
BLOCK = 6
MIN_VALUE = -1
MAX_VALUE = 5
POWERS = 7 ** np.arange(BLOCK, dtype=np.int32)  # (6,) int32: 1, 7, ..., 16807


@kernel
def all_valid(flat):
    """True when every value of the 1-D array is an integer in −1..5 (a branch-free, vectorised pass)."""
    ok = True
    for i in range(flat.size):
        v = flat[i]
        ok &= (v >= MIN_VALUE) & (v <= MAX_VALUE) & (v == np.floor(v))
    return ok


@kernel
def first_invalid(flat):
    """Index of the first value of the 1-D array that is not an integer in −1..5, or −1."""
    for i in range(flat.size):
        v = flat[i]
        if not (MIN_VALUE <= v <= MAX_VALUE and v == np.floor(v)):
            return i
    return -1


DIGIT_OFFSET = int(POWERS.sum())  # 19,608: the "+ 1" of all six digits of a code, added once
_W = tuple(np.float32(p) for p in POWERS)  # float32 weights: float32 values are packed in float32


@kernel
def pack_valid(flat, out):
    """Pack validated values, 6 per code: out[i] = Σ_j (flat[6i + j] + 1) · 7^j.

    flat: (6·N,) values already known to be integers in −1..5 (float or int dtype); out: (N,) int32.
    Computed as Σ_j flat[6i + j] · 7^j + ``DIGIT_OFFSET`` with float32 weights, so float32 input stays
    float32 (int weights promoted it to float64, half the lanes per vector register; the kernel is
    measured in benchmarks/RESULTS.md §21). Exact for every dtype: each partial sum is an integer of
    magnitude < 7^6 < 2^24.
    """
    for i in range(out.size):
        b = BLOCK * i
        s = (flat[b] + _W[1] * flat[b + 1] + _W[2] * flat[b + 2] + _W[3] * flat[b + 3]
             + _W[4] * flat[b + 4] + _W[5] * flat[b + 5])
        out[i] = np.int32(s) + DIGIT_OFFSET


class ConfigValueError(ValueError):
    """A layout value is not an integer in −1..5; names the row, node and slot."""

    def __init__(self, row: int, node: int, slot: int, value: float):
        self.row, self.node, self.slot, self.value = row, node, slot, value
        super().__init__(
            f"config row {row}, configurable node {node}, slot {slot}: value {value!r} "
            "is not an integer in -1..5"
        )


def pack_chunk(values: np.ndarray, first_row: int = 0, out: np.ndarray | None = None) -> np.ndarray:
    """Validate and pack (k, nc, 18) layout values into (k, nc, 3) int32 codes.

    ``out``: an optional int32 buffer of at least k·nc·3 items to write into (reused across chunks).
    Raises ConfigValueError naming the original row (``first_row`` + local row), node and slot.
    """
    shape = (values.shape[0], values.shape[1], BLOCKS)
    count = shape[0] * shape[1] * BLOCKS
    if out is None or out.size < count:
        out = np.empty(shape, np.int32)
    else:
        out = out.reshape(-1)[:count].reshape(shape)
    if values.size == 0:
        return out
    if values.dtype.kind == "f" and values.dtype.itemsize not in (4, 8):
        # float16 and long double have no Numba type; both convert exactly enough to judge integrality
        values = values.astype(np.float32 if values.dtype.itemsize < 4 else np.float64)
    flat = np.ascontiguousarray(values).reshape(-1)
    if not all_valid(flat):
        bad = first_invalid(flat)
        row, rest = divmod(int(bad), values.shape[1] * SLOTS)
        node, slot = divmod(rest, SLOTS)
        raise ConfigValueError(first_row + row, node, slot, float(values[row, node, slot]))
    pack_valid(flat, out.reshape(-1))
    return out


def encode_base7(x: np.ndarray) -> np.ndarray:
    """Encode layout values (..., 18), integers in −1..5, as base-7 codes (..., 3) int32.

    int8 values (what ``decode_base7`` and the readers give) are packed as they are; any other dtype
    goes through float64 (8 bytes per value: a caller encoding many configs should hand int8)."""
    x = np.asarray(x)
    if x.shape[-1:] != (SLOTS,):
        raise ValueError(f"expected a last axis of {SLOTS} layout slots, got shape {x.shape}")
    lead = x.shape[:-1]
    # (configs, nodes, 18), so that an error names the config row and node of the caller's array
    nodes = lead[-1] if lead else 1
    rows = x.reshape(-1, nodes, SLOTS) if len(lead) >= 2 else x.reshape(1, nodes, SLOTS)
    if rows.dtype != np.int8:
        rows = rows.astype(np.float64, copy=False)
    return pack_chunk(rows).reshape(*lead, BLOCKS)


def decode_base7(codes: np.ndarray) -> np.ndarray:
    """Decode base-7 codes (..., 3) into layout values (..., 18) int8 in −1..5."""
    codes = np.asarray(codes)
    if codes.shape[-1:] != (BLOCKS,):
        raise ValueError(f"expected a last axis of {BLOCKS} codes, got shape {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() >= 7**BLOCK):
        raise ValueError(f"base-7 codes must lie in 0..{7**BLOCK - 1}")
    digits = (codes.astype(np.int32)[..., None] // POWERS) % 7  # (..., 3, 6)
    return (digits - 1).astype(np.int8).reshape(*codes.shape[:-1], SLOTS)
