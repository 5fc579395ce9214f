"""Crash points for testing: ``TPUPREP_CRASH_AT=<point>:<n>`` SIGKILLs the process at the n-th hit.

Points: ``inflate`` (after each streamed config chunk), ``part`` (after a file's parts are written),
``shard`` (after each final shard is renamed into place), ``manifest`` (after manifest.json's
temporary file is written, before the rename). The variable is read at the first checkpoint, not at
import, so a malformed value stops only a build (one ``FatalError`` line), never another command.
Without the variable a checkpoint costs one dict lookup.
"""

from __future__ import annotations

import os
import signal

from .errors import FatalError

ENV = "TPUPREP_CRASH_AT"
POINTS = ("inflate", "part", "shard", "manifest")

_remaining: dict[str, int] | None = None


def parse(spec: str) -> dict[str, int]:
    """``"part:3"`` -> ``{"part": 3}``, ``"part"`` -> ``{"part": 1}``, ``""`` -> ``{}``; anything
    else -> ``FatalError``."""
    spec = spec.strip()
    if not spec:
        return {}
    point, sep, count = spec.partition(":")
    number = not sep or (count.isascii() and count.isdigit() and int(count) >= 1)
    if point not in POINTS or not number:
        raise FatalError(f"{ENV}={spec!r} is not <point>:<n> with point one of {', '.join(POINTS)} "
                         "and n a positive integer")
    return {point: int(count or 1)}


def checkpoint(point: str) -> None:
    """Die here (SIGKILL, no clean-up) if the environment asks for a crash at this point."""
    global _remaining
    if _remaining is None:
        _remaining = parse(os.environ.get(ENV, ""))
    if point in _remaining:
        _remaining[point] -= 1
        if _remaining[point] <= 0:
            os.kill(os.getpid(), signal.SIGKILL)
