"""Arrow schemas and Parquet options built from ``schemas/*.json``, the single source of truth.

Each table file lists its columns with an Arrow type string (``int32``, ``list<int32>``,
``fixed_size_list<float32, 140>``, ``list<fixed_size_list<int32, 3>>`` ...), nullability, unit,
meaning, the Parquet encoding chosen for the column (``plain``, ``dictionary``, ``delta``,
``byte_stream_split``), its compression (``zstd``, the default, or ``none``) and whether statistics are
written for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pyarrow is imported where it is used: reading the manifest does not need it
    import pyarrow as pa

SCHEMA_VERSION = "3.3"
TABLES = ("layout_graphs", "layout_configs", "tile_graphs", "tile_configs")

_PRIMITIVE_NAMES = ("string", "binary", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                   "uint32", "uint64", "float32", "float64")
_ENCODINGS = {"delta": "DELTA_BINARY_PACKED", "byte_stream_split": "BYTE_STREAM_SPLIT", "plain": "PLAIN"}
COMPRESSIONS = {"zstd": "ZSTD", "none": "UNCOMPRESSED"}
"""A column's ``compression`` in the schema files → the codec Parquet's metadata names."""


def column_compression(column: dict[str, Any]) -> str:
    """The ``compression`` of a schema file's column entry: ``zstd`` unless it says ``none``."""
    return column.get("compression", "zstd")


_LIST = re.compile(r"list<(.+)>")
_FIXED = re.compile(r"fixed_size_list<(.+),\s*(\d+)>")


def split_type(text: str) -> tuple[str, str, int | None]:
    """One level of a schema type string: (``"fixed"`` | ``"list"`` | ``"primitive"``, inner type,
    fixed size or None). ``list<fixed_size_list<int32, 3>>`` → ("list", "fixed_size_list<int32, 3>", None)."""
    text = text.strip()
    if m := _FIXED.fullmatch(text):
        return "fixed", m.group(1).strip(), int(m.group(2))
    if m := _LIST.fullmatch(text):
        return "list", m.group(1).strip(), None
    return "primitive", text, None


def parse_type(text: str) -> pa.DataType:
    """Parse a type string of the schema files into an Arrow type."""
    import pyarrow as pa

    kind, inner, size = split_type(text)
    if kind == "fixed":
        return pa.list_(parse_type(inner), size)
    if kind == "list":
        return pa.list_(parse_type(inner))
    if inner in _PRIMITIVE_NAMES:
        return pa.bool_() if inner == "bool" else getattr(pa, inner)()
    raise ValueError(f"unknown type {text!r} in a schema file")


def leaf_paths(name: str, dtype: pa.DataType) -> list[str]:
    """Parquet leaf column paths of an Arrow column, e.g. ``codes.list.element.list.element``."""
    import pyarrow as pa

    if pa.types.is_list(dtype) or pa.types.is_fixed_size_list(dtype):
        return leaf_paths(f"{name}.list.element", dtype.value_type)
    return [name]


@dataclass(frozen=True)
class TableSchema:
    """One table's definition: the Arrow schema plus the Parquet writer options it implies."""

    name: str
    description: str
    sort_key: tuple[str, ...]
    columns: tuple[dict[str, Any], ...]
    arrow: pa.Schema

    def compression(self, column: str) -> str:
        """The ``compression`` of ``column`` (``zstd`` unless its schema entry says ``none``); KeyError
        for a column the table does not have."""
        for c in self.columns:
            if c["name"] == column:
                return column_compression(c)
        raise KeyError(f"table {self.name} has no column {column!r}")

    def since(self, column: str) -> tuple[int, int]:
        """(major, minor) of the schema version that added ``column`` (its entry's ``since``; (0, 0) for
        the columns of the first version): shards of an older version do not have it."""
        for c in self.columns:
            if c["name"] == column:
                major, minor = c.get("since", "0.0").split(".")
                return int(major), int(minor)
        raise KeyError(f"table {self.name} has no column {column!r}")

    def parquet_options(self, compression_level: int) -> dict[str, Any]:
        """Keyword arguments for ``pyarrow.parquet.ParquetWriter``: encodings, statistics and compression
        (zstd at ``compression_level``, per column when some column is stored uncompressed)."""
        dictionary: list[str] = []
        encodings: dict[str, str] = {}
        statistics: list[str] = []
        codecs: dict[str, str] = {}
        for col in self.columns:
            paths = leaf_paths(col["name"], self.arrow.field(col["name"]).type)
            enc = col.get("encoding", "plain")
            if enc == "dictionary":
                dictionary += paths
            else:
                encodings.update({p: _ENCODINGS[enc] for p in paths})
            if col.get("statistics"):
                statistics += paths
            codecs.update(dict.fromkeys(paths, column_compression(col)))
        if set(codecs.values()) == {"zstd"}:
            compression: Any = "zstd"
            level: Any = compression_level
        else:  # pyarrow takes a level only for the columns of a codec that has levels
            compression = codecs
            level = {p: compression_level for p, c in codecs.items() if c == "zstd"}
        return {
            "use_dictionary": dictionary,
            "column_encoding": encodings,
            "write_statistics": statistics,
            "compression": compression,
            "compression_level": level,
        }


def _load_json(name: str) -> dict[str, Any]:
    return json.loads(resources.files("tpuprep").joinpath("schemas", f"{name}.json").read_text())


@cache
def table_schema(name: str) -> TableSchema:
    """The ``TableSchema`` of ``layout_graphs``, ``layout_configs``, ``tile_graphs`` or ``tile_configs``."""
    import pyarrow as pa

    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    doc = _load_json(name)
    if doc["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"schemas/{name}.json has version {doc['schema_version']}, expected {SCHEMA_VERSION}")
    fields = []
    for col in doc["columns"]:
        meta = {"description": col["description"]}
        if col.get("unit"):
            meta["unit"] = col["unit"]
        fields.append(pa.field(col["name"], parse_type(col["type"]), nullable=col["nullable"], metadata=meta))
    arrow = pa.schema(fields, metadata={"schema_version": SCHEMA_VERSION, "table": name})
    return TableSchema(name, doc["description"], tuple(doc["sort_key"]), tuple(doc["columns"]), arrow)


def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of ``manifest.json``."""
    return _load_json("manifest.schema")


def run_schema() -> dict[str, Any]:
    """The JSON Schema of a ``tpuprep run`` file (``schemas/run.schema.json``)."""
    return _load_json("run.schema")


def table_name(kind: str, table: str) -> str:
    """``table_name("layout", "configs") == "layout_configs"``."""
    return f"{kind}_{table}"
