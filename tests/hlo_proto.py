"""An independent truth for re-padding, read from the raw HLO protos of ../shared/real/pb.

A small protobuf wire-format reader (no protobuf package, no tpuprep): ``HloModuleProto`` →
computations (field 3) → instructions (field 2) with their opcode (2, a string), output shape (3:
dimensions 3, tuple_shapes 4, layout 5 → minor_to_major 1), ``dimensions`` (14) and convolution
dimension numbers (16: input_spatial_dimensions 11, kernel_spatial_dimensions 6). The converted npz
files list one node per instruction, computations and instructions in proto order (checked against
``node_opcode`` and the zero-padded features by the tests), so the −1-padded truth of the four
sequences follows from the instructions themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# TPUGRAPHS.md §6: the featurizer's opcode ids (hlo_opcode.h order; 97 and 101 unused)
_NAMES = """abs add add-dependency after-all all-reduce all-to-all atan2 batch-norm-grad batch-norm-inference
batch-norm-training bitcast bitcast-convert broadcast call ceil cholesky clamp collective-permute
count-leading-zeros compare complex concatenate conditional constant convert convolution copy copy-done
copy-start cosine custom-call divide domain dot dynamic-slice dynamic-update-slice exponential
exponential-minus-one fft floor fusion gather get-dimension-size set-dimension-size get-tuple-element imag
infeed iota is-finite log log-plus-one and not or xor map maximum minimum multiply negate outfeed pad parameter
partition-id popcnt power real recv recv-done reduce reduce-precision reduce-window remainder replica-id
reshape reverse rng rng-get-and-update-state rng-bit-generator round-nearest-afz rsqrt scatter select
select-and-scatter send send-done shift-left shift-right-arithmetic shift-right-logical sign sine slice sort
sqrt subtract tanh - transpose triangular-solve tuple - while cbrt all-gather collective-permute-start
collective-permute-done logistic dynamic-reshape all-reduce-start all-reduce-done reduce-scatter
all-gather-start all-gather-done opt-barrier async-start async-update async-done round-nearest-even
stochastic-convert tan"""
OPCODE_NAMES = _NAMES.split()
OPCODE_ID = {name: i + 1 for i, name in enumerate(OPCODE_NAMES) if name != "-"}
assert OPCODE_ID["transpose"] == 98 and OPCODE_ID["while"] == 102 and OPCODE_ID["tan"] == 120


def _varint(b: bytes, i: int) -> tuple[int, int]:
    """(value, next position) of the base-128 varint at ``i``: its bytes up to the first below 0x80."""
    end = i
    while b[end] >= 0x80:
        end += 1
    return sum((c & 0x7F) << (7 * k) for k, c in enumerate(b[i : end + 1])), end + 1


def fields(b: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) of one message: an int for varints, bytes otherwise."""
    out, i = [], 0
    while i < len(b):
        key, i = _varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(b, i)
        elif wire == 1:
            value, i = b[i : i + 8], i + 8
        elif wire == 5:
            value, i = b[i : i + 4], i + 4
        elif wire == 2:
            size, i = _varint(b, i)
            value, i = b[i : i + size], i + size
        else:
            raise ValueError(f"wire type {wire} is not read here")
        out.append((number, wire, value))
    return out


def _int64s(values: list[tuple[int, object]]) -> list[int]:
    """A repeated int64 field, packed or not (two's complement for negatives)."""
    out = []
    for wire, value in values:
        if wire == 0:
            raw = [value]
        else:
            raw, i = [], 0
            while i < len(value):
                x, i = _varint(value, i)
                raw.append(x)
        out += [x - (1 << 64) if x >= 1 << 63 else x for x in raw]
    return out


def _repeated(msg: bytes, number: int) -> list[tuple[int, object]]:
    return [(w, v) for n, w, v in fields(msg) if n == number]


@dataclass
class Instruction:
    opcode: str
    dims: list[int]  # shape dimensions ([] for a tuple or a scalar)
    is_tuple: bool
    minor_to_major: list[int]
    dimensions: list[int]  # the HLO ``dimensions`` attribute
    input_spatial: list[int] = field(default_factory=list)
    kernel_spatial: list[int] = field(default_factory=list)


def _instruction(msg: bytes) -> Instruction:
    opcode = next(v for n, _, v in fields(msg) if n == 2).decode()
    shape = next(v for n, _, v in fields(msg) if n == 3)
    layouts = [v for _, v in _repeated(shape, 5)]
    conv = [v for _, v in _repeated(msg, 16)]
    return Instruction(
        opcode=opcode,
        dims=_int64s(_repeated(shape, 3)),
        is_tuple=bool(_repeated(shape, 4)),
        minor_to_major=_int64s(_repeated(layouts[0], 1)) if layouts else [],
        dimensions=_int64s(_repeated(msg, 14)),
        input_spatial=_int64s(_repeated(conv[0], 11)) if conv else [],
        kernel_spatial=_int64s(_repeated(conv[0], 6)) if conv else [],
    )


def module_instructions(module: bytes) -> tuple[str, list[Instruction]]:
    """(module name, every instruction of every computation, in proto order) of an HloModuleProto."""
    name = next(v for n, _, v in fields(module) if n == 1).decode()
    return name, [_instruction(i) for _, comp in _repeated(module, 3) for _, i in _repeated(comp, 2)]


def layout_module(path: Path) -> tuple[str, list[Instruction]]:
    """module_tuning_data_layout.pb: field 1 is the HloModuleProto."""
    return module_instructions(next(v for n, _, v in fields(path.read_bytes()) if n == 1))


def tile_modules(path: Path) -> list[tuple[str, list[Instruction]]]:
    """op_tuning_data.pb: every field 1 holds one kernel, whose field 1 is its HloModuleProto."""
    return [module_instructions(next(v for n, _, v in fields(entry) if n == 1))
            for _, entry in _repeated(path.read_bytes(), 1)]


def _padded(values: list[int], width: int, pad: float) -> list[float]:
    return [float(v) for v in values[:width]] + [pad] * max(0, width - len(values))


SEQUENCES = {  # node_feat columns of each sequence without sum/product, and how an instruction gives it
    "dimensions": (range(31, 37), lambda ins: ins.dimensions),
    "conv_input_spatial": (range(95, 99), lambda ins: ins.input_spatial),
    "conv_kernel_spatial": (range(101, 105), lambda ins: ins.kernel_spatial),
    "layout": (range(134, 140), lambda ins: ins.minor_to_major),
}


def truth(node_feat: np.ndarray, node_opcode: np.ndarray, instructions: list[Instruction]) -> np.ndarray:
    """The −1-padded truth (n, 140) float32 of a converted graph: ``node_feat`` with its four
    sequences rebuilt from the instructions and padded with −1. Asserts first that node i is
    instruction i: the same opcode, output dims and zero-padded sequences."""
    assert len(instructions) == len(node_feat) == len(node_opcode)
    out = np.array(node_feat, np.float32, copy=True)
    for i, ins in enumerate(instructions):
        assert OPCODE_ID[ins.opcode] == int(node_opcode[i]), (i, ins.opcode, int(node_opcode[i]))
        assert list(node_feat[i, 21:27]) == _padded(ins.dims, 6, 0.0), i
        for cols, get in SEQUENCES.values():
            cols = list(cols)
            assert list(node_feat[i, cols]) == _padded(get(ins), len(cols), 0.0), (i, cols)
            out[i, cols] = _padded(get(ins), len(cols), -1.0)
    return out
