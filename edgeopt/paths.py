"""Where edgeopt keeps things on this machine: one place for every root.

| what | directory | override |
|---|---|---|
| config (device inventory) | ``$XDG_CONFIG_HOME/edgeopt`` or ``~/.config/edgeopt`` | ``EDGEOPT_CONFIG_DIR`` |
| data (results store, emulator state) | ``$XDG_DATA_HOME/edgeopt`` or ``~/.local/share/edgeopt`` | ``EDGEOPT_DATA_DIR`` |
| cache (converted artifacts, TVM tuning, pipeline builds, emulator sysroot, host facts) | ``$XDG_CACHE_HOME/edgeopt`` or ``~/.cache/edgeopt`` | ``EDGEOPT_CACHE_DIR`` |

Each cache user takes its own sub-directory through :func:`cache_subdir` (its name is listed in
:class:`CacheArea`), so ``rm -r`` of one never touches another.
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path

CONFIG_ENV = "EDGEOPT_CONFIG_DIR"
DATA_ENV = "EDGEOPT_DATA_DIR"
CACHE_ENV = "EDGEOPT_CACHE_DIR"


class CacheArea(str, Enum):
    ARTIFACTS = "artifacts"  # bench MODEL --backends: converted artifacts, keyed by model + plan + tools
    PIPELINE = "pipeline"  # pipeline run: built targets, keyed likewise
    WHEELS = "wheels"  # device wheels (a runtime-only TVM per architecture)
    EMULATE = "emulate"  # emulator sysroots and aarch64 wheels
    HOST = "host"  # facts measured once per machine (memory bandwidth)


def _xdg(env: str, xdg: str, default: str) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env]).expanduser()
    base = os.environ.get(xdg) or str(Path.home() / default)
    return Path(base).expanduser() / "edgeopt"


def config_dir() -> Path:
    """``$EDGEOPT_CONFIG_DIR`` or ``$XDG_CONFIG_HOME/edgeopt`` (``~/.config/edgeopt``)."""
    return _xdg(CONFIG_ENV, "XDG_CONFIG_HOME", ".config")


def data_dir() -> Path:
    """``$EDGEOPT_DATA_DIR`` or ``$XDG_DATA_HOME/edgeopt`` (``~/.local/share/edgeopt``)."""
    return _xdg(DATA_ENV, "XDG_DATA_HOME", ".local/share")


def cache_dir() -> Path:
    """``$EDGEOPT_CACHE_DIR`` or ``$XDG_CACHE_HOME/edgeopt`` (``~/.cache/edgeopt``)."""
    return _xdg(CACHE_ENV, "XDG_CACHE_HOME", ".cache")


def cache_subdir(area: CacheArea) -> Path:
    return cache_dir() / CacheArea(area).value


def backend_cache_subdir(backend: str, what: str) -> Path:
    """A backend's own cache area, ``<cache>/<backend>-<what>`` (TVM's MetaSchedule databases: ``tvm-tuning``)."""
    return cache_dir() / f"{backend}-{what}"


def default_devices_file() -> Path:
    return config_dir() / "devices.toml"


def default_results_db() -> Path:
    return data_dir() / "results.db"
