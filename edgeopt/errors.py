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


class DeviceRefusedError(RemoteError):
    """The device was reached and its runtime could not run the artifact (an op its kernels can't set up): a
    property of this artifact on that device, so ``convert --verify-on`` tries the profile's next backend."""

    kind = "device_refused_artifact"


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A ``did you mean 'x'?`` phrase for the closest choice, or None."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def did_you_mean_renamed(word: str, renamed: dict[str, str]) -> str | None:
    """The ``did you mean 'new'?`` phrase when ``word`` is close to an old name in ``renamed`` (old -> new), or None."""
    close = difflib.get_close_matches(word, list(renamed), n=1, cutoff=0.6)
    return f"did you mean '{renamed[close[0]]}'?" if close else None


# Exceptions that, raised by edgeopt's own code, mean a bug in edgeopt rather than a model or a library
# refusing it; they must stay exit 1 (with the traceback under --debug), never become a "bad input" line.
_BUG_TYPES = (AttributeError, NameError, TypeError, AssertionError, KeyError, IndexError, LookupError)


def _package_dirs() -> tuple[str, ...]:
    import importlib.util
    import os

    dirs = [os.path.dirname(os.path.abspath(__file__))]
    for sub in ("converters", "remote"):  # imported as edgeopt.converters / edgeopt.remote (package-dir)
        spec = importlib.util.find_spec(f"edgeopt.{sub}")
        dirs += [os.path.abspath(p) for p in (spec.submodule_search_locations or [])] if spec else []
    return tuple(d + os.sep for d in dirs)


def is_edgeopt_bug(err: BaseException) -> bool:
    """True when ``err`` is a programming error raised inside edgeopt's own code (the innermost Python
    frame of its traceback is an edgeopt module), as opposed to a library failing on the user's model."""
    if not isinstance(err, _BUG_TYPES) or isinstance(err, EdgeoptError):
        return False
    tb, last = err.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return False
    import os

    return os.path.abspath(last.tb_frame.f_code.co_filename).startswith(_package_dirs())
