"""One deadline for every phase of a training run (``TrainConfig.time_budget``, ``--time-budget S``).

The promise: a run with a budget of S seconds ends (model saved) within S × 1.1 seconds of entering
:func:`~.trainer.train`; its start-up — what the process did before (interpreter, imports, opening the
shards: :func:`startup_seconds`) — comes on top, is measured and reported, and is not charged. Setting
up (scanning the training graphs), the training steps, the per-epoch validations, the final
validation and the saving all run against the same clock:

* a training step is taken only when the longest step so far (``step_s``; the run's first step, which
  loads the compiled kernels, counts only until a second was timed) and the reserve still fit in what
  is left (the first step of a run is always taken: a model needs one);
* the reserve (:meth:`Budget.reserve`) is the time of the final validation plus a save: the measured
  duration of the last complete validation (the same graphs and configs are scored every time, so it
  is a good estimate), at most ``VALID_SHARE`` × S; before any validation was measured,
  ``VALID_SHARE`` × S;
* the run's first validation, whose cost is unknown, may use all that is left; once it is timed,
  training goes on if a step and the reserve still fit, else it was the final validation;
* every validation scores graph after graph and block after block against a cut-off (the end of the
  budget minus a save, and minus the reserve for a per-epoch one), so an estimate that was too low
  cannot break the budget: a validation that reaches its cut-off stops there and reports the graphs
  it scored (``valid_graphs`` "k/m" in the epoch's history), i.e. it is over a bounded subset. A graph
  is expected to take its last time, else the slowest validation rate seen; the run's first validation
  graph has neither, so it starts unchecked and its blocks are checked at its own rate so far — its
  first block (≤ 32 MB of decoded configs) is the one piece of work no estimate bounds.

The clock is injectable (``clock``), so tests drive a run with fake durations instead of real speed.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

VALID_SHARE = 0.25
"""Most of the budget reserved for the final validation (and the first guess, before one was timed)."""
SLACK = 1.1
"""The promise: wall time from entering ``train`` to the saved model ≤ budget × SLACK."""


def startup_seconds() -> float | None:
    """Seconds from this process's start to now (Linux: ``/proc/self/stat`` field 22 against
    ``/proc/uptime``); None where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            stat = f.read()
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        started = int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)


class OutOfTime(Exception):
    """Raised inside a validation that reached its cut-off (caught by the trainer)."""


class Budget:
    """The clock of one training run. ``seconds`` None: no budget (every check passes).

    Durations it learns (seconds): ``step_s`` the longest training step so far (batch read included),
    ``valid_s`` the last complete validation, ``save_s`` the last save, ``graph_s`` each validation
    graph's last scoring time and ``score_unit_s`` the slowest scoring rate per unit (a config ×
    max(1, configurable nodes); tile: a config).
    """

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.start = clock()
        self.end = math.inf if seconds is None else self.start + max(float(seconds), 0.0)
        self.step_s = 0.0
        self.valid_s: float | None = None
        self.save_s = 0.0
        self.steps = 0
        self.score_unit_s = 0.0  # slowest validation seconds per (config × configurable node)
        self.graph_s: dict[str, float] = {}  # last scoring time of each validation graph
        self._progress = 0.0  # the largest progress reported: the schedule never goes back

    @property
    def limited(self) -> bool:
        return self.seconds is not None

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        """Seconds left (inf without a budget; negative once it is spent)."""
        return self.end - self.clock()

    def valid_estimate(self) -> float:
        """Seconds a validation is expected to take: the last complete one, at most ``VALID_SHARE`` of
        the budget (``VALID_SHARE`` of it before one was timed); 0 without a budget."""
        if not self.limited:
            return 0.0
        cap = VALID_SHARE * float(self.seconds or 0.0)
        return cap if self.valid_s is None else min(self.valid_s, cap)

    def reserve(self, validate: bool) -> float:
        """Seconds kept for the final validation (when ``validate``) and the final save."""
        if not self.limited:
            return 0.0
        return (self.valid_estimate() if validate else 0.0) + self.save_s

    def room_for_step(self, validate: bool) -> bool:
        """Whether one more training step (as long as the longest so far) fits before the reserve."""
        return self.left() >= self.step_s + self.reserve(validate)

    def progress(self, validate: bool) -> float | None:
        """Share of the training time (budget minus reserve) spent, for the LR schedule; None
        without a budget."""
        if not self.limited:
            return None
        span = (self.end - self.start) - self.reserve(validate)
        # the reserve shrinks once a validation is measured: never let the LR schedule step back
        self._progress = max(self._progress, self.elapsed() / max(span, 1e-9))
        return self._progress

    def cutoff(self, final: bool) -> float:
        """Clock time a validation must end by: the budget's end minus a save, and for a per-epoch
        (not ``final``) one minus the whole reserve (final validation + save)."""
        return self.end - (self.save_s if final else self.reserve(True))

    def learn_step(self, seconds: float) -> None:
        """A training step took ``seconds``. The first step
        of a run (Numba's compiled kernels loaded, the first reads) counts only until a second one was
        timed: it took 3 s where the next ones took 0.1–0.3 s on ``small``, and as the longest step it
        had kept a third of a 30 s budget unused."""
        self.steps += 1
        self.step_s = seconds if self.steps <= 2 else max(self.step_s, seconds)

    def learn_scoring(self, graph_id: str, seconds: float, units: int) -> None:
        """Scoring validation graph ``graph_id`` took ``seconds`` (its preparation included) for
        ``units``."""
        self.graph_s[graph_id] = seconds
        self.score_unit_s = max(self.score_unit_s, seconds / max(units, 1))

    def graph_estimate(self, graph_id: str, units: int) -> float | None:
        """Seconds to score a validation graph of ``units``: its last time (a validation scores the same
        rows each time), else at the slowest validation rate seen; None before any validation graph
        was timed. (The training rate is no guide: on the quarter-scale ``full`` xla:random it put the
        first validation at several times its cost, and every validation was skipped.)"""
        if graph_id in self.graph_s:
            return self.graph_s[graph_id]
        return units * self.score_unit_s if self.score_unit_s else None
