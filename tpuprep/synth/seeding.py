"""Keyed randomness: generators, log-uniform draws and hex fingerprints that depend only on (seed,
keys), never on generation order (the package docstring's "Determinism").
"""

from __future__ import annotations

import hashlib
import math

import numpy as np


def keyed_rng(seed: int, *keys: object) -> np.random.Generator:
    """A generator that depends only on (seed, keys), never on generation order."""
    digest = hashlib.blake2b(repr((int(seed), *keys)).encode(), digest_size=32).digest()
    return np.random.default_rng(np.frombuffer(digest, dtype=np.uint32))


def loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi)))) if hi > lo else float(lo)


def hex32(seed: int, *keys: object) -> str:
    return hashlib.blake2b(repr((int(seed), *keys)).encode(), digest_size=16).hexdigest()


def signed_hex64(seed: int, *keys: object) -> str:
    """A 64-bit fingerprint printed as signed hex, like the real tile stems (e.g. '-d35a43855de59c9')."""
    raw = hashlib.blake2b(repr((int(seed), *keys)).encode(), digest_size=8).digest()
    value = int.from_bytes(raw, "little", signed=True)
    return format(value, "x")
