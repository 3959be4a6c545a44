"""The caller's side of the board lock (the runner's side is ``edgeopt/runtime/board_lock.py``).

``remote-bench`` asks the device runner to hold ``<work_dir>/board.lock`` for the whole measurement,
waiting at most ``--wait`` seconds for another holder (host, pid, since when: said on stderr while
waiting), then failing with exit 6 naming the holder. ``EDGEOPT_NO_BOARD_LOCK=1`` measures without
the lock; it exists only so ``bench/board_contention.py`` can show what overlapping runs do to the
figures, and every such result says ``exclusive: false``.
"""

from __future__ import annotations

import json
import os
import socket

from edgeopt.errors import RemoteError
from edgeopt.runtime.board_lock import EXIT_BOARD_BUSY, describe_holder

from .inventory import Device
from .transport import Transport

DEFAULT_WAIT_S = 300.0
LOCK_FILE = "board.lock"
NO_LOCK_ENV = "EDGEOPT_NO_BOARD_LOCK"

__all__ = ["DEFAULT_WAIT_S", "EXIT_BOARD_BUSY", "busy_error", "guard_args", "runner_args", "waiting_message"]


def runner_args(tr: Transport, dev: Device, wait: float) -> list[str]:
    """The runner's lock arguments: the lock file in the device's work dir, the wait, who we are."""
    if os.environ.get(NO_LOCK_ENV) == "1":
        return ["--no-board-lock"]
    return ["--board-lock", tr.confine(LOCK_FILE), "--lock-wait", f"{max(0.0, wait):g}", "--lock-owner", _owner(dev)]


def guard_args(tr: Transport, dev: Device, wait: float) -> list[str]:
    """The consumer guard's lock arguments (``remote/consumer.py`` GUARD): the same lock file, wait and owner as
    :func:`runner_args`, none with ``EDGEOPT_NO_BOARD_LOCK=1``."""
    if os.environ.get(NO_LOCK_ENV) == "1":
        return []
    return ["--board-lock", tr.confine(LOCK_FILE), f"{max(0.0, wait):g}", _owner(dev)]


def _owner(dev: Device) -> str:
    """Who holds the lock, as the holder's JSON the waiting side names: this host, this process, the device."""
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "device": dev.name}, separators=(",", ":"))


def waiting_message(dev: Device, line: str, wait: float) -> str | None:
    """The runner's ``{"board_lock": {"waiting": ...}}`` stderr line as a sentence, else None."""
    try:
        info = json.loads(line)["board_lock"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(info, dict) or not info.get("waiting"):
        return None
    return (f"{dev.name}: the board is busy: held by {describe_holder(info.get('holder'))}; "
            f"waiting up to {wait:g} s for it (--wait SECONDS)")


def busy_error(dev: Device, stdout: str, wait: float) -> RemoteError:
    holder = None
    for line in reversed(stdout.strip().splitlines()):
        try:
            holder = json.loads(line)["error"].get("holder")
            break
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return RemoteError(
        f"{dev.name}: the board is busy: held by {describe_holder(holder)} for more than {wait:g} s",
        "try again later, or wait longer with --wait SECONDS",
        details={"holder": holder, "waited_s": wait},
    )
