"""The consumer check on a device (``convert --verify-on``): the artifact's ``load.py`` run there.

Only the artifact's own files and the check samples are sent (not edgeopt's runner package), into a fresh run dir
of the device's work dir. ``load.py`` runs as ``python load.py --inputs … --outputs …`` through :data:`GUARD`,
which makes ``edgeopt`` and ``edgeopt_runtime`` unimportable first: on a device where edgeopt happens to be
installed (the loopback board of the tests is this machine's Python) an import of it still fails. Its outputs come
back and are compared with edgeopt's runner on this host under the rule of the device check (:func:`.verify.compare`:
per precision, one quantization step for int8 outputs, the error vs FP32 beyond it). A difference is exit 5 naming
the device and the output; a ``load.py`` that fails there is exit 5 with its last line.

A staged early-exit artifact's ``load.py`` runs its cascade there: the answer of the exit each sample left at is
compared like any output (a sample leaving elsewhere than here gives another answer, and differs).
The comparison and the manifest's entry are :func:`edgeopt.remote.verify.load_py_on_device`'s.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from edgeopt.consumer.writer import LOAD_PY
from edgeopt.errors import EdgeoptError, GateFailedError, RemoteError
from edgeopt.runtime.board_lock import EXIT_BOARD_BUSY

from . import board_lock, deploy
from .inventory import Device
from .probe import open_transport, python_argv, quick_facts

INPUTS, OUTPUTS = "inputs.npz", "load_outputs.npz"
BLOCKED = ("edgeopt", "edgeopt_runtime")
# Constant code run as ``python -c GUARD [--board-lock PATH WAIT OWNER] artifact/load.py ARGS``: first, with
# --board-lock, the board lock the runner takes for a measurement (an exclusive flock on PATH, waiting at most WAIT
# seconds, else the holder on stdout and exit EXIT_BOARD_BUSY; the holder's JSON written in the file as the runner
# writes it); then edgeopt blocked, then load.py as its own script.
GUARD = (
    "import os, runpy, sys\n"
    "if sys.argv[1:2] == ['--board-lock']:\n"
    "    import fcntl, json, socket, time\n"
    "    _lock, _wait, _owner = sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4])\n"
    "    del sys.argv[1:5]\n"
    "    _fd, _t0 = os.open(_lock, os.O_RDWR | os.O_CREAT, 0o644), time.monotonic()\n"
    "    while True:\n"
    "        try:\n"
    "            fcntl.flock(_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "            break\n"
    "        except BlockingIOError:\n"
    "            if time.monotonic() - _t0 >= _wait:\n"
    "                os.lseek(_fd, 0, 0)\n"
    "                try:\n"
    "                    _held = json.loads(os.read(_fd, 65536).decode('utf-8', 'replace'))\n"
    "                except ValueError:\n"
    "                    _held = None\n"
    "                print(json.dumps({'error': {'holder': _held}}))\n"
    f"                sys.exit({EXIT_BOARD_BUSY})\n"
    "            time.sleep(0.5)\n"
    "    _now = time.time()\n"
    "    _me = {**_owner, 'runner_pid': os.getpid(), 'runner_host': socket.gethostname(), 'since_unix': _now,\n"
    "           'since': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(_now))}\n"
    "    os.ftruncate(_fd, 0)\n"
    "    os.write(_fd, (json.dumps(_me) + '\\n').encode())\n"
    "    import atexit\n"
    "    atexit.register(lambda: (os.ftruncate(_fd, 0), os.lseek(_fd, 0, 0),\n"
    "                             os.write(_fd, (json.dumps({**_me, 'released': True}) + '\\n').encode())))\n"
    f"for name in {BLOCKED!r}:\n"
    "    sys.modules[name] = None\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)
TIMEOUT_S = 3600.0  # under qemu a runtime's import alone takes tens of seconds


def not_checked(artifact: Path) -> str | None:
    """Why ``load.py`` is not run on the device for ``artifact``, or None."""
    if not (artifact / LOAD_PY).exists():
        return "no load.py for a backend registered from outside edgeopt"
    return None


def how_run(dev: Device, device_arch: str | None) -> str:
    on = f"{dev.name}, {device_arch or '?'}{', emulated' if dev.emulated else ''}"
    return f"python {LOAD_PY} on {on}: the artifact's files only, edgeopt not importable there"


def stacked(samples) -> dict[str, np.ndarray]:
    """The check samples as ``load.py --inputs`` takes them: each input's samples stacked on a new first axis."""
    feeds = [samples.feed(i) for i in range(len(samples))]
    return {k: np.stack([np.asarray(f[k]) for f in feeds]) for k in feeds[0]}


