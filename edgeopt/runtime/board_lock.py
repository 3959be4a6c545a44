"""One measurement per board at a time: an exclusive ``flock`` on ``<work_dir>/board.lock``.

The lock is taken by the device-side runner process itself (before it reads the machine's load
and until it has read it again after the measurement), so it dies with that process: a runner
killed by Ctrl-C (the SSH channel closing), by ``kill -9`` or by a reboot holds nothing, and the
kernel drops the lock. The file's content names the holder (client host and pid, runner pid,
device name, since when) for the waiting message; a content naming a holder whose lock is gone is
a stale lock of a dead holder, broken by the next runner and reported as such.

Standard library only: this file ships to devices with the rest of ``edgeopt/runtime``.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable

EXIT_BOARD_BUSY = 75  # EX_TEMPFAIL: the board stayed held by someone else past the wait
POLL_S = 0.2


class BoardBusy(Exception):
    def __init__(self, holder: dict | None, waited_s: float):
        super().__init__(f"the board is held by {describe_holder(holder)}")
        self.holder = holder
        self.waited_s = waited_s


def describe_holder(holder: dict | None) -> str:
    """``host H pid P (runner pid R, device D) since T`` from the lock file's content."""
    if not holder:
        return "another process (it has not written its name yet)"
    who = f"host {holder.get('host', '?')} pid {holder.get('pid', '?')}"
    extra = [f"runner pid {holder['runner_pid']}"] if holder.get("runner_pid") else []
    if holder.get("device"):
        extra.append(f"device {holder['device']}")
    since = f" since {holder['since']}" if holder.get("since") else ""
    return who + (f" ({', '.join(extra)})" if extra else "") + since


def _read(fd: int) -> dict | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 65536).decode("utf-8", "replace").strip()
        data = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write(fd: int, data: dict) -> None:
    raw = (json.dumps(data) + "\n").encode()
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, raw)


class BoardLock:
    """``with BoardLock(path, owner).acquire(wait_s, on_wait) as lock: ...``; ``lock.info`` is recorded."""

    def __init__(self, path: str, owner: dict | None = None):
        self.path = path
        self.owner = dict(owner or {})
        self.fd: int | None = None
        self.info: dict = {"exclusive": False, "path": path}

    def acquire(self, wait_s: float, on_wait: Callable[[dict | None, float], None] | None = None) -> BoardLock:
        """Take the lock, waiting at most ``wait_s`` seconds (``on_wait(holder, waited)`` when the holder
        changes); :class:`BoardBusy` past it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        t0 = time.monotonic()
        seen: object = object()
        waited_for = None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    holder = _read(fd)
                    waited = time.monotonic() - t0
                    if holder != seen:
                        seen, waited_for = holder, holder or waited_for
                        if on_wait:
                            on_wait(holder, waited)
                    if waited >= wait_s:
                        raise BoardBusy(holder, waited) from None
                    time.sleep(POLL_S)
        except BaseException:
            os.close(fd)
            raise
        previous = _read(fd)
        stale = previous if previous and not previous.get("released") else None
        now = time.time()
        me = {**self.owner, "runner_pid": os.getpid(), "runner_host": socket.gethostname(),
              "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "since_unix": now}
        _write(fd, me)
        self.fd = fd
        self.info = {"exclusive": True, "path": self.path, "wait_seconds": round(time.monotonic() - t0, 3),
                     "waited_for": waited_for, "broke_stale_lock_of": stale, "held_from_unix": now}
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.info["held_until_unix"] = time.time()
            _write(self.fd, {**(_read(self.fd) or {}), "released": True,
                             "released_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        except OSError:
            pass
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> BoardLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def no_lock_info(why: str) -> dict:
    return {"exclusive": False, "why": why}
