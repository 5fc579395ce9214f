"""The one range every Dask wait may take: ``TPUPREP_DASK_TIMEOUT``, a run file's ``[cluster] timeout``
and ``DaskRunner``'s ``timeout`` / ``connect_timeout`` / ``no_workers_timeout`` (seconds).

Light on purpose (no Dask import): the CLI and the run-file parser check a timeout before anything
connects. A value outside the range (0, ``MAX_TIMEOUT_SECONDS``] — zero, negative, NaN, infinite or
so large that an event loop or a thread join overflows on it (``1e300``) — is refused with one line.
"""

from __future__ import annotations

import math

MAX_TIMEOUT_SECONDS = 7 * 24 * 3600.0
"""A week: longer than any wait for a scheduler or for workers that a batch job should sit through, and
far below what ``threading`` and ``asyncio`` accept (``threading.TIMEOUT_MAX``)."""


def timeout_problem(seconds: object) -> str | None:
    """Why ``seconds`` is not a usable timeout (None when it is): it must be a real number in
    (0, ``MAX_TIMEOUT_SECONDS``]."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return f"must be a number of seconds, not {seconds!r}"
    if math.isnan(seconds) or not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        return f"must be > 0 and at most {MAX_TIMEOUT_SECONDS:.0f} seconds (a week), not {seconds!r}"
    return None


__all__ = ["MAX_TIMEOUT_SECONDS", "timeout_problem"]
