"""Errors that mean "this input file is bad": one clear line naming the file, the key and the problem."""

from __future__ import annotations

import os
from os import PathLike
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
        super().__init__(display_name(f"{where}: {problem}"))  # one line, whatever the name holds

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


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, surrogate-escaped by os.fsdecode
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def _unsafe(ch: str) -> bool:
    """A character that must not reach a message, a log line, JSON or Markdown as it is: a control
    character (C0, DEL, C1), a line or paragraph separator, or a surrogate (an undecodable byte)."""
    code = ord(ch)
    return code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029) or 0xD800 <= code <= 0xDFFF


def display_name(path: str | bytes | PathLike | None) -> str:
    """A file name (or any text naming one) as it may be printed, logged, or written to JSON and Markdown:
    one line of valid UTF-8.

    Undecodable bytes of a name (``os.fsdecode`` turns byte 0xNN into the lone surrogate U+DCNN) become
    ``\\xNN``; newline, carriage return and tab become ``\\n``, ``\\r``, ``\\t``; other control
    characters (C0, DEL, C1) ``\\xNN``; U+2028/U+2029 and other lone surrogates ``\\uNNNN``. Everything
    else (a backslash too) is kept, so an ordinary name is returned unchanged. ``bytes`` are decoded
    as ``os.fsdecode`` does; None becomes ``"<input>"``. ``raw_name_hex`` gives the exact bytes of a
    name this changed.
    """
    if path is None:
        return "<input>"
    text = os.fsdecode(path) if isinstance(path, bytes | PathLike) else str(path)
    if not any(_unsafe(ch) for ch in text):
        return text
    return "".join(_escape(ch) if _unsafe(ch) else ch for ch in text)


def raw_name_hex(path: str | bytes | PathLike) -> str | None:
    """The bytes of a name ``display_name`` changes, as lowercase hex (``os.fsencode``; a lone surrogate
    that is not an escaped byte as UTF-8 with ``surrogatepass``), so the file can be found again; None
    for a name shown as it is."""
    text = os.fsdecode(path) if isinstance(path, bytes | PathLike) else str(path)
    if display_name(text) == text:
        return None
    try:
        return os.fsencode(text).hex()
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").hex()
