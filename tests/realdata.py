"""Where the real TpuGraphs-format files live (../shared/real), and a clean skip when they do not."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REAL = REPO.parent / "shared" / "real"


def real_path(*parts: str) -> Path:
    """A file under ../shared/real, or skip the test when the clone has no ../shared."""
    path = REAL.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (a clone without ../shared)")
    return path
