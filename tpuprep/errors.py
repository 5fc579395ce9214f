"""Errors that mean "this input file is bad": one clear line naming the file, the key and the problem."""

from __future__ import annotations

from pathlib import Path


class BadInput(ValueError):
    """An input file cannot be converted. ``str()`` is the one line shown to the user."""

    def __init__(self, path: str | Path | None, key: str | None, problem: str):
        self.path = str(path) if path is not None else None
        self.key = key
        self.problem = problem
        where = self.path or "<input>"
        if key:
            where += f" [{key}]"
        super().__init__(f"{where}: {problem}")

    def as_record(self) -> dict:
        return {"file": self.path, "key": self.key, "error": self.problem}


class UsageError(Exception):
    """The command was asked something it cannot do (exit code 2)."""


class FatalError(Exception):
    """A fault that stops a command (exit code 1). ``str()`` is the one line shown to the user: what went
    wrong and where (file, key, address), never a traceback."""


class BadShards(FatalError, ValueError):
    """A shard folder cannot be trusted: no or malformed manifest, unknown format or major schema
    version, a path that escapes the folder, or data that fails its checks."""


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (whitespace collapsed), or its type when it has none."""
    return " ".join(str(exc).split()) or type(exc).__name__
