"""Checks of the arguments of the reader's public methods, so that a wrong argument is reported as
such (``TypeError`` for a wrong type, ``ValueError`` for a wrong value: one line naming the argument)
before any shard is read, instead of surfacing as a shard that "cannot be sampled".

Integers are Python or NumPy integers, never ``bool`` (``k=True`` is a mistake, not 1) nor floats
(``k=3.5`` is not silently truncated).
"""

from __future__ import annotations

import numbers

import numpy as np


def count(name: str, value: object, minimum: int = 0) -> int:
    """``value`` as an int ≥ ``minimum``; ``TypeError`` unless it is an integer (Python or NumPy, not
    bool), ``ValueError`` when it is smaller than ``minimum``. ``name`` is the argument's name."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer ≥ {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be ≥ {minimum}, got {int(value)}")
    return int(value)


def seed(value: object) -> int:
    """A sampling seed: an integer ≥ 0 (what ``numpy.random.default_rng`` takes as entropy)."""
    return count("seed", value, 0)


def graph_id(value: object) -> str:
    """A graph id: a ``str`` (``TypeError`` otherwise; an unknown id is the caller's ``KeyError``)."""
    if not isinstance(value, str):
        raise TypeError(f"graph_id must be a str such as 'layout:xla:default:name', got "
                        f"{type(value).__name__} {value!r}")
    return value


def name(argument: str, value: object, optional: bool = False) -> str | None:
    """A collection, split or table name: a ``str`` (or None when ``optional``), ``TypeError`` otherwise
    (``graph_ids(collection=5)`` would otherwise match nothing and look like an empty collection)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a str{' or None' if optional else ''}, got "
                        f"{type(value).__name__} {value!r}")
    return value


def flag(name: str, value: object) -> bool:
    """A yes/no argument: ``bool`` (or NumPy's), ``TypeError`` otherwise (``configs="no"`` is true)."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def rows(value: object, name: str = "rows") -> np.ndarray:
    """Unique-config rows: a 1-D sequence or array of integers → (k,) int64 (a fresh array).
    ``TypeError`` for something that is not integers (floats, strings, None), ``ValueError`` for
    another shape. Ranges are the caller's to check (they depend on the graph)."""
    if value is None or isinstance(value, str | bytes):
        raise TypeError(f"{name} must be a 1-D array of integers, got {type(value).__name__} {value!r}")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise ValueError(f"{name} must be a 1-D array of integers: {exc}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of integers, got shape {array.shape}")
    if array.size and (array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"{name} must be a 1-D array of integers, got dtype {array.dtype}")
    return array.astype(np.int64)


CONFIG_COLUMNS = ("group_size", "first_index", "runtime", "runtime_spread")
"""The keys of ``unique_config_columns``: what the deprecated ``read_configs(..., columns=)`` still checks."""


def config_columns(value: object, num_unique: int) -> dict | None:
    """``read_configs``' ``columns``: None, or a dict of ``CONFIG_COLUMNS`` whose arrays (None for the
    runtimes of the test split) hold one entry per unique config (``num_unique``). ``TypeError`` /
    ``ValueError`` naming ``columns`` otherwise (a wrong argument, not a bad shard)."""
    if value is None:
        return None
    if not isinstance(value, dict) or any(key not in value for key in CONFIG_COLUMNS):
        raise TypeError(f"columns must be the dict unique_config_columns returns (keys "
                        f"{', '.join(CONFIG_COLUMNS)}), got {type(value).__name__}")
    for key in CONFIG_COLUMNS:
        array = value[key]
        if array is None and key.startswith("runtime"):
            continue
        if not isinstance(array, np.ndarray) or array.ndim != 1 or len(array) != num_unique:
            what = f"shape {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
            raise ValueError(f"columns[{key!r}] must hold one entry per unique config ({num_unique}), "
                             f"got {what}")
    return value
