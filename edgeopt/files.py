"""Writing files so that nothing half-written is ever seen at the final path.

Every output edgeopt writes (reports, exports, recipes, manifests, caches, libraries) goes to a
unique temporary file beside its destination and is renamed onto it only once complete; a failure
removes the temporary file and leaves the destination as it was. (Whole artifact *directories* use
the same idea with a temporary directory: see ``edgeopt.convert``.) The device-side runtime keeps
its own copy of this, since it imports nothing from edgeopt.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | os.PathLike, *, mode: int | None = 0o644) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` to write to; renamed onto ``path`` when the block
    succeeds, removed when it raises. The temporary name keeps ``path``'s suffix (some writers
    choose the format by it). ``mode`` is applied before the rename (None: leave what the writer set)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=f".tmp{out.suffix}", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, out)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if not err.filename and err.errno:  # a write() that failed (disk full): say where it was going
            raise OSError(err.errno, err.strerror or str(err), str(out)) from err
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def file_sha256(path: str | os.PathLike) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB chunks (artifact hashes, caches, uploads)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_text_file(path: str | os.PathLike, what: str = "file") -> str:
    """A user's text file (recipe, inventory, YAML) as UTF-8; a binary or unreadable file is one line,
    exit 3, naming it (not a UnicodeDecodeError from deep inside a loader)."""
    from edgeopt.errors import BadInputError

    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise BadInputError(f"{what} '{p}' is not UTF-8 text (byte {err.start}: {err.reason})",
                            "pass the text file itself, not a binary one") from err
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise BadInputError(f"cannot read {what} '{p}': {reason}", "check the path and its permissions") from err