def run_load_py(dev: Device, artifact: Path, inputs: Path, outputs: Path, *, install_hint: str | None = None,
                notify=None, timeout: float = TIMEOUT_S, wait: float = board_lock.DEFAULT_WAIT_S) -> dict:
    """Send ``artifact`` and ``inputs`` to ``dev``, run its ``load.py`` there (through :data:`GUARD`) and fetch its
    outputs to ``outputs``; returns what ``load.py`` said it applied. ``install_hint``: what to say when the
    runtime or numpy is missing there. The run holds the board lock, as a measurement does (waiting at most
    ``wait`` seconds for another holder, then exit 6 naming it)."""
    from edgeopt.artifact import verify_artifact

    from .device_run import fetch_atomic, with_work_dir

    listed = verify_artifact(artifact)
    manifest = json.loads((artifact / "manifest.json").read_text())
    tr = open_transport(dev, notify=notify)
    run_dir = deploy.new_run_dir()
    try:
        deploy.clean_stale(tr)
        facts = quick_facts(tr)
        tr.run(["mkdir", "-p", "--", tr.confine(run_dir)], timeout=60)
        deploy.write_lock(tr, run_dir)
        deploy.upload(tr, deploy.bundle_files(artifact, inputs=inputs, with_runtime=False), run_dir)
        deploy.verify_uploaded(tr, run_dir, listed)
        python = with_work_dir([facts["venv"]] if facts.get("venv") else python_argv(dev), tr, manifest)
        argv = [*python, "-c", GUARD, *board_lock.guard_args(tr, dev, wait), f"artifact/{LOAD_PY}", "--inputs",
                INPUTS, "--outputs", OUTPUTS]
        res = tr.run(["sh", "-c", deploy.RUN_WRAPPER, "edgeopt-run", tr.confine(run_dir), *argv], timeout=timeout)
        if res.rc == EXIT_BOARD_BUSY:
            raise board_lock.busy_error(dev, res.stdout, wait)
        _check_exit(dev, res, python, install_hint)
        fetch_atomic(tr, f"{run_dir}/{OUTPUTS}", outputs)
    finally:
        try:
            deploy.remove_run(tr, run_dir)
        except EdgeoptError:
            pass  # the connection is gone: the next run cleans this dir
        tr.close()
    said = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    return (json.loads(said[-1]) if said else {}).get("applied", {})


def _check_exit(dev: Device, res, python: list[str], install_hint: str | None = None) -> None:
    if res.rc == 0:
        return
    last = (res.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
    missing = re.search(r"No module named '([\w.]+)'", res.stderr)
    root = missing.group(1).split(".")[0] if missing else None
    if missing and root not in BLOCKED:
        raise RemoteError(f"{dev.name}: '{missing.group(1)}' is not installed for {' '.join(python)} on the device "
                          f"(consumer check: {LOAD_PY})", install_hint, details={"stderr": res.stderr[-2000:]})
    if root in BLOCKED or any(f"import of {name} halted" in res.stderr for name in BLOCKED):
        last = f"it imports edgeopt code, which a deployed device does not have ({last})"
    raise GateFailedError(f"consumer check on {dev.name}: {LOAD_PY} failed there (exit {res.rc}): {last}",
                          "nothing was written; the artifact does not load on the device through its runtime's "
                          "plain API", details={"stderr": res.stderr[-2000:]})
