"""What an output directory may be, decided once, before any work: the one rule every writer calls; and
:func:`publish`, the one way a finished output takes its place.

``--force`` may replace only an edgeopt output (a directory holding edgeopt's ``manifest.json``, or a
pipeline ``dist/`` with its ``summary.json``) or an empty directory. It never replaces a directory
that holds one of the run's inputs (model, calibration or evaluation data, recipe: compared by
resolved path, so ``-o proj`` for ``proj/model.onnx`` is refused), a file, the current directory or
one of its parents, or a directory with anything else in it. Refusals are exit 3 and touch nothing.
The output's parent must be writable: checked by creating (and removing) a probe file there, so a
read-only directory or file system is one line naming the path before the expensive work.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from edgeopt.errors import BadInputError, OutputExistsError

MARKERS = ("manifest.json", "summary.json", "bundle.json")  # an artifact's manifest, a pipeline dist/'s summary, a
# TVM device bundle (converters/backends/tvm/build.py device_bundle)
_FORCE_HINT = "--force replaces only an edgeopt output or an empty directory: choose another -o"


class EnvironmentFaultError(BadInputError):
    """The user's machine refused: a full disk, a read-only or unreadable path (exit 3, not a bug)."""

    kind = "environment"


def os_error_line(err: OSError, path: str | os.PathLike | None = None) -> str:
    """``'PATH': No space left on device (ENOSPC)``: the path and the OS's words for what went wrong."""
    name = errno.errorcode.get(err.errno or 0)
    where = path if path is not None else err.filename
    if path is None and getattr(err, "filename2", None):  # a copy or rename: the destination is what filled up
        where = err.filename2 if name in ("ENOSPC", "EROFS", "EDQUOT", "EFBIG") else f"{err.filename}' -> '{err.filename2}"
    reason = (err.strerror or str(err)) + (f" ({name})" if name else "")
    return f"'{where}': {reason}" if where not in (None, "") else reason


def is_edgeopt_output(directory: Path) -> bool:
    """True when ``directory`` holds an edgeopt manifest (or pipeline summary) that parses as one."""
    for marker in MARKERS:
        p = directory / marker
        if p.is_file():
            try:
                data = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and ("edgeopt_version" in data or "targets" in data):
                return True
    return False


def _inputs_inside(out: Path, inputs: Iterable) -> list[str]:
    hits = []
    for given in inputs:
        if given is None or str(given) == "":
            continue
        try:
            p = Path(given).expanduser().resolve()
        except (OSError, RuntimeError):
            continue
        if p == out or out in p.parents:
            hits.append(str(given))
    return hits


def check_writable_dir(directory: Path, *, what: str = "output directory") -> None:
    """Create and remove a probe file in ``directory`` (or its nearest existing parent): a read-only or
    full file system, or a missing permission, is exit 3 naming the path and the OS error."""
    d = directory
    while not d.exists() and d != d.parent:
        d = d.parent
    if not d.is_dir():
        raise BadInputError(f"{what} '{d}' is not a directory", "choose another -o")
    try:
        fd, name = tempfile.mkstemp(prefix=".edgeopt-probe-", dir=d)
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        raise EnvironmentFaultError(f"cannot write to {what} {os_error_line(err, d)}",
                            "choose a writable -o, or free space there") from err


def check_output(output: str | os.PathLike, *, force: bool, inputs: Iterable = (), kind: str = "output") -> Path:
    """The absolute path to write ``output`` to, once it is known that writing it loses nothing.

    Raises :class:`OutputExistsError` (exit 3) when it exists and ``force`` is off, or when ``force``
    could destroy something that is not edgeopt's (see the module doc); :class:`BadInputError` when
    its parent is not writable. Call it before any expensive work; it changes nothing on disk.
    """
    given = str(output)
    out = Path(output).expanduser().absolute()
    out = Path(os.path.normpath(out))
    cwd = Path.cwd().resolve()
    real = out.resolve()
    if real == cwd or real in cwd.parents:
        raise OutputExistsError(f"{kind} '{given}' is the current directory or one of its parents",
                                "write into a new directory, e.g. -o out/")
    hits = _inputs_inside(real, inputs)
    if hits:
        raise OutputExistsError(f"{kind} '{given}' holds this run's input '{hits[0]}': writing there would destroy it",
                                "choose an -o outside the inputs' directories")
    if os.path.lexists(out):
        if not force:
            raise OutputExistsError(f"{kind} '{given}' exists", "use --force to replace an earlier edgeopt output")
        if out.is_symlink() or not out.is_dir():
            raise OutputExistsError(f"{kind} '{given}' exists and is not a directory edgeopt wrote", _FORCE_HINT)
        try:
            entries = sorted(e.name for e in os.scandir(out))
        except OSError as err:
            raise BadInputError(f"cannot read {kind} {os_error_line(err, given)}") from err
        if entries and not is_edgeopt_output(out):
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise OutputExistsError(f"{kind} '{given}' is not an edgeopt output and not empty ({shown})", _FORCE_HINT)
    check_writable_dir(out.parent)
    return out


def publish(tmp: str | os.PathLike, final: str | os.PathLike, *, force: bool = False) -> Path:
    """Put the complete output ``tmp`` (a file or directory written beside ``final``, on its file system) at
    ``final``: the one way every command publishes a result.

    Nothing exists at ``final`` yet: a rename. Something does: without ``force`` :class:`OutputExistsError` (exit
    3; ``tmp`` is left to the caller); with it, what is there must still be replaceable (an edgeopt output or an
    empty directory, the rule :func:`check_output` applied before the work), and it is set aside, ``tmp`` renamed
    into place, and only then the old one deleted; should that rename fail, the old output is put back. At no time
    is a partial output at ``final``, and the old one stays until the new one is complete.
    """
    import shutil
    import uuid

    out, new = Path(final), Path(tmp)
    if not os.path.lexists(out):
        os.replace(new, out)
        return out
    if not force:
        raise OutputExistsError(f"output '{out}' exists", "use --force to replace an earlier edgeopt output")
    if out.is_symlink() or not out.is_dir() or (any(out.iterdir()) and not is_edgeopt_output(out)):
        raise OutputExistsError(f"output '{out}' changed during the run: it is no longer an edgeopt output", _FORCE_HINT)
    old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
    os.replace(out, old)
    try:
        os.replace(new, out)
    except BaseException:
        os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return out


_ENV_ERRNOS = {"ENOSPC", "EROFS", "EACCES", "EPERM", "EDQUOT", "EFBIG", "EMFILE", "ENFILE", "ENOMEM", "EIO",
               "ENOTDIR", "EISDIR", "ENAMETOOLONG", "ELOOP", "EXDEV"}


def environment_fault(err: BaseException) -> BadInputError | None:
    """A full disk, a read-only or unreadable path, a database the results store can't write: exit 3
    naming the path and the OS error (never "internal error … please report it")."""
    import errno
    import sqlite3

    if isinstance(err, OSError) and errno.errorcode.get(err.errno or 0) in _ENV_ERRNOS:
        return EnvironmentFaultError(os_error_line(err), "free space there or choose a writable path")
    if isinstance(err, sqlite3.OperationalError | sqlite3.DatabaseError):
        return EnvironmentFaultError(f"results store: {err}", "pass a writable --db, or free space there")
    return None
