"""Typed errors, each with its own exit code and a one-line fix-it hint.

The CLI maps an :class:`EdgeoptError` to one line on stderr and its exit code;
the traceback is shown only with ``--debug``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1
    USAGE = 2
    BAD_INPUT = 3
    MISSING_DEPENDENCY = 4
    GATE_FAILED = 5
    REMOTE = 6
    INTERRUPTED = 130


class EdgeoptError(Exception):
    """Base of every error the user is meant to see (never a traceback)."""

    exit_code: ExitCode = ExitCode.INTERNAL
    kind: str = "error"

    def __init__(self, message: str, hint: str | None = None, *, details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def to_json(self) -> dict:
        out = {"kind": self.kind, "exit_code": int(self.exit_code), "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        if self.details:
            out["details"] = self.details
        return out


class UsageError(EdgeoptError):
    exit_code = ExitCode.USAGE
    kind = "usage"


class BadInputError(EdgeoptError):
    exit_code = ExitCode.BAD_INPUT
    kind = "bad_input"


class BadModelError(BadInputError):
    kind = "bad_model"


class BadDataError(BadInputError):
    kind = "bad_data"


class BadProfileError(BadInputError):
    kind = "bad_profile"


class UnsupportedOpError(BadInputError):
    kind = "unsupported_op"


class StageError(BadInputError):
    """A chain stage could not process this model (its message names the stage)."""

    kind = "stage_failed"


class OutputExistsError(BadInputError):
    kind = "output_exists"


class MissingDependencyError(EdgeoptError):
    exit_code = ExitCode.MISSING_DEPENDENCY
    kind = "missing_dependency"


class GateFailedError(EdgeoptError):
    exit_code = ExitCode.GATE_FAILED
    kind = "gate_failed"


class RemoteError(EdgeoptError):
    exit_code = ExitCode.REMOTE
    kind = "remote"


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A ``did you mean 'x'?`` phrase for the closest choice, or None."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None
