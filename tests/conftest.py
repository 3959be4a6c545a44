"""Shared test set-up: backend markers skip (with the reason) when the backend is not installed.

Area-specific fixtures live in ``tests/fixtures_*.py`` plugins listed in ``pytest_plugins``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("EDGEOPT_DATA_DIR", str(REPO / ".pytest_cache" / "edgeopt-data"))

_BACKEND_MODULE = {"openvino": "nncf", "tflite": "ai_edge_litert", "tvm": "tvm", "remote": "paramiko",
                   "labgrid": "labgrid"}

pytest_plugins = [
    m.stem for m in sorted((REPO / "tests").glob("fixtures_*.py"))
]


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, module in _BACKEND_MODULE.items():
            if item.get_closest_marker(marker) and importlib.util.find_spec(module) is None:
                item.add_marker(pytest.mark.skip(reason=f"{module} not installed (pip install 'edgeopt[{marker}]')"))


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
