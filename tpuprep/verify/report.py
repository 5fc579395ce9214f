"""What ``verify`` found: counts and one line per problem."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class VerifyReport:
    """``graphs_checked`` of ``graphs_total`` converted inputs (fewer with ``sample``: the fraction
    of graphs checked against their inputs, drawn with ``seed``; None when all were), every shard
    (``shards_checked``), and ``problems``, one line each (empty: all exact). ``skipped``: the entries
    under ``--src`` that are neither read nor checked (``{"path", "reason"}``, as the build reports
    them: a ``.tar.gz``, a ``*.NPZ``, another name), which "all exact" does not cover."""

    graphs_checked: int = 0
    shards_checked: int = 0
    problems: list[str] = field(default_factory=list)
    graphs_total: int = 0
    sample: float | None = None
    seed: int = 0
    skipped: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems
