"""Shared test set-up: backend markers skip (with the reason) when the backend is not installed.

Area-specific fixtures live in ``tests/fixtures_*.py`` plugins listed in ``pytest_plugins``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# tests live in folders by area (cli, chain, backends/<name>, int8, remote, ...); a test module may use another
# area's model builders (``from test_search import sequence_tagger``), so every area folder is importable
for _area in sorted(p for p in (REPO / "tests").rglob("*") if p.is_dir() and not p.name.startswith((".", "__"))):
    if str(_area) not in sys.path:
        sys.path.append(str(_area))
os.environ.setdefault("EDGEOPT_DATA_DIR", str(REPO / ".pytest_cache" / "edgeopt-data"))

# marker -> the import names it needs; a backend's marker needs what its class declares (``requires``)
_OTHER_MARKERS = {"remote": ("paramiko",), "labgrid": ("labgrid",)}


def _marker_modules() -> dict[str, tuple[str, ...]]:
    from edgeopt.converters.registry import backend_classes

    backends = {b.value: cls.requires for b, cls in backend_classes().items() if cls.extra}
    return {**backends, **_OTHER_MARKERS}

# The Ctrl-C tests send SIGINT to an edgeopt child. A shell runs a background job (`make test &`, nohup) with
# SIGINT ignored, children inherit that, and Python then never raises KeyboardInterrupt: those tests would fail
# for how the suite was started, not for edgeopt. The suite's children get the default disposition back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = [
    m.stem for m in sorted((REPO / "tests").glob("fixtures_*.py"))
]


def pytest_collection_modifyitems(config, items):
    needs = _marker_modules()
    for item in items:
        for marker, modules in needs.items():
            missing = [m for m in modules if importlib.util.find_spec(m) is None]
            if item.get_closest_marker(marker) and missing:
                item.add_marker(pytest.mark.skip(reason=f"{missing[0]} not installed (pip install 'edgeopt[{marker}]')"))


# `make test-parallel` runs pytest-xdist's ``-n auto``: one worker per usable core, at most 4 (each worker may hold a
# TensorFlow conversion of ~1 GB, and the runtimes under test use 2 threads of their own);
# PYTEST_XDIST_AUTO_NUM_WORKERS, when set, is xdist's own count instead
MAX_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int | None:
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def run_cli(*args: str, env: dict | None = None, cwd: str | None = None, timeout: float = 600):
    """Run the real ``edgeopt`` command (as a user would) and return the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "edgeopt", *args],
        capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli


def run_cli_in_process(*args: str, env: dict | None = None, cwd: str | None = None, timeout: float = 600):
    """``edgeopt.cli.main`` called in this process, with what it writes to ``sys.stdout``/``sys.stderr`` captured:
    the same exit codes and messages as :func:`run_cli` in milliseconds instead of a Python start-up. For the
    checks of a command's verdict (usage errors, bad input, dry runs); a run that converts or measures, or that
    checks what reaches the process's real file descriptors, uses :func:`run_cli`."""
    import contextlib
    import io

    from edgeopt.cli import main, output

    out, err = io.StringIO(), io.StringIO()
    old_env, old_cwd, old_stream = dict(os.environ), os.getcwd(), output._json_stream[0]
    try:
        os.environ.update(env or {})
        if cwd:
            os.chdir(cwd)
        output._json_stream[0] = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
        output._json_stream[0] = old_stream
    return subprocess.CompletedProcess([sys.executable, "-m", "edgeopt", *args], code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli_in_process():
    return run_cli_in_process
