"""The ``Transport`` contract (run a command, copy files, hash a file) and ``LocalTransport``.

Commands are argv lists, never strings: a transport that needs a command line
(SSH) builds it with :func:`shlex.join`, so nothing in a path or name is ever
interpreted by a shell. Writes go only inside the transport's work directory
(:meth:`Transport.confine`).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import subprocess
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgeopt.errors import RemoteError
from edgeopt.files import atomic_path, file_sha256

# stream(kind, line): kind is "stdout" or "stderr"; line has no trailing newline.
StreamCallback = Callable[[str, str], None]


@dataclass
class RunResult:
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


def check_argv(argv: list[str]) -> list[str]:
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError("a command is a non-empty list of strings (never a shell string)")
    if any("\0" in a for a in argv):
        raise RemoteError("a command argument contains a NUL byte", "check the names and paths given")
    return list(argv)


class Transport(ABC):
    """Runs commands and moves files on one machine, inside ``work_dir``."""

    name: str = "transport"
    work_dir: str  # absolute POSIX path on the target, set by the subclass
    cancel: threading.Event | None = None  # set by another thread: stop, kill the remote process

    @abstractmethod
    def run(self, argv: list[str], timeout: float, stream: StreamCallback | None = None) -> RunResult:
        """Run ``argv`` (no shell) and wait at most ``timeout`` seconds."""

    @abstractmethod
    def put(self, local: str | os.PathLike, remote: str) -> None:
        """Copy a local file to ``remote`` (inside the work dir; parents are created)."""

    @abstractmethod
    def get(self, remote: str, local: str | os.PathLike) -> None:
        """Copy a remote file to ``local``."""

    @abstractmethod
    def sha256(self, remote: str) -> str | None:
        """The file's sha256 hex digest, or None when it does not exist."""

    def sha256_many(self, remotes: list[str]) -> dict[str, str | None]:
        return {r: self.sha256(r) for r in remotes}

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ paths
    def confine(self, remote: str) -> str:
        """``remote`` made absolute (relative paths are taken inside the work dir) and checked
        to lie inside the work dir; a path that escapes it is refused."""
        if not isinstance(remote, str) or "\0" in remote:
            raise RemoteError(f"bad remote path {remote!r}")
        root = posixpath.normpath(self.work_dir)
        full = posixpath.normpath(posixpath.join(root, remote))
        if full != root and not full.startswith(root.rstrip("/") + "/"):
            raise RemoteError(
                f"refusing to write '{remote}' on {self.name}: it is outside the work directory {root}",
                "edgeopt only writes inside the device's work_dir",
            )
        return full


class LocalTransport(Transport):
    """This machine, through subprocess (no shell)."""

    def __init__(self, work_dir: str | os.PathLike, env: dict[str, str] | None = None):
        self.name = "local"
        self.work_dir = str(Path(work_dir).expanduser().resolve())
        self.env = env or {}
        Path(self.work_dir).mkdir(parents=True, exist_ok=True)

    def confine(self, remote: str) -> str:
        full = super().confine(remote)
        # symlinks inside the work dir must not lead out of it either
        real = os.path.realpath(full)
        root = os.path.realpath(self.work_dir)
        if real != root and not real.startswith(root.rstrip("/") + "/"):
            raise RemoteError(f"refusing to write '{remote}': it resolves outside the work directory {root}")
        return full

    def run(self, argv: list[str], timeout: float, stream: StreamCallback | None = None) -> RunResult:
        argv = check_argv(argv)
        env = {**os.environ, **self.env}
        try:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                start_new_session=True,
            )
        except OSError as err:
            return RunResult(127, "", f"{argv[0]}: {err.strerror}")
        out: dict[str, list[str]] = {"stdout": [], "stderr": []}

        def pump(kind, pipe):
            for line in pipe:
                out[kind].append(line)
                if stream:
                    stream(kind, line.rstrip("\n"))

        threads = [threading.Thread(target=pump, args=(k, getattr(proc, k)), daemon=True) for k in out]
        for t in threads:
            t.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as err:
            proc.kill()
            proc.wait()
            raise RemoteError(
                f"command timed out after {timeout:.0f} s: {argv[0]}",
                details={"stdout": "".join(out["stdout"]), "stderr": "".join(out["stderr"])},
            ) from err
        except KeyboardInterrupt:
            proc.kill()
            proc.wait()
            raise
        for t in threads:
            t.join(timeout=5)
        return RunResult(proc.returncode, "".join(out["stdout"]), "".join(out["stderr"]))

    def put(self, local, remote: str) -> None:
        with atomic_path(self.confine(remote)) as tmp:
            shutil.copyfile(local, tmp)

    def get(self, remote: str, local) -> None:
        shutil.copyfile(posixpath.join(self.work_dir, remote), local)

    def sha256(self, remote: str) -> str | None:
        path = posixpath.join(self.work_dir, remote)
        return file_sha256(path) if os.path.isfile(path) else None

    def close(self) -> None:
        pass
