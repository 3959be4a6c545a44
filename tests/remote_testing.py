"""Test helper (tests/, not shipped): a ``Transport`` that records every call and checks expected commands ran.

Fabric-style: declare the commands you expect (argv patterns, in order), run the code under
test, then ``verify()``: it fails naming each expected command that never ran. With ``inner``
the calls really happen (on a ``LocalTransport`` or an ``SshTransport``) and are recorded; without
it the recorder replays the canned results of the expectations and keeps "remote" files in memory
(tests using that mode say "fake" in their names).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from edgeopt.remote.transport import RunResult, StreamCallback, Transport, check_argv


class _Any:
    def __repr__(self) -> str:
        return "ANY"


class _Rest:
    def __repr__(self) -> str:
        return "REST"


ANY = _Any()  # matches one argument
REST = _Rest()  # matches all remaining arguments (zero or more)


def argv_matches(pattern: list, argv: list[str]) -> bool:
    for i, p in enumerate(pattern):
        if p is REST:
            return True
        if i >= len(argv):
            return False
        if p is ANY:
            continue
        if callable(p) and not isinstance(p, str):
            if not p(argv[i]):
                return False
        elif p != argv[i]:
            return False
    return len(pattern) == len(argv)


@dataclass
class Expect:
    argv: list
    rc: int = 0
    stdout: str = ""
    stderr: str = ""
    ran: bool = False


@dataclass
class Call:
    kind: str  # run | put | get | sha256
    argv: list[str] = field(default_factory=list)
    local: str | None = None
    remote: str | None = None
    rc: int | None = None


class RecordingTransport(Transport):
    def __init__(self, inner: Transport | None = None, *, work_dir: str = "/fake/work", name: str = "recorder"):
        self.inner = inner
        self.name = inner.name if inner else name
        self.work_dir = inner.work_dir if inner else work_dir
        self.calls: list[Call] = []
        self.expected: list[Expect] = []
        self.files: dict[str, bytes] = {}  # replay mode: the "remote" files by absolute path

    # ----------------------------------------------------------- expectations
    def expect(self, *argv, rc: int = 0, stdout: str = "", stderr: str = "") -> RecordingTransport:
        self.expected.append(Expect(list(argv), rc, stdout, stderr))
        return self

    def _match(self, argv: list[str]) -> Expect | None:
        for e in self.expected:  # in order: the first not yet run that matches
            if not e.ran and argv_matches(e.argv, argv):
                e.ran = True
                return e
        return None

    def verify(self) -> None:
        missing = [e.argv for e in self.expected if not e.ran]
        if missing:
            ran = "\n  ".join(repr(c.argv) for c in self.calls if c.kind == "run")
            raise AssertionError(f"expected commands did not run: {missing}\ncommands run:\n  {ran}")

    def runs(self) -> list[list[str]]:
        return [c.argv for c in self.calls if c.kind == "run"]

    def count(self, kind: str) -> int:
        return sum(c.kind == kind for c in self.calls)

    # ----------------------------------------------------------- Transport
    def run(self, argv: list[str], timeout: float, stream: StreamCallback | None = None) -> RunResult:
        argv = check_argv(argv)
        call = Call("run", argv)
        self.calls.append(call)
        exp = self._match(argv)
        if self.inner is not None:
            res = self.inner.run(argv, timeout, stream)
        elif exp is None:
            raise AssertionError(f"unexpected command (fake transport): {argv}")
        else:
            res = RunResult(exp.rc, exp.stdout, exp.stderr)
            for kind in ("stdout", "stderr"):
                for line in getattr(res, kind).splitlines():
                    if stream:
                        stream(kind, line)
        call.rc = res.rc
        return res

    def put(self, local, remote: str) -> None:
        dest = self.confine(remote)
        self.calls.append(Call("put", local=str(local), remote=dest))
        if self.inner is not None:
            self.inner.put(local, remote)
        else:
            self.files[dest] = Path(local).read_bytes()

    def get(self, remote: str, local) -> None:
        self.calls.append(Call("get", local=str(local), remote=remote))
        if self.inner is not None:
            self.inner.get(remote, local)
        else:
            Path(local).write_bytes(self.files[os.path.join(self.work_dir, remote)])

    def sha256(self, remote: str) -> str | None:
        self.calls.append(Call("sha256", remote=remote))
        if self.inner is not None:
            return self.inner.sha256(remote)
        data = self.files.get(os.path.join(self.work_dir, remote))
        return hashlib.sha256(data).hexdigest() if data is not None else None

    def sha256_many(self, remotes: list[str]) -> dict[str, str | None]:
        if self.inner is not None:
            self.calls.append(Call("sha256", argv=list(remotes)))
            return self.inner.sha256_many(remotes)
        return {r: self.sha256(r) for r in remotes}

    def confine(self, remote: str) -> str:
        return self.inner.confine(remote) if self.inner is not None else super().confine(remote)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
