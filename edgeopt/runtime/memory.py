"""The runner's resident memory by phase, read from ``/proc/self`` (Linux; standard library only).

``before`` is the resident set (``statm``) when the measurement starts, before the artifact's runtime is loaded;
each phase is the peak (``VmHWM``, the kernel's high-water mark of this process) minus it: after load, after the
first inference, and after the timed runs. Under qemu-user emulation the figures are the emulator's process,
translator included.
"""

from __future__ import annotations

import os

METHOD = ("the runner's process: VmHWM (peak RSS, /proc/self/status) after each phase minus RSS (/proc/self/statm) "
          "before the artifact's runtime was loaded")


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def peak_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next((int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:")), None)
    except (OSError, ValueError):
        return None


class Phases:
    """Call :meth:`mark` after each phase; :meth:`result` gives the bytes by phase (None where /proc is absent)."""

    def __init__(self) -> None:
        self.before = rss_bytes()
        self.marks: dict[str, int] = {}

    def mark(self, phase: str) -> None:
        peak = peak_bytes()
        if self.before is not None and peak is not None:
            self.marks[phase] = peak - self.before

    def result(self) -> dict | None:
        if not self.marks:
            return None
        out = {"before_bytes": self.before, **{f"{k}_bytes": v for k, v in self.marks.items()}}
        out["peak_bytes"] = max(self.marks.values())
        out["method"] = METHOD
        return out
