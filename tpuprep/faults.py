"""Crash points for testing: ``TPUPREP_CRASH_AT=<point>:<n>`` SIGKILLs the process at the n-th hit.

Points: ``inflate`` (after each streamed config chunk), ``part`` (after a file's parts are written),
``shard`` (after each final shard is renamed into place), ``manifest`` (after manifest.json's
temporary file is written, before the rename). Without the variable a checkpoint costs one dict lookup.
"""

from __future__ import annotations

import os
import signal

_spec = os.environ.get("TPUPREP_CRASH_AT", "")
_point, _, _count = _spec.partition(":")
_remaining = {_point: int(_count or 1)} if _point else {}


def checkpoint(point: str) -> None:
    """Die here (SIGKILL, no clean-up) if the environment asks for a crash at this point."""
    if point in _remaining:
        _remaining[point] -= 1
        if _remaining[point] <= 0:
            os.kill(os.getpid(), signal.SIGKILL)
