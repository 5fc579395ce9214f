"""Identifiers every part of the generator shares: collection ids and splits, HLO opcode ids
(tpu_graphs hlo_opcode.h), element types (= node_feat one-hot columns) and their byte sizes,
node_feat column offsets, the configurable opcodes, ``MAX_CONFIGS`` and the "unset" layout value.
"""

from __future__ import annotations

from .. import tpugraphs

SPLITS = tpugraphs.SPLITS
CONFIGURABLE_OPCODES = tpugraphs.CONFIGURABLE_OPCODES
COL_LAYOUT, COL_DIMENSIONS = tpugraphs.COL_LAYOUT, tpugraphs.COL_DIMENSIONS
CONVOLUTION, DOT, RESHAPE = tpugraphs.OPCODE_CONVOLUTION, tpugraphs.OPCODE_DOT, tpugraphs.OPCODE_RESHAPE

COLLECTIONS: tuple[str, ...] = (  # generation order (the same set as tpugraphs.COLLECTIONS)
    "tile:xla",
    "layout:xla:default",
    "layout:xla:random",
    "layout:nlp:default",
    "layout:nlp:random",
)

# HLO opcode ids (tpu_graphs/process_data/xla/hlo_opcode.h)
ADD, AFTER_ALL, ALL_REDUCE, BITCAST = 2, 4, 5, 11
BROADCAST, COMPARE, CONCATENATE, CONSTANT, CONVERT = 13, 20, 22, 24, 25
COPY, CUSTOM_CALL, DIVIDE = 27, 31, 32
DYNAMIC_SLICE, DYNAMIC_UPDATE_SLICE, EXPONENTIAL, FUSION, GATHER = 35, 36, 37, 41, 42
GET_TUPLE_ELEMENT, INFEED, IOTA, LOG, AND, NOT, OR = 45, 47, 48, 50, 52, 53, 54
MAXIMUM, MINIMUM, MULTIPLY, NEGATE, OUTFEED, PAD, PARAMETER = 57, 58, 59, 60, 61, 62, 63
POWER, REDUCE, REDUCE_WINDOW, REVERSE, RNG = 66, 70, 72, 76, 77
RSQRT, SCATTER, SELECT, SELECT_AND_SCATTER, SHIFT_RIGHT_LOGICAL = 81, 82, 83, 84, 89
SLICE, SORT, SQRT, SUBTRACT, TANH, TRANSPOSE, TUPLE, WHILE = 92, 93, 94, 95, 96, 98, 100, 102
BITCAST_CONVERT, SHIFT_LEFT, LOGISTIC, CLAMP = 12, 87, 107, 17

# element types = node_feat column of the one-hot (TPUGRAPHS.md §3)
PRED, S8, S32, S64, U8, U16, U32, F16, F32, BF16 = 3, 4, 6, 7, 8, 9, 10, 12, 13, 15
TUPLE_T, TOKEN_T = 18, 20
ET_BYTES = {PRED: 1, S8: 1, S32: 4, S64: 8, U8: 1, U16: 2, U32: 4, F16: 2, F32: 4, BF16: 2}

# node_feat columns
COL_DIMS, COL_DIMS_PROD = tpugraphs.COLS_SHAPE_DIMS.start, tpugraphs.COL_SHAPE_PRODUCT  # cols 21..26, 28
COL_IS_ROOT, COL_DIMS_SUM, COL_TUPLE_SIZE, COL_PARAM_NUM = 0, 27, 29, 30
COL_WINDOW, COL_CONV, COL_FGC, COL_BGC = 37, 93, 107, 108
COL_SLICE, COL_DYN_SLICE, COL_PAD, COL_IS_STABLE = 109, 121, 125, 133
PRODUCT_COLUMNS: tuple[int, ...] = (28, 44, 52, 60, 68, 76, 84, 112, 116, 120, 124, 128, 132)
"""Aggregated ``_product`` columns of node_feat: 1 on nodes lacking the attribute (empty product)."""

MAX_CONFIGS = 100_040
"""The largest c in the published dataset (layout train/valid)."""

UNSET = -1.0
