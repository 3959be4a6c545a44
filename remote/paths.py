"""Where edgeopt keeps the user's device inventory, emulator state and caches."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_ENV = "EDGEOPT_CONFIG_DIR"
DATA_ENV = "EDGEOPT_DATA_DIR"
CACHE_ENV = "EDGEOPT_CACHE_DIR"


def _xdg(env: str, xdg: str, default: str) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env]).expanduser()
    base = os.environ.get(xdg) or str(Path.home() / default)
    return Path(base).expanduser() / "edgeopt"


def config_dir() -> Path:
    """``$EDGEOPT_CONFIG_DIR`` or ``~/.config/edgeopt``."""
    return _xdg(CONFIG_ENV, "XDG_CONFIG_HOME", ".config")


def data_dir() -> Path:
    """``$EDGEOPT_DATA_DIR`` or ``~/.local/share/edgeopt``."""
    return _xdg(DATA_ENV, "XDG_DATA_HOME", ".local/share")


def cache_dir() -> Path:
    """``$EDGEOPT_CACHE_DIR`` or ``~/.cache/edgeopt`` (the emulator's sysroot and wheels)."""
    return _xdg(CACHE_ENV, "XDG_CACHE_HOME", ".cache")


def default_devices_file() -> Path:
    return config_dir() / "devices.toml"
